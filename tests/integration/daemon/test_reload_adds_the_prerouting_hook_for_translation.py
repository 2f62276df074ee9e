"""A daemon started without translation rules has no pre-routing hook. A rule set that brings the
first, here a port forward to the firewall's own addresses (which only a decision before routing
can make: routed, the packet is the firewall's own), puts the hook in as it loads, make-before-break:
the port forward works at once and connections opened before keep carrying data. A later set
without translation rules leaves the hook in, for the translated states' replies."""

from daemon_net import FW_IN4, FW_IN6, RULES, SERVER4, SERVER6, WHOAMI_TCP

FORWARDED = 80
OWN = {4: FW_IN4, 6: FW_IN6}

PORT_FORWARD = f"""\
in_if = "f0"
out_if = "f1"
rdr on $in_if proto tcp to {FW_IN4} port {FORWARDED} -> {SERVER4} port {WHOAMI_TCP}
rdr on $in_if proto tcp to {FW_IN6} port {FORWARDED} -> {SERVER6} port {WHOAMI_TCP}
block all
pass in on $in_if proto tcp to port {{ 8080 {WHOAMI_TCP} }}
pass out on $out_if proto tcp to port {{ 8080 {WHOAMI_TCP} }}
"""


def prerouting_lines(lan):
    """Our lines in the fw's mangle table, per tool."""
    found = {}
    for tool in ("iptables", "ip6tables"):
        out = lan.fw.exec(tool, "-w", "-t", "mangle", "-S", check=False).stdout
        found[tool] = [line for line in out.splitlines() if "PAIRWALL" in line]
    return found


def test_reload_adds_the_prerouting_hook_for_translation(lan, fw, tmp_path):
    lan.whoami()
    assert prerouting_lines(lan) == {"iptables": [], "ip6tables": []}
    for family in (4, 6):
        before = lan.ask(OWN[family], FORWARDED, timeout=1.0)
        assert before["result"] != "ok", f"a port forward worked before any rule asked for it: {before}"
    held = {family: lan.hold(family) for family in (4, 6)}
    for family, h in held.items():
        assert h.opened.get("connected"), (family, h.opened)

    forward = tmp_path / "forward.conf"
    forward.write_text(PORT_FORWARD)
    loaded = fw.json("rules", "load", forward)
    assert loaded["path"] == str(forward)

    lines = prerouting_lines(lan)
    for tool in ("iptables", "ip6tables"):
        assert "-A PREROUTING -j PAIRWALL" in lines[tool], lines
        assert any("NFQUEUE" in line and "LOCAL" in line for line in lines[tool]), lines
    for family in (4, 6):
        r = lan.ask(OWN[family], FORWARDED)
        assert r["result"] == "ok", f"no port forward after the load: {r}; reasons {fw.reasons()}"
        assert r["reply_from"] == {"address": OWN[family], "port": FORWARDED}, r
        assert r["seen"] == r["local"], r
        assert held[family].echo()["echo"], f"IPv{family}: a connection opened before the load stopped"

    # Without translation rules again: the hook stays, and the forwarded connections' states with it.
    plain = tmp_path / "plain.conf"
    plain.write_text(RULES)
    fw.json("rules", "load", plain)
    assert prerouting_lines(lan) == lines
    for family in (4, 6):
        assert held[family].echo()["echo"]
    assert fw.log_text().count("pre-routing for translation added") == 1
