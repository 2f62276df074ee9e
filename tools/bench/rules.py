#!/usr/bin/env python3
"""Lossless 64-byte UDP throughput vs rule count (the thesis's Table B.1, pf's Fig. 5), stack by stack.

    pairwall-bench rules [--json] [--rules 10,100,1000,10000] [--stacks A,B] [--budget S] [--quick]
                         [--trial-seconds T] [--plot PNG] [--out JSON]

Same namespaces as e2e (pwb-c -- pwb-fw -- pwb-s). One rule set per count, written for each stack:
N-1 filler rules that the measured packets miss, then the rule that passes them, so every packet is
tested against all N (first match for iptables, `quick` for pf syntax). Filler rules vary the fields
the way a perimeter block list does, so that no skip step or port index could jump over long runs:
source networks of mixed lengths (/32, /24, /16-/23, /25-/31) from 172.16/12, 192.168/16 and public
space, never 10.91/16; TCP or UDP; destination ports from a list of services that includes the
measured port 9000. Measured packets: UDP to 10.91.2.2:9000 from 4 source addresses x 16 ports.

Stacks:
  pairwalld            pf-syntax rules, `no state`: the rule set decides every packet
  pairwalld_state      the same rules with `keep state` on the last rule (states decide after the first)
  iptables             the same rules, linear in FORWARD (iptables-restore), no conntrack
  iptables_ipset       the filler rules as one hash:net,port set (entries NET,PROTO:PORT: the same
                       matches as the filler rules, since they all drop), one set rule + the pass rule

Every point is a lossless search (lossless.py) bounded in trials and seconds; the whole run is held
to --budget seconds (default 600) by sharing it among the points. --quick: 10 and 1000 rules, short
trials, a ~1-minute smoke. A PNG, throughput vs rules one line per stack, goes to --plot (default
lab-out/rules.png, git-ignored) or beside --out. Run under `flock /tmp/pairwall-bench.lock`.
"""
import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchnet as bn  # noqa: E402
import lossless  # noqa: E402

SERVICES = [22, 25, 53, 80, 110, 123, 143, 443, 465, 587, 993, 995, 1194, 1433, 1521, 3306, 3389, 5060, 5432,
            5900, 6379, 8080, 8443, 9000, 9090, 9200, 11211, 27017]
IN_IF, OUT_IF = "pwb-fw0", "pwb-fw1"
STACKS = ["pairwalld", "pairwalld_state", "iptables", "iptables_ipset"]


def filler_rules(count, seed=1):
    """`count` distinct (network, proto, port) triples none of which covers the measured packets."""
    r = random.Random(seed)
    seen = set()
    out = []
    while len(out) < count:
        region = r.choice([(0xAC100000, 12), (0xC0A80000, 16), (0x01000000, 3), (0x50000000, 4)])
        roll = r.randrange(100)
        length = 32 if roll < 40 else 24 if roll < 70 else 16 + r.randrange(8) if roll < 85 else 25 + r.randrange(7)
        length = max(length, region[1])
        host = 0xFFFFFFFF >> region[1]
        addr = (region[0] | (r.getrandbits(32) & host)) & (0xFFFFFFFF << (32 - length)) & 0xFFFFFFFF
        if (addr >> 16) == 0x0A5B or (addr >> 24) == 10:  # never 10.91/16 (the bench's own)
            continue
        net = f"{addr >> 24}.{(addr >> 16) & 255}.{(addr >> 8) & 255}.{addr & 255}/{length}"
        proto = "udp" if r.randrange(2) else "tcp"
        port = r.choice(SERVICES)
        if (net, proto, port) in seen:
            continue
        seen.add((net, proto, port))
        out.append((net, proto, port))
    return out


def pf_rules(count, keep_state=False):
    lines = ["set limit states 200000", "block all", f"pass out quick on {OUT_IF} all no state"]
    for net, proto, port in filler_rules(count - 1):
        lines.append(f"block in quick on {IN_IF} proto {proto} from {net} to any port {port}")
    lines.append(f"pass in quick on {IN_IF} proto udp from 10.91.1.0/24 to {bn.SERVER} port {bn.UDP_PORT} "
                 + ("keep state" if keep_state else "no state"))
    return "\n".join(lines) + "\n"


def iptables_rules(count):
    lines = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD DROP [0:0]", ":OUTPUT ACCEPT [0:0]"]
    for net, proto, port in filler_rules(count - 1):
        lines.append(f"-A FORWARD -i {IN_IF} -s {net} -p {proto} --dport {port} -j DROP")
    lines.append(f"-A FORWARD -i {IN_IF} -s 10.91.1.0/24 -d {bn.SERVER} -p udp --dport {bn.UDP_PORT} -j ACCEPT")
    return "\n".join(lines) + "\nCOMMIT\n"


def ipset_rules(count):
    entries = [f"add pwb-filler {net},{proto}:{port}" for net, proto, port in filler_rules(count - 1)]
    restore = ["create pwb-filler hash:net,port family inet hashsize 1024 maxelem 262144"] + entries
    tables = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD DROP [0:0]", ":OUTPUT ACCEPT [0:0]",
              f"-A FORWARD -i {IN_IF} -m set --match-set pwb-filler src,dst -j DROP",
              f"-A FORWARD -i {IN_IF} -s 10.91.1.0/24 -d {bn.SERVER} -p udp --dport {bn.UDP_PORT} -j ACCEPT",
              "COMMIT"]
    return "\n".join(restore) + "\n", "\n".join(tables) + "\n"


class Stack:
    """One configured stack on pwb-fw; `close()` removes it."""

    def __init__(self, stack, count, build, workdir):
        self.daemon = None
        bn.flush_fw()
        if stack.startswith("pairwalld"):
            self.daemon = bn.Pairwalld(build, workdir, pf_rules(count, keep_state=stack == "pairwalld_state"),
                                       timeout=120)
            status = self.daemon.json("status")
            self.loaded = status.get("rule_count", status.get("rules"))
        elif stack == "iptables":
            bn.ns(bn.NS_FW, "iptables-restore", input=iptables_rules(count))
            self.loaded = len(bn.ns(bn.NS_FW, "iptables", "-S", "FORWARD").stdout.splitlines()) - 1
        elif stack == "iptables_ipset":
            sets, tables = ipset_rules(count)
            bn.ns(bn.NS_FW, "ipset", "restore", input=sets)
            bn.ns(bn.NS_FW, "iptables-restore", input=tables)
            listing = bn.ns(bn.NS_FW, "ipset", "list", "pwb-filler", "-t").stdout
            self.loaded = next((int(l.split(":")[1]) for l in listing.splitlines()
                                if l.startswith("Number of entries")), None)
        else:
            raise ValueError(f"unknown stack {stack}")

    def close(self):
        if self.daemon:
            self.daemon.stop()
        bn.flush_fw()


def plot(results, counts, path, title):
    plt = bn.new_figure()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    markers = {"pairwalld": "o", "pairwalld_state": "s", "iptables": "^", "iptables_ipset": "v"}
    for stack, points in results.items():
        xs = [c for c in counts if isinstance(points.get(str(c)), dict) and "lossless_pps" in points[str(c)]]
        if not xs:
            continue
        ys = [points[str(c)]["lossless_pps"] / 1e3 for c in xs]
        ax.plot(xs, ys, marker=markers.get(stack, "x"), label=stack)
        for c, y in zip(xs, ys):
            if points[str(c)].get("sender_limited"):
                ax.annotate("*", (c, y), textcoords="offset points", xytext=(3, 3), fontsize=9)
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("rules")
    ax.set_ylabel("lossless throughput, kpps (64-byte UDP, loss <= 0.005)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, "* sender-limited: the generator's own ceiling, not the firewall's", fontsize=7)
    bn.save_figure(plt, fig, None, path)


def main():
    bn.ensure_matplotlib()
    p = argparse.ArgumentParser(prog="pairwall-bench rules")
    bn.add_output_args(p, "rules")
    p.add_argument("--rules", default="10,100,1000,10000")
    p.add_argument("--stacks", default=",".join(STACKS))
    p.add_argument("--budget", type=float, default=600.0, help="seconds for the whole run")
    p.add_argument("--trial-seconds", type=float, default=1.0)
    p.add_argument("--quick", action="store_true", help="smoke: 10 and 1000 rules, short trials")
    p.add_argument("--no-pin", action="store_true", help="no CPU pinning / RPS (see benchnet.py)")
    args = p.parse_args()
    if args.quick:
        args.rules, args.trial_seconds, args.budget = "10,1000", 0.5, min(args.budget, 90.0)
    bn.check_root("rules", ("iptables-restore", "ipset", "mpstat"))
    build = os.path.abspath(args.build)
    counts = [int(c) for c in args.rules.split(",")]
    stacks = args.stacks.split(",")
    log = bn.logger("rules", args.quiet)

    results = {s: {} for s in stacks}
    start = time.time()
    workdir = tempfile.mkdtemp(prefix="pwb-")
    steal = bn.Steal()
    try:
        bn.topology_up(pin=not args.no_pin)
        points = [(c, s) for c in counts for s in stacks]
        for i, (count, stack) in enumerate(points):
            left = args.budget - (time.time() - start)
            if left < 5:
                results[stack][str(count)] = {"skipped": "budget"}
                continue
            share = left / (len(points) - i)
            t0 = time.time()
            stack_obj = None
            try:
                stack_obj = Stack(stack, count, build, workdir)
                setup = time.time() - t0
                log(f"{stack} {count} rules (loaded {stack_obj.loaded}, setup {setup:.1f}s, budget {share:.0f}s)")
                r = lossless.search(lambda rate: lossless.trial(build, rate, args.trial_seconds),
                                    budget=max(share - setup, 3), log=log)
                r.update(setup_seconds=round(setup, 2), loaded=stack_obj.loaded)
                if stack.startswith("pairwalld"):
                    r["nfqueue_drops"] = bn.nfqueue_drops()
                r.update(steal.between(t0, time.time()))
                results[stack][str(count)] = r
            except Exception as e:  # one broken point must not hide the others
                results[stack][str(count)] = {"error": str(e)[-1000:]}
            finally:
                if stack_obj:
                    stack_obj.close()
    finally:
        steal.stop()
        bn.topology_down()
        shutil.rmtree(workdir, ignore_errors=True)
    out = {"rules_lossless_pps": {s: {c: r.get("lossless_pps") for c, r in pts.items()} for s, pts in results.items()},
           "points": results, "seconds": round(time.time() - start), "trial_seconds": args.trial_seconds,
           "machine": dict(bn.machine(), cpu_layout=bn.cpu_layout())}
    title = f"pairwall-bench rules: lossless throughput vs rules ({bn.machine()['cpus']} CPUs, kernel " \
            f"{os.uname().release})"
    bn.write_outputs(out, args, "rules", lambda png: plot(results, counts, png, title), log)
    if args.json:
        print(json.dumps(out))
    else:
        for s, pts in out["rules_lossless_pps"].items():
            print(f"{s:18} {pts}")


if __name__ == "__main__":
    main()
