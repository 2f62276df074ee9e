"""keepalived mode: keepalived (VRRPv3, advert_int 0.1) runs the election with the shipped
packaging/keepalived/keepalived.conf and pairwall-notify.sh, in both namespaces; the failover
service only follows the role it is told and reports its health. Killing the master — its pairwall
process, or keepalived itself — moves the group to the other node, and the other node's service
learns it is master through the notify script (run as keepalived's vrrp_notify_fifo_script, so
that role changes arrive in order)."""

import time

import pytest

from failover_net import CLIENTS, LANS, monotonic_us, probe
from failover_keepalived import demotion_file, kill_keepalived, start_keepalived, wait_settled


@pytest.fixture
def kpair(pair_factory):
    p = pair_factory(advbase_ms=100)
    for node in ("a", "b"):
        p.start(node, driver="keepalived")
    for node in ("a", "b"):
        start_keepalived(p, node)
    holder, other = wait_settled(p)
    return p, holder, other


def caches_at(p, node):
    macs = {lan: p.mac(node, lan) for lan in LANS}
    return all(p.neighbour_mac(c, v) == macs[lan] for lan, c in CLIENTS.items() for v in p.vips(lan))


def test_keepalived_kill_master_keepalived(kpair, report):
    p, master, backup = kpair
    def resolved_at_master():
        # keepalived adds the IPv6 VIPs with duplicate address detection: a probe sent while they
        # are tentative gets no answer, so probe again until every client has resolved them.
        if caches_at(p, master):
            return True
        for lan, client in CLIENTS.items():
            for vip in p.vips(lan):
                probe(p, client, vip)
        return False

    p.wait_for(resolved_at_master, 10, step=0.3, what="clients cached at the master")

    t_kill = kill_keepalived(p, master)
    p.wait_for(lambda: p.holds_vips(backup), 5, step=0.005, what="backup's keepalived taking the VIPs")
    vips_ms = (monotonic_us() - t_kill) / 1000
    p.wait_roles({backup: "master"}, timeout=5)  # told by the notify script
    role_ms = (p.last_transition(backup, "master")["at_us"] - t_kill) / 1000
    p.wait_for(lambda: caches_at(p, backup), 5, what="clients cached at the new master")
    report(test="keepalived_kill_keepalived", advert_int_ms=100, vips_moved_ms_upper=round(vips_ms, 1),
           pairwall_role_ms=round(role_ms, 1))
    assert p.last_transition(backup, "master")["cause"] == "external driver"
    assert role_ms > 0  # this takeover's notification, not an earlier one
    assert vips_ms <= 3 * 100 + 100 + 100  # 3 * advert_int + skew (priority 100: ~0.06 s) + slack


def tracked(p, node):
    """What the node's notify script keeps in keepalived's track file: pairwalld's demotion."""
    return demotion_file(p, node).read_text().strip()


def test_keepalived_kill_master_pairwall(kpair, report):
    p, master, backup = kpair
    assert tracked(p, master) == "0" and tracked(p, backup) == "0"
    t_kill = monotonic_us()
    p.kill(master)  # kill -9 of the pairwall process
    p.wait_for(lambda: p.holds_vips(backup) and not p.holds_any_vip(master), 6, step=0.01,
               what="the group moving to the backup")
    moved_ms = (monotonic_us() - t_kill) / 1000
    p.wait_roles({backup: "master"}, timeout=5)
    report(test="keepalived_kill_pairwall", advert_int_ms=100, group_moved_ms_upper=round(moved_ms, 1))
    if p.daemon != "pairwalld":
        # The service alone keeps no track file: the health script (interval 1 s, fall 1) notices
        # within about a second, then one advertisement.
        assert moved_ms <= 2500
        return
    # The track file says "not answering" within a tick (100 ms): FAULT, a priority-0 advertisement,
    # the backup's takeover. The health script would notice up to a second later.
    assert tracked(p, master) == "254"
    assert moved_ms <= 1000


def test_keepalived_demoted_node_hands_over(kpair):
    p, master, backup = kpair
    ok, _ = p.ctl(master, "demote 10")
    assert ok
    assert not p.ctl(master, "health")[0]
    p.wait_for(lambda: p.holds_vips(backup) and not p.holds_any_vip(master), 6, what="handover on demotion")
    p.wait_roles({backup: "master", master: "backup"}, timeout=5)
    if p.daemon == "pairwalld":  # the service alone keeps no track file (failover_keepalived.py)
        p.wait_for(lambda: tracked(p, master) == "10", 2, what="the demotion in the track file")
    # Healthy again, equal priority: it stays backup (keepalived's "preempt = false" in this config).
    assert p.ctl(master, "promote 10")[0]
    assert p.ctl(master, "health")[0]
    if p.daemon == "pairwalld":
        p.wait_for(lambda: tracked(p, master) == "0", 2, what="the promotion in the track file")
    time.sleep(3)
    assert p.holds_vips(backup) and not p.holds_any_vip(master)
