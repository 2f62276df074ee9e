#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_engine (tests/fuzz/corpus/engine): short conversations through
the fuzz target's firewall, one file each, in its record format (see fuzz_engine.cc). Checksums
are left zero and the records ask the target to make them valid, so that mutated seeds still
carry valid checksums where the mutation left the control byte alone.

    python3 tests/fuzz/make_engine_seeds.py
"""
import ipaddress
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "engine")

# Where a packet is seen (bits 0-2 of the control byte).
LAN_TO_WAN, WAN_TO_LAN, PRE_WAN, PRE_LAN = 0, 1, 2, 3
CONTROL = 7  # then the first byte: 0 reload, 1 flush, 2 kill (by port parity), 3 bulk to the peer
ALONE = 0x08
MS, SECOND, PAST_TIMEOUTS = 0x10, 0x20, 0x30
VALID = 0x40
PARTIAL = 0x80

SYN, FIN, RST, PSH, ACK = 0x02, 0x01, 0x04, 0x08, 0x10


def addr(a):
    return ipaddress.ip_address(a).packed


def ip(src, dst, proto, l4, ttl=64, ident=1, frag=0):
    if ":" in src:
        return struct.pack("!IHBB", 6 << 28, len(l4), proto, ttl) + addr(src) + addr(dst) + l4
    return struct.pack("!BBHHHBBH", 0x45, 0, 20 + len(l4), ident, frag, ttl, proto, 0) + addr(src) + addr(dst) + l4


def tcp(sport, dport, seq, ack, flags, payload=b"", win=64240, options=b""):
    options += b"\x00" * (-len(options) % 4)
    offset = (20 + len(options)) // 4
    return struct.pack("!HHIIBBHHH", sport, dport, seq, ack, offset << 4, flags, win, 0, 0) + options + payload


SYN_OPTIONS = bytes([2, 4, 0x05, 0xB4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7])  # MSS 1460, SACK, TS, ws 7


def udp(sport, dport, payload):
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


def icmp(kind, code, rest, body=b""):
    return struct.pack("!BBH", kind, code, 0) + rest + body


def record(control, packet):
    return struct.pack("!BH", control | VALID, len(packet)) + packet


def tcp_conversation(client, server, outside, nat_port, sport=33000, dport=443, alone=0):
    c, s = 1000, 5000
    return [
        record(LAN_TO_WAN | alone, ip(client, server, 6, tcp(sport, dport, c, 0, SYN, options=SYN_OPTIONS))),
        record(WAN_TO_LAN | MS, ip(server, outside, 6, tcp(dport, nat_port, s, c + 1, SYN | ACK, options=SYN_OPTIONS))),
        record(LAN_TO_WAN | alone, ip(client, server, 6, tcp(sport, dport, c + 1, s + 1, ACK))),
        record(LAN_TO_WAN, ip(client, server, 6, tcp(sport, dport, c + 1, s + 1, PSH | ACK, b"x" * 100))),
        record(WAN_TO_LAN | MS, ip(server, outside, 6, tcp(dport, nat_port, s + 1, c + 101, ACK))),
        record(LAN_TO_WAN | PARTIAL, ip(client, server, 6, tcp(sport, dport, c + 101, s + 1, FIN | ACK))),
        record(WAN_TO_LAN, ip(server, outside, 6, tcp(dport, nat_port, s + 1, c + 102, FIN | ACK))),
        record(LAN_TO_WAN | ALONE, ip(client, server, 6, tcp(sport, dport, c + 102, s + 2, ACK))),
    ]


def control(op, arg=0):
    return struct.pack("!BHBB", CONTROL, 2, op, arg)


def seeds():
    tcp_nat = tcp_conversation("10.1.0.12", "192.0.2.82", "203.0.113.1", 40000)
    udp_out = record(LAN_TO_WAN, ip("10.1.0.14", "192.0.2.53", 17, udp(33005, 53, b"q" * 8)))
    yield "control-reload-bulk-kill-flush", (tcp_nat[:3] + [control(0), control(3)] + tcp_nat[3:5] +
                                             [udp_out, control(2, 1), control(0)] + tcp_nat[5:] + [control(1)])
    yield "v4-tcp-nat", tcp_conversation("10.1.0.10", "192.0.2.80", "203.0.113.1", 40000)
    yield "v4-tcp-nat-alone", tcp_conversation("10.1.0.11", "192.0.2.81", "203.0.113.1", 40000, alone=ALONE)
    yield "v4-tcp-binat", tcp_conversation("10.1.0.5", "192.0.2.80", "203.0.113.5", 33000)

    out = ip("10.1.0.10", "192.0.2.53", 17, udp(33001, 53, b"q" * 20))
    back = ip("192.0.2.53", "203.0.113.1", 17, udp(53, 40000, b"a" * 40))
    quote = ip("203.0.113.1", "192.0.2.53", 17, udp(40000, 53, b"q" * 20))
    yield "v4-udp-nat-icmp-error", [
        record(LAN_TO_WAN, out),
        record(WAN_TO_LAN | MS, back),
        record(LAN_TO_WAN | SECOND, out),
        record(WAN_TO_LAN | ALONE, ip("192.0.2.53", "203.0.113.1", 1, icmp(3, 3, b"\0\0\0\0", quote[:28]))),
        record(LAN_TO_WAN | PAST_TIMEOUTS, out),
    ]

    syn = tcp(50000, 80, 7000, 0, SYN, options=SYN_OPTIONS)
    yield "v4-rdr-prerouting", [
        record(PRE_WAN, ip("198.51.100.7", "203.0.113.1", 6, syn)),
        record(WAN_TO_LAN, ip("198.51.100.7", "10.1.0.80", 6, tcp(50000, 8080, 7000, 0, SYN, options=SYN_OPTIONS))),
        record(LAN_TO_WAN | MS, ip("10.1.0.80", "198.51.100.7", 6, tcp(8080, 50000, 9000, 7001, SYN | ACK))),
        record(PRE_LAN, ip("10.1.0.80", "198.51.100.7", 6, tcp(8080, 50000, 9001, 7001, ACK))),
        record(PRE_WAN | ALONE, ip("198.51.100.7", "203.0.113.1", 17, udp(50001, 5003, b"d" * 8))),
    ]

    yield "v4-modulated-and-clamped", [
        record(LAN_TO_WAN, ip("10.1.0.12", "192.0.2.80", 6, tcp(33002, 80, 1, 0, SYN, options=SYN_OPTIONS))),
        record(WAN_TO_LAN, ip("192.0.2.80", "203.0.113.1", 6, tcp(80, 40000, 2, 2, SYN | ACK, options=SYN_OPTIONS))),
        record(LAN_TO_WAN | ALONE, ip("10.1.0.12", "192.0.2.80", 6, tcp(33002, 80, 2, 3, ACK), ttl=1)),
        record(WAN_TO_LAN, ip("192.0.2.80", "203.0.113.1", 6, tcp(80, 40000, 3, 2, RST))),
    ]

    payload = udp(33003, 9999, b"f" * 32)
    yield "v4-fragments", [
        record(LAN_TO_WAN, ip("10.1.0.13", "192.0.2.80", 17, payload[:24], ident=77, frag=0x2000)),
        record(LAN_TO_WAN, ip("10.1.0.13", "192.0.2.80", 17, payload[24:], ident=77, frag=3)),
    ]

    echo = icmp(128, 0, struct.pack("!HH", 77, 1), b"ping")
    reply = icmp(129, 0, struct.pack("!HH", 77, 1), b"ping")
    yield "v6-echo-nat", [
        record(LAN_TO_WAN, ip("2001:db8:1::10", "2001:db8:2::80", 58, echo)),
        record(WAN_TO_LAN | MS, ip("2001:db8:2::80", "2001:db8:ff::1", 58, reply)),
        record(WAN_TO_LAN | ALONE, ip("2001:db8:2::80", "2001:db8:ff::1", 58,
                                      icmp(1, 4, b"\0\0\0\0", ip("2001:db8:ff::1", "2001:db8:2::80", 58, echo)))),
    ]
    # synproxy state behind nat: the initial sequence numbers the node draws follow from the
    # target's fixed random seed (0x5eed + 1: SipHash-1-3 of the draw's count, 1 then 2), so that
    # the conversation reaches the splice and the spliced data.
    p, q = 1834724544, 2765880523
    client, server, outside = "10.1.0.15", "192.0.2.84", "203.0.113.1"
    yield "v4-synproxy-nat", [
        record(LAN_TO_WAN, ip(client, server, 6, tcp(33010, 8443, 1000, 0, SYN, options=SYN_OPTIONS))),
        record(LAN_TO_WAN | MS, ip(client, server, 6, tcp(33010, 8443, 1001, p + 1, ACK))),
        record(WAN_TO_LAN | ALONE, ip(server, outside, 6, tcp(8443, 40000, 5000, q + 1, SYN | ACK))),
        record(LAN_TO_WAN, ip(client, server, 6, tcp(33010, 8443, 1001, p + 1, PSH | ACK, b"x" * 100))),
        record(WAN_TO_LAN, ip(server, outside, 6, tcp(8443, 40000, 5001, q + 101, PSH | ACK, b"y" * 50))),
    ]
    yield "v6-tcp-syn", [
        record(LAN_TO_WAN, ip("2001:db8:1::10", "2001:db8:2::80", 6, tcp(33004, 22, 1000, 0, SYN, options=SYN_OPTIONS))),
        record(WAN_TO_LAN, ip("2001:db8:2::80", "2001:db8:1::10", 6, tcp(22, 33004, 5000, 1001, SYN | ACK))),
        record(PRE_WAN | ALONE, ip("2001:db8:bad::1", "2001:db8:1::10", 17, udp(1, 2, b""))),
    ]


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, records in seeds():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(b"".join(records))


if __name__ == "__main__":
    main()
