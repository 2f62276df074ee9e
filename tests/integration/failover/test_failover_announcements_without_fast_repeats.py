"""announce_count = 0 turns off the fast repeats of a new master's announcements, not the one a second
that follows them until the VIP lease has run out: a killed master's kernel may answer for the VIPs
until then, and a neighbour that heard it last would stay on the dead node."""

import time

from failover_net import LANS


def test_announcements_without_fast_repeats_go_on_until_the_lease_ends(pair_factory):
    p = pair_factory(advbase_ms=200)
    p.start("a", extra="announce_count = 0\nvip_lease_s = 3\n")
    p.wait_for(lambda: p.role("a") == "master", 10, what="a master")
    vips = sum(len(p.vips(lan)) for lan in LANS)
    became = time.monotonic()
    first = p.status("a")["counters"]["announcements"]
    assert first >= vips
    # One round at once, then one a second for the lease and a second more (4 s).
    p.wait_for(lambda: p.status("a")["counters"]["announcements"] >= first + 2 * vips, 4,
               step=0.1, what="two more rounds of announcements within 4 s")
    # Then they stop: a master that holds its VIPs on a quiet LAN does not keep shouting.
    time.sleep(max(0.0, became + 5.5 - time.monotonic()))
    settled = p.status("a")["counters"]["announcements"]
    assert settled <= first + 5 * vips
    time.sleep(1.5)
    assert p.status("a")["counters"]["announcements"] == settled
