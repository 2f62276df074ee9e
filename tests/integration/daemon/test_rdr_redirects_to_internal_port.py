"""rdr on the client-side interface, to an address nobody owns and to the firewall's own (a port
forward, as pf does with `rdr on $ext_if ... to ($ext_if)`): the firewall redirects the flow to the
server on another port. The server sees the client's own address and port (rdr leaves the source
alone), the client's answers come from the address and port it dialled, the state shows both keys,
and the filter rules judge the redirected destination: they pass only the server's address and
port, so nothing would pass if they saw the dialled one. A port no rdr rule names gets nothing.
TCP and UDP, IPv4 and IPv6."""

import time

import pytest

from daemon_net import (CLIENT4, CLIENT6, FW_IN4, FW_IN6, SERVER4, SERVER6, WHOAMI_TCP, WHOAMI_UDP, capture, metric,
                        settle)

# Addresses on the server's LAN that no host owns: the firewall routes them out towards the server.
PUBLIC4, PUBLIC6 = "10.77.2.80", "fd77:2::80"
DIALLED_TCP, DIALLED_UDP, UNMAPPED = 80, 53, 81
CLIENTS = {4: CLIENT4, 6: CLIENT6}
SERVERS = {4: SERVER4, 6: SERVER6}


def rules(dialled):
    """rdr of `dialled` (family -> address) to the server, and filter rules for the server only."""
    return f"""\
in_if = "f0"
out_if = "f1"
rdr on $in_if proto tcp to {dialled[4]} port {DIALLED_TCP} -> {SERVER4} port {WHOAMI_TCP}
rdr on $in_if proto udp to {dialled[4]} port {DIALLED_UDP} -> {SERVER4} port {WHOAMI_UDP}
rdr on $in_if proto tcp to {dialled[6]} port {DIALLED_TCP} -> {SERVER6} port {WHOAMI_TCP}
rdr on $in_if proto udp to {dialled[6]} port {DIALLED_UDP} -> {SERVER6} port {WHOAMI_UDP}
block all
pass in on $in_if proto tcp to {{ {SERVER4} {SERVER6} }} port {WHOAMI_TCP}
pass out on $out_if proto tcp to {{ {SERVER4} {SERVER6} }} port {WHOAMI_TCP}
pass in on $in_if proto udp to {{ {SERVER4} {SERVER6} }} port {WHOAMI_UDP}
pass out on $out_if proto udp to {{ {SERVER4} {SERVER6} }} port {WHOAMI_UDP}
"""


def check_redirect(lan, fw, family, proto, address):
    """One flow to `address`, redirected; the answer, what the server saw, and the state."""
    udp = proto == "udp"
    dialled, internal = (DIALLED_UDP, WHOAMI_UDP) if udp else (DIALLED_TCP, WHOAMI_TCP)
    r = lan.ask(address, dialled, udp=udp)
    assert r["result"] == "ok", f"no answer through rdr: {r}; reasons {fw.reasons()}"
    assert r["reply_from"] == {"address": address, "port": dialled}, f"the reply is not from the dialled end: {r}"
    assert r["local"]["address"] == CLIENTS[family], r
    assert r["seen"] == r["local"], f"rdr changed the source the server saw: {r}"

    settle()
    states = fw.json("states", "proto", proto)["states"]
    assert len(states) == 1, states
    s = states[0]
    assert s["src"] == r["local"] and s["dst"] == {"address": address, "port": dialled}, s
    assert s.get("wire_src") == r["local"], s
    assert s.get("wire_dst") == {"address": SERVERS[family], "port": internal}, \
        f"the state does not show the redirect: {s}"


@pytest.mark.parametrize("proto", ["tcp", "udp"])
@pytest.mark.parametrize("family", [4, 6])
def test_rdr_redirects_to_internal_port(lan, daemon_factory, family, proto):
    public = {4: PUBLIC4, 6: PUBLIC6}
    fw = daemon_factory(rules=rules(public))
    lan.whoami()
    check_redirect(lan, fw, family, proto, public[family])

    before = fw.reasons()["rule_block"]
    unmapped = lan.ask(public[family], UNMAPPED, udp=proto == "udp", timeout=1.0)
    assert unmapped["result"] == "timeout", unmapped
    settle()
    assert fw.reasons()["rule_block"] > before, "the port no rdr names was not blocked by rule"


@pytest.mark.parametrize("proto", ["tcp", "udp"])
@pytest.mark.parametrize("family", [4, 6])
def test_rdr_port_forward_to_firewall_address(lan, daemon_factory, family, proto):
    own = {4: FW_IN4, 6: FW_IN6}
    fw = daemon_factory(rules=rules(own))
    lan.whoami()
    check_redirect(lan, fw, family, proto, own[family])


@pytest.mark.parametrize("proto", ["tcp", "udp"])
@pytest.mark.parametrize("family", [4, 6])
def test_rdr_port_forward_meets_the_out_rules_of_its_way_out(lan, daemon_factory, family, proto):
    """Decided before routing, a port forward still meets the `out` rules of the interface the
    kernel will send it out of, as pf's out pass does: blocked there, nothing reaches the server."""
    own = {4: FW_IN4, 6: FW_IN6}
    internal = WHOAMI_UDP if proto == "udp" else WHOAMI_TCP
    fw = daemon_factory(rules=rules(own) + f"block out on $out_if proto {proto} to {SERVERS[family]} port {internal}\n")
    lan.whoami()
    before = fw.reasons()["rule_block"]
    dialled = DIALLED_UDP if proto == "udp" else DIALLED_TCP
    r = lan.ask(own[family], dialled, udp=proto == "udp", timeout=1.0)
    assert r["result"] == "timeout", f"the out pass's block rule did not hold: {r}"
    settle()
    assert fw.reasons()["rule_block"] > before, "not blocked by rule"
    assert fw.json("states", "proto", proto)["states"] == [], "a blocked connection left a state"


def test_rdr_port_forward_meets_the_scrub_out_of_its_way_out(lan, daemon_factory, tmp_path):
    """`scrub out on $out_if max-mss` holds for a port forward decided before routing: the server
    sees the clamped MSS. The way out came from the kernel's routing tables, asked (and counted)."""
    fw = daemon_factory(rules=f"scrub out on f1 max-mss 1300\n" + rules({4: FW_IN4, 6: FW_IN6}))
    lan.whoami()
    log, dump = capture(lan, tmp_path, "server", lan.server, "s0", WHOAMI_TCP)
    try:
        r = lan.ask(FW_IN4, DIALLED_TCP)
        assert r["result"] == "ok", r
        deadline = time.monotonic() + 5
        while "Flags [S]" not in log.read_text(errors="replace") and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        lan.topo.stop(dump)
    syns = [l for l in log.read_text(errors="replace").splitlines() if "Flags [S]," in l]
    assert syns and all("mss 1300," in l for l in syns), log.read_text()
    assert metric(lan, "pairwall_route_lookups_total") >= 1
