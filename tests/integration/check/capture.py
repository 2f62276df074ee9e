"""Writes a capture for pairwall-check's replay test with scapy (independent of the engine's own
parser and of its unit tests' packet builder), and prints, as one JSON list, what the engine must
decide for each frame: verdict, reason, and the deciding rule (0-based) or "state" with the
connection the state belongs to.

    capture.py OUT.pcap
"""

import json
import sys

from scapy.all import IP, TCP, UDP, Ether, IPv6, Raw, wrpcap

# The rule file the test writes, by line: 0 block all, 1 pass in tcp 80, 2 pass out tcp 80,
# 3 pass in udp 53, 4 pass out udp 53.
BLOCK_ALL, PASS_IN_TCP, PASS_IN_UDP = 0, 1, 3
C4, S4 = "10.1.0.10", "192.0.2.80"
C6, S6 = "2001:db8:1::10", "2001:db8:2::80"


def v4(src, dst):
    return Ether() / IP(src=src, dst=dst)


def v6(src, dst):
    return Ether() / IPv6(src=src, dst=dst)


def frames():
    """(frame, verdict, reason, rule or "state", connection)."""
    return [
        (v4(C4, S4) / TCP(sport=40000, dport=80, flags="S", seq=1000), "pass", "match", PASS_IN_TCP, "tcp4"),
        (v4(S4, C4) / TCP(sport=80, dport=40000, flags="SA", seq=9000, ack=1001), "pass", "state", "state", "tcp4"),
        (v4(C4, S4) / TCP(sport=40000, dport=80, flags="A", seq=1001, ack=9001), "pass", "state", "state", "tcp4"),
        (v4(C4, S4) / TCP(sport=40000, dport=80, flags="PA", seq=1001, ack=9001) / Raw(b"x" * 100),
         "pass", "state", "state", "tcp4"),
        # Data far past the window the client opened: dropped by the state's tracking, which names
        # the state's rule. (A pure ACK would pass: pf only checks its ack.)
        (v4(S4, C4) / TCP(sport=80, dport=40000, flags="PA", seq=9001 + 50_000_000, ack=1101) / Raw(b"y" * 10),
         "drop", "bad_seq", PASS_IN_TCP, None),
        (v4(C4, S4) / TCP(sport=40001, dport=22, flags="S"), "drop", "rule_block", BLOCK_ALL, None),
        # A reply nobody asked for: the rules, which block it.
        (v4(S4, C4) / TCP(sport=80, dport=40002, flags="SA"), "drop", "rule_block", BLOCK_ALL, None),
        (v4(C4, S4) / UDP(sport=5353, dport=53) / Raw(b"q" * 20), "pass", "match", PASS_IN_UDP, "udp4"),
        (v4(S4, C4) / UDP(sport=53, dport=5353) / Raw(b"r" * 40), "pass", "state", "state", "udp4"),
        (v6(C6, S6) / TCP(sport=50000, dport=80, flags="S", seq=7), "pass", "match", PASS_IN_TCP, "tcp6"),
        (v6(S6, C6) / TCP(sport=80, dport=50000, flags="SA", seq=70, ack=8), "pass", "state", "state", "tcp6"),
        (v4(C4, S4) / TCP(sport=40000, dport=80, flags="FA", seq=1101, ack=9001), "pass", "state", "state",
         "tcp4"),
    ]


def main():
    out = sys.argv[1]
    table = frames()
    packets = []
    for i, (frame, *_) in enumerate(table):
        frame.time = 1_700_000_000 + i * 0.01
        packets.append(frame)
    # Last, a frame cut inside its TCP header: dropped and named, and the replay goes on.
    cut = Ether(bytes(packets[0])[:14 + 20 + 10])
    cut.time = 1_700_000_001
    packets.append(cut)
    wrpcap(out, packets)
    expected = [{"summary": f.summary(), "verdict": v, "reason": r, "rule": rule, "connection": c}
                for f, v, r, rule, c in table]
    expected.append({"summary": "truncated TCP", "verdict": "drop", "reason": ["short", "bad_tcp_header"],
                     "rule": None, "connection": None})
    print(json.dumps(expected))


if __name__ == "__main__":
    main()
