"""rdr as a port forward: the client dials the firewall's own address on a port and the firewall
forwards the flow to the server on another port, as pf does with `rdr on $ext_if ... to ($ext_if)`.
The server sees the client's own address and port, the answer comes from the firewall's address
and the dialled port, and the state shows both keys. TCP and UDP, IPv4 and IPv6."""

import pytest

from daemon_net import CLIENT4, CLIENT6, FW_IN4, FW_IN6, SERVER4, SERVER6, WHOAMI_TCP, WHOAMI_UDP, settle

FORWARDED_TCP, FORWARDED_UDP = 80, 53

RULES = f"""\
in_if = "f0"
out_if = "f1"
rdr on $in_if proto tcp to {FW_IN4} port {FORWARDED_TCP} -> {SERVER4} port {WHOAMI_TCP}
rdr on $in_if proto udp to {FW_IN4} port {FORWARDED_UDP} -> {SERVER4} port {WHOAMI_UDP}
rdr on $in_if proto tcp to {FW_IN6} port {FORWARDED_TCP} -> {SERVER6} port {WHOAMI_TCP}
rdr on $in_if proto udp to {FW_IN6} port {FORWARDED_UDP} -> {SERVER6} port {WHOAMI_UDP}
block all
pass in on $in_if proto tcp to {{ {SERVER4} {SERVER6} }} port {WHOAMI_TCP}
pass out on $out_if proto tcp to {{ {SERVER4} {SERVER6} }} port {WHOAMI_TCP}
pass in on $in_if proto udp to {{ {SERVER4} {SERVER6} }} port {WHOAMI_UDP}
pass out on $out_if proto udp to {{ {SERVER4} {SERVER6} }} port {WHOAMI_UDP}
"""

ENDS = {4: (CLIENT4, FW_IN4, SERVER4), 6: (CLIENT6, FW_IN6, SERVER6)}


@pytest.mark.parametrize("proto", ["tcp", "udp"])
@pytest.mark.parametrize("family", [4, 6])
def test_rdr_port_forward_to_firewall_address(lan, daemon_factory, family, proto):
    client, fw_in, server = ENDS[family]
    udp = proto == "udp"
    dialled, internal = (FORWARDED_UDP, WHOAMI_UDP) if udp else (FORWARDED_TCP, WHOAMI_TCP)
    fw = daemon_factory(rules=RULES)
    lan.whoami()

    r = lan.ask(fw_in, dialled, udp=udp)
    assert r["result"] == "ok", f"no answer through the port forward: {r}; reasons {fw.reasons()}"
    assert r["reply_from"] == {"address": fw_in, "port": dialled}, f"the reply is not from the dialled end: {r}"
    assert r["seen"] == r["local"] and r["local"]["address"] == client, f"rdr changed the source: {r}"

    settle()
    states = fw.json("states", "proto", proto)["states"]
    assert len(states) == 1, states
    s = states[0]
    assert s["src"] == r["local"] and s["dst"] == {"address": fw_in, "port": dialled}, s
    assert s.get("wire_src") == r["local"], s
    assert s.get("wire_dst") == {"address": server, "port": internal}, f"the state does not show the redirect: {s}"
