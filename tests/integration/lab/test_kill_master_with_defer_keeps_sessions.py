"""With `[sync] defer` on both nodes (`pairwall-lab up --defer`), kill -9 of the master's pairwalld under
long connections and 200 short ones a second: every long connection carries on, every short one opened
after the failover completes, and the node that took over held its new connections' first packets until
the restarted peer acknowledged their states (its defer counters say so)."""

from pairwall_lab import chaos, drill

from lab_support import assert_kept_every_session, assert_took_over_in_time


def count(value):
    return int(value) if value is not None else 0  # proto3 JSON prints 64-bit integers as strings


def test_kill_master_with_defer_keeps_sessions(make_lab, out_dir):
    lab = make_lab("builtin", defer=True)
    rep = drill.run(lab, connections=50, duration=10.0, kill="master", kill_after=2.5, restore_after=3.0,
                    out_dir=out_dir, churn_per_s=200)
    assert rep["defer"] is True
    assert_kept_every_session(rep, 50)
    assert_took_over_in_time(rep)
    churn = rep["churn"]
    assert churn["opened"] >= 1500, churn
    assert churn["failed_after_failover"] == 0, churn
    assert churn["opened_last_second"] >= 100, churn

    new_master = rep["new_master"]
    status = lab.driver.ctl(new_master, "sync", "status", "--json")
    assert status is not None, f"no sync status from {new_master}"
    defer = status.get("defer", {})
    assert defer.get("enabled") is True, status
    # It held packets once its peer was back, and let them go on the peer's acknowledgements.
    held = count(defer.get("held"))
    synced = count(defer.get("released", {}).get("synced"))
    assert held >= 100, defer
    assert synced > 0, defer
    assert chaos.stray_check(lab) == []
