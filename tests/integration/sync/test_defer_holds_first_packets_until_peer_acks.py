"""[sync] defer = true (pfsync's defer): a new connection's first packet leaves node A only once
node B has acknowledged its state, so that no connection exists on A that B would not know of.

Held packets go when B acks (well within the 100 ms timeout set here); with B's acks cut they go
at the timeout; once A sees the peer down it holds nothing, and holds again when B answers."""

import json

from netns import wait_until
from sync_pair import SERVER, SYNC_PORT, TCP_PORT

TIMEOUT_MS = 100  # short beside the 600-800 ms it takes fwA to see its peer down once acks are cut
CONNECT = """
import json, socket, sys, time
took = []
for _ in range(int(sys.argv[1])):
    t = time.monotonic()
    s = socket.create_connection(("%s", %d), timeout=5)
    took.append(time.monotonic() - t)
    s.close()
    time.sleep(0.01)
print(json.dumps(took))
""" % (SERVER, TCP_PORT)

HELD = "pairwall_defer_held_total"


def released(samples, cause):
    return samples.get(f'pairwall_defer_released_total{{cause="{cause}"}}', 0)


def connect(pair, count):
    """Seconds each of `count` connections from the client took to be established."""
    out = pair.ns["client"].exec(pair.python, "-c", CONNECT, str(count), timeout=60).stdout
    return json.loads(out)


def cut_b_acks(pair, on):
    pair.ns["fwB"].exec("iptables", "-w", "-I" if on else "-D", "OUTPUT", "-o", "sync0", "-p", "udp",
                        "--dport", str(SYNC_PORT), "-j", "DROP")


def test_defer_holds_first_packets_until_peer_acks(make_pair):
    pair = make_pair(sync_extra=f"defer = true\ndefer_timeout_ms = {TIMEOUT_MS}", metrics=True).start()
    a, b = pair.a, pair.b

    # The peer answers: every SYN is held until B acks its state, then passes.
    took = connect(pair, 30)
    m = a.metrics()
    print(f"\nconnect with defer, peer up: median {sorted(took)[15] * 1000:.2f} ms, max {max(took) * 1000:.2f} ms")
    assert m[HELD] >= 30, m
    assert released(m, "synced") == m[HELD], m
    assert released(m, "timeout") == 0, m
    assert m["pairwall_defer_holding"] == 0, m
    assert max(took) < TIMEOUT_MS / 1000 / 2, took
    assert len(b.states("proto", "tcp", "port", TCP_PORT)) >= 30
    defer = a.sync_status()["defer"]
    assert defer["enabled"] and defer["timeout_ms"] == TIMEOUT_MS, defer
    assert int(defer["held"]) == m[HELD] and int(defer["released"]["synced"]) == m[HELD], defer
    text = a.ctl("sync", "status").stdout
    assert f"defer         0 held now, {int(m[HELD])} held in all (timeout {TIMEOUT_MS} ms)" in text, text

    # B's acks cut while A still counts it up: the SYN waits for the timeout, and still passes.
    held_before = m[HELD]
    cut_b_acks(pair, True)
    try:
        took = connect(pair, 1)
        m = a.metrics()
        assert took[0] >= TIMEOUT_MS / 1000 * 0.9, took
        assert released(m, "timeout") == 1, m
        assert m[HELD] == held_before + 1, m

        # Peer down on A (nothing heard for the dead interval): nothing is held, no delay.
        wait_until(lambda: a.sync_status().get("peer_state") == "DOWN", 5, what="fwA sees its peer down")
        took = connect(pair, 3)
        m = a.metrics()
        assert m[HELD] == held_before + 1, m
        assert max(took) < TIMEOUT_MS / 1000 / 2, took
    finally:
        cut_b_acks(pair, False)

    # B answers again: holding resumes.
    wait_until(lambda: a.sync_status().get("peer_state") == "UP", 10, what="fwA sees its peer up again")
    took = connect(pair, 5)
    m = a.metrics()
    assert m[HELD] == held_before + 1 + 5, m
    assert released(m, "synced") == held_before + 5, m
    assert max(took) < TIMEOUT_MS / 1000 / 2, took
    wait_until(lambda: len(b.states("proto", "tcp", "port", TCP_PORT)) >= 39, 5, what="fwB has every state")
    assert a.alive() and b.alive()
