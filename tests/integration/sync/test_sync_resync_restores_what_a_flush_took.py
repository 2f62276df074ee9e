"""`pairwallctl sync resync` asks the peer for its whole table, as conntrackd -n does. A flush on the
backup removes every state it holds, the master's too (the master keeps its own: a flush tells the
peer to remove the flusher's states alone), and idle connections send nothing that would bring
them back: the backup would fail them over to nothing. The resync brings them all back, tracking
included and each state's age, while the connections stay open."""

import time

from netns import wait_until
from sync_pair import TCP_PORT, describe_difference, exchange_data

COUNT = 20
SPORT = 45000


def tracking(s):
    return s.get("src_state"), s.get("dst_state"), str(s.get("src_window")), str(s.get("dst_window"))


def age_ms(s):
    return int(s.get("age_ms", 0))  # a uint64 in proto3's JSON: a string, left out when 0


def test_sync_resync_restores_what_a_flush_took(make_pair):
    pair = make_pair().start()
    flt = ("proto", "tcp", "port", TCP_PORT)
    with pair.held_connections(COUNT, SPORT, hold=60) as opener:
        wait_until(lambda: len(pair.b.states(*flt)) == COUNT, 10, what="the connections' states on fwB")
        # A second on, the connections exchange data: their last packets are then a second younger
        # than the states.
        time.sleep(1.2)
        assert exchange_data(opener) == COUNT
        held = pair.a.states(*flt)
        assert len(held) == COUNT

        assert pair.b.ctl("flush", "states").stdout.startswith("flushed ")
        time.sleep(1)
        assert pair.b.states(*flt) == {}, "the flushed states came back without a resync"
        assert pair.a.states(*flt).keys() == held.keys()

        out = pair.b.ctl("sync", "resync").stdout
        assert "asked the peer for its whole table" in out, out
        t0 = time.monotonic()
        wait_until(lambda: pair.b.states(*flt).keys() == held.keys(), 10,
                   what=lambda: describe_difference(pair.a.states(*flt), pair.b.states(*flt)))
        print(f"\n{COUNT} states back on fwB {1000 * (time.monotonic() - t0):.0f} ms after the resync "
              "(polling pairwallctl)")
        a, b = pair.a.states(*flt), pair.b.states(*flt)
        assert all(tracking(a[k]) == tracking(b[k]) for k in a), describe_difference(a, b, tracking)
        # Dated from when fwA made them, not from the resync nor from their last packets: as old on
        # fwB as on fwA, but for the resync's time on the way (fwA's table was read first).
        assert all(age_ms(a[k]) >= 2000 and age_ms(b[k]) >= age_ms(a[k]) - 300 for k in a), \
            f"ages in ms on fwA, fwB: {[(age_ms(a[k]), age_ms(b[k])) for k in sorted(a)[:5]]}"
        assert all(s["from_peer"] for s in b.values())
        assert "the peer's whole table asked for" in pair.b.log_text()
        assert int(pair.b.sync_status()["bulk_received"]) >= COUNT
        assert opener.poll() is None, "the connections ended"
