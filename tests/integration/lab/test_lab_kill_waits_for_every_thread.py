"""The lab's kill -9 returns once every thread of the process has gone, its zombie reaped or not; one
slow to leave is reported with where its threads were, and one that outlasts the wait raises, saying
so. A process that will not die is emulated by sending SIGSTOP where the wait sends SIGKILL."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from pairwall_lab import netns

THREADS_THEN_SLEEP = ("import threading, time\n"
                      "for _ in range(4):\n"
                      "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
                      "print('ready', flush=True)\n"
                      "time.sleep(60)\n")


def threads_of(pid):
    return os.listdir(f"/proc/{pid}/task")


@pytest.fixture
def child():
    """A child process of this one, started by the test; killed and reaped afterwards."""
    started = []

    def start(argv):
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


@pytest.fixture
def sigkill_stops(monkeypatch):
    """The wait's SIGKILL becomes a SIGSTOP: the process stays, stopped, as if its exit stalled."""
    send = signal.pidfd_send_signal
    monkeypatch.setattr(netns.signal, "pidfd_send_signal", lambda fd, sig: send(fd, signal.SIGSTOP))


def test_returns_when_every_thread_has_gone_before_the_zombie_is_reaped(child):
    p = child([sys.executable, "-c", THREADS_THEN_SLEEP])
    assert p.stdout.readline().strip() == "ready"
    assert len(threads_of(p.pid)) == 5
    netns.kill9_and_wait(p.pid, "child", timeout=20)
    assert threads_of(p.pid) == [str(p.pid)], "the wait returned while threads were still leaving"
    assert p.poll() == -signal.SIGKILL


def test_a_process_already_gone_is_no_error(child):
    p = child(["true"])
    p.wait(timeout=10)
    netns.kill9_and_wait(p.pid, "reaped child", timeout=5)


def test_a_slow_exit_is_waited_for_and_reported(child, sigkill_stops, capsys):
    p = child(["sleep", "60"])
    # The real SIGKILL comes 2.5 s after the wait's (stopping) one: past slow_after and one report.
    threading.Timer(2.5, p.kill).start()
    start = time.monotonic()
    netns.kill9_and_wait(p.pid, "slow child", timeout=20, slow_after=1.0, report_every=1.0)
    assert 2.4 <= time.monotonic() - start < 20
    assert p.poll() == -signal.SIGKILL
    err = capsys.readouterr().err
    assert f"slow child (pid {p.pid}) took " in err
    assert f"thread {p.pid} sleep: state T" in err, err


def test_an_exit_past_the_timeout_raises_with_where_the_threads_wait(child, sigkill_stops):
    p = child(["sleep", "60"])
    start = time.monotonic()
    with pytest.raises(netns.LabError) as raised:
        netns.kill9_and_wait(p.pid, "stuck child", timeout=3, slow_after=1.0, report_every=1.0)
    assert 3 <= time.monotonic() - start < 10
    message = str(raised.value)
    assert message.startswith(f"stuck child (pid {p.pid}) still exiting 3 s after SIGKILL:")
    assert message.count(f"thread {p.pid} sleep: state T") == 2, message
