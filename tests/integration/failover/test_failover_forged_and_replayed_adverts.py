"""Advertisements an attacker on the LAN can send — forged (no key), captured and replayed, sent
from behind a router (TTL < 255), truncated, garbage — are rejected and counted by reason, and
do not change the master. Replaying the dead master's last advertisements does not delay the
backup's takeover either."""

import hashlib
import hmac
import json
import struct
import time

from failover_net import KEY, PORT, monotonic_us

GROUP = "224.0.0.18"

CAPTURE = r"""
import socket, struct, sys, binascii
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("224.0.0.18", %d))
s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton("224.0.0.18") + socket.inet_aton("10.31.0.10"))
s.settimeout(5)
for _ in range(int(sys.argv[1])):
    print(binascii.hexlify(s.recv(2048)).decode(), flush=True)
""" % PORT

SEND = r"""
import socket, sys, time, binascii, json
frames = json.loads(sys.argv[1]); ttl = int(sys.argv[2]); repeat = int(sys.argv[3]); gap = float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("10.31.0.10"))
for _ in range(repeat):
    for f in frames:
        s.sendto(binascii.unhexlify(f), ("224.0.0.18", %d))
    time.sleep(gap)
""" % PORT


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def frame(key, node_id, advskew=0, demotion=0, epoch=1, counter=1, leaving=False, vhid=1, version=1):
    body = (b"\x08" + varint(node_id) + b"\x10" + varint(200) + b"\x18" + varint(advskew) + b"\x20" +
            varint(demotion) + b"\x28" + varint(epoch) + b"\x30" + varint(counter) +
            (b"\x38\x01" if leaving else b""))
    head = b"PWFA" + bytes([version, vhid]) + struct.pack(">H", len(body))
    return head + body + hmac.new(key, head + body, hashlib.sha256).digest()


def send(p, frames, ttl=255, repeat=1, gap=0.0):
    p.nsexec("c0", "/usr/bin/python3", "-c", SEND, json.dumps([f.hex() for f in frames]), str(ttl), str(repeat),
             str(gap), timeout=60)


def rejects(p, node):
    return p.status(node)["rejects"]


def test_forged_and_replayed_adverts_are_rejected(pair_factory, report):
    p = pair_factory(advbase_ms=200, ipv6=False)
    p.start("a")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=5)

    captured = [bytes.fromhex(x) for x in p.nsexec("c0", "/usr/bin/python3", "-c", CAPTURE, "3").stdout.split()]
    assert len(captured) == 3 and all(c.startswith(b"PWFA") for c in captured)

    before = rejects(p, "b")
    wrong = b"not the key of this pair, 32 bytes"
    forged = [
        frame(wrong, node_id=3),                            # a better master, no key
        frame(wrong, node_id=1, leaving=True, counter=2**40),  # "the master leaves", no key
        frame(KEY.encode(), node_id=1, version=2),          # a version we do not speak
        frame(wrong, node_id=3, vhid=2),                    # another group
    ]
    send(p, forged, repeat=10, gap=0.05)
    send(p, captured, repeat=10, gap=0.05)                  # replayed: older than what B has seen
    send(p, [captured[-1]], ttl=64)                         # from behind a router
    send(p, [captured[0][:20], b"garbage!" * 3, b"PW"])     # truncated and garbage
    time.sleep(0.5)
    after = rejects(p, "b")
    delta = {k: after[k] - before[k] for k in after}
    report(test="forged_replayed", rejects_delta=delta)
    assert delta["bad_tag"] >= 20
    assert delta["bad_version"] >= 10
    assert delta["wrong_vhid"] >= 10
    assert delta["replay"] + delta["duplicate"] >= 30
    assert delta["bad_ttl"] >= 1
    assert delta["truncated"] >= 2
    assert delta["malformed"] >= 1
    assert p.role("a") == "master" and p.role("b") == "backup"
    assert p.holds_vips("a") and not p.holds_any_vip("b")
    assert p.ctl("b", "status")  # and it is still running

    # The master dies while its captured advertisements are replayed every 50 ms: B still times it out.
    fresh = [bytes.fromhex(x) for x in p.nsexec("c0", "/usr/bin/python3", "-c", CAPTURE, "2").stdout.split()]
    t_kill = monotonic_us()
    p.kill("a")
    send(p, fresh + captured, repeat=30, gap=0.05)
    p.wait_roles({"b": "master"}, timeout=3)
    took_ms = (p.last_transition("b", "master")["at_us"] - t_kill) / 1000
    report(test="replay_during_kill", advbase_ms=200, takeover_ms=round(took_ms, 1))
    assert took_ms <= 3 * 200 + 100 / 256 * 200 + 100
