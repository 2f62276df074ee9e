"""The sync link goes down for 5 s during connection churn, then comes back: node A's changes wait
(one per state, coalescing) while the link is dead, node B reports the gap in A's sequence when the
link returns, the gap is filled, and both tables agree again."""

import threading
import time

from sync_pair import SERVER, TCP_PORT, describe_difference


def test_sync_link_down_5s_gap_resynced(make_pair):
    pair = make_pair().start()
    churn = {}
    t = threading.Thread(target=lambda: churn.update(
        pair.flows("client", "churn", SERVER, TCP_PORT, "--seconds", 12, "--rate", 300)[-1]))
    t.start()
    time.sleep(2)
    gaps_before = int(pair.b.sync_status()["gaps"])
    pair.ns["fwA"].down("sync0")
    time.sleep(5)
    down_a, down_b = pair.a.sync_status(), pair.b.sync_status()
    pair.ns["fwA"].up("sync0")
    t.join(timeout=60)
    assert churn.get("tcp", 0) > 1000 and churn.get("failed", 1) == 0, churn
    assert down_a["peer_state"] == "DOWN" and down_b["peer_state"] == "DOWN", (down_a, down_b)

    a, b, took = pair.wait_tables_agree(timeout=30)
    sa, sb = pair.a.sync_status(), pair.b.sync_status()
    print(f"\n{len(a)} states on fwA, {len(b)} on fwB; fwB: gaps {sb['gaps']} (before the cut {gaps_before}), "
          f"resyncs {sb['resyncs']}; fwA: resends {sa['resends']}")
    assert a.keys() == b.keys(), describe_difference(a, b)
    assert int(sb["gaps"]) > gaps_before
    assert sb["peer_state"] == "UP" and sa["peer_state"] == "UP"
    log_b = pair.b.log.read_text(errors="replace")
    assert "silent for" in log_b and "gaps in the peer's sequence" in log_b, log_b[-3000:]
    assert "full resync" not in pair.a.log.read_text(errors="replace")
