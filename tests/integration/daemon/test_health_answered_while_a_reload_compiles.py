"""`pairwallctl health` is answered at once while a reload holds the control loop (60,000 rules,
compiled for seconds). keepalived's vrrp_script gives up after `timeout 1`: a health check that
waited for the compile would hand the group to the backup at every large reload or table change.
The reload itself still runs on the control loop and succeeds."""

import time

from daemon_net import RULES

EXTRA_RULES = 60_000
HEALTH_LIMIT_S = 0.5  # keepalived.conf's `timeout 1`, with room for `ip netns exec`


def big_rule_set(path):
    """The test's rules, then rules that match none of its traffic."""
    lines = [RULES]
    for i in range(EXTRA_RULES):
        lines.append(f"block in quick proto tcp from 198.18.{i // 250}.{i % 250 + 1} "
                     f"to 198.19.{i % 200}.{i // 200 % 250 + 1} port {1024 + i % 60000}")
    path.write_text("\n".join(lines) + "\n")


def test_health_is_answered_while_a_large_reload_compiles(lan, fw, tmp_path):
    rules = tmp_path / "big.conf"
    big_rule_set(rules)
    rules_before = int(fw.json("status")["rule_count"])

    load = lan.topo.spawn(lan.fw, [str(fw.bin / "pairwallctl"), "-s", str(fw.socket), "rules", "load", str(rules)],
                          log=tmp_path / "load.log")
    answered_during_load = 0
    slowest = 0.0
    deadline = time.monotonic() + 120
    while load.poll() is None and time.monotonic() < deadline:
        began = time.monotonic()
        cp = fw.ctl("health", check=False, timeout=10)
        took = time.monotonic() - began
        assert cp.returncode == 0, f"health: {cp.stdout}{cp.stderr}"
        assert cp.stdout.strip() == "healthy"
        slowest = max(slowest, took)
        if load.poll() is None:
            answered_during_load += 1
        time.sleep(0.05)
    assert load.wait(timeout=max(1, deadline - time.monotonic())) == 0, (tmp_path / "load.log").read_text()

    # The load must hold the loop long enough for several checks, or this test shows nothing.
    assert answered_during_load >= 3, f"only {answered_during_load} health checks while the load ran"
    assert slowest < HEALTH_LIMIT_S, f"a health check took {slowest:.2f} s while the rules compiled"
    assert int(fw.json("status")["rule_count"]) >= rules_before + EXTRA_RULES
