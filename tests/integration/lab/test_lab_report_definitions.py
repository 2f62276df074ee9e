"""The drill report means what its help says: failover from the new master's TTL stamp, survival
needing data both ways after the failover without a reset, stalls and losses counted."""

from pairwall_lab import report

TAGS = {"fwA": 101, "fwB": 102}
T_KILL = 100.0


def conn(i, established=90.0, failures=(), last_rx=110.0, last_ack=110.0, rx_gap=0.02, ack_gap=0.02):
    return {"id": i, "established": established, "failures": [list(f) for f in failures], "reconnects": 0,
            "last_rx": last_rx, "last_ack": last_ack, "max_rx_gap": rx_gap, "max_ack_gap": ack_gap}


def probes(outage_from, outage_to, before="fwA", after="fwB", start=95.0, end=110.0, period=0.01):
    """Replies every period from `before` until the outage, none during it, from `after` afterwards."""
    out = []
    t = start
    while t < end:
        if t < outage_from:
            out.append([t, t + 0.0005, TAGS[before]])
        elif t < outage_to:
            out.append([t, None, None])
        else:
            out.append([t, t + 0.0005, TAGS[after]])
        t += period
    return out


def summary(conns, ping, udp=None, end=110.0):
    return {"connections": len(conns), "established": len(conns), "end": end, "conns": conns, "ping": ping,
            "udp": udp if udp is not None else [], "ping_enabled": True}


def test_failover_is_first_reply_through_the_new_master():
    s = summary([conn(0)], probes(T_KILL, T_KILL + 0.5))
    r = report.analyse(s, T_KILL, TAGS, "fwA", "fwB")
    assert 500 <= r["failover_ms"] <= 511
    assert r["ping_lost"] == 50
    assert r["path_before_kill"] == {"fwA": 100}
    assert "fwB" in r["path_at_end"] and "fwA" not in r["path_at_end"]


def test_replies_through_the_old_master_do_not_count_as_failover():
    # Traffic keeps flowing through the old master (fail-open after its daemon died) for 2 s, then moves.
    ping = probes(T_KILL + 2.0, T_KILL + 2.0)
    ping = [[s, r, TAGS["fwA"] if s < T_KILL + 2.0 else TAGS["fwB"]] for s, r, _ in ping]
    r = report.analyse(summary([conn(0)], ping), T_KILL, TAGS, "fwA", "fwB")
    assert r["failover_ms"] >= 2000
    assert r["outage_ms"] < 20


def test_no_takeover_reports_null_failover():
    s = summary([conn(0)], probes(T_KILL, T_KILL + 0.3, after="fwA"))
    r = report.analyse(s, T_KILL, TAGS, "fwA", "fwB")
    assert r["failover_ms"] is None
    assert 290 <= r["outage_ms"] <= 320


def test_survival_needs_both_directions_after_failover_and_no_reset():
    conns = [conn(0),
             conn(1, failures=[(100.2, "ConnectionResetError")]),
             conn(2, last_ack=100.1),  # the server stopped acknowledging before the failover
             conn(3, last_rx=100.1),
             conn(4, established=100.05)]  # opened after the kill: not a survivor of it
    r = report.analyse(summary(conns, probes(T_KILL, T_KILL + 0.5)), T_KILL, TAGS, "fwA", "fwB")
    assert r["survived"] == 1
    assert sorted(f["id"] for f in r["failed_connections"]) == [1, 2, 3, 4]


def test_stall_includes_a_stall_still_running_at_the_end():
    conns = [conn(0, rx_gap=0.7), conn(1, last_rx=108.0)]
    r = report.analyse(summary(conns, probes(T_KILL, T_KILL + 0.5)), T_KILL, TAGS, "fwA", "fwB")
    assert r["tcp_stall_ms_max"] == 2000.0


def test_human_summary_names_the_figures():
    r = report.analyse(summary([conn(0)], probes(T_KILL, T_KILL + 0.5)), T_KILL, TAGS, "fwA", "fwB",
                       role_changes=[{"t_ms": 480.0, "node": "fwB", "from": "backup", "to": "master"}])
    text = report.human(r)
    assert "1/1 connections survived" in text and "fwB→master at +480 ms" in text


def test_short_connections_counted_by_when_they_opened():
    # [start, end, result]: one failed in the second before the kill, one failed 1.5 s before it (not
    # counted there), one failed after the failover, the rest completed.
    churn = [[98.5, 98.6, "TimeoutError"], [99.2, 99.3, "ok"], [99.95, 103.0, "TimeoutError"],
             [100.2, 100.3, "ok"], [100.8, 101.0, "ConnectionResetError"], [101.0, 101.1, "ok"]]
    s = summary([conn(0)], probes(T_KILL, T_KILL + 0.5))
    s["churn"] = churn
    r = report.analyse(s, T_KILL, TAGS, "fwA", "fwB")
    assert r["churn"] == {"opened": 6, "ok": 3, "failed_after_failover": 1, "opened_last_second": 2,
                          "failed_opened_last_second": 1}
    assert "1/2 opened in the second before the kill failed" in report.human(r)


def test_dual_stack_reports_the_worse_family():
    # IPv4 moves in 0.2 s, IPv6 in 0.8 s: the report's failover and outage are IPv6's, and a connection of
    # each family counts for its own.
    s = summary([conn(0), dict(conn(1), family="inet6")], probes(T_KILL, T_KILL + 0.2))
    s["conns"][0]["family"] = "inet"
    s.update({"ping6": probes(T_KILL, T_KILL + 0.8), "udp6": []})
    r = report.analyse(s, T_KILL, TAGS, "fwA", "fwB")
    assert 800 <= r["failover_ms"] <= 811
    assert 800 <= r["outage_ms"] <= 811
    assert 200 <= r["failover_ms_by_family"]["inet"] <= 211
    assert 800 <= r["failover_ms_by_family"]["inet6"] <= 811
    assert r["survived_by_family"] == {"inet": 1, "inet6": 1}
    assert r["connections_by_family"] == {"inet": 1, "inet6": 1}
    assert r["ping_lost"] == 20 and r["ping6_lost"] == 80
    assert "IPv6:" in report.human(dict(r, roles_before={}, roles_after={}))
    # An IPv6 family that never reached the new master leaves no failover figure, whatever IPv4 did.
    s["ping6"] = probes(T_KILL, T_KILL + 0.8, after="fwA")
    assert report.analyse(s, T_KILL, TAGS, "fwA", "fwB")["failover_ms"] is None


def test_single_stack_report_has_no_family_fields():
    r = report.analyse(summary([conn(0)], probes(T_KILL, T_KILL + 0.5)), T_KILL, TAGS, "fwA", "fwB")
    assert "ping6_sent" not in r and "survived_by_family" not in r
