#!/usr/bin/env python3
"""State-table benchmarks through the firewall namespace: the thesis's Tables B.3 and B.2 redone.

    pairwall-bench states [--json] [--only throughput|newconn] [--counts 1,1000,...] [--max N]
                          [--timeouts 1,10,60] [--budget S] [--quick] [--plot PNG] [--out JSON]

throughput (Table B.3): lossless 64-byte UDP throughput (lossless.py) with N established states in
  the table, N = 1, 1k, 10k, 100k, 1M (--max caps), for pairwalld and kernel conntrack. States are
  preloaded the same way for both: paced raw UDP packets from pwb-c, one new 5-tuple each (4 client
  addresses x 64512 source ports x destination ports 10000+), dropped silently at the server; the
  points go up in N, each preloading only the difference. The table size reached is read back
  (pairwallctl status / conntrack -C) and reported, not assumed. The measured traffic is
  pairwall-udpgen's 16 flows to port 9000: it hits its own 16 states inside a table of N.
  pairwalld: `pass in quick ... keep state` (one state per flow; the out pass is one quick
  stateless rule), UDP timeouts 3600 s. Kernel conntrack: FORWARD DROP, ESTABLISHED,RELATED and NEW
  UDP accepted, nf_conntrack_udp_timeout 3600 in the namespace; the global nf_conntrack_max is
  raised for the run when it is below N and put back after.

newconn (Table B.2): the highest rate of new connections with loss <= 0.005, every packet a new
  5-tuple (source addresses from 10.91.128.0/17 x source ports, never reused in a run), for UDP state
  timeouts (udp.first/single/multiple) of 1, 10, 60 s, with sync off and with sync on (a second
  pairwalld in pwb-fw2 joined over a sync0 veth, [sync] section and key file as the sync tests do).
  States are flushed between trials, so a trial starts from an empty table and holds at most
  rate x trial seconds states; the timeout matters where it is shorter than the trial. The peer
  runs on the generator's CPU (it stands for another box). Reported: rate per timeout and mode, the
  ratio on/off, and the peer's state count after the last trial (proof that sync ran). Mode
  sync_defer is sync on with `defer = true`: every new flow's first packet waits for the peer's ack.

The run is held to --budget seconds (default 600). --quick: a smoke of about a minute. PNG to --plot
(default lab-out/states.png, git-ignored) or beside --out. Run under `flock /tmp/pairwall-bench.lock`.
"""
import argparse
import json
import os
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchnet as bn  # noqa: E402
import lossless  # noqa: E402

PORTS = 64512  # source ports 1024..65535
PRELOAD_DPORT = 10000
WIDE_BASE = (10 << 24) | (91 << 16) | (128 << 8)  # 10.91.128.0/17, hosts 1..32000


def tuple_of(i, mode):
    """The i-th 5-tuple of a mode: (source address, source port, destination port)."""
    if mode == "client":
        src = bn.CLIENT_ADDRS[i % 4]
        return src, 1024 + (i // 4) % PORTS, PRELOAD_DPORT + i // (4 * PORTS)
    host = 1 + (i // PORTS) % 32000
    return socket.inet_ntoa(struct.pack("!I", WIDE_BASE + host)), 1024 + i % PORTS, bn.UDP_PORT


def tuples_np(idx, mode):
    """tuple_of() over a numpy array of indices: (source address as u32, source port, destination port)."""
    import numpy as np
    if mode == "client":
        addrs = np.array([struct.unpack("!I", socket.inet_aton(a))[0] for a in bn.CLIENT_ADDRS], dtype=np.uint64)
        return addrs[(idx % 4).astype(np.int64)], 1024 + (idx // 4) % PORTS, PRELOAD_DPORT + idx // (4 * PORTS)
    return WIDE_BASE + 1 + (idx // PORTS) % 32000, 1024 + idx % PORTS, np.full(len(idx), bn.UDP_PORT, np.uint64)


def child_send(first, count, rate, mode, seconds):
    """Raw-socket sender (runs in pwb-c): packets first..first+count-1, `rate` per second (0: as fast
    as it can), at most `seconds`, 128 per sendmmsg(2). 64-byte IPv4/UDP with pairwall-udpgen's
    payload (sequence, CLOCK_MONOTONIC ns), so its sink counts them and measures their latency.
    Prints {sent, seconds, pps}."""
    import ctypes

    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    class MsgHdr(ctypes.Structure):
        _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.POINTER(IoVec)),
                    ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                    ("flags", ctypes.c_int)]

    class MMsgHdr(ctypes.Structure):
        _fields_ = [("hdr", MsgHdr), ("len", ctypes.c_uint)]

    libc = ctypes.CDLL(None, use_errno=True)
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    s.connect((bn.SERVER, 0))
    batch, size = 256, 64
    data = (ctypes.c_char * (batch * size))()
    view = memoryview(data).cast("B")
    iov = (IoVec * batch)()
    msgs = (MMsgHdr * batch)()
    for k in range(batch):
        iov[k].base = ctypes.addressof(data) + k * size
        iov[k].len = size
        msgs[k].hdr.iov = ctypes.pointer(iov[k])
        msgs[k].hdr.iovlen = 1
    dst = socket.inet_aton(bn.SERVER)
    cache = {}
    # IP header: checksum, id and total length are filled in by the kernel (raw(7)).
    for k in range(batch):
        struct.pack_into("!BBHHHBBH4s4sHHHH", view, k * size, 0x45, 0, size, 0, 0, 64, 17, 0, dst, dst, 0, 0,
                         size - 20, 0)
    try:
        import numpy as np
        rows = np.frombuffer(data, dtype=np.uint8).reshape(batch, size)
    except ImportError:
        np = None
    start = time.monotonic()
    end = start + seconds
    sent = 0
    blocked = 0
    while sent < count:
        now = time.monotonic()
        if now >= end:
            break
        if rate > 0 and sent >= (now - start) * rate:
            time.sleep(min(0.0005, max(0.0, sent / rate - (now - start))))
            continue
        n = min(batch, count - sent)
        if rate > 0:
            n = max(1, min(n, int((now - start) * rate) - sent + 1))
        stamp = time.monotonic_ns()
        if np is not None:
            idx = np.arange(first + sent, first + sent + n, dtype=np.uint64)
            src, sport, dport = tuples_np(idx, mode)
            rows[:n, 12:16] = src.astype(">u4").view(np.uint8).reshape(n, 4)
            rows[:n, 20:22] = sport.astype(">u2").view(np.uint8).reshape(n, 2)
            rows[:n, 22:24] = dport.astype(">u2").view(np.uint8).reshape(n, 2)
            rows[:n, 28:36] = idx.astype("<u8").view(np.uint8).reshape(n, 8)
            rows[:n, 36:44] = np.full(n, stamp, dtype="<u8").view(np.uint8).reshape(n, 8)
        else:
            for k in range(n):
                i = first + sent + k
                src, sport, dport = tuple_of(i, mode)
                srcb = cache.get(src)
                if srcb is None:
                    srcb = cache[src] = socket.inet_aton(src)
                struct.pack_into("!BBHHHBBH4s4sHHHH", view, k * size, 0x45, 0, size, 0, 0, 64, 17, 0, srcb, dst,
                                 sport, dport, size - 20, 0)
                struct.pack_into("<QQ", view, k * size + 28, i, stamp)  # host order, as pairwall-udpgen's
        r = libc.sendmmsg(s.fileno(), msgs, n, 0)
        if r > 0:
            sent += r
        else:
            blocked += 1
            time.sleep(0.0002)
    elapsed = time.monotonic() - start
    print(json.dumps({"sent": sent, "seconds": round(elapsed, 3), "pps": round(sent / max(elapsed, 1e-9)),
                      "send_blocked": blocked}))


def raw_send(first, count, rate, mode, seconds):
    argv = [sys.executable, os.path.abspath(__file__), "--child-send", str(first), str(count), str(rate), mode,
            str(seconds)]
    return json.loads(bn.ns(bn.NS_C, *bn.harness(argv), timeout=seconds + 30).stdout)


def raw_trial(build, first, rate, seconds):
    """lossless.trial for `rate` new connections per second, each packet a flow of its own."""
    count = int(rate * seconds) if rate > 0 else 10 ** 9
    return lossless.trial(build, rate, seconds, send=lambda: raw_send(first, count, rate, "wide", seconds))


# --- throughput vs established states ---------------------------------------------------------------

def pairwalld_state_rules(timeout, limit):
    return (f"set limit states {limit}\n"
            f"set timeout {{ udp.first {timeout}, udp.single {timeout}, udp.multiple {timeout} }}\n"
            "block all\n"
            "pass out quick on pwb-fw1 all no state\n"
            "pass in quick on pwb-fw0 proto udp from 10.91.0.0/16 to 10.91.2.2 keep state\n")


def conntrack_setup(timeout):
    bn.flush_fw()
    bn.ns(bn.NS_FW, "sysctl", "-qw", f"net.netfilter.nf_conntrack_udp_timeout={timeout}",
          f"net.netfilter.nf_conntrack_udp_timeout_stream={timeout}")
    for rule in (["-P", "FORWARD", "DROP"],
                 ["-A", "FORWARD", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
                 ["-A", "FORWARD", "-i", "pwb-fw0", "-s", "10.91.0.0/16", "-d", bn.SERVER, "-p", "udp", "-m",
                  "conntrack", "--ctstate", "NEW", "-j", "ACCEPT"]):
        bn.ns(bn.NS_FW, "iptables", *rule)


def conntrack_count():
    out = bn.ns(bn.NS_FW, "conntrack", "-C", check=False).stdout.strip()
    return int(out) if out.isdigit() else None


def throughput_vs_states(build, args, counts, budget, steal, log):
    results = {}
    start = time.time()
    workdir = tempfile.mkdtemp(prefix="pwb-")
    saved_max = None
    try:
        needed = max(counts) + 100000
        current = int(open("/proc/sys/net/netfilter/nf_conntrack_max").read()) if os.path.exists(
            "/proc/sys/net/netfilter/nf_conntrack_max") else None
        for stack in ("pairwalld", "kernel_conntrack"):
            results[stack] = {}
            daemon = None
            try:
                if stack == "pairwalld":
                    bn.flush_fw()
                    daemon = bn.Pairwalld(build, workdir, pairwalld_state_rules(3600, max(200000, needed)))
                    count_states = lambda: daemon.json("status").get("states")  # noqa: E731
                else:
                    if current is not None and current < needed and saved_max is None:
                        saved_max = current
                        bn.sh("sysctl", "-qw", f"net.netfilter.nf_conntrack_max={needed}")
                    conntrack_setup(3600)
                    count_states = conntrack_count
                # Silently drop preload packets at the server: no ICMP errors back through the firewall.
                bn.ns(bn.NS_S, "iptables", "-A", "INPUT", "-p", "udp", "--dport",
                      f"{PRELOAD_DPORT}:{PRELOAD_DPORT + 99}", "-j", "DROP", check=False)
                loaded = 0
                for i, n in enumerate(counts):
                    left = budget / 2 - (time.time() - start) if stack == "pairwalld" else budget - (time.time() - start)
                    if left < 5:
                        results[stack][str(n)] = {"skipped": "budget"}
                        continue
                    t0 = time.time()
                    if n > loaded:
                        pre = raw_send(loaded, n - loaded, args.preload_rate, "client",
                                       max(30, 3 * (n - loaded) / args.preload_rate))
                        loaded += pre["sent"]
                        time.sleep(0.5)
                    table = count_states()
                    log(f"{stack}: {n} states asked, {table} in the table ({time.time() - t0:.1f}s preload)")
                    share = left / (len(counts) - i)
                    r = lossless.search(lambda rate: lossless.trial(build, rate, args.trial_seconds),
                                        budget=max(share - (time.time() - t0), 3), log=log)
                    r["table_states_before"] = table
                    r["table_states_after"] = count_states()
                    r.update(steal.between(t0, time.time()))
                    results[stack][str(n)] = r
            except Exception as e:
                results[stack]["error"] = str(e)[-1000:]
            finally:
                if daemon:
                    daemon.stop()
                bn.ns(bn.NS_S, "iptables", "-F", "INPUT", check=False)
                bn.flush_fw()
    finally:
        if saved_max is not None:
            bn.sh("sysctl", "-qw", f"net.netfilter.nf_conntrack_max={saved_max}", check=False)
        shutil.rmtree(workdir, ignore_errors=True)
    return results


# --- new connections per second vs timeout, sync off and on -------------------------------------------

def newconn_vs_timeout(build, args, timeouts, budget, steal, log):
    results = {"sync_off": {}, "sync_on": {}, "sync_defer": {}}
    start = time.time()
    workdir = tempfile.mkdtemp(prefix="pwb-")
    key = os.path.join(workdir, "sync.key")
    with open(key, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    os.chmod(key, 0o600)
    counter = [0]
    points = [(mode, t) for mode in args.modes.split(",") for t in timeouts]
    try:
        for k, (mode, timeout) in enumerate(points):
            left = budget - (time.time() - start)
            if left < 5:
                results[mode][str(timeout)] = {"skipped": "budget"}
                continue
            t0 = time.time()
            nodes = []
            try:
                bn.flush_fw()
                bn.flush_fw(bn.NS_FW2)
                rules = pairwalld_state_rules(timeout, 1000000)
                sync = key if mode != "sync_off" else None
                extra = "defer = true\n" if mode == "sync_defer" else ""
                nodes.append(bn.Pairwalld(build, workdir, rules, sync_key=sync, node_id=1, sync_extra=extra))
                if sync:
                    nodes.append(bn.Pairwalld(build, workdir, rules, netns=bn.NS_FW2, sync_key=sync, node_id=2,
                                              on_harness=True, sync_extra=extra))
                    deadline = time.time() + 20
                    while time.time() < deadline and not all(n.json("sync", "status").get("bulk_done")
                                                              for n in nodes):
                        time.sleep(0.2)
                fw = nodes[0]

                def run(rate):
                    fw.ctl("flush", "states")
                    if len(nodes) > 1:
                        time.sleep(0.3)  # the flush reaches the peer before the next trial
                    first = counter[0]
                    t = raw_trial(build, first, rate, args.trial_seconds)
                    counter[0] += t["sent"]
                    return t

                r = lossless.search(run, budget=max(left / (len(points) - k) - (time.time() - t0), 3), log=log)
                r["new_connections_per_s"] = r["lossless_pps"]
                r["states_after_last_trial"] = fw.json("status").get("states")
                if len(nodes) > 1:
                    time.sleep(0.5)
                    r["peer_states_after_last_trial"] = nodes[1].json("status").get("states")
                    r["sync_status"] = fw.json("sync", "status")
                r.update(steal.between(t0, time.time()))
                results[mode][str(timeout)] = r
                log(f"newconn {mode} timeout {timeout}s: {r['lossless_pps']} new/s")
            except Exception as e:
                results[mode][str(timeout)] = {"error": str(e)[-1000:]}
            finally:
                for n in reversed(nodes):
                    n.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ratio = {}
    defer_ratio = {}
    for t in timeouts:
        on = results["sync_on"].get(str(t), {}).get("lossless_pps")
        off = results["sync_off"].get(str(t), {}).get("lossless_pps")
        defer = results["sync_defer"].get(str(t), {}).get("lossless_pps")
        if on and off:
            ratio[str(t)] = round(on / off, 3)
        if defer and on:
            defer_ratio[str(t)] = round(defer / on, 3)
    results["ratio_on_off"] = ratio
    results["ratio_defer_on"] = defer_ratio
    return results


def plot(out, path, title):
    plt = bn.new_figure()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for stack, points in out.get("throughput", {}).items():
        xs = [int(n) for n, r in points.items() if isinstance(r, dict) and "lossless_pps" in r]
        if xs:
            xs.sort()
            ax1.plot(xs, [points[str(n)]["lossless_pps"] / 1e3 for n in xs], marker="o", label=stack)
    ax1.set_xscale("log")
    ax1.set_ylim(bottom=0)
    ax1.set_xlabel("established states in the table")
    ax1.set_ylabel("lossless throughput, kpps (64-byte UDP)")
    ax1.set_title("throughput vs states (Table B.3)", fontsize=9)
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8)
    nc = out.get("newconn", {})
    for mode in ("sync_off", "sync_on", "sync_defer"):
        pts = nc.get(mode, {})
        xs = sorted(int(t) for t, r in pts.items() if isinstance(r, dict) and "lossless_pps" in r)
        if xs:
            ax2.plot(xs, [pts[str(t)]["lossless_pps"] / 1e3 for t in xs], marker="s", label=f"pairwalld {mode}")
    ax2.set_xscale("log")
    ax2.set_ylim(bottom=0)
    ax2.set_xlabel("UDP state timeout (s)")
    ax2.set_ylabel("new connections, k/s (loss <= 0.005)")
    ax2.set_title("new-connection rate vs timeout, sync off/on/defer (Table B.2)", fontsize=9)
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8)
    bn.save_figure(plt, fig, title, path)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child-send":
        first, count, rate, mode, seconds = sys.argv[2:7]
        child_send(int(first), int(count), float(rate), mode, float(seconds))
        return
    bn.ensure_matplotlib()
    p = argparse.ArgumentParser(prog="pairwall-bench states")
    bn.add_output_args(p, "states")
    p.add_argument("--only", choices=("throughput", "newconn"))
    p.add_argument("--counts", default="1,1000,10000,100000,1000000")
    p.add_argument("--max", type=int, default=None, help="cap the state counts")
    p.add_argument("--timeouts", default="1,10,60")
    p.add_argument("--modes", default="sync_off,sync_on,sync_defer",
                   help="new-connection modes: sync_off, sync_on, sync_defer (sync on with defer = true)")
    p.add_argument("--budget", type=float, default=600.0, help="seconds for the whole run")
    p.add_argument("--trial-seconds", type=float, default=1.0)
    p.add_argument("--preload-rate", type=float, default=50000, help="preload packets/s")
    p.add_argument("--quick", action="store_true", help="smoke: up to 10k states, timeouts 1 and 10")
    p.add_argument("--no-pin", action="store_true", help="no CPU pinning / RPS (see benchnet.py)")
    args = p.parse_args()
    if args.quick:
        args.counts, args.timeouts, args.trial_seconds = "1,10000", "1,10", 0.5
        args.budget = min(args.budget, 100.0)
    bn.check_root("states", ("iptables", "conntrack", "mpstat"))
    build = os.path.abspath(args.build)
    counts = [int(c) for c in args.counts.split(",") if args.max is None or int(c) <= args.max]
    timeouts = [int(t) for t in args.timeouts.split(",")]
    log = bn.logger("states", args.quiet)

    out = {}
    start = time.time()
    steal = bn.Steal()
    try:
        bn.topology_up(peer=args.only != "throughput", pin=not args.no_pin)
        share = 0.5 if args.only is None else 1.0
        if args.only in (None, "throughput"):
            out["throughput"] = throughput_vs_states(build, args, counts, args.budget * share, steal, log)
        if args.only in (None, "newconn"):
            out["newconn"] = newconn_vs_timeout(build, args, timeouts, args.budget - (time.time() - start), steal,
                                                log)
    finally:
        steal.stop()
        bn.topology_down()
    out["states_lossless_pps"] = {s: {n: r.get("lossless_pps") for n, r in pts.items() if isinstance(r, dict)}
                                  for s, pts in out.get("throughput", {}).items()}
    if "newconn" in out:
        out["newconn_per_s"] = {m: {t: r.get("lossless_pps") for t, r in out["newconn"][m].items()}
                                for m in ("sync_off", "sync_on", "sync_defer")}
        out["newconn_ratio_on_off"] = out["newconn"]["ratio_on_off"]
        out["newconn_ratio_defer_on"] = out["newconn"]["ratio_defer_on"]
    out.update(seconds=round(time.time() - start), trial_seconds=args.trial_seconds,
               machine=dict(bn.machine(), cpu_layout=bn.cpu_layout()))
    title = f"pairwall-bench states ({bn.machine()['cpus']} CPUs, kernel {os.uname().release})"
    bn.write_outputs(out, args, "states", lambda png: plot(out, png, title), log)
    if args.json:
        print(json.dumps(out))
    else:
        for k in ("states_lossless_pps", "newconn_per_s", "newconn_ratio_on_off", "newconn_ratio_defer_on"):
            if k in out:
                print(f"{k:22} {out[k]}")


if __name__ == "__main__":
    main()
