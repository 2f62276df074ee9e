"""Thin helpers over ip(8), sysctl and processes inside network namespaces.

Every command names its namespace explicitly (`ip -n NS ...`, `ip netns exec NS ...`): nothing here
changes the root namespace.
"""

import json
import os
import select
import signal
import subprocess
import sys
import time


class LabError(RuntimeError):
    """A failure an operator can act on; the message says what failed and what to look at."""


class FeatureMissing(LabError):
    """pairwalld runs but reports that a service the lab needs (failover, sync) is not in this build."""


def run(cmd, check=True, timeout=30, capture=True):
    """Runs a command (list) and returns CompletedProcess; raises LabError with its stderr on failure."""
    try:
        cp = subprocess.run(cmd, capture_output=capture, text=True, timeout=timeout)
    except FileNotFoundError as e:
        raise LabError(f"{cmd[0]}: not found (run tools/install-deps.sh)") from e
    except subprocess.TimeoutExpired as e:
        raise LabError(f"`{' '.join(cmd)}` did not finish within {timeout} s") from e
    if check and cp.returncode != 0:
        err = (cp.stderr or cp.stdout or "").strip()
        raise LabError(f"`{' '.join(cmd)}` failed ({cp.returncode}): {err}")
    return cp


def ip(ns, *args, check=True):
    return run(["ip", "-n", ns, *args], check=check)


def nsexec(ns, *cmd, check=True, timeout=30):
    return run(["ip", "netns", "exec", ns, *cmd], check=check, timeout=timeout)


def sysctl(ns, key, value):
    # Written through /proc inside the namespace; `sysctl` may be missing on a minimal system.
    nsexec(ns, "sh", "-c", f"echo {value} > /proc/sys/{key.replace('.', '/')}")


def list_netns():
    cp = run(["ip", "-j", "netns", "list"], check=False)
    if cp.returncode != 0 or not cp.stdout.strip():
        return []
    return [n["name"] for n in json.loads(cp.stdout)]


def netns_pids(ns):
    cp = run(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in cp.stdout.split()] if cp.returncode == 0 else []


# /proc/PID/stat's fields after the parenthesized name, which may hold spaces and parentheses:
# fields[0] is the state (field 3), fields[36] the CPU it last ran on (field 39, `processor`).
def _stat_fields(text):
    return text.rsplit(")", 1)[-1].split()


_LAST_CPU = 36


def _thread_report(pid):
    """Where each remaining thread of `pid` waits: state, wait channel, kernel stack, and its CPU time
    (schedstat: ns on CPU, ns waiting to run, times run), which, in two reports apart, tells a
    thread that burns CPU in the kernel from one that waits for it."""
    lines = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:
        return "(gone)"
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        parts = []
        for name in ("comm", "stat", "wchan", "stack", "schedstat"):
            try:
                with open(f"{base}/{name}", errors="replace") as f:
                    text = f.read().strip()
            except OSError as e:
                text = f"({e.strerror})"
            if name == "stat":
                # A thread that leaves while it is read gives an empty or cut-short line.
                fields = _stat_fields(text)
                on_cpu = f" on cpu {fields[_LAST_CPU]}" if len(fields) > _LAST_CPU else ""
                text = fields[0] + on_cpu if fields else "(gone)"
            parts.append(text.replace("\n", " | "))
        lines.append(f"  thread {tid} {parts[0]}: state {parts[1]}, wchan {parts[2]}, stack {parts[3]}, "
                     f"schedstat {parts[4]}")
    return "\n".join(lines)


def _exited_within(pidfd, seconds):
    """Sleeps in the kernel until the process behind `pidfd` has no thread left (a pidfd turns
    readable then, whether or not its zombie was reaped), or until `seconds` have passed."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(max(0, int(seconds * 1000))))


def kill9_and_wait(pid, what, timeout=180, slow_after=2.0, report_every=10.0):
    """SIGKILLs `pid` and waits until every thread has exited (its sockets closed), so that a
    restart finds its addresses free. A killed daemon usually takes milliseconds; on a loaded host
    the kernel can take seconds to tear down its netlink queues and memory.

    The wait sleeps on a pidfd rather than polling /proc. On 2-vCPU guests, a killed daemon's last
    thread was seen four times to stay runnable with its CPU time standing still while an earlier
    wait read /proc every 10 ms (after 60 s, then 180 s three times, with the thread moved to
    another CPU and every CPU woken every two seconds the last two times); each time it left
    within two seconds of that polling stopping at the wait's end. The cause is not known. A slow
    exit is reported on stderr with where the threads were at `slow_after` seconds, read again
    every `report_every` seconds after a quiet wait, as at the end of those stalls; one past
    `timeout` raises LabError with the last two reports."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            return
        start = time.monotonic()
        if _exited_within(pidfd, slow_after):
            return
        first_report = report = _thread_report(pid)
        while not _exited_within(pidfd, min(report_every, start + timeout - time.monotonic())):
            if time.monotonic() >= start + timeout:
                raise LabError(f"{what} (pid {pid}) still exiting {timeout} s after SIGKILL:\n{report}\n"
                               f"now:\n{_thread_report(pid)}")
            report = _thread_report(pid)
        print(f"{what} (pid {pid}) took {time.monotonic() - start:.1f} s to exit after SIGKILL; its "
              f"threads at {slow_after:g} s:\n{first_report}", file=sys.stderr, flush=True)
    finally:
        os.close(pidfd)


def parent_pid(pid):
    """The parent of `pid` (/proc/PID/stat's fourth field, after the parenthesized name), or None when it is
    gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0): reap it if it is ours; one whose parent is gone (the `up` that
    # started it exited) may wait long for init to reap it, and is dead all the same.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done != 0:
            return False
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def stop_pids(pids, grace=3.0):
    """SIGTERM each pid, then SIGKILL whatever is left after `grace` seconds. Returns the pids killed."""
    pids = [p for p in pids if p > 1 and p != os.getpid()]
    for p in pids:
        try:
            os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
    for p in pids:
        if pid_alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
    return pids


def addresses(ns):
    """{ifname: {"up": bool, "carrier": bool, "addrs": ["10.0.0.1/24", ...]}} of a namespace."""
    cp = ip(ns, "-j", "addr", "show", check=False)
    if cp.returncode != 0 or not cp.stdout.strip():
        return {}
    out = {}
    for link in json.loads(cp.stdout):
        flags = link.get("flags", [])
        out[link["ifname"]] = {
            "up": "UP" in flags,
            "carrier": "LOWER_UP" in flags,
            "addrs": [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", [])],
        }
    return out
