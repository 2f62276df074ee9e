"""The sync link moved by a reload, as `ifconfig pfsync0 syncpeer Y` moves a running pfsync: no
restart, which would hand the group over and drop the hooks for a moment.

The pair's sync link gets new addresses and another port (and its flush interval, bulk timeout,
pending limit and resend window others, which the reload takes as well). Node A takes them first, so that for a
while the nodes' links differ and what A sends meanwhile is lost; once B takes them too, those
connections' states reach B with the ones opened after. A move to an address the node does not
have is refused in the reload's answer, and the running link keeps syncing."""

from netns import wait_until
from sync_pair import SYNC, SYNC_PORT, TCP_PORT
from test_defer_holds_first_packets_until_peer_acks import connect

MOVED = {"fwA": "10.88.9.5", "fwB": "10.88.9.6"}
MOVED_PORT = SYNC_PORT + 1
UNTAKEN = "which a reload does not take"
REFUSED = "[sync] link not moved"


def move(node, own, peer, port, extra=""):
    """Rewrites node's [sync] address, peer and port (and appends `extra` to the section) and reloads
    it: the reload's answer."""
    text = node.config.read_text()
    lines = [l for l in text.splitlines() if not l.startswith(("address = ", "peer = ", "port = "))]
    lines.append(f'address = "{own}"\npeer = "{peer}"\nport = {port}\n{extra}')
    node.config.write_text("\n".join(lines) + "\n")
    out = node.ctl("reload")
    answer = out.stdout + out.stderr
    assert UNTAKEN not in answer, answer
    return answer


def listening(node):
    """The UDP sockets pairwalld listens on in node's namespace, as "address:port"."""
    out = node.ns.exec("ss", "-H", "-u", "-l", "-n", "-p").stdout
    return {line.split()[3] for line in out.splitlines() if f"pid={node.proc.pid}," in line}


def tcp_states(node):
    return len(node.states("proto", "tcp", "port", TCP_PORT))


def test_reload_moves_the_sync_link(make_pair):
    pair = make_pair().start()
    a, b = pair.a, pair.b
    connect(pair, 5)
    wait_until(lambda: tcp_states(b) >= 5, 5, what="fwB has the first connections")
    assert listening(a) == {f"{SYNC['fwA']}%sync0:{SYNC_PORT}"}, listening(a)

    for name, node in (("fwA", a), ("fwB", b)):
        node.ns.exec("ip", "address", "add", f"{MOVED[name]}/30", "dev", "sync0")

    # A moves alone: B hears nothing from it until B moves too. The protocol's timing and limits
    # change with it, taken as well.
    assert REFUSED not in move(a, MOVED["fwA"], MOVED["fwB"], MOVED_PORT,
                               "flush_interval_ms = 5\nbulk_timeout_min_s = 10\npending_limit = 500000\n"
                               "resend_window = 2048\n")
    wait_until(lambda: f"{MOVED['fwB']} port {MOVED_PORT}" in a.log_text(), 5, what="fwA's move in its log")
    assert listening(a) == {f"{MOVED['fwA']}%sync0:{MOVED_PORT}"}, listening(a)
    connect(pair, 5)
    assert tcp_states(a) >= 10
    assert tcp_states(b) == 5, "fwB heard fwA on the link it no longer uses"

    assert REFUSED not in move(b, MOVED["fwB"], MOVED["fwA"], MOVED_PORT)
    wait_until(lambda: tcp_states(b) >= 10, 10, what="the connections opened meanwhile on fwB")
    connect(pair, 5)
    wait_until(lambda: tcp_states(b) >= 15, 5, what="fwB has the connections opened after the move")
    pair.wait_peers_up()
    assert a.sync_status()["peer_address"] == MOVED["fwB"]
    assert b.sync_status()["peer_address"] == MOVED["fwA"]

    # An address this node does not have: refused, the running link kept.
    answer = move(a, "10.88.9.77", MOVED["fwB"], MOVED_PORT)
    assert REFUSED in answer and "10.88.9.77" in answer, answer
    assert listening(a) == {f"{MOVED['fwA']}%sync0:{MOVED_PORT}"}, listening(a)
    connect(pair, 5)
    wait_until(lambda: tcp_states(b) >= 20, 5, what="fwB has the connections opened after the refused move")
    assert a.alive() and b.alive()


def test_reload_moves_the_sync_link_to_another_interface(make_pair):
    """With the node's own traffic queued (hooks = "forward+local", fail-closed, `block all`), only
    the hooks' exception for the sync interface lets the sync datagrams in: it moves with the link."""
    pair = make_pair()
    a, b = pair.a, pair.b
    for node in (a, b):
        node.config.write_text(node.config.read_text().replace("[queue]\n", '[queue]\nhooks = "forward+local"\n'))
    pair.topo.veth(pair.ns["fwA"], "sync1", pair.ns["fwB"], "sync1")
    for name, node in (("fwA", a), ("fwB", b)):
        node.ns.address("sync1", f"{MOVED[name]}/30")
    pair.start()
    connect(pair, 5)
    wait_until(lambda: tcp_states(b) >= 5, 5, what="fwB has the first connections")

    for name, node in (("fwB", b), ("fwA", a)):
        other = "fwA" if name == "fwB" else "fwB"
        node.config.write_text(node.config.read_text().replace('interface = "sync0"', 'interface = "sync1"'))
        assert REFUSED not in move(node, MOVED[name], MOVED[other], SYNC_PORT)
    wait_until(lambda: f"sync1 -> {MOVED['fwB']}" in a.log_text(), 5, what="fwA's move in its log")
    assert listening(a) == {f"{MOVED['fwA']}%sync1:{SYNC_PORT}"}, listening(a)
    connect(pair, 5)
    wait_until(lambda: tcp_states(b) >= 10, 10, what="fwB has the connections opened after the move")
    pair.wait_peers_up()
    assert a.alive() and b.alive()


def test_reload_moves_the_sync_link_to_ipv6_with_a_new_mtu(make_pair):
    """As `ifconfig pfsync0 syncpeer Y mtu N`: the link moved to the other address family, its
    datagrams sized for that family's headers and the new MTU (1280 less IPv6's 40 and UDP's 8)."""
    pair = make_pair().start()
    a, b = pair.a, pair.b
    connect(pair, 5)
    wait_until(lambda: tcp_states(b) >= 5, 5, what="fwB has the first connections")
    assert a.sync_status()["datagram_bytes"] == 1500 - 20 - 8

    moved = {"fwA": "fd88:9::5", "fwB": "fd88:9::6"}
    for name, node in (("fwA", a), ("fwB", b)):
        node.ns.exec("ip", "address", "add", f"{moved[name]}/64", "dev", "sync0", "nodad")
    for name, other, node in (("fwA", "fwB", a), ("fwB", "fwA", b)):
        assert REFUSED not in move(node, moved[name], moved[other], SYNC_PORT, "mtu = 1280\n")
    wait_until(lambda: f"[{moved['fwA']}]%sync0:{SYNC_PORT}" in listening(a), 5, what="fwA's IPv6 socket")
    assert listening(a) == {f"[{moved['fwA']}]%sync0:{SYNC_PORT}"}, listening(a)
    pair.wait_peers_up()
    assert a.sync_status()["peer_address"] == moved["fwB"]
    assert a.sync_status()["datagram_bytes"] == 1280 - 40 - 8
    connect(pair, 20)
    wait_until(lambda: tcp_states(b) >= 25, 10, what="fwB has the connections opened after the move")
    assert a.alive() and b.alive()
