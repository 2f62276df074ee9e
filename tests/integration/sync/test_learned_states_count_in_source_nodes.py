"""States learned from the peer count in the learner's source nodes, so that max-src-* limits go on
after a failover. Four TCP connections of the client through node A under `max-src-conn 6`,
replicated to B: B lists the client's node with four states and four connections, as A does, though
no packet of them crossed B; killed on A, they leave B and take the node with them."""

from netns import wait_until
from sync_pair import CLIENT, RULES

COUNT = 4
SPORT = 44000
LIMITED = RULES.replace("pass in on $in_if inet proto { tcp udp } from 10.88.1.0/24 to any keep state",
                        "pass in on $in_if inet proto tcp from 10.88.1.0/24 to any flags S/SA keep state "
                        "(max-src-conn 6)\n"
                        "pass in on $in_if inet proto udp from 10.88.1.0/24 to any keep state")


def client_node(node):
    """(states, connections) of the client's source node as `node` lists it, or None."""
    for n in node.json("sources")["sources"]:
        if n["address"] == CLIENT:
            return int(n["states"]), int(n["connections"])
    return None


def test_learned_states_count_in_source_nodes(make_pair):
    assert LIMITED != RULES
    pair = make_pair()
    for node in (pair.a, pair.b):
        (node.dir / "pairwall.rules").write_text(LIMITED)
    pair.start()

    with pair.held_connections(COUNT, SPORT, hold=60):
        wait_until(lambda: client_node(pair.a) == (COUNT, COUNT), 10, what="fwA counting the client's connections")
        wait_until(lambda: client_node(pair.b) == (COUNT, COUNT), 10,
                   what="fwB counting the connections it learned")
        listed = pair.b.ctl("sources").stdout
        assert f"{CLIENT}  rule @" in listed and f"states {COUNT}, connections {COUNT}" in listed, listed
        # Killed on A, the states leave B through sync deletes, and B's node goes with its last one.
        assert pair.a.ctl("states", "kill", CLIENT).stdout == f"killed {COUNT} states\n"
        wait_until(lambda: client_node(pair.b) is None, 10, what="fwB's node gone with the learned states")
