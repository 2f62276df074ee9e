"""`block in quick from urpf-failed` in the running daemon, answered from the kernel's routing
tables: a network the firewall routes behind the client (10.77.50.0/24, fd77:50::/64: not on
f0's link, so that antispoof knows nothing of it) passes from the client's side, and a source of
it arriving from the server's side never reaches the client; the server's own address passes."""

from daemon_net import ALLOWED, CLIENT4, CLIENT6, RULES, SERVER4, SERVER6, capture, settle

URPF_RULES = (
    RULES
    + "pass in on $out_if proto tcp to port 8080\n"
    + "pass out on $in_if proto tcp to port 8080\n"
    + "block in quick from urpf-failed\n"
)
URPF_RULE = "block in quick from urpf-failed to any"
BEHIND = {4: "10.77.50.5", 6: "fd77:50::5"}
FORGED = {4: "10.77.50.99", 6: "fd77:50::99"}


def test_urpf_failed_drops_sources_routed_elsewhere(lan, tmp_path, daemon_factory):
    lan.fw.exec("ip", "route", "add", "10.77.50.0/24", "via", CLIENT4, "dev", "f0")
    lan.fw.exec("ip", "-6", "route", "add", "fd77:50::/64", "via", CLIENT6, "dev", "f0")
    lan.client.exec("ip", "addr", "add", f"{BEHIND[4]}/32", "dev", "c0")
    lan.client.exec("ip", "-6", "addr", "add", f"{BEHIND[6]}/128", "dev", "c0", "nodad")
    lan.server.exec("ip", "addr", "add", f"{FORGED[4]}/32", "dev", "s0")
    lan.server.exec("ip", "-6", "addr", "add", f"{FORGED[6]}/128", "dev", "s0", "nodad")
    fw = daemon_factory(rules=URPF_RULES)
    assert URPF_RULE in fw.ctl("rules", "show").stdout

    # Routed back by the interface they arrive on: they pass.
    for family in (4, 6):
        assert lan.connect(family, ALLOWED, source=BEHIND[family])["result"] == "ok", family
    assert lan.connect(4, ALLOWED, src="server", source=SERVER4)["result"] == "ok"
    assert lan.connect(6, ALLOWED, src="server", source=SERVER6)["result"] == "ok"
    settle()
    assert fw.decided(URPF_RULE) == 0, fw.reasons()

    # From the server's side with a source the routes send to the client's: the SYNs stop at the
    # firewall, counted by the rule (which otherwise would let them reach the client).
    log, dump = capture(lan, tmp_path, "client", lan.client, "c0", ALLOWED)
    for family in (4, 6):
        r = lan.connect(family, ALLOWED, src="server", source=FORGED[family], timeout=1.0)
        assert r["result"] == "timeout", r
    settle()
    lan.topo.stop(dump)
    seen = log.read_text(errors="replace")
    assert FORGED[4] not in seen and FORGED[6] not in seen, f"a forged source reached the client:\n{seen}"
    assert fw.decided(URPF_RULE) >= 2, fw.reasons()


# 10.77.60.0/24 and fd77:60::/64 routed both ways, by a multipath route: a source of them may come
# back by either path. Three sources a side and family: the kernel's one path back to each is a
# hash's pick, and a check that took only that path would fail some of them all but surely.
MULTIPATH = {4: "10.77.60.0/24", 6: "fd77:60::/64"}
BOTH_WAYS = {(side, family, host): (f"10.77.60.{host}" if family == 4 else f"fd77:60::{host}")
             for family in (4, 6) for side, hosts in (("client", (5, 7, 9)), ("server", (6, 8, 10)))
             for host in hosts}


def test_urpf_failed_passes_a_source_arriving_by_any_path_of_a_multipath_route(lan, daemon_factory):
    for family, gateways in ((4, (CLIENT4, SERVER4)), (6, (CLIENT6, SERVER6))):
        lan.fw.exec("ip", f"-{family}", "route", "add", MULTIPATH[family],
                    "nexthop", "via", gateways[0], "dev", "f0", "nexthop", "via", gateways[1], "dev", "f1")
    for (side, family, _), address in BOTH_WAYS.items():
        ns, link = (lan.client, "c0") if side == "client" else (lan.server, "s0")
        ns.exec("ip", f"-{family}", "addr", "add", f"{address}/{32 if family == 4 else 128}", "dev", link,
                *(["nodad"] if family == 6 else []))
    fw = daemon_factory(rules=URPF_RULES)

    # The kernel's one path back to each source leaves by one side only; the rule must take both.
    # The answers may take the other path and never arrive: only the rule's verdicts count here.
    for (side, family, _), address in BOTH_WAYS.items():
        lan.connect(family, ALLOWED, src=side, source=address, timeout=0.5)
    settle()
    assert fw.decided(URPF_RULE) == 0, fw.reasons()
    rules = fw.json("rules", "show")["rules"]
    passed = sum(int(r.get("evaluations", 0)) for r in rules if r["text"].startswith("pass in") and "8080" in r["text"])
    assert passed >= len(BOTH_WAYS), rules  # every SYN met the rules, and a pass rule let it in
