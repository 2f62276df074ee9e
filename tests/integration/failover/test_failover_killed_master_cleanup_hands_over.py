"""kill -9 of the master's pairwalld, then what systemd runs after the daemon however it ended (the
unit's ExecStopPost, `pairwalld --cleanup`): the cleanup removes the VIPs the killed daemon left in
its kernel and sends the leaving advertisement it could not, so that the backup takes over at once
instead of after the master-down interval. The daemon started again afterwards is still heard by
its peer: its epoch lies above the one the cleanup advertised under."""

from failover_net import PAIRWALLD, monotonic_us


def test_killed_master_cleanup_hands_over_at_once(pair_factory, report):
    advbase_ms = 1000
    p = pair_factory(advbase_ms=advbase_ms, daemon="pairwalld")
    p.start("a")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=8)
    p.kill("a")  # SIGKILL: no leaving advertisement, and the VIPs stay in a's kernel
    assert p.holds_vips("a")

    t0 = monotonic_us()
    cleanup = p.nsexec("a", "env", "SERVICE_RESULT=signal", PAIRWALLD, "--cleanup", "-c",
                       str(p.dir / "a-pairwalld.toml"))
    p.wait_roles({"b": "master"}, timeout=3)
    tr = p.last_transition("b", "master")
    took_ms = (tr["at_us"] - t0) / 1000
    report(test="killed_master_cleanup", advbase_ms=advbase_ms, takeover_ms=round(took_ms, 1))
    assert "leaving advertisement sent on 4 of 4 channels" in cleanup.stderr, cleanup.stderr
    assert tr["cause"].startswith("master left cleanly"), tr
    # Without it, b would wait 3 advbase and its skew: 3.4 s.
    assert took_ms < 1000
    assert not p.holds_any_vip("a")
    assert p.holds_vips("b")

    # a's next daemon comes back as backup; once b is demoted, a takes the group and advertises
    # under its own start's epoch, which b must not refuse as a replay of the cleanup's. Counted as
    # what b accepted, not as its replay rejections: a frame sent on four channels can arrive after
    # the next one's copy on another, which counts a replay whatever the epochs.
    accepted = p.status("b")["counters"]["adverts_accepted"]
    p.start("a")
    p.wait_roles({"a": "backup", "b": "master"}, timeout=5)
    ok, text = p.ctl("b", "demote 50")
    assert ok, text
    p.wait_roles({"a": "master", "b": "backup"}, timeout=3 * advbase_ms / 1000 + 3)
    assert p.last_transition("b", "backup")["cause"] != "master down"
    assert p.status("b")["counters"]["adverts_accepted"] > accepted
