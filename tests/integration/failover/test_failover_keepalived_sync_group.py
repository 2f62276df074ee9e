"""keepalived mode with the shipped keepalived-sync-group.conf: the VIPs as two instances of one
vrrp_sync_group (one per link), the notify script following the group (-g), whose instances' lines
it leaves alone (keepalived's later sources leave out an instance's line when the group made the
change; 2.2.7 writes both). Each change of the group, both ways and back again, and the fault of
one link's instance, which takes the other with it, reaches pairwalld; the health check demotes
through the group (sync_group_tracking_weight)."""

from failover_keepalived import start_keepalived, wait_settled


def test_keepalived_sync_group_changes_reach_pairwalld(pair_factory):
    p = pair_factory(advbase_ms=100, ipv6=False, daemon="pairwalld", sync=False)
    for node in ("a", "b"):
        p.start(node, driver="keepalived")
    for node in ("a", "b"):
        start_keepalived(p, node, sync_group=True)
    first, second = wait_settled(p)
    assert "ignoring tracked script" not in (p.dir / f"keepalived-{first}.log").read_text()

    def hand_over(master, backup):
        assert p.ctl(master, "demote 10")[0]
        p.wait_for(lambda: p.holds_vips(backup) and not p.holds_any_vip(master), 6, step=0.01,
                   what=f"the group moving from {master} to {backup}")
        p.wait_roles({backup: "master", master: "backup"}, timeout=5)

    # Demoted, the master's health check fails and the group moves; then back the other way.
    hand_over(first, second)
    assert p.ctl(first, "promote 10")[0]
    hand_over(second, first)

    # A link of the master fails: its instance there goes FAULT and takes the group with it.
    p.ip(p.ns[first], "link", "set", "lan1", "down")
    p.wait_roles({first: "fault", second: "master"}, timeout=5)
