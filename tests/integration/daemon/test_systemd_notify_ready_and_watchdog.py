"""The sd_notify protocol as systemd sees it (Type=notify, WatchdogSec): READY=1 once the queues are
bound and the hooks installed, WATCHDOG=1 at half the watchdog interval, RELOADING=1 then READY=1
around a SIGHUP reload, STOPPING=1 on SIGTERM. Under the journal (JOURNAL_STREAM set) every log
line carries a syslog priority prefix instead of a timestamp."""

import os
import signal
import socket
import time

from daemon_net import Daemon


def collect(sock, seconds):
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            out.append(sock.recv(4096).decode())
        except socket.timeout:
            break
    return out


def test_systemd_notify_ready_and_watchdog(lan, tmp_path):
    notify_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify_path))
    env = dict(os.environ, NOTIFY_SOCKET=str(notify_path), WATCHDOG_USEC="1000000", JOURNAL_STREAM="8:12345")
    fw = Daemon(lan, tmp_path)
    try:
        fw.start(env=env, foreground=False)
        messages = collect(sock, 2.5)
        assert messages, "no sd_notify message at all"
        assert messages[0].startswith("READY=1\nSTATUS=")
        assert lan.hooks_present(), "READY=1 must come after the hooks are installed"
        watchdogs = sum(m == "WATCHDOG=1" for m in messages)
        assert 3 <= watchdogs <= 7, messages  # every 0.5 s over 2.5 s

        fw.send_signal(signal.SIGHUP)
        messages = collect(sock, 1.0)
        assert "RELOADING=1" in messages, messages
        assert any(m.startswith("READY=1") for m in messages[messages.index("RELOADING=1"):]), messages

        assert fw.stop(signal.SIGTERM) == 0
        assert "STOPPING=1" in collect(sock, 0.5)
    finally:
        sock.close()
        if fw.proc and fw.proc.poll() is None:
            lan.topo.stop(fw.proc)

    lines = [l for l in fw.log.read_text().splitlines() if l]
    assert lines and all(l[:3] in ("<6>", "<7>", "<4>", "<3>") for l in lines), lines[:5]
    assert any(l.startswith("<6>") and "SIGHUP: rules reloaded" in l for l in lines)
