"""One lab instance: its namespaces, run directory, processes and driver.

A lab is named by its namespace prefix ("pwl-" by default; tests use their own). Everything it makes is
recorded under /run/pairwall-lab/PREFIX/ (configs, pid files, logs, lab.json); `down` also finds what a
crashed run left behind by the namespace names alone (`ip netns pids`), so it needs none of those files.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from . import drivers, netns, topology
from .netns import LabError

PKG_DIR = Path(__file__).resolve().parent
REPO = PKG_DIR.parents[2]
DEFAULT_PREFIX = "pwl-"
RUN_ROOT = Path("/run/pairwall-lab")


class Lab:
    def __init__(self, prefix=DEFAULT_PREFIX, bin_dir=None, run_dir=None, driver=None, advbase_ms=200, nat=False,
                 defer=False, modulate=False, synproxy=False, scrub_tcp=False, rdr=False, ipv6=False):
        if not prefix or len(prefix) > 8 or not prefix.replace("-", "").isalnum():
            raise LabError(f"prefix {prefix!r}: use 1-8 letters, digits or '-'")
        self.prefix = prefix
        self.ns = topology.ns_names(prefix)
        self.run_dir = Path(run_dir) if run_dir else RUN_ROOT / prefix
        # FIFOs (keepalived's notify FIFO) live beside the run directory, not in it, so that the run files
        # can be copied as plain files while the lab runs.
        self.fifo_dir = self.run_dir.with_name(self.run_dir.name + ".fifos")
        self.bin_dir = Path(bin_dir) if bin_dir else REPO / "build" / "bin"
        self.pkg_dir = PKG_DIR
        self.python = sys.executable or "/usr/bin/python3"
        self.advbase_ms = advbase_ms
        # nat: the firewalls' rules translate the inside to the outside VIP (drivers.NAT_RULES).
        self.nat = nat
        # defer: pairwalld holds a new state's first packet until the peer has its insert ([sync] defer).
        self.defer = defer
        # modulate: the rules keep their states with `modulate state` (TCP sequence numbers shifted).
        self.modulate = modulate
        # synproxy: the rules keep their states with `synproxy state` (the firewall completes each TCP
        # handshake before the server sees it).
        if modulate and synproxy:
            raise LabError("--modulate and --synproxy are two ways of keeping state: choose one")
        self.synproxy = synproxy
        # scrub_tcp: the rules scrub the inside's TCP states with `reassemble tcp` (TTLs raised, timestamps
        # shifted); it combines with every way of keeping state.
        self.scrub_tcp = scrub_tcp
        # rdr: the rules redirect topology.SERVICE_ADDR to the server before routing (drivers.RDR_RULES), and
        # the drill's client dials that address.
        self.rdr = rdr
        # ipv6: the LANs, the VIPs and the drill's traffic are dual stack (topology.build).
        self.ipv6 = ipv6
        self.driver_name = driver
        self._driver = None
        saved = self.load_state()
        if saved and driver is None:
            self.driver_name = saved.get("driver", "none")
            self.advbase_ms = saved.get("advbase_ms", advbase_ms)
            self.bin_dir = Path(saved.get("bin_dir", self.bin_dir))
            self.nat = saved.get("nat", nat)
            self.defer = saved.get("defer", defer)
            self.modulate = saved.get("modulate", modulate)
            self.synproxy = saved.get("synproxy", synproxy)
            self.scrub_tcp = saved.get("scrub_tcp", scrub_tcp)
            self.rdr = saved.get("rdr", rdr)
            self.ipv6 = saved.get("ipv6", ipv6)

    # -- persistent description of a lab that is up

    @property
    def state_file(self):
        return self.run_dir / "lab.json"

    def load_state(self):
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None

    def save_state(self):
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps({"prefix": self.prefix, "driver": self.driver_name,
                                               "advbase_ms": self.advbase_ms, "bin_dir": str(self.bin_dir),
                                               "nat": self.nat, "defer": self.defer, "modulate": self.modulate,
                                               "synproxy": self.synproxy, "scrub_tcp": self.scrub_tcp,
                                               "rdr": self.rdr, "ipv6": self.ipv6, "namespaces": self.ns,
                                               "created": time.time()},
                                              indent=1))

    @property
    def driver(self):
        if self._driver is None:
            self._driver = drivers.make(self, self.driver_name or "none")
        return self._driver

    def bin(self, name):
        return str(self.bin_dir / name)

    def exists(self):
        present = set(netns.list_netns())
        return [n for n in self.ns.values() if n in present]

    # -- processes started by the lab, one pid file each

    def pid_file(self, node, what):
        return self.run_dir / node / f"{what}.lab-pid"

    def log_file(self, node, what):
        return self.run_dir / node / f"{what}.log"

    def spawn(self, node, what, cmd, stdout=None):
        """Starts `cmd` in `node`'s namespace in its own session; records its pid. Returns the Popen."""
        (self.run_dir / node).mkdir(parents=True, exist_ok=True)
        log = open(self.log_file(node, what), "ab")
        # `ip netns exec` execs the command, so the pid is the command's own.
        p = subprocess.Popen(["ip", "netns", "exec", self.ns[node], *cmd], stdin=subprocess.DEVNULL,
                             stdout=stdout if stdout is not None else log, stderr=log, start_new_session=True)
        log.close()
        self.pid_file(node, what).write_text(str(p.pid))
        return p

    def pid_of(self, node, what):
        try:
            return int(self.pid_file(node, what).read_text())
        except (OSError, ValueError):
            return None

    def process_alive(self, node, what):
        pid = self.pid_of(node, what)
        return pid is not None and netns.pid_alive(pid) and pid in netns.netns_pids(self.ns[node])

    def kill9(self, node, what):
        pid = self.pid_of(node, what)
        if pid is None or not netns.pid_alive(pid):
            raise LabError(f"{what} in {self.ns[node]} is not running (pid file {self.pid_file(node, what)})")
        netns.kill9_and_wait(pid, f"{what} in {self.ns[node]}")

    def log_tail(self, node, what, lines=20):
        try:
            return "\n".join(self.log_file(node, what).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # -- commands

    def up(self, replace=False):
        left = self.exists()
        if left:
            if not replace:
                raise LabError(f"lab {self.prefix!r} is already up ({', '.join(left)}): run "
                               f"`pairwall-lab down{self._prefix_arg()}` first")
            self.down()
        if self.nat and not isinstance(self.driver, drivers.PairwalldDriver):
            raise LabError(f"--nat translates in pairwalld's rules: it needs driver builtin, keepalived or "
                           f"scripted, not {self.driver.name}")
        if self.defer and not isinstance(self.driver, drivers.PairwalldDriver):
            raise LabError(f"--defer is pairwalld's sync option: it needs driver builtin, keepalived or "
                           f"scripted, not {self.driver.name}")
        for flag, on in (("--modulate", self.modulate), ("--synproxy", self.synproxy),
                         ("--scrub-tcp", self.scrub_tcp), ("--rdr", self.rdr)):
            if on and not isinstance(self.driver, drivers.PairwalldDriver):
                raise LabError(f"{flag} is pairwalld's rule option: it needs driver builtin, keepalived or "
                               f"scripted, not {self.driver.name}")
        if self.ipv6 and not (isinstance(self.driver, drivers.PairwalldDriver) and self.driver.elects):
            raise LabError(f"--ipv6 needs a pair that moves its IPv6 VIPs itself: driver builtin or keepalived, "
                           f"not {self.driver.name}")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.save_state()
        try:
            topology.build(self.prefix, ipv6=self.ipv6)
            self.driver.start()
        except BaseException:
            self.down()
            raise
        return self.status()

    def _prefix_arg(self):
        return "" if self.prefix == DEFAULT_PREFIX else f" --prefix {self.prefix}"

    def down(self):
        """Removes every process, namespace and run file of this lab. Safe to call at any time."""
        removed = {"pids": [], "namespaces": []}
        for name in self.ns.values():
            removed["pids"] += netns.stop_pids(netns.netns_pids(name))
        # Processes recorded by pid file that are no longer in a namespace (e.g. `ip netns exec` wrappers).
        for pf in self.run_dir.glob("*/*.lab-pid") if self.run_dir.exists() else []:
            try:
                pid = int(pf.read_text())
            except (OSError, ValueError):
                continue
            if netns.pid_alive(pid) and _cmdline_mentions(pid, self.prefix):
                removed["pids"] += netns.stop_pids([pid])
        for name in self.exists():
            netns.run(["ip", "netns", "del", name], check=False)
            removed["namespaces"].append(name)
        for d in (self.run_dir, self.fifo_dir):
            if d.exists():
                for p in sorted(d.rglob("*"), reverse=True):
                    if p.is_dir():
                        p.rmdir()
                    else:
                        p.unlink()
                d.rmdir()
        return removed

    def status(self):
        if not self.exists():
            return {"prefix": self.prefix, "up": False}
        st = {"prefix": self.prefix, "up": True, "driver": self.driver.name, "advbase_ms": self.advbase_ms,
              "nat": self.nat, "defer": self.defer, "modulate": self.modulate, "synproxy": self.synproxy,
              "scrub_tcp": self.scrub_tcp, "rdr": self.rdr, "ipv6": self.ipv6,
              "namespaces": self.ns, "vips": topology.vip_holders(self.prefix)}
        nodes = self.driver.node_status()
        states = self.driver.states()
        for n, s in nodes.items():
            s["states"] = states.get(n)
        st["nodes"] = nodes
        return st

    def dialled_address(self):
        """Where the drill's client sends its traffic: the server, or with `rdr` the address the firewalls
        redirect to it."""
        return topology.SERVICE_ADDR if self.rdr else topology.SERVER_ADDR

    def dialled_address6(self):
        """Where the drill's client sends its IPv6 traffic (`ipv6`), else None: the server (rdr is IPv4's)."""
        return topology.SERVER_ADDR6 if self.ipv6 else None

    def master(self):
        roles = self.driver.roles()
        masters = [n for n, r in roles.items() if r == "master"]
        if len(masters) != 1:
            raise LabError(f"expected exactly one master, roles are {roles}")
        return masters[0]


def _cmdline_mentions(pid, text):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return text.encode() in f.read()
    except OSError:
        return False
