"""A rule file that does not compile is refused, by `pairwallctl rules load` and by SIGHUP alike:
the error names file:line:column, the running rules keep deciding as before, and a connection
opened before the attempt keeps carrying data."""

import signal

from daemon_net import ALLOWED, BLOCKED, RULES
from netns import wait_until


def test_reload_broken_keeps_rules_and_connections(lan, fw, tmp_path):
    held = lan.hold(4)
    assert held.opened.get("connected"), held.opened
    assert held.echo()["echo"]
    rules_before = fw.json("rules", "show")["rules"]

    broken = tmp_path / "broken.conf"
    broken.write_text("block all\npass in proto tcp to port 80 80\n")
    cp = fw.ctl("rules", "load", broken, check=False)
    assert cp.returncode == 1
    assert f"{broken}:2:" in cp.stderr, cp.stderr

    assert [r["text"] for r in fw.json("rules", "show")["rules"]] == [r["text"] for r in rules_before]
    assert held.echo()["echo"], "the open connection stopped after a refused reload"
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"

    # The same through SIGHUP: break the configured rule file itself.
    fw.rules.write_text(RULES + "pass out on $nosuchmacro all\n")
    fw.send_signal(signal.SIGHUP)
    wait_until(lambda: "rules reload refused" in fw.log_text(), 5, what="SIGHUP refusal in the log")
    status = fw.json("status")
    assert int(status["rule_reload_failures"]) == 2
    assert int(status["rule_count"]) == len(rules_before)
    assert held.echo()["echo"], "the open connection stopped after a refused SIGHUP reload"
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert fw.proc.poll() is None
