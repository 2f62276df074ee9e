"""With `hooks = "forward+local"` the node's own traffic meets the rules, but the failover group's
advertisements never do: a rule set that forgot them (here `block all`) would otherwise leave each
node deaf to the other, and both master. The builtin election's UDP to its groups (keepalived's
VRRP to any address, in its mode, unicast_peer's included) is kept out of the queues, as the sync
link is."""

import re
import subprocess
import time

from failover_keepalived import start_keepalived, vip_holder, wait_settled


def chain(p, node, tool):
    return subprocess.run(["ip", "netns", "exec", p.ns[node], tool, "-S", "PAIRWALL"], capture_output=True,
                          text=True, timeout=10).stdout


def test_local_hooks_keep_the_advertisements_of_the_builtin_election(pair_factory):
    p = pair_factory(advbase_ms=100, ipv6=True, daemon="pairwalld", sync=False, rules="block all\n",
                     hooks="forward+local")
    p.start("a")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=5)
    # Only at TTL 255, as every advertisement is sent: forwarded traffic to the group lost a hop.
    assert "-d 224.0.0.18/32 -p udp -m udp --dport 8112 -m ttl --ttl-eq 255 -j RETURN" in chain(p, "a", "iptables")
    assert "-d ff02::12/128 -p udp -m udp --dport 8112 -m hl --hl-eq 255 -j RETURN" in chain(p, "a", "ip6tables")
    assert "-A INPUT -j PAIRWALL" in subprocess.run(["ip", "netns", "exec", p.ns["b"], "iptables", "-S"],
                                                     capture_output=True, text=True, timeout=10).stdout
    # Twenty advertisement intervals later there is still one master: b goes on hearing a.
    time.sleep(2.0)
    assert (p.role("a"), p.role("b")) == ("master", "backup")


def test_local_hooks_keep_keepalived_unicast_vrrp(pair_factory):
    p = pair_factory(advbase_ms=100, ipv6=False, daemon="pairwalld", sync=False, rules="block all\n",
                     hooks="forward+local")
    for node in ("a", "b"):
        p.start(node, driver="keepalived")
    # VRRP at TTL 255 to any address: keepalived's unicast_peer sends to the peer's own.
    rule = re.compile(r"^-A PAIRWALL -p (vrrp|112) -m ttl --ttl-eq 255 -j RETURN$", re.M)
    p.wait_for(lambda: "NFQUEUE" in chain(p, "a", "iptables"), 5, what="a's hooks installed")
    assert rule.search(chain(p, "a", "iptables")), chain(p, "a", "iptables")
    for node in ("a", "b"):
        start_keepalived(p, node, unicast=True)
    master, backup = wait_settled(p)
    # Twenty advertisement intervals later there is still one VIP holder: the backup hears the master.
    time.sleep(2.0)
    assert vip_holder(p) == master
    assert (p.role(master), p.role(backup)) == ("master", "backup")
