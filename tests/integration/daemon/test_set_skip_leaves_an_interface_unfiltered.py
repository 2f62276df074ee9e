"""`set skip on IFACE`, as pf's: a pass on that interface is not filtered. With the node's own
traffic queued, "block all" then leaves its service reachable from the skipped inside interface,
while traffic it forwards still meets the rules on its out pass (the other interface)."""

from daemon_net import ALLOWED, BLOCKED, settle
from test_local_hooks_filter_the_node_itself import LOCAL_RULES, serve_on_fw


def test_set_skip_leaves_an_interface_unfiltered(lan, daemon_factory):
    serve_on_fw(lan)
    fw = daemon_factory(hooks="forward+local", rules="set skip on f0\n" + LOCAL_RULES)
    before = fw.reasons()
    # The node itself, reached through f0: no rule is asked, not even `block all`.
    for family in (4, 6):
        assert lan.connect_to_fw(family, BLOCKED)["result"] == "ok"
    # Forwarded f0 -> f1: the in pass is skipped, the out pass on f1 decides.
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"
    settle()
    after = fw.reasons()
    assert after["skipped"] > before["skipped"], after
    assert after["rule_block"] > before["rule_block"], after
    assert after["state"] > before["state"], after
