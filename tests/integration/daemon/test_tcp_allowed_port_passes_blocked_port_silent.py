"""A rule set that passes TCP to one port and blocks another: the allowed connection completes and
carries data; the blocked one gets no answer at all; a `block return-rst` port is refused at once
by the RST the firewall sends, and a SYN whose checksum is wrong is answered by nothing, counted as
such. IPv4 and IPv6 alike."""

import pytest

from daemon_net import ALLOWED, BLOCKED, REJECTED, SERVER4, metric, settle, wait_until

# SYNs from the client to the server's port with a TCP checksum that cannot be right.
SEND_BAD_SYNS = """
import sys
from scapy.all import IP, TCP, L3RawSocket, conf, send
conf.L3socket = L3RawSocket
for i in range(int(sys.argv[3])):
    send(IP(dst=sys.argv[1]) / TCP(sport=40000 + i, dport=int(sys.argv[2]), flags="S", seq=1000, chksum=0xdead),
         verbose=False)
"""


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


def test_a_corrupt_syn_gets_no_rst_and_the_metrics_say_why(lan, fw):
    """`block return-rst` answers no segment whose checksum is wrong: a reset for it could tear
    down a connection that some other segment really belongs to. Each such SYN the rule blocks is
    counted as a reply not sent, not eligible."""
    unsent = 'pairwall_rejects_unsent_total{reason="not_eligible"}'
    before_unsent, before_blocked = metric(lan, unsent), fw.reasons()["rule_block"]
    lan.client.exec(lan.python, "-c", SEND_BAD_SYNS, SERVER4, str(REJECTED), "3", timeout=30)
    wait_until(lambda: metric(lan, unsent) >= before_unsent + 3, timeout=5, what="three SYNs counted unsent")
    assert fw.reasons()["rule_block"] >= before_blocked + 3
