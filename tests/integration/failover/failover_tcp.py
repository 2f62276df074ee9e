"""A long-lived TCP connection through the pair, and a rule set under which it can only pass through
a state: what the failover tests use to show that the new master passes the connections of the old."""

import json

from failover_net import PAIRWALLCTL, run

PORT = 5001
RULES = f"""block all
pass proto tcp from 10.31.0.0/24 to 10.32.0.0/24 port {PORT} flags S/SA keep state
pass proto tcp from fd31::/64 to fd32::/64 port {PORT} flags S/SA keep state
"""
# The server's address on c1 by family: SERVER's and CLIENT's argument.
SERVER_ADDRESS = {"inet": "10.32.0.10", "inet6": "fd32::10"}

# Echoes one connection on argv[1]; gives up when no client comes within 60 s, an idle one after
# 30 s, and in any case after 10 minutes.
SERVER = r"""
import socket, sys, time
end = time.monotonic() + 600
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], %d)); s.listen(1); s.settimeout(60)
c, _ = s.accept()
c.settimeout(30)
while time.monotonic() < end:
    data = c.recv(65536)
    if not data:
        break
    c.sendall(data)
""" % PORT

# Sends 64 bytes every 20 ms to the server at argv[2] and waits for the echo, for argv[1] seconds;
# prints a JSON summary.
CLIENT = r"""
import json, socket, sys, time
duration = float(sys.argv[1])
s = socket.create_connection((sys.argv[2], %d), timeout=5)
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
