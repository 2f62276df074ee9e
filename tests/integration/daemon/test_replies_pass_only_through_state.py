"""Replies pass only through the state their request created: the server's answers reach the
client, but the server cannot open anything towards the client by itself (no rule passes that
direction), over TCP, UDP and ICMP, for IPv4 and IPv6."""

import pytest

from daemon_net import ALLOWED, UDP_PORT, settle


@pytest.mark.parametrize("family", [4, 6])
def test_replies_pass_only_through_state(lan, fw, family):
    # Client -> server works and its replies come back through state.
    assert lan.connect(family, ALLOWED)["result"] == "ok"
    assert lan.udp(family, UDP_PORT)["result"] == "ok"

    # The same services exist on the client, yet the server cannot reach them.
    reverse_tcp = lan.connect(family, ALLOWED, timeout=1.5, src="server")
    assert reverse_tcp["result"] == "timeout", reverse_tcp
    reverse_udp = lan.udp(family, UDP_PORT, timeout=1.0, src="server")
    assert reverse_udp["result"] == "timeout", reverse_udp
    assert lan.ping(family, count=1)["received"] == 1
    reverse_ping = lan.ping(family, count=2, src="server")
    assert reverse_ping["received"] == 0, reverse_ping

    settle()
    r = fw.reasons()
    assert r["state"] > 0
    assert r["rule_block"] > 0
