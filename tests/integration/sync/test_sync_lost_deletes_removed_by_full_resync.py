"""Deletes lost with the sync stream do not leave the peer's copies behind. 150 TCP connections
through node A, replicated to B; the sync link goes down; the connections close and A's states
expire while B hears nothing (A's waiting changes overflow its small pending_limit, so they are
dropped). When the link returns, A sends B its whole table (a full resync), and at its end B
removes the copies A no longer has: they were ESTABLISHED on B, with an hour left to live."""

import time

from netns import wait_until
from sync_pair import RULES, SERVER, TCP_PORT

COUNT = 150
# Closing connections expire within seconds on A; established ones live an hour.
SHORT_CLOSE = RULES.replace("tcp.closing 600, tcp.finwait 600, tcp.closed 600",
                            "tcp.closing 1, tcp.finwait 1, tcp.closed 1")


def connection_keys(states):
    return {k for k in states if k[0] == 6 and k[4] == TCP_PORT}


def test_sync_lost_deletes_removed_by_full_resync(make_pair):
    assert SHORT_CLOSE != RULES
    pair = make_pair(sync_extra="pending_limit = 32")
    for node in (pair.a, pair.b):
        (node.dir / "pairwall.rules").write_text(SHORT_CLOSE)
    pair.start()

    opener = pair.spawn_flows("client", "open", SERVER, TCP_PORT, COUNT, "--sport", 41000, "--interval", 0.005,
                              "--hold", 120)
    try:
        wait_until(lambda: len(connection_keys(pair.b.states())) == COUNT, 30,
                   what=f"{COUNT} connections replicated to fwB")
        wait_until(lambda: all((s.get("src_state"), s.get("dst_state")) == ("ESTABLISHED", "ESTABLISHED")
                               for k, s in pair.b.states().items() if k in connection_keys({k: s})), 10,
                   what="fwB's copies established")

        pair.ns["fwA"].down("sync0")
        wait_until(lambda: pair.a.sync_status()["peer_state"] == "DOWN", 5, what="fwA sees the peer down")
        opener.stdin.write(b"close\n")
        opener.stdin.flush()
        opener.wait(timeout=30)
        # A's states close and expire; B, cut off, still holds every connection established.
        wait_until(lambda: not connection_keys(pair.a.states()), 30, what="fwA's closed states expired")
        assert len(connection_keys(pair.b.states())) == COUNT
        removed_before = int(pair.b.sync_status().get("peer_states_removed", 0))
    finally:
        if opener.poll() is None:
            pair.topo.kill(opener)

    pair.ns["fwA"].up("sync0")
    t0 = time.monotonic()
    wait_until(lambda: not connection_keys(pair.b.states()), 30, what="fwB's stale copies removed")
    took = time.monotonic() - t0
    sb = pair.b.sync_status()
    print(f"\nfwB removed {sb.get('peer_states_removed')} stale states {took:.1f} s after the link came back")
    assert int(sb["peer_states_removed"]) - removed_before >= COUNT // 2, sb
    pair.wait_peers_up()
    assert "full resync" in pair.a.log.read_text(errors="replace")
    assert "the peer no longer has removed" in pair.b.log.read_text(errors="replace")
    shown = pair.b.ctl("sync", "status").stdout
    assert f"stale states  {sb['peer_states_removed']} of the peer's removed" in shown, shown
