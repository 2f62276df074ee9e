#!/usr/bin/env python3
"""End-to-end throughput through one firewall namespace, every data path in one run.

    pairwall-bench e2e [--json] [--seconds S] [--trial-seconds T] [--budget B] [--paths A,B] [--plot PNG]
                       [--out JSON] [--no-lossless]

Topology (created here, removed on exit):  pwb-c (client) -- pwb-fw -- pwb-s (server), veth.
Paths measured, in this order, on the same namespaces:
  forward           plain kernel forwarding
  kernel_conntrack  iptables stateful rules (conntrack ESTABLISHED + NEW for the test ports)
  nfqueue_null      every forwarded packet through NFQUEUE to pairwall-nfq-null (accepts all)
  pairwalld_q1      pairwalld with one queue
  pairwalld_q2      pairwalld with two queues (--queue-balance)
For each: UDP 64-byte packets/s delivered to the server offered as fast as the sender can for S
seconds (udp_pps; pairwall-udpgen, 16 flows from 4 client addresses), the highest offered rate with
loss <= 0.005 (udp_lossless_pps, lossless.py's binary search, T-second trials, B seconds at most),
one-way latency p50/p99 at half that rate (latency_us_p50/p99), TCP Gbit/s (iperf3, S seconds) and
the mean mpstat %steal while the path ran. By default the generator, sink and iperf3 run on cpu 0
and the firewall (its kernel work by RPS, its daemon by affinity) on the last cpu (benchnet.py says
why; --no-pin for the old unpinned layout). A PNG of the three goes to --plot (default lab-out/e2e.png,
git-ignored) or beside --out. Run under `flock /tmp/pairwall-bench.lock` on a shared machine.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchnet as bn  # noqa: E402
import lossless  # noqa: E402
from benchnet import NS_C, NS_FW, NS_S, SERVER, UDP_PORT, TCP_PORT, ns, flush_fw  # noqa: E402


def measure_udp(build, seconds):
    t = lossless.trial(build, 0, seconds)
    return {"udp_pps": round(t["received"] / seconds), "udp_offered_pps": t["offered_pps"],
            "udp_latency_us_p50": t["latency_us_p50"], "udp_latency_us_p99": t["latency_us_p99"]}


def measure_lossless(build, seconds, budget, log):
    r = lossless.lossless_and_latency(build, seconds, log=log, budget=budget)
    out = {"udp_lossless_pps": r["lossless_pps"], "udp_lossless_sender_limited": r["sender_limited"],
           "udp_lossless_steps": r["steps"], "udp_lossless_sink_drops": r["sink_drops"]}
    if "latency_us_p50" in r:
        out.update(latency_rate_pps=r["latency_rate_pps"], latency_us_p50=r["latency_us_p50"],
                   latency_us_p99=r["latency_us_p99"])
    return out


def measure_tcp(seconds):
    server = subprocess.Popen(["ip", "netns", "exec", NS_S] + bn.harness(["iperf3", "-s", "-1", "-p", str(TCP_PORT)]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    try:
        result = json.loads(ns(NS_C, *bn.harness(["iperf3", "-c", SERVER]), "-p", str(TCP_PORT), "-t", str(seconds), "-J",
                               timeout=seconds + 20).stdout)
        return {"tcp_gbps": round(result["end"]["sum_received"]["bits_per_second"] / 1e9, 3)}
    finally:
        server.kill()
        server.wait()


PAIRWALL_RULES = ("set limit states 200000\nblock all\n"
                  f"pass proto udp to port {UDP_PORT} keep state\n"
                  f"pass proto tcp to port {TCP_PORT} flags S/SA keep state\n")


def run_path(name, build, args, workdir, steal, log):
    flush_fw()
    helper = None
    if name == "kernel_conntrack":
        for rule in (["-P", "FORWARD", "DROP"],
                     ["-A", "FORWARD", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
                     ["-A", "FORWARD", "-p", "udp", "--dport", str(UDP_PORT), "-m", "conntrack", "--ctstate", "NEW",
                      "-j", "ACCEPT"],
                     ["-A", "FORWARD", "-p", "tcp", "--dport", str(TCP_PORT), "-m", "conntrack", "--ctstate", "NEW",
                      "-j", "ACCEPT"]):
            ns(NS_FW, "iptables", *rule)
    elif name == "nfqueue_null":
        helper = bn.Background(NS_FW, [f"{build}/bin/pairwall-nfq-null", "--queue", "0", "--hooks"],
                               bn.nfqueue_installed, log=os.path.join(workdir, "nfq-null.log"))
    elif name.startswith("pairwalld_q"):
        helper = bn.Pairwalld(build, workdir, PAIRWALL_RULES, queues=int(name[-1]))
    elif name != "forward":
        raise ValueError(f"unknown path {name}")
    try:
        started = time.time()
        result = {}
        result.update(measure_udp(build, args.seconds))
        if not args.no_lossless:
            log(f"{name}: lossless search")
            drops = bn.nfqueue_drops() if helper else 0
            result.update(measure_lossless(build, args.trial_seconds, args.budget, log))
            if helper:
                result["nfqueue_drops"] = bn.nfqueue_drops() - drops
        result.update(measure_tcp(args.seconds))
        result.update(steal.between(started, time.time()))
        return result
    finally:
        if helper:
            helper.stop()
        flush_fw()


PATH_LABELS = {"forward": "forward", "kernel_conntrack": "kernel\nconntrack", "nfqueue_null": "NFQUEUE\nnull",
               "pairwalld_q1": "pairwalld\n1 queue", "pairwalld_q2": "pairwalld\n2 queues"}


def plot(results, path, title):
    plt = bn.new_figure()
    paths = [p for p, r in results.items() if isinstance(r, dict) and "udp_pps" in r]
    if not paths:
        return
    labels = [PATH_LABELS.get(p, p) for p in paths]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.5))
    x = range(len(paths))
    w = 0.4
    bars = ax1.bar([i - w / 2 for i in x], [results[p].get("udp_lossless_pps", 0) / 1e3 for p in paths], w,
                   label="lossless (loss <= 0.005; hatched: sender-limited)")
    for bar, p in zip(bars, paths):
        if results[p].get("udp_lossless_sender_limited"):
            bar.set_hatch("//")
    ax1.bar([i + w / 2 for i in x], [results[p]["udp_pps"] / 1e3 for p in paths], w, label="delivered, flat out")
    ax1.set_ylabel("kpps (64-byte UDP)")
    ax1.set_title("UDP throughput")
    ax1.legend(fontsize=8)
    ax2.bar(list(x), [results[p].get("tcp_gbps", 0) for p in paths], 0.6, color="tab:green")
    ax2.set_ylabel("Gbit/s")
    ax2.set_title("TCP (iperf3)")
    ax3.bar([i - w / 2 for i in x], [results[p].get("latency_us_p50", 0) for p in paths], w, label="p50")
    ax3.bar([i + w / 2 for i in x], [results[p].get("latency_us_p99", 0) for p in paths], w, label="p99")
    ax3.set_ylabel("one-way latency (us)")
    ax3.set_title("latency at half the lossless rate")
    ax3.legend(fontsize=8)
    for ax in (ax1, ax2, ax3):
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    bn.save_figure(plt, fig, title, path)


def main():
    bn.ensure_matplotlib()
    parser = argparse.ArgumentParser(prog="pairwall-bench e2e")
    bn.add_output_args(parser, "e2e")
    parser.add_argument("--seconds", type=float, default=3.0, help="flat-out UDP and TCP runs")
    parser.add_argument("--trial-seconds", type=float, default=1.0, help="one lossless-search trial")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds for one path's lossless search")
    parser.add_argument("--no-lossless", action="store_true", help="skip the lossless search (smoke)")
    parser.add_argument("--paths", default="forward,kernel_conntrack,nfqueue_null,pairwalld_q1,pairwalld_q2")
    parser.add_argument("--no-pin", action="store_true", help="no CPU pinning / RPS (see benchnet.py)")
    args = parser.parse_args()
    bn.check_root("e2e", ("iperf3", "iptables", "mpstat"))
    build = os.path.abspath(args.build)
    log = bn.logger("e2e", args.quiet)

    results = {}
    workdir = tempfile.mkdtemp(prefix="pwb-")
    steal = bn.Steal()
    try:
        bn.topology_up(pin=not args.no_pin)
        for path in args.paths.split(","):
            try:
                results[path] = run_path(path, build, args, workdir, steal, log)
                log(f"{path}: {results[path]}")
            except Exception as e:  # one broken path must not hide the others' figures
                results[path] = {"error": str(e)}
    finally:
        steal.stop()
        bn.topology_down()
        shutil.rmtree(workdir, ignore_errors=True)
    null, q1 = results.get("nfqueue_null", {}), results.get("pairwalld_q1", {})
    if null.get("udp_pps") and q1.get("udp_pps"):
        results["pairwalld_q1_vs_null_udp"] = round(q1["udp_pps"] / null["udp_pps"], 3)
    if null.get("udp_lossless_pps") and q1.get("udp_lossless_pps"):
        results["pairwalld_q1_vs_null_udp_lossless"] = round(q1["udp_lossless_pps"] / null["udp_lossless_pps"], 3)
    results["machine"] = dict(bn.machine(), cpu_layout=bn.cpu_layout())
    title = f"pairwall-bench e2e, {bn.machine()['cpus']} CPUs, kernel {os.uname().release}"
    bn.write_outputs(results, args, "e2e", lambda png: plot(results, png, title), log)
    if args.json:
        print(json.dumps(results))
    else:
        for path, r in results.items():
            print(f"{path:18} {r}")


if __name__ == "__main__":
    main()
