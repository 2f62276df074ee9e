"""pairwall-check resolves interfaces named as addresses as pfctl -n does: from this host (`lo`
always exists), or from --iface-address for rules written for another machine; an interface it
knows neither way refuses the rules with file:line:column."""

import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CHECK = Path(os.environ.get("PAIRWALL_BIN_DIR", REPO / "build" / "bin")) / "pairwall-check"

RULES = """\
int_if = "lan7"
block all
antispoof quick for $int_if inet
pass in on $int_if from $int_if:network to ! self keep state
pass in on lo from lo to lo
"""


def run_check(*args):
    assert CHECK.exists(), f"{CHECK} not built (cmake --build --preset release)"
    return subprocess.run([str(CHECK), *args], capture_output=True, text=True, timeout=60)


def test_check_resolves_interfaces(tmp_path):
    rules = tmp_path / "pf.conf"
    rules.write_text(RULES)
    refused = run_check("-f", str(rules))
    assert refused.returncode == 1, refused
    assert refused.stderr.strip() == (
        f"{rules}:3:21: no interface named 'lan7' on this host "
        "(write '(lan7:network)' to match its addresses once it exists)"
    ), refused.stderr

    given = run_check("-f", str(rules), "--iface-address", "lan7=192.0.2.1/24,2001:db8::1/64")
    assert given.returncode == 0, given.stderr
    assert given.stdout.strip() == f"{rules}: 5 filter rules, state limit 100000: OK"

    bad = run_check("-f", str(rules), "--iface-address", "lan7=192.0.2.1/40")
    assert bad.returncode == 2 and "'192.0.2.1/40' is not ADDR/LEN" in bad.stderr, bad


def test_check_loads_dynamic_interface_not_there_yet_with_a_warning(tmp_path):
    rules = tmp_path / "pf.conf"
    rules.write_text("block all\npass in on tun9 to (tun9)\n")
    loaded = run_check("-f", str(rules))
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == f"{rules}: 2 filter rules, state limit 100000: OK"
    assert loaded.stderr.strip() == (
        f"{rules}:2:20: warning: no interface named 'tun9' on this host yet: "
        "(tun9) matches no address until it has an address"
    ), loaded.stderr
