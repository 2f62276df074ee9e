"""The better node restarts with its bulk sync pending. preempt on: it takes the group back only once
the bulk sync has ended; preempt off: it stays backup."""

import time

import pytest


@pytest.mark.parametrize("preempt", [True, False])
def test_restarted_better_node(pair_factory, report, preempt):
    p = pair_factory(advbase_ms=200, preempt=preempt)
    if p.daemon == "pairwalld":
        pytest.skip("pairwalld's bulk state comes from its sync service: see the sync integration tests")
    p.start("a")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=5)
    p.kill("a")
    p.wait_roles({"b": "master"}, timeout=5)

    p.start("a", "--bulk-pending")
    time.sleep(3)  # many advertisement intervals: a demoted node must not take over
    sa = p.status("a")
    assert sa["role"] == "backup"
    assert sa["demotion"] > 0 and any("bulk sync" in r for r in sa["demotion_reasons"])
    assert p.role("b") == "master" and p.holds_vips("b") and not p.holds_any_vip("a")
    ok, why = p.ctl("a", "health")
    assert not ok and "bulk sync" in why

    t_bulk = time.monotonic()
    assert p.ctl("a", "bulk done")[0]
    if preempt:
        p.wait_roles({"a": "master", "b": "backup"}, timeout=2)
        tr = p.last_transition("a", "master")
        assert tr["cause"].startswith("preempt")
        took_ms = (tr["at_us"] / 1e6 - t_bulk) * 1000
        report(test="preempt_after_bulk", advbase_ms=200, takeover_after_bulk_done_ms=round(took_ms, 1))
        assert took_ms < 200 + 100  # at the next poll of the bulk state, not at a timeout
        p.wait_for(lambda: p.holds_vips("a") and not p.holds_any_vip("b"), 3, what="VIPs on A only")
    else:
        time.sleep(2)
        assert p.role("a") == "backup" and p.role("b") == "master"
        assert p.holds_vips("b") and not p.holds_any_vip("a")
    assert p.ctl("a", "health")[0]
