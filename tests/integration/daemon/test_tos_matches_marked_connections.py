"""`tos` in the running daemon: a rule with `tos ef` lets in the connections whose SYN carries DSCP
EF (IPv4 TOS, IPv6 traffic class 0xb8), with or without an ECN bit beside it, and not the same
connection unmarked or marked otherwise."""

from daemon_net import BLOCKED, RULES, settle

TOS_RULES = RULES + "pass in on $in_if proto tcp to port 8081 tos ef\npass out on $out_if proto tcp to port 8081\n"
MARKED = "pass in on f0 proto tcp from any to any port 8081 flags S/SA keep state tos 184"


def test_tos_matches_marked_connections(lan, daemon_factory):
    fw = daemon_factory(rules=TOS_RULES)
    assert MARKED in fw.ctl("rules", "show").stdout

    for family in (4, 6):
        assert lan.connect(family, BLOCKED, tos=0xb8)["result"] == "ok", family
        assert lan.connect(family, BLOCKED, tos=0xb9)["result"] == "ok", family  # ECT(1) beside EF
        assert lan.connect(family, BLOCKED, timeout=1.0)["result"] == "timeout", family
        assert lan.connect(family, BLOCKED, tos=0x28, timeout=1.0)["result"] == "timeout", family
    settle()
    assert fw.decided(MARKED) == 4, fw.reasons()
