"""[sync] defer turned on and off by a reload, as `ifconfig pfsync0 [-]defer` does on a running
pfsync: no restart, which would hand the group over and drop the hooks for a moment.

Node A starts without defer: nothing is held. A reload that sets defer = true holds each new
connection's first packet until B has its state; one that takes it out again holds nothing more.
Neither reload warns that the setting waits for a restart."""

from netns import wait_until
from sync_pair import TCP_PORT
from test_defer_holds_first_packets_until_peer_acks import HELD, connect, released

TIMEOUT_MS = 100
UNTAKEN = "which a reload does not take"


def reload(node, extra):
    """Rewrites node's config with `extra` in its [sync] section (the file's last) and reloads it."""
    text = node.config.read_text().split("\n# extra\n")[0]
    node.config.write_text(text + "\n# extra\n" + extra)
    out = node.ctl("reload")
    assert UNTAKEN not in out.stdout + out.stderr, out.stdout + out.stderr


def test_defer_turned_on_and_off_by_reload(make_pair):
    pair = make_pair(metrics=True).start()
    a, b = pair.a, pair.b

    # Off at start: nothing held, and the status has no defer part.
    connect(pair, 5)
    m = a.metrics()
    assert m[HELD] == 0, m
    assert "defer" not in a.sync_status()

    # On by a reload: every SYN is held until B acks its state.
    reload(a, f"defer = true\ndefer_timeout_ms = {TIMEOUT_MS}\n")
    wait_until(lambda: f"reload: defer off -> on ({TIMEOUT_MS} ms)" in a.log_text(), 5, what="defer on in the log")
    took = connect(pair, 10)
    m = a.metrics()
    assert m[HELD] >= 10, m
    assert released(m, "synced") == m[HELD], m
    assert max(took) < TIMEOUT_MS / 1000 / 2, took
    defer = a.sync_status()["defer"]
    assert defer["enabled"] and defer["timeout_ms"] == TIMEOUT_MS, defer

    # Off again (the timeout kept for a later reload): nothing more is held.
    held = m[HELD]
    reload(a, f"defer = false\ndefer_timeout_ms = {TIMEOUT_MS}\n")
    wait_until(lambda: "reload: defer on -> off" in a.log_text(), 5, what="defer off in the log")
    connect(pair, 10)
    m = a.metrics()
    assert m[HELD] == held, m
    assert "defer" not in a.sync_status()
    wait_until(lambda: len(b.states("proto", "tcp", "port", TCP_PORT)) >= 25, 5, what="fwB has every state")
    assert a.alive() and b.alive()
