#!/usr/bin/env python3
"""State replication between the two firewalls of the lab pair: pairwall's sync vs conntrackd (FT-FW).

    pairwall-bench sync-lab [--json] [--runs 3] [--flows 50000] [--rate 40000] [--build DIR]

Stacks (tools/lab drivers), a fresh lab per run, runs interleaved:
  pairwall     `builtin`: pairwalld in both firewalls, its own sync
  conntrackd   `conntrackd`: kernel conntrack + conntrackd FT-FW + keepalived (conntrack-tools' examples)
Per run, the same flows for both: the lab's paced UDP preload sends one datagram per flow from the client
(--flows distinct flows, paced at --rate flows/s) through the master.
  replication  time from the first new state on the master until the peer holds as many new states as the
               master made:
               states_synced_per_s = flows / that time (the master's own creation rate and the lag are
               reported beside it: replication cannot be faster than the offered rate)
  bulk         the backup's sync daemon is killed (-9) and started again: pairwalld asks for a bulk resync
               at boot; conntrackd is asked with `conntrackd -n` once it answers, as primary-backup.sh
               does. bulk_states_per_s = states / time from the restart until the daemon holds all the
               master's states (so it includes the daemon's start, bulk_start_s: what an operator waits);
               bulk_states_per_s_after_start leaves the start out when the bulk outlasts it by 2 polls
Counts: pairwall `pairwallctl states --count` on each node; conntrackd `conntrackd -s cache`, the master's
internal cache and the backup's external cache. mpstat %steal is logged beside the figures.
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lab"))

import benchnet as bn  # noqa: E402
from pairwall_lab import chaos, topology  # noqa: E402
from pairwall_lab.drivers import find_key  # noqa: E402
from pairwall_lab.lab import Lab  # noqa: E402
from pairwall_lab.netns import LabError  # noqa: E402

STACKS = {"pairwall": "builtin", "conntrackd": "conntrackd"}
PREFIX = "pwbs-"
POLL_S = 0.02


def count(stack, lab, node, role):
    """States `node` holds for the pair (None when it cannot be read)."""
    d = lab.driver
    if stack == "conntrackd":
        return d.cache_counts(node)["internal" if role == "master" else "external"]
    return _pairwall_count(d, node)


def _pairwall_count(driver, node):
    r = driver.ctl(node, "states", "--count", "--json")
    c = find_key(r, ("total", "count", "states")) if r is not None else None
    return int(c) if isinstance(c, (int, str)) and str(c).isdigit() else None


def wait_count(stack, lab, node, role, target, t0, timeout):
    """Polls until `node` holds `target` states; (seconds from t0 or None, last count)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = count(stack, lab, node, role)
        if last is not None and last >= target:
            return time.monotonic() - t0, last
        time.sleep(POLL_S)
    return None, last


def replication(stack, lab, master, peer, args, sport):
    base_m = count(stack, lab, master, "master") or 0
    base_p = count(stack, lab, peer, "backup") or 0
    sent = {}
    t0 = time.monotonic()
    th = threading.Thread(target=lambda: sent.update(n=chaos.preload_udp_states(
        lab, args.flows, sport=sport, rate=args.rate, timeout=args.timeout)), daemon=True)
    th.start()
    samples = []  # (t, master new states, peer new states)
    t_master = t_peer = None
    deadline = t0 + args.timeout
    while time.monotonic() < deadline:
        m = count(stack, lab, master, "master")
        p = count(stack, lab, peer, "backup")
        t = time.monotonic() - t0
        samples.append((t, None if m is None else m - base_m, None if p is None else p - base_p))
        if not th.is_alive():
            made = samples[-1][1] or 0
            # The master is done when its count stops growing after the sender finished.
            if t_master is None and len(samples) > 2 and samples[-2][1] == made:
                t_master = next(s[0] for s in samples if s[1] is not None and s[1] >= made)
            if t_master is not None and p is not None and p - base_p >= made:
                t_peer = t
                break
        time.sleep(POLL_S)
    th.join(timeout=5)
    made = samples[-1][1] if samples else None
    got = samples[-1][2] if samples else None
    # Times count from the last poll that saw no new state on the master (the sender's start-up in its
    # namespace is not the firewalls' time); conservative by up to one poll.
    t_first = 0.0
    for t, m, _p in samples:
        if m:
            break
        t_first = t
    if t_master is not None:
        t_master -= t_first
    if t_peer is not None:
        t_peer -= t_first
    out = {"flows_sent": sent.get("n"), "master_new_states": made, "peer_new_states": got,
           "master_s": round(t_master, 3) if t_master else None, "peer_s": round(t_peer, 3) if t_peer else None}
    if made and t_master:
        out["master_states_per_s"] = round(made / t_master)
    if made and t_peer:
        out["states_synced_per_s"] = round(made / t_peer)
        out["sync_lag_ms"] = round((t_peer - t_master) * 1000.0, 1)
    return out


def bulk(stack, lab, master, peer, args):
    """Restarts the backup's sync daemon; times from the restart (after the old one has exited) until it
    holds all the master's states."""
    d = lab.driver
    target = count(stack, lab, master, "master")
    if stack == "conntrackd":
        d._kill9_pid(d.conntrackd_pid(peer))
        t0 = time.monotonic()
        d.start_conntrackd(peer)  # returns once it answers `conntrackd -s`
        t_ready = time.monotonic()
        d.cctl(peer, "-n")  # request a resync from the master, as primary-backup.sh does on `backup`
    else:
        lab.kill9(peer, "pairwalld")
        t0 = time.monotonic()
        d.start_daemon(peer)  # asks its peer for a bulk resync at boot
        d.wait_socket(peer)
        while _pairwall_count(d, peer) is None and time.monotonic() - t0 < 30:
            time.sleep(POLL_S)
        t_ready = time.monotonic()
    took, got = wait_count(stack, lab, peer, "backup", target, t0, args.timeout)
    out = {"bulk_target_states": target, "bulk_got_states": got, "bulk_start_s": round(t_ready - t0, 3),
           "bulk_s_from_restart": round(took, 3) if took else None}
    if took and target:
        out["bulk_states_per_s"] = round(target / took)
        if took - (t_ready - t0) > 2 * POLL_S:
            out["bulk_states_per_s_after_start"] = round(target / (took - (t_ready - t0)))
    return out


def one_run(stack, args, bin_dir, run, steal, log):
    lab = Lab(args.prefix, bin_dir=bin_dir, driver=STACKS[stack], advbase_ms=args.advbase_ms)
    t_wall = time.time()
    try:
        lab.up(replace=True)
        master = lab.master()
        peer = topology.other(master)
        r = replication(stack, lab, master, peer, args, sport=20000 + 10 * run)
        time.sleep(1.0)
        r.update(bulk(stack, lab, master, peer, args))
    except LabError as e:
        log(f"{stack}: {e}")
        return {"error": str(e).splitlines()[0][:300]}
    finally:
        lab.down()
    r.update(steal.between(t_wall, time.time()))
    return r


def summarise(runs):
    ok = [r for r in runs if "error" not in r]

    def med(key):
        v = [r[key] for r in ok if r.get(key) is not None]
        return round(statistics.median(v)) if v else None

    return {"states_synced_per_s": med("states_synced_per_s"), "master_states_per_s": med("master_states_per_s"),
            "sync_lag_ms": med("sync_lag_ms"), "bulk_states_per_s": med("bulk_states_per_s"),
            "runs_incomplete": sum(1 for r in ok if r.get("states_synced_per_s") is None
                                   or r.get("bulk_states_per_s") is None),
            "runs_failed": len(runs) - len(ok), "runs": runs}


def plot(results, stacks, path, title):
    plt = bn.new_figure()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 4))
    x = list(range(len(stacks)))
    colors = ["tab:blue", "tab:orange"]
    for ax, key, what in ((ax1, "states_synced_per_s", "replication (new flows)"),
                          (ax2, "bulk_states_per_s", "bulk resync after a restart")):
        vals = [(results[s][key] or 0) / 1e3 for s in stacks]
        ax.bar(x, vals, 0.6, color=colors[:len(stacks)], alpha=0.8)
        for i, s in enumerate(stacks):
            pts = [r[key] / 1e3 for r in results[s]["runs"] if r.get(key)]
            ax.plot([i] * len(pts), pts, "k.", markersize=6)
            ax.annotate(f"{vals[i]:.1f}k/s", (i, vals[i]), ha="center", va="bottom", fontsize=8, xytext=(0, 3),
                        textcoords="offset points")
        ax.set_xticks(x)
        ax.set_xticklabels(stacks)
        ax.set_ylabel("states per second (thousands)")
        ax.set_title(what)
        ax.grid(axis="y", alpha=0.3)
    offered = results["settings"]["rate"] / 1e3
    ax1.axhline(offered, color="grey", linestyle="--", linewidth=1)
    ax1.annotate(f"offered {offered:.0f}k/s", (0, offered), fontsize=7, color="grey", xytext=(0, 2),
                 textcoords="offset points")
    bn.save_figure(plt, fig, title, path)


def main():
    bn.ensure_matplotlib()
    parser = argparse.ArgumentParser(prog="pairwall-bench sync-lab")
    bn.add_output_args(parser, "sync-lab")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--flows", type=int, default=50000, help="UDP flows per run (default %(default)s)")
    parser.add_argument("--rate", type=int, default=40000, help="offered new flows per second (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds allowed for each phase")
    parser.add_argument("--advbase-ms", type=int, default=200)
    parser.add_argument("--stacks", default=",".join(STACKS))
    parser.add_argument("--prefix", default=PREFIX, help="lab namespace prefix (default %(default)s)")
    args = parser.parse_args()
    stacks = [s for s in args.stacks.split(",") if s]
    if any(s not in STACKS for s in stacks) or args.runs < 1 or args.flows < 1:
        parser.error(f"--stacks from {','.join(STACKS)}, --runs and --flows positive")
    bn.check_root("sync-lab", ("keepalived", "conntrackd", "conntrack", "iptables", "mpstat"))
    bin_dir = os.path.join(os.path.abspath(args.build), "bin")
    log = bn.logger("sync-lab", args.quiet)
    steal = bn.Steal()
    t_start = time.time()
    runs = {s: [] for s in stacks}
    try:
        for i in range(args.runs):
            for s in stacks:
                r = one_run(s, args, bin_dir, i, steal, log)
                runs[s].append(r)
                log(f"{s} run {i + 1}/{args.runs}: synced {r.get('states_synced_per_s')}/s (master "
                    f"{r.get('master_states_per_s')}/s), bulk {r.get('bulk_states_per_s')}/s, steal "
                    f"{r.get('steal_pct')}%" + (f", error {r['error']}" if "error" in r else ""))
    finally:
        steal.stop()
        Lab(args.prefix).down()
    results = {s: summarise(runs[s]) for s in stacks}
    results["machine"] = dict(bn.machine(), **steal.between(t_start, time.time()))
    results["settings"] = {"runs": args.runs, "flows": args.flows, "rate": args.rate, "advbase_ms": args.advbase_ms}
    m = results["machine"]
    title = (f"pairwall-bench sync-lab: {args.flows} UDP flows offered at {args.rate}/s, {args.runs} runs; "
             f"{m['cpus']} CPUs, kernel {m['kernel']}, steal {m.get('steal_pct', '?')}%")
    bn.write_outputs(results, args, "sync-lab", lambda png: plot(results, stacks, png, title), log)
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for s in stacks:
            r = results[s]
            print(f"{s:12} replicated {r['states_synced_per_s']}/s (master created {r['master_states_per_s']}/s, "
                  f"lag {r['sync_lag_ms']} ms), bulk {r['bulk_states_per_s']}/s")
        print(f"steal {results['machine'].get('steal_pct')}% (max {results['machine'].get('steal_pct_max')}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
