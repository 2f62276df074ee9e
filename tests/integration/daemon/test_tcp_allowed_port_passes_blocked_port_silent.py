"""A rule set that passes TCP to one port and blocks another: the allowed connection completes and
carries data; the blocked one gets no answer at all; a `block return-rst` port is refused at once
by the RST the firewall sends. IPv4 and IPv6 alike."""

import pytest

from daemon_net import ALLOWED, BLOCKED, REJECTED, settle


@pytest.mark.parametrize("family", [4, 6])
def test_tcp_allowed_port_passes_blocked_port_silent(lan, fw, family):
    before = fw.reasons()

    ok = lan.connect(family, ALLOWED)
    assert ok["result"] == "ok", ok
    assert ok["echoed"] == 1000

    blocked = lan.connect(family, BLOCKED, timeout=1.5)
    assert blocked["result"] == "timeout", blocked

    settle()
    after = fw.reasons()
    assert after["match"] > before["match"], "the allowed connection's first packet was not counted"
    assert after["state"] > before["state"], "the rest of the allowed connection did not pass by state"
    # The client retransmits its SYN while it waits: at least one SYN was blocked by rule.
    assert after["rule_block"] >= before["rule_block"] + 1

    states = fw.json("states", "port", ALLOWED)
    assert int(states["matched"]) >= 1


@pytest.mark.parametrize("family", [4, 6])
def test_tcp_return_rst_port_gets_rst(lan, fw, family):
    before = fw.reasons()["rule_block"]
    refused = lan.connect(family, REJECTED, timeout=3)
    assert refused["result"] == "refused", refused
    assert refused["seconds"] < 1.0, "the RST should refuse the connection at once, not after a timeout"
    settle()
    assert fw.reasons()["rule_block"] > before
