"""The sync link goes down for 5 s during connection churn, then comes back: node B reports the gap
(sequences node A could no longer resend), asks for a resync of that range, and both tables agree
again. The resend window is kept small so that 5 s of churn outgrow it: the incremental resync, not
plain resending, has to close the gap."""

import threading
import time

from sync_pair import SERVER, TCP_PORT, describe_difference


def test_sync_link_down_5s_gap_resynced(make_pair):
    pair = make_pair(sync_extra="resend_window = 64").start()
    churn = {}
    t = threading.Thread(target=lambda: churn.update(
        pair.flows("client", "churn", SERVER, TCP_PORT, "--seconds", 12, "--rate", 300)[-1]))
    t.start()
    time.sleep(2)
    pair.ns["fwA"].down("sync0")
    time.sleep(5)
    down = pair.a.sync_status()
    pair.ns["fwA"].up("sync0")
    t.join(timeout=60)
    assert churn.get("tcp", 0) > 1000 and churn.get("failed", 1) == 0, churn
    assert down["peer_state"] in ("DOWN", "ONE_WAY"), down

    a, b, took = pair.wait_tables_agree(timeout=30)
    sb = pair.b.sync_status()
    print(f"\n{len(a)} states on fwA, {len(b)} on fwB; fwB sync: gaps {sb['gaps']}, resyncs {sb['resyncs']}")
    assert a.keys() == b.keys(), describe_difference(a, b)
    assert int(sb["gaps"]) > 0
    assert int(sb["resyncs"]) > 0
    log = pair.b.log.read_text(errors="replace")
    assert "lost beyond its resend window" in log and "incremental resync requested" in log, log[-3000:]
    assert "full resync" not in pair.a.log.read_text(errors="replace")
