"""With both firewalls NATing the inside to the outside VIP (`pairwall-lab up --nat`:
`nat on out0 inet from 10.10.1.0/24 to any -> 10.10.2.1`), kill -9 of the master's pairwalld: every NATed
TCP connection carries on both ways without reset or reconnect, because the backup holds every state with
both its keys (stack: client -> server, wire: VIP:port -> server) and, once master, translates each
connection to the same VIP and port. The server sees only the VIP, with source ports from pf's default nat
range, before and after the failover; the UDP echo flow keeps its one translated port too."""

import json
import threading
import time

from pairwall_lab import chaos, drill, netns, topology

from lab_support import assert_kept_every_session, assert_took_over_in_time

CONNECTIONS = 40
DURATION = 11.0
KILL_AFTER = 2.5
RESTORE_AFTER = 3.0
NAT_PORTS = range(50001, 65536)  # pf's default nat source ports, 50001:65535
# When the state tables are listed, in seconds: after the connections are up (the master translates, the
# backup holds the synced states), after the kill (the new master alone, before the old one restarts), and
# near the end (the restarted node has its bulk resync).
SNAP_BEFORE_KILL = 1.0
SNAP_AFTER_KILL = 1.5
SNAP_LATE = DURATION - 2.0


class BackgroundDrill(threading.Thread):
    """drill.run in a thread, so that the tables can be listed while the traffic runs; its progress
    messages mark when the connections are up and when the master was killed."""

    def __init__(self, lab, out_dir):
        super().__init__(daemon=True)
        self.lab, self.out_dir = lab, out_dir
        self.up, self.killed, self.done = threading.Event(), threading.Event(), threading.Event()
        self.t_up = None
        self.report, self.error = None, None

    def progress(self, msg):
        if "connections up through" in msg:
            self.t_up = time.monotonic()
            self.up.set()
        elif msg.startswith("killed:"):
            self.killed.set()

    def run(self):
        try:
            self.report = drill.run(self.lab, connections=CONNECTIONS, duration=DURATION, kill="master",
                                    kill_after=KILL_AFTER, restore_after=RESTORE_AFTER, out_dir=self.out_dir,
                                    progress=self.progress)
        except BaseException as e:  # re-raised by the test
            self.error = e
        finally:
            self.done.set()
            self.up.set()
            self.killed.set()

    def sleep_until(self, t_from_up):
        """Until `t_from_up` seconds after the connections came up, or until the drill ends; True if it
        still runs."""
        self.done.wait(max(0.0, self.t_up + t_from_up - time.monotonic()))
        return not self.done.is_set()


def nat_table(lab, node):
    """{stack key: state} for the drill's TCP connections (client -> server:TCP_PORT) on `node`, from
    `pairwallctl states --json`; a stack key is (src address, src port, dst address, dst port)."""
    r = lab.driver.ctl(node, "states", "--json", "--limit", "10000", "port", str(topology.TCP_PORT), "proto",
                       "tcp", timeout=20)
    assert r is not None, f"pairwallctl states --json failed on {node}"
    table = {}
    for s in r.get("states", []):
        src, dst = s.get("src", {}), s.get("dst", {})
        if s.get("proto") != 6 or dst.get("port") != topology.TCP_PORT:
            continue
        table[(src.get("address"), src.get("port"), dst.get("address"), dst.get("port"))] = s
    return table


def wire_of(state):
    """The wire key (src address, src port, dst address, dst port), or None when the state does not
    translate."""
    ws, wd = state.get("wire_src"), state.get("wire_dst")
    if not ws or not wd:
        return None
    return (ws.get("address"), ws.get("port"), wd.get("address"), wd.get("port"))


def mapping(table):
    return {stack: wire_of(s) for stack, s in table.items()}


def assert_translates_every_connection(node, table, when):
    """Every connection's stack key is the client's, its wire key the VIP with a port of the nat range,
    one port per connection."""
    assert len(table) == CONNECTIONS, f"{node} {when}: {len(table)} TCP states, want {CONNECTIONS}: {table}"
    ports = set()
    for stack, s in table.items():
        wire = wire_of(s)
        assert stack[0] == topology.CLIENT_ADDR and stack[2:] == (topology.SERVER_ADDR, topology.TCP_PORT), (
            f"{node} {when}: stack key {stack} is not the client's connection: {s}")
        assert wire is not None, f"{node} {when}: state {stack} is listed without its wire key: {s}"
        assert wire[0] == topology.VIP_OUT and wire[1] in NAT_PORTS, (
            f"{node} {when}: {stack} leaves as {wire[:2]}, want {topology.VIP_OUT} port 50001-65535: {s}")
        assert wire[2:] == stack[2:], f"{node} {when}: nat changed the destination of {stack}: {s}"
        ports.add(wire[1])
    assert len(ports) == CONNECTIONS, f"{node} {when}: {CONNECTIONS} connections share {len(ports)} nat ports"


# Kernel counters of the server that tell why translated packets were not taken (nstat names).
SERVER_COUNTERS = ("TcpInSegs", "TcpInErrs", "TcpInCsumErrors", "TcpOutRsts", "TcpExtTCPAbortOnData",
                   "UdpInDatagrams", "UdpInCsumErrors", "UdpNoPorts")


def diagnosis(lab, tables):
    """What to read when a check fails: each node's role and non-zero reason counters, the tables
    listed during the drill, the server kernel's TCP/UDP error counters."""
    out = {"roles": lab.driver.roles()}
    for n in topology.NODES:
        st = lab.driver.ctl(n.name, "stats", "--json", timeout=20)
        out[f"reasons_{n.name}"] = "unreadable" if st is None else {
            r["reason"]: r["count"] for r in st.get("reasons", []) if str(r.get("count", "0")) != "0"}
    cp = netns.nsexec(lab.ns["server"], "nstat", "-asz", *SERVER_COUNTERS, check=False)
    out["server_kernel"] = {f[0]: int(f[1]) for f in (line.split() for line in cp.stdout.splitlines())
                            if len(f) >= 2 and f[1].isdigit()}
    out["tables"] = {k: {" ".join(map(str, s)): wire_of(v) for s, v in t.items()} for k, t in tables.items()}
    return out


def test_kill_master_keeps_nat_sessions(make_lab, out_dir):
    lab = make_lab("builtin", nat=True)
    master = lab.master()
    backup = topology.other(master)
    run = BackgroundDrill(lab, out_dir)
    run.start()
    tables = {}
    assert run.up.wait(90), "the drill's connections did not come up"
    if run.t_up is not None and run.sleep_until(SNAP_BEFORE_KILL):
        tables["master_before"] = nat_table(lab, master)
        tables["backup_before"] = nat_table(lab, backup)
    assert run.killed.wait(60), "the drill did not kill the master"
    if run.t_up is not None and run.sleep_until(KILL_AFTER + SNAP_AFTER_KILL):
        # The old master restarts RESTORE_AFTER after the kill: until then the new master is alone.
        assert not lab.process_alive(master, "pairwalld"), f"{master}'s pairwalld is back too early"
        tables["new_master_after"] = nat_table(lab, backup)
    if run.t_up is not None and run.sleep_until(SNAP_LATE):
        tables["new_master_late"] = nat_table(lab, backup)
        tables["restarted_late"] = nat_table(lab, master)
    run.join(DURATION + 90)
    assert not run.is_alive(), "the drill did not finish"
    if run.error is not None:
        raise run.error
    diag = diagnosis(lab, tables)
    (out_dir / "nat-diagnosis.json").write_text(json.dumps(diag, indent=1, default=str))
    server = json.loads((out_dir / "server.json").read_text())
    client = json.loads((out_dir / "client.json").read_text())
    try:
        check(run.report, tables, server, client, master, backup)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{json.dumps(diag, indent=1, default=str)}") from None
    assert chaos.stray_check(lab) == []
    rep = run.report
    print(f"NAT drill: {rep['survived']}/{CONNECTIONS} survived, failover {rep['failover_ms']} ms, "
          f"stall max {rep['tcp_stall_ms_max']} ms, ping lost {rep['ping_lost']}, udp lost {rep['udp_lost']}, "
          f"states {rep['states_a']}/{rep['states_b']}")


def check(rep, tables, server, client, master, backup):
    # The product promise: every connection kept flowing both ways, the backup took over in time.
    assert_kept_every_session(rep, CONNECTIONS)
    assert_took_over_in_time(rep)
    assert rep["new_master"] == backup, rep
    assert rep["pair_settled"], "the restarted node did not come back as backup with its table"

    # The tables: the master translates every connection to the VIP; the backup holds the same two keys
    # (synced); after the kill the new master lists them alone and forwards through them both ways; the
    # restarted node gets them again from its bulk resync.
    assert_translates_every_connection(master, tables["master_before"], "before the kill")
    before = mapping(tables["master_before"])
    assert all(s.get("from_peer") for s in tables["backup_before"].values()), "backup states not from the peer"
    for name, node in (("backup_before", backup), ("new_master_after", backup), ("new_master_late", backup),
                       ("restarted_late", master)):
        assert mapping(tables[name]) == before, f"{name} ({node}) does not hold the master's two keys"
    after, late = tables["new_master_after"], tables["new_master_late"]
    grew = [k for k, s in late.items() if all(int(s[f]) > int(after[k][f]) for f in ("packets_out", "packets_in"))]
    assert len(grew) == CONNECTIONS, (f"{backup}, master after the kill, forwarded both ways through "
                                      f"{len(grew)}/{CONNECTIONS} translated states")

    # The server's side: it accepted exactly the connections, each from the VIP:port of its state, and
    # each kept receiving records on that same socket after the takeover.
    t_takeover = client["start"] + rep["t_kill_s"] + rep["failover_ms"] / 1000.0
    wires = {w[:2] for w in before.values()}
    peers = [tuple(c["peer"]) for c in server["conns"]]
    assert len(peers) == CONNECTIONS, f"the server accepted {len(peers)} connections, want {CONNECTIONS}: {peers}"
    assert set(peers) == wires, f"the server saw {sorted(set(peers) - wires)} besides the states' wire keys"
    stopped = [c for c in server["conns"] if c["last_rx"] is None or c["last_rx"] <= t_takeover
               or (c["closed"] is not None and c["closed"] < client["end"])]
    assert not stopped, f"connections whose server side stopped receiving or closed after the takeover: {stopped}"
    udp = server["udp_peers"]
    assert len(udp) == 1 and udp[0]["peer"][0] == topology.VIP_OUT and udp[0]["peer"][1] in NAT_PORTS, (
        f"the UDP echo flow reached the server as {[u['peer'] for u in udp]}, want one VIP:port")
    assert udp[0]["last"] > t_takeover, f"no UDP probe reached the server after the takeover: {udp}"
