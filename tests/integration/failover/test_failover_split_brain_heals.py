"""The advertisement path is cut both ways for 3 s (both nodes become master), then restored: exactly
one master remains, within one advertisement interval, and it is the better node."""

import time

from failover_net import PORT


def drop_adverts(p, node, on):
    op = "-I" if on else "-D"
    for tool in ("iptables", "ip6tables"):
        p.nsexec(node, tool, op, "INPUT", "-p", "udp", "--dport", str(PORT), "-j", "DROP")


def test_split_brain_heals(pair_factory, report):
    advbase_ms = 200
    p = pair_factory(advbase_ms=advbase_ms)
    p.start("a")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=5)

    drop_adverts(p, "a", True)
    drop_adverts(p, "b", True)
    p.wait_roles({"a": "master", "b": "master"}, timeout=3)
    time.sleep(3 - 0.8)
    assert p.role("a") == "master" and p.role("b") == "master"
    assert p.holds_vips("a") and p.holds_vips("b")

    t_heal = time.monotonic()
    drop_adverts(p, "a", False)
    drop_adverts(p, "b", False)
    p.wait_roles({"a": "master", "b": "backup"}, timeout=2)
    healed_ms = (p.last_transition("b", "backup")["at_us"] / 1e6 - t_heal) * 1000
    report(test="split_brain_heal", advbase_ms=advbase_ms, healed_ms=round(healed_ms, 1))
    assert healed_ms <= advbase_ms + 50  # one of A's intervals (advskew 0), plus delivery
    assert not p.holds_any_vip("b")
    # A heard B's farewell as master and re-announced, so the LAN's caches come back to A.
    assert p.status("a")["counters"]["worse_masters"] >= 1
    time.sleep(2)
    assert p.role("a") == "master" and p.role("b") == "backup"
