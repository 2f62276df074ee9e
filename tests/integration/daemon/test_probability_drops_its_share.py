"""`probability` in the running daemon: a quick block rule with `probability 30%` drops about that
share of echo requests, drawn per packet, and counts each it decides; the rest go on to the rules
after it and pass. The pass rules keep no state, so that every request meets the rules."""

from daemon_net import SERVER4, SERVER6, settle

PROBABILITY_RULES = """\
in_if = "f0"
out_if = "f1"
block all
pass in on $in_if inet proto icmp icmp-type echoreq no state
pass out on $out_if inet proto icmp icmp-type echoreq no state
pass in on $out_if inet proto icmp icmp-type echorep no state
pass out on $in_if inet proto icmp icmp-type echorep no state
pass in on $in_if inet6 proto icmp6 icmp6-type echoreq no state
pass out on $out_if inet6 proto icmp6 icmp6-type echoreq no state
pass in on $out_if inet6 proto icmp6 icmp6-type echorep no state
pass out on $in_if inet6 proto icmp6 icmp6-type echorep no state
block in quick on $in_if probability 30%
"""
DROPPING_RULE = "block in quick on f0 all probability 30%"
SENT = 300


def test_probability_drops_its_share(lan, daemon_factory):
    fw = daemon_factory(rules=PROBABILITY_RULES)
    assert DROPPING_RULE in fw.ctl("rules", "show").stdout

    received = 0
    for host in (SERVER4, SERVER6):
        r = lan.peer(lan.client, "ping", host, "--count", SENT // 2, "--timeout", 0.3, timeout=SENT)
        assert r["sent"] == SENT // 2, r
        received += r["received"]
    settle()
    dropped = fw.decided(DROPPING_RULE)
    # 30 % of 300: 90, with a standard deviation of 8. Each request the rule did not decide passed
    # and was answered (a late answer, counted as lost, is allowed for a few).
    assert 45 <= dropped <= 135, (dropped, received)
    assert SENT - 5 <= received + dropped <= SENT, (dropped, received)
    assert fw.reasons().get("rule_block", 0) >= dropped, fw.reasons()
