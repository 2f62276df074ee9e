"""With 100,000 states on the pair, the standby restarts: it reports demoted (not eligible for master)
until its bulk resync ends, then holds every state of the master."""

import time

from pairwall_lab import chaos, topology

STATES = 100_000


def test_standby_restart_bulk_resync(make_lab):
    lab = make_lab("builtin")
    master = lab.master()
    standby = topology.other(master)
    have = chaos.preload_until(lab, master, STATES)
    assert have >= STATES, f"master holds {have} states, want {STATES}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (lab.driver.states()[standby] or 0) < have:
        time.sleep(0.5)

    # A clean link carries 100k states in well under a second, faster than the status can be
    # polled; 30 % loss on the sync link stretches the bulk (resends and a shrinking window) so
    # that "demoted until the bulk ends" is observable, and exercises the bulk's recovery too.
    chaos.sync_loss(lab, 0.3)
    lab.kill9(standby, "pairwalld")
    t0 = time.monotonic()
    lab.driver.restore(standby, "master")  # restart pairwalld
    demoted_seen = False
    while time.monotonic() - t0 < 60:
        st = lab.driver.node_status()[standby]
        if not st["bulk_done"]:
            demoted_seen = demoted_seen or (st["role"] != "master" and (st.get("demotion") or 0) > 0)
            assert st["role"] != "master", "the standby became master before its bulk resync ended"
        else:
            break
        time.sleep(0.1)
    bulk_s = time.monotonic() - t0
    chaos.clear_faults(lab)
    assert st["bulk_done"], f"bulk resync not done after {bulk_s:.0f} s: {st}"
    assert demoted_seen, "the standby never reported itself demoted while its bulk resync ran"
    counts = lab.driver.states()
    assert counts[standby] >= STATES, f"standby holds {counts[standby]} states after the bulk, want {STATES}"
    assert lab.driver.roles()[master] == "master"
    print(f"bulk resync of {counts[standby]} states: {bulk_s:.1f} s")
