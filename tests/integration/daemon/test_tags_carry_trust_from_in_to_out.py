"""pf's tags through the real queue: an in rule's `tag` marks a forwarded connection's first packet
for the out pass, where `tagged` lets it leave; a connection the in pass lets in untagged is held at
the out pass. IPv4 and IPv6 alike; `rules show` lists the rules as written."""

import pytest

from daemon_net import ALLOWED, BLOCKED

TAG_RULES = """\
in_if = "f0"
out_if = "f1"
block all
pass in on $in_if proto tcp to port { 8080, 8081 }
pass in on $in_if proto tcp to port 8080 tag TRUSTED
pass out on $out_if proto tcp tagged TRUSTED
"""


@pytest.mark.parametrize("family", [4, 6])
def test_tags_carry_trust_from_in_to_out(lan, daemon_factory, family):
    fw = daemon_factory(rules=TAG_RULES)
    trusted = lan.connect(family, ALLOWED)
    assert trusted["result"] == "ok", trusted
    assert trusted["echoed"] == 1000
    untagged = lan.connect(family, BLOCKED, timeout=1.5)
    assert untagged["result"] == "timeout", untagged

    texts = [r["text"] for r in fw.json("rules", "show")["rules"]]
    assert "pass in on f0 proto tcp from any to any port 8080 flags S/SA keep state tag TRUSTED" in texts, texts
    assert "pass out on f1 proto tcp all flags S/SA keep state tagged TRUSTED" in texts, texts
