"""Ten kills of the master under load, alternating between the nodes: every connection survives all
of them, each takeover is within the bound, and no VIP or process is left astray."""

import pytest

from pairwall_lab import chaos, drill

from lab_support import failover_bound_ms


def run(make_lab, out_dir, kills, connections):
    lab = make_lab("builtin")
    rep = drill.run(lab, connections=connections, duration=2.0 + kills * 4.5 + 3.0, kill="master",
                    kill_after=2.0, restore_after=1.5, kill_every=4.5, repeat=kills, out_dir=out_dir)
    olds = [k["old_master"] for k in rep["kills"]]
    assert all(a != b for a, b in zip(olds, olds[1:])), f"kills did not alternate: {olds}"
    assert rep["survived"] == connections, rep["failed_connections"]
    assert rep["reconnects"] == 0
    for k in rep["kills"]:
        assert k["failover_ms"] is not None and k["failover_ms"] <= failover_bound_ms(), rep["kills"]
    assert chaos.stray_check(lab) == []


def test_repeated_failovers_lose_nothing(make_lab, out_dir):
    run(make_lab, out_dir, kills=10, connections=100)


@pytest.mark.soak
def test_repeated_failovers_lose_nothing_soak(make_lab, out_dir):
    run(make_lab, out_dir, kills=50, connections=200)
