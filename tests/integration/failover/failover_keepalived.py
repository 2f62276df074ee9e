"""keepalived next to the failover service (driver "keepalived"), configured from the shipped
packaging/keepalived/keepalived.conf and pairwall-notify.sh with this test run's paths."""

import os
import signal
import subprocess

from failover_net import FAILOVERD, LANS, NODES, PAIRWALLCTL, REPO, monotonic_us

SHIPPED = REPO / "packaging" / "keepalived"


def demotion_file(p, node):
    """Where this node's notify script keeps pairwalld's demotion for keepalived's track_file."""
    return p.dir / f"demotion-{node}"


def keepalived_conf(p, node, unicast=False, sync_group=False):
    """The shipped example with this test's paths: the health script and the notify script talk to
    this node's pairwall-failoverd through a pairwallctl stand-in. `unicast`: VRRP to the other
    node's lan0 address (keepalived's unicast_peer) instead of 224.0.0.18. `sync_group`: the shipped
    keepalived-sync-group.conf, an instance per link in one sync group, which the notify script follows."""
    if p.daemon == "pairwalld":
        # pairwallctl itself, through a wrapper that records every call the scripts make and its
        # exit status, so that a role pairwalld never learned can be traced afterwards.
        ctl = p.dir / "pairwallctl-traced"
        if not ctl.exists():
            # The long-running `failover track-file` is pairwallctl itself, so that it dies with
            # the notify script (its parent-death signal) and not with the wrapper.
            ctl.write_text(f'#!/bin/sh\ncase "$*" in *"failover track-file"*) exec {PAIRWALLCTL} "$@" ;; esac\n'
                           f'out=$({PAIRWALLCTL} "$@" 2>&1); rc=$?\n'
                           f'echo "$(date +%T.%N) rc=$rc $* $out" >>{p.dir / "ctl-calls.log"}\n'
                           'echo "$out"; exit $rc\n')
            ctl.chmod(0o755)
    else:
        ctl = p.dir / "pairwallctl"
        if not ctl.exists():
            # The service alone has no demotion to track: the file stays neutral and the health
            # script demotes, as before there was a track file.
            ctl.write_text(f'#!/bin/sh\n[ "$1" = -s ] && {{ s=$2; shift 2; }}\n'
                           'case "$*" in *"failover track-file"*)\n'
                           '  echo 0 >"$3"; while kill -0 $PPID 2>/dev/null; do sleep 0.2; done; exit 0 ;;\nesac\n'
                           f'exec {FAILOVERD} --ctl "$s" "$@"\n')
            ctl.chmod(0o755)
    sock = p.socket_path(node)
    text = (SHIPPED / ("keepalived-sync-group.conf" if sync_group else "keepalived.conf")).read_text()
    follows = "-g pairwall" if sync_group else "-i pairwall"
    replaced = {
        "router_id pairwall-a": f"router_id pairwall-{node}",
        'script "/usr/bin/pairwallctl health"': f'script "{ctl} -s {sock} health"',
        "vrrp_notify_fifo /run/keepalived-pairwall-notify.fifo": f"vrrp_notify_fifo {p.dir / f'notify-{node}.fifo'}",
        f'vrrp_notify_fifo_script "/usr/lib/pairwall/pairwall-notify.sh {follows} -t /run/keepalived-pairwall-demotion"':
            f'vrrp_notify_fifo_script "{SHIPPED}/pairwall-notify.sh {follows} -s {sock} -c {ctl} -t {demotion_file(p, node)}"',
        'file "/run/keepalived-pairwall-demotion"': f'file "{demotion_file(p, node)}"',
    }
    if unicast:
        net = LANS["lan0"]["v4"]
        peer = NODES["b" if node == "a" else "a"]["host"]
        replaced["advert_int 0.1"] = (f"advert_int 0.1\n  unicast_src_ip {net}.{NODES[node]['host']}\n"
                                      f"  unicast_peer {{\n    {net}.{peer}\n  }}")
    for old, new in replaced.items():
        assert old in text, f"the shipped keepalived.conf no longer contains {old!r}"
        text = text.replace(old, new)
    path = p.dir / f"keepalived-{node}.conf"
    path.write_text(text)
    return path


def start_keepalived(p, node, unicast=False, sync_group=False):
    conf = keepalived_conf(p, node, unicast, sync_group)
    log = open(p.dir / f"keepalived-{node}.log", "a")
    proc = subprocess.Popen(
        ["ip", "netns", "exec", p.ns[node], "keepalived", "-n", "-l", "-D", "-P", "-f", str(conf),
         "-p", str(p.dir / f"ka-{node}.pid"), "-r", str(p.dir / f"vrrp-{node}.pid"),
         "-c", str(p.dir / f"chk-{node}.pid")], stdout=log, stderr=subprocess.STDOUT)
    p.procs[(node, "keepalived")] = proc
    return proc


def kill_keepalived(p, node):
    """kill -9 of keepalived and its VRRP child: a crash, no cleanup, the VIPs stay in the kernel."""
    t = monotonic_us()
    vrrp_pid = (p.dir / f"vrrp-{node}.pid")
    pids = [int(vrrp_pid.read_text())] if vrrp_pid.exists() else []
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    p.kill(node, "keepalived", sig=signal.SIGKILL)
    return t


def keepalived_trace(p):
    """What both nodes' keepalived decided and what their scripts told pairwall: the story behind a
    role that did not settle."""
    lines = []
    for node in ("a", "b"):
        for name in (f"keepalived-{node}.log", f"{node}.log"):
            path = p.dir / name
            if path.exists():
                kept = [l for l in path.read_text(errors="replace").splitlines()
                        if "STATE" in l or "failover:" in l or "priority" in l.lower()]
                lines += [f"[{name}] {l}" for l in kept[-25:]]
    calls = p.dir / "ctl-calls.log"
    if calls.exists():
        lines += [f"[ctl] {l}" for l in calls.read_text(errors="replace").splitlines()
                  if "set-role" in l][-20:]
    return "\n".join(lines)


def vip_holder(p):
    held = [n for n in ("a", "b") if p.holds_vips(n)]
    return held[0] if len(held) == 1 else None


def wait_settled(p, timeout=15):
    """Waits until one node holds the VIPs and pairwall agrees (master there, backup on the other);
    returns (master, backup). Both instances may start as master before they hear each other, and
    the one with the lower address then steps down: the first VIP holder seen is not yet the answer."""
    def settled():
        holder = vip_holder(p)
        if holder is None:
            return None
        other = "b" if holder == "a" else "a"
        return (holder, other) if p.role(holder) == "master" and p.role(other) == "backup" else None

    try:
        return p.wait_for(settled, timeout, step=0.05,
                          what="one VIP holder, pairwall master there and backup on the other node")
    except AssertionError as e:
        now = f"VIPs at {[n for n in ('a', 'b') if p.holds_vips(n)]}, roles a={p.role('a')} b={p.role('b')}"
        raise AssertionError(f"{e} ({now})\n{keepalived_trace(p)}") from None
