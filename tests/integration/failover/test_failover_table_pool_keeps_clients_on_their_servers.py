"""A client keeps its server across a failover: `rdr ... -> <web> source-hash` picks a client's
server by a keyed hash of its address over the table's servers, and with `[sync] tables = ["web"]`
the backup holds the servers the master was given at run time (`pairwallctl tables add`), so that
once the master is killed the new master sends each client's new connections to the server it had.
(Without the shared table the new master would know only the server the rule file lists.)"""

import json
import signal
import subprocess
import time

from failover_net import PAIRWALLCTL, run

ADVBASE_MS = 100
PORT = 5002
PUBLIC = "10.32.0.80"  # the address clients dial, which no host owns
SERVERS = ["10.32.0.10", "10.32.0.11", "10.32.0.12", "10.32.0.13"]
CLIENTS = [f"10.31.0.{host}" for host in range(10, 18)]
RULES = f"""table <web> {{ {SERVERS[0]} }}
rdr on lan0 proto tcp to {PUBLIC} port 80 -> <web> port {PORT} source-hash
block all
pass proto tcp from 10.31.0.0/24 to 10.32.0.0/24 port {PORT} flags S/SA keep state
"""

# Answers each connection on argv[1]'s port with the address it was accepted on, for at most 60 s.
ANSWERER = r"""
import socket, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", %d)); s.listen(64); s.settimeout(0.5)
end = time.monotonic() + 60
while time.monotonic() < end:
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    c.sendall(c.getsockname()[0].encode()); c.close()
""" % PORT

# One connection from each address of argv[1:] to the public address: {source: server or error}.
ASK = r"""
import json, socket, sys
out = {}
for source in sys.argv[1:]:
    s = socket.socket()
    s.bind((source, 0)); s.settimeout(1.0)
    try:
        s.connect((%r, 80)); out[source] = s.recv(64).decode()
    except OSError as e:
        out[source] = type(e).__name__
    s.close()
print(json.dumps(out))
""" % PUBLIC


def ask(p, sources):
    cp = run(["ip", "netns", "exec", p.ns["c0"], "/usr/bin/python3", "-c", ASK, *sources], timeout=30)
    return json.loads(cp.stdout)




def test_failover_table_pool_keeps_clients_on_their_servers(pair_factory):
    p = pair_factory(advbase_ms=ADVBASE_MS, ipv6=False, daemon="pairwalld", rules=RULES,
                     sync_extra='tables = ["web"]')
    p.start_forwarding({"c0": CLIENTS[1:], "c1": SERVERS[1:]})
    p.procs[("c1", "answerer")] = subprocess.Popen(["ip", "netns", "exec", p.ns["c1"], "/usr/bin/python3", "-c",
                                                    ANSWERER])
    time.sleep(0.3)

    # The pool's servers are given at run time, on the master alone.
    run([PAIRWALLCTL, "-s", str(p.socket_path("a")), "tables", "add", "web", *SERVERS[1:]])
    expected = sorted(f"{s}/32" for s in SERVERS)
    p.wait_for(lambda: sorted(p.table_entries("b", "web")) == expected, 5, what="the servers in b's <web>")

    before = ask(p, CLIENTS)
    assert set(before.values()) <= set(SERVERS), before
    assert len(set(before.values())) > 1, f"every client on one server: {before}"

    p.kill("a", sig=signal.SIGKILL)
    p.wait_roles({"b": "master"}, timeout=3)
    p.wait_for(lambda: ask(p, CLIENTS[:1]) == {CLIENTS[0]: before[CLIENTS[0]]}, 5,
               what="a connection through the new master")
    assert ask(p, CLIENTS) == before
