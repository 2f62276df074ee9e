"""100,000 states on node A; node B is killed and restarted: it asks for a bulk, gets every state,
and reports itself not done (the failover demotion reads this) until the bulk has ended."""

import time

from sync_pair import describe_difference

STATES = 100_000


def keys_only(s):
    return None


def test_bulk_resync_100k_states_after_restart(make_pair):
    pair = make_pair().start()
    sent = pair.preload_udp(STATES + 2000, rate=15000)
    count_a = pair.a.state_count()
    assert count_a >= STATES, f"fwA holds {count_a} states after {sent} flows"
    # Live sync got them to B too; now B crashes and comes back with an empty table.
    a0, b0, took = pair.wait_tables_agree(timeout=60, compare=keys_only)
    assert a0.keys() == b0.keys(), describe_difference(a0, b0, keys_only)
    pair.b.kill()
    pair.b.start()

    samples = []  # (seconds since start, bulk_done, bulk_state, states on B)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        st = pair.b.sync_status()
        n = pair.b.state_count()
        samples.append((time.monotonic() - t0, bool(st.get("bulk_done")), st.get("bulk_state"), n))
        if st.get("bulk_done"):
            break
        time.sleep(0.02)
    done_at = samples[-1][0]
    print(f"\nfwB restarted: bulk done after {done_at:.2f} s (states {samples[-1][3]}); "
          f"{sum(1 for s in samples if not s[1])} status samples saw it not done")
    assert samples[-1][1], f"bulk not done within 120 s: {samples[-5:]}\n{pair.b.log_text()}"
    assert samples[-1][2] == "DONE", samples[-1]
    # Demoted until the end: the first answers said "not done", and "done" came only with the table full.
    assert not samples[0][1], samples[0]
    assert samples[-1][3] >= count_a, f"done with {samples[-1][3]} of {count_a} states"
    st = pair.b.sync_status()
    assert int(st["bulk_expected"]) == count_a
    assert int(st["bulk_received"]) == count_a
    a, b = pair.tables()
    assert a.keys() == b.keys(), describe_difference(a, b, keys_only)
    assert pair.a.alive() and pair.b.alive()
