"""nat on the server-side interface: TCP connections and UDP datagrams from the client reach the
server from the firewall's own server-side address and a source port in pf's proxy range
50001:65535, each flow on a port of its own; the replies come back to the client through the
state, from the address and port it sent to. IPv4 and IPv6 alike. `rules show` counts the
connections in the nat rule of their family, as pfctl -vs nat does, and none in the other's; so
does /metrics."""

import pytest

from daemon_net import (ALLOWED, CLIENT4, CLIENT6, FW_OUT4, FW_OUT6, NAT_TO_FW_OUT, SERVER4, SERVER6, WHOAMI_TCP,
                        WHOAMI_UDP, settle)

RULES = f"""\
in_if = "f0"
out_if = "f1"
{NAT_TO_FW_OUT}block all
pass in on $in_if proto tcp to port {{ {ALLOWED} {WHOAMI_TCP} }}
pass out on $out_if proto tcp to port {{ {ALLOWED} {WHOAMI_TCP} }}
pass in on $in_if proto udp to port {WHOAMI_UDP}
pass out on $out_if proto udp to port {WHOAMI_UDP}
"""

ENDS = {4: (CLIENT4, FW_OUT4, SERVER4), 6: (CLIENT6, FW_OUT6, SERVER6)}
FLOWS = 3


@pytest.mark.parametrize("proto", ["tcp", "udp"])
@pytest.mark.parametrize("family", [4, 6])
def test_nat_rewrites_source_and_replies_return(lan, daemon_factory, family, proto):
    client, fw_out, server = ENDS[family]
    udp = proto == "udp"
    port = WHOAMI_UDP if udp else WHOAMI_TCP
    fw = daemon_factory(rules=RULES)
    lan.whoami()

    flows = []
    for _ in range(FLOWS):
        r = lan.ask(server, port, udp=udp)
        assert r["result"] == "ok", f"no answer through nat: {r}; reasons {fw.reasons()}"
        assert r["reply_from"] == {"address": server, "port": port}, r
        assert r["local"]["address"] == client, r
        assert r["seen"]["address"] == fw_out, f"the server saw the client untranslated: {r}"
        assert 50001 <= r["seen"]["port"] <= 65535, f"translated port outside 50001:65535: {r}"
        flows.append(r)
    nat_ports = {r["seen"]["port"] for r in flows}
    assert len(nat_ports) == FLOWS, f"{FLOWS} flows share translated ports: {flows}"

    if not udp:
        # Data both ways over a translated connection: sequence tracking holds after the rewrite.
        echo = lan.connect(family, ALLOWED)
        assert echo["result"] == "ok" and echo["echoed"] == 1000, echo

    settle()
    states = fw.json("states", "proto", proto)["states"]
    for r in flows:
        mine = [s for s in states if s["src"] == r["local"]]
        assert len(mine) == 1, f"no single state for {r['local']}: {states}"
        s = mine[0]
        assert s["dst"] == {"address": server, "port": port}, s
        assert s.get("wire_src") == r["seen"], f"the state's translated key is not what the server saw: {s}"
        assert s.get("wire_dst") == {"address": server, "port": port}, s

    # As pfctl -vs nat: the family's nat rule counts the connections it translated, and the packets
    # it matched first (one a connection, as the rest pass by the state); the other family's, none.
    translations = fw.json("rules", "show")["translations"]
    own = next(t for t in translations if fw_out in t["text"])
    other = next(t for t in translations if fw_out not in t["text"])
    connections = FLOWS if udp else FLOWS + 1
    assert int(own.get("evaluations", 0)) == connections, own
    assert int(own.get("states_created", 0)) == connections, own
    assert int(own.get("states_current", 0)) == connections, own
    assert int(own.get("packets", 0)) >= connections, own
    assert int(own.get("bytes", 0)) > 0, own
    assert int(other.get("evaluations", 0)) == 0 and int(other.get("states_created", 0)) == 0, other
    assert "[ Evaluations: " in fw.ctl("rules", "show").stdout.split("# filter rules")[0]
    metrics = lan.fw.exec("curl", "-s", "http://127.0.0.1:9477/metrics").stdout
    assert f'pairwall_translation_states{{rule="{own.get("number", 0)}"}} {connections}\n' in metrics, metrics
