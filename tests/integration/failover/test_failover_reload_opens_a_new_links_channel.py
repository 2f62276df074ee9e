"""A new VLAN on a running pair: the operator gives both nodes an interface on a new LAN, adds its
VIP to [failover] vips and reloads them. The group advertises and listens there from then on, as
carp(4) does on a carp interface made on a new carpdev, and keepalived on a new instance's
interface after its reload, with no restart that would move the group. The master holds the new
VIP and answers ARP for it there; both nodes watch the link's carrier; with the advertisements
on lan0 and lan1 dropped on their way into the backup, the new LAN alone keeps it a backup. A later
reload that drops the VIP closes the channel: the VIP leaves, the link is no longer watched."""

import json
import time

ADVBASE_MS = 200
LAN2 = "10.35.0"
NEW_VIP = f'{{ interface = "lan2", address = "{LAN2}.1/24" }}'


def add_lan2(p):
    """A bridge in the switch namespace, a port on it for each node (lan2) and for a client (c2)."""
    sw = p.ns["sw"]
    p.ip(sw, "link", "add", "br2", "type", "bridge", "forward_delay", "0")
    p.ip(sw, "link", "set", "br2", "up")
    for node, host in (("a", 2), ("b", 3)):
        p.ip(sw, "link", "add", f"{node}-lan2", "type", "veth", "peer", "name", "lan2", "netns", p.ns[node])
        p.ip(sw, "link", "set", f"{node}-lan2", "master", "br2", "up")
        p.ip(p.ns[node], "link", "set", "lan2", "up")
        p.ip(p.ns[node], "addr", "add", f"{LAN2}.{host}/24", "dev", "lan2")
    # The client lives in c0's namespace, on an interface of its own.
    p.ip(sw, "link", "add", "c2-lan2", "type", "veth", "peer", "name", "eth2", "netns", p.ns["c0"])
    p.ip(sw, "link", "set", "c2-lan2", "master", "br2", "up")
    p.ip(p.ns["c0"], "link", "set", "eth2", "up")
    p.ip(p.ns["c0"], "addr", "add", f"{LAN2}.10/24", "dev", "eth2")


def carrier(p, node):
    return p.status(node)["links"]


def test_reload_opens_and_closes_a_new_links_channel(pair_factory):
    p = pair_factory(advbase_ms=ADVBASE_MS, daemon="pairwalld", sync=False, ipv6=False)
    p.start("a")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=10)
    add_lan2(p)

    adding = [("vips = [ ", f"vips = [ {NEW_VIP}, ")]
    for node in ("a", "b"):
        p.reload_with(node, adding)
        # The channel opens on the failover thread, after the reload's log line.
        p.wait_for(lambda: "advertisements now on lan2 (IPv4)" in p.log(node), 2, what=f"{node}'s channel on lan2")
        assert "which a reload does not take" not in p.log(node), p.log(node)
    p.wait_for(lambda: f"{LAN2}.1" in p.addresses("a", "lan2"), 2, what="the new VIP on a")
    assert f"{LAN2}.1" not in p.addresses("b", "lan2")
    for node in ("a", "b"):
        assert carrier(p, node) == {"lan0": True, "lan1": True, "lan2": True}, p.log(node)
    p.nsexec("c0", "ping", "-c", "1", "-W", "2", f"{LAN2}.1")
    assert p.neighbour_mac("c0", f"{LAN2}.1") == p.mac("a", "lan2")

    # The backup hears the master on lan2 alone: were the new channel deaf or mute, it would take
    # the group after three advertisements missed (678 ms).
    drops = [["-i", lan, "-p", "udp", "--dport", "8112", "-j", "DROP"] for lan in ("lan0", "lan1")]
    for rule in drops:
        p.nsexec("b", "iptables", "-I", "INPUT", *rule)
    heard_before = p.status("b")["counters"]["adverts_accepted"]
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        assert p.role("a") == "master" and p.role("b") == "backup", (p.log("a"), p.log("b"))
        time.sleep(0.05)
    assert p.status("b")["counters"]["adverts_accepted"] > heard_before + 5
    assert p.last_transition("b", "master") is None
    for rule in drops:
        p.nsexec("b", "iptables", "-D", "INPUT", *rule)

    # Dropped again: the VIP leaves the master, the link leaves both nodes' watch.
    for node in ("a", "b"):
        p.reload_with(node, [(f"{NEW_VIP}, ", "")])
        p.wait_for(lambda: "advertisements no longer on lan2 (IPv4)" in p.log(node), 2,
                   what=f"{node}'s channel on lan2 closed")
    p.wait_for(lambda: f"{LAN2}.1" not in p.addresses("a", "lan2"), 2, what="the VIP gone from a")
    for node in ("a", "b"):
        p.wait_for(lambda: carrier(p, node) == {"lan0": True, "lan1": True}, 2,
                   what=lambda: f"{node} watching lan0 and lan1 alone: {carrier(p, node)}")
    ok, text = p.ctl("a", "status")
    assert ok and json.loads(text)["demotion"] == 0, text
    assert p.role("a") == "master" and p.role("b") == "backup"
