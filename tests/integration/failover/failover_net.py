"""A failover pair in network namespaces, for the failover integration tests.

    c0 (10.31.0.10, fd31::10) ── br0 ──┬── a:lan0 .2 ┐        ┌ a:lan1 .2 ─┬── br1 ── c1 (10.32.0.10, fd32::10)
                                       └── b:lan0 .3 ┘        └ b:lan1 .3 ─┘
    VIPs: 10.31.0.1/24 + fd31::1/64 on lan0, 10.32.0.1/24 + fd32::1/64 on lan1

Namespaces are PREFIX + {sw, a, b, c0, c1}; the two bridges live in `sw`, so a node can lose a link
(`ip -n sw link set a-lan1 down`, a pulled cable) while the LAN stays up. The root namespace is
never touched. Each node runs one daemon: `pairwall-failoverd` (the failover service alone) or, in
keepalived mode, keepalived next to it. Every process is started here, remembered by pid and
killed by pid; `down()` removes everything, also after a failure.
"""

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
BIN_DIR = Path(os.environ.get("PAIRWALL_BIN_DIR", REPO / "build" / "bin"))
FAILOVERD = os.environ.get("PAIRWALL_FAILOVERD", str(BIN_DIR / "pairwall-failoverd"))
PAIRWALLD = str(BIN_DIR / "pairwalld")
PAIRWALLCTL = str(BIN_DIR / "pairwallctl")
# Which process runs the failover service in each node: "failoverd" (the service alone) or
# "pairwalld" (the whole daemon: engine, hooks, control socket, metrics).
DAEMON = os.environ.get("FAILOVER_DAEMON", "pairwalld")
METRICS_PORT = 9477
KEY = "failover-test-key-0123456789abcdef"
SYNC_KEY = "sync-test-key-0123456789abcdef0123456789"
SYNC_NET = "10.33.0"
SYNC_PORT = 8370
PORT = 8112

NODES = {"a": {"id": 1, "host": 2}, "b": {"id": 2, "host": 3}}
LANS = {"lan0": {"v4": "10.31.0", "v6": "fd31:"}, "lan1": {"v4": "10.32.0", "v6": "fd32:"}}
CLIENTS = {"lan0": "c0", "lan1": "c1"}


def other(node):
    return "b" if node == "a" else "a"


def vip4(lan):
    return f"{LANS[lan]['v4']}.1"


def vip6(lan):
    return f"{LANS[lan]['v6']}:1"


def run(cmd, check=True, timeout=20):
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and cp.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({cp.returncode}): {cp.stderr.strip() or cp.stdout.strip()}")
    return cp


class Pair:
    def __init__(self, prefix, advbase_ms=1000, skews=(0, 100), preempt=False, ipv6=True, daemon=None,
                 sync=True, rules="pass all\n", hooks="forward", sync_extra=""):
        assert prefix.startswith("pf-")
        self.daemon = daemon or DAEMON
        self.sync = sync  # pairwalld only: run state sync over a direct link
        self.sync_extra = sync_extra  # pairwalld only: more [sync] settings
        self.rules = rules  # pairwalld only
        self.hooks = hooks  # pairwalld only: [queue] hooks
        self.prefix = prefix
        self.advbase_ms = advbase_ms
        self.skews = dict(zip(("a", "b"), skews))
        self.preempt = preempt
        self.ipv6 = ipv6
        self.dir = Path(tempfile.mkdtemp(prefix=prefix + "run-"))
        self.procs = {}  # (node, what) -> Popen
        self.ns = {n: prefix + n for n in ("sw", "a", "b", "c0", "c1")}

    # ---- topology ------------------------------------------------------------------------------

    def up(self):
        self.down(quiet=True)
        for ns in self.ns.values():
            run(["ip", "netns", "add", ns])
            self.ip(ns, "link", "set", "lo", "up")
            for key in ("default", "all"):
                self.sysctl(ns, f"net/ipv6/conf/{key}/accept_dad", 0)
                self.sysctl(ns, f"net/ipv6/conf/{key}/dad_transmits", 0)
        sw = self.ns["sw"]
        for i, lan in enumerate(LANS):
            self.ip(sw, "link", "add", f"br{i}", "type", "bridge", "forward_delay", "0")
            self.ip(sw, "link", "set", f"br{i}", "up")
            for node in ("a", "b"):
                port = f"{node}-{lan}"
                self.ip(sw, "link", "add", port, "type", "veth", "peer", "name", lan, "netns", self.ns[node])
                self.ip(sw, "link", "set", port, "master", f"br{i}", "up")
                self.ip(self.ns[node], "link", "set", lan, "up")
                host = NODES[node]["host"]
                self.ip(self.ns[node], "addr", "add", f"{LANS[lan]['v4']}.{host}/24", "dev", lan)
                self.ip(self.ns[node], "addr", "add", f"{LANS[lan]['v6']}:{host}/64", "dev", lan, "nodad")
            client = self.ns[CLIENTS[lan]]
            port = f"{CLIENTS[lan]}-{lan}"
            self.ip(sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", client)
            self.ip(sw, "link", "set", port, "master", f"br{i}", "up")
            self.ip(client, "link", "set", "eth0", "up")
            self.ip(client, "addr", "add", f"{LANS[lan]['v4']}.10/24", "dev", "eth0")
            self.ip(client, "addr", "add", f"{LANS[lan]['v6']}:10/64", "dev", "eth0", "nodad")
        (self.dir / "failover.key").write_text(KEY + "\n")
        (self.dir / "failover.key").chmod(0o600)
        if self.daemon == "pairwalld" and self.sync:
            # pairwalld runs state sync too: a direct link between the two nodes.
            self.ip(self.ns["a"], "link", "add", "sync0", "type", "veth", "peer", "name", "sync0", "netns",
                    self.ns["b"])
            for node in ("a", "b"):
                self.ip(self.ns[node], "addr", "add", f"{SYNC_NET}.{NODES[node]['id']}/30", "dev", "sync0")
                self.ip(self.ns[node], "link", "set", "sync0", "up")
            (self.dir / "sync.key").write_text(SYNC_KEY + "\n")
            (self.dir / "sync.key").chmod(0o600)

    def down(self, quiet=False):
        for key, p in list(self.procs.items()):
            self.kill(*key, sig=signal.SIGKILL)
        existing = run(["ip", "netns", "list"], check=False).stdout
        for ns in self.ns.values():
            if any(line.split()[0] == ns for line in existing.splitlines() if line.strip()):
                # Anything still running in there was started by this test (keepalived forks).
                for pid in run(["ip", "netns", "pids", ns], check=False).stdout.split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                run(["ip", "netns", "del", ns], check=not quiet)

    def ip(self, ns, *args, check=True):
        return run(["ip", "-n", ns, *args], check=check)

    def nsexec(self, node, *cmd, check=True, timeout=20):
        return run(["ip", "netns", "exec", self.ns.get(node, node), *cmd], check=check, timeout=timeout)

    def sysctl(self, ns, key, value):
        run(["ip", "netns", "exec", ns, "sh", "-c", f"echo {value} > /proc/sys/{key}"])

    def mac(self, node, ifname):
        out = json.loads(self.ip(self.ns[node], "-j", "link", "show", "dev", ifname).stdout)
        return out[0]["address"]

    def addresses(self, node, ifname=None):
        args = ["-j", "addr", "show"] + (["dev", ifname] if ifname else [])
        out = json.loads(self.ip(self.ns[node], *args).stdout)
        return {a["local"] for link in out for a in link.get("addr_info", [])}

    def vips(self, lan):
        return {vip4(lan), vip6(lan)} if self.ipv6 else {vip4(lan)}

    def holds_vips(self, node):
        have = self.addresses(node)
        held = [v for lan in LANS for v in self.vips(lan) if v in have]
        return len(held) == sum(len(self.vips(lan)) for lan in LANS) if held else False

    def holds_any_vip(self, node):
        have = self.addresses(node)
        return any(v in have for lan in LANS for v in self.vips(lan))

    def link(self, node, lan, state):
        """Pulls (down) or plugs (up) the cable of `node` on `lan`, at the switch."""
        self.ip(self.ns["sw"], "link", "set", f"{node}-{lan}", state)

    def neighbour_mac(self, client, addr):
        out = json.loads(self.ip(self.ns[client], "-j", "neigh", "show", addr).stdout or "[]")
        for n in out:
            if n.get("lladdr"):
                return n["lladdr"]
        return None

    # ---- daemons -------------------------------------------------------------------------------

    def config(self, node, driver="builtin", extra=""):
        vips = []
        for lan in LANS:
            vips.append(f'{{ interface = "{lan}", address = "{vip4(lan)}/24" }}')
            if self.ipv6:
                vips.append(f'{{ interface = "{lan}", address = "{vip6(lan)}/64" }}')
        # keepalived.conf holds keepalived's election settings: pairwalld refuses the builtin ones there.
        election = "" if driver == "keepalived" else (
            f"vhid = 1\nadvbase_ms = {self.advbase_ms}\nadvskew = {self.skews[node]}\n"
            f"preempt = {'true' if self.preempt else 'false'}\nkey_file = \"failover.key\"\n")
        text = (f"[node]\nid = {NODES[node]['id']}\n\n[failover]\ndriver = \"{driver}\"\n{election}"
                f"vips = [ {', '.join(vips)} ]\n{extra}")
        path = self.dir / f"{node}.toml"
        path.write_text(text)
        return path

    def socket_path(self, node):
        return self.dir / f"{node}.sock"

    def pairwalld_config(self, node, failover_conf):
        """pairwalld's own sections around the [failover] section of `failover_conf`."""
        rules = self.dir / "pass.rules"
        rules.write_text(self.rules)
        body = failover_conf.read_text().split("[failover]", 1)[1]
        text = (f"[node]\nid = {NODES[node]['id']}\nname = \"{node}\"\n\n[queue]\nfail_open = false\nhooks = \"{self.hooks}\"\n\n"
                f"[rules]\nfile = \"{rules}\"\n\n[control]\nsocket = \"{self.socket_path(node)}\"\n\n"
                f"[metrics]\nlisten = \"127.0.0.1:{METRICS_PORT}\"\n\n")
        if self.sync:
            text += (f"[sync]\ninterface = \"sync0\"\naddress = \"{SYNC_NET}.{NODES[node]['id']}\"\n"
                     f"peer = \"{SYNC_NET}.{NODES[other(node)]['id']}\"\nport = {SYNC_PORT}\n"
                     f"key_file = \"{self.dir / 'sync.key'}\"\n{self.sync_extra}\n")
        text += f"[failover]{body}"
        path = self.dir / f"{node}-pairwalld.toml"
        path.write_text(text)
        return path

    def start(self, node, *flags, driver="builtin", extra="", wait=True):
        conf = self.config(node, driver=driver, extra=extra)
        sock = self.socket_path(node)
        if sock.exists():
            sock.unlink()
        log = open(self.dir / f"{node}.log", "a")
        if self.daemon == "pairwalld":
            assert not flags, f"pairwalld takes no test flags ({flags}): bulk sync comes from its sync service"
            cmd = [PAIRWALLD, "-f", "-c", str(self.pairwalld_config(node, conf))]
        else:
            cmd = [FAILOVERD, "-c", str(conf), "-s", str(sock), *flags]
        p = subprocess.Popen(["ip", "netns", "exec", self.ns[node], *cmd], stdout=log, stderr=subprocess.STDOUT)
        self.procs[(node, "failoverd")] = p
        if wait:
            deadline = time.monotonic() + 10
            while not sock.exists():
                if p.poll() is not None:
                    raise RuntimeError(f"{cmd[0]} on {node} exited {p.returncode}: {self.log(node)}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{cmd[0]} on {node} did not open {sock}")
                time.sleep(0.01)
        return p

    def kill(self, node, what="failoverd", sig=signal.SIGKILL):
        p = self.procs.pop((node, what), None)
        if p is None:
            return None
        t = time.monotonic()
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return t

    def reload_with(self, node, replacements):
        """Edits pairwalld's config of `node` ((old, new) pairs, each old present) and reloads it by SIGHUP;
        returns once its log says the reload was taken."""
        path = self.dir / f"{node}-pairwalld.toml"
        text = path.read_text()
        for old, new in replacements:
            assert old in text, text
            text = text.replace(old, new)
        path.write_text(text)
        reloads = self.log(node).count("SIGHUP: rules reloaded")
        self.procs[(node, "failoverd")].send_signal(signal.SIGHUP)
        self.wait_for(lambda: self.log(node).count("SIGHUP: rules reloaded") > reloads, 5, what=f"{node} reloaded")

    def log(self, node):
        path = self.dir / f"{node}.log"
        return path.read_text() if path.exists() else ""

    def ctl(self, node, command):
        """One command on the node's control socket; returns (ok, text)."""
        if self.daemon == "pairwalld":
            words = command.split()
            if words[0] in ("demote", "promote", "set-role", "status"):
                words = ["failover"] + words
            cp = run([PAIRWALLCTL, "-s", str(self.socket_path(node)), "--json", *words], check=False)
            return cp.returncode == 0, (cp.stdout if cp.returncode == 0 else cp.stderr).strip()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(self.socket_path(node)))
            s.sendall((command + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        line = data.decode().rstrip("\n")
        ok = line.startswith("ok")
        return ok, line[3:] if ok else line[6:]

    def metrics(self, node):
        """pairwall_failover_* samples from the node's /metrics: {(name, frozenset(labels)): value}."""
        script = (f"import urllib.request; print(urllib.request.urlopen("
                  f"'http://127.0.0.1:{METRICS_PORT}/metrics', timeout=5).read().decode())")
        text = self.nsexec(node, "/usr/bin/python3", "-c", script).stdout
        out = {}
        for line in text.splitlines():
            if not line.startswith("pairwall_failover_"):
                continue
            key, value = line.rsplit(" ", 1)
            name, _, labels = key.partition("{")
            pairs = frozenset(tuple(kv.split("=", 1)) for kv in labels.rstrip("}").split(",") if kv)
            out[(name, frozenset((k, v.strip('"')) for k, v in pairs))] = float(value)
        return out

    def status(self, node):
        ok, text = self.ctl(node, "status")
        assert ok, text
        if self.daemon != "pairwalld":
            return json.loads(text)
        # pairwalld: the control protocol's FailoverStatus, completed from /metrics, in the shape
        # pairwall-failoverd prints (transitions carry wall-clock ms there; mapped onto the monotonic
        # clock the tests measure with).
        s = json.loads(text)
        m = self.metrics(node)

        def metric(name, **labels):
            want = frozenset(labels.items())
            return next((v for (n, l), v in m.items() if n == name and want <= l), 0)

        offset_ms = time.time() * 1000 - time.clock_gettime(time.CLOCK_MONOTONIC) * 1000
        return {
            "role": s["role"].lower(), "node_id": NODES[node]["id"], "demotion": s["demotion"],
            "demotion_reasons": s["demotion_reasons"], "last_heard_ms_ago": int(s["last_heard_ms_ago"]),
            "master_node_id": s["master_node_id"],
            "transitions": [{"at_us": int((int(t["unix_ms"]) - offset_ms) * 1000), "from": t["from"].lower(),
                             "to": t["to"].lower(), "cause": t["cause"]} for t in s["transitions"]],
            "rejects": {k: int(v) for k, v in s["rejects"].items()},
            "links": {dict(l)["interface"]: v == 1 for (n, l), v in m.items() if n == "pairwall_failover_carrier"},
            "counters": {c: int(metric(f"pairwall_failover_{c}_total"))
                         for c in ("adverts_sent", "adverts_accepted", "announcements", "vip_errors")} |
                        {"worse_masters": int(metric("pairwall_failover_worse_masters_heard_total"))},
        }

    def role(self, node):
        try:
            if self.daemon == "pairwalld":  # the control socket alone: cheap enough to poll
                ok, text = self.ctl(node, "status")
                return json.loads(text)["role"].lower() if ok else "down"
            return self.status(node)["role"]
        except (OSError, AssertionError, ValueError):
            return "down"

    def wait_for(self, predicate, timeout, step=0.01, what="condition"):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what() if callable(what) else what}")
            time.sleep(step)

    def start_forwarding(self, addresses=None):
        """Both nodes forward IPv4 between the LANs, each client routes through its LAN's VIP (with
        `addresses`, {client: [address, ...]}, added to its eth0), and the nodes start: a master, b
        backup."""
        for node in ("a", "b"):
            self.sysctl(self.ns[node], "net/ipv4/ip_forward", 1)
        for client, extra in (addresses or {}).items():
            for address in extra:
                self.ip(self.ns[client], "addr", "add", f"{address}/24", "dev", "eth0")
        for lan, client in CLIENTS.items():
            self.ip(self.ns[client], "route", "add", "default", "via", vip4(lan))
        self.start("a")
        self.start("b")
        self.wait_roles({"a": "master", "b": "backup"}, timeout=8)

    def table_entries(self, node, name):
        """The entries of table <name> on the node's pairwalld, as `pairwallctl tables show` lists them."""
        cp = run([PAIRWALLCTL, "-s", str(self.socket_path(node)), "--json", "tables", "show", name])
        return json.loads(cp.stdout)["tables"][0].get("entries", [])

    def wait_roles(self, roles, timeout):
        # The roles at the timeout, not at the start of the wait.
        return self.wait_for(lambda: all(self.role(n) == r for n, r in roles.items()), timeout,
                             what=lambda: f"roles {roles} (now a={self.role('a')}, b={self.role('b')})")

    def last_transition(self, node, to):
        for t in reversed(self.status(node)["transitions"]):
            if t["to"] == to:
                return t
        return None

    def cleanup(self):
        self.down(quiet=True)
        subprocess.run(["rm", "-rf", str(self.dir)])


def monotonic_us():
    return int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1_000_000)


PROBE = """
import socket, sys
addr = sys.argv[1]
fam = socket.AF_INET6 if ':' in addr else socket.AF_INET
with socket.socket(fam, socket.SOCK_DGRAM) as s:
    s.sendto(b'probe', (addr, 9))
"""


def probe(pair, client, addr):
    """Makes `client` send one datagram to `addr`, so that its kernel resolves the address."""
    pair.nsexec(client, "/usr/bin/python3", "-c", PROBE, addr)
