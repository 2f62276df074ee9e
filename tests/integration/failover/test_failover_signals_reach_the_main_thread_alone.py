"""SIGTERM, SIGINT and SIGHUP reach pairwalld's main thread alone, whose loop handles them. The
handler runs on whichever thread does not block them, installed without SA_RESTART: on a packet
worker, the sync or the failover thread it would break a blocking call with EINTR, the failover's
netlink exchange among them, and a VIP could then fail to come up at a takeover."""

from pathlib import Path

# SIGHUP (1), SIGINT (2) and SIGTERM (15), as bits of /proc's SigBlk.
DAEMON_SIGNALS = (1 << 0) | (1 << 1) | (1 << 14)


def blocked(task):
    for line in (task / "status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no SigBlk in {task}/status")


def test_only_the_main_thread_takes_the_daemon_signals(pair_factory):
    p = pair_factory(advbase_ms=200, ipv6=False, daemon="pairwalld")
    p.start("a")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=5)
    pid = p.procs[("a", "failoverd")].pid  # `ip netns exec` execs pairwalld in its place
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "pairwalld"
    tasks = sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda t: int(t.name))
    # The main thread, a packet worker, the sync thread and the failover thread at least.
    assert len(tasks) >= 4
    for task in tasks:
        if int(task.name) == pid:
            assert blocked(task) & DAEMON_SIGNALS == 0, "the main thread must take the signals"
        else:
            assert blocked(task) & DAEMON_SIGNALS == DAEMON_SIGNALS, f"thread {task.name} takes signals"
    # And they still work: a reload is taken, and the daemon goes on.
    before = p.log("a").count("SIGHUP:")
    p.procs[("a", "failoverd")].send_signal(1)
    p.wait_for(lambda: p.log("a").count("SIGHUP:") > before, 5, what="a's SIGHUP taken")
    assert p.role("a") == "master"
