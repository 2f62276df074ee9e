"""The better node restarts while its bulk sync cannot finish. preempt on: it takes the group back only
once the bulk sync has ended; preempt off: it stays backup.

With pairwall-failoverd the bulk state is a switch (--bulk-pending, `bulk done`); with pairwalld it is
the real sync service, held back by dropping the sync link's traffic and released by letting it pass.
"""

import json
import time

import pytest

from failover_net import SYNC_PORT


def block_sync(p, on):
    op = "-I" if on else "-D"
    for node in ("a", "b"):
        p.nsexec(node, "iptables", op, "INPUT", "-i", "sync0", "-p", "udp", "--dport", str(SYNC_PORT), "-j", "DROP")


@pytest.mark.parametrize("preempt", [True, False])
def test_restarted_better_node(pair_factory, report, preempt):
    p = pair_factory(advbase_ms=200, preempt=preempt)
    real_sync = p.daemon == "pairwalld"
    p.start("a")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=8)
    p.kill("a")
    p.wait_roles({"b": "master"}, timeout=5)

    if real_sync:
        block_sync(p, True)
        p.start("a")
    else:
        p.start("a", "--bulk-pending")
    time.sleep(3)  # many advertisement intervals: a demoted node must not take over
    sa = p.status("a")
    assert sa["role"] == "backup"
    assert sa["demotion"] > 0 and any("bulk sync" in r for r in sa["demotion_reasons"])
    assert p.role("b") == "master" and p.holds_vips("b") and not p.holds_any_vip("a")
    ok, why = p.ctl("a", "health")
    assert not ok and "bulk sync" in why

    t_bulk = time.monotonic()
    if real_sync:
        block_sync(p, False)
    else:
        assert p.ctl("a", "bulk done")[0]
    # On the master's first advertisement after the demotion ends. That ends, with
    # pairwall-failoverd, at the next poll; with pairwalld, when the sync service gets its bulk (or
    # gives up waiting for it, [sync] bulk_timeout_min_s = 5 s after it started).
    bound_s = 0.5 if not real_sync else 6
    if preempt:
        p.wait_roles({"a": "master", "b": "backup"}, timeout=bound_s + 2)
        tr = p.last_transition("a", "master")
        assert tr["cause"].startswith("preempt")
        took_ms = (tr["at_us"] / 1e6 - t_bulk) * 1000
        report(test="preempt_after_bulk", daemon=p.daemon, advbase_ms=200, takeover_after_bulk_released_ms=round(took_ms, 1))
        assert took_ms < bound_s * 1000
        p.wait_for(lambda: p.holds_vips("a") and not p.holds_any_vip("b"), 3, what="VIPs on A only")
        if real_sync:
            # The takeover followed a bulk that finished, not one that timed out.
            ok, text = p.ctl("a", "sync status")
            assert ok, text
            assert json.loads(text).get("bulk_state") == "DONE", text
    else:
        p.wait_for(lambda: p.status("a")["demotion"] == 0, bound_s + 2, what="A's bulk sync to end")
        time.sleep(2)
        assert p.role("a") == "backup" and p.role("b") == "master"
        assert p.holds_vips("b") and not p.holds_any_vip("a")
    assert p.ctl("a", "health")[0]
