"""The node's own link-local traffic (hooks = "forward+local") is keyed by its link as well as its
addresses: with fe80::1 on both of the firewall's links and fe80::99 beyond each, an echo that the
rules pass out on f0 makes a state of f0's, and the same echo (addresses and identifier alike) out
on f1 meets the rules there, which pass nothing: a state of one link passes nothing on another.
`states` names the link of such a state."""

from daemon_net import settle

RULES = """\
block all
pass inet6 proto icmp6 icmp6-type { neighbrsol neighbradv }
pass out on f0 inet6 proto icmp6 icmp6-type echoreq
"""
IDENT = 4242


def link_local(ns, dev, address):
    ns.exec("ip", "-6", "addr", "flush", "dev", dev, "scope", "link")
    ns.exec("ip", "-6", "addr", "add", f"{address}/64", "dev", dev, "nodad")


def test_link_local_states_stay_on_their_link(lan, daemon_factory):
    link_local(lan.fw, "f0", "fe80::1")
    link_local(lan.fw, "f1", "fe80::1")
    link_local(lan.client, "c0", "fe80::99")
    link_local(lan.server, "s0", "fe80::99")
    fw = daemon_factory(hooks="forward+local", rules=RULES)

    def ping(dev):
        return lan.peer(lan.fw, "ping", f"fe80::99%{dev}", "--count", 2, "--timeout", 1.0, "--ident", IDENT,
                        timeout=15)

    assert ping("f0")["received"] == 2, fw.reasons()
    assert ping("f1")["received"] == 0, "an echo out on f1 passed by f0's state"
    settle()
    echoes = [s for s in fw.json("states", "proto", "ipv6-icmp")["states"]
              if s["dst"]["address"] == "fe80::99"]
    assert len(echoes) == 1, echoes
    assert echoes[0]["link"] == "f0", echoes
    assert echoes[0]["src"]["address"] == "fe80::1", echoes
    assert "on f0" in fw.ctl("states", "proto", "ipv6-icmp").stdout
