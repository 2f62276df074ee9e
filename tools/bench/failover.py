#!/usr/bin/env python3
"""Failover side by side: the lab's kill-the-master drill, N times, for three pairs on the same namespaces.

    pairwall-bench failover [--json] [--runs 5] [--connections 200] [--kill master|crash|node] [--preload N]
                            [--build DIR]

Stacks (tools/lab drivers), one lab brought up afresh for every run, runs interleaved (run 1 of each
stack, then run 2, ...) so that noise on a shared machine spreads over all of them:
  pairwall               `builtin`: pairwalld's own election and sync
  pairwall_keepalived    `keepalived`: pairwalld filters and syncs, keepalived (VRRPv3) elects
  conntrackd_keepalived  `conntrackd`: kernel conntrack + conntrackd (FT-FW) + keepalived calling
                         conntrack-tools' primary-backup.sh, configured from its shipped examples
The drill and its figures are the lab's (tools/lab/README.md): failover_ms is the kill instant to the first
probe reply forwarded by the new master; a connection survives when it was never reset and carried data
both ways after the failover. Per stack: the median failover_ms over the runs, survived/total over all
runs, and the median of each run's longest TCP stall (probes can make new states on the new master, TCP
needs the old ones: a cache commit after the takeover shows there). --preload N fills the table with N UDP
states before each drill. mpstat %steal is logged beside the figures (machine.steal_pct, and each run's
cpu_steal_pct).
"""
import argparse
import json
import os
import statistics
import sys
import time
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lab"))

import benchnet as bn  # noqa: E402
from pairwall_lab import chaos, drill  # noqa: E402
from pairwall_lab.lab import Lab  # noqa: E402
from pairwall_lab.netns import LabError  # noqa: E402

# Result key -> lab driver.
STACKS = {"pairwall": "builtin", "pairwall_keepalived": "keepalived", "conntrackd_keepalived": "conntrackd"}
LABELS = {"pairwall": "pairwall\n(builtin)", "pairwall_keepalived": "pairwall\n+ keepalived",
          "conntrackd_keepalived": "conntrack + conntrackd\n+ keepalived"}
# A lab prefix of its own: the tests use pg-, the demo pwl-, the other suites pwb-.
PREFIX = "pwbf-"
RUN_FIELDS = ("failover_ms", "outage_ms", "survived", "connections", "established", "reconnects", "ping_lost",
              "udp_lost", "tcp_stall_ms_max", "states_before_kill", "states_a", "states_b", "cpu_steal_pct",
              "old_master", "new_master", "pair_settled")


def one_run(stack, args, bin_dir, out_dir, steal, log):
    lab = Lab(args.prefix, bin_dir=bin_dir, driver=STACKS[stack], advbase_ms=args.advbase_ms)
    t0 = time.time()
    try:
        lab.up(replace=True)
        if args.preload:
            # A table the new master must already hold (pairwall) or commit from its cache (conntrackd).
            chaos.preload_udp_states(lab, args.preload)
            time.sleep(1.0)
        rep = drill.run(lab, connections=args.connections, duration=args.duration, kill=args.kill,
                        kill_after=args.kill_after, restore_after=args.restore_after, out_dir=out_dir)
    except LabError as e:
        log(f"{stack}: {e}")
        return {"error": str(e).splitlines()[0][:300]}
    finally:
        lab.down()
    run = {k: rep.get(k) for k in RUN_FIELDS}
    run.update(steal.between(t0, time.time()))
    return run


def summarise(runs, connections):
    ok = [r for r in runs if "error" not in r]
    fos = [r["failover_ms"] for r in ok if r["failover_ms"] is not None]
    total = sum(r["connections"] for r in ok)
    return {
        "failover_ms_median": round(statistics.median(fos), 1) if fos else None,
        "failover_ms_min": min(fos) if fos else None,
        "failover_ms_max": max(fos) if fos else None,
        "outage_ms_median": round(statistics.median(r["outage_ms"] for r in ok), 1) if ok else None,
        # Probes (UDP, ping) may make new states on the new master; TCP needs the old ones: its longest stall
        # shows when the connections moved again (a cache commit shows here, not in failover_ms).
        "tcp_stall_ms_max_median": round(statistics.median(r["tcp_stall_ms_max"] for r in ok), 1) if ok else None,
        "survived_ratio": round(sum(r["survived"] for r in ok) / total, 4) if total else None,
        "survived": sum(r["survived"] for r in ok),
        "connections_total": total,
        "runs_without_takeover": sum(1 for r in ok if r["failover_ms"] is None),
        "runs_failed": len(runs) - len(ok),
        "runs": runs,
    }


def plot(results, stacks, path, title):
    plt = bn.new_figure()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.2))
    x = list(range(len(stacks)))
    colors = ["tab:blue", "tab:cyan", "tab:orange"]
    med = [results[s]["failover_ms_median"] or 0 for s in stacks]
    ax1.bar(x, med, 0.6, color=colors[:len(stacks)], alpha=0.6, label="median")
    for i, s in enumerate(stacks):
        pts = [r["failover_ms"] for r in results[s]["runs"] if r.get("failover_ms") is not None]
        ax1.plot([i] * len(pts), pts, "k.", markersize=6, label="each run" if i == 0 else None)
        ax1.annotate(f"median {med[i]:.0f} ms", (i, 0), ha="center", va="bottom", fontsize=8,
                     xytext=(0, 4), textcoords="offset points")
    ax1.set_ylabel("failover_ms (kill -> first reply via the new master)")
    ax1.set_title("takeover time")
    ax1.legend(fontsize=8)
    ratio = [100.0 * (results[s]["survived_ratio"] or 0) for s in stacks]
    ax2.bar(x, ratio, 0.6, color=colors[:len(stacks)], alpha=0.8)
    for i, s in enumerate(stacks):
        ax2.annotate(f"{results[s]['survived']}/{results[s]['connections_total']}", (i, ratio[i]), ha="center",
                     va="bottom", fontsize=8, xytext=(0, 3), textcoords="offset points")
    ax2.set_ylim(0, 110)
    ax2.set_ylabel("TCP connections that survived (%)")
    ax2.set_title("sessions kept")
    for ax in (ax1, ax2):
        ax.set_xticks(x)
        ax.set_xticklabels([LABELS[s] for s in stacks], fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    bn.save_figure(plt, fig, title, path)


def main():
    bn.ensure_matplotlib()
    parser = argparse.ArgumentParser(prog="pairwall-bench failover")
    bn.add_output_args(parser, "failover")
    parser.add_argument("--runs", type=int, default=5, help="drills per stack (default %(default)s)")
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--duration", type=float, default=12.0, help="traffic seconds per drill")
    parser.add_argument("--kill", choices=["master", "crash", "node"], default="master")
    parser.add_argument("--preload", type=int, default=0,
                        help="UDP flows (states) created through the master before each drill (default none)")
    parser.add_argument("--kill-after", type=float, default=3.0)
    parser.add_argument("--restore-after", type=float, default=4.0)
    parser.add_argument("--advbase-ms", type=int, default=200, help="advertisement interval of every stack")
    parser.add_argument("--stacks", default=",".join(STACKS), help="comma-separated subset of %(default)s")
    parser.add_argument("--prefix", default=PREFIX, help="lab namespace prefix (default %(default)s)")
    args = parser.parse_args()
    stacks = [s for s in args.stacks.split(",") if s]
    unknown = [s for s in stacks if s not in STACKS]
    if unknown or args.runs < 1:
        parser.error(f"unknown stacks {unknown}" if unknown else "--runs wants a positive integer")
    bn.check_root("failover", ("keepalived", "conntrackd", "conntrack", "iptables", "mpstat"))
    bin_dir = os.path.join(os.path.abspath(args.build), "bin")
    log = bn.logger("failover", args.quiet)
    runs_dir = os.path.join(os.path.dirname(bn.default_plot_path("x")),
                            datetime.now().strftime("failover-%Y%m%d-%H%M%S"))

    steal = bn.Steal()
    t_start = time.time()
    runs = {s: [] for s in stacks}
    try:
        for i in range(args.runs):
            for s in stacks:
                r = one_run(s, args, bin_dir, os.path.join(runs_dir, f"{s}-{i + 1}"), steal, log)
                runs[s].append(r)
                log(f"{s} run {i + 1}/{args.runs}: failover {r.get('failover_ms')} ms, survived "
                    f"{r.get('survived')}/{r.get('connections')}, steal {r.get('steal_pct')}%"
                    + (f", error {r['error']}" if "error" in r else ""))
    finally:
        steal.stop()
        Lab(args.prefix).down()
    results = {s: summarise(runs[s], args.connections) for s in stacks}
    results["machine"] = dict(bn.machine(), **steal.between(t_start, time.time()))
    results["settings"] = {"runs": args.runs, "connections": args.connections, "kill": args.kill,
                           "advbase_ms": args.advbase_ms, "duration_s": args.duration,
                           "kill_after_s": args.kill_after, "restore_after_s": args.restore_after,
                           "preload_states": args.preload,
                           "drill_reports": runs_dir}
    m = results["machine"]
    title = (f"pairwall-bench failover: kill -9 of the {args.kill}, {args.runs} runs x {args.connections} TCP "
             f"connections, advert {args.advbase_ms} ms; {m['cpus']} CPUs, kernel {m['kernel']}, steal "
             f"{m.get('steal_pct', '?')}%")
    bn.write_outputs(results, args, "failover", lambda png: plot(results, stacks, png, title), log)
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for s in stacks:
            r = results[s]
            print(f"{s:24} failover median {r['failover_ms_median']} ms (min {r['failover_ms_min']}, max "
                  f"{r['failover_ms_max']}), survived {r['survived']}/{r['connections_total']}"
                  f" ({r['survived_ratio']}), TCP stall median {r['tcp_stall_ms_max_median']} ms, failed runs "
                  f"{r['runs_failed']}")
        print(f"steal {results['machine'].get('steal_pct')}% (max {results['machine'].get('steal_pct_max')}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
