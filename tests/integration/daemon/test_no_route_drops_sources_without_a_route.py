"""`block in quick from no-route` in the running daemon, answered from the kernel's routing tables:
a source the firewall has no route for (10.78.0.0/24, fd78::/64, on the server's side) never
reaches the client, while the server's own address passes; once the firewall routes that network,
its connections pass too, within the second the daemon keeps an answer."""

import time

from daemon_net import ALLOWED, RULES, SERVER4, SERVER6, capture, settle

NO_ROUTE_RULES = (
    RULES
    + "pass in on $out_if proto tcp to port 8080\n"
    + "pass out on $in_if proto tcp to port 8080\n"
    + "block in quick from no-route\n"
)
NO_ROUTE_RULE = "block in quick from no-route to any"
UNROUTED = {4: "10.78.0.5", 6: "fd78::5"}


def connect_from_server(lan, family, source, timeout=3.0):
    return lan.connect(family, ALLOWED, src="server", source=source, timeout=timeout)


def test_no_route_drops_sources_without_a_route(lan, tmp_path, daemon_factory):
    lan.server.exec("ip", "addr", "add", f"{UNROUTED[4]}/32", "dev", "s0")
    lan.server.exec("ip", "-6", "addr", "add", f"{UNROUTED[6]}/128", "dev", "s0", "nodad")
    fw = daemon_factory(rules=NO_ROUTE_RULES)
    assert NO_ROUTE_RULE in fw.ctl("rules", "show").stdout

    # The server's own addresses are on a network the firewall is attached to: they pass.
    assert connect_from_server(lan, 4, SERVER4)["result"] == "ok"
    assert connect_from_server(lan, 6, SERVER6)["result"] == "ok"
    settle()
    assert fw.decided(NO_ROUTE_RULE) == 0, fw.reasons()

    # Sources of a network the firewall has no route for: the SYNs stop at the firewall, counted
    # by the rule.
    log, dump = capture(lan, tmp_path, "client", lan.client, "c0", ALLOWED)
    for family in (4, 6):
        r = connect_from_server(lan, family, UNROUTED[family], timeout=1.0)
        assert r["result"] == "timeout", r
    settle()
    lan.topo.stop(dump)
    seen = log.read_text(errors="replace")
    assert UNROUTED[4] not in seen and UNROUTED[6] not in seen, f"an unrouted source reached the client:\n{seen}"
    blocked = fw.decided(NO_ROUTE_RULE)
    assert blocked >= 2, fw.reasons()

    # Routed now: the kernel's tables decide, a kept answer lasting no more than a second.
    lan.fw.exec("ip", "route", "add", "10.78.0.0/24", "via", SERVER4, "dev", "f1")
    lan.fw.exec("ip", "-6", "route", "add", "fd78::/64", "via", SERVER6, "dev", "f1")
    time.sleep(1.2)
    for family in (4, 6):
        assert connect_from_server(lan, family, UNROUTED[family])["result"] == "ok", family
    settle()
    assert fw.decided(NO_ROUTE_RULE) == blocked, fw.reasons()
