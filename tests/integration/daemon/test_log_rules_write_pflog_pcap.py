"""Packets of `log` rules reach the pcap file in pflog format: `tcpdump -n -e -r` reads it and shows,
for each logged packet, the deciding rule's number, the action and the interface. As in pf, `log` on
a rule that keeps state logs the packet that creates the state, not the replies that match it;
packets of rules without `log` are not there. A rule in an anchor is logged as pf logs it, by the
anchor's number, its name and the rule's number in it ("rule 10.guard.0/")."""

import re
import subprocess
import time

from daemon_net import ALLOWED, BLOCKED, FW_IN4, RULES, SERVER4, UDP_PORT, WHOAMI_TCP, metric

LOGGED_RULES = RULES + """\
anchor "guard" in on $in_if {
  block log quick proto tcp to port 8081
}
pass in log on $in_if proto udp to port 5353
"""


def read_pflog(path, until, timeout=5.0):
    """tcpdump's lines for `path` once until(lines) holds (the writer flushes every 100 ms), or at the timeout."""
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        if path.exists():
            cp = subprocess.run(["tcpdump", "-n", "-e", "-r", str(path)], capture_output=True, text=True, timeout=10)
            assert "PFLOG" in cp.stderr, cp.stderr
            lines = cp.stdout.splitlines()
            if until(lines):
                return lines
        time.sleep(0.1)
    return lines


def rule_number(fw, text):
    """The number `pairwallctl rules show` gives the rule whose text contains `text`."""
    shown = fw.ctl("rules", "show").stdout
    for line in shown.splitlines():
        if text in line:
            m = re.match(r"\s*@(\d+)", line)
            assert m, line
            return int(m.group(1))
    raise AssertionError(f"no rule with {text!r} in rules show:\n{shown}")


def test_log_rules_write_pflog_pcap(lan, daemon_factory, tmp_path):
    pcap = tmp_path / "pflog.pcap"
    fw = daemon_factory(rules=LOGGED_RULES, pcap=pcap)
    anchor = rule_number(fw, 'anchor "guard"')
    block_rule = f"{anchor}.guard.{rule_number(fw, 'block log quick proto tcp')}"
    assert block_rule.endswith(".guard.0"), block_rule
    pass_rule = rule_number(fw, "pass in log on f0 proto udp")

    assert lan.connect(4, ALLOWED)["result"] == "ok"  # passed by a rule without `log`
    assert lan.connect(4, BLOCKED, timeout=1.5)["result"] == "timeout"
    assert lan.udp(4, UDP_PORT)["result"] == "ok"

    lines = read_pflog(pcap, lambda ls: any(f"rule {block_rule}/" in l for l in ls)
                       and any(f"rule {pass_rule}/" in l for l in ls))
    time.sleep(0.3)  # and a little longer, for a record that should not be there
    lines = read_pflog(pcap, lambda ls: True)
    blocked = [l for l in lines if f"rule {block_rule}/" in l]
    passed = [l for l in lines if f"rule {pass_rule}/" in l]
    assert blocked, "\n".join(lines) or "(empty log)"
    assert passed, "\n".join(lines) or "(empty log)"
    assert all("block in on f0" in l and f".{BLOCKED}:" in l for l in blocked), blocked
    assert all("pass in on f0" in l and f".{UDP_PORT}:" in l for l in passed), passed
    assert len(passed) == 1, "only the query creating the UDP state is logged, not the reply:\n" + "\n".join(passed)
    assert not [l for l in lines if f".{ALLOWED}:" in l], "a packet of a rule without log was logged"
    # What reached the file, and what was lost on the way there, each by its own counter.
    assert metric(lan, "pairwall_pcap_logged_total") == len(lines)
    assert metric(lan, "pairwall_pcap_write_errors_total") == 0
    assert metric(lan, "pairwall_pcap_rotations_total") == 0


def test_out_pass_rules_log_out_on_their_interface(lan, daemon_factory, tmp_path):
    """A forwarded packet meets two passes, and each rule logs its own: `pass out log` logs the
    connection the in pass let by without `log`, and `block out log` the packet it drops, both as
    `out on f1` with their own rule numbers, as pf's do."""
    pcap = tmp_path / "pflog.pcap"
    fw = daemon_factory(rules=RULES + "pass out log on $out_if proto tcp to port 8080\n"
                        "block out log quick on $out_if proto udp to port 5353\n", pcap=pcap)
    pass_out = rule_number(fw, "pass out log on f1 proto tcp")
    block_out = rule_number(fw, "block out log quick on f1 proto udp")

    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert lan.udp(4, UDP_PORT, timeout=1.0)["result"] == "timeout"

    lines = read_pflog(pcap, lambda ls: any(f"rule {pass_out}/" in l for l in ls)
                       and any(f"rule {block_out}/" in l for l in ls))
    time.sleep(0.3)
    lines = read_pflog(pcap, lambda ls: True)
    passed = [l for l in lines if f"rule {pass_out}/" in l]
    blocked = [l for l in lines if f"rule {block_out}/" in l]
    assert len(passed) == 1 and "pass out on f1" in passed[0] and f".{ALLOWED}:" in passed[0], lines
    assert blocked and all("block out on f1" in l and f".{UDP_PORT}:" in l for l in blocked), lines
    assert not [l for l in lines if " in on " in l], "no in-pass rule logs here:\n" + "\n".join(lines)


def test_out_pass_decided_before_routing_logs_on_its_way_out(lan, daemon_factory, tmp_path):
    """A port forward to the firewall's own address is decided before routing, yet its out pass is
    the interface the kernel sends it out of: `block out log` logs it as `out on f1`, as pf does."""
    pcap = tmp_path / "pflog.pcap"
    fw = daemon_factory(rules=f"""\
in_if = "f0"
out_if = "f1"
rdr on $in_if proto tcp to {FW_IN4} port 80 -> {SERVER4} port {WHOAMI_TCP}
pass in on $in_if proto tcp to {SERVER4} port {WHOAMI_TCP}
block out log quick on $out_if proto tcp to {SERVER4} port {WHOAMI_TCP}
""", pcap=pcap)
    block_out = rule_number(fw, "block out log quick on f1")
    lan.whoami()
    assert lan.ask(FW_IN4, 80, timeout=1.0)["result"] == "timeout"

    lines = read_pflog(pcap, lambda ls: any(f"rule {block_out}/" in l for l in ls))
    blocked = [l for l in lines if f"rule {block_out}/" in l]
    assert blocked and all("block out on f1" in l for l in blocked), "\n".join(lines) or "(empty log)"
