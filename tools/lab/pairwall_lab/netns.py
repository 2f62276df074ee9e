"""Thin helpers over ip(8), sysctl and processes inside network namespaces.

Every command names its namespace explicitly (`ip -n NS ...`, `ip netns exec NS ...`): nothing here
changes the root namespace.
"""

import json
import os
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


def fully_exited(pid):
    """True once every thread of `pid` has exited, so its sockets are closed. A killed
    multi-threaded process can show its leader as a zombie while other threads are still leaving
    the kernel and still hold the process's files."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        with open(f"/proc/{pid}/stat") as f:
            state = _stat_fields(f.read())[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X") and len(tasks) <= 1


# /proc/PID/stat's fields after the parenthesized name, which may hold spaces and parentheses:
# fields[0] is the state (field 3), fields[36] the CPU it last ran on (field 39, `processor`).
def _stat_fields(text):
    return text.rsplit(")", 1)[-1].split()


_LAST_CPU = 36


def _thread_report(pid):
    """Where each remaining thread of `pid` waits: state, wait channel, kernel stack, and its CPU time
    (schedstat: ns on CPU, ns waiting to run, times run), read twice a second apart, which tells a
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


def _move_threads(pid):
    """Moves each remaining thread of `pid` off the CPU it last ran on, where this process may use
    another: a runnable thread that no CPU picks up is put on another CPU's run queue."""
    cpus = os.sched_getaffinity(0)
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                last_cpu = int(_stat_fields(f.read())[_LAST_CPU])
            others = cpus - {last_cpu}
            if others:
                os.sched_setaffinity(int(tid), others)
        except (OSError, IndexError, ValueError):
            pass


def _wake_every_cpu():
    """Starts a no-op process pinned to each CPU this process may use, so that every CPU enters its
    scheduler. Returns the processes, for the caller to reap; one pinned to a CPU that does not run
    is left to finish later rather than waited for."""
    started = []
    for cpu in sorted(os.sched_getaffinity(0)):
        try:
            started.append(subprocess.Popen(["taskset", "-c", str(cpu), "true"], stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL))
        except OSError:
            pass
    return started


def kill9_and_wait(pid, what, timeout=180, slow_after=2.0):
    """SIGKILLs `pid` and waits until every thread has exited (its sockets closed), so that a
    restart finds its addresses free. A killed daemon usually takes milliseconds; on a loaded host
    the kernel can take seconds to tear down its netlink queues and memory.

    On 2-vCPU guests of a busy host, a killed daemon's last thread was seen three times to stay
    runnable with its CPU time standing still until the wait ended (after 60 s, then 180 s twice),
    and each time it left within a second of the thread report that followed. What ended those
    stalls is not known, so once the exit takes longer than `slow_after` seconds the wait repeats,
    every two seconds, what happened then: it reads the threads' report and pauses its polling for
    a second. It also makes every CPU schedule (_wake_every_cpu), and moves the threads left to
    another CPU (_move_threads): the stalled thread was still on a run queue. A slow exit is
    reported on stderr with the first report; one past `timeout` raises LabError with where the
    threads still wait."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    start = time.monotonic()
    deadline = start + timeout
    slow_report = None
    wakers = []
    next_nudge = start + slow_after
    while not fully_exited(pid) and time.monotonic() < deadline:
        if time.monotonic() < next_nudge:
            time.sleep(0.01)
            continue
        report = _thread_report(pid)
        slow_report = slow_report or report
        wakers = [w for w in wakers if w.poll() is None] + _wake_every_cpu()
        _move_threads(pid)
        time.sleep(1)
        next_nudge = time.monotonic() + 1
    if slow_report is not None:
        waited = time.monotonic() - start
        print(f"{what} (pid {pid}) took {waited:.1f} s to exit after SIGKILL; its threads at "
              f"{slow_after:g} s:\n{slow_report}", file=sys.stderr, flush=True)
    if not fully_exited(pid):
        first = _thread_report(pid)
        time.sleep(1)
        raise LabError(f"{what} (pid {pid}) still exiting {timeout} s after SIGKILL:\n{first}\n"
                       f"one second later:\n{_thread_report(pid)}")
    for waker in wakers:
        try:
            waker.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass


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
