"""pairwall-lab: a pairwall firewall pair in network namespaces, traffic through it, failover drills."""

import argparse
import json
import os
import subprocess
import sys

from . import drill, report, topology
from .drivers import KILL_KINDS
from .lab import DEFAULT_PREFIX, PKG_DIR, REPO, RUN_ROOT, Lab
from .netns import FeatureMissing, LabError

TOPOLOGY_HELP = f"""\
namespaces (PREFIX defaults to {DEFAULT_PREFIX!r}):
  PREFIXclient  eth0 {topology.CLIENT_ADDR}/24, default route via the inside VIP {topology.VIP_IN}
  PREFIXfwA     in0 {topology.NODES[0].inside}/24, out0 {topology.NODES[0].outside}/24, sync0 {topology.NODES[0].sync}/30
  PREFIXfwB     in0 {topology.NODES[1].inside}/24, out0 {topology.NODES[1].outside}/24, sync0 {topology.NODES[1].sync}/30
  PREFIXserver  eth0 {topology.SERVER_ADDR}/24, default route via the outside VIP {topology.VIP_OUT}
  PREFIXsw      the two LAN bridges br-in and br-out (the switch); the root namespace is never touched
run files (configs, logs, pid files): {RUN_ROOT}/PREFIX/;  drill output: lab-out/drill-*/
"""

DRILL_HELP = """\
The drill opens N TCP connections client->server carrying 200-byte records both ways every 20 ms, a UDP
echo flow and a ping (each every 10 ms), fails the master, restores it, and prints a JSON report:

  connections, survived   a connection survives if it was up before the kill, never reset, closed or
                          reconnected, and carried data in both directions after the failover
  failover_ms             from the kill instant to the arrival at the client of the first probe reply
                          (ping or UDP) sent after the kill and forwarded by the new master (each firewall
                          stamps probe replies with its own TTL: fwA 101, fwB 102); resolution 10 ms;
                          null when no takeover is expected (--kill sync) or none happened
  outage_ms               the longest time without any probe reply after the kill
  ping_lost, udp_lost     probes without a reply (1 s grace after the last probe)
  tcp_stall_ms_max        the longest time a connection went without data from the server or without
                          the server's acknowledgement of the client's data advancing
  states_a, states_b      state counts on fwA and fwB, read 1 s before the traffic stops
  role_changes            [{t_ms (from the kill), node, from, to}] as polled every 100 ms

Kinds of kill: master = kill -9 of pairwalld (its VIPs stay in its kernel); crash = the same, then what
systemd runs after it (the unit's ExecStopPost, pairwalld --cleanup; the baseline has no such step and
is killed as for master); node = kill -9 and every link
of the namespace down (power loss); link = the master's outside LAN cable pulled (switch port down);
sync = the sync link cut; handover = nothing fails: a planned handover, the master's administrative
demotion raised by 100 (`pairwallctl failover demote 100`, as CARP's carpdemote before maintenance) and
lowered again at the restore (builtin and keepalived drivers). With --driver none, master turns off the
node's IP forwarding and a scripted takeover moves the VIPs to the other node after 3*advbase + skew: it
exercises the lab, not pairwall.
"""


def parser():
    p = argparse.ArgumentParser(prog="pairwall-lab", description=__doc__ + "\n\n" + TOPOLOGY_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prefix", default=DEFAULT_PREFIX, help="namespace name prefix (default %(default)s)")
    p.add_argument("--bin-dir", help="where pairwalld and pairwallctl are (default build/bin)")
    sub = p.add_subparsers(dest="cmd", required=True)

    up = sub.add_parser("up", help="build the pair and start it")
    up.add_argument("--nodes", type=int, default=2, choices=[2], help="firewall nodes (2)")
    up.add_argument("--driver", choices=["builtin", "keepalived", "conntrackd", "scripted", "none"],
                    default="builtin",
                    help="who elects the master (scripted: pairwalld filters, the lab moves the VIPs; "
                         "conntrackd: no pairwalld, the kernel conntrack + conntrackd + keepalived baseline; "
                         "none: no pairwalld, kernel forwarding)")
    up.add_argument("--advbase-ms", type=int, default=200)
    up.add_argument("--nat", action="store_true",
                    help=f"the firewalls also translate the inside: nat on {topology.IF_OUT} from "
                         f"{topology.INSIDE_NET} to any -> {topology.VIP_OUT} (the outside VIP; pairwalld drivers)")
    up.add_argument("--rdr", action="store_true",
                    help=f"the firewalls redirect {topology.SERVICE_ADDR}, routed by neither, to the server before "
                         f"routing (rdr on {topology.IF_IN} inet to {topology.SERVICE_ADDR} -> "
                         f"{topology.SERVER_ADDR}), and the drill dials it (pairwalld drivers)")
    up.add_argument("--ipv6", action="store_true",
                    help=f"dual stack: the LANs also in IPv6 ({topology.INSIDE_NET6}, {topology.OUTSIDE_NET6}), "
                         f"IPv6 VIPs, and the drill's connections and probes in both families (builtin and "
                         f"keepalived drivers)")
    up.add_argument("--defer", action="store_true",
                    help="[sync] defer: a new state's first packet waits for the peer's copy (pairwalld drivers)")
    up.add_argument("--modulate", action="store_true",
                    help="the rules keep state with `modulate state`: TCP sequence numbers shifted on the way "
                         "through (pairwalld drivers)")
    up.add_argument("--synproxy", action="store_true",
                    help="the rules keep state with `synproxy state`: the firewall completes each TCP "
                         "handshake before the server sees it (pairwalld drivers)")
    up.add_argument("--scrub-tcp", action="store_true",
                    help="the rules scrub the inside's TCP with `reassemble tcp`: TTLs raised, timestamps shifted "
                         "on the way through; combines with --modulate or --synproxy (pairwalld drivers)")
    up.add_argument("--replace", action="store_true", help="tear down a lab with this prefix first")
    up.add_argument("--json", action="store_true")

    for name, helptext in (("drill", "traffic, fail the master, restore, report"),
                           ("demo", "install/build if needed, up, a 200-connection drill, summary and plot, down")):
        d = sub.add_parser(name, help=helptext, description=DRILL_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        d.add_argument("--connections", type=int, default=200)
        d.add_argument("--duration", type=float, default=12.0, help="traffic time, seconds (default %(default)s)")
        d.add_argument("--kill", choices=list(KILL_KINDS), default="master")
        d.add_argument("--kill-after", type=float, default=3.0)
        d.add_argument("--restore-after", type=float, default=3.0)
        d.add_argument("--churn", type=float, default=0.0, help="short connections per second besides the long ones")
        d.add_argument("--repeat", type=int, default=1, help="fail the master this many times (alternating)")
        d.add_argument("--kill-every", type=float, help="seconds between repeated kills (default restore-after + 3)")
        d.add_argument("--out", help="output directory (default lab-out/drill-TIMESTAMP)")
        d.add_argument("--json", action="store_true", help="print the report as JSON")
        if name == "drill":
            d.add_argument("--plot", action="store_true", help="also write drill.png beside the report")
        if name == "demo":
            d.add_argument("--driver", choices=["auto", "builtin", "keepalived", "conntrackd", "scripted", "none"],
                           default="auto",
                           help="auto: builtin when pairwalld is built, otherwise none (said loudly)")
            d.add_argument("--advbase-ms", type=int, default=200)
            d.add_argument("--defer", action="store_true", help="as `up --defer`")
            d.add_argument("--modulate", action="store_true", help="as `up --modulate`")
            d.add_argument("--synproxy", action="store_true", help="as `up --synproxy`")
            d.add_argument("--scrub-tcp", action="store_true", help="as `up --scrub-tcp`")
            d.add_argument("--ipv4-only", action="store_true",
                           help="not dual stack (the demo is, as `up --ipv6`, with driver builtin or keepalived)")
            d.add_argument("--no-build", action="store_true", help="do not install packages or build")

    st = sub.add_parser("status", help="roles, states per node, sync health")
    st.add_argument("--json", action="store_true")
    sub.add_parser("down", help="remove every namespace, link and process of the lab (also after a crash)")
    return p


def build_if_needed(bin_dir, say):
    if os.access(os.path.join(bin_dir, "pairwalld"), os.X_OK):
        return
    say("pairwalld not built: installing dependencies and building (release preset)")
    subprocess.run(["bash", str(REPO / "tools" / "install-deps.sh")], check=True)
    subprocess.run(["cmake", "--preset", "release"], cwd=REPO, check=True)
    subprocess.run(["cmake", "--build", "--preset", "release", "--", "-j2"], cwd=REPO, check=True)


def make_plot(rep, say):
    """Writes drill.png beside the samples; returns its path or None (with the reason said)."""
    out_dir = os.path.dirname(rep["samples"])
    png = os.path.join(out_dir, "drill.png")
    client = os.path.join(out_dir, "client.json")
    try:
        from . import plot

        with open(client, encoding="utf-8") as f:
            return plot.plot(rep["samples"], rep, png, json.load(f))
    except ImportError:
        pass
    # The interpreter running the lab may be a private one without matplotlib; Debian's has it.
    system_python = "/usr/bin/python3"
    if os.path.realpath(sys.executable) != os.path.realpath(system_python) and os.access(system_python, os.X_OK):
        cp = subprocess.run([system_python, str(PKG_DIR / "plot.py"), rep["samples"],
                             os.path.join(out_dir, "report.json"), png, client], capture_output=True, text=True)
        if cp.returncode == 0:
            return png
        say(f"no plot: {cp.stderr.strip().splitlines()[-1] if cp.stderr.strip() else cp.returncode}")
        return None
    say("no plot: matplotlib is missing (apt-get install python3-matplotlib)")
    return None


def demo(args, say):
    lab = Lab(args.prefix, bin_dir=args.bin_dir, driver=args.driver, advbase_ms=args.advbase_ms,
              defer=args.defer, modulate=args.modulate, synproxy=args.synproxy, scrub_tcp=args.scrub_tcp)
    if args.driver != "none" and not args.no_build:
        build_if_needed(str(lab.bin_dir), say)
    if args.driver == "auto":
        built = os.access(lab.bin("pairwalld"), os.X_OK) and os.access(lab.bin("pairwallctl"), os.X_OK)
        lab.driver_name = "builtin" if built else "none"
        if not built:
            say(f"WARNING: {lab.bin('pairwalld')} is not built: this demo runs WITHOUT pairwall (kernel "
                "forwarding, scripted takeover); it shows the lab and its measurements, not the firewall")
    # Dual stack where the pair moves its IPv6 VIPs itself.
    lab.ipv6 = not args.ipv4_only and lab.driver_name in ("builtin", "keepalived")
    say(f"bringing the lab up (driver {lab.driver_name}, advbase {args.advbase_ms} ms"
        f"{', dual stack' if lab.ipv6 else ''})")
    try:
        lab.up(replace=True)
    except FeatureMissing as e:
        if args.driver != "auto":
            raise
        say(f"WARNING: {e}")
        say("WARNING: falling back to --driver scripted: pairwalld filters, the lab moves the VIPs; "
            "connections survive only if pairwalld syncs its states")
        lab = Lab(args.prefix, bin_dir=args.bin_dir, driver="scripted", advbase_ms=args.advbase_ms,
                  defer=args.defer, modulate=args.modulate, synproxy=args.synproxy, scrub_tcp=args.scrub_tcp)
        lab.up(replace=True)
    try:
        rep = drill.run(lab, connections=args.connections, duration=args.duration, kill=args.kill,
                        kill_after=args.kill_after, restore_after=args.restore_after, out_dir=args.out,
                        progress=say, repeat=args.repeat, kill_every=args.kill_every,
                        churn_per_s=args.churn)
        rep["plot"] = make_plot(rep, say)
    finally:
        say("tearing the lab down")
        lab.down()
    return rep


def main(argv=None):
    args = parser().parse_args(argv)
    say = (lambda m: print(f"pairwall-lab: {m}", file=sys.stderr, flush=True))
    if os.geteuid() != 0:
        print("pairwall-lab: needs root (network namespaces); run it with sudo", file=sys.stderr)
        return 2
    try:
        if args.cmd == "down":
            removed = Lab(args.prefix).down()
            print(f"removed {len(removed['namespaces'])} namespaces, stopped {len(removed['pids'])} processes")
        elif args.cmd == "up":
            lab = Lab(args.prefix, bin_dir=args.bin_dir, driver=args.driver, advbase_ms=args.advbase_ms,
                      nat=args.nat, defer=args.defer, modulate=args.modulate, synproxy=args.synproxy,
                      scrub_tcp=args.scrub_tcp, rdr=args.rdr, ipv6=args.ipv6)
            st = lab.up(replace=args.replace)
            print(json.dumps(st, indent=1) if args.json else format_status(st))
        elif args.cmd == "status":
            st = Lab(args.prefix, bin_dir=args.bin_dir).status()
            print(json.dumps(st, indent=1) if args.json else format_status(st))
        elif args.cmd == "drill":
            lab = Lab(args.prefix, bin_dir=args.bin_dir)
            rep = drill.run(lab, connections=args.connections, duration=args.duration, kill=args.kill,
                            kill_after=args.kill_after, restore_after=args.restore_after, out_dir=args.out,
                            progress=say, repeat=args.repeat, kill_every=args.kill_every,
                            churn_per_s=args.churn)
            if args.plot:
                rep["plot"] = make_plot(rep, say)
            print(json.dumps(rep, indent=1) if args.json else report.human(rep))
            if args.plot and not args.json and rep["plot"]:
                print(f"plot:          {rep['plot']}")
        elif args.cmd == "demo":
            rep = demo(args, say)
            if args.json:
                print(json.dumps(rep, indent=1))
            else:
                print(report.human(rep))
                if rep.get("plot"):
                    print(f"plot:          {rep['plot']}")
                print(f"report:        {os.path.join(os.path.dirname(rep['samples']), 'report.json')}")
    except LabError as e:
        print(f"pairwall-lab: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("pairwall-lab: interrupted; `pairwall-lab down` removes what is left", file=sys.stderr)
        return 130
    return 0


def format_status(st):
    if not st.get("up"):
        return f"lab {st['prefix']!r} is down"
    nat = f", inside NATed to {topology.VIP_OUT}" if st.get("nat") else ""
    defer = ", sync defer on" if st.get("defer") else ""
    modulate = ", modulate state" if st.get("modulate") else ""
    synproxy = ", synproxy state" if st.get("synproxy") else ""
    scrub_tcp = ", scrub reassemble tcp" if st.get("scrub_tcp") else ""
    rdr = f", {topology.SERVICE_ADDR} redirected to the server" if st.get("rdr") else ""
    stack = ", dual stack" if st.get("ipv6") else ""
    lines = [f"lab {st['prefix']!r} up, driver {st['driver']}, advbase {st['advbase_ms']} ms{nat}{defer}{modulate}"
             f"{synproxy}{scrub_tcp}{rdr}{stack}"]
    for node, s in st["nodes"].items():
        extra = "".join(f", {k} {s[k]}" for k in ("bulk_done", "demotion", "sync_peer") if k in s)
        lines.append(f"  {node}: {s.get('role')}, states {s.get('states')}, VIPs {st['vips'].get(node) or '-'}"
                     f"{extra}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
