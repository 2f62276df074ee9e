"""With `modulate state` on both nodes (`pairwall-lab up --modulate`), kill -9 of the master's pairwalld
under 100 long TCP connections: every connection carries on through the node that took over. It can
only do so by shifting each end's sequence numbers by the offsets the dead master drew, which reached
it with the states (an end that saw its peer's numbers jump would drop the segments and stall). The
states of the drill's connections on the new master say they are modulated and were learned from the
peer."""

from pairwall_lab import chaos, drill

from lab_support import assert_kept_every_session, assert_took_over_in_time, drilled_states

CONNECTIONS = 100


def test_kill_master_with_modulate_keeps_sessions(make_lab, out_dir):
    lab = make_lab("builtin", modulate=True)
    rep = drill.run(lab, connections=CONNECTIONS, duration=9.0, kill="master", kill_after=3.0, restore_after=3.0,
                    out_dir=out_dir)
    assert rep["modulate"] is True
    assert_kept_every_session(rep, CONNECTIONS)
    assert_took_over_in_time(rep)

    drilled = drilled_states(lab, rep["new_master"])
    assert len(drilled) >= CONNECTIONS, (len(drilled), rep["new_master"])
    assert all(s.get("modulated") for s in drilled), [s for s in drilled if not s.get("modulated")][:3]
    assert sum(1 for s in drilled if s.get("from_peer")) >= CONNECTIONS, drilled[:3]
    assert chaos.stray_check(lab) == []
