"""Reloads on a node carrying traffic lose nothing: while 30 held TCP connections and a churn of new
TCP connections and UDP flows cross node A, A is reloaded 12 times, each reload turning defer on or
off, changing the queue length and receive buffer, and moving, starting or stopping the pcap log.
Every new connection opens, every held one still carries data afterwards, no packet is dropped for
want of room in a queue, and B holds the held connections' states as A does."""

import json
import time

from netns import wait_until
from sync_pair import SERVER, TCP_PORT, ask

HELD, SPORT = 30, 44000
RELOADS = 12


def settings(i, work):
    """The i-th reload's additions: to [sync] (the config's last section) and the rest by section."""
    pcap = ["", f'pcap_file = "{work}/a.pcap"\n', f'pcap_file = "{work}/b.pcap"\n'][i % 3]
    queue = f"maxlen = {[65536, 8192, 32768][i % 3]}\nrcvbuf_bytes = {[1 << 25, 1 << 22, 1 << 24][i % 3]}\n"
    defer = "defer = true\ndefer_timeout_ms = 50\n" if i % 2 else ""
    return pcap, queue, defer


def reload(node, base, i, work):
    pcap, queue, defer = settings(i, work)
    text = base.replace("[queue]\n", "[queue]\n" + queue).replace("[log]\n", "[log]\n" + pcap)
    node.config.write_text(text + defer)
    out = node.ctl("reload")
    assert "which a reload does not take" not in out.stdout + out.stderr, out


def queue_drops(node):
    return sum(int(q.get("drops", 0)) for q in node.json("status")["queues"])


def test_reloads_under_churn_keep_connections(make_pair):
    pair = make_pair().start()
    a, b = pair.a, pair.b
    base = a.config.read_text()

    with pair.held_connections(HELD, SPORT) as opener:
        assert ask(opener, None, "opened") == HELD
        churn = pair.spawn_flows("client", "churn", SERVER, TCP_PORT, "--seconds", 6, "--rate", 200)
        try:
            for i in range(RELOADS):
                reload(a, base, i, a.dir)
                time.sleep(0.4)
            result = json.loads(churn.stdout.read().decode().splitlines()[-1])
        finally:
            pair.topo.kill(churn)
        print(f"\nchurn across {RELOADS} reloads: {result}")
        assert result["failed"] == 0, result
        assert result["tcp"] >= 300, result
        assert ask(opener, "data", "data") == HELD
        assert queue_drops(a) == 0
        held = lambda n: {k[2] for k in n.states("proto", "tcp", "port", TCP_PORT)} >= set(range(SPORT, SPORT + HELD))
        wait_until(lambda: held(b), 10, what="fwB holds every held connection's state")
    assert a.alive() and b.alive()
    assert a.log.read_text().count("reload: rules reloaded") == RELOADS
