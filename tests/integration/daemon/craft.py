"""Sends malformed packets from inside a namespace towards DST, through the firewall, with scapy
over a raw IP socket (the kernel fills in the IP total length and checksum; everything after the
IP header is sent as built). Prints {"sent": {kind: count}} as one JSON line.

Only malformations that reach the firewall's packet hook are sent: a bad IHL or IPv4 total length
is already dropped by the receiving kernel's ip_rcv() before any netfilter hook, so the engine
never sees those from the wire (its unit tests cover them with crafted bytes).

    craft.py DST [--count N]
"""

import argparse
import json

from scapy.all import IP, TCP, UDP, L3RawSocket, Raw, conf, send

conf.verb = 0
# A raw IP socket: the namespace's kernel routes the packets and picks their source address.
conf.L3socket = L3RawSocket


def packets(dst):
    """(kind, packet) pairs; the kind names the engine reason expected to count it."""
    yield "short", IP(dst=dst, proto=6) / Raw(b"\x1f\x90\x1f\x90" + b"\x00" * 6)  # 10 bytes of "TCP"
    yield "bad_tcp_header", IP(dst=dst) / TCP(sport=40001, dport=8080, dataofs=15, flags="S") / Raw(b"x" * 4)
    yield "bad_tcp_header", IP(dst=dst) / TCP(sport=40002, dport=8080, dataofs=3, flags="S")
    # A 24-byte TCP header whose one option (MSS) claims 9 bytes: it runs past the header.
    yield "bad_tcp_options", IP(dst=dst) / TCP(sport=40003, dport=8080, flags="S", dataofs=6) / Raw(b"\x02\x09\x05\xb4")
    yield "bad_tcp_flags", IP(dst=dst) / TCP(sport=40004, dport=8080, flags="SF")
    yield "bad_tcp_flags", IP(dst=dst) / TCP(sport=40005, dport=8080, flags=0)
    yield "bad_udp_header", IP(dst=dst) / UDP(sport=40006, dport=5353, len=200) / Raw(b"y" * 10)
    yield "bad_udp_header", IP(dst=dst) / UDP(sport=40007, dport=5353, len=4) / Raw(b"y" * 10)
    yield "short", IP(dst=dst, proto=17) / Raw(b"\x13\x89\x14")
    yield "bad_icmp", IP(dst=dst, proto=1) / Raw(b"\x08\x00\x00")  # 3 bytes of an echo request


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dst")
    p.add_argument("--count", type=int, default=3)
    args = p.parse_args()
    sent = {}
    for kind, pkt in packets(args.dst):
        # Build once so scapy fills lengths and checksums where they were not forced.
        raw = bytes(pkt)
        for _ in range(args.count):
            send(IP(raw), verbose=False)
        sent[kind] = sent.get(kind, 0) + args.count
    print(json.dumps({"sent": sent}), flush=True)


if __name__ == "__main__":
    main()
