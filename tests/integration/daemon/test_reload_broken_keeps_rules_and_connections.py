"""A rule file that does not compile is refused, by `pairwallctl rules load`, by SIGHUP and by
`pairwalld --reload` (the unit's ExecReload) alike: the error names file:line:column, the running
rules keep deciding as before, and a connection opened before the attempt keeps carrying data.
`pairwalld --reload` waits for the daemon's answer and says it in its exit status, and names the
settings a reload leaves as they ran."""

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

    # The same through `pairwalld --reload`, which waits for the outcome and exits 1 with it.
    def reload():
        return lan.fw.exec(str(fw.bin / "pairwalld"), "--reload", "-c", str(fw.config), check=False, timeout=30)

    cp = reload()
    assert cp.returncode == 1, (cp.stdout, cp.stderr)
    assert f"{fw.rules}:" in cp.stderr and "reload refused" in cp.stderr, cp.stderr
    assert int(fw.json("status")["rule_reload_failures"]) == 3
    assert held.echo()["echo"], "the open connection stopped after a refused --reload"

    # A config that no longer reads is refused by the daemon as a whole: the rules it ran stay
    # (SIGHUP; --reload refuses it before asking).
    good = fw.config.read_text()
    fw.rules.write_text(RULES)
    fw.config.write_text(good + "\n[nosuchsection]\n")
    refusals = fw.log_text().count("rules reload refused")
    fw.send_signal(signal.SIGHUP)
    wait_until(lambda: fw.log_text().count("rules reload refused") > refusals, 5, what="the broken config refused")
    assert "nosuchsection" in fw.log_text()
    assert int(fw.json("status")["rule_reload_failures"]) == 3  # the rules were never tried
    cp = reload()
    assert cp.returncode == 1 and "nosuchsection" in cp.stderr, (cp.stdout, cp.stderr)

    fw.config.write_text(good)
    cp = reload()
    assert cp.returncode == 0, (cp.stdout, cp.stderr)
    assert f"rules reloaded from {fw.rules}: {len(rules_before)} rules" in cp.stdout, cp.stdout
    assert "warning" not in cp.stderr, cp.stderr
    assert int(fw.json("status")["rule_reloads"]) >= 2
    assert held.echo()["echo"]
    assert lan.connect(4, ALLOWED)["result"] == "ok"

    # A setting that only a restart takes is named, in the answer and in the log, and the rules are
    # still taken: the reload does not pass for having changed it.
    assert 'name = "pd2-fw"' in good
    fw.config.write_text(good.replace('name = "pd2-fw"', 'name = "pd2-fw-renamed"'))
    cp = reload()
    untaken = (f'{fw.config}: [node] name: warning: changed ("pd2-fw" -> "pd2-fw-renamed"), which '
               "a reload does not take: the daemon keeps what it started with until it restarts")
    assert cp.returncode == 0 and untaken in cp.stderr, (cp.stdout, cp.stderr)
    wait_until(lambda: untaken in fw.log_text(), 5, what="the untaken setting in the log")
