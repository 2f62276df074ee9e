"""A failover drill on a lab that is up: traffic, a kill, a restore, a report.

Timeline (seconds from the moment all connections are up):
  0 ........ kill_after: traffic steady; the master is the node the driver reports
  kill_after: the master is failed (master|crash|node|link|sync) or hands over (handover); the instant is
             taken just before
  + restore_after: the failed thing is restored (pairwalld restarted, links up)
  duration: traffic stops; late probe replies get 1 s more; the report is computed.
"""

import json
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

from . import drivers, report, topology
from .lab import REPO
from .netns import LabError, stop_pids


class RoleWatcher(threading.Thread):
    """Polls the driver's roles and records every change, relative to `t0` once it is set."""

    def __init__(self, lab, period=0.1):
        super().__init__(daemon=True)
        self.lab = lab
        self.period = period
        self.changes = []
        self.last = None
        self.t_kill = None
        self.halt = threading.Event()
        self.error = None

    def run(self):
        while not self.halt.is_set():
            try:
                roles = self.lab.driver.roles()
            except Exception as e:  # a poll failing mid-kill is data, not a reason to stop watching
                self.error = str(e)
                roles = None
            t = time.monotonic()
            if roles is not None:
                if self.last is not None:
                    for node, role in roles.items():
                        if self.last.get(node) != role:
                            self.changes.append({"t": t, "node": node, "from": self.last.get(node), "to": role})
                self.last = roles
            self.halt.wait(self.period)

    def stop(self):
        self.halt.set()
        self.join(timeout=10)

    def relative(self, t_kill):
        return [{"t_ms": round((c["t"] - t_kill) * 1000.0, 1), "node": c["node"], "from": c["from"],
                 "to": c["to"]} for c in self.changes]


def _read_line(proc, timeout, what):
    """First stdout line of a child, or LabError naming `what` after `timeout` seconds."""
    out = {}

    def reader():
        out["line"] = proc.stdout.readline()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    line = out.get("line")
    if not line:
        raise LabError(f"{what} did not report ready within {timeout:.0f} s (exit code {proc.poll()})")
    return line.decode() if isinstance(line, bytes) else line


# The states on each node are read this long before the first kill (a read takes some tens of ms).
STATES_BEFORE_KILL_S = 0.5


def cpu_times():
    """(steal, total) jiffies of all CPUs from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice, already inside user/nice]
    return fields[7], sum(fields[:8])


def default_out_dir():
    return REPO / "lab-out" / datetime.now().strftime("drill-%Y%m%d-%H%M%S")


def run(lab, connections=200, duration=12.0, kill="master", kill_after=3.0, restore_after=3.0, out_dir=None,
        interval_ms=20.0, settle=True, progress=None, repeat=1, kill_every=None, churn_per_s=0.0):
    """Runs one drill and returns the report dictionary (also written to OUT_DIR/report.json).

    kill=None runs the traffic and reports without failing anything (for scenarios that inject their own
    faults).

    repeat > 1 fails the master `repeat` times, every `kill_every` seconds, each time the node that is
    master then (so kills alternate between the nodes); the report's top-level figures are then the worst
    failover and the survival across all kills, with each kill's figures under "kills"."""
    if kill is not None and kill not in drivers.KILL_KINDS:
        raise LabError(f"--kill {kill}: expected one of {', '.join(drivers.KILL_KINDS)}")
    kill_every = kill_every or (restore_after + 3.0)
    last_kill = kill_after + (repeat - 1) * kill_every
    if repeat < 1 or kill_every < restore_after + 0.5:
        raise LabError(f"repeat {repeat}, kill every {kill_every} s: need repeat >= 1 and kills spaced more "
                       f"than the restore delay ({restore_after} s)")
    if duration < last_kill + restore_after + 2:
        raise LabError(f"--duration {duration} s is too short: it must leave at least 2 s after the last kill "
                       f"({last_kill} s) and its restore ({restore_after} s)")
    if not lab.exists():
        raise LabError(f"lab {lab.prefix!r} is not up: run `pairwall-lab up` first")
    say = progress or (lambda _msg: None)
    out = Path(out_dir) if out_dir else default_out_dir()
    out.mkdir(parents=True, exist_ok=True)
    driver = lab.driver
    if kill == "handover" and not driver.can_hand_over:
        raise LabError(f"--kill handover: the {driver.name} driver has no demotion to raise (builtin and "
                       "keepalived drivers only)")
    roles_before = driver.roles()
    first_master = lab.master()
    traffic = str(lab.pkg_dir / "traffic.py")
    common = ["--port", str(topology.TCP_PORT), "--udp-port", str(topology.UDP_PORT), "--interval-ms",
              str(interval_ms)]

    cpu0 = cpu_times()
    procs = []
    kills = []  # (t_kill, old master, expected new master)
    watcher = RoleWatcher(lab)
    pending_restore = None
    settled = None
    states_before = None
    try:
        dual_stack = lab.dialled_address6()
        server = lab.spawn("server", "traffic-server", [lab.python, traffic, "server", *common, "--duration",
                                                         str(duration + 60), "--summary", str(out / "server.json"),
                                                         *(["--bind6", topology.SERVER_ADDR6] if dual_stack else [])],
                           stdout=subprocess.PIPE)
        procs.append(server)
        _read_line(server, 10, "traffic server")
        client = lab.spawn("client", "traffic-client", [
            lab.python, traffic, "client", *common, "--server", lab.dialled_address(), "--connections",
            str(connections), "--duration", str(duration), "--samples", str(out / "samples.jsonl"), "--summary",
            str(out / "client.json"), "--churn-per-s", str(churn_per_s),
            *(["--server6", dual_stack] if dual_stack else [])], stdout=subprocess.PIPE)
        procs.append(client)
        ready = json.loads(_read_line(client, 60, "traffic client"))
        say(f"{ready['established']}/{connections} connections up through {first_master}; "
            f"kill ({kill}) in {kill_after} s")
        t_start = ready["t"]
        watcher.start()

        old = first_master
        # What each node holds just before the first kill: the backup must already have the master's states.
        time.sleep(max(0.0, t_start + kill_after - STATES_BEFORE_KILL_S - time.monotonic()))
        states_before = driver.states()
        for k in range(repeat):
            time.sleep(max(0.0, t_start + kill_after + k * kill_every - time.monotonic()))
            if k > 0:
                old = lab.master()
            t_kill = time.monotonic()
            if kill is None:
                # Traffic only: the "kill" instant is a reference point for the report, nothing fails.
                kills.append((t_kill, old, None))
                continue
            driver.kill(old, kill)
            pending_restore = old
            kills.append((t_kill, old, topology.other(old) if kill != "sync" else None))
            say(f"killed: {kill} of {old}")
            takeover = threading.Thread(target=driver.after_kill, args=(old, kill, t_kill), daemon=True)
            takeover.start()

            time.sleep(max(0.0, t_kill + restore_after - time.monotonic()))
            takeover.join(timeout=10)
            driver.restore(old, kill)
            pending_restore = None
            say(f"restored: {kill} of {old}")
            if settle and hasattr(driver, "wait_pair_ready"):
                # The next kill needs a backup with the whole table; the last one is reported.
                budget = (kill_every - restore_after - 0.2) if k + 1 < repeat else \
                    max(1.0, t_start + duration - 1.5 - time.monotonic())
                try:
                    driver.wait_pair_ready(timeout=max(1.0, budget))
                    settled = True
                except LabError as e:
                    settled = False
                    say(f"not settled after the restore: {e}")

        # States are read while the connections are still open.
        time.sleep(max(0.0, t_start + duration - 1.0 - time.monotonic()))
        states = driver.states()
        try:
            client.wait(timeout=max(5.0, t_start + duration + 30 - time.monotonic()))
        except subprocess.TimeoutExpired as e:
            raise LabError("traffic client did not finish in time; see "
                           f"{lab.log_file('client', 'traffic-client')}") from e
        if client.returncode != 0:
            raise LabError(f"traffic client failed ({client.returncode}):\n{lab.log_tail('client', 'traffic-client')}")
        watcher.stop()
        summary = json.loads((out / "client.json").read_text())
    finally:
        watcher.halt.set()
        stop_pids([p.pid for p in procs if p.poll() is None])
        for p in procs:
            if p.stdout:
                p.stdout.close()
        if pending_restore is not None:
            try:
                driver.restore(pending_restore, kill)
            except LabError:
                pass  # `down` removes what is left

    cpu1 = cpu_times()
    # Figures on a shared VM mean little without the CPU time the hypervisor took away meanwhile.
    steal_pct = round(100.0 * (cpu1[0] - cpu0[0]) / max(1, cpu1[1] - cpu0[1]), 1)
    server_summary = {}
    try:
        server_summary = json.loads((out / "server.json").read_text())
    except (OSError, ValueError):
        pass
    tags = {n.name: n.ttl_tag for n in topology.NODES}
    t_first = kills[0][0]
    per_kill = []
    for i, (t_kill, old, new) in enumerate(kills):
        until = kills[i + 1][0] if i + 1 < len(kills) else None
        r = report.analyse(summary, t_kill, tags, old, new, until=until)
        per_kill.append({"t_kill_s": round(t_kill - t_start, 3), "old_master": old, "new_master": new,
                         "failover_ms": r["failover_ms"], "outage_ms": r["outage_ms"],
                         **{k: r[k] for k in ("failover_ms_by_family", "outage_ms_by_family") if k in r}})
    # Survival is judged after the last failover; losses, stalls and role changes over the whole run.
    t_last, old_last, new_last = kills[-1]
    rep = report.analyse(summary, t_last, tags, old_last, new_last, watcher.relative(t_first), states, extra={
        "driver": driver.name, "defer": lab.defer, "modulate": lab.modulate,
        "synproxy": lab.synproxy, "scrub_tcp": lab.scrub_tcp, "rdr": lab.rdr, "ipv6": lab.ipv6, "kill": kill,
        "advbase_ms": lab.advbase_ms, "roles_before": roles_before,
        "roles_after": driver.roles(), "pair_settled": settled,
        "server_sequence_violations": server_summary.get("violations"), "samples": str(out / "samples.jsonl"),
        "t_kill_s": round(t_first - t_start, 3), "cpu_steal_pct": steal_pct, "states_before_kill": states_before})
    rep["old_master"], rep["new_master"] = kills[0][1], kills[0][2]
    if repeat > 1:
        fos = [k["failover_ms"] for k in per_kill]
        rep["failover_ms"] = None if None in fos else max(fos)
        rep["outage_ms"] = max(k["outage_ms"] for k in per_kill)
        for key in ("failover_ms_by_family", "outage_ms_by_family"):
            if key in rep:  # dual stack: each family's worst kill
                rep[key] = {f: None if any(k[key][f] is None for k in per_kill) else max(k[key][f] for k in per_kill)
                            for f in rep[key]}
        rep["kills"] = per_kill
    else:
        rep["path_before_kill"] = report.analyse(summary, t_first, tags, old_last, new_last)["path_before_kill"]
    (out / "report.json").write_text(json.dumps(rep, indent=1))
    return rep
