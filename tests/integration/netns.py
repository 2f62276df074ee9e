"""Network namespaces for integration tests: create them, wire them with veth pairs, give them
addresses, run processes inside them, and take everything down again.

    from netns import Topology

    with Topology("pd2-") as topo:
        client = topo.namespace("client")
        fw = topo.namespace("fw")
        topo.veth(client, "c0", fw, "f0")
        client.address("c0", "10.10.1.2/24")
        fw.address("f0", "10.10.1.1/24")
        client.route("default", via="10.10.1.1")
        proc = topo.spawn(fw, ["some-daemon", "-f"], log=tmp_path / "daemon.log")
        ...
    # every process started by spawn() is killed by PID, every namespace deleted, even on failure

Names: each Topology gets a unique stem, PREFIX + the PID in hex + 'x' + a counter, so two
runs (or a leftover from a crashed run) never collide. Namespaces are named STEM-ROLE. Interface
names are chosen by the test and live only inside the namespaces: veth pairs are created directly
in their namespaces (`ip link add A netns X type veth peer name B netns Y`), so nothing is ever
added to the root namespace.

Cleanup: processes started with spawn() are stopped by PID (SIGTERM, then SIGKILL after a grace
period) and their process groups with them; namespaces are deleted after any process still
inside them (started by this Topology) is gone. `cleanup_stale(prefix)` removes namespaces a
killed test run left behind, for a conftest to call at session start.

Everything here needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN).
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterable, Optional, Sequence

_counter = itertools.count()


class NetnsError(RuntimeError):
    """A command failed; the message names the command, its exit status and its output."""


def run(cmd: Sequence[str], check: bool = True, timeout: float = 30, input: Optional[str] = None
        ) -> subprocess.CompletedProcess:
    """Runs `cmd` (no shell), captures text output, raises NetnsError on failure or timeout."""
    try:
        cp = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, input=input)
    except FileNotFoundError as e:
        raise NetnsError(f"{cmd[0]}: not found") from e
    except subprocess.TimeoutExpired as e:
        raise NetnsError(f"`{' '.join(cmd)}` did not finish within {timeout} s") from e
    if check and cp.returncode != 0:
        out = (cp.stderr or cp.stdout or "").strip()
        raise NetnsError(f"`{' '.join(cmd)}` exited {cp.returncode}: {out}")
    return cp


def list_namespaces() -> list[str]:
    cp = run(["ip", "netns", "list"], check=False)
    # Lines look like "name" or "name (id: 3)".
    return [line.split()[0] for line in cp.stdout.splitlines() if line.strip()]


def namespace_pids(name: str) -> list[int]:
    cp = run(["ip", "netns", "pids", name], check=False)
    return [int(p) for p in cp.stdout.split()] if cp.returncode == 0 else []


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cleanup_stale(prefix: str) -> list[str]:
    """Deletes namespaces named PREFIX* whose creating test run is gone (stem PID not alive), killing
    the processes inside them by PID. Returns the names removed."""
    removed = []
    for name in list_namespaces():
        if not name.startswith(prefix):
            continue
        owner = Topology.owner_pid(name, prefix)
        if owner is not None and owner != os.getpid() and pid_alive(owner):
            continue  # another live test run owns it
        for pid in namespace_pids(name):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        run(["ip", "netns", "del", name], check=False)
        removed.append(name)
    return removed


class Namespace:
    """One network namespace. Methods run ip(8) and friends inside it."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"Namespace({self.name!r})"

    def exec(self, *cmd: str, check: bool = True, timeout: float = 30, input: Optional[str] = None
             ) -> subprocess.CompletedProcess:
        return run(["ip", "netns", "exec", self.name, *cmd], check=check, timeout=timeout, input=input)

    def ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return run(["ip", "-n", self.name, *args], check=check)

    def sysctl(self, key: str, value) -> None:
        """Writes /proc/sys/KEY inside the namespace (key in dotted form)."""
        self.exec("sh", "-c", f"echo {value} > /proc/sys/{key.replace('.', '/')}")

    def read_sysctl(self, key: str) -> str:
        return self.exec("cat", f"/proc/sys/{key.replace('.', '/')}").stdout.strip()

    def up(self, ifname: str) -> None:
        self.ip("link", "set", ifname, "up")

    def down(self, ifname: str) -> None:
        self.ip("link", "set", ifname, "down")

    def address(self, ifname: str, cidr: str) -> None:
        """Adds an address; IPv6 addresses skip duplicate address detection so they are usable at once."""
        extra = ["nodad"] if ":" in cidr else []
        self.ip("addr", "add", cidr, "dev", ifname, *extra)

    def route(self, destination: str, via: str) -> None:
        family = ["-6"] if ":" in via else []
        self.ip(*family, "route", "add", destination, "via", via)

    def enable_forwarding(self) -> None:
        self.sysctl("net.ipv4.ip_forward", 1)
        self.sysctl("net.ipv6.conf.all.forwarding", 1)


class Topology:
    """A set of namespaces, links and processes that all go away together (context manager)."""

    def __init__(self, prefix: str, grace_s: float = 3.0):
        if not prefix or "/" in prefix or " " in prefix:
            raise ValueError(f"bad namespace prefix {prefix!r}")
        self.prefix = prefix
        # PID in hex, 'x', a per-process counter: unique across concurrent runs and within one run.
        self.stem = f"{prefix}{os.getpid():x}x{next(_counter)}"
        self.grace_s = grace_s
        self.namespaces: list[Namespace] = []
        self.processes: list[subprocess.Popen] = []
        self._logs: list = []

    @staticmethod
    def owner_pid(name: str, prefix: str) -> Optional[int]:
        """The PID of the test run that created namespace `name`, when it follows our naming."""
        pid_hex, sep, _ = name[len(prefix):].partition("x")
        if not sep:
            return None
        try:
            return int(pid_hex, 16)
        except ValueError:
            return None

    # -- context manager

    def __enter__(self) -> "Topology":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- namespaces and links

    def namespace(self, role: str) -> Namespace:
        """Creates namespace STEM-ROLE with its loopback up."""
        ns = Namespace(f"{self.stem}-{role}")
        run(["ip", "netns", "add", ns.name])
        self.namespaces.append(ns)
        # Addresses added later are usable at once: no duplicate address detection delay.
        ns.sysctl("net.ipv6.conf.all.accept_dad", 0)
        ns.sysctl("net.ipv6.conf.default.accept_dad", 0)
        ns.up("lo")
        return ns

    def veth(self, a: Namespace, a_if: str, b: Namespace, b_if: str, up: bool = True) -> None:
        """A veth pair with one end in each namespace, created there directly."""
        for name in (a_if, b_if):
            if len(name) > 15:
                raise ValueError(f"interface name {name!r} longer than 15 characters")
        run(["ip", "link", "add", a_if, "netns", a.name, "type", "veth", "peer", "name", b_if, "netns", b.name])
        if up:
            a.up(a_if)
            b.up(b_if)

    # -- processes

    def spawn(self, ns: Namespace, argv: Sequence[str], log: Optional[Path] = None,
              stdin=subprocess.DEVNULL, stdout=None, env: Optional[dict] = None) -> subprocess.Popen:
        """Starts argv inside `ns` in a process group of its own; output goes to `log` (or to `stdout`
        when given, e.g. subprocess.PIPE). The process is stopped by close()."""
        out = stdout
        if out is None:
            if log is not None:
                f = open(log, "ab")
                self._logs.append(f)
                out = f
            else:
                out = subprocess.DEVNULL
        p = subprocess.Popen(["ip", "netns", "exec", ns.name, *argv], stdin=stdin, stdout=out,
                             stderr=subprocess.STDOUT if out is not subprocess.PIPE else None,
                             start_new_session=True, env=env)
        self.processes.append(p)
        return p

    def stop(self, p: subprocess.Popen, sig: int = signal.SIGTERM, timeout: Optional[float] = None) -> Optional[int]:
        """Sends `sig` to process `p` (by PID) and waits up to `timeout` (default: the grace period)
        for it to exit; then SIGKILLs its process group. Returns its exit status."""
        timeout = self.grace_s if timeout is None else timeout
        if p.poll() is None:
            try:
                os.kill(p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill(p)
        return p.poll()

    def kill(self, p: subprocess.Popen) -> None:
        """SIGKILL to the process group of `p` (ours: start_new_session) and reap it."""
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        """Stops every process we started, then deletes every namespace we created. Never raises."""
        for p in reversed(self.processes):
            try:
                self.stop(p)
                # `ip netns exec` execs the program, so the PID is the program's; its children (if
                # any) are in its process group.
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            except Exception:  # noqa: BLE001 - cleanup must go on
                pass
        self.processes.clear()
        for f in self._logs:
            try:
                f.close()
            except OSError:
                pass
        self._logs.clear()
        for ns in reversed(self.namespaces):
            # Anything still inside was started through this Topology's namespaces by the test
            # (e.g. a one-off exec that timed out): kill it by PID so the namespace can go.
            for pid in namespace_pids(ns.name):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            run(["ip", "netns", "del", ns.name], check=False)
        self.namespaces.clear()


def python_with_scapy() -> str:
    """An interpreter that can import scapy, for helpers run inside namespaces that craft packets
    (Debian's python3-scapy serves /usr/bin/python3, which may not be the one running pytest)."""
    import importlib.util
    import shutil
    import sys

    if importlib.util.find_spec("scapy") is not None:
        return sys.executable
    for candidate in ("/usr/bin/python3", shutil.which("python3")):
        if candidate and os.path.exists(candidate):
            return candidate
    return sys.executable


def wait_until(predicate, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Polls `predicate` until it returns a true value (which is returned) or `timeout` passes."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise NetnsError(f"{what} not reached within {timeout} s (last value {last!r})")


def names(namespaces: Iterable[Namespace]) -> list[str]:
    return [n.name for n in namespaces]
