"""client — fw — server over veth in network namespaces named pd1-*, and helpers to drive traffic.

Every process started here is tracked and ended by its PID; the namespaces are deleted on teardown,
also after a failure. Every traffic loop is bounded in count and time.
"""

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
BIN_DIR = Path(os.environ.get("PAIRWALL_BIN_DIR", REPO / "build" / "bin"))
NFQ_NULL = BIN_DIR / "pairwall-nfq-null"
PREFIX = "pd1-"
PY = sys.executable

CLIENT4, FW4_C, FW4_S, SERVER4 = "10.231.1.2", "10.231.1.1", "10.231.2.1", "10.231.2.2"
CLIENT6, FW6_C, FW6_S, SERVER6 = "fd00:231:1::2", "fd00:231:1::1", "fd00:231:2::1", "fd00:231:2::2"


def need_root_and_binary():
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces and NFQUEUE")
    if not os.access(NFQ_NULL, os.X_OK):
        pytest.fail(f"{NFQ_NULL} not built (cmake --preset release && cmake --build --preset release)")


def run(*argv, check=True, timeout=30, capture=True):
    r = subprocess.run(list(argv), capture_output=capture, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed ({r.returncode}): {r.stderr.strip()}")
    return r


PING = r"""
import os, socket, struct, sys, time
def csum(b):
    if len(b) % 2: b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b)); s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
dst, count, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
v6 = ':' in dst
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_RAW,
                  socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP)
ident, ok = os.getpid() & 0xffff, 0
for seq in range(count):
    msg = struct.pack('!BBHHH', 128 if v6 else 8, 0, 0, ident, seq) + b'pairwall' * 7
    if not v6:
        msg = msg[:2] + struct.pack('!H', csum(msg)) + msg[4:]  # the kernel sums ICMPv6 itself
    s.sendto(msg, (dst, 0))
    end = time.time() + timeout
    while time.time() < end:
        s.settimeout(max(0.01, end - time.time()))
        try:
            d = s.recv(4096)
        except socket.timeout:
            break
        if not v6:
            d = d[(d[0] & 15) * 4:]
        if d[0] == (129 if v6 else 0) and struct.unpack('!HH', d[4:8]) == (ident, seq):
            ok += 1
            break
print(ok)
"""

SINK = r"""
import hashlib, socket, sys
v6 = ':' in sys.argv[1]
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); s.settimeout(float(sys.argv[3]))
print('listening', flush=True)
c, _ = s.accept(); c.settimeout(float(sys.argv[3]))
h, n = hashlib.sha256(), 0
while True:
    d = c.recv(1 << 16)
    if not d: break
    h.update(d); n += len(d)
c.sendall(f'{n} {h.hexdigest()}'.encode()); c.close()
"""

SEND = r"""
import hashlib, os, socket, sys
v6 = ':' in sys.argv[1]
data = os.urandom(int(sys.argv[3]))
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[4]))
s.sendall(data); s.shutdown(socket.SHUT_WR)
reply = b''
while True:
    d = s.recv(256)
    if not d: break
    reply += d
print(reply.decode(), len(data), hashlib.sha256(data).hexdigest())
"""

UDP_SINK = r"""
import socket, sys, time
v6 = ':' in sys.argv[1]
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2]))); s.settimeout(0.2)
print('listening', flush=True)
end, sizes = time.time() + float(sys.argv[3]), []
while time.time() < end:
    try:
        sizes.append(len(s.recv(65536)))
    except socket.timeout:
        pass
print(' '.join(map(str, sizes)))
"""

UDP_SEND = r"""
import socket, sys
dst, port, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
v6 = ':' in dst
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
if len(sys.argv) > 5:
    s.bind((sys.argv[5], 0))
if v6:
    s.setsockopt(socket.IPPROTO_IPV6, 23, 0)  # IPV6_MTU_DISCOVER = IPV6_PMTUDISC_DONT: fragment
else:
    s.setsockopt(socket.IPPROTO_IP, 10, 0)  # IP_MTU_DISCOVER = IP_PMTUDISC_DONT: fragment
for _ in range(count):
    s.sendto(b'f' * size, (dst, port))
"""


class Net:
    """client (c) — firewall (fw) — server (s); fw forwards IPv4 and IPv6."""

    def __init__(self):
        tag = f"{os.getpid() % 100000}"
        self.ns = {n: f"{PREFIX}{tag}-{n}" for n in ("c", "fw", "s")}
        self.procs = []

    def up(self):
        c, fw, s = self.ns["c"], self.ns["fw"], self.ns["s"]
        for n in (c, fw, s):
            run("ip", "netns", "add", n)
            run("ip", "-n", n, "link", "set", "lo", "up")
        run("ip", "link", "add", "pd1c0", "netns", c, "type", "veth", "peer", "name", "pd1f0", "netns", fw)
        run("ip", "link", "add", "pd1s0", "netns", s, "type", "veth", "peer", "name", "pd1f1", "netns", fw)
        for ns, dev, a4, a6 in ((c, "pd1c0", CLIENT4, CLIENT6), (fw, "pd1f0", FW4_C, FW6_C),
                                (fw, "pd1f1", FW4_S, FW6_S), (s, "pd1s0", SERVER4, SERVER6)):
            run("ip", "-n", ns, "addr", "add", f"{a4}/24", "dev", dev)
            run("ip", "-n", ns, "addr", "add", f"{a6}/64", "dev", dev, "nodad")
            run("ip", "-n", ns, "link", "set", dev, "up")
        run("ip", "-n", c, "route", "add", "default", "via", FW4_C)
        run("ip", "-n", s, "route", "add", "default", "via", FW4_S)
        run("ip", "-n", c, "-6", "route", "add", "default", "via", FW6_C)
        run("ip", "-n", s, "-6", "route", "add", "default", "via", FW6_S)
        self.exec("fw", "sysctl", "-qw", "net.ipv4.ip_forward=1")
        self.exec("fw", "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        # Neighbour discovery settles during the first exchanges; tests start once both families pass.
        for dst in (SERVER4, SERVER6):
            if not any(self.ping(dst, 1, 0.5) == 1 for _ in range(20)):
                raise RuntimeError(f"{dst} unreachable through the firewall namespace before any hook")
        return self

    def down(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        for n in self.ns.values():
            subprocess.run(["ip", "netns", "del", n], capture_output=True)

    def exec(self, where, *argv, **kw):
        return run("ip", "netns", "exec", self.ns[where], *map(str, argv), **kw)

    def spawn(self, where, *argv):
        p = subprocess.Popen(["ip", "netns", "exec", self.ns[where], *map(str, argv)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    # --- traffic -----------------------------------------------------------------------------------
    def ping(self, dst, count=3, timeout=1.0):
        r = self.exec("c", PY, "-c", PING, dst, count, timeout, timeout=count * timeout + 10)
        return int(r.stdout.strip())

    def tcp_transfer(self, dst, size, port=5001, timeout=20.0):
        """Sends `size` random bytes client -> server; returns True when they arrived intact."""
        sink = self.spawn("s", PY, "-c", SINK, dst, port, timeout)
        wait_line(sink, "listening", 10)
        r = self.exec("c", PY, "-c", SEND, dst, port, size, timeout, check=False, timeout=timeout + 10)
        sink.wait(timeout=timeout + 10)
        if r.returncode != 0:
            return False
        got_n, got_hash, sent_n, sent_hash = r.stdout.split()
        return got_n == sent_n and got_hash == sent_hash

    def udp_burst(self, dst, count, size, port=9999, listen_s=2.0, source=None):
        """Sends `count` datagrams of `size` bytes; returns the sizes the server received."""
        sink = self.spawn("s", PY, "-c", UDP_SINK, dst, port, listen_s)
        wait_line(sink, "listening", 10)
        argv = [PY, "-c", UDP_SEND, dst, port, count, size] + ([source] if source else [])
        self.exec("c", *argv, timeout=30)
        out, _ = sink.communicate(timeout=listen_s + 10)
        return [int(x) for x in out.split()]

    # --- the listener ------------------------------------------------------------------------------
    def start_null(self, *args):
        p = self.spawn("fw", NFQ_NULL, *args)
        wait_line(p, "ready", 10, stream="stderr")
        return p

    def iptables(self, *args, v6=False):
        return self.exec("fw", "ip6tables" if v6 else "iptables", *args)

    def rules(self, v6=False):
        return self.iptables("-S", v6=v6).stdout.splitlines()


def wait_line(proc, text, timeout, stream="stdout"):
    pipe = proc.stdout if stream == "stdout" else proc.stderr
    end = time.time() + timeout
    seen = ""
    while time.time() < end:
        ready, _, _ = select.select([pipe], [], [], max(0.0, end - time.time()))
        if not ready:
            break
        line = pipe.readline()
        if not line:
            break
        seen += line
        if text in line:
            return
    rest = ""
    if proc.poll() is not None:
        rest = (proc.stderr.read() if stream == "stdout" else "") or ""
    raise AssertionError(f"no '{text}' from {proc.args} within {timeout}s: {seen}{rest}")


def stop_null(proc, timeout=15):
    """SIGTERM, then the counters the listener prints on exit."""
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"listener exit {proc.returncode}: {err}"
    return json.loads(out)


def udp_counters(net, where):
    """(InDatagrams, InErrors) of UDP in a namespace, from /proc/net/snmp: what reached the host,
    whether or not the receiving socket had room for it."""
    lines = [l.split() for l in net.exec(where, "cat", "/proc/net/snmp").stdout.splitlines() if l.startswith("Udp:")]
    row = dict(zip(lines[0][1:], map(int, lines[1][1:])))
    return row["InDatagrams"], row["InErrors"]


def steal_ticks():
    """(steal, total) jiffies from /proc/stat: CPU steal next to every figure, without mpstat."""
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return fields[7], sum(fields)
