"""Traffic endpoints for the daemon scenarios, run inside a namespace. Every mode is bounded in
time; results are one JSON line on stdout.

  peer.py serve --tcp 8080 8081 --udp 5353 --lifetime 120
      TCP and UDP echo servers on every address (IPv4 and IPv6), until the lifetime ends.
  peer.py connect HOST PORT [--timeout 2] [--bytes 1000] [--source ADDR]
      {"result": "ok" | "timeout" | "refused" | "reset" | "error", "echoed": N, "seconds": S}
  peer.py udp HOST PORT [--timeout 2]
      {"result": "ok" | "timeout" | "error", ...}
  peer.py ping HOST [--count 3] [--timeout 1] [--ident N]
      ICMP / ICMPv6 echo over a raw socket: {"sent": N, "received": M}
  peer.py hold HOST PORT [--lifetime 120]
      Opens one TCP connection and prints {"connected": true} (or the connect result and exits);
      then for each line read on stdin, sends 1000 bytes and prints {"echo": true|false, ...}.
  peer.py whoami --tcp 8090 --udp 5390 --lifetime 120
      Answers every TCP connection and UDP datagram with one JSON line naming the peer as this
      end saw it, {"address": A, "port": P}, on every address (IPv4 and IPv6).
  peer.py ask HOST PORT [--udp] [--timeout 2]
      Asks a whoami server: {"result": "ok" | "timeout" | ..., "seen": {"address", "port"} (as the
      server saw us), "local": {...} (our own end), "reply_from": {...} (the reply's source)}.
  peer.py watch-echo --family 4|6 [--count 3] [--timeout 5]
      Prints {"listening": true}, then records the echo requests arriving at this namespace until
      `count` are seen or the timeout passes: {"requests": [{"src": A, "id": I, "seq": S}, ...]}.
"""

import argparse
import errno
import json
import os
import select
import socket
import struct
import sys
import threading
import time

PAYLOAD = bytes(range(256)) * 4  # 1024 distinct-ish bytes, so a short echo is noticed


def emit(obj):
    print(json.dumps(obj), flush=True)


def family_of(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


# -- servers


def tcp_echo_client(conn, deadline):
    conn.settimeout(1.0)
    with conn:
        while time.monotonic() < deadline:
            try:
                data = conn.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if not data:
                return
            try:
                conn.sendall(data)
            except OSError:
                return


def tcp_server(family, port, deadline):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
    s.listen(128)
    s.settimeout(0.5)
    while time.monotonic() < deadline:
        try:
            conn, _ = s.accept()
        except socket.timeout:
            continue
        threading.Thread(target=tcp_echo_client, args=(conn, deadline), daemon=True).start()
    s.close()


def udp_server(family, port, deadline):
    s = socket.socket(family, socket.SOCK_DGRAM)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
    s.settimeout(0.5)
    while time.monotonic() < deadline:
        try:
            data, peer = s.recvfrom(65536)
        except socket.timeout:
            continue
        s.sendto(data, peer)
    s.close()


def serve(args):
    deadline = time.monotonic() + args.lifetime
    threads = []
    for port in args.tcp:
        for fam in (socket.AF_INET, socket.AF_INET6):
            threads.append(threading.Thread(target=tcp_server, args=(fam, port, deadline), daemon=True))
    for port in args.udp:
        for fam in (socket.AF_INET, socket.AF_INET6):
            threads.append(threading.Thread(target=udp_server, args=(fam, port, deadline), daemon=True))
    for t in threads:
        t.start()
    emit({"serving": True})
    while time.monotonic() < deadline:
        time.sleep(0.2)


def endpoint(sockaddr):
    return {"address": sockaddr[0], "port": sockaddr[1]}


def bound(family, kind, port):
    s = socket.socket(family, kind)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
    s.settimeout(0.5)
    if kind == socket.SOCK_STREAM:
        s.listen(128)
    return s


def whoami_tcp(s, deadline):
    while time.monotonic() < deadline:
        try:
            conn, peer = s.accept()
        except socket.timeout:
            continue
        with conn:
            conn.settimeout(1.0)
            try:
                conn.sendall(json.dumps(endpoint(peer)).encode() + b"\n")
            except OSError:
                pass
    s.close()


def whoami_udp(s, deadline):
    while time.monotonic() < deadline:
        try:
            _, peer = s.recvfrom(65536)
        except socket.timeout:
            continue
        s.sendto(json.dumps(endpoint(peer)).encode() + b"\n", peer)
    s.close()


def whoami(args):
    deadline = time.monotonic() + args.lifetime
    threads = []
    # Bound before "serving" is printed, so that a question asked right after it finds them.
    for fam in (socket.AF_INET, socket.AF_INET6):
        for port in args.tcp:
            threads.append(threading.Thread(target=whoami_tcp, args=(bound(fam, socket.SOCK_STREAM, port), deadline),
                                            daemon=True))
        for port in args.udp:
            threads.append(threading.Thread(target=whoami_udp, args=(bound(fam, socket.SOCK_DGRAM, port), deadline),
                                            daemon=True))
    for t in threads:
        t.start()
    emit({"serving": True})
    while time.monotonic() < deadline:
        time.sleep(0.2)


# -- clients


def echo_round(sock, size, timeout):
    """Sends `size` bytes and reads them back; returns the number of bytes echoed in time."""
    data = (PAYLOAD * (size // len(PAYLOAD) + 1))[:size]
    sock.sendall(data)
    got = b""
    deadline = time.monotonic() + timeout
    while len(got) < size and time.monotonic() < deadline:
        r, _, _ = select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
        if not r:
            break
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return len(got) if got == data[:len(got)] else -1


def open_connection(host, port, timeout, source=None, tos=None):
    """Returns (socket or None, result string). `tos`: the IPv4 TOS or IPv6 traffic class to send with."""
    family = family_of(host)
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(timeout)
    if source:
        s.bind((source, 0))
    if tos is not None:
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, tos)
        else:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    try:
        s.connect((host, port))
    except socket.timeout:
        s.close()
        return None, "timeout"
    except ConnectionRefusedError:
        s.close()
        return None, "refused"
    except ConnectionResetError:
        s.close()
        return None, "reset"
    except OSError as e:
        s.close()
        if e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return None, "unreachable"
        return None, f"error: {e}"
    return s, "ok"


def connect(args):
    t0 = time.monotonic()
    s, result = open_connection(args.host, args.port, args.timeout, args.source, args.tos)
    echoed = 0
    if s is not None:
        try:
            echoed = echo_round(s, args.bytes, args.timeout)
        except OSError as e:
            result = f"error: {e}"
        finally:
            s.close()
        if result == "ok" and echoed != args.bytes:
            result = "short-echo"
    emit({"result": result, "echoed": echoed, "seconds": round(time.monotonic() - t0, 3)})


def udp(args):
    t0 = time.monotonic()
    s = socket.socket(family_of(args.host), socket.SOCK_DGRAM)
    s.settimeout(args.timeout)
    result = "ok"
    try:
        s.sendto(b"pairwall-udp-probe", (args.host, args.port))
        data, _ = s.recvfrom(65536)
        if data != b"pairwall-udp-probe":
            result = "wrong-reply"
    except socket.timeout:
        result = "timeout"
    except OSError as e:
        result = f"error: {e}"
    finally:
        s.close()
    emit({"result": result, "seconds": round(time.monotonic() - t0, 3)})


def ask(args):
    """One question to a whoami server; see the module docstring."""
    t0 = time.monotonic()
    out = {"result": "ok"}
    if args.udp:
        s = socket.socket(family_of(args.host), socket.SOCK_DGRAM)
        s.settimeout(args.timeout)
        try:
            s.sendto(b"whoami", (args.host, args.port))
            # Unconnected, so that an answer from any source is received and reported; the source
            # address the kernel picks comes from a connected twin (connect() sends nothing).
            with socket.socket(family_of(args.host), socket.SOCK_DGRAM) as twin:
                twin.connect((args.host, args.port))
                out["local"] = {"address": twin.getsockname()[0], "port": s.getsockname()[1]}
            data, sender = s.recvfrom(65536)
            out["reply_from"] = endpoint(sender)
            out["seen"] = json.loads(data)
        except socket.timeout:
            out["result"] = "timeout"
        except (OSError, ValueError) as e:
            out["result"] = f"error: {e}"
        finally:
            s.close()
    else:
        s, out["result"] = open_connection(args.host, args.port, args.timeout)
        if s is not None:
            try:
                out["local"] = endpoint(s.getsockname())
                out["reply_from"] = endpoint(s.getpeername())
                data = b""
                deadline = time.monotonic() + args.timeout
                while not data.endswith(b"\n") and time.monotonic() < deadline:
                    r, _, _ = select.select([s], [], [], max(0.0, deadline - time.monotonic()))
                    if not r:
                        break
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                if data.endswith(b"\n"):
                    out["seen"] = json.loads(data)
                else:
                    out["result"] = "no-reply" if not data else "short-reply"
            except (OSError, ValueError) as e:
                out["result"] = f"error: {e}"
            finally:
                s.close()
    out["seconds"] = round(time.monotonic() - t0, 3)
    emit(out)


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ping(args):
    v6 = ":" in args.host
    if v6:
        s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
        request, reply = 128, 129
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        request, reply = 8, 0
    ident = args.ident if args.ident is not None else os.getpid() & 0xFFFF
    # getaddrinfo keeps a link-local address's scope ("fe80::99%f1"), which a bare (host, port) loses.
    destination = socket.getaddrinfo(args.host, 0, s.family)[0][4]
    received = 0
    for seq in range(1, args.count + 1):
        body = b"pairwall-ping" + bytes(19)
        header = struct.pack("!BBHHH", request, 0, 0, ident, seq)
        # The kernel fills the ICMPv6 checksum (it needs the pseudo-header); ICMPv4 is ours.
        csum = 0 if v6 else checksum(header + body)
        s.sendto(struct.pack("!BBHHH", request, 0, csum, ident, seq) + body, destination)
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            r, _, _ = select.select([s], [], [], max(0.0, deadline - time.monotonic()))
            if not r:
                break
            data, _ = s.recvfrom(65536)
            icmp = data if v6 else data[(data[0] & 0x0F) * 4:]  # a raw IPv4 socket returns the IP header
            if len(icmp) >= 8:
                typ, _, _, rid, rseq = struct.unpack("!BBHHH", icmp[:8])
                if typ == reply and rid == ident and rseq == seq:
                    received += 1
                    break
    s.close()
    emit({"sent": args.count, "received": received})


def watch_echo(args):
    """Records the echo requests that arrive here (a raw socket gets a copy; the kernel still answers)."""
    if args.family == 6:
        s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
        request = 128
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        request = 8
    emit({"listening": True})
    seen = []
    deadline = time.monotonic() + args.timeout
    while len(seen) < args.count and time.monotonic() < deadline:
        r, _, _ = select.select([s], [], [], max(0.0, deadline - time.monotonic()))
        if not r:
            break
        data, sender = s.recvfrom(65536)
        icmp = data if args.family == 6 else data[(data[0] & 0x0F) * 4:]
        if len(icmp) >= 8:
            typ, _, _, rid, rseq = struct.unpack("!BBHHH", icmp[:8])
            if typ == request:
                seen.append({"src": sender[0], "id": rid, "seq": rseq})
    s.close()
    emit({"requests": seen})


def hold(args):
    deadline = time.monotonic() + args.lifetime
    s, result = open_connection(args.host, args.port, args.timeout)
    if s is None:
        emit({"connected": False, "result": result})
        return
    emit({"connected": True})
    while time.monotonic() < deadline:
        r, _, _ = select.select([sys.stdin], [], [], 0.5)
        if not r:
            continue
        line = sys.stdin.readline()
        if not line:
            break
        try:
            n = echo_round(s, 1000, args.timeout)
            emit({"echo": n == 1000, "echoed": n})
        except OSError as e:
            emit({"echo": False, "error": str(e)})
    s.close()


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    sv = sub.add_parser("serve")
    sv.add_argument("--tcp", type=int, nargs="*", default=[])
    sv.add_argument("--udp", type=int, nargs="*", default=[])
    sv.add_argument("--lifetime", type=float, default=120)
    for name in ("connect", "udp", "hold"):
        c = sub.add_parser(name)
        c.add_argument("host")
        c.add_argument("port", type=int)
        c.add_argument("--timeout", type=float, default=2.0)
        c.add_argument("--bytes", type=int, default=1000)
        c.add_argument("--lifetime", type=float, default=120)
        c.add_argument("--source", help="local address to connect from")
        if name == "connect":
            c.add_argument("--tos", type=lambda v: int(v, 0), help="IPv4 TOS or IPv6 traffic class, e.g. 0xb8")
    pg = sub.add_parser("ping")
    pg.add_argument("host")
    pg.add_argument("--count", type=int, default=3)
    pg.add_argument("--timeout", type=float, default=1.0)
    pg.add_argument("--ident", type=int, help="echo identifier (default: the PID)")
    wh = sub.add_parser("whoami")
    wh.add_argument("--tcp", type=int, nargs="*", default=[])
    wh.add_argument("--udp", type=int, nargs="*", default=[])
    wh.add_argument("--lifetime", type=float, default=120)
    ak = sub.add_parser("ask")
    ak.add_argument("host")
    ak.add_argument("port", type=int)
    ak.add_argument("--udp", action="store_true")
    ak.add_argument("--timeout", type=float, default=2.0)
    we = sub.add_parser("watch-echo")
    we.add_argument("--family", type=int, choices=(4, 6), required=True)
    we.add_argument("--count", type=int, default=3)
    we.add_argument("--timeout", type=float, default=5.0)
    args = p.parse_args()
    {"serve": serve, "connect": connect, "udp": udp, "hold": hold, "ping": ping, "whoami": whoami, "ask": ask,
     "watch-echo": watch_echo}[args.mode](args)


if __name__ == "__main__":
    main()
