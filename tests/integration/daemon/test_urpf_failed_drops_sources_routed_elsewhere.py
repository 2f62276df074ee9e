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
