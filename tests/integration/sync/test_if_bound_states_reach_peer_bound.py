"""An if-bound state reaches the peer bound to the interfaces of the same names, as pfsync carries a
state's interface name: node A, whose rules say `set state-policy if-bound`, binds its connections'
states to a0 (in) and a1 (out); node B holds them so, live and again from the bulk it takes after a
restart (its interface numbers then new), and a state of a rule that says `(floating)` floats on
both nodes."""

from netns import wait_until
from sync_pair import RULES, SERVER, TCP_PORT, ask

COUNT = 4
SPORT = 44000
# UDP's out pass floats by its rule's own word; TCP takes the policy on both passes.
IF_BOUND = RULES.replace("block all\n", "set state-policy if-bound\nblock all\n").replace(
    "pass out on $out_if inet proto { tcp udp } from 10.88.1.0/24 to any keep state",
    "pass out on $out_if inet proto tcp from 10.88.1.0/24 to any keep state\n"
    "pass out on $out_if inet proto udp from 10.88.1.0/24 to any keep state (floating)")


def bindings(node):
    """{client port: (bound_in, bound_out)} of the held connections' states on `node`."""
    return {k[2]: (s.get("bound_in", ""), s.get("bound_out", ""))
            for k, s in node.states().items() if k[0] == 6 and k[4] == TCP_PORT and k[2] >= SPORT}


def test_if_bound_states_reach_peer_bound(make_pair):
    assert IF_BOUND.count("if-bound") == 1 and "(floating)" in IF_BOUND
    pair = make_pair()
    for node in (pair.a, pair.b):
        (node.dir / "pairwall.rules").write_text(IF_BOUND)
    pair.start()
    bound = {port: ("a0", "a1") for port in range(SPORT, SPORT + COUNT)}

    with pair.held_connections(COUNT, SPORT) as opener:
        assert ask(opener, None, "opened") == COUNT
        assert bindings(pair.a) == bound
        wait_until(lambda: bindings(pair.b) == bound, 10, what="fwB holding the states bound to a0 and a1")
        assert "bound in on a0 out on a1" in pair.b.ctl("states", "proto", "tcp").stdout

        # A floating rule's state floats on B too: the in pass's binding alone travels.
        pair.flows("client", "udp", SERVER, 1, "--sport", SPORT)
        udp = lambda node: [s for k, s in node.states().items() if k[0] == 17 and k[2] == SPORT]  # noqa: E731
        wait_until(lambda: len(udp(pair.b)) == 1, 10, what="fwB holding the UDP flow's state")
        assert (udp(pair.b)[0].get("bound_in", ""), udp(pair.b)[0].get("bound_out", "")) == ("a0", "")

        # B starts again, and takes the states from A's bulk.
        pair.b.kill()
        pair.b.start()
        wait_until(lambda: bindings(pair.b) == bound, 20, what="fwB's bulk holding the states bound")
        assert ask(opener, "data", "data") == COUNT
