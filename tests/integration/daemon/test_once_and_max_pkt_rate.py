"""`once` and `max-pkt-rate` in the running daemon. A one-shot rule lets in one TCP connection,
which goes on flowing on its state, and none after it, until a reload of the file re-arms it. A
rule with `max-pkt-rate 20/3600` passes the first 20 echo requests (no state: each meets the rules)
and leaves the rest to `block all`: its hour's count decays by under 1 % over the test."""

from daemon_net import BLOCKED, settle

LIMITED_RULES = """\
in_if = "f0"
out_if = "f1"
block all
pass in on $in_if proto tcp to port 8081 once
pass out on $out_if proto tcp to port 8081
pass in on $in_if inet proto icmp icmp-type echoreq no state max-pkt-rate 20/3600
pass out on $out_if inet proto icmp icmp-type echoreq no state
pass in on $out_if inet proto icmp icmp-type echorep no state
pass out on $in_if inet proto icmp icmp-type echorep no state
"""
ONE_SHOT = "pass in on f0 proto tcp from any to any port 8081 flags S/SA keep state once"
LIMITED = "pass in on f0 inet proto icmp all icmp-type 8 no state max-pkt-rate 20/3600"
PINGS = 60


def test_once_and_max_pkt_rate(lan, tmp_path, daemon_factory):
    fw = daemon_factory(rules=LIMITED_RULES)
    shown = fw.ctl("rules", "show").stdout
    assert ONE_SHOT in shown and LIMITED in shown, shown

    held = lan.hold(4, BLOCKED)
    assert held.opened.get("connected"), held.opened
    assert held.echo().get("echo"), "the first connection"
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"
    assert lan.connect(6, BLOCKED, timeout=1.0)["result"] == "timeout"
    assert held.echo().get("echo"), "the first connection, on its state after the rule was spent"
    settle()
    assert fw.decided(ONE_SHOT) == 1, fw.reasons()

    blocked_before = fw.reasons().get("rule_block", 0)
    r = lan.peer(lan.client, "ping", "10.77.2.2", "--count", PINGS, "--timeout", 0.2, timeout=PINGS)
    assert r["sent"] == PINGS, r
    settle()
    assert r["received"] == 20, r
    assert fw.decided(LIMITED) == 20, fw.reasons()
    assert fw.reasons().get("rule_block", 0) - blocked_before >= PINGS - 20, fw.reasons()

    # A reload of the file zeroes the rules' counters, and with them re-arms `once`.
    reloaded = tmp_path / "reloaded.conf"
    reloaded.write_text(LIMITED_RULES)
    fw.json("rules", "load", reloaded)
    assert lan.connect(4, BLOCKED)["result"] == "ok"
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"
