"""Network namespaces, background processes and bookkeeping shared by the script suites.

Topology (created by topology_up, removed by topology_down):

    pwb-c (client 10.91.1.2-5) -- pwb-fw (10.91.1.1 | 10.91.2.1) -- pwb-s (server 10.91.2.2)
                                   sync0 10.91.9.1
                                     | veth (only with peer=True)
                                   sync0 10.91.9.2  pwb-fw2

Every name starts with `pwb-`; nothing else on the machine uses that prefix. Processes are stopped
by PID. Run whole measurements under `flock /tmp/pairwall-bench.lock` on a shared machine.
"""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

NS_C, NS_FW, NS_S, NS_FW2 = "pwb-c", "pwb-fw", "pwb-s", "pwb-fw2"
ALL_NS = (NS_C, NS_FW, NS_S, NS_FW2)
CLIENT_ADDRS = ["10.91.1.2", "10.91.1.3", "10.91.1.4", "10.91.1.5"]
SERVER = "10.91.2.2"
SYNC_ADDR = {NS_FW: "10.91.9.1", NS_FW2: "10.91.9.2"}
UDP_PORT = 9000
TCP_PORT = 5201
LOCK = "/tmp/pairwall-bench.lock"

# CPU layout. On veth a packet's forwarding work runs in the sender's softirq unless steered, so a
# slow firewall slows the sender instead of losing packets and no loss-based search can see it.
# With pinning (the default), the generator, the sink, iperf3 run on HARNESS_CPU; RPS on the
# firewall's two interfaces moves its kernel work (forwarding, netfilter, NFQUEUE) to FW_CPU, and
# firewall daemons are pinned there too: the firewall is one CPU, as a box under test would be.
PIN = {"on": False}
HARNESS_CPU = 0
FW_CPU = max(0, (os.cpu_count() or 1) - 1)


def harness(argv):
    return (["taskset", "-c", str(HARNESS_CPU)] if PIN["on"] else []) + list(argv)


def firewall(argv):
    return (["taskset", "-c", str(FW_CPU)] if PIN["on"] else []) + list(argv)


def cpu_layout():
    if not PIN["on"]:
        return "unpinned"
    return f"generator, sink, iperf3 on cpu{HARNESS_CPU}; firewall (RPS + daemons) on cpu{FW_CPU}"


def sh(*args, check=True, **kw):
    return subprocess.run(list(args), check=check, capture_output=True, text=True, **kw)


def ns(name, *args, **kw):
    return sh("ip", "netns", "exec", name, *args, **kw)


def ensure_matplotlib():
    """Re-run this script with the system interpreter when the one on PATH has no matplotlib
    (pairwall-bench starts `python3` from PATH; Debian's python3-matplotlib sits in /usr/bin)."""
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        pass
    system = "/usr/bin/python3"
    if os.path.exists(system) and os.path.realpath(sys.executable) != os.path.realpath(system) and \
            not os.environ.get("PWB_REEXEC"):
        probe = subprocess.run([system, "-c", "import matplotlib"], capture_output=True)
        if probe.returncode == 0:
            os.environ["PWB_REEXEC"] = "1"
            os.execv(system, [system] + sys.argv)
    return False


def new_figure():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(plt, fig, title, path):
    """Titles, lays out and writes `fig` as a PNG, then frees it."""
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


BUILD = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../build"))


def add_output_args(parser, suite):
    """The options every script suite takes: where the build is, and what it writes."""
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--build", default=BUILD)
    parser.add_argument("--plot", default=None, help=f"PNG to write (default lab-out/{suite}.png); 'none' for none")
    parser.add_argument("--out", default=None, help="also write the JSON here (the PNG goes beside it)")
    parser.add_argument("--quiet", action="store_true")


def logger(suite, quiet):
    """Progress lines on stderr, prefixed with the suite's name; nothing with --quiet."""
    if quiet:
        return lambda msg: None
    return lambda msg: print(f"{suite}: {msg}", file=sys.stderr, flush=True)


def write_outputs(results, args, suite, draw, log):
    """--out's JSON, then the PNG beside it (or --plot's, or lab-out/<suite>.png): draw(path)."""
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    png = args.plot or (os.path.splitext(args.out)[0] + ".png" if args.out else default_plot_path(f"{suite}.png"))
    if png == "none":
        return
    try:
        draw(png)
        log(f"plot: {png}")
    except ImportError:
        log("plot: matplotlib not installed, no PNG")


def default_plot_path(name):
    """lab-out/<name> at the top of the work tree when it exists (git-ignored), else the cwd."""
    top = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
    out = os.path.join(top, "lab-out")
    if os.path.isdir(os.path.join(top, ".git")) or os.path.isfile(os.path.join(top, ".git")):
        os.makedirs(out, exist_ok=True)
        return os.path.join(out, name)
    return os.path.join(os.getcwd(), name)


def topology_down():
    for n in ALL_NS:
        sh("ip", "netns", "del", n, check=False)


def topology_up(peer=False, pin=True):
    topology_down()
    PIN["on"] = pin and FW_CPU != HARNESS_CPU
    names = (NS_C, NS_FW, NS_S) + ((NS_FW2,) if peer else ())
    for n in names:
        sh("ip", "netns", "add", n)
        ns(n, "ip", "link", "set", "lo", "up")
    sh("ip", "link", "add", "pwb-c0", "netns", NS_C, "type", "veth", "peer", "name", "pwb-fw0", "netns", NS_FW)
    sh("ip", "link", "add", "pwb-s0", "netns", NS_S, "type", "veth", "peer", "name", "pwb-fw1", "netns", NS_FW)
    for a in CLIENT_ADDRS:
        ns(NS_C, "ip", "addr", "add", a + "/24", "dev", "pwb-c0")
    ns(NS_C, "ip", "link", "set", "pwb-c0", "up")
    ns(NS_C, "ip", "route", "add", "default", "via", "10.91.1.1")
    ns(NS_FW, "ip", "addr", "add", "10.91.1.1/24", "dev", "pwb-fw0")
    ns(NS_FW, "ip", "addr", "add", "10.91.2.1/24", "dev", "pwb-fw1")
    ns(NS_FW, "ip", "link", "set", "pwb-fw0", "up")
    ns(NS_FW, "ip", "link", "set", "pwb-fw1", "up")
    ns(NS_FW, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    ns(NS_S, "ip", "addr", "add", SERVER + "/24", "dev", "pwb-s0")
    ns(NS_S, "ip", "link", "set", "pwb-s0", "up")
    ns(NS_S, "ip", "route", "add", "default", "via", "10.91.2.1")
    if peer:
        sh("ip", "link", "add", "sync0", "netns", NS_FW, "type", "veth", "peer", "name", "sync0", "netns", NS_FW2)
        for n in (NS_FW, NS_FW2):
            ns(n, "ip", "addr", "add", SYNC_ADDR[n] + "/30", "dev", "sync0")
            ns(n, "ip", "link", "set", "sync0", "up")
    if PIN["on"]:
        mask = format(1 << FW_CPU, "x")
        for dev in ("pwb-fw0", "pwb-fw1"):
            ns(NS_FW, "sh", "-c", f"echo {mask} > /sys/class/net/{dev}/queues/rx-0/rps_cpus")
    ns(NS_C, "ping", "-c", "1", "-W", "2", SERVER)


def flush_fw(name=NS_FW):
    for tool in ("iptables", "ip6tables"):
        ns(name, tool, "-F", check=False)
        ns(name, tool, "-X", check=False)
        ns(name, tool, "-P", "FORWARD", "ACCEPT", check=False)
    ns(name, "ipset", "destroy", check=False)
    ns(name, "conntrack", "-F", check=False)


class Background:
    """A process in a namespace, started and stopped by PID; `ready` is polled until true."""

    def __init__(self, netns, argv, ready, timeout=30, log=None, on_harness=False):
        self.log = log
        out = open(log, "w") if log else subprocess.DEVNULL
        self.proc = subprocess.Popen(["ip", "netns", "exec", netns] + (harness(argv) if on_harness else firewall(argv)), stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        if log:
            out.close()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited {self.proc.returncode}: {self.tail()}")
            if ready():
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{argv[0]} did not become ready in {timeout}s: {self.tail()}")

    def tail(self):
        if not self.log:
            return ""
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def nfqueue_installed(netns=NS_FW):
    return "NFQUEUE" in ns(netns, "iptables", "-S", check=False).stdout


def nfqueue_drops():
    """Sum of queue-full and socket drops over the firewall's queues (columns 6 and 7)."""
    out = ns(NS_FW, "cat", "/proc/net/netfilter/nfnetlink_queue", check=False).stdout
    total = 0
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 7:
            total += int(cols[5]) + int(cols[6])
    return total


PAIRWALL_CONFIG = """\
[node]
id = {node_id}
name = "{name}"
[queue]
first = 0
count = {queues}
{exclude}
[rules]
file = "{rules}"
[control]
socket = "{socket}"
[metrics]
listen = ""
{sync}
"""

SYNC_SECTION = """\
[sync]
interface = "sync0"
address = "{own}"
peer = "{peer}"
port = 8370
key_file = "{key}"
{extra}"""


class Pairwalld(Background):
    """pairwalld in a namespace with the given rule text; with `sync_key`, joined to its peer over sync0."""

    def __init__(self, build, workdir, rules_text, netns=NS_FW, queues=1, sync_key=None, node_id=1,
                 wait_hooks=True, timeout=60, on_harness=False, sync_extra=""):
        self.build, self.netns = build, netns
        tag = f"{netns}-{queues}"
        rules = os.path.join(workdir, f"rules-{tag}.conf")
        with open(rules, "w") as f:
            f.write(rules_text)
        self.socket = os.path.join(workdir, f"control-{tag}.sock")
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        sync, exclude = "", ""
        if sync_key:
            peer = NS_FW2 if netns == NS_FW else NS_FW
            sync = SYNC_SECTION.format(own=SYNC_ADDR[netns], peer=SYNC_ADDR[peer], key=sync_key, extra=sync_extra)
            exclude = 'exclude_interfaces = ["sync0"]'
        self.config = os.path.join(workdir, f"pairwall-{tag}.toml")
        with open(self.config, "w") as f:
            f.write(PAIRWALL_CONFIG.format(node_id=node_id, name=netns, queues=queues, exclude=exclude,
                                           rules=rules, socket=self.socket, sync=sync))
        ready = (lambda: nfqueue_installed(netns) and self.ctl("status").returncode == 0) if wait_hooks else \
            (lambda: self.ctl("status").returncode == 0)
        super().__init__(netns, [f"{build}/bin/pairwalld", "-f", "-c", self.config], ready, timeout=timeout,
                         log=os.path.join(workdir, f"pairwalld-{tag}.log"), on_harness=on_harness)

    def ctl(self, *args, timeout=60):
        return ns(self.netns, f"{self.build}/bin/pairwallctl", "-s", self.socket, *map(str, args), check=False,
                  timeout=timeout)

    def json(self, *args):
        cp = self.ctl("--json", *args)
        return json.loads(cp.stdout) if cp.returncode == 0 else {}

    def stop(self):
        super().stop()
        # The hooks a fail-closed daemon leaves behind, however it ended, would drop the next path's
        # traffic.
        ns(self.netns, f"{self.build}/bin/pairwalld", "--cleanup", "-c", self.config, check=False)


class Steal:
    """mpstat %steal and %idle sampled every second in the background, summarised per label."""

    def __init__(self):
        self.samples = []  # (time, steal, idle)
        self.proc = subprocess.Popen(["mpstat", "1", "3600"], stdout=subprocess.PIPE, text=True,
                                     env=dict(os.environ, LC_ALL="C"))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        header = None
        for line in self.proc.stdout:
            cols = line.split()
            if "%steal" in cols:
                header = cols
                continue
            if header and len(cols) == len(header) and cols[1] == "all":
                try:
                    self.samples.append((time.time(), float(cols[header.index("%steal")]),
                                         float(cols[header.index("%idle")])))
                except ValueError:
                    pass

    def between(self, start, end):
        s = [x for x in self.samples if start <= x[0] <= end + 1]
        if not s:
            return {}
        return {"steal_pct": round(sum(x[1] for x in s) / len(s), 1), "steal_pct_max": max(x[1] for x in s)}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


def check_root(suite, tools=()):
    import shutil
    if os.geteuid() != 0:
        sys.exit(f"pairwall-bench {suite}: needs root (network namespaces, iptables)")
    for tool in tools:
        if not shutil.which(tool):
            sys.exit(f"pairwall-bench {suite}: {tool} not found (tools/install-deps.sh installs it)")


def udp_snmp(netns):
    """The namespace's UDP counters from /proc/net/snmp, as a dict."""
    lines = [l.split() for l in ns(netns, "cat", "/proc/net/snmp").stdout.splitlines() if l.startswith("Udp:")]
    return dict(zip(lines[0][1:], map(int, lines[1][1:])))


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            cpu = m.group(1) if m else ""
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "kernel": os.uname().release}
