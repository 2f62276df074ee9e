"""kill -9 of the master's pairwalld, then what systemd runs after it (the unit's ExecStopPost,
`pairwalld --cleanup`): told that the node left, the backup takes over before it could have noticed
the master missing, and all 200 TCP connections carry on both ways. Unaided, a backup gives the
master up 3·advbase + skew after its last advertisement, which may have left just before the kill:
2·advbase (400 ms here) after the kill at the earliest."""

from pairwall_lab import chaos, drill

from lab_support import ADVBASE_MS, assert_kept_every_session, assert_took_over_in_time


def test_crash_under_supervision_hands_over_at_once(make_lab, out_dir):
    lab = make_lab("builtin")
    rep = drill.run(lab, connections=200, duration=10.0, kill="crash", kill_after=2.5, restore_after=3.0,
                    out_dir=out_dir)
    assert_kept_every_session(rep, 200)
    assert_took_over_in_time(rep)
    assert rep["failover_ms"] < 2 * ADVBASE_MS, f"failover {rep['failover_ms']} ms: the backup waited the master out"
    assert rep["pair_settled"], "the restarted node did not come back as backup with its table"
    assert chaos.stray_check(lab) == []
