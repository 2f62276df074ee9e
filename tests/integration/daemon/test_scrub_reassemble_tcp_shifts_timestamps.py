"""`scrub reassemble tcp` through the real daemon: a TCP connection's timestamps differ on the two
sides of the firewall (each end's shifted by an offset of its own), each end sees its own clock
echoed, and 200,000 bytes still echo through both ways (an end that saw an echo it never sent
would take the round trip times from it; one that saw the other's clock jump back would drop the
segments, RFC 7323 5.3). Captured by tcpdump on the client's and the server's side; `pairwallctl
states` marks the state scrubbed, and the scrub rule counts the echo's bytes. IPv4 and IPv6."""

import re

import pytest

from daemon_net import ALLOWED, echo_captured

RULES = f"""\
in_if = "f0"
out_if = "f1"
scrub on $in_if all reassemble tcp
block all
pass in on $in_if proto tcp to port {ALLOWED}
pass out on $out_if proto tcp to port {ALLOWED}
"""

SYN = re.compile(r"Flags \[S\], .*TS val (\d+) ecr (\d+)")
SYN_ACK = re.compile(r"Flags \[S\.\], .*TS val (\d+) ecr (\d+)")


def handshake(log):
    """The SYN's and the SYN-ACK's timestamps (value, echo) in a tcpdump text log."""
    text = log.read_text()
    syn, syn_ack = SYN.search(text), SYN_ACK.search(text)
    assert syn and syn_ack, f"no handshake with timestamps captured in {log.name}:\n{text[-2000:]}"
    return (int(syn.group(1)), int(syn.group(2))), (int(syn_ack.group(1)), int(syn_ack.group(2)))


@pytest.mark.parametrize("family", [4, 6])
def test_scrub_reassemble_tcp_shifts_timestamps(lan, daemon_factory, tmp_path, family):
    fw = daemon_factory(rules=RULES)
    assert "reassemble tcp" in fw.ctl("rules", "show").stdout

    echo, logs = echo_captured(lan, tmp_path, family)
    assert echo["result"] == "ok" and echo["echoed"] == 200_000, f"{echo}; reasons {fw.reasons()}"

    (client_syn, _), (client_synack, client_echo) = handshake(logs["client"])
    (server_syn, _), (server_synack, server_echo) = handshake(logs["server"])
    assert client_syn != server_syn, "the client's timestamp crossed unchanged"
    assert client_synack != server_synack, "the server's timestamp crossed unchanged"
    assert server_echo == server_syn, "the server's SYN-ACK does not echo the timestamp it got"
    assert client_echo == client_syn, "the client does not see its own timestamp echoed"
    # Nothing the ends sent was refused: their timestamps keep to what the watch allows.
    assert fw.reasons().get("bad_seq", 0) == 0 and fw.reasons().get("bad_timestamp", 0) == 0, fw.reasons()
    states = fw.json("states", "proto", "tcp")["states"]
    assert states and all(s.get("scrub_tcp") for s in states), states

    # As pfctl -v -s rules: every packet of the connection meets the rule once, on its pass on f0
    # (in for the client's, out for the server's), so its bytes hold the echo's both ways.
    scrub = fw.json("rules", "show")["scrubs"][0]
    assert int(scrub.get("bytes", 0)) > 2 * 200_000 and int(scrub.get("packets", 0)) > 2, scrub
    assert scrub.get("evaluations") == scrub.get("packets"), scrub
    assert "Bytes: " in fw.ctl("rules", "show").stdout.split("# filter rules")[0]
    metrics = lan.fw.exec("curl", "-s", "http://127.0.0.1:9477/metrics").stdout
    scrubbed = re.search(r'^pairwall_scrub_bytes_total\{rule="0"\} (\d+)$', metrics, re.M)
    assert scrubbed and int(scrubbed.group(1)) > 2 * 200_000, metrics
