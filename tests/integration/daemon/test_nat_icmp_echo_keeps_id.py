"""ICMP and ICMPv6 echo through nat: the server receives the client's echo requests from the
firewall's server-side address with the client's echo identifier (no other state uses it, so nat
keeps it), the client gets its replies back, and the state shows both keys: the identifier as the
source port, the echo request's type as the destination's, as pf keys ICMP."""

import pytest

from daemon_net import CLIENT4, CLIENT6, FW_OUT4, FW_OUT6, NAT_TO_FW_OUT, SERVER4, SERVER6, settle

RULES = f"""\
in_if = "f0"
out_if = "f1"
{NAT_TO_FW_OUT}block all
pass in on $in_if inet proto icmp icmp-type echoreq
pass out on $out_if inet proto icmp icmp-type echoreq
pass in on $in_if inet6 proto icmp6 icmp6-type echoreq
pass out on $out_if inet6 proto icmp6 icmp6-type echoreq
"""

ENDS = {4: (CLIENT4, FW_OUT4, SERVER4, "icmp"), 6: (CLIENT6, FW_OUT6, SERVER6, "icmp6")}
ECHO_REQUEST = {4: 8, 6: 128}
COUNT = 3
IDENT = 0x5A17


@pytest.mark.parametrize("family", [4, 6])
def test_nat_icmp_echo_keeps_id(lan, daemon_factory, family):
    client, fw_out, server, proto = ENDS[family]
    fw = daemon_factory(rules=RULES)

    watch = lan.watch_echo(family, count=COUNT, timeout=COUNT * 2 + 2)
    r = lan.ping(family, count=COUNT, ident=IDENT)
    seen = watch.result()
    assert [(q["src"], q["id"]) for q in seen] == [(fw_out, IDENT)] * COUNT, \
        f"echo requests at the server: {seen}; client: {r}"
    assert [q["seq"] for q in seen] == list(range(1, COUNT + 1)), seen
    assert r == {"sent": COUNT, "received": COUNT}, f"replies did not come back: {r}; reasons {fw.reasons()}"

    settle()
    states = fw.json("states", "proto", proto)["states"]
    assert len(states) == 1, states
    s = states[0]
    echo = ECHO_REQUEST[family]
    assert s["src"] == {"address": client, "port": IDENT} and s["dst"] == {"address": server, "port": echo}, s
    assert s.get("wire_src") == {"address": fw_out, "port": IDENT}, f"the state does not show the translation: {s}"
    assert s.get("wire_dst") == {"address": server, "port": echo}, s
    assert int(s["packets_out"]) == COUNT and int(s["packets_in"]) == COUNT, s
