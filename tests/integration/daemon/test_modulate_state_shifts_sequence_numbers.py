"""`modulate state` through the real daemon: a TCP connection's sequence numbers differ on the two
sides of the firewall (each end's shifted by an offset of its own), each end sees its own
initial sequence number acknowledged, and 200,000 bytes still echo through both ways. Captured by
tcpdump on the client's and the server's side; `pairwallctl states` marks the state modulated. IPv4
and IPv6."""

import re

import pytest

from daemon_net import ALLOWED, echo_captured

RULES = f"""\
in_if = "f0"
out_if = "f1"
block all
pass in on $in_if proto tcp to port {ALLOWED} modulate state
pass out on $out_if proto tcp to port {ALLOWED} modulate state
"""

SYN = re.compile(r"Flags \[S\], seq (\d+),")
SYN_ACK = re.compile(r"Flags \[S\.\], seq (\d+), ack (\d+),")


def handshake(log):
    """The SYN's sequence number and the SYN-ACK's sequence and acknowledgment numbers in a
    tcpdump -S text log."""
    text = log.read_text()
    syn, syn_ack = SYN.search(text), SYN_ACK.search(text)
    assert syn and syn_ack, f"no handshake captured in {log.name}:\n{text[-2000:]}"
    return int(syn.group(1)), int(syn_ack.group(1)), int(syn_ack.group(2))


@pytest.mark.parametrize("family", [4, 6])
def test_modulate_state_shifts_sequence_numbers(lan, daemon_factory, tmp_path, family):
    fw = daemon_factory(rules=RULES)
    assert "modulate state" in fw.ctl("rules", "show").stdout

    echo, logs = echo_captured(lan, tmp_path, family)
    assert echo["result"] == "ok" and echo["echoed"] == 200_000, f"{echo}; reasons {fw.reasons()}"

    client_syn, client_synack, client_ack = handshake(logs["client"])
    server_syn, server_synack, server_ack = handshake(logs["server"])
    assert client_syn != server_syn, "the client's initial sequence number crossed unchanged"
    assert client_synack != server_synack, "the server's initial sequence number crossed unchanged"
    assert server_ack == (server_syn + 1) % 2**32, "the server's SYN-ACK does not acknowledge the SYN it got"
    assert client_ack == (client_syn + 1) % 2**32, "the client does not see its own SYN acknowledged"
    assert fw.reasons().get("bad_seq", 0) == 0, fw.reasons()
    states = fw.json("states", "proto", "tcp")["states"]
    assert states and all(s.get("modulated") for s in states), states
