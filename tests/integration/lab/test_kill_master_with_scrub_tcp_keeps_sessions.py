"""With `scrub on $in_if all reassemble tcp` on both nodes (`pairwall-lab up --scrub-tcp`), kill -9 of the
master's pairwalld under 100 long TCP connections: every connection carries on through the node that took
over. The client and the server are Linux and send TCP timestamps by default, which the scrub shifts on the
way through by a random offset per end; the node that takes over can only carry on if it shifts them by the
offsets the dead master drew, which reached it with the states (an end that saw the other's TSval jump
backwards would drop the segments per PAWS, RFC 7323 5.3, and stall). The states of the drill's
connections on the new master say they are scrubbed and were learned from the peer."""

from pairwall_lab import chaos, drill

from lab_support import assert_kept_every_session, assert_took_over_in_time, drilled_states

CONNECTIONS = 100


def test_kill_master_with_scrub_tcp_keeps_sessions(make_lab, out_dir):
    lab = make_lab("builtin", scrub_tcp=True)
    rep = drill.run(lab, connections=CONNECTIONS, duration=9.0, kill="master", kill_after=3.0, restore_after=3.0,
                    out_dir=out_dir)
    assert rep["scrub_tcp"] is True
    assert_kept_every_session(rep, CONNECTIONS)
    assert_took_over_in_time(rep)

    drilled = drilled_states(lab, rep["new_master"])
    assert len(drilled) >= CONNECTIONS, (len(drilled), rep["new_master"])
    assert all(s.get("scrub_tcp") for s in drilled), [s for s in drilled if not s.get("scrub_tcp")][:3]
    assert sum(1 for s in drilled if s.get("from_peer")) >= CONNECTIONS, drilled[:3]
    assert chaos.stray_check(lab) == []
