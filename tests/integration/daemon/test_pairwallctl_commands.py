"""pairwallctl against a running daemon: every command in human and --json form, the exit
statuses scripts rely on (0 ok, 1 refused or unreachable with the daemon's message, 2 usage), and
`health` for keepalived's track_script."""

import json

from daemon_net import ALLOWED


def test_pairwallctl_commands(lan, fw):
    assert lan.connect(4, ALLOWED)["result"] == "ok"

    human = fw.ctl("status").stdout
    assert "node      1 (pd2-fw)" in human
    assert f"rules     {fw.rules}: " in human
    assert "fail-closed" in human
    status = fw.json("status")
    assert status["node_id"] == 1 and status["rules_file"] == str(fw.rules)
    assert int(status["packets"]) > 0

    rules = fw.ctl("rules", "show").stdout
    assert rules.startswith("@0 block")
    assert "[ Evaluations:" in rules
    assert len(fw.json("rules", "show")["rules"]) == int(status["rule_count"])
    assert any(int(r.get("packets", 0)) > 0 for r in fw.json("rules", "show")["rules"])
    zeroed = fw.ctl("rules", "zero").stdout
    assert zeroed.strip() == f"zeroed the counters of {status['rule_count']} rules", zeroed
    after = fw.json("rules", "show")["rules"]
    assert all(int(r.get("packets", 0)) == 0 and int(r.get("evaluations", 0)) == 0 for r in after), after
    assert any(int(r.get("states_current", 0)) >= 1 for r in after), "zeroing dropped the states' count"

    states = fw.ctl("states").stdout
    assert "tcp 10.77.1.2:" in states and "-> 10.77.2.2:8080" in states, states
    assert fw.ctl("states", "--count").stdout.strip() == str(fw.json("states", "--count")["matched"])
    assert fw.ctl("states", "10.77.9.0/24", "--count").stdout.strip() == "0"
    bad = fw.ctl("states", "10.77.1.2/24", check=False)
    assert bad.returncode == 1 and "not an address or prefix" in bad.stderr

    stats = fw.ctl("stats").stdout
    assert "verdicts by reason" in stats and "rule_block" in stats
    assert {r["reason"] for r in fw.json("stats")["reasons"]} >= {"match", "state", "rule_block", "short"}

    settings = fw.ctl("settings").stdout
    assert "tcp.established" in settings and "states               hard limit" in settings
    timeouts = {t["name"]: int(t["seconds"]) for t in fw.json("settings")["timeouts"]}
    assert timeouts["tcp.established"] == 86400 and timeouts["udp.first"] == 60

    assert fw.ctl("sync", "status").stdout.strip() == "sync is not configured"
    assert fw.json("failover", "status")["enabled"] is False
    demote = fw.ctl("failover", "demote", "1", check=False)
    assert demote.returncode == 1 and "failover is not configured" in demote.stderr

    health = fw.ctl("health", check=False)
    assert health.returncode == 0 and health.stdout.strip() == "healthy"
    assert fw.json("health") == {"healthy": True, "reason": ""}

    flushed = fw.json("flush", "states")
    assert int(flushed["states"]) >= 1
    assert fw.json("states", "--count")["total"] == "0"

    usage = fw.ctl("frobnicate", check=False)
    assert usage.returncode == 2 and "unknown command" in usage.stderr
    assert fw.ctl("failover", "set-role", "boss", check=False).returncode == 2
    nowhere = lan.fw.exec(str(fw.bin / "pairwallctl"), "-s", "/nonexistent/control.sock", "status", check=False)
    assert nowhere.returncode == 1 and "is pairwalld running?" in nowhere.stderr
    # JSON output is one document a script can load.
    json.loads(fw.ctl("stats", "--json").stdout)
