"""pf's tags through the real queue: an in rule's `tag` marks a forwarded connection's first packet
for the out pass, where `tagged` lets it leave; a connection the in pass lets in untagged is held at
the out pass. A tag set in the in pass is what the rules after it in that pass see. A nat rule
that tests a tag translates the flows the in pass tagged and leaves the others as they are. IPv4
and IPv6 alike; `rules show` lists the rules as written."""

import pytest

from daemon_net import (ALLOWED, BLOCKED, CLIENT4, CLIENT6, FW_OUT4, FW_OUT6, SERVER4, SERVER6, WHOAMI_TCP,
                        WHOAMI_UDP)

TAG_RULES = """\
in_if = "f0"
out_if = "f1"
block all
pass in on $in_if proto tcp to port { 8080, 8081 }
pass in on $in_if proto tcp to port 8080 tag TRUSTED
pass out on $out_if proto tcp tagged TRUSTED
"""
# The same with pf's match rule, which tags and decides nothing.
MATCH_RULES = """\
in_if = "f0"
out_if = "f1"
block all
pass in on $in_if proto tcp to port { 8080, 8081 }
pass out on $out_if proto tcp tagged TRUSTED
match in on $in_if proto tcp to port 8080 tag TRUSTED
"""


# Tagged and tested in the in pass: pf's idiom of match rules that classify, then rules that decide.
IN_PASS_RULES = """\
in_if = "f0"
out_if = "f1"
block all
match in on $in_if proto tcp to port 8080 tag TRUSTED
pass in on $in_if tagged TRUSTED
pass out on $out_if proto tcp
"""

# Each set, and rules it lists as written.
RULE_SETS = {
    "pass_tag": (TAG_RULES, [
        "pass in on f0 proto tcp from any to any port 8080 flags S/SA keep state tag TRUSTED",
        "pass out on f1 proto tcp all flags S/SA keep state tagged TRUSTED",
    ]),
    "match_tag": (MATCH_RULES, [
        "match in on f0 proto tcp from any to any port 8080 tag TRUSTED",
        "pass out on f1 proto tcp all flags S/SA keep state tagged TRUSTED",
    ]),
    "same_pass": (IN_PASS_RULES, [
        "match in on f0 proto tcp from any to any port 8080 tag TRUSTED",
        "pass in on f0 all keep state tagged TRUSTED",
    ]),
}


@pytest.mark.parametrize("rule_set", list(RULE_SETS))
@pytest.mark.parametrize("family", [4, 6])
def test_tags_carry_trust_from_in_to_out(lan, daemon_factory, family, rule_set):
    rules, listed = RULE_SETS[rule_set]
    fw = daemon_factory(rules=rules)
    trusted = lan.connect(family, ALLOWED)
    assert trusted["result"] == "ok", trusted
    assert trusted["echoed"] == 1000
    untagged = lan.connect(family, BLOCKED, timeout=1.5)
    assert untagged["result"] == "timeout", untagged

    texts = [r["text"] for r in fw.json("rules", "show")["rules"]]
    for text in listed:
        assert text in texts, texts


NAT_BY_TAG_RULES = f"""\
in_if = "f0"
out_if = "f1"
nat on $out_if inet tagged NATTED -> {FW_OUT4}
nat on $out_if inet6 tagged NATTED -> {FW_OUT6}
block all
pass in on $in_if proto tcp to port {WHOAMI_TCP}
pass in on $in_if proto udp to port {WHOAMI_UDP} tag NATTED
pass out on $out_if proto {{ tcp udp }} to port {{ {WHOAMI_TCP} {WHOAMI_UDP} }}
"""

ENDS = {4: (CLIENT4, FW_OUT4, SERVER4), 6: (CLIENT6, FW_OUT6, SERVER6)}


@pytest.mark.parametrize("family", [4, 6])
def test_nat_translates_what_the_in_pass_tagged(lan, daemon_factory, family):
    client, fw_out, server = ENDS[family]
    fw = daemon_factory(rules=NAT_BY_TAG_RULES)
    lan.whoami()
    tagged = lan.ask(server, WHOAMI_UDP, udp=True)
    assert tagged["result"] == "ok", f"no answer: {tagged}; reasons {fw.reasons()}"
    assert tagged["seen"]["address"] == fw_out, f"the tagged flow left untranslated: {tagged}"
    untagged = lan.ask(server, WHOAMI_TCP)
    assert untagged["result"] == "ok", f"no answer: {untagged}; reasons {fw.reasons()}"
    assert untagged["seen"]["address"] == client, f"the untagged flow was translated: {untagged}"

    texts = [r["text"] for r in fw.json("rules", "show")["translations"]]
    assert f"nat on f1 inet all tagged NATTED -> {FW_OUT4}" in texts, texts
