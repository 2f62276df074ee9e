"""The out pass judges a packet after nat: the only rule that passes TCP out towards the server
names the firewall's own server-side address as the source, so a connection passes only when it
was translated. The client reaches port 8090 through nat; port 8081, exempted by the `no nat`
rule listed before the nat rule (first match wins), leaves untranslated and is blocked on the out
pass — no state, counted as rule_block. IPv4 and IPv6."""

import pytest

from daemon_net import (BLOCKED, CLIENT4, CLIENT6, FW_OUT4, FW_OUT6, NAT_TO_FW_OUT, SERVER4, SERVER6, WHOAMI_TCP,
                        settle)

RULES = f"""\
in_if = "f0"
out_if = "f1"
no nat on $out_if proto tcp from {{ 10.77.1.0/24 fd77:1::/64 }} to any port {BLOCKED}
{NAT_TO_FW_OUT}block all
pass in on $in_if proto tcp from {{ 10.77.1.0/24 fd77:1::/64 }} to port {{ {BLOCKED} {WHOAMI_TCP} }}
pass out on $out_if proto tcp from {{ {FW_OUT4} {FW_OUT6} }} to port {{ {BLOCKED} {WHOAMI_TCP} }}
"""

ENDS = {4: (CLIENT4, FW_OUT4, SERVER4), 6: (CLIENT6, FW_OUT6, SERVER6)}


@pytest.mark.parametrize("family", [4, 6])
def test_nat_out_pass_sees_translated_source(lan, daemon_factory, family):
    client, fw_out, server = ENDS[family]
    fw = daemon_factory(rules=RULES)
    lan.whoami()

    r = lan.ask(server, WHOAMI_TCP)
    assert r["result"] == "ok", f"the translated connection did not pass: {r}; reasons {fw.reasons()}"
    assert r["seen"]["address"] == fw_out, r

    before = fw.reasons()["rule_block"]
    exempt = lan.connect(family, BLOCKED, timeout=1.5)
    assert exempt["result"] == "timeout", f"an untranslated connection passed the out pass: {exempt}"

    settle()
    assert fw.reasons()["rule_block"] > before, "the untranslated SYN was not blocked by rule"
    assert int(fw.json("states", "port", BLOCKED)["matched"]) == 0
    states = fw.json("states", "proto", "tcp")["states"]
    assert [(s["src"]["address"], s.get("wire_src", {}).get("address")) for s in states] == [(client, fw_out)], states
