"""Two real pairwalld nodes joined by a dedicated sync link, with traffic through node A only:

    client c0 10.88.1.2 ── a0 10.88.1.1  fwA  a1 10.88.2.1 ── s0 10.88.2.2 server (TCP echo 9000)
                                         sync0 10.88.9.1
                                           ║ veth
                                         sync0 10.88.9.2  fwB

Both nodes load the same rules (pass client -> server TCP and UDP with state, long timeouts so that
nothing expires during a test) and the same sync key. Namespaces are pe-<pid>x<n>-{client,fwA,fwB,server};
processes are stopped by PID and namespaces deleted when the test ends, pass or fail.
"""

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from netns import NetnsError, wait_until

PREFIX = "pe-"
REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
FLOWS = HERE / "flows.py"

CLIENT, A_IN, A_OUT, SERVER = "10.88.1.2", "10.88.1.1", "10.88.2.1", "10.88.2.2"
SYNC = {"fwA": "10.88.9.1", "fwB": "10.88.9.2"}
NODE_ID = {"fwA": 1, "fwB": 2}
TCP_PORT = 9000
SYNC_PORT = 8370
METRICS = "127.0.0.1:9477"  # in each firewall's own namespace

RULES = """\
in_if = "a0"
out_if = "a1"
set limit states 400000
set timeout { tcp.established 3600, tcp.closing 600, tcp.finwait 600, tcp.closed 600, udp.first 3600, udp.single 3600, udp.multiple 3600 }
block all
pass in on $in_if inet proto { tcp udp } from 10.88.1.0/24 to any keep state
pass out on $out_if inet proto { tcp udp } from 10.88.1.0/24 to any keep state
"""

CONFIG = """\
[node]
id = {node_id}
name = "{name}"

[queue]
first = 0
count = 1
fail_open = false
exclude_interfaces = ["sync0"]

[rules]
file = "{rules}"

[log]
level = "info"

[control]
socket = "{socket}"

[metrics]
listen = "{metrics}"

[sync]
interface = "sync0"
address = "{own}"
peer = "{peer}"
port = {port}
key_file = "{key}"
{extra}
"""


def bin_dir() -> Path:
    """Where pairwalld and pairwallctl are: $PAIRWALL_BIN_DIR, else build/bin."""
    return Path(os.environ.get("PAIRWALL_BIN_DIR", REPO / "build" / "bin"))


class Node:
    """pairwalld in one firewall namespace, and pairwallctl to ask it things."""

    def __init__(self, pair, name, work: Path, sync_extra="", metrics=False):
        self.pair = pair
        self.name = name
        self.ns = pair.ns[name]
        self.bin = bin_dir()
        for b in ("pairwalld", "pairwallctl"):
            if not (self.bin / b).exists():
                pytest.fail(f"{self.bin / b} not found: build first, or set PAIRWALL_BIN_DIR")
        self.dir = work / name
        self.dir.mkdir(parents=True, exist_ok=True)
        rules = self.dir / "pairwall.rules"
        rules.write_text(RULES)
        self.socket = self.dir / "control.sock"
        self.config = self.dir / "pairwall.toml"
        peer = "fwB" if name == "fwA" else "fwA"
        self.config.write_text(CONFIG.format(node_id=NODE_ID[name], name=name, rules=rules, socket=self.socket,
                                             own=SYNC[name], peer=SYNC[peer], port=SYNC_PORT, key=pair.key,
                                             extra=sync_extra, metrics=METRICS if metrics else ""))
        self.log = self.dir / "pairwalld.log"
        self.proc = None

    def start(self, timeout=20):
        if self.socket.exists():
            self.socket.unlink()
        self.proc = self.pair.topo.spawn(self.ns, [str(self.bin / "pairwalld"), "-f", "-c", str(self.config)],
                                         log=self.log)

        def ready():
            if self.proc.poll() is not None:
                raise NetnsError(f"pairwalld in {self.name} exited with {self.proc.returncode}:\n{self.log_text()}")
            return self.ctl("status", check=False).returncode == 0

        wait_until(ready, timeout, what=f"pairwalld in {self.name} answering")
        return self

    def kill(self):
        """kill -9: a crash, no goodbye."""
        self.pair.topo.kill(self.proc)
        # The hooks a killed daemon leaves would drop traffic: remove them, as `pairwalld --cleanup` by hand does.
        self.ns.exec(str(self.bin / "pairwalld"), "--cleanup", "-c", str(self.config), check=False)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def ctl(self, *args, check=True, timeout=60):
        cp = self.ns.exec(str(self.bin / "pairwallctl"), "-s", str(self.socket), *[str(a) for a in args],
                          check=False, timeout=timeout)
        if check and cp.returncode != 0:
            raise NetnsError(f"{self.name}: pairwallctl {' '.join(map(str, args))} exited {cp.returncode}: "
                             f"{cp.stderr.strip()}\nlog:\n{self.log_text()}")
        return cp

    def json(self, *args):
        return json.loads(self.ctl("--json", *args).stdout)

    def metrics(self):
        """The /metrics samples as {"name{labels}": value} (the pair made with metrics=True)."""
        text = self.ns.exec("curl", "-s", "-m", "3", f"http://{METRICS}/metrics").stdout
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    def sync_status(self):
        return self.json("sync", "status")

    def state_count(self):
        return int(self.json("status").get("states", 0))

    def states(self, *filters, limit=1_000_000):
        """{key: state} with key (proto, src addr, src port, dst addr, dst port)."""
        r = self.json("states", "--limit", limit, *filters)
        out = {}
        for s in r.get("states", []):
            src, dst = s.get("src", {}), s.get("dst", {})
            out[(s.get("proto"), src.get("address"), src.get("port"), dst.get("address"), dst.get("port"))] = s
        return out

    def log_text(self):
        try:
            return self.log.read_text(errors="replace")[-6000:]
        except OSError:
            return "(no log)"


class Pair:
    """The four namespaces, the TCP echo server, and the two nodes (not started)."""

    def __init__(self, topo, work: Path, sync_extra="", metrics=False):
        self.topo = topo
        self.work = work
        self.ns = {r: topo.namespace(r) for r in ("client", "fwA", "fwB", "server")}
        client, fwa, fwb, server = (self.ns[r] for r in ("client", "fwA", "fwB", "server"))
        topo.veth(client, "c0", fwa, "a0")
        topo.veth(fwa, "a1", server, "s0")
        topo.veth(fwa, "sync0", fwb, "sync0")
        client.address("c0", f"{CLIENT}/24")
        fwa.address("a0", f"{A_IN}/24")
        fwa.address("a1", f"{A_OUT}/24")
        server.address("s0", f"{SERVER}/24")
        fwa.address("sync0", f"{SYNC['fwA']}/30")
        fwb.address("sync0", f"{SYNC['fwB']}/30")
        client.route("default", A_IN)
        server.route("default", A_OUT)
        fwa.enable_forwarding()
        self.key = work / "sync.key"
        self.key.write_text(secrets.token_hex(32) + "\n")
        self.key.chmod(0o600)
        self.python = sys.executable
        p = topo.spawn(server, [self.python, str(FLOWS), "serve", str(TCP_PORT), "--lifetime", "600"],
                       stdout=subprocess.PIPE)
        if b"serving" not in p.stdout.readline():
            raise NetnsError("echo server did not start")
        self.a = Node(self, "fwA", work, sync_extra, metrics)
        self.b = Node(self, "fwB", work, sync_extra, metrics)

    def start(self):
        self.a.start()
        self.b.start()
        wait_until(lambda: self.a.sync_status().get("bulk_done") and self.b.sync_status().get("bulk_done"), 20,
                   what="both nodes' initial bulk done")
        return self.wait_peers_up()

    def wait_peers_up(self, timeout=10):
        """Waited for, not read once: a node judges its peer by the datagrams of the last dead interval,
        so just after the link returns (or the host stalls) one node may for a moment still say down."""
        wait_until(lambda: self.a.sync_status().get("peer_state") == "UP" and
                   self.b.sync_status().get("peer_state") == "UP", timeout, what="sync peers up")
        return self

    def flows(self, ns_role, *args, timeout=120):
        cp = self.ns[ns_role].exec(self.python, str(FLOWS), *[str(a) for a in args], timeout=timeout, check=False)
        lines = [json.loads(l) for l in cp.stdout.splitlines() if l.strip()]
        if cp.returncode != 0:
            raise NetnsError(f"flows.py {' '.join(map(str, args))} in {ns_role} exited {cp.returncode}: {cp.stderr}")
        return lines

    def spawn_flows(self, ns_role, *args):
        return self.topo.spawn(self.ns[ns_role], [self.python, str(FLOWS), *[str(a) for a in args]],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    @contextlib.contextmanager
    def held_connections(self, count, sport, hold=120, interval=0.01):
        """flows.py holding `count` TCP connections client -> server from port `sport` up: yields it
        (it answers `data` and `close` on its stdin); told to close and stopped on the way out, pass
        or fail."""
        opener = self.spawn_flows("client", "open", SERVER, TCP_PORT, count, "--sport", sport, "--interval",
                                  interval, "--hold", hold)
        try:
            yield opener
        finally:
            try:
                opener.stdin.write(b"close\n")
                opener.stdin.flush()
            except BrokenPipeError:
                pass  # it had ended already
            self.topo.kill(opener)

    def preload_udp(self, count, sport=20000, rate=20000):
        """`count` UDP flows client -> server through A; returns datagrams sent."""
        return self.flows("client", "udp", SERVER, count, "--sport", sport, "--rate", rate, "--seconds", 120,
                          timeout=180)[-1]["sent"]

    def sync_loss(self, probability):
        """Drops `probability` of the sync datagrams each node sends (iptables -m statistic)."""
        for n in ("fwA", "fwB"):
            self.ns[n].exec("iptables", "-w", "-I", "OUTPUT", "-o", "sync0", "-p", "udp", "--dport", str(SYNC_PORT),
                            "-m", "statistic", "--mode", "random", "--probability", str(probability), "-j", "DROP")

    def clear_loss(self, probability):
        for n in ("fwA", "fwB"):
            self.ns[n].exec("iptables", "-w", "-D", "OUTPUT", "-o", "sync0", "-p", "udp", "--dport", str(SYNC_PORT),
                            "-m", "statistic", "--mode", "random", "--probability", str(probability), "-j", "DROP",
                            check=False)

    def tables(self):
        return self.a.states(), self.b.states()

    def wait_tables_agree(self, timeout=30, compare=lambda s: (s.get("src_state"), s.get("dst_state"))):
        """Polls both tables until they hold the same keys with the same `compare(state)`; returns
        (a, b, seconds)."""
        t0 = time.monotonic()
        while True:
            a, b = self.tables()
            same = a.keys() == b.keys() and all(compare(a[k]) == compare(b[k]) for k in a)
            if same or time.monotonic() - t0 > timeout:
                return a, b, time.monotonic() - t0
            time.sleep(0.5)


def ask(opener, line, key):
    """Sends `line` to a held_connections() opener (flows.py open) (None: nothing) and returns the `key` of its next answer that has one."""
    if line is not None:
        opener.stdin.write(f"{line}\n".encode())
        opener.stdin.flush()
    while True:
        answer = json.loads(opener.stdout.readline())
        if key in answer:
            return answer[key]


def exchange_data(opener):
    """Every connection a flows.py `open` holds (held_connections, spawn_flows) sends a message and
    reads it back; returns how many did."""
    opener.stdin.write(b"data\n")
    opener.stdin.flush()
    while "data" not in (line := json.loads(opener.stdout.readline())):
        pass  # what it said of the connections it opened
    return line["data"]


def describe_difference(a, b, compare=lambda s: (s.get("src_state"), s.get("dst_state")), limit=5):
    only_a = sorted(a.keys() - b.keys())[:limit]
    only_b = sorted(b.keys() - a.keys())[:limit]
    differ = [(k, compare(a[k]), compare(b[k])) for k in a.keys() & b.keys() if compare(a[k]) != compare(b[k])][:limit]
    return (f"{len(a.keys() - b.keys())} only on fwA (e.g. {only_a}), {len(b.keys() - a.keys())} only on fwB "
            f"(e.g. {only_b}), differing: {differ}")
