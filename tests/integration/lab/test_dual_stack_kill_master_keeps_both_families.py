"""A dual-stack pair (`pairwall-lab up --ipv6`): kill -9 of the master's pairwalld under IPv4 and IPv6
traffic at once. The backup takes both families' VIPs, announces them (gratuitous ARP, unsolicited
neighbour advertisements), and every connection of each family carries on both ways from the states
sync gave it; probes of both families come back through the new master."""

from pairwall_lab import chaos, drill

from lab_support import assert_kept_every_session, assert_took_over_in_time, failover_bound_ms


def test_dual_stack_kill_master_keeps_both_families(make_lab, out_dir):
    lab = make_lab("builtin", ipv6=True)
    rep = drill.run(lab, connections=100, duration=9.0, kill="master", kill_after=2.5, restore_after=3.0,
                    out_dir=out_dir)
    assert_kept_every_session(rep, 100)
    assert rep["connections_by_family"] == {"inet": 50, "inet6": 50}, rep
    assert rep["survived_by_family"] == {"inet": 50, "inet6": 50}, rep
    # failover_ms is the later family's: each must reach the client through the new master in time.
    assert_took_over_in_time(rep)
    assert all(ms is not None and ms <= failover_bound_ms() for ms in rep["failover_ms_by_family"].values()), rep
    # IPv6 probes flowed before and after the takeover: those lost are the takeover's, not the whole run's.
    assert rep["ping6_lost"] < rep["ping6_sent"] / 4 and rep["udp6_lost"] < rep["udp6_sent"] / 4, rep
    assert chaos.stray_check(lab) == []
