"""keepalived mode: keepalived's vrrp_script asks `pairwallctl health` every interval, and nothing
else tells pairwalld that keepalived runs. The time since the last check is reported (failover
status, pairwallctl's text, /metrics), so that an operator sees a BACKUP whose keepalived has
stopped asking: a node no longer in the election at all."""

import json
import time

from failover_net import PAIRWALLCTL, run


def test_keepalived_mode_reports_when_health_was_last_asked(pair_factory):
    p = pair_factory(advbase_ms=100, ipv6=False, daemon="pairwalld", sync=False)
    p.start("a", driver="keepalived")
    p.wait_roles({"a": "backup"}, timeout=5)  # no VIPs here: keepalived's backup
    sock = str(p.socket_path("a"))

    def status():
        cp = run([PAIRWALLCTL, "-s", sock, "--json", "failover", "status"], check=False)
        assert cp.returncode == 0, cp.stderr
        return json.loads(cp.stdout)

    def age_metric():
        return next(v for (name, _), v in p.metrics("a").items() if name == "pairwall_failover_health_checked_seconds")

    assert int(status()["health_checked_ms_ago"]) == -1
    assert age_metric() == -1
    text = run([PAIRWALLCTL, "-s", sock, "failover", "status"], check=False).stdout
    assert "health check  last never" in text, text

    asked = run([PAIRWALLCTL, "-s", sock, "health"], check=False)
    assert asked.returncode == 0, asked.stdout + asked.stderr
    time.sleep(0.3)
    age = int(status()["health_checked_ms_ago"])
    assert 250 <= age < 5000, age
    assert 0.25 <= age_metric() < 5
    text = run([PAIRWALLCTL, "-s", sock, "failover", "status"], check=False).stdout
    assert "health check  last " in text and " ago" in text, text
