"""A master's advertisements leave on time while its control loop is held: here by a rule set of
60,000 rules, compiled on that loop for well over the backup's master-down interval (three advbase
intervals and the skew). Had the advertisements waited for the loop, the backup would have taken
the group over, and both nodes held the VIPs until the compile ended."""

import time

from failover_net import NODES, PAIRWALLCTL, run

ADVBASE_MS = 200
SKEW_B = 100
RULES = 60_000


def big_rule_set(path):
    """Rules that match none of the test's traffic, ahead of the `pass all` that decides it."""
    lines = ["pass all"]
    for i in range(RULES):
        lines.append(f"block in quick proto tcp from 198.18.{i // 250}.{i % 250 + 1} "
                     f"to 198.19.{i % 200}.{i // 200 % 250 + 1} port {1024 + i % 60000}")
    path.write_text("\n".join(lines) + "\n")


def test_master_keeps_advertising_while_its_control_loop_compiles_a_large_rule_set(pair_factory):
    p = pair_factory(advbase_ms=ADVBASE_MS, skews=(0, SKEW_B), ipv6=False, daemon="pairwalld", sync=False)
    p.start("a")
    p.wait_for(lambda: p.role("a") == "master", 10, what="a master")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=5)
    accepted_before = p.status("b")["counters"]["adverts_accepted"]

    rules = p.dir / "big.rules"
    big_rule_set(rules)
    started = time.monotonic()
    loaded = run([PAIRWALLCTL, "-s", str(p.socket_path("a")), "rules", "load", str(rules)], check=False, timeout=120)
    held_s = time.monotonic() - started
    assert loaded.returncode == 0, loaded.stderr
    # The load must hold a's loop for longer than b waits for a master, or this test shows nothing.
    master_down_s = 3 * ADVBASE_MS / 1000 + SKEW_B / 256 * ADVBASE_MS / 1000
    assert held_s > 2 * master_down_s, f"the load took {held_s:.2f} s: too short to starve the election"

    assert (p.role("a"), p.role("b")) == ("master", "backup")
    assert p.last_transition("b", "master") is None, p.log("b")
    assert p.status("a")["master_node_id"] == NODES["a"]["id"]
    # b heard a all along: about one advertisement an advbase while the loop was held.
    heard = p.status("b")["counters"]["adverts_accepted"] - accepted_before
    assert heard >= held_s * 1000 / ADVBASE_MS * 0.7, f"{heard} advertisements in {held_s:.2f} s"
