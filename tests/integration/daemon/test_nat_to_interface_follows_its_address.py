"""nat ... -> ($out_if): the client's flows leave from the firewall's address on that interface,
and when that address changes, new flows leave from the new one (the rules follow the interface
without a reload); the rule lists its target as the interface."""

from daemon_net import CLIENT4, FW_OUT4, SERVER4, WHOAMI_TCP
from netns import wait_until

NEW_OUT4 = "10.77.2.9"

RULES = f"""\
in_if = "f0"
out_if = "f1"
nat on $out_if from 10.77.1.0/24 to any -> ($out_if)
block all
pass in on $in_if proto tcp to port {WHOAMI_TCP}
pass out on $out_if proto tcp to port {WHOAMI_TCP}
"""


def test_nat_to_interface_follows_its_address(lan, daemon_factory):
    fw = daemon_factory(rules=RULES)
    lan.whoami()
    listed = fw.json("rules", "show")
    texts = [t["text"] for t in listed.get("translations", [])]
    assert texts == ["nat on f1 from 10.77.1.0/24 to any -> (f1)"], listed

    r = lan.ask(SERVER4, WHOAMI_TCP)
    assert r["result"] == "ok" and r["local"]["address"] == CLIENT4, r
    assert r["seen"]["address"] == FW_OUT4, f"not translated to f1's address: {r}"

    # f1 renumbered: the translation follows once the daemon has seen the change.
    lan.fw.ip("addr", "del", f"{FW_OUT4}/24", "dev", "f1")
    lan.fw.address("f1", f"{NEW_OUT4}/24")

    def translated_to_new():
        a = lan.ask(SERVER4, WHOAMI_TCP)
        return a if a["result"] == "ok" and a["seen"]["address"] == NEW_OUT4 else None

    r = wait_until(translated_to_new, 10, what=f"new flows translated to {NEW_OUT4}")
    assert 50001 <= r["seen"]["port"] <= 65535, r
    assert "f1 (translation address)" in fw.log_text(), fw.log_text()


def test_nat_to_an_interface_without_an_address_yet(lan, daemon_factory):
    """-> (f9) while f9 has no IPv4 address, as a link waiting for its DHCP lease: the daemon starts,
    the rule's flows are dropped (translation_failed) rather than leaving untranslated, and once the
    address comes they leave from it."""
    lan.fw.ip("link", "add", "f9", "type", "veth", "peer", "name", "f9p")  # no dummy driver on every kernel
    lan.fw.ip("link", "set", "f9", "up")
    lan.fw.ip("link", "set", "f9p", "up")
    fw = daemon_factory(rules=RULES.replace("-> ($out_if)", "-> (f9)"))
    lan.whoami()
    assert lan.ask(SERVER4, WHOAMI_TCP, timeout=1.0)["result"] != "ok"
    assert fw.reasons().get("translation_failed", 0) >= 1

    leased = "10.77.2.50"
    lan.fw.address("f9", f"{leased}/32")

    def translated():
        a = lan.ask(SERVER4, WHOAMI_TCP)
        return a if a["result"] == "ok" and a["seen"]["address"] == leased else None

    wait_until(translated, 10, what=f"flows translated to f9's new address {leased}")
