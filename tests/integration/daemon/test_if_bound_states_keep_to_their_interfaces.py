"""`set state-policy if-bound` in the running daemon: a UDP flow's state, made in on f0 and out on
f1, knows the flow's datagrams there alone. The client gets a second link to the firewall (c1 — f2)
and sends the same flow's datagrams (one source address and port) by it: with the states bound,
they are dropped as `state_interface`, although a rule would let a new flow in on f2; floating, as
pf's states are by default, they pass as the state's. Back on f0, the bound flow goes on.
`pairwallctl states on IF` lists the states bound to IF."""

import pytest

from daemon_net import CLIENT4, CLIENT6, SERVER4, SERVER6, UDP_PORT, settle

LINK2 = {4: ("10.77.3.2/24", "10.77.3.1/24", "10.77.3.1"), 6: ("fd77:3::2/64", "fd77:3::1/64", "fd77:3::1")}
SERVER_NET = {4: "10.77.2.0/24", 6: "fd77:2::/64"}
FW_IN = {4: "10.77.1.1", 6: "fd77:1::1"}
CLIENT = {4: CLIENT4, 6: CLIENT6}
SERVER = {4: SERVER4, 6: SERVER6}
SOURCE_PORT = 40123

# One datagram of the flow from the client's address and SOURCE_PORT; prints "ok" once echoed.
ASK = """
import socket, sys
family, client, server, sport, dport = sys.argv[1:]
s = socket.socket(socket.AF_INET6 if family == "6" else socket.AF_INET, socket.SOCK_DGRAM)
s.bind((client, int(sport)))
s.settimeout(1.0)
s.sendto(b"bound?", (server, int(dport)))
try:
    s.recvfrom(2048)
    print("ok")
except socket.timeout:
    print("timeout")
"""


def rules(policy):
    return f"""\
set state-policy {policy}
block all
pass in on {{ f0 f2 }} proto udp to port {UDP_PORT}
pass out on f1 proto udp to port {UDP_PORT}
"""


def second_link(lan):
    lan.topo.veth(lan.client, "c1", lan.fw, "f2")
    for family, (client, fw, _) in LINK2.items():
        lan.client.address("c1", client)
        lan.fw.address("f2", fw)
    # The flow's source lies on f0's side: the kernel's reverse path check would drop it on f2 first.
    for key in ("all", "default", "f2"):
        lan.fw.sysctl(f"net.ipv4.conf.{key}.rp_filter", 0)


def route_by(lan, family, link):
    """Sends the client's traffic to the server's network by `link` (c0 or c1)."""
    via = FW_IN[family] if link == "c0" else LINK2[family][2]
    lan.client.exec("ip", f"-{family}", "route", "replace", SERVER_NET[family], "via", via, "dev", link)


def ask(lan, family):
    out = lan.client.exec(lan.python, "-c", ASK, str(family), CLIENT[family], SERVER[family], str(SOURCE_PORT),
                          str(UDP_PORT), timeout=10)
    return out.stdout.strip()


@pytest.mark.parametrize("policy", ["if-bound", "floating"])
def test_if_bound_states_keep_to_their_interfaces(lan, daemon_factory, policy):
    second_link(lan)
    fw = daemon_factory(rules=rules(policy))
    bound = policy == "if-bound"
    for family in (4, 6):
        route_by(lan, family, "c0")
        assert ask(lan, family) == "ok", family
        route_by(lan, family, "c1")
        assert ask(lan, family) == ("timeout" if bound else "ok"), (family, fw.reasons())
        route_by(lan, family, "c0")
        assert ask(lan, family) == "ok", family
    settle()

    assert fw.reasons().get("state_interface", 0) == (2 if bound else 0), fw.reasons()
    states = fw.json("states")["states"]
    assert len(states) == 2, states
    for s in states:
        assert (s.get("bound_in", ""), s.get("bound_out", "")) == (("f0", "f1") if bound else ("", "")), s
    listed = fw.ctl("states").stdout
    assert listed.count("bound in on f0 out on f1") == (2 if bound else 0), listed
    # As pfctl -i IF -s states: the states bound to an interface.
    for iface in ("f0", "f1"):
        assert len(fw.json("states", "on", iface)["states"]) == (2 if bound else 0), iface
    assert fw.json("states", "on", "f2")["states"] == []
