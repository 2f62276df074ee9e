"""keepalived runs the election (VRRPv3), pairwalld filters and syncs: kill -9 of the master's
pairwalld fails keepalived's track script, the backup takes over and all 200 connections survive — the
states are already in the backup's table, so no commit step races the VIP (keepalived #2254)."""

import shutil

import pytest

from pairwall_lab import drill

from lab_support import assert_kept_every_session


def test_keepalived_mode_kill_master_keeps_tcp_sessions(make_lab, out_dir):
    if shutil.which("keepalived") is None:
        pytest.skip("keepalived is not installed (tools/install-deps.sh installs it)")
    lab = make_lab("keepalived")
    rep = drill.run(lab, connections=200, duration=12.0, kill="master", kill_after=2.5, restore_after=4.0,
                    out_dir=out_dir)
    assert_kept_every_session(rep, 200)
    assert rep["failover_ms"] is not None, rep
    # keepalived's own detection (track script interval 1 s, fall 1) dominates: bound it loosely.
    assert rep["failover_ms"] <= 2500, rep
    assert rep["roles_after"][rep["new_master"]] == "master"
