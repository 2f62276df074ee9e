"""A long-lived TCP connection through the pair, and a rule set under which it can only pass through
a state: what the failover tests use to show that the new master passes the connections of the old."""

import json

from failover_net import PAIRWALLCTL, run

PORT = 5001
RULES = f"""block all
pass proto tcp from 10.31.0.0/24 to 10.32.0.0/24 port {PORT} flags S/SA keep state
"""

# Echoes one connection; gives up when no client comes within 60 s, an idle one after 30 s, and
# in any case after 10 minutes.
SERVER = r"""
import socket, sys, time
end = time.monotonic() + 600
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.32.0.10", %d)); s.listen(1); s.settimeout(60)
c, _ = s.accept()
c.settimeout(30)
while time.monotonic() < end:
    data = c.recv(65536)
    if not data:
        break
    c.sendall(data)
""" % PORT

# Sends 64 bytes every 20 ms and waits for the echo, for argv[1] seconds; prints a JSON summary.
CLIENT = r"""
import json, socket, sys, time
duration = float(sys.argv[1])
s = socket.create_connection(("10.32.0.10", %d), timeout=5)
s.settimeout(4)
start = time.monotonic(); last = start; stall = 0.0; n = 0; error = None
try:
    while time.monotonic() - start < duration:
        s.sendall(b"x" * 64)
        got = b""
        while len(got) < 64:
            chunk = s.recv(64 - len(got))
            if not chunk:
                raise ConnectionError("closed by peer")
            got += chunk
        now = time.monotonic(); stall = max(stall, now - last); last = now; n += 1
        time.sleep(0.02)
except Exception as e:
    error = f"{type(e).__name__}: {e}"
print(json.dumps({"exchanges": n, "max_stall_ms": round(stall * 1000, 1), "error": error}))
""" % PORT


def states(p, node):
    """States in the node's table (JSON numbers of 64 bits arrive as strings)."""
    cp = run([PAIRWALLCTL, "-s", str(p.socket_path(node)), "--json", "states", "--count"])
    return int(json.loads(cp.stdout)["total"])
