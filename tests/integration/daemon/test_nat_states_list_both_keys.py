"""`pairwallctl states` shows a translated state with both keys — the client's own end and the
end nat gave it — in JSON and in the human listing, and finds it by either address; `pairwallctl
rules show` lists the nat rules apart from the filter rules, as written. A translated
flow always has a state: the UDP rules here say `no state`, and the replies (which no rule
passes) still come back through the state the translation made. IPv4 and IPv6."""

import pytest

from daemon_net import (CLIENT4, CLIENT6, FW_OUT4, FW_OUT6, NAT_TO_FW_OUT, SERVER4, SERVER6, WHOAMI_TCP, WHOAMI_UDP,
                        settle)

RULES = f"""\
in_if = "f0"
out_if = "f1"
{NAT_TO_FW_OUT}block all
pass in on $in_if proto tcp to port {WHOAMI_TCP}
pass out on $out_if proto tcp to port {WHOAMI_TCP}
pass in on $in_if proto udp to port {WHOAMI_UDP} no state
pass out on $out_if proto udp to port {WHOAMI_UDP} no state
"""

ENDS = {4: (CLIENT4, FW_OUT4, SERVER4), 6: (CLIENT6, FW_OUT6, SERVER6)}


def shown(family, e):
    return f"[{e['address']}]:{e['port']}" if family == 6 else f"{e['address']}:{e['port']}"


@pytest.mark.parametrize("family", [4, 6])
def test_nat_states_list_both_keys(lan, daemon_factory, family):
    client, fw_out, server = ENDS[family]
    fw = daemon_factory(rules=RULES)
    lan.whoami()

    flows = {}
    for proto, port in (("tcp", WHOAMI_TCP), ("udp", WHOAMI_UDP)):
        r = lan.ask(server, port, udp=proto == "udp")
        assert r["result"] == "ok", f"{proto} through nat: {r}; reasons {fw.reasons()}"
        assert r["seen"]["address"] == fw_out and r["reply_from"] == {"address": server, "port": port}, r
        flows[proto] = r

    settle()
    listing = fw.json("states")
    assert int(listing["total"]) == 2, listing
    for proto, r in flows.items():
        number = 6 if proto == "tcp" else 17
        s = [s for s in listing["states"] if s["proto"] == number]
        assert len(s) == 1, listing
        s = s[0]
        assert s["src"] == r["local"] and s["dst"] == r["reply_from"], s
        assert s.get("wire_src") == r["seen"] and s.get("wire_dst") == r["reply_from"], s

    human = fw.ctl("states").stdout
    for proto, r in flows.items():
        line = f"{proto} {shown(family, r['local'])} ({shown(family, r['seen'])}) -> {shown(family, r['reply_from'])}"
        assert line in human, f"{line!r} not in:\n{human}"

    # Either key finds the states: the client's address (stack side), the nat address (wire side).
    assert int(fw.json("states", client)["matched"]) == 2
    assert int(fw.json("states", fw_out)["matched"]) == 2
    assert int(fw.json("states", fw_out, "port", flows["udp"]["seen"]["port"], "proto", "udp")["matched"]) == 1

    # The nat rules, macros expanded, numbered apart from the filter rules and listed before them.
    rules = fw.json("rules", "show")
    assert [t["text"] for t in rules["translations"]] == [
        f"nat on f1 inet from 10.77.1.0/24 to any -> {FW_OUT4}",
        f"nat on f1 inet6 from fd77:1::/64 to any -> {FW_OUT6}",
    ], rules
    assert [int(t.get("number", 0)) for t in rules["translations"]] == [0, 1], rules
    assert rules["translations"][0]["location"].endswith(":3"), rules
    human = fw.ctl("rules", "show").stdout.splitlines()
    assert human[:2] == ["# translation rules, first match", f"@0 nat on f1 inet from 10.77.1.0/24 to any -> {FW_OUT4}"]
    filters = human.index("# filter rules, last match")
    assert human[filters + 1] == "@0 block all", human
