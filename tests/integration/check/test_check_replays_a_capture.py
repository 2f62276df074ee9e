"""pairwall-check, the operator's dry run: a rule file that does not compile is refused with
file:line:column and exit status 1; a capture (written by scapy in capture.py, not by the engine)
is replayed as a forwarding firewall sees it, one JSON line per packet saying what the engine
decided: the deciding rule, then the one state each connection's later packets pass by."""

import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

from netns import python_with_scapy

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CHECK = Path(os.environ.get("PAIRWALL_BIN_DIR", REPO / "build" / "bin")) / "pairwall-check"

RULES_WITH = """\
block all
pass in on in0 proto tcp to port 80 flags S/SA {state} state
pass out on out0 proto tcp to port 80 {state} state
pass in on in0 proto udp to port 53
pass out on out0 proto udp to port 53
"""
RULES = RULES_WITH.format(state="keep")


def run_check(*args):
    assert CHECK.exists(), f"{CHECK} not built (cmake --build --preset release)"
    return subprocess.run([str(CHECK), *args], capture_output=True, text=True, timeout=60)


# `modulate state` alike: the capture's ends used their own numbers, which the replay leaves as they are.
@pytest.mark.parametrize("state", ["keep", "modulate"])
def test_check_replays_a_capture(tmp_path, state):
    rules = tmp_path / "rules.conf"
    rules.write_text(RULES_WITH.format(state=state))
    pcap = tmp_path / "capture.pcap"
    made = subprocess.run([python_with_scapy(), str(HERE / "capture.py"), str(pcap)], capture_output=True,
                          text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    expected = json.loads(made.stdout)

    r = run_check("-f", str(rules), "--pcap", str(pcap), "--inside", "10.1.0.0/16,2001:db8:1::/48",
                  "--inside-if", "in0", "--outside-if", "out0")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [line["index"] for line in lines] == list(range(len(expected))), r.stdout

    states = {}
    for line, want in zip(lines, expected):
        what = f"{want['summary']}: {line}"
        assert line["verdict"] == want["verdict"], what
        reasons = want["reason"] if isinstance(want["reason"], list) else [want["reason"]]
        assert line["reason"] in reasons, what
        if want["rule"] == "state":
            assert line["state"] is not None, what
        elif want["rule"] is not None:
            assert line["rule"] == want["rule"], what
        if want["connection"] is not None:
            assert line["state"] is not None, what
            states.setdefault(want["connection"], set()).add(line["state"])
        else:
            assert line["state"] is None, what
    # One state per connection, each its own.
    assert set(states) == {"tcp4", "udp4", "tcp6"}, states
    assert all(len(ids) == 1 for ids in states.values()), states
    assert len({next(iter(ids)) for ids in states.values()}) == 3, states


def test_check_names_the_anchor_of_a_deciding_rule(tmp_path):
    # The UDP rules moved into an anchor whose rules `load anchor` reads beside the rule file:
    # the same verdicts, those rules numbered within the anchor and named by it.
    (tmp_path / "dns.conf").write_text("pass in on in0 to port 53\npass out on out0 to port 53\n")
    rules = tmp_path / "rules.conf"
    rules.write_text("\n".join(RULES.splitlines()[:3]) + '\nanchor "dns" proto udp\nload anchor "dns" from "dns.conf"\n')
    pcap = tmp_path / "capture.pcap"
    made = subprocess.run([python_with_scapy(), str(HERE / "capture.py"), str(pcap)], capture_output=True,
                          text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    expected = json.loads(made.stdout)
    r = run_check("-f", str(rules), "--pcap", str(pcap), "--inside", "10.1.0.0/16,2001:db8:1::/48")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(lines) == len(expected), r.stdout
    udp_in = 3  # `pass in ... proto udp to port 53` in RULES
    decided_in_anchor = 0
    for line, want in zip(lines, expected):
        what = f"{want['summary']}: {line}"
        assert line["verdict"] == want["verdict"], what
        if want["rule"] == udp_in:
            assert (line["rule"], line.get("anchor")) == (0, "dns"), what
            decided_in_anchor += 1
        elif isinstance(want["rule"], int):
            assert line["rule"] == want["rule"] and "anchor" not in line, what
    assert decided_in_anchor > 0

    (tmp_path / "dns.conf").write_text("pass in on in0 to port 53\npass out on out0 to port 53 flags S/SA\n")
    refused = run_check("-f", str(rules))
    assert refused.returncode == 1
    assert refused.stderr.strip() == f"{tmp_path}/dns.conf:2:1: 'flags' applies to TCP only: add 'proto tcp'", \
        refused.stderr


def test_check_says_where_a_capture_is_cut_short(tmp_path):
    # A capture copied while tcpdump still wrote it: the complete records are replayed, and the
    # cut-off one is named instead of silently ending the file.
    rules = tmp_path / "rules.conf"
    rules.write_text("pass all\n")
    udp = bytes.fromhex("4500001c000100004011f9cf0a0000010a000002" "00350035000800ff")
    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101)  # LINKTYPE_RAW
    record = struct.pack("<IIII", 1, 0, len(udp), len(udp)) + udp
    cut = struct.pack("<IIII", 2, 0, 1000, 1000) + udp
    pcap = tmp_path / "cut.pcap"
    pcap.write_bytes(header + record + record + cut)
    r = run_check("-f", str(rules), "--pcap", str(pcap), "--inside", "10.0.0.1/32")
    assert r.returncode == 0, r.stderr
    assert [json.loads(line)["index"] for line in r.stdout.splitlines()] == [0, 1], r.stdout
    assert "cut short (28 of 1000 bytes)" in r.stderr and "before it: 2" in r.stderr, r.stderr

    pcap.write_bytes(header + record + cut[:9])
    r = run_check("-f", str(rules), "--pcap", str(pcap), "--inside", "10.0.0.1/32")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 1, r.stdout
    assert "record header is cut short (9 of 16 bytes)" in r.stderr, r.stderr


def test_check_keeps_time_going_forward(tmp_path):
    # The second request is stamped 100 s before the first (captures merged out of order). Replayed
    # at that time, its state would be long expired when its answer comes a second after the first.
    rules = tmp_path / "rules.conf"
    rules.write_text("block all\npass in on in0 proto udp\npass out on out0 proto udp\n")

    def udp(sport, dport, outbound):
        addresses = "0a0000010a000002" if outbound else "0a0000020a000001"
        return bytes.fromhex("4500001c000100004011f9cf" + addresses) + struct.pack(">HHHH", sport, dport, 8, 0)

    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101)  # LINKTYPE_RAW

    def record(seconds, datagram):
        return struct.pack("<IIII", seconds, 0, len(datagram), len(datagram)) + datagram

    pcap = tmp_path / "reordered.pcap"
    pcap.write_bytes(header + record(1100, udp(1000, 53, True)) + record(1000, udp(1001, 53, True))
                     + record(1101, udp(53, 1001, False)))
    r = run_check("-f", str(rules), "--pcap", str(pcap), "--inside", "10.0.0.1/32")
    assert r.returncode == 0, r.stderr
    got = [(line["verdict"], line["reason"]) for line in map(json.loads, r.stdout.splitlines())]
    assert got == [("pass", "match"), ("pass", "match"), ("pass", "state")], r.stdout


def test_check_skips_what_the_node_never_sees_as_captured(tmp_path):
    # Between two replayed datagrams: an ARP frame, a datagram the snaplen cut (96 of 240 bytes),
    # and a fragment. Each is named, not replayed as a drop.
    rules = tmp_path / "rules.conf"
    rules.write_text("pass all\n")
    udp = bytes.fromhex("4500001c000100004011f9cf0a0000010a000002" "00350035000800ff")
    # 240 bytes by its own length: what the snaplen left of it is not the datagram.
    long_udp = bytes.fromhex("450000f000010000401165fa0a0000010a000002" "0035003500dc0000") + bytes(212)
    fragment = bytes.fromhex("4500001c0002000140110000" "0a0000010a000002") + bytes(8)  # at offset 8
    arp = bytes(6) + bytes(6) + b"\x08\x06" + bytes(28)
    ether = bytes(12) + b"\x08\x00"
    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 96, 1)  # LINKTYPE_ETHERNET, snaplen 96

    def record(frame, wire_length=None):
        return struct.pack("<IIII", 1, 0, len(frame), wire_length or len(frame)) + frame

    pcap = tmp_path / "mixed.pcap"
    pcap.write_bytes(header + record(ether + udp) + record(arp) + record((ether + long_udp)[:96], 254)
                     + record(ether + fragment) + record(ether + udp))
    r = run_check("-f", str(rules), "--pcap", str(pcap), "--inside", "10.0.0.1/32")
    assert r.returncode == 0, r.stderr
    got = [(line["verdict"], line["reason"]) for line in map(json.loads, r.stdout.splitlines())]
    assert got == [("pass", "match"), ("skipped", "not_ip"), ("skipped", "cut_by_snaplen"),
                   ("skipped", "fragment_reassembled_by_kernel"), ("pass", "state")], r.stdout


def test_check_refuses_a_bad_rule_file_with_its_position(tmp_path):
    rules = tmp_path / "rules.conf"
    rules.write_text("block all\npass in on in0 proto tcp to port 80 flags S/SA keep stat\n")
    r = run_check("-f", str(rules))
    assert r.returncode == 1
    first = r.stderr.strip().splitlines()[0]
    assert first.startswith(f"{rules}:2:"), first
    good = tmp_path / "good.conf"
    good.write_text(RULES)
    ok = run_check("-f", str(good))
    assert ok.returncode == 0 and "5 filter rules" in ok.stdout, ok
