"""keepalived mode: keepalived tells pairwalld a role only when it changes, so a pairwalld restarted
under a running keepalived takes its role from the VIPs, which keepalived holds only as master:
all of them on their interfaces, MASTER; none, BACKUP; some, it waits for keepalived's word."""

from failover_net import LANS, vip4


def test_keepalived_mode_takes_the_role_from_the_vips_at_start(pair_factory):
    p = pair_factory(advbase_ms=100, ipv6=False, daemon="pairwalld", sync=False)
    for lan in LANS:  # as keepalived, master on a, would have them
        p.ip(p.ns["a"], "addr", "add", f"{vip4(lan)}/24", "dev", lan)
    p.ip(p.ns["b"], "addr", "add", f"{vip4('lan0')}/24", "dev", "lan0")  # one of b's two
    for node in ("a", "b"):
        p.start(node, driver="keepalived")
    p.wait_roles({"a": "master"}, timeout=5)
    assert p.role("b") == "init", "one VIP of two says nothing"
    p.ip(p.ns["b"], "addr", "del", f"{vip4('lan0')}/24", "dev", "lan0")
    p.kill("b")
    p.start("b", driver="keepalived")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=5)
