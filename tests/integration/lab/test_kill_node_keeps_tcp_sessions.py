"""A power loss of the master (pairwalld killed, every link of its namespace down): the backup takes
over within 3·advbase + skew + 100 ms and all 200 TCP connections survive."""

from pairwall_lab import chaos, drill

from lab_support import assert_kept_every_session, assert_took_over_in_time


def test_kill_node_keeps_tcp_sessions(make_lab, out_dir):
    lab = make_lab("builtin")
    rep = drill.run(lab, connections=200, duration=10.0, kill="node", kill_after=2.5, restore_after=3.0,
                    out_dir=out_dir)
    assert_kept_every_session(rep, 200)
    assert_took_over_in_time(rep)
    assert rep["pair_settled"], "the node did not rejoin as backup after its links came back"
    assert chaos.stray_check(lab) == []
