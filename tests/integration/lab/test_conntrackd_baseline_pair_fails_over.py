"""The baseline the benchmarks compare pairwall with is a working pair: kernel conntrack with iptables
stateful rules, conntrackd (FT-FW) over the sync link and keepalived calling conntrack-tools'
primary-backup.sh (lab driver `conntrackd`). Before the kill the backup's external cache already holds the
master's flows; after kill -9 of the master's software both VIPs move to the backup, whose keepalived made it
master, it commits the cache into its kernel table and forwards the traffic."""

import shutil

import pytest

from pairwall_lab import drill, netns, topology

from lab_support import failover_bound_ms

CONNECTIONS = 20


def kernel_tcp_states(lab, node):
    """Kernel conntrack entries of the drill's TCP connections on `node`."""
    cp = netns.nsexec(lab.ns[node], "conntrack", "-L", "-p", "tcp", "--dport", str(topology.TCP_PORT), check=False)
    return sum(1 for line in cp.stdout.splitlines() if line.startswith("tcp"))


def test_conntrackd_baseline_pair_fails_over(make_lab, out_dir):
    missing = [t for t in ("conntrackd", "keepalived", "conntrack", "iptables") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (tools/install-deps.sh installs them)")
    lab = make_lab("conntrackd", sync=False)
    rep = drill.run(lab, connections=CONNECTIONS, duration=9.0, kill="master", kill_after=2.5, restore_after=3.0,
                    out_dir=out_dir)
    old, new = rep["old_master"], rep["new_master"]
    assert rep["established"] == CONNECTIONS, rep
    # Replicated before the kill: the TCP connections, the UDP probe flow and the ping.
    assert rep["states_before_kill"][new] >= CONNECTIONS, rep["states_before_kill"]
    assert rep["roles_before"] == {old: "master", new: "backup"}, rep["roles_before"]
    # keepalived moved the group: both VIPs on the new master, which carried the probes to the end.
    assert topology.vip_holders(lab.prefix)[new] == [topology.VIP_IN, topology.VIP_OUT]
    assert rep["roles_after"][new] == "master", rep["roles_after"]
    assert rep["failover_ms"] is not None, rep
    # VRRPv3 master-down interval (3 adverts + the skew, as pairwall's election) plus the commit and slack.
    assert rep["failover_ms"] <= failover_bound_ms(lab.advbase_ms) + 200, rep
    assert rep["path_at_end"].keys() == {new}, rep["path_at_end"]
    # A TCP state is created by a SYN only: the connections' entries in the new master's kernel table come
    # from conntrackd's commit, and the connections carried data after the failover.
    assert kernel_tcp_states(lab, new) >= CONNECTIONS
    assert rep["survived"] > 0, rep["failed_connections"]
