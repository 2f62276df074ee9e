"""rdr on the client-side interface: the client dials an address and port nobody serves, the
firewall redirects the flow to the server on another port. The server sees the client's own
address and port (rdr leaves the source alone), the client's answers come from the address and
port it dialled, and the filter rules judge the redirected destination: they pass only the
server's address and port, so nothing would pass if they saw the dialled one. A port no rdr rule
names gets nothing. TCP and UDP, IPv4 and IPv6."""

import pytest

from daemon_net import CLIENT4, CLIENT6, SERVER4, SERVER6, WHOAMI_TCP, WHOAMI_UDP, settle

# Addresses on the server's LAN that no host owns: the firewall routes them out towards the server.
PUBLIC4, PUBLIC6 = "10.77.2.80", "fd77:2::80"
PUBLIC_TCP, PUBLIC_UDP, UNMAPPED = 80, 53, 81

RULES = f"""\
in_if = "f0"
out_if = "f1"
rdr on $in_if proto tcp to {PUBLIC4} port {PUBLIC_TCP} -> {SERVER4} port {WHOAMI_TCP}
rdr on $in_if proto udp to {PUBLIC4} port {PUBLIC_UDP} -> {SERVER4} port {WHOAMI_UDP}
rdr on $in_if proto tcp to {PUBLIC6} port {PUBLIC_TCP} -> {SERVER6} port {WHOAMI_TCP}
rdr on $in_if proto udp to {PUBLIC6} port {PUBLIC_UDP} -> {SERVER6} port {WHOAMI_UDP}
block all
pass in on $in_if proto tcp to {{ {SERVER4} {SERVER6} }} port {WHOAMI_TCP}
pass out on $out_if proto tcp to {{ {SERVER4} {SERVER6} }} port {WHOAMI_TCP}
pass in on $in_if proto udp to {{ {SERVER4} {SERVER6} }} port {WHOAMI_UDP}
pass out on $out_if proto udp to {{ {SERVER4} {SERVER6} }} port {WHOAMI_UDP}
"""

ENDS = {4: (CLIENT4, PUBLIC4, SERVER4), 6: (CLIENT6, PUBLIC6, SERVER6)}


@pytest.mark.parametrize("proto", ["tcp", "udp"])
@pytest.mark.parametrize("family", [4, 6])
def test_rdr_redirects_to_internal_port(lan, daemon_factory, family, proto):
    client, public, server = ENDS[family]
    udp = proto == "udp"
    dialled, internal = (PUBLIC_UDP, WHOAMI_UDP) if udp else (PUBLIC_TCP, WHOAMI_TCP)
    fw = daemon_factory(rules=RULES)
    lan.whoami()

    r = lan.ask(public, dialled, udp=udp)
    assert r["result"] == "ok", f"no answer through rdr: {r}; reasons {fw.reasons()}"
    assert r["reply_from"] == {"address": public, "port": dialled}, f"the reply is not from the dialled end: {r}"
    assert r["local"]["address"] == client, r
    assert r["seen"] == r["local"], f"rdr changed the source the server saw: {r}"

    before = fw.reasons()["rule_block"]
    unmapped = lan.ask(public, UNMAPPED, udp=udp, timeout=1.0)
    assert unmapped["result"] == "timeout", unmapped

    settle()
    assert fw.reasons()["rule_block"] > before, "the port no rdr names was not blocked by rule"
    states = fw.json("states", "proto", proto)["states"]
    assert len(states) == 1, states
    s = states[0]
    assert s["src"] == r["local"] and s["dst"] == {"address": public, "port": dialled}, s
    assert s.get("wire_src") == r["local"], s
    assert s.get("wire_dst") == {"address": server, "port": internal}, f"the state does not show the redirect: {s}"
