"""`set fail-policy return` in the running daemon: with the state table full (`set limit states 1`,
one connection held), a connection the rules pass is answered with a reset and refused at once,
where it would otherwise time out on a silent drop; the refusal is counted as state_limit."""

from daemon_net import ALLOWED, RULES, settle

FULL_RULES = "set limit states 1\nset fail-policy return\n" + RULES


def test_fail_policy_return_resets_what_has_no_room(lan, daemon_factory):
    fw = daemon_factory(rules=FULL_RULES)
    held = lan.hold(4)
    assert held.opened.get("connected"), held.opened
    assert held.echo()["echo"], "the held connection does not carry data"

    refused = lan.connect(4, ALLOWED, timeout=3.0)
    assert refused["result"] == "refused", refused
    assert refused["seconds"] < 2.0, refused
    settle()
    assert fw.reasons().get("state_limit", 0) >= 1, fw.reasons()
    # The connection that has its state goes on.
    assert held.echo()["echo"]
