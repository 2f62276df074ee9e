"""With both firewalls redirecting an address beyond them to the server (`pairwall-lab up --rdr`:
`rdr on in0 inet to 10.10.3.10 -> 10.10.2.10`, which neither firewall routes: only a decision before
routing gets the packets there), kill -9 of the master's pairwalld under long TCP connections, a UDP
flow and pings, all dialled to 10.10.3.10: every connection carries on through the node that took
over, which holds each state with both its keys from the sync and queues the address before routing
as the dead master did. The server saw the client's own address on every connection; the new
master's states show the address dialled and the server it went to."""

import json

from pairwall_lab import chaos, drill, topology

from lab_support import assert_kept_every_session, assert_took_over_in_time

CONNECTIONS = 60


def redirected_states(lab, node):
    """`node`'s states of the drill's TCP connections, the ones dialled to the service address."""
    r = lab.driver.ctl(node, "states", "--json", "--limit", "10000", "proto", "tcp", timeout=20)
    assert r is not None, f"pairwallctl states --json failed on {node}"
    return [s for s in r.get("states", [])
            if s.get("dst") == {"address": topology.SERVICE_ADDR, "port": topology.TCP_PORT}]


def test_kill_master_keeps_rdr_sessions(make_lab, out_dir):
    lab = make_lab("builtin", rdr=True)
    backup = topology.other(lab.master())
    rep = drill.run(lab, connections=CONNECTIONS, duration=9.0, kill="master", kill_after=3.0, restore_after=3.0,
                    out_dir=out_dir)
    assert rep["rdr"] is True
    assert_kept_every_session(rep, CONNECTIONS)
    assert_took_over_in_time(rep)
    assert rep["new_master"] == backup, rep
    assert rep["udp_lost"] < rep["udp_sent"], rep

    server = json.loads((out_dir / "server.json").read_text())
    peers = {c["peer"][0] for c in server["conns"]}
    assert peers == {topology.CLIENT_ADDR}, f"the server saw {peers}, want the client itself"
    states = redirected_states(lab, backup)
    assert len(states) >= CONNECTIONS, (len(states), states[:3])
    wrong = [s for s in states if s.get("wire_dst") != {"address": topology.SERVER_ADDR, "port": topology.TCP_PORT}]
    assert not wrong, wrong[:3]
    assert sum(1 for s in states if s.get("from_peer")) >= CONNECTIONS, states[:3]
    assert chaos.stray_check(lab) == []
