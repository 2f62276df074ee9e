"""A master stopped cleanly (SIGTERM) sends a leaving advertisement and releases its VIPs: the backup
takes over at once instead of after the master-down interval."""

import signal

from failover_net import monotonic_us


def test_clean_shutdown_hands_over_at_once(pair_factory, report):
    advbase_ms = 1000
    p = pair_factory(advbase_ms=advbase_ms)
    p.start("a")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=8)
    t0 = monotonic_us()
    p.kill("a", sig=signal.SIGTERM)
    p.wait_roles({"b": "master"}, timeout=3)
    tr = p.last_transition("b", "master")
    took_ms = (tr["at_us"] - t0) / 1000
    report(test="clean_shutdown", advbase_ms=advbase_ms, takeover_ms=round(took_ms, 1))
    assert tr["cause"].startswith("master left cleanly")
    assert took_ms < 100  # not 3 s
    assert not p.holds_any_vip("a")  # released by the process itself, no lease needed
    assert p.holds_vips("b")
