"""The builtin election inside pairwalld, with state sync: a TCP connection through the master survives
the master's death — by kill -9 of its pairwalld alone (its VIPs stay in its kernel, its queue has no
listener and drops: fail-closed) or by a node death (links down too), over IPv4 and over IPv6. The
rule set passes only SYNs and keeps state, so after the takeover the connection passes on the new
master only through the synced state, and the LAN reaches the new master only because its
announcements won: gratuitous ARP for the IPv4 VIPs, unsolicited neighbour advertisements for the
IPv6 ones, which the clients' default routes point at."""

import json
import signal
import subprocess
import time

import pytest

from failover_net import monotonic_us
from failover_tcp import CLIENT, RULES, SERVER, SERVER_ADDRESS, states

ADVBASE_MS = 100


@pytest.mark.parametrize("family", ["inet", "inet6"])
@pytest.mark.parametrize("kill", ["process", "node"])
def test_kill_master_keeps_tcp_connection(pair_factory, report, kill, family):
    p = pair_factory(advbase_ms=ADVBASE_MS, ipv6=family == "inet6", daemon="pairwalld", rules=RULES)
    for node in ("a", "b"):
        p.sysctl(p.ns[node], "net/ipv4/ip_forward", 1)
        p.sysctl(p.ns[node], "net/ipv6/conf/all/forwarding", 1)
    p.ip(p.ns["c0"], "route", "add", "default", "via", "10.31.0.1")
    p.ip(p.ns["c1"], "route", "add", "default", "via", "10.32.0.1")
    if family == "inet6":
        p.ip(p.ns["c0"], "-6", "route", "add", "default", "via", "fd31::1")
        p.ip(p.ns["c1"], "-6", "route", "add", "default", "via", "fd32::1")
    p.start("a")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=8)

    server = SERVER_ADDRESS[family]
    p.procs[("c1", "server")] = subprocess.Popen(["ip", "netns", "exec", p.ns["c1"], "/usr/bin/python3", "-c",
                                                  SERVER, server])
    time.sleep(0.3)
    client = subprocess.Popen(["ip", "netns", "exec", p.ns["c0"], "/usr/bin/python3", "-c", CLIENT, "6", server],
                              stdout=subprocess.PIPE, text=True)
    p.procs[("c0", "client")] = client
    time.sleep(1.5)
    assert states(p, "b") >= 1  # synced before the failure

    t_kill = monotonic_us()
    p.kill("a", sig=signal.SIGKILL)
    if kill == "node":
        for lan in ("lan0", "lan1"):
            p.link("a", lan, "down")
        p.ip(p.ns["a"], "link", "set", "sync0", "down")
    p.wait_roles({"b": "master"}, timeout=3)
    takeover_ms = (p.last_transition("b", "master")["at_us"] - t_kill) / 1000
    out, _ = client.communicate(timeout=30)
    p.procs.pop(("c0", "client"), None)
    result = json.loads(out)
    report(test="kill_master_keeps_tcp", kill=kill, family=family, advbase_ms=ADVBASE_MS,
           takeover_ms=round(takeover_ms, 1), **result)
    assert result["error"] is None
    assert takeover_ms <= 3 * ADVBASE_MS + 100 / 256 * ADVBASE_MS + 100
    # The stall is the takeover plus the announcement reaching the two clients.
    assert result["max_stall_ms"] < 3 * ADVBASE_MS + 100 / 256 * ADVBASE_MS + 400
