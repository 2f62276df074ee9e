"""`synproxy state` through the real daemon: the firewall answers the client's SYN itself, and the
server hears of a connection only once the client has completed that handshake, from a SYN the
firewall sends with a sequence number of its own. A connection then echoes 200,000 bytes both ways
(IPv4 and IPv6), and SYNs that no handshake follows (sent by scapy, whose SYN-ACKs the client's
kernel resets) are answered by the firewall and never reach the server. Captured by tcpdump on
both sides."""

import re
import time

import pytest

from daemon_net import ALLOWED, SERVER4, addr, capture, metric, settle

RULES = f"""\
in_if = "f0"
out_if = "f1"
block all
pass in on $in_if proto tcp to port {ALLOWED} synproxy state
pass out on $out_if proto tcp to port {ALLOWED} keep state
"""

SYN = re.compile(r"Flags \[S\], seq (\d+),")
SYN_ACK = re.compile(r"Flags \[S\.\], seq (\d+), ack (\d+),")

# SYNs from the client's namespace that no ACK follows, each from its own source port (below the
# ephemeral range, so that no real connection shares one).
HALF_OPEN = """
import sys
from scapy.all import IP, TCP, L3RawSocket, conf, send
conf.verb = 0
conf.L3socket = L3RawSocket
for port in range(21000, 21000 + int(sys.argv[2])):
    send(IP(dst=sys.argv[1]) / TCP(sport=port, dport=int(sys.argv[3]), flags="S", seq=1000), verbose=False)
"""


SYN_FROM_PORT = re.compile(r"\.(\d+) > \S+: Flags \[S\],")


@pytest.mark.parametrize("family", [4, 6])
def test_synproxy_splices_a_connection_that_echoes(lan, daemon_factory, tmp_path, family):
    fw = daemon_factory(rules=RULES)
    assert "synproxy state" in fw.ctl("rules", "show").stdout
    dumps = [capture(lan, tmp_path, "client", lan.client, "c0", ALLOWED),
             capture(lan, tmp_path, "server", lan.server, "s0", ALLOWED)]
    echo = lan.peer(lan.client, "connect", addr(family, "server"), ALLOWED, "--bytes", 200_000, "--timeout", 10)
    time.sleep(0.5)
    for _, d in dumps:
        lan.topo.stop(d)
    assert echo["result"] == "ok" and echo["echoed"] == 200_000, f"{echo}; reasons {fw.reasons()}"

    (client_log, _), (server_log, _) = dumps
    client_text, server_text = client_log.read_text(), server_log.read_text()
    client_syn, client_synack = SYN.search(client_text), SYN_ACK.search(client_text)
    server_syn, server_synack = SYN.search(server_text), SYN_ACK.search(server_text)
    assert client_syn and client_synack and server_syn and server_synack, (client_text[-2000:], server_text[-2000:])
    # The client's SYN was answered by the firewall, which opened the server's side with its own.
    assert int(client_synack.group(2)) == int(client_syn.group(1)) + 1
    assert int(server_syn.group(1)) != int(client_syn.group(1)), "the client's SYN reached the server"
    assert int(server_synack.group(2)) == int(server_syn.group(1)) + 1
    # The firewall's SYN-ACK, its SYN, and an ACK to each end at the splice.
    assert metric(lan, "pairwall_synproxy_segments_sent_total") >= 4
    reasons = fw.reasons()
    assert reasons.get("synproxy", 0) >= 3 and reasons.get("bad_seq", 0) == 0, reasons
    states = fw.json("states", "proto", "tcp")["states"]
    assert states and all(s.get("synproxy") == "spliced" for s in states), states
    assert "synproxy spliced" in fw.ctl("states").stdout


def test_syns_without_a_handshake_never_reach_the_server(lan, daemon_factory, tmp_path):
    fw = daemon_factory(rules=RULES)
    log, dump = capture(lan, tmp_path, "server", lan.server, "s0", ALLOWED)
    syns = 20
    lan.client.exec(lan.python, "-c", HALF_OPEN, SERVER4, str(syns), str(ALLOWED), timeout=60)
    settle()
    # A real connection still goes through, and the capture sees the firewall's SYN for it: the
    # capture would have seen the half-open ones had they been sent on.
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    time.sleep(0.5)
    lan.topo.stop(dump)

    server_text = log.read_text()
    ports = [int(m.group(1)) for m in SYN_FROM_PORT.finditer(server_text)]
    assert ports, f"the capture saw no SYN at all:\n{server_text[-2000:]}"
    assert not [p for p in ports if 21000 <= p < 21000 + syns], f"a half-open SYN reached the server:\n{server_text[-2000:]}"
    # Each SYN was answered (and the client's kernel reset what it had not asked for: dropped too).
    assert metric(lan, "pairwall_synproxy_segments_sent_total") >= syns
    assert fw.reasons().get("synproxy", 0) >= syns, fw.reasons()
    waiting = [s for s in fw.json("states", "proto", "tcp")["states"] if s.get("synproxy") == "awaiting initiator"]
    assert len(waiting) == syns, waiting
