"""A maintenance handover without a restart, as `ifconfig carpN advskew 200` gives it on OpenBSD:
raising the master's advskew in its config and reloading it (SIGHUP) makes it advertise the new
skew at once, and the backup, which now ranks above it and has preempt, takes the group on that
advertisement. Lowering it again takes the group back on the new master's next advertisement. The
reload names no advskew among the settings it does not take."""

import json

ADVBASE_MS = 200



def advskew(p, node):
    """The advskew the node's election runs with (proto3's JSON leaves out a 0)."""
    ok, text = p.ctl(node, "status")
    assert ok, text
    return json.loads(text).get("advskew", 0)


def test_advskew_reload_moves_the_group(pair_factory):
    p = pair_factory(advbase_ms=ADVBASE_MS, preempt=True, daemon="pairwalld", sync=False)
    p.start("a")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=10)

    p.reload_with("a", [("advskew = 0\n", "advskew = 200\n")])
    # B's skew is 100: it preempts on A's next advertisement, which A sends as it takes the skew.
    p.wait_roles({"a": "backup", "b": "master"}, timeout=1)
    assert p.last_transition("b", "master")["cause"].startswith("preempt")
    assert advskew(p, "a") == 200
    assert "advskew 0 -> 200, preempt on -> on" in p.log("a")
    # The reload took advskew: it is not among the settings the reload warns it left as they ran.
    assert "which a reload does not take" not in p.log("a"), p.log("a")

    p.reload_with("a", [("advskew = 200\n", "advskew = 0\n")])
    p.wait_roles({"a": "master", "b": "backup"}, timeout=1 + 2 * ADVBASE_MS / 1000)
    assert p.last_transition("a", "master")["cause"].startswith("preempt")
    assert advskew(p, "a") == 0
