"""Anchors in the running daemon, as pf's (pfctl -a NAME -f FILE): rules loaded into an anchor
the rule file declares pass what they name at once, from a file or standard input; a rule file
that fails to compile is refused with its place and the running rules stay; a reload of the rule
file keeps what was loaded; a flush of the anchor stops new connections, while one that was
passed keeps flowing by its state."""

import signal

from daemon_net import BLOCKED, CLIENT4, RULES
from netns import wait_until

ANCHORED = RULES + (
    'anchor "admin" in on $in_if proto tcp\n'
    "pass out on $out_if proto tcp to port 8081\n"
)


def test_anchors_take_rules_at_runtime(lan, tmp_path, daemon_factory):
    fw = daemon_factory(rules=ANCHORED)
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"
    listed = fw.ctl("anchors").stdout
    assert listed.startswith('anchor "admin" in on f0 proto tcp  0 rules, loaded ('), listed

    admin = tmp_path / "admin.conf"
    admin.write_text(f'admin = "{CLIENT4}"\npass from $admin to port 8081\n')
    loaded = fw.ctl("anchors", "load", "admin", "-f", admin)
    assert loaded.stdout == 'anchor "admin": 1 rule\n', loaded.stdout
    assert lan.connect(4, BLOCKED)["result"] == "ok"
    held = lan.hold(4, port=BLOCKED)
    assert held.opened.get("connected"), held.opened

    # Listed as pfctl -s rules lists them: the anchor's line with its @N, then its rules numbered
    # within it; their metrics say which anchor.
    shown = fw.ctl("rules", "show").stdout.splitlines()
    at = next(i for i, line in enumerate(shown) if line.endswith(' anchor "admin" in on f0 proto tcp'))
    assert shown[at + 1] == f"  @0 pass from {CLIENT4} to any port 8081 keep state", shown
    rules = fw.json("rules", "show")["rules"]
    assert [r.get("anchor", "") for r in rules].count("admin") == 1
    assert [r for r in rules if r["calls_anchor"] == "admin"][0]["number"] == int(shown[at].split()[0][1:])
    assert fw.ctl("anchors", "show", "admin").stdout.splitlines()[0] == shown[at + 1]
    metrics = lan.fw.exec("curl", "-s", "http://127.0.0.1:9477/metrics").stdout
    assert 'pairwall_rule_packets_total{rule="0",anchor="admin"} ' in metrics

    # pfctl -a admin -z: the anchor's rule counts afresh, the main rules keep theirs.
    counted = {(r.get("anchor", ""), r["number"]): int(r.get("packets", 0)) for r in rules
               if not r.get("calls_anchor")}
    assert counted[("admin", 0)] > 0 and counted[("", 0)] > 0, counted
    assert fw.ctl("rules", "zero", "admin").stdout == "zeroed the counters of 1 rule\n"
    after = {(r.get("anchor", ""), r["number"]): int(r.get("packets", 0)) for r in fw.json("rules", "show")["rules"]
             if not r.get("calls_anchor")}
    assert after[("admin", 0)] == 0 and after[("", 0)] >= counted[("", 0)], after
    missing = fw.ctl("rules", "zero", "nowhere", check=False)
    assert missing.returncode == 1 and 'no anchor "nowhere"' in missing.stderr, missing

    # A bad file is refused whole with its place; the loaded rule stays.
    bad = tmp_path / "bad.conf"
    bad.write_text("pass to port 22\npass out on f1 to port 8081\n")
    refused = fw.ctl("anchors", "load", "admin", "-f", bad, check=False)
    assert refused.returncode == 1
    assert f"{bad}:2:1: the rule can never match: its direction is not that of anchor" in refused.stderr, \
        refused.stderr
    assert lan.connect(4, BLOCKED)["result"] == "ok"

    # From standard input, and kept across a reload of the rule file.
    piped = lan.fw.exec(str(fw.bin / "pairwallctl"), "-s", str(fw.socket), "anchors", "load", "admin", "-f", "-",
                        input="pass to port 8081\npass to port 8082\n", check=False)
    # Its second rule never decides: the rule file's quick block of that port comes first, and the
    # load says so (pfctl would load it without a word).
    assert piped.returncode == 0, piped
    assert piped.stdout == ("(standard input):2:1: warning: this rule never decides: 'block return-rst in quick on "
                            "f0 proto tcp from any to any port 8082' (" + str(fw.rules) + ":7), before it and "
                            "quick, matches every packet it does\n"
                            'anchor "admin": 2 rules\n'), piped
    fw.send_signal(signal.SIGHUP)
    wait_until(lambda: "SIGHUP: rules reloaded" in fw.log_text(), 5, what="SIGHUP reload in the log")
    assert fw.json("anchors")["anchors"][0]["rules"] == 2
    assert lan.connect(4, BLOCKED)["result"] == "ok"

    # Flushed: new connections stop, the one already passed keeps its state.
    assert fw.ctl("anchors", "flush", "admin").stdout == 'anchor "admin": 0 rules\n'
    assert fw.ctl("anchors", "show", "admin").stdout == 'anchor "admin": no rules\n'
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"
    assert held.echo()["echo"], "a connection passed by the anchor stopped when the anchor was flushed"

    undeclared = fw.ctl("anchors", "load", "nowhere", "-f", admin, check=False)
    assert undeclared.returncode == 1 and 'no anchor "nowhere" in ' in undeclared.stderr, undeclared.stderr
