"""pairwall-check -v lists the rule set as it was read, as pfctl -nvf does: macros expanded,
table files and interfaces' addresses filled in (an interface named as an address, by a table of
its own), scrub and translation rules apart, and each
filter rule with its @N, an anchor's rules indented under its line. Without -v it prints the one
line it always did, and -v with a replay, whose output is JSON lines, is refused."""

import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CHECK = Path(os.environ.get("PAIRWALL_BIN_DIR", REPO / "build" / "bin")) / "pairwall-check"

RULES = """\
lan_if = "lan7"
web_ports = "{ http, 8443 }"
table <bad> persist file "BAD_FILE"
table <lan> const { $lan_if:network, 198.51.100.9 }
scrub in on $lan_if all max-mss 1400
nat on $lan_if from <lan> to any -> 203.0.113.1
block log all
anchor "web" in on $lan_if {
  pass proto tcp to port $web_ports
  anchor "deny" {
    block quick from <bad>
  }
}
pass out on $lan_if from $lan_if to any
"""

LISTING = """\
table <bad> { 198.51.100.0/24 !198.51.100.7 }
table <lan> const { 198.51.100.9 192.0.2.0/24 }
table <lan7:addresses> const { 192.0.2.1 }
# scrub rules, first match
@0 scrub in on lan7 all max-mss 1400
# translation rules, first match
@0 nat on lan7 from <lan> to any -> 203.0.113.1
# filter rules, last match
@0 block log all
@1 anchor "web" in on lan7
  @0 pass proto tcp from any to any port { 80, 8443 } flags S/SA keep state
  @1 anchor "deny" all
    @0 block quick from <bad> to any
@2 pass out on lan7 from lan7 to any keep state
"""


def run_check(*args):
    assert CHECK.exists(), f"{CHECK} not built (cmake --build --preset release)"
    return subprocess.run([str(CHECK), *args], capture_output=True, text=True, timeout=60)


def test_check_lists_the_rules_as_read(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("198.51.100.0/24\n!198.51.100.7\n")
    rules = tmp_path / "pf.conf"
    rules.write_text(RULES.replace("BAD_FILE", str(bad)))
    lan7 = ("--iface-address", "lan7=192.0.2.1/24")

    listed = run_check("-v", "-f", str(rules), *lan7)
    assert listed.returncode == 0, listed.stderr
    head, _, listing = listed.stdout.partition("\n")
    assert head == f"{rules}: 4 filter rules, state limit 100000: OK"
    assert listing == LISTING, listing

    quiet = run_check("-f", str(rules), *lan7)
    assert quiet.returncode == 0 and quiet.stdout == head + "\n", quiet

    replay = run_check("-v", "-f", str(rules), *lan7, "--pcap", "/dev/null", "--inside", "10.0.0.0/8")
    assert replay.returncode == 2, replay
    assert "-v lists the rules of a check; a replay prints JSON lines alone" in replay.stderr
