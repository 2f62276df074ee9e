"""A VIP interface of the master loses carrier: the whole group (both LANs) moves to the backup, never
master on one side and backup on the other. Carrier back: without preempt it stays there."""

import time

from failover_net import CLIENTS, LANS, monotonic_us


def test_master_link_down_moves_whole_group(pair_factory, report):
    p = pair_factory(advbase_ms=200, preempt=False)
    p.start("a")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=5)

    t0 = monotonic_us()
    p.link("a", "lan1", "down")  # cable pulled at the switch: A's lan1 has no carrier
    p.wait_roles({"a": "backup", "b": "master"}, timeout=3)
    took_ms = (p.last_transition("b", "master")["at_us"] - t0) / 1000
    sa = p.status("a")
    assert sa["links"] == {"lan0": True, "lan1": False}
    assert any("carrier" in r for r in sa["demotion_reasons"])
    assert p.last_transition("b", "master")["cause"].startswith("master more demoted")
    # The group moved whole: B holds both LANs' VIPs, A none (not even on its healthy lan0).
    p.wait_for(lambda: p.holds_vips("b") and not p.holds_any_vip("a"), 3, what="VIPs on B only")
    macs = {lan: p.mac("b", lan) for lan in LANS}
    p.wait_for(lambda: p.neighbour_mac(CLIENTS["lan0"], "10.31.0.1") in (None, macs["lan0"]), 3,
               what="lan0 client at B")
    report(test="master_link_down", advbase_ms=200, group_moved_ms=round(took_ms, 1))
    assert took_ms < 200

    p.link("a", "lan1", "up")
    p.wait_for(lambda: p.status("a")["demotion"] == 0, 5, what="A's carrier demotion cleared")
    time.sleep(1)
    assert p.role("a") == "backup" and p.role("b") == "master"  # preempt off
