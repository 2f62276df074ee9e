"""A source one node shut out stays out after a failover: with `[sync] tables = ["bruteforce"]`, the
client that goes over `max-src-conn-rate 3/60` on the master joins its `overload <bruteforce>`
table, the backup holds the table too, and once the master is killed the new master refuses that
client's connections while another address of the same LAN connects. (Without the shared table the
new master would let it in: a learned connection does not count toward the rate.)"""

import json
import signal
import subprocess
import time

from failover_net import run

ADVBASE_MS = 100
PORT = 5001
CLIENT, OTHER, SERVER = "10.31.0.10", "10.31.0.11", "10.32.0.10"
RULES = f"""table <bruteforce> persist
block all
pass proto tcp from 10.31.0.0/24 to 10.32.0.0/24 port {PORT} flags S/SA keep state \\
    (max-src-conn-rate 3/60, overload <bruteforce> flush global)
block quick from <bruteforce>
"""

# Accepts and closes connections on argv[1] for at most 60 s.
ACCEPTOR = r"""
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], %d)); s.listen(64); s.settimeout(0.5)
end = time.monotonic() + 60
while time.monotonic() < end:
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    c.close()
""" % PORT

# argv[3] connections from argv[1] to argv[2], 50 ms apart: their outcomes as a JSON list.
CONNECT = r"""
import json, socket, sys, time
out = []
for _ in range(int(sys.argv[3])):
    s = socket.socket()
    s.bind((sys.argv[1], 0)); s.settimeout(1.0)
    try:
        s.connect((sys.argv[2], %d)); out.append("ok")
    except socket.timeout:
        out.append("timeout")
    except OSError as e:
        out.append(type(e).__name__)
    s.close(); time.sleep(0.05)
print(json.dumps(out))
""" % PORT


def connect(p, source, count):
    cp = run(["ip", "netns", "exec", p.ns["c0"], "/usr/bin/python3", "-c", CONNECT, source, SERVER, str(count)],
             timeout=30)
    return json.loads(cp.stdout)


def bruteforce(p, node):
    return p.table_entries(node, "bruteforce")


def test_failover_shared_overload_table_keeps_a_source_out(pair_factory):
    p = pair_factory(advbase_ms=ADVBASE_MS, ipv6=False, daemon="pairwalld", rules=RULES,
                     sync_extra='tables = ["bruteforce"]')
    p.start_forwarding({"c0": [OTHER]})
    p.procs[("c1", "acceptor")] = subprocess.Popen(["ip", "netns", "exec", p.ns["c1"], "/usr/bin/python3", "-c",
                                                    ACCEPTOR, SERVER])
    time.sleep(0.3)

    # The fourth connection within the rate's minute is over it: cut, and the client joins the table.
    outcomes = connect(p, CLIENT, 4)
    assert outcomes[:3] == ["ok"] * 3, outcomes
    p.wait_for(lambda: bruteforce(p, "a") == [f"{CLIENT}/32"], 5, what="the client in a's <bruteforce>")
    p.wait_for(lambda: bruteforce(p, "b") == [f"{CLIENT}/32"], 5, what="the client in b's <bruteforce>")

    p.kill("a", sig=signal.SIGKILL)
    p.wait_roles({"b": "master"}, timeout=3)
    # Through the new master: the other address gets through, the client does not.
    p.wait_for(lambda: connect(p, OTHER, 1) == ["ok"], 5, what="a connection through the new master")
    assert connect(p, CLIENT, 2) == ["timeout", "timeout"]
    assert bruteforce(p, "b") == [f"{CLIENT}/32"]
