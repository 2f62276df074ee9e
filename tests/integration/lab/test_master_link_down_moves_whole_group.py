"""The master loses carrier on one VIP interface (outside cable pulled): the whole group — both VIPs,
inside and outside — moves to the backup, never one side each, and the connections survive."""

from pairwall_lab import chaos, drill, topology

from lab_support import assert_kept_every_session, assert_took_over_in_time


def test_master_link_down_moves_whole_group(make_lab, out_dir):
    lab = make_lab("builtin")
    seen = []

    def watch(msg):
        if msg.startswith("killed"):
            seen.append(topology.vip_holders(lab.prefix))

    rep = drill.run(lab, connections=50, duration=9.0, kill="link", kill_after=2.0, restore_after=3.0,
                    out_dir=out_dir, progress=watch)
    assert_took_over_in_time(rep)
    assert_kept_every_session(rep, 50)
    held = topology.vip_holders(lab.prefix)
    assert sorted(held[rep["new_master"]]) == sorted([topology.VIP_IN, topology.VIP_OUT]), held
    assert held[rep["old_master"]] == [], held
    assert chaos.stray_check(lab) == []
