"""Each node tells the other the digest of its rule set with its keepalives, as pfsync carries
pf's ruleset checksum: both nodes of a pair with the same rules say so; once one loads other rules,
both see it (sync status, the pairwall_sync_peer_rules_match gauge) and the log says it once; when
the rules agree again, that is said too."""

from netns import wait_until
from sync_pair import RULES


def digests(node):
    s = node.sync_status()
    return s.get("rules_digest"), s.get("peer_rules_digest")


def match_gauge(node):
    return node.metrics().get("pairwall_sync_peer_rules_match")


def test_peers_compare_their_rules(make_pair):
    pair = make_pair(metrics=True).start()
    wait_until(lambda: digests(pair.a)[1] and digests(pair.b)[1], 10, what="both nodes heard the other's digest")
    a_here, a_peer = digests(pair.a)
    b_here, b_peer = digests(pair.b)
    assert a_here == a_peer == b_here == b_peer, (digests(pair.a), digests(pair.b))
    assert pair.a.json("status")["rules_digest"] == a_here  # as pfctl -s info shows its checksum
    wait_until(lambda: match_gauge(pair.a) == 1 and match_gauge(pair.b) == 1, 10, what="the gauges saying match")
    assert "the same as the peer's" in pair.a.ctl("sync", "status").stdout

    # B loads other rules: one more port passes.
    other = pair.b.dir / "other.rules"
    other.write_text(RULES + "pass in on $in_if proto tcp to port 9001\n")
    pair.b.ctl("rules", "load", other)
    wait_until(lambda: digests(pair.a)[1] != a_here and digests(pair.b)[0] != b_here, 10,
               what="the new digest heard by fwA")
    assert digests(pair.a)[1] == digests(pair.b)[0], (digests(pair.a), digests(pair.b))
    wait_until(lambda: match_gauge(pair.a) == 0 and match_gauge(pair.b) == 0, 10, what="the gauges saying differ")
    assert "DIFFER" in pair.a.ctl("sync", "status").stdout
    wait_until(lambda: "runs other rules than this node" in pair.a.log_text(), 10, what="fwA's log saying so")
    assert pair.a.log_text().count("runs other rules than this node") == 1, "said more than once"

    # And back: the same rules on both nodes again.
    back = pair.b.dir / "pairwall.rules"
    pair.b.ctl("rules", "load", back)
    wait_until(lambda: match_gauge(pair.a) == 1 and match_gauge(pair.b) == 1, 10, what="the gauges saying match")
    wait_until(lambda: "runs the same rules as this node again" in pair.a.log_text(), 10,
               what="fwA's log saying they agree again")
