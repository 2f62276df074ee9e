"""kill -9 of the master: the backup holds the VIPs within 3*advbase + skew + 100 ms, the LAN's
neighbour caches follow it, and the dead master's kernel lets go of the VIPs when their lease ends
(its process could not remove them)."""

import pytest

from failover_net import CLIENTS, LANS, monotonic_us, probe


def cache_all(p, node):
    """Every client resolves every VIP of its LAN; returns when all point at `node`."""
    for lan, client in CLIENTS.items():
        mac = p.mac(node, lan)
        for vip in p.vips(lan):
            probe(p, client, vip)
            p.wait_for(lambda: p.neighbour_mac(client, vip) == mac, 5, what=f"{client} caching {vip} at {node}")


@pytest.mark.parametrize("advbase_ms", [1000, 100])
def test_kill_master_backup_takes_over(pair_factory, report, advbase_ms):
    p = pair_factory(advbase_ms=advbase_ms)
    p.start("a")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=10 * advbase_ms / 1000 + 5)
    assert p.holds_vips("a") and not p.holds_any_vip("b")
    cache_all(p, "a")

    t_kill = monotonic_us()
    p.kill("a")
    bound_ms = 3 * advbase_ms + 100 / 256 * advbase_ms + 100
    p.wait_roles({"b": "master"}, timeout=bound_ms / 1000 + 5)
    tr = p.last_transition("b", "master")
    takeover_ms = (tr["at_us"] - t_kill) / 1000
    assert tr["cause"] == "master down"
    assert p.holds_vips("b")

    # The neighbours' caches move to B by its gratuitous ARP / unsolicited NA: no probe needed.
    macs = {lan: p.mac("b", lan) for lan in LANS}
    p.wait_for(lambda: all(p.neighbour_mac(c, v) == macs[lan] for lan, c in CLIENTS.items() for v in p.vips(lan)),
               5, what="client caches at B")
    caches_ms = (monotonic_us() - t_kill) / 1000

    # A's process is gone but its kernel still had the VIPs: the lease takes them away.
    lease_s = max(3, -(-4 * advbase_ms // 1000))
    p.wait_for(lambda: not p.holds_any_vip("a"), lease_s + 3, step=0.1, what="A's VIP lease to expire")
    expired_ms = (monotonic_us() - t_kill) / 1000

    # Now a neighbour that resolves a VIP from scratch can only find B.
    for lan, client in CLIENTS.items():
        p.ip(p.ns[client], "neigh", "flush", "dev", "eth0")
        for vip in p.vips(lan):
            probe(p, client, vip)
            p.wait_for(lambda: p.neighbour_mac(client, vip) == macs[lan], 5, what=f"{client} resolving {vip}")

    report(test="kill_master", advbase_ms=advbase_ms, advskew_backup=100, takeover_ms=round(takeover_ms, 1),
           bound_ms=round(bound_ms, 1), client_caches_moved_ms_upper=round(caches_ms, 1),
           old_master_vips_gone_ms_upper=round(expired_ms, 1))
    assert takeover_ms <= bound_ms
