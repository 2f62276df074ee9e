"""binat maps the client one to one onto an external address, both ways, ports unchanged: the
client's connection reaches the server from the external address and the client's own port; the
server's connection to the external address reaches the client, which sees the server's real
address, and the answer comes back from the external address. The filter rules judge the mapped
packets (out on the server side only from the external address, in on it only to the client).
IPv4 and IPv6."""

import pytest

from daemon_net import CLIENT4, CLIENT6, SERVER4, SERVER6, WHOAMI_TCP, settle

# The client's external addresses, in a block of their own that the server routes via the firewall.
EXT4, EXT6 = "10.77.9.2", "fd77:9::2"

RULES = f"""\
in_if = "f0"
out_if = "f1"
binat on $out_if from {CLIENT4} to any -> {EXT4}
binat on $out_if from {CLIENT6} to any -> {EXT6}
block all
pass in on $in_if proto tcp from {{ {CLIENT4} {CLIENT6} }} to port {WHOAMI_TCP}
pass out on $out_if proto tcp from {{ {EXT4} {EXT6} }} to port {WHOAMI_TCP}
pass in on $out_if proto tcp to {{ {CLIENT4} {CLIENT6} }} port {WHOAMI_TCP}
pass out on $in_if proto tcp to {{ {CLIENT4} {CLIENT6} }} port {WHOAMI_TCP}
"""

ENDS = {4: (CLIENT4, EXT4, SERVER4), 6: (CLIENT6, EXT6, SERVER6)}


@pytest.mark.parametrize("family", [4, 6])
def test_binat_maps_both_directions(lan, daemon_factory, family):
    client, ext, server = ENDS[family]
    # The server reaches the external block through the firewall. The firewall routes it out
    # towards the client: the kernel picks the route before the engine sees the packet in FORWARD.
    lan.server.route("10.77.9.0/24", "10.77.2.1")
    lan.server.route("fd77:9::/64", "fd77:2::1")
    lan.fw.ip("route", "add", "10.77.9.0/24", "dev", "f0")
    lan.fw.ip("-6", "route", "add", "fd77:9::/64", "dev", "f0")
    fw = daemon_factory(rules=RULES)
    lan.whoami()
    lan.whoami(lan.client)

    out = lan.ask(server, WHOAMI_TCP)
    assert out["result"] == "ok", f"client -> server through binat: {out}; reasons {fw.reasons()}"
    assert out["seen"] == {"address": ext, "port": out["local"]["port"]}, f"not mapped 1:1, port kept: {out}"

    back = lan.ask(ext, WHOAMI_TCP, src="server")
    assert back["result"] == "ok", f"server -> external address through binat: {back}; reasons {fw.reasons()}"
    assert back["reply_from"] == {"address": ext, "port": WHOAMI_TCP}, back
    assert back["seen"] == back["local"] and back["local"]["address"] == server, back

    settle()
    states = {s["src"]["address"]: s for s in fw.json("states", "proto", "tcp")["states"]}
    assert set(states) == {client, server}, states
    s = states[client]
    assert s["src"] == out["local"] and s["dst"] == {"address": server, "port": WHOAMI_TCP}, s
    assert s.get("wire_src") == out["seen"] and s.get("wire_dst") == s["dst"], s
    s = states[server]
    assert s["src"] == back["local"] and s["dst"] == {"address": ext, "port": WHOAMI_TCP}, s
    assert s.get("wire_src") == s["src"] and s.get("wire_dst") == {"address": client, "port": WHOAMI_TCP}, s
