"""The sync link is cut for 5 s while states are created, then comes back: both tables agree again
and the gap was reported (resends, gaps or resyncs counted, never silent). The lab holds the VIPs still
(scripted driver): the scenario is about sync, not election."""

import time

from pairwall_lab import chaos, drivers, topology


def test_sync_link_flap_tables_converge(make_lab):
    lab = make_lab("scripted")
    master = lab.master()
    topology.set_sync_link(lab.prefix, master, False)
    try:
        t0 = time.monotonic()
        chaos.preload_udp_states(lab, 10_000)
        time.sleep(max(0.0, t0 + 5.0 - time.monotonic()))
        peer_state = lab.driver.node_status()[master]["sync_peer"]
    finally:
        topology.set_sync_link(lab.prefix, master, True)
    assert str(peer_state).upper() in ("DOWN", "ONE_WAY", "3", "2"), f"sync peer reported {peer_state!r} while cut"
    a, b, took = chaos.wait_tables_agree(lab, timeout=30)
    assert len(a) >= 10_000
    assert a == b, f"tables differ after {took:.1f} s: {len(a - b)} only on fwA, {len(b - a)} only on fwB"
    sync = lab.driver.node_status()[master]["sync"]
    reported = sum(int(drivers.find_key(sync, (k,)) or 0) for k in ("resends", "gaps", "resyncs"))
    assert reported > 0, f"the outage left no trace in sync status: {sync}"
