"""`peers` (carp(4)'s carppeer): on a link that carries no multicast, each node advertises to the
other's own address. Here both nodes drop every UDP datagram they send to a multicast group, yet
elect one master, hand the group over when it is killed, and turn away what another host sends
them; a reload moves a running pair from the groups to its peers without the group changing hands,
and a killed master's cleanup tells its peer it left."""

import json
import subprocess
import time

from failover_net import LANS, NODES, PAIRWALLD, other

MULTICAST_DROPS = {"iptables": "224.0.0.0/4", "ip6tables": "ff00::/8"}


def drop_multicast_udp(p, node):
    for tool, groups in MULTICAST_DROPS.items():
        p.nsexec(node, tool, "-w", "10", "-A", "OUTPUT", "-p", "udp", "-d", groups, "-j", "DROP")


def multicast_udp_dropped(p, node):
    """Packets the nodes' multicast drops have met, both families."""
    total = 0
    for tool, groups in MULTICAST_DROPS.items():
        out = p.nsexec(node, tool, "-w", "10", "-L", "OUTPUT", "-v", "-x", "-n").stdout
        total += sum(int(line.split()[0]) for line in out.splitlines() if "DROP" in line and groups in line)
    return total


def link_local(p, node, ifname):
    out = p.nsexec(node, "ip", "-6", "-o", "addr", "show", "dev", ifname, "scope", "link").stdout
    return out.split()[3].split("/")[0]


def peers(p, node):
    """The other node's addresses as this node's peers: global ones on lan0, link-local IPv6 on lan1."""
    host = NODES[other(node)]["host"]
    entries = [f'{{ interface = "{lan}", address = "{LANS[lan]["v4"]}.{host}" }}' for lan in LANS]
    entries.append(f'{{ interface = "lan0", address = "{LANS["lan0"]["v6"]}:{host}" }}')
    entries.append(f'{{ interface = "lan1", address = "{link_local(p, other(node), "lan1")}" }}')
    return f"peers = [ {', '.join(entries)} ]\n"


def send_from_client(p, client, address, port):
    """One datagram at TTL 255 from a host on the link: another address than the peer's."""
    code = ("import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
            f"s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 255); s.sendto(b'PWFA' + bytes(60), ('{address}', {port}))")
    subprocess.run(["ip", "netns", "exec", p.ns[client], "python3", "-c", code], check=True, timeout=10)


def test_peers_elect_one_master_and_hand_over_without_multicast(pair_factory):
    # The node's own traffic queued, under a rule set that forgot the advertisements; an IPv6 peer
    # is reached by neighbour discovery, which such a rule set must pass (a group is not).
    rules = "block all\npass quick inet6 proto icmp6 icmp6-type { neighbrsol, neighbradv }\n"
    p = pair_factory(advbase_ms=200, skews=(0, 100), daemon="pairwalld", sync=False, rules=rules,
                     hooks="forward+local")
    for node in ("a", "b"):
        drop_multicast_udp(p, node)
    # The better node first: the other then finds a master, whatever either takes to start.
    p.start("a", extra=peers(p, "a"))
    p.start("b", extra=peers(p, "b"))
    p.wait_roles({"a": "master", "b": "backup"}, timeout=10)
    chains = {tool: p.nsexec("a", tool, "-w", "10", "-S", "PAIRWALL").stdout for tool in MULTICAST_DROPS}
    assert "-A PAIRWALL -p udp -m udp --dport 8112 -m ttl --ttl-eq 255 -j RETURN" in chains["iptables"], chains
    assert "-A PAIRWALL -p udp -m udp --dport 8112 -m hl --hl-eq 255 -j RETURN" in chains["ip6tables"], chains

    # Ten master-down intervals later b still hears a, on all four channels, and nothing left for a group.
    accepted = p.status("b")["counters"]["adverts_accepted"]
    time.sleep(2.0)
    assert (p.role("a"), p.role("b")) == ("master", "backup")
    sb = p.status("b")
    assert sb["counters"]["adverts_accepted"] > accepted
    assert sum(v for k, v in sb["rejects"].items() if k != "duplicate") == 0, \
        {k: v for k, v in sb["rejects"].items() if v}
    assert sb["rejects"]["duplicate"] > 0  # the copies of the other three channels
    assert multicast_udp_dropped(p, "a") == 0 and multicast_udp_dropped(p, "b") == 0
    assert "lan1 (IPv6) to fe80::" in p.log("a")
    # pairwallctl failover status says where each channel advertises.
    ok, text = p.ctl("a", "status")
    assert ok, text
    assert json.loads(text)["advertisements"] == [
        f"lan0 (IPv4) to {LANS['lan0']['v4']}.3 port 8112", f"lan0 (IPv6) to {LANS['lan0']['v6']}:3 port 8112",
        f"lan1 (IPv4) to {LANS['lan1']['v4']}.3 port 8112", f"lan1 (IPv6) to {link_local(p, 'b', 'lan1')} port 8112"]

    # The link-local channel alone: a's other three dropped, b still hears a.
    p.nsexec("a", "iptables", "-w", "10", "-A", "OUTPUT", "-p", "udp", "--dport", "8112", "-j", "DROP")
    p.nsexec("a", "ip6tables", "-w", "10", "-A", "OUTPUT", "-o", "lan0", "-p", "udp", "--dport", "8112", "-j", "DROP")
    accepted = p.status("b")["counters"]["adverts_accepted"]
    time.sleep(2.0)
    assert (p.role("a"), p.role("b")) == ("master", "backup")
    assert p.status("b")["counters"]["adverts_accepted"] >= accepted + 5

    # A host on the link is not the peer, whatever it sends.
    send_from_client(p, "c0", f"{LANS['lan0']['v4']}.{NODES['b']['host']}", 8112)
    p.wait_for(lambda: p.status("b")["rejects"]["not_peer"] == 1, 5, what="b's not_peer reject")

    p.kill("a")
    p.wait_roles({"b": "master"}, timeout=5)
    p.wait_for(lambda: p.holds_vips("b"), 5, what="the VIPs on b")


def test_a_reload_moves_the_pair_from_the_groups_to_its_peers(pair_factory):
    p = pair_factory(advbase_ms=1000, skews=(0, 100), daemon="pairwalld", sync=False)
    p.start("a")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=10)
    # The master first, then the backup within its master-down interval (3.4 s): until its own
    # reload it listens on the groups, where nothing comes any longer.
    for node in ("a", "b"):
        p.reload_with(node, [("vips = [", peers(p, node) + "vips = [")])
        # The channels move on the failover thread, after the reload's own line.
        peer = f"{LANS['lan0']['v4']}.{NODES[other(node)]['host']}"
        p.wait_for(lambda: f"advertisements now on lan0 (IPv4) to {peer} port 8112" in p.log(node), 2,
                   what=f"{node}'s channel to {peer}")
        assert "advertisements no longer on lan0 (IPv4) to 224.0.0.18 port 8112" in p.log(node)
    for node in ("a", "b"):
        drop_multicast_udp(p, node)
    accepted = p.status("b")["counters"]["adverts_accepted"]
    time.sleep(4.0)
    assert (p.role("a"), p.role("b")) == ("master", "backup")
    assert p.status("b")["counters"]["adverts_accepted"] >= accepted + 3
    assert p.status("b")["transitions"][-1]["to"] == "backup"
    assert multicast_udp_dropped(p, "a") == 0

    # What systemd runs after a killed daemon tells the peer, not the group, that this node left.
    p.kill("a")
    cleanup = p.nsexec("a", "env", "SERVICE_RESULT=signal", PAIRWALLD, "--cleanup", "-c",
                       str(p.dir / "a-pairwalld.toml"))
    assert "leaving advertisement sent on 4 of 4 channels" in cleanup.stderr, cleanup.stderr
    p.wait_roles({"b": "master"}, timeout=3)
    assert p.last_transition("b", "master")["cause"].startswith("master left cleanly")
    assert multicast_udp_dropped(p, "a") == 0
