"""[failover] track_interfaces, as keepalived's track_interface with a weight: an uplink that holds
no VIP (a routed link to the provider) still decides which node should hold the group. The master's
uplink goes down: it is demoted, advertises that at once, and the backup takes the group within
an advertisement's trip, though the master's VIP interfaces all have carrier. Its uplink back, the
old master is a backup again without the demotion, and with preempt off the group stays put."""

import json
import time

ADVBASE_MS = 200


def test_tracked_uplink_down_moves_the_group(pair_factory):
    p = pair_factory(advbase_ms=ADVBASE_MS, daemon="pairwalld", sync=False, ipv6=False)
    # Each node's uplink is a cable to the switch namespace, pulled there.
    for node in ("a", "b"):
        p.ip(p.ns["sw"], "link", "add", f"{node}-up0", "type", "veth", "peer", "name", "up0", "netns", p.ns[node])
        p.ip(p.ns["sw"], "link", "set", f"{node}-up0", "up")
        p.ip(p.ns[node], "link", "set", "up0", "up")
        p.start(node, extra='track_interfaces = ["up0"]\n')
    p.wait_roles({"a": "master", "b": "backup"}, timeout=10)
    assert p.status("a")["links"] == {"lan0": True, "lan1": True, "up0": True}
    assert p.status("a")["demotion"] == 0

    pulled = time.monotonic()
    p.ip(p.ns["sw"], "link", "set", "a-up0", "down")
    p.wait_roles({"a": "backup", "b": "master"}, timeout=3)
    moved = time.monotonic() - pulled
    print(f"\nuplink pulled on the master: the backup master {1000 * moved:.0f} ms later (polling pairwallctl)")
    # One advertisement's trip, well inside the master-down interval the backup would otherwise wait.
    assert moved < 3 * ADVBASE_MS / 1000, moved
    status = p.status("a")
    assert status["demotion_reasons"] == ["tracked interface without carrier (+64)"], status
    assert status["links"]["up0"] is False
    ok, text = p.ctl("a", "status")
    assert ok and {"interface": "up0", "carrier": False, "tracked": True} in json.loads(text)["links"], text
    assert p.last_transition("b", "master")["cause"].startswith("master more demoted"), p.status("b")["transitions"]
    p.wait_for(lambda: p.holds_vips("b") and not p.holds_any_vip("a"), 3, what="the VIPs on b alone")

    p.ip(p.ns["sw"], "link", "set", "a-up0", "up")
    p.wait_for(lambda: p.status("a")["demotion"] == 0, 3, what="a's demotion gone with its uplink back")
    time.sleep(1)
    assert p.role("a") == "backup" and p.role("b") == "master"
