"""A planned handover under load (`pairwall-lab drill --kill handover`): the master's administrative
demotion is raised, as an operator raises CARP's carpdemote before maintenance. Nothing has failed,
so nothing waits for a master-down interval: the master advertises its demotion at once, the backup
takes the group on that advertisement, and the traffic moves within a fraction of one advbase with
every connection kept and no probe lost. Lowered again, the demotion leaves the old master backup."""

from pairwall_lab import chaos, drill

from lab_support import assert_kept_every_session

# Slow advertisements, so that a handover that waited for the master's next one (up to an advbase)
# instead of taking the one its demotion sends at once would show.
ADVBASE_MS = 1000


def test_planned_handover_loses_nothing(make_lab, out_dir):
    lab = make_lab("builtin", advbase_ms=ADVBASE_MS)
    rep = drill.run(lab, connections=200, duration=8.0, kill="handover", kill_after=2.5, restore_after=2.0,
                    out_dir=out_dir)
    assert_kept_every_session(rep, 200)
    assert rep["new_master"] == "fwB" and rep["roles_after"] == {"fwA": "backup", "fwB": "master"}, rep
    # A failure's takeover waits out 3 advbase; a handover waits for one advertisement's trip.
    assert rep["failover_ms"] is not None and rep["failover_ms"] < ADVBASE_MS / 10, rep
    assert rep["ping_lost"] == 0 and rep["udp_lost"] == 0, rep
    assert chaos.stray_check(lab) == []
