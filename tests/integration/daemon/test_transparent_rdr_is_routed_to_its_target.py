"""A transparent redirect, pf's `rdr on $int_if proto tcp to any port 80 -> $proxy`: connections to
any address beyond the firewall go to the server instead, even where the address they were sent
to is routed out of another interface than the server's (here back out of the client's side). The
pre-routing chain queues what the rdr rules may rewrite, so the engine rewrites the destination
before the kernel routes the packet; decided after routing, it would leave by the dialled
address's route and never reach the server. The client sees the dialled end answer, the server
the client's own address. Loaded at start, and brought by a reload."""

import pytest

from daemon_net import CLIENT4, CLIENT6, RULES, SERVER4, SERVER6, WHOAMI_TCP

DIALLED = {4: "10.99.0.80", 6: "fd99::80"}
ROUTED_BACK = {4: ("10.99.0.0/16", CLIENT4), 6: ("fd99::/64", CLIENT6)}
WEB = 80
CLIENTS = {4: CLIENT4, 6: CLIENT6}
SERVERS = {4: SERVER4, 6: SERVER6}

TRANSPARENT = f"""\
in_if = "f0"
out_if = "f1"
rdr on $in_if proto tcp to any port {WEB} -> {SERVER4} port {WHOAMI_TCP}
rdr on $in_if proto tcp to any port {WEB} -> {SERVER6} port {WHOAMI_TCP}
block all
pass in on $in_if proto tcp to {{ {SERVER4} {SERVER6} }} port {WHOAMI_TCP}
pass out on $out_if proto tcp to {{ {SERVER4} {SERVER6} }} port {WHOAMI_TCP}
"""


def prerouting_lines(lan, family):
    tool = "iptables" if family == 4 else "ip6tables"
    out = lan.fw.exec(tool, "-w", "-t", "mangle", "-S", "PAIRWALL", check=False).stdout
    return out.splitlines()


@pytest.mark.parametrize("when", ["at start", "by a reload"])
@pytest.mark.parametrize("family", [4, 6])
def test_transparent_rdr_is_routed_to_its_target(lan, daemon_factory, tmp_path, family, when):
    prefix, via = ROUTED_BACK[family]
    lan.fw.exec("ip", f"-{family}", "route", "add", prefix, "via", via)
    if when == "at start":
        fw = daemon_factory(rules=TRANSPARENT)
    else:
        fw = daemon_factory(rules=RULES)
        transparent = tmp_path / "transparent.conf"
        transparent.write_text(TRANSPARENT)
        fw.json("rules", "load", transparent)
    lan.whoami()

    lines = prerouting_lines(lan, family)
    assert any(f"-i f0 -p tcp -m tcp --dport {WEB} -j NFQUEUE" in line for line in lines), lines
    status = fw.json("status")
    assert status["prerouting_hook"] is True, status
    assert status["prerouting_matches"] == [f"inet on f0 proto 6 to any port {WEB}",
                                            f"inet6 on f0 proto 6 to any port {WEB}"], status

    r = lan.ask(DIALLED[family], WEB)
    assert r["result"] == "ok", f"the redirect did not reach the server: {r}; reasons {fw.reasons()}"
    assert r["reply_from"] == {"address": DIALLED[family], "port": WEB}, r
    assert r["local"]["address"] == CLIENTS[family], r
    assert r["seen"] == r["local"], f"the server did not see the client itself: {r}"
    states = fw.json("states", "proto", "tcp")["states"]
    assert len(states) == 1, states
    assert states[0]["dst"] == {"address": DIALLED[family], "port": WEB}, states[0]
    assert states[0].get("wire_dst") == {"address": SERVERS[family], "port": WHOAMI_TCP}, states[0]
