"""With `synproxy state` on both nodes (`pairwall-lab up --synproxy`), kill -9 of the master's
pairwalld under 100 long TCP connections: every connection carries on through the node that took
over. Each connection's handshake was completed by the dead master, which chose the initial sequence
number the client saw and the one the server saw; the new master can only carry the connection on by
shifting each end's numbers into the other's by the offsets that reached it at the splice. The
states of the drill's connections on the new master say they were spliced and learned from the
peer."""

from pairwall_lab import chaos, drill

from lab_support import assert_kept_every_session, assert_took_over_in_time, drilled_states

CONNECTIONS = 100


def test_kill_master_with_synproxy_keeps_sessions(make_lab, out_dir):
    lab = make_lab("builtin", synproxy=True)
    rep = drill.run(lab, connections=CONNECTIONS, duration=9.0, kill="master", kill_after=3.0, restore_after=3.0,
                    out_dir=out_dir)
    assert rep["synproxy"] is True
    assert_kept_every_session(rep, CONNECTIONS)
    assert_took_over_in_time(rep)

    drilled = drilled_states(lab, rep["new_master"])
    assert len(drilled) >= CONNECTIONS, (len(drilled), rep["new_master"])
    assert all(s.get("synproxy") == "spliced" for s in drilled), [s for s in drilled
                                                                    if s.get("synproxy") != "spliced"][:3]
    assert sum(1 for s in drilled if s.get("from_peer")) >= CONNECTIONS, drilled[:3]
    assert chaos.stray_check(lab) == []
