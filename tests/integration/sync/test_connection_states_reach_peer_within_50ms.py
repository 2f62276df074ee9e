"""Connections through node A appear as states on node B within 50 ms (median), and with the same
TCP tracking: windows (seqlo, seqhi, max_win, wscale) and per-side TCP states, after the handshake
and again after data moved the windows."""

import json
import os
import statistics
import time

from netns import wait_until
from sync_pair import SERVER, TCP_PORT, describe_difference, exchange_data

CONNECTIONS = 60
# The bound is the release build's. Against the sanitized build (tools/run-tests.sh sets
# PAIRWALL_SANITIZED) pairwalld and the pairwallctl that polls it run several times slower, and the
# polling alone adds some 25 ms: there the states must arrive within twice the bound.
LIMIT_MS = 100 if os.environ.get("PAIRWALL_SANITIZED") else 50


def tracking(s):
    return (s.get("src_state"), s.get("dst_state"), json.dumps(s.get("src_window"), sort_keys=True),
            json.dumps(s.get("dst_window"), sort_keys=True))


def test_connection_states_reach_peer_within_50ms(make_pair):
    pair = make_pair().start()
    watcher = pair.spawn_flows("fwB", "watch", str(pair.b.bin / "pairwallctl"), str(pair.b.socket), TCP_PORT,
                               "--seconds", 60, "--expect", CONNECTIONS)
    assert b"watching" in watcher.stdout.readline()
    opener = pair.spawn_flows("client", "open", SERVER, TCP_PORT, CONNECTIONS, "--sport", 41000, "--interval", 0.1,
                              "--hold", 60)
    opened = {}
    while True:
        line = json.loads(opener.stdout.readline())
        if "opened" in line:
            break
        assert line["ok"], f"connection from port {line['sport']} failed"
        opened[line["sport"]] = line["t0"]
    seen = {}
    while len(seen) < CONNECTIONS:
        line = json.loads(watcher.stdout.readline())
        if line.get("done"):
            break
        seen[line["sport"]] = line["t"]
    assert seen.keys() == opened.keys(), f"never seen on fwB: {sorted(opened.keys() - seen.keys())}"
    delays_ms = sorted((seen[p] - opened[p]) * 1000 for p in opened)
    median = statistics.median(delays_ms)
    print(f"\nstate on fwB after the SYN through fwA: median {median:.1f} ms, max {delays_ms[-1]:.1f} ms "
          f"(polling pairwallctl, resolution a few ms)")
    assert median < LIMIT_MS, f"median {median:.1f} ms: {delays_ms}"

    # After the handshake: the same tracking on both nodes.
    flt = ("proto", "tcp", "port", TCP_PORT)
    t0 = time.monotonic()
    while True:
        a, b = pair.a.states(*flt), pair.b.states(*flt)
        if len(a) == CONNECTIONS and a.keys() == b.keys() and all(tracking(a[k]) == tracking(b[k]) for k in a):
            break
        assert time.monotonic() - t0 < 5, describe_difference(a, b, tracking)
        time.sleep(0.2)
    sample = next(iter(a.values()))
    assert sample["src_state"] == "ESTABLISHED" and sample["dst_state"] == "ESTABLISHED", sample
    assert sample["src_window"]["max_win"] > 0 and sample["src_window"]["wscale"] != 0, sample
    assert all(s["from_peer"] for s in b.values())

    # Data moves the windows. The engine reports a window move without a TCP state change at most
    # once a second per state (pfsync squashes updates too), so fwB follows fwA's windows within that
    # refresh: send, wait past it, send again, and fwB must have moved, never past fwA, and lag by at
    # most the last exchange.
    for _ in range(2):
        assert exchange_data(opener) == CONNECTIONS
        time.sleep(1.1)
    time.sleep(0.2)
    a2, b2 = pair.a.states(*flt), pair.b.states(*flt)
    assert a2.keys() == b2.keys() == a.keys()
    for k in a2:
        for side in ("src_window", "dst_window"):
            before, on_a, on_b = a[k][side]["seqlo"], a2[k][side]["seqlo"], b2[k][side]["seqlo"]
            assert (on_b - before) % 2**32 > 0, f"{k} {side}: fwB did not move ({before} -> {on_b})"
            lag = (on_a - on_b) % 2**32
            assert lag <= 64, f"{k} {side}: fwB at {on_b}, fwA at {on_a}"
            assert a2[k][side]["max_win"] == b2[k][side]["max_win"]
            assert a2[k][side]["wscale"] == b2[k][side]["wscale"]
    opener.stdin.write(b"close\n")
    opener.stdin.flush()
    wait_until(lambda: pair.a.alive() and pair.b.alive(), 1)
