"""Two nodes given one [node] id: neither can win an election against the other. Each says so, in
an error line that names the fix and in node_id_conflicts, instead of leaving the pair split in
silence (its own advertisements never come back to a node: multicast loop is off)."""

from failover_net import NODES


def test_same_node_id_is_reported(pair_factory, monkeypatch):
    monkeypatch.setitem(NODES["b"], "id", NODES["a"]["id"])
    p = pair_factory(advbase_ms=200, daemon="pairwall-failoverd")
    p.start("a")
    p.start("b")
    p.wait_for(lambda: all(p.status(n)["counters"]["node_id_conflicts"] > 0 for n in ("a", "b")), 10,
               what="the conflict counted on both nodes")
    for node in ("a", "b"):
        assert "another node advertises with this node's id 1" in p.log(node)
