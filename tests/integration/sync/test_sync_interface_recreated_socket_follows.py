"""The sync link is deleted and made again under the same name (a VLAN or bond recreated by a
network restart): its index changes, and a socket bound to the old one, its group joined there,
would neither send nor hear until a restart. Each node opens its socket on the new interface, and
the states made after the link came back reach the peer."""

import time

from netns import wait_until
from sync_pair import SERVER, SYNC, TCP_PORT, describe_difference


def test_sync_interface_recreated_socket_follows(make_pair):
    pair = make_pair(metrics=True).start()
    fwa, fwb = pair.ns["fwA"], pair.ns["fwB"]
    fwa.exec("ip", "link", "del", "sync0")  # both ends of the veth go
    time.sleep(1.5)
    pair.topo.veth(fwa, "sync0", fwb, "sync0")
    fwa.address("sync0", f"{SYNC['fwA']}/30")
    fwb.address("sync0", f"{SYNC['fwB']}/30")

    for node in (pair.a, pair.b):
        wait_until(lambda: node.metrics().get("pairwall_sync_socket_reopens_total", 0) >= 1, 10,
                   what=f"{node.name} reopening its sync socket")
    result = pair.flows("client", "churn", SERVER, TCP_PORT, "--seconds", 3, "--rate", 100)[-1]
    assert result.get("tcp", 0) > 100 and result.get("failed", 1) == 0, result
    a, b, took = pair.wait_tables_agree(timeout=30)
    assert a.keys() == b.keys(), describe_difference(a, b)
    assert len(a) > 100, len(a)
    pair.wait_peers_up()
    assert "opened on it again" in pair.a.log_text()
