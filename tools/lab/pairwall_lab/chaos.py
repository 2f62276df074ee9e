"""Faults and load for the chaos scenarios: sync loss, advertisement partitions, state preloading.

Each fault is an iptables rule in a firewall namespace with a comment naming the lab, so that clearing it
removes exactly what was added and nothing of pairwalld's own chain.
"""

import json
import time

from . import netns, topology
from .netns import LabError

COMMENT = "pairwall-lab"
ADVERT_PORT = 8112  # [failover] port default (proto/failover.proto)


def _ipt(lab, node, *args, check=True):
    return netns.nsexec(lab.ns[node], "iptables", "-w", *args, check=check)


def sync_loss(lab, probability):
    """Drops `probability` of the sync datagrams each node sends (both directions, -m statistic)."""
    if not 0 < probability < 1:
        raise LabError(f"sync loss probability {probability}: expected 0 < p < 1")
    for n in topology.NODES:
        _ipt(lab, n.name, "-I", "OUTPUT", "-o", topology.IF_SYNC, "-m", "statistic", "--mode", "random",
             "--probability", str(probability), "-m", "comment", "--comment", COMMENT + "-syncloss", "-j", "DROP")


def block_adverts(lab):
    """Partitions the advertisement path both ways (every node drops the group's advertisements)."""
    for n in topology.NODES:
        _ipt(lab, n.name, "-I", "INPUT", "-p", "udp", "--dport", str(ADVERT_PORT), "-m", "comment", "--comment",
             COMMENT + "-adverts", "-j", "DROP")


def clear_faults(lab):
    """Removes every rule this module added, in both firewalls."""
    for n in topology.NODES:
        for chain in ("INPUT", "OUTPUT"):
            cp = _ipt(lab, n.name, "-S", chain, check=False)
            for line in cp.stdout.splitlines():
                if f'--comment {COMMENT}-' not in line and f'--comment "{COMMENT}-' not in line:
                    continue
                # "-A CHAIN spec..." -> "-D CHAIN spec..."
                spec = line.split()[2:]
                _ipt(lab, n.name, "-D", chain, *[s.strip('"') for s in spec], check=False)


PRELOAD_SCRIPT = r"""
import socket, sys, time
count, server, sport, rate, deadline = (int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4]),
                                        float(sys.argv[5]))
DPORTS = range(10000, 60000)
sent = 0
s = None
t0 = time.monotonic()
while sent < count and time.monotonic() - t0 < deadline:
    if sent % len(DPORTS) == 0:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("0.0.0.0", sport + sent // len(DPORTS)))
    try:
        s.sendto(b"pairwall-lab", (server, DPORTS[sent % len(DPORTS)]))
        sent += 1
    except OSError:
        time.sleep(0.001)
    if sent % 500 == 0:
        # Paced: an NFQUEUE that overflows would drop flows and the count would be wrong.
        time.sleep(max(0.0, t0 + sent / rate - time.monotonic()))
print(sent)
"""


def preload_udp_states(lab, count, sport=20000, rate=40_000, timeout=120.0):
    """One UDP datagram client -> server per flow, for `count` flows with distinct (source port,
    destination port): source ports sport, sport+1, ... (50,000 destination ports each). Each flow makes
    one state on the master and, by sync, on the backup. Returns datagrams sent."""
    cp = netns.nsexec(lab.ns["client"], lab.python, "-c", PRELOAD_SCRIPT, str(count), topology.SERVER_ADDR,
                      str(sport), str(rate), str(timeout), timeout=timeout + 30)
    return int(cp.stdout.strip() or 0)


def preload_until(lab, node, target, chunk=20_000, rounds=10):
    """Preloads in chunks until `node` holds at least `target` states (a chunk may lose a few datagrams
    to a full queue). Returns the node's count."""
    count = 0
    for r in range(rounds):
        count = lab.driver.states()[node] or 0
        if count >= target:
            break
        preload_udp_states(lab, min(chunk, target - count + 1000), sport=20000 + r * 10)
        time.sleep(0.5)
    return lab.driver.states()[node] or 0


def state_keys(lab, node, limit=1_000_000):
    """The set of state keys (proto, src, sport, dst, dport) on a node, from `pairwallctl states --json`."""
    r = lab.driver.ctl(node, "states", "--json", "--limit", str(limit), timeout=60)
    if r is None:
        raise LabError(f"cannot list states on {node} (pairwallctl states --json failed)")
    keys = set()
    for s in r.get("states", []):
        src, dst = s.get("src", {}), s.get("dst", {})
        keys.add((s.get("proto"), src.get("address"), src.get("port"), dst.get("address"), dst.get("port")))
    return keys


def wait_tables_agree(lab, timeout=20.0):
    """Polls both state tables until they hold the same keys; returns (keys_a, keys_b, seconds)."""
    t0 = time.monotonic()
    while True:
        a = state_keys(lab, "fwA")
        b = state_keys(lab, "fwB")
        if a == b or time.monotonic() - t0 > timeout:
            return a, b, time.monotonic() - t0
        time.sleep(0.5)


def stray_check(lab):
    """What should not be there: VIPs on more than one node, processes the lab did not start, more than one
    pairwalld per firewall. Returns a list of problems (empty when clean)."""
    problems = []
    held = topology.vip_holders(lab.prefix)
    holders = [n for n, v in held.items() if v]
    if len(holders) != 1:
        problems.append(f"VIPs held by {holders or 'nobody'}: {json.dumps(held)}")
    elif len(held[holders[0]]) != (4 if lab.ipv6 else 2):
        problems.append(f"{holders[0]} holds only {held[holders[0]]}: the group is split")
    for n in topology.NODES:
        pids = netns.netns_pids(lab.ns[n.name])
        expected = {lab.pid_of(n.name, w) for w in ("pairwalld", "keepalived")} - {None}
        extra = []
        for pid in pids:
            if pid in expected:
                continue
            ppid = netns.parent_pid(pid)  # None: gone meanwhile
            if ppid is not None and ppid not in expected:  # keepalived's VRRP/checker children are expected
                extra.append(pid)
        if extra:
            problems.append(f"unexpected processes in {lab.ns[n.name]}: {extra}")
    return problems
