"""kill -9 of the master's pairwalld (its VIPs stay in its kernel): the backup takes over within
3·advbase + skew + 100 ms and all 200 TCP connections carry on both ways, without reset or reconnect."""

from pairwall_lab import chaos, drill

from lab_support import assert_kept_every_session, assert_took_over_in_time


def test_kill_master_keeps_tcp_sessions(make_lab, out_dir):
    lab = make_lab("builtin")
    rep = drill.run(lab, connections=200, duration=10.0, kill="master", kill_after=2.5, restore_after=3.0,
                    out_dir=out_dir)
    assert_kept_every_session(rep, 200)
    assert_took_over_in_time(rep)
    assert rep["states_a"] is not None and rep["states_b"] is not None
    assert min(rep["states_a"], rep["states_b"]) >= 200, rep
    assert rep["pair_settled"], "the restarted node did not come back as backup with its table"
    assert chaos.stray_check(lab) == []
