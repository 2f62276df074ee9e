"""client — fw — server over veth pairs, with the real pairwalld from build/bin filtering in fw:
the pieces the daemon scenarios share (the fixtures in conftest.py build on them).

    client c0 10.77.1.2/24 fd77:1::2/64 ── f0 10.77.1.1 fd77:1::1  fw  f1 10.77.2.1 fd77:2::1 ── s0 10.77.2.2/24 fd77:2::2/64 server

The server namespace runs TCP echo on 8080-8082 and UDP echo on 5353; the client namespace runs the
same, so that tests can try connections in the reverse direction. The daemon's rules (RULES below)
pass client -> server TCP 8080, UDP 5353 and ICMP/ICMPv6 echo requests, reject TCP 8082 with a RST,
and block everything else; replies pass only through state. For the NAT scenarios, Lan.whoami()
starts a server that answers with the address and port it saw the asker at (Lan.ask() asks it),
and Lan.watch_echo() records the echo requests that reach a namespace.

Namespaces are named pd2-<pid>x<n>-{client,fw,server}; everything is removed by PID and name when
the test ends, whether it passed or not.
"""

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from netns import NetnsError, python_with_scapy, wait_until

PREFIX = "pd2-"
REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
PEER = HERE / "peer.py"

CLIENT4, FW_IN4, FW_OUT4, SERVER4 = "10.77.1.2", "10.77.1.1", "10.77.2.1", "10.77.2.2"
CLIENT6, FW_IN6, FW_OUT6, SERVER6 = "fd77:1::2", "fd77:1::1", "fd77:2::1", "fd77:2::2"
ALLOWED, BLOCKED, REJECTED, UDP_PORT = 8080, 8081, 8082, 5353
# Lan.whoami() answers on these with the address and port it saw the asker at (for NAT scenarios).
WHOAMI_TCP, WHOAMI_UDP = 8090, 5390
# The NAT scenarios' translation: the client LAN leaves f1 as the firewall's own address there.
NAT_TO_FW_OUT = f"""\
nat on $out_if inet from 10.77.1.0/24 to any -> {FW_OUT4}
nat on $out_if inet6 from fd77:1::/64 to any -> {FW_OUT6}
"""

RULES = """\
# client side f0, server side f1: the client may reach the server on a few services.
in_if = "f0"
out_if = "f1"
block all
pass in on $in_if proto tcp to port 8080
pass out on $out_if proto tcp to port 8080
block return-rst in quick on $in_if proto tcp to port 8082
pass in on $in_if proto udp to port 5353
pass out on $out_if proto udp to port 5353
pass in on $in_if inet proto icmp icmp-type echoreq
pass out on $out_if inet proto icmp icmp-type echoreq
pass in on $in_if inet6 proto icmp6 icmp6-type echoreq
pass out on $out_if inet6 proto icmp6 icmp6-type echoreq
"""

CONFIG = """\
[node]
id = 1
name = "pd2-fw"

[queue]
first = 0
count = {queues}
fail_open = {fail_open}
hooks = "{hooks}"
{mark}

[rules]
file = "{rules}"

[log]
level = "debug"
{pcap}

[control]
socket = "{socket}"

[metrics]
listen = "127.0.0.1:9477"
"""


def bin_dir() -> Path:
    """Where pairwalld and pairwallctl are: $PAIRWALL_BIN_DIR, else build/bin."""
    return Path(os.environ.get("PAIRWALL_BIN_DIR", REPO / "build" / "bin"))


def addr(family, which):
    return {4: {"client": CLIENT4, "server": SERVER4}, 6: {"client": CLIENT6, "server": SERVER6}}[family][which]


class Lan:
    """The three namespaces and the echo servers in client and server."""

    def __init__(self, topo):
        self.topo = topo
        self.client = topo.namespace("client")
        self.fw = topo.namespace("fw")
        self.server = topo.namespace("server")
        topo.veth(self.client, "c0", self.fw, "f0")
        topo.veth(self.fw, "f1", self.server, "s0")
        self.client.address("c0", f"{CLIENT4}/24")
        self.client.address("c0", f"{CLIENT6}/64")
        self.fw.address("f0", f"{FW_IN4}/24")
        self.fw.address("f0", f"{FW_IN6}/64")
        self.fw.address("f1", f"{FW_OUT4}/24")
        self.fw.address("f1", f"{FW_OUT6}/64")
        self.server.address("s0", f"{SERVER4}/24")
        self.server.address("s0", f"{SERVER6}/64")
        self.client.route("default", FW_IN4)
        self.client.route("default", FW_IN6)
        self.server.route("default", FW_OUT4)
        self.server.route("default", FW_OUT6)
        self.fw.enable_forwarding()
        self.python = python_with_scapy()
        for ns in (self.server, self.client):
            p = topo.spawn(ns, [self.python, str(PEER), "serve", "--tcp", str(ALLOWED), str(BLOCKED), str(REJECTED),
                                "--udp", str(UDP_PORT), "--lifetime", "300"], stdout=subprocess.PIPE)
            line = read_line(p, 10)
            if '"serving"' not in line:
                raise NetnsError(f"echo server in {ns.name} did not start: {line!r}")

    def peer(self, ns, *args, timeout=15):
        """Runs peer.py in `ns` and returns its JSON result."""
        cp = ns.exec(self.python, str(PEER), *[str(a) for a in args], timeout=timeout, check=False)
        try:
            return json.loads(cp.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            raise NetnsError(f"peer.py {' '.join(map(str, args))} in {ns.name}: {cp.stdout!r} {cp.stderr!r}")

    def connect(self, family, port, timeout=2.0, src="client", source=None, tos=None):
        """A TCP connection from `src` to the other end (from local address `source`, with TOS or
        traffic class `tos`, when given); returns peer.py's result dict."""
        ns = self.client if src == "client" else self.server
        dst = addr(family, "server" if src == "client" else "client")
        extra = (["--source", source] if source else []) + (["--tos", hex(tos)] if tos is not None else [])
        return self.peer(ns, "connect", dst, port, "--timeout", timeout, *extra)

    def udp(self, family, port=UDP_PORT, timeout=2.0, src="client"):
        ns = self.client if src == "client" else self.server
        dst = addr(family, "server" if src == "client" else "client")
        return self.peer(ns, "udp", dst, port, "--timeout", timeout)

    def ping(self, family, count=3, src="client", ident=None):
        """Echo requests from `src` to the other end (with echo identifier `ident` when given);
        returns {"sent": N, "received": M}."""
        ns = self.client if src == "client" else self.server
        dst = addr(family, "server" if src == "client" else "client")
        extra = ["--ident", ident] if ident is not None else []
        return self.peer(ns, "ping", dst, "--count", count, "--timeout", 1.0, *extra, timeout=count * 2 + 5)

    def connect_to_fw(self, family, port, timeout=2.0):
        """A TCP connection from the client to the firewall's own inside address."""
        return self.peer(self.client, "connect", FW_IN6 if family == 6 else FW_IN4, port, "--timeout", timeout)

    def hold(self, family, port=ALLOWED):
        """A long-lived connection client -> server; returns a Held handle."""
        p = self.topo.spawn(self.client, [self.python, str(PEER), "hold", addr(family, "server"), str(port),
                                          "--lifetime", "120"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        return Held(p)

    def whoami(self, ns=None):
        """Starts peer.py whoami in `ns` (the server by default) on WHOAMI_TCP and WHOAMI_UDP: every
        connection or datagram is answered with the address and port the asker was seen at."""
        ns = ns or self.server
        p = self.topo.spawn(ns, [self.python, str(PEER), "whoami", "--tcp", str(WHOAMI_TCP), "--udp", str(WHOAMI_UDP),
                                 "--lifetime", "120"], stdout=subprocess.PIPE)
        line = read_line(p, 10)
        if '"serving"' not in line:
            raise NetnsError(f"whoami server in {ns.name} did not start: {line!r}")

    def ask(self, host, port, udp=False, timeout=2.0, src="client"):
        """Asks the whoami server at host:port from `src`; returns peer.py's result: "seen" is how the
        server saw us, "local" our own end, "reply_from" the source of the answer."""
        ns = self.client if src == "client" else self.server
        return self.peer(ns, "ask", host, port, "--timeout", timeout, *(["--udp"] if udp else []))

    def watch_echo(self, family, count=3, timeout=5.0, ns=None):
        """Starts recording the echo requests that arrive in `ns` (the server by default); returns an
        EchoWatch whose result() lists them."""
        ns = ns or self.server
        p = self.topo.spawn(ns, [self.python, str(PEER), "watch-echo", "--family", str(family), "--count", str(count),
                                 "--timeout", str(timeout)], stdout=subprocess.PIPE)
        return EchoWatch(p, timeout)

    def hooks_present(self):
        """Lines of our chains still in the fw's iptables/ip6tables (filter and raw tables)."""
        found = []
        for tool in ("iptables", "ip6tables"):
            for table in ("filter", "raw"):
                out = self.fw.exec(tool, "-w", "-t", table, "-S", check=False).stdout
                found += [f"{tool} -t {table}: {line}" for line in out.splitlines() if "PAIRWALL" in line]
        return found


def read_line(p, timeout):
    r, _, _ = select.select([p.stdout], [], [], timeout)
    if not r:
        return ""
    return p.stdout.readline().decode(errors="replace")


class Held:
    """A TCP connection kept open by peer.py hold; echo() sends data over it and reports success."""

    def __init__(self, p):
        self.p = p
        line = read_line(p, 10)
        self.opened = json.loads(line) if line.strip() else {"connected": False, "result": "no answer"}

    def echo(self, timeout=5):
        self.p.stdin.write(b"go\n")
        self.p.stdin.flush()
        line = read_line(self.p, timeout)
        return json.loads(line) if line.strip() else {"echo": False, "error": "no answer"}


class EchoWatch:
    """peer.py watch-echo running in a namespace: listening once constructed; result() waits for it."""

    def __init__(self, p, timeout):
        self.p = p
        self.timeout = timeout
        line = read_line(p, 10)
        if '"listening"' not in line:
            raise NetnsError(f"watch-echo did not start: {line!r}")

    def result(self):
        """[{"src": A, "id": I, "seq": S}, ...]: the echo requests seen, in arrival order."""
        line = read_line(self.p, self.timeout + 5)
        if not line.strip():
            raise NetnsError(f"watch-echo gave no result within {self.timeout + 5} s")
        return json.loads(line)["requests"]


class Daemon:
    """pairwalld in the fw namespace, with pairwallctl to talk to it."""

    def __init__(self, lan, work: Path, fail_open=False, queues=1, rules=RULES, hooks="forward", pcap=None,
                 mark=None, sections=""):
        self.lan = lan
        self.work = work
        self.bin = bin_dir()
        for name in ("pairwalld", "pairwallctl"):
            if not (self.bin / name).exists():
                pytest.fail(f"{self.bin / name} not found: build first (cmake --preset release && cmake --build "
                            "--preset release), or set PAIRWALL_BIN_DIR")
        self.rules = work / "pf.conf"
        self.rules.write_text(rules)
        self.socket = work / "run" / "control.sock"
        self.config = work / "pairwall.toml"
        self.config.write_text(CONFIG.format(queues=queues, fail_open=str(fail_open).lower(), rules=self.rules,
                                             socket=self.socket, hooks=hooks,
                                             pcap=f'pcap_file = "{pcap}"' if pcap else "",
                                             mark=f"mark = {mark:#x}" if mark else "") + sections)
        self.log = work / "pairwalld.log"
        self.proc = None

    def start(self, timeout=15, env=None, foreground=True):
        argv = [str(self.bin / "pairwalld"), *(["-f"] if foreground else []), "-c", str(self.config)]
        self.proc = self.lan.topo.spawn(self.lan.fw, argv, log=self.log, env=env)

        def ready():
            if self.proc.poll() is not None:
                raise NetnsError(f"pairwalld exited with {self.proc.returncode} at start:\n{self.log_text()}")
            return self.ctl("status", check=False).returncode == 0

        wait_until(ready, timeout, what="pairwalld answering on its control socket")
        return self

    def ctl(self, *args, check=True, timeout=10):
        cp = self.lan.fw.exec(str(self.bin / "pairwallctl"), "-s", str(self.socket), *[str(a) for a in args],
                              check=False, timeout=timeout)
        if check and cp.returncode != 0:
            raise NetnsError(f"pairwallctl {' '.join(map(str, args))} exited {cp.returncode}: {cp.stderr.strip()}\n"
                             f"daemon log:\n{self.log_text()}")
        return cp

    def json(self, *args):
        return json.loads(self.ctl(*args, "--json").stdout)

    def decided(self, text):
        """How many packets the rule written `text` (as `rules show` writes it) has decided."""
        rules = self.json("rules", "show")["rules"]
        return int(next(r for r in rules if r["text"] == text).get("evaluations", 0))

    def reasons(self):
        """{reason: count} from `pairwallctl stats --json`."""
        return {r["reason"]: int(r["count"]) for r in self.json("stats")["reasons"]}

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, sig=signal.SIGTERM, timeout=10):
        """Signals the daemon and waits for it to exit; returns its exit status."""
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise NetnsError(f"pairwalld did not exit within {timeout} s of signal {sig}:\n{self.log_text()}")

    def log_text(self):
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no log)"


def settle():
    """Lets in-flight verdicts and counters land before reading them."""
    time.sleep(0.2)


def capture(lan, tmp_path, name, ns, iface, port):
    """tcpdump of TCP `port` on `iface` in `ns` into tmp_path/name.log, returned (log, process) once
    it captures (a capture that never started would see nothing). Stop it with lan.topo.stop()."""
    log = tmp_path / f"{name}.log"
    dump = lan.topo.spawn(ns, ["tcpdump", "-i", iface, "-n", "-S", "-l", "tcp", "port", str(port)], log=log)
    deadline = time.monotonic() + 10
    while "listening on" not in log.read_text(errors="replace"):
        assert dump.poll() is None and time.monotonic() < deadline, f"tcpdump did not start: {log.read_text()}"
        time.sleep(0.05)
    return log, dump


def echo_captured(lan, tmp_path, family, port=ALLOWED, nbytes=200_000):
    """An echo of `nbytes` from the client to the server's `port` while tcpdump captures it where it
    leaves the client (c0) and reaches the server (s0): peer.py's result, and the two logs by side
    ("client", "server"), complete once returned."""
    captures = {side: capture(lan, tmp_path, side, ns, iface, port)
                for side, ns, iface in (("client", lan.client, "c0"), ("server", lan.server, "s0"))}
    echo = lan.peer(lan.client, "connect", addr(family, "server"), port, "--bytes", nbytes, "--timeout", 10)
    time.sleep(0.5)  # the last segments into the logs
    for _, dump in captures.values():
        lan.topo.stop(dump)
    return echo, {side: log for side, (log, _) in captures.items()}


def metric(lan, name):
    """The value of the unlabelled metric `name` on the firewall's /metrics."""
    text = lan.fw.exec("curl", "-s", "http://127.0.0.1:9477/metrics").stdout
    line = next((l for l in text.splitlines() if l.startswith(name + " ")), None)
    assert line is not None, f"{name} missing from /metrics"
    return int(float(line.split()[-1]))
