"""Shared by the lab scenarios (a module name of its own: test folders each have a conftest)."""

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "lab"))

from pairwall_lab import topology  # noqa: E402

PREFIX = "pg-"
BIN_DIR = Path(os.environ.get("PAIRWALL_BIN_DIR", REPO / "build" / "bin"))
ADVBASE_MS = 200


def need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces")


def need_pairwalld():
    missing = [b for b in ("pairwalld", "pairwallctl") if not os.access(BIN_DIR / b, os.X_OK)]
    if missing:
        pytest.fail(f"{', '.join(str(BIN_DIR / b) for b in missing)} not built: this scenario runs the real "
                    "pair (build with `cmake --preset release && cmake --build --preset release`)")


def failover_bound_ms(advbase_ms=ADVBASE_MS, skew=topology.NODES[1].advskew):
    """The issue's bound: 3·advbase + skew + 100 ms (skew as time: advskew/256·advbase)."""
    return 3 * advbase_ms + skew * advbase_ms / 256.0 + 100


def assert_kept_every_session(rep, connections):
    assert rep["established"] == connections, rep
    assert rep["survived"] == connections, rep["failed_connections"]
    assert rep["reconnects"] == 0, rep["failed_connections"]
    assert rep["server_sequence_violations"] == 0


def assert_took_over_in_time(rep, advbase_ms=ADVBASE_MS):
    bound = failover_bound_ms(advbase_ms)
    assert rep["failover_ms"] is not None, f"no reply through {rep['new_master']}: {rep}"
    assert rep["failover_ms"] <= bound, f"failover {rep['failover_ms']} ms > {bound} ms"
    assert rep["path_at_end"].keys() == {rep["new_master"]}, rep["path_at_end"]
    assert rep["roles_after"][rep["new_master"]] == "master", rep["roles_after"]


def drilled_states(lab, node):
    """The states of the drill's TCP connections (to the server's TCP_PORT) on `node`, from
    `pairwallctl states --json`."""
    r = lab.driver.ctl(node, "states", "--json", "--limit", "10000", "port", str(topology.TCP_PORT), "proto", "tcp",
                       timeout=20)
    assert r is not None, f"pairwallctl states --json failed on {node}"
    return [s for s in r.get("states", []) if s.get("dst", {}).get("port") == topology.TCP_PORT]
