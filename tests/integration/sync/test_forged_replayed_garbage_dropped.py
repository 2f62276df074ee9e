"""Datagrams node B must refuse — forged with a wrong key, captured and played again, cut short,
garbage, or sent with a TTL other than 255 (from beyond the sync link, RFC 5082) — are dropped and
counted by reason; B keeps running and keeps syncing."""

import hashlib
import hmac
import json
import os
import struct
import time

from netns import wait_until
from sync_pair import SERVER, SYNC, SYNC_PORT, TCP_PORT

SENDER = r"""
import socket, sys
dst, port, ttl = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"sync0")
s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
n = 0
for line in sys.stdin:
    s.sendto(bytes.fromhex(line.strip()), (dst, port))
    n += 1
print(n)
"""


def read_pcap_udp_payloads(path, port):
    """UDP payloads to `port` from an Ethernet pcap (tcpdump -w), without scapy."""
    data = path.read_bytes()
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xa1b2c3d4, 0xa1b23c4d) else ">"
    off = 24
    out = []
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        frame = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if len(frame) < 14 + 20 or frame[12:14] != b"\x08\x00":
            continue
        ip = frame[14:]
        ihl = (ip[0] & 0x0f) * 4
        if ip[9] != 17:
            continue
        udp = ip[ihl:]
        if struct.unpack("!H", udp[2:4])[0] != port:
            continue
        out.append(udp[8:struct.unpack("!H", udp[4:6])[0]])
    return out


def forge(template, key):
    """`template` with its tag recomputed under `key` (HMAC-SHA256 truncated to 16 bytes)."""
    body = template[:-16]
    return body + hmac.new(key, body, hashlib.sha256).digest()[:16]


def test_forged_replayed_garbage_dropped(make_pair):
    pair = make_pair().start()
    # Capture what A sends B while a connection is made.
    pcap = pair.work / "sync.pcap"
    dump = pair.topo.spawn(pair.ns["fwB"], ["tcpdump", "-i", "sync0", "-U", "-w", str(pcap), "udp", "port",
                                            str(SYNC_PORT)], log=pair.work / "tcpdump.log")
    time.sleep(1.0)
    pair.flows("client", "churn", SERVER, TCP_PORT, "--seconds", 1, "--rate", 20)
    time.sleep(0.5)
    pair.topo.stop(dump)
    captured = [d for d in read_pcap_udp_payloads(pcap, SYNC_PORT)]
    from_a = [d for d in captured if len(d) >= 84 and struct.unpack("!I", d[4:8])[0] == 1]
    assert len(from_a) >= 10, f"captured {len(captured)} datagrams, {len(from_a)} from fwA"

    before = pair.b.sync_status()
    drops0 = {k: int(v) for k, v in before.get("drops", {}).items()}
    wrong_key = os.urandom(32)
    datagrams = []
    datagrams += [forge(d, wrong_key) for d in from_a[:10]]           # bad_tag
    datagrams += list(from_a)                                       # replay
    datagrams += [d[:40] for d in from_a[:5]]                       # truncated (header cut)
    datagrams += [d[:-1] for d in from_a[:5]]                       # truncated (tag cut)
    datagrams += [os.urandom(200) for _ in range(10)]               # garbage: bad_magic (almost surely)
    datagrams += [b"PW\x07" + os.urandom(100) for _ in range(5)]      # another version
    stdin = "".join(d.hex() + "\n" for d in datagrams)
    # Played from A's side of the link, as an attacker on it would, with the TTL sync is sent with.
    cp = pair.ns["fwA"].exec(pair.python, "-c", SENDER, SYNC["fwB"], str(SYNC_PORT), "255", input=stdin)
    assert int(cp.stdout.strip()) == len(datagrams)
    # A's own datagrams with a router's worth less, as from beyond the link: refused before their tag.
    stdin = "".join(d.hex() + "\n" for d in from_a)
    cp = pair.ns["fwA"].exec(pair.python, "-c", SENDER, SYNC["fwB"], str(SYNC_PORT), "254", input=stdin)
    assert int(cp.stdout.strip()) == len(from_a)

    def drops():
        d = {k: int(v) for k, v in pair.b.sync_status().get("drops", {}).items()}
        return {k: d.get(k, 0) - drops0.get(k, 0) for k in d}

    expect = {"bad_tag": 10, "replay": len(from_a), "truncated": 10, "bad_magic": 10, "bad_version": 5,
              "bad_ttl": len(from_a)}
    got = wait_until(lambda: (lambda d: d if all(d.get(k, 0) >= v for k, v in expect.items()) else None)(drops()),
                     5, what="drops counted")
    print(f"\ndropped by fwB: {json.dumps(got)}")
    for k, v in expect.items():
        assert got[k] == v, got
    assert pair.b.alive()

    # Nothing applied from them, and sync goes on.
    n_b = pair.b.state_count()
    assert n_b == pair.a.state_count()
    pair.flows("client", "churn", SERVER, TCP_PORT, "--seconds", 0.5, "--rate", 20)
    wait_until(lambda: pair.b.state_count() == pair.a.state_count() > n_b, 5, what="new states on fwB")
    assert pair.b.sync_status()["peer_state"] == "UP"
