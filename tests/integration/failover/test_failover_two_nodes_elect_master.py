"""Two nodes, advskew 0 and 254: the first is master and holds every VIP on both LANs, the second is
backup and holds none; the clients reach the VIPs at the master's MAC."""

from failover_net import CLIENTS, probe


def test_two_nodes_elect_master(pair_factory):
    # A node that has heard no master takes the group after 3 advbase + skew of its own, and with
    # preempt off keeps it: the better node must start within the skew's difference after the
    # worse one. At advskew 100 that was 78 ms, less than a loaded host (or a sanitizer's build)
    # takes to start a daemon; at 254, 198 ms.
    p = pair_factory(advbase_ms=200, skews=(0, 254))
    p.start("b")  # the worse node first: it must still yield to the better one
    p.start("a")
    # Both start demoted until their bulk sync ends; the bound is generous so that a loaded
    # machine does not fail a test about who wins (takeover timing has tests of its own).
    p.wait_roles({"a": "master", "b": "backup"}, timeout=10)
    assert p.holds_vips("a")
    assert not p.holds_any_vip("b")
    for lan, client in CLIENTS.items():
        for vip in p.vips(lan):
            probe(p, client, vip)
            p.wait_for(lambda: p.neighbour_mac(client, vip) == p.mac("a", lan), 5, what=f"{vip} at A")
    sa, sb = p.status("a"), p.status("b")
    assert sa["master_node_id"] == 1 and sb["master_node_id"] == 1
    assert 0 <= sb["last_heard_ms_ago"] < 3 * 200
    assert sb["counters"]["adverts_accepted"] > 0
    assert sum(v for k, v in sb["rejects"].items() if k != "duplicate") == 0
    # Stable: a few more seconds change nothing.
    n_a, n_b = len(sa["transitions"]), len(sb["transitions"])
    import time
    time.sleep(2)
    assert p.role("a") == "master" and p.role("b") == "backup"
    assert len(p.status("a")["transitions"]) == n_a and len(p.status("b")["transitions"]) == n_b
