"""A good reload swaps the rules atomically: new connections get the new verdicts at once, states
survive, and a connection opened before the reload keeps carrying data even though the new rules
would no longer let it start. SIGHUP loads the rule file the config names when it comes, with its
[engine] state_limit, and takes its [log] level."""

import signal

from daemon_net import ALLOWED, BLOCKED, RULES
from netns import wait_until

SWAPPED = RULES.replace("port 8080", "port 8081")


def test_reload_good_changes_verdicts_keeps_connections(lan, fw, tmp_path):
    held = lan.hold(4)
    assert held.opened.get("connected"), held.opened
    assert held.echo()["echo"]
    held6 = lan.hold(6)
    assert held6.opened.get("connected"), held6.opened
    states_before = int(fw.json("states", "--count")["matched"])

    new_rules = tmp_path / "swapped.conf"
    new_rules.write_text(SWAPPED)
    loaded = fw.json("rules", "load", new_rules)
    assert loaded["path"] == str(new_rules)
    assert int(loaded["states_kept"]) >= states_before >= 2

    assert lan.connect(4, BLOCKED)["result"] == "ok", "the newly allowed port is still blocked"
    assert lan.connect(4, ALLOWED, timeout=1.0)["result"] == "timeout", "the newly blocked port still passes"
    assert lan.connect(6, BLOCKED)["result"] == "ok"
    assert held.echo()["echo"], "a connection opened before the reload stopped carrying data"
    assert held6.echo()["echo"], "an IPv6 connection opened before the reload stopped carrying data"
    assert fw.json("status")["rules_file"] == str(new_rules)

    # SIGHUP reloads the configured file: back to the original verdicts, connections still alive.
    fw.send_signal(signal.SIGHUP)
    wait_until(lambda: "SIGHUP: rules reloaded" in fw.log_text(), 5, what="SIGHUP reload in the log")
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"
    assert held.echo()["echo"]
    assert held6.echo()["echo"]

    # The config now names another rule file: SIGHUP loads that one, as a restart would.
    fw.config.write_text(fw.config.read_text().replace(str(fw.rules), str(new_rules)))
    fw.send_signal(signal.SIGHUP)
    wait_until(lambda: fw.json("status")["rules_file"] == str(new_rules), 5, what="the config's new rule file loaded")
    assert lan.connect(4, BLOCKED)["result"] == "ok"
    assert held.echo()["echo"]

    # The config's [log] level is taken too: at "warn" a reload's own info lines are left out.
    config = fw.config.read_text()
    fw.config.write_text(config.replace('level = "debug"', 'level = "warn"'))
    fw.send_signal(signal.SIGHUP)
    wait_until(lambda: "SIGHUP: log level debug -> warning" in fw.log_text(), 5, what="the level taken")
    reloads = fw.log_text().count("SIGHUP: rules reloaded")
    rule_reloads = int(fw.json("status")["rule_reloads"])
    fw.send_signal(signal.SIGHUP)
    wait_until(lambda: int(fw.json("status")["rule_reloads"]) > rule_reloads, 5, what="a reload at warn")
    assert fw.log_text().count("SIGHUP: rules reloaded") == reloads
    fw.config.write_text(config)
    fw.send_signal(signal.SIGHUP)
    wait_until(lambda: "SIGHUP: log level warning -> debug" in fw.log_text(), 5, what="the level back")

    # [engine] state_limit, which overrides the file's `set limit states`, is taken with the rules;
    # one below the states held is refused with them, and the running limit stays.
    fw.config.write_text(config + "\n[engine]\nstate_limit = 777\n")
    cp = lan.fw.exec(str(fw.bin / "pairwalld"), "--reload", "-c", str(fw.config), check=False, timeout=30)
    assert cp.returncode == 0 and "warning" not in cp.stderr, (cp.stdout, cp.stderr)
    assert int(fw.json("settings")["state_limit"]) == 777
    assert int(fw.json("status")["states"]) >= 2
    fw.config.write_text(config + "\n[engine]\nstate_limit = 1\n")
    cp = lan.fw.exec(str(fw.bin / "pairwalld"), "--reload", "-c", str(fw.config), check=False, timeout=30)
    assert cp.returncode == 1, (cp.stdout, cp.stderr)
    assert "[engine] state_limit 1 is below the " in cp.stderr, cp.stderr
    assert int(fw.json("settings")["state_limit"]) == 777
    # The refused limit is not kept for the next load either.
    fw.ctl("rules", "load", fw.json("status")["rules_file"])
    assert int(fw.json("settings")["state_limit"]) == 777
    assert held.echo()["echo"]
