"""The lab's own proof, runnable before pairwalld exists (--driver none: kernel forwarding, a scripted
takeover): traffic flows through the VIPs, a kill of the forwarder is followed by a takeover the drill
measures, plain routed TCP survives it, and `down` leaves nothing behind."""

import os

import pytest

from pairwall_lab import drill, drivers, netns, topology
from pairwall_lab.lab import Lab

from lab_support import ADVBASE_MS, PREFIX

PROBE_PERIOD_MS = 10  # a ping and a UDP probe every 10 ms (pairwall_lab/traffic.py)


@pytest.mark.parametrize("kill", ["master", "node"])
def test_scripted_failover_is_measured(make_lab, out_dir, kill):
    lab = make_lab("none")
    assert lab.driver.roles() == {"fwA": "master", "fwB": "backup"}
    rep = drill.run(lab, connections=40, duration=7.0, kill=kill, kill_after=2.0, restore_after=2.0,
                    out_dir=out_dir)
    delay_ms = drivers.takeover_delay_s(ADVBASE_MS, topology.NODE_BY_NAME["fwB"].advskew) * 1000
    assert rep["established"] == 40
    assert rep["path_before_kill"].keys() == {"fwA"}
    assert rep["path_at_end"].keys() == {"fwB"}
    # The takeover is scripted after `delay_ms`; the rest is ip(8), gratuitous ARP and one probe period.
    assert delay_ms <= rep["failover_ms"] <= delay_ms + 1000, rep
    # About one probe lost per 10 ms of outage, for ping and UDP alike.
    assert abs(rep["ping_lost"] - rep["outage_ms"] / 10) <= 10, rep
    assert abs(rep["udp_lost"] - rep["outage_ms"] / 10) <= 10, rep
    # Kernel forwarding keeps no state: every connection rides through the move, held up for as long
    # as the probes were, within their period at each end of the outage (a connection's last record
    # may come after the last probe reply before it, its first after the outage before the first
    # probe sent after the takeover).
    assert rep["survived"] == 40, rep["failed_connections"]
    assert rep["tcp_stall_ms_max"] >= rep["outage_ms"] - 2 * PROBE_PERIOD_MS, rep
    assert rep["server_sequence_violations"] == 0
    assert rep["roles_after"] == {"fwA": "backup", "fwB": "master"}
    assert any(c["node"] == "fwB" and c["to"] == "master" for c in rep["role_changes"])


def test_sync_cut_moves_nothing(make_lab, out_dir):
    lab = make_lab("none")
    rep = drill.run(lab, connections=10, duration=6.0, kill="sync", kill_after=2.0, restore_after=1.5,
                    out_dir=out_dir)
    assert rep["failover_ms"] is None
    assert rep["survived"] == 10
    assert rep["ping_lost"] == 0 and rep["udp_lost"] == 0, rep
    assert rep["path_at_end"].keys() == {"fwA"}


def test_down_cleans_up_after_a_crashed_run():
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces")
    lab = Lab(PREFIX, driver="none")
    try:
        lab.up(replace=True)
        # A crash: a process left running in a namespace and the run directory gone.
        stray = lab.spawn("fwA", "stray", ["sleep", "300"])
        for p in sorted(lab.run_dir.rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
    except BaseException:
        Lab(PREFIX).down()
        raise
    removed = Lab(PREFIX).down()
    assert stray.pid in removed["pids"]
    assert stray.wait(timeout=5) is not None
    assert not Lab(PREFIX).exists()
    assert not any(n.startswith(PREFIX) for n in netns.list_netns())
