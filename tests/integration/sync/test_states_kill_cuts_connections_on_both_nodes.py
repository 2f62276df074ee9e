"""`pairwallctl states kill` cuts connections off, on both nodes. Eight TCP connections through node
A, replicated to B; killing two of them (one named by its client address and port, one by its
state id) removes them from A and, through sync Deletes, from B, and their next segments meet the
rules (no state, no SYN: blocked) while the other six keep carrying data. A filter that names
nothing, or a bad one, is refused."""

from netns import wait_until
from sync_pair import CLIENT, RULES, TCP_PORT, ask

COUNT = 8
SPORT = 43000
# TCP states only from a SYN, so that a killed connection cannot come back mid-stream.
SYN_ONLY = RULES.replace("pass in on $in_if inet proto { tcp udp } from 10.88.1.0/24 to any keep state",
                         "pass in on $in_if inet proto tcp from 10.88.1.0/24 to any flags S/SA keep state\n"
                         "pass in on $in_if inet proto udp from 10.88.1.0/24 to any keep state")


def client_ports(node):
    return {k[2] for k in node.states() if k[0] == 6 and k[4] == TCP_PORT}


def test_states_kill_cuts_connections_on_both_nodes(make_pair):
    assert SYN_ONLY != RULES
    pair = make_pair()
    for node in (pair.a, pair.b):
        (node.dir / "pairwall.rules").write_text(SYN_ONLY)
    pair.start()

    with pair.held_connections(COUNT, SPORT) as opener:
        assert ask(opener, None, "opened") == COUNT
        everyone = set(range(SPORT, SPORT + COUNT))
        wait_until(lambda: client_ports(pair.b) == everyone, 10, what=f"{COUNT} connections replicated to fwB")
        assert ask(opener, "data", "data") == COUNT

        assert pair.a.ctl("states", "kill", CLIENT, "port", str(SPORT)).stdout == "killed 1 states\n"
        second = pair.a.json("states", CLIENT, "port", str(SPORT + 1), "proto", "tcp")["states"]
        assert len(second) == 1
        state_id = f"{second[0]['creator']}:{second[0]['id']}"
        assert pair.a.json("states", "kill", "id", state_id) == {"states": "1"}
        kept = everyone - {SPORT, SPORT + 1}
        assert client_ports(pair.a) == kept
        wait_until(lambda: client_ports(pair.b) == kept, 5, what="fwB's copies of the killed states removed")

        # The killed connections' segments are blocked (each waits out the echo's 2 s timeout).
        assert ask(opener, "data", "data") == COUNT - 2
        assert client_ports(pair.a) == kept, "a killed connection came back"

        empty = pair.a.ctl("states", "kill", check=False)
        assert empty.returncode == 2 and "states kill: name an ADDRESS" in empty.stderr
        bad = pair.a.ctl("states", "kill", "10.88.1.2/33", check=False)
        assert bad.returncode == 1 and "not an address or prefix" in bad.stderr
        assert pair.a.json("states", "kill", "192.0.2.0/24") == {"states": "0"}
        assert client_ports(pair.a) == kept
