"""Translation pools through the real daemon. rdr to a list of two server addresses: connections
go to them in turn (the states show which one each got), and every answer comes back from the
address the client dialled. nat with static-port: the server sees the client's connections from the
firewall's address and the client's own source ports. IPv4 and IPv6."""

import pytest

from daemon_net import CLIENT4, CLIENT6, FW_OUT4, FW_OUT6, SERVER4, SERVER6, WHOAMI_TCP, WHOAMI_UDP, settle

# A second address on the server, and an address on the server's LAN that nobody owns.
SECOND4, SECOND6 = "10.77.2.3", "fd77:2::3"
PUBLIC4, PUBLIC6 = "10.77.2.80", "fd77:2::80"
DIALLED = 80
BACKENDS = {4: (SERVER4, SECOND4), 6: (SERVER6, SECOND6)}
PUBLIC = {4: PUBLIC4, 6: PUBLIC6}
CLIENTS = {4: CLIENT4, 6: CLIENT6}
FW_OUT = {4: FW_OUT4, 6: FW_OUT6}

RDR_RULES = f"""\
in_if = "f0"
out_if = "f1"
rdr on $in_if proto tcp to {PUBLIC4} port {DIALLED} -> {{ {SERVER4}, {SECOND4} }} port {WHOAMI_TCP}
rdr on $in_if proto tcp to {PUBLIC6} port {DIALLED} -> {{ {SERVER6} {SECOND6} }} port {WHOAMI_TCP} round-robin
block all
pass in on $in_if proto tcp to {{ {SERVER4} {SECOND4} {SERVER6} {SECOND6} }} port {WHOAMI_TCP}
pass out on $out_if proto tcp to {{ {SERVER4} {SECOND4} {SERVER6} {SECOND6} }} port {WHOAMI_TCP}
"""

NAT_RULES = f"""\
in_if = "f0"
out_if = "f1"
nat on $out_if inet from 10.77.1.0/24 to any -> {FW_OUT4} static-port
nat on $out_if inet6 from fd77:1::/64 to any -> {FW_OUT6} static-port
block all
pass in on $in_if proto {{ tcp udp }} to port {{ {WHOAMI_TCP} {WHOAMI_UDP} }}
pass out on $out_if proto {{ tcp udp }} to port {{ {WHOAMI_TCP} {WHOAMI_UDP} }}
"""


@pytest.mark.parametrize("family", [4, 6])
def test_rdr_round_robin_spreads_connections_over_the_pool(lan, daemon_factory, family):
    lan.server.address("s0", f"{SECOND4}/24" if family == 4 else f"{SECOND6}/64")
    fw = daemon_factory(rules=RDR_RULES)
    lan.whoami()
    for i in range(4):
        r = lan.ask(PUBLIC[family], DIALLED)
        assert r["result"] == "ok", f"connection {i} got no answer through rdr: {r}; reasons {fw.reasons()}"
        assert r["reply_from"] == {"address": PUBLIC[family], "port": DIALLED}, r
        assert r["seen"] == r["local"], f"rdr changed the source the server saw: {r}"

    settle()
    states = fw.json("states", "proto", "tcp")["states"]
    assert len(states) == 4, states
    # In the order the connections were made (the node's state counter): the pool's addresses in turn.
    backends = [s["wire_dst"]["address"] for s in sorted(states, key=lambda s: int(s.get("id", 0)))]
    assert sorted(backends) == sorted(BACKENDS[family] * 2), f"not two connections to each backend: {states}"
    assert backends[0] != backends[1] and backends[1] != backends[2], f"not taken in turn: {backends}"


@pytest.mark.parametrize("proto", ["tcp", "udp"])
@pytest.mark.parametrize("family", [4, 6])
def test_nat_static_port_keeps_the_client_port(lan, daemon_factory, family, proto):
    fw = daemon_factory(rules=NAT_RULES)
    lan.whoami()
    server = {4: SERVER4, 6: SERVER6}[family]
    udp = proto == "udp"
    for _ in range(2):
        r = lan.ask(server, WHOAMI_UDP if udp else WHOAMI_TCP, udp=udp)
        assert r["result"] == "ok", f"no answer through nat: {r}; reasons {fw.reasons()}"
        assert r["local"]["address"] == CLIENTS[family], r
        assert r["seen"] == {"address": FW_OUT[family], "port": r["local"]["port"]}, \
            f"the server did not see the client's own port from the firewall's address: {r}"


TABLE_RULES = f"""\
in_if = "f0"
out_if = "f1"
table <web> {{ {SERVER4} {SERVER6} }}
rdr on $in_if inet proto tcp to {PUBLIC4} port {DIALLED} -> <web> port {WHOAMI_TCP}
rdr on $in_if inet6 proto tcp to {PUBLIC6} port {DIALLED} -> <web> port {WHOAMI_TCP}
block all
pass in on $in_if proto tcp
pass out on $out_if proto tcp
"""


@pytest.mark.parametrize("family", [4, 6])
def test_rdr_to_a_table_follows_its_edits(lan, daemon_factory, family):
    """A table as the pool, changed at run time as a health checker changes it (`pairwallctl tables`):
    a server added takes its turns at once, one deleted gets no new connection, and an empty pool
    refuses them (translation_failed) where the rules would pass them on untranslated."""
    lan.server.address("s0", f"{SECOND4}/24" if family == 4 else f"{SECOND6}/64")
    server, second = BACKENDS[family]
    fw = daemon_factory(rules=TABLE_RULES)
    lan.whoami()
    counted = set()

    def connect(n):
        """Makes n connections to the public address; returns the servers their states went to."""
        for i in range(n):
            r = lan.ask(PUBLIC[family], DIALLED)
            assert r["result"] == "ok", f"connection {i} got no answer through rdr: {r}; reasons {fw.reasons()}"
            assert r["reply_from"] == {"address": PUBLIC[family], "port": DIALLED}, r
        settle()
        states = [s for s in fw.json("states", "proto", "tcp")["states"] if s["id"] not in counted]
        counted.update(s["id"] for s in states)
        return sorted(s["wire_dst"]["address"] for s in states)

    assert connect(2) == [server, server]
    fw.ctl("tables", "add", "web", second)
    assert connect(4) == sorted([server, server, second, second]), "the added server did not take its turns"
    fw.ctl("tables", "delete", "web", server)
    assert connect(2) == [second, second], "the deleted server still got connections"

    fw.ctl("tables", "flush", "web")
    before = fw.reasons().get("translation_failed", 0)
    r = lan.ask(PUBLIC[family], DIALLED, timeout=1.0)
    assert r["result"] != "ok", f"a connection went through an empty pool: {r}"
    assert fw.reasons().get("translation_failed", 0) > before, fw.reasons()
