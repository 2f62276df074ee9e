#!/usr/bin/python3
"""Sends gratuitous ARP for addresses on an interface (the lab's scripted takeover with --driver none).

  garp.py IFNAME ADDR [ADDR...] [--count 3] [--interval-ms 100]

Standard library only (AF_PACKET), run inside a namespace by `ip netns exec`.
"""

import argparse
import socket
import struct
import sys
import time

ETH_P_ARP = 0x0806
BROADCAST = b"\xff" * 6


def mac_of(ifname):
    with open(f"/sys/class/net/{ifname}/address", encoding="ascii") as f:
        return bytes.fromhex(f.read().strip().replace(":", ""))


def garp_frame(mac, addr):
    # RFC 5227 section 3: an ARP announcement is a request with sender and target IP both set to the
    # address; Linux updates existing neighbour entries from it (arp_accept only governs new ones).
    ip4 = socket.inet_aton(addr)
    arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, mac, ip4, b"\0" * 6, ip4)
    return BROADCAST + mac + struct.pack("!H", ETH_P_ARP) + arp


def send(ifname, addrs, count=3, interval_ms=100):
    mac = mac_of(ifname)
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ARP)) as s:
        s.bind((ifname, 0))
        for i in range(count):
            for a in addrs:
                s.send(garp_frame(mac, a))
            if i + 1 < count:
                time.sleep(interval_ms / 1000.0)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ifname")
    p.add_argument("addrs", nargs="+")
    p.add_argument("--count", type=int, default=3)
    p.add_argument("--interval-ms", type=float, default=100)
    a = p.parse_args(argv)
    send(a.ifname, a.addrs, min(a.count, 100), a.interval_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
