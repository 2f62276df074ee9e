"""`antispoof quick for $in_if` and `$in_if:network` in the running daemon, resolved from the
firewall namespace's real interfaces: a packet that arrives from the server side claiming an
address of the client side's network is dropped, while the same connection from the server's own
address passes; the resolved networks are a const table that pairwallctl shows, and it follows an
address added to the interface while the daemon runs."""

from daemon_net import ALLOWED, RULES, SERVER4, SERVER6
from netns import wait_until

# The server side may reach the client too, so that only antispoof tells the two sources apart.
SPOOF_RULES = (
    RULES
    + "pass in on $out_if proto tcp to $in_if:network port 8080\n"
    + "pass out on $in_if proto tcp to port 8080\n"
    + "antispoof quick for $in_if\n"
)
FORGED4, FORGED6 = "10.77.1.99", "fd77:1::99"
ANTISPOOF_NETWORK = "block drop in quick on ! f0 from f0:network to any"


def test_antispoof_drops_forged_sources(lan, tmp_path, daemon_factory):
    # The server owns an address of the client side's network as a host route, so that its
    # packets from it leave through the firewall, arriving on the wrong interface.
    lan.server.exec("ip", "addr", "add", f"{FORGED4}/32", "dev", "s0")
    lan.server.exec("ip", "-6", "addr", "add", f"{FORGED6}/128", "dev", "s0", "nodad")
    fw = daemon_factory(rules=SPOOF_RULES)

    shown = fw.json("tables", "show", "f0:network")["tables"][0]
    assert shown["entries"] == ["10.77.1.0/24", "fd77:1::/64"], shown
    assert shown.get("is_const") is True, shown
    rules = fw.ctl("rules", "show").stdout
    assert ANTISPOOF_NETWORK in rules, rules
    assert "block drop in quick from f0 to any" in rules, rules

    # (Sources given: IPv6 would pick the forged address for being the closer match.)
    assert lan.connect(4, ALLOWED, src="server", source=SERVER4)["result"] == "ok"
    assert lan.connect(6, ALLOWED, src="server", source=SERVER6)["result"] == "ok"
    # Forged, the replies could not come back anyway (the client's network is on-link at the
    # client): what shows that antispoof dropped them is its rule's count.
    before = fw.decided(ANTISPOOF_NETWORK)
    assert lan.connect(4, ALLOWED, src="server", source=FORGED4, timeout=1.0)["result"] == "timeout"
    assert lan.connect(6, ALLOWED, src="server", source=FORGED6, timeout=1.0)["result"] == "timeout"
    assert fw.decided(ANTISPOOF_NETWORK) >= before + 2
    # The client's network arriving where it lives passes.
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert lan.connect(6, ALLOWED)["result"] == "ok"

    # A network added to the inside interface joins f0:network as it comes, without a reload.
    lan.fw.exec("ip", "addr", "add", "10.77.9.1/24", "dev", "f0")
    wait_until(lambda: "10.77.9.0/24" in fw.json("tables", "show", "f0:network")["tables"][0]["entries"], 5,
               what="f0:network following the new address")
    assert "interface addresses changed: table f0:network set anew" in fw.log_text()
    lan.server.exec("ip", "addr", "add", "10.77.9.99/32", "dev", "s0")
    assert lan.connect(4, ALLOWED, src="server", source=SERVER4)["result"] == "ok"
    before = fw.decided(ANTISPOOF_NETWORK)
    assert lan.connect(4, ALLOWED, src="server", source="10.77.9.99", timeout=1.0)["result"] == "timeout"
    assert fw.decided(ANTISPOOF_NETWORK) >= before + 1
