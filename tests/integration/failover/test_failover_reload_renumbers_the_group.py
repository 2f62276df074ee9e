"""carp(4) takes `ifconfig carpN vhid N` on a running group; a reload takes [failover] vhid, and the
advertisements' port and groups, here. Each node takes them with its own reload: the master first,
whose advertisements the backup refuses (wrong_vhid) until it takes them too, well within its
master-down interval, so that the group never changes hands. With the node's own traffic queued
fail-closed under `block all`, the hooks' exception for the advertisements follows their new port
and groups: the backup would otherwise stop hearing the master and take the group."""

import json
import subprocess
import time

ADVBASE_MS = 1000  # master down after 3 s and the skew's share: room for the second reload


def status(p, node):
    ok, text = p.ctl(node, "status")
    assert ok, text
    return json.loads(text)


def chain(p, node):
    return subprocess.run(["ip", "netns", "exec", p.ns[node], "iptables", "-S", "PAIRWALL"], capture_output=True,
                          text=True, timeout=10).stdout


def listening_ports(p, node):
    out = subprocess.run(["ip", "netns", "exec", p.ns[node], "ss", "-H", "-u", "-l", "-n"], capture_output=True,
                         text=True, timeout=10).stdout
    return {line.split()[3].rsplit(":", 1)[1] for line in out.splitlines()}


def accepted(p, node):
    return p.status(node)["counters"]["adverts_accepted"]


def hears_a_again(p):
    """b accepts a's advertisements: two more datagrams (of four an interval) within 3.5 intervals."""
    before = accepted(p, "b")
    p.wait_for(lambda: accepted(p, "b") >= before + 2, 3.5 * ADVBASE_MS / 1000, step=0.05, what="b hears a again")


def test_reload_renumbers_the_group_and_moves_its_advertisements(pair_factory):
    p = pair_factory(advbase_ms=ADVBASE_MS, daemon="pairwalld", sync=False, rules="block all\n",
                     hooks="forward+local")
    p.start("a")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=10)
    hears_a_again(p)

    vhid = [("vhid = 1\n", "vhid = 7\n")]
    p.reload_with("a", vhid)
    assert status(p, "a")["vhid"] == 7
    assert "vhid 1 -> 7" in p.log("a")
    p.wait_for(lambda: p.status("b")["rejects"].get("wrong_vhid", 0) > 0, 2, step=0.05,
               what="b refusing a's advertisements for vhid 7")
    p.reload_with("b", vhid)
    hears_a_again(p)
    assert p.role("a") == "master" and p.role("b") == "backup"

    moved = [('key_file = "failover.key"', 'port = 8113\ngroup4 = "224.0.0.19"\ngroup6 = "ff02::13"\n'
                                             'key_file = "failover.key"')]
    for node in ("a", "b"):
        p.reload_with(node, moved)
        assert "which a reload does not take" not in p.log(node), p.log(node)
        p.wait_for(lambda: "8113" in listening_ports(p, node) and "8112" not in listening_ports(p, node), 2,
                   step=0.05, what=f"{node}'s advertisement sockets on port 8113")
        # The reload's log line comes before its hooks are replaced.
        exempted = "-d 224.0.0.19/32 -p udp -m udp --dport 8113 -m ttl --ttl-eq 255 -j RETURN"
        p.wait_for(lambda: exempted in chain(p, node), 3, step=0.05, what=f"{node}'s hooks exempting port 8113")
        assert "--dport 8112" not in chain(p, node)
    hears_a_again(p)

    # Four intervals more: one master, as before the reloads.
    deadline = time.monotonic() + 4 * ADVBASE_MS / 1000
    while time.monotonic() < deadline:
        assert p.role("a") == "master" and p.role("b") == "backup", (p.log("a"), p.log("b"))
        time.sleep(0.1)
    assert p.last_transition("b", "master") is None
    assert status(p, "b")["vhid"] == 7
