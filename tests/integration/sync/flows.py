#!/usr/bin/env python3
"""Traffic and observation for the sync scenarios, run inside the test's namespaces. Every loop is
bounded in count and time; every command prints JSON lines.

  flows.py serve PORT --lifetime S
      TCP echo server (in the server namespace).
  flows.py open DST PORT COUNT --sport BASE --interval S --hold S
      Opens COUNT connections one after the other from source ports BASE.., printing
      {"sport": P, "t0": monotonic before connect, "ok": bool} for each; then holds them open. A line
      "data" on stdin makes every connection send and read back a short message; "close" (or the
      end of --hold) closes them all and prints {"done": true}.
  flows.py udp DST COUNT --sport BASE --rate R --seconds S
      One datagram per flow, COUNT flows (source port x 50,000 destination ports), paced at R/s.
  flows.py churn DST PORT --seconds S --rate R
      Connection churn: every 1/R s a new TCP connection that sends, reads the echo and closes,
      alternating with a new UDP flow. Prints {"tcp": n, "udp": n, "failed": n} at the end.
  flows.py watch CTL SOCKET PORT --seconds S --expect N
      Polls `pairwallctl states` for TCP states with port PORT and prints {"sport": P, "t": monotonic}
      the first time each client source port appears; stops after S seconds or N ports.
"""

import argparse
import json
import select
import socket
import subprocess
import sys
import threading
import time


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def serve(args):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", args.port))
    srv.listen(4096)
    srv.settimeout(0.5)
    out({"serving": args.port})
    deadline = time.monotonic() + args.lifetime

    def echo(c):
        c.settimeout(args.lifetime)
        try:
            while True:
                data = c.recv(4096)
                if not data:
                    break
                c.sendall(data)
        except OSError:
            pass
        finally:
            c.close()

    while time.monotonic() < deadline:
        try:
            c, _ = srv.accept()
        except socket.timeout:
            continue
        threading.Thread(target=echo, args=(c,), daemon=True).start()


def open_many(args):
    conns = []
    for i in range(args.count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", args.sport + i))
        s.settimeout(2.0)
        t0 = time.monotonic()
        try:
            s.connect((args.dst, args.port))
            ok = True
        except OSError:
            ok = False
        out({"sport": args.sport + i, "t0": t0, "ok": ok})
        if ok:
            conns.append(s)
        time.sleep(args.interval)
    out({"opened": len(conns)})
    deadline = time.monotonic() + args.hold
    while time.monotonic() < deadline:
        r, _, _ = select.select([sys.stdin], [], [], 0.2)
        if not r:
            continue
        line = sys.stdin.readline().strip()
        if line == "data":
            good = 0
            for s in conns:
                try:
                    s.sendall(b"pairwall sync window check")
                    got = b""
                    while len(got) < 26:
                        chunk = s.recv(64)
                        if not chunk:
                            break
                        got += chunk
                    good += len(got) >= 26
                except OSError:
                    pass
            out({"data": good})
        elif line in ("close", ""):
            break
    for s in conns:
        s.close()
    out({"done": True})


def udp(args):
    dports = range(10000, 60000)
    sent = 0
    s = None
    t0 = time.monotonic()
    while sent < args.count and time.monotonic() - t0 < args.seconds:
        if sent % len(dports) == 0:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("0.0.0.0", args.sport + sent // len(dports)))
        try:
            s.sendto(b"pairwall-sync", (args.dst, dports[sent % len(dports)]))
            sent += 1
        except OSError:
            time.sleep(0.001)
        if sent % 200 == 0:
            # Paced, so that a full queue does not lose flows.
            time.sleep(max(0.0, t0 + sent / args.rate - time.monotonic()))
    out({"sent": sent, "seconds": round(time.monotonic() - t0, 3)})


def churn(args):
    tcp = udp_flows = failed = 0
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < args.seconds:
        n += 1
        if n % 2:
            try:
                s = socket.create_connection((args.dst, args.port), timeout=1.0)
                s.sendall(b"churn")
                s.recv(16)
                s.close()
                tcp += 1
            except OSError:
                failed += 1
        else:
            try:
                u.sendto(b"churn", (args.dst, 10000 + (n // 2) % 50000))
                udp_flows += 1
            except OSError:
                failed += 1
        time.sleep(max(0.0, t0 + n / args.rate - time.monotonic()))
    out({"tcp": tcp, "udp": udp_flows, "failed": failed})


def watch(args):
    seen = {}
    deadline = time.monotonic() + args.seconds
    out({"watching": args.port})
    while time.monotonic() < deadline and len(seen) < args.expect:
        cp = subprocess.run([args.ctl, "-s", args.socket, "--json", "states", "proto", "tcp", "port", str(args.port)],
                            capture_output=True, text=True)
        t = time.monotonic()
        if cp.returncode != 0:
            time.sleep(0.01)
            continue
        for st in json.loads(cp.stdout).get("states", []):
            sport = st.get("src", {}).get("port")
            if sport is not None and sport not in seen:
                seen[sport] = t
                out({"sport": sport, "t": t})
    out({"done": True, "seen": len(seen)})


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("serve")
    a.add_argument("port", type=int)
    a.add_argument("--lifetime", type=float, default=120)
    a = sub.add_parser("open")
    a.add_argument("dst")
    a.add_argument("port", type=int)
    a.add_argument("count", type=int)
    a.add_argument("--sport", type=int, default=40000)
    a.add_argument("--interval", type=float, default=0.05)
    a.add_argument("--hold", type=float, default=60)
    a = sub.add_parser("udp")
    a.add_argument("dst")
    a.add_argument("count", type=int)
    a.add_argument("--sport", type=int, default=20000)
    a.add_argument("--rate", type=float, default=20000)
    a.add_argument("--seconds", type=float, default=60)
    a = sub.add_parser("churn")
    a.add_argument("dst")
    a.add_argument("port", type=int)
    a.add_argument("--seconds", type=float, default=10)
    a.add_argument("--rate", type=float, default=200)
    a = sub.add_parser("watch")
    a.add_argument("ctl")
    a.add_argument("socket")
    a.add_argument("port", type=int)
    a.add_argument("--seconds", type=float, default=30)
    a.add_argument("--expect", type=int, default=1 << 30)
    args = p.parse_args()
    {"serve": serve, "open": open_many, "udp": udp, "churn": churn, "watch": watch}[args.cmd](args)


if __name__ == "__main__":
    main()
