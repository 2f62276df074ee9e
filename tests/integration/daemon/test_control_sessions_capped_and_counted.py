"""The control socket holds at most 16 sessions: a 17th connection is answered with an error and
closed, the daemon goes on answering once one closes, and /metrics counts the refusal
(pairwall_connections_refused_total{server="control"}), so that an operator sees health checks
that pile up."""

import contextlib
import socket
import time


def refused_count(lan, server):
    metrics = lan.fw.exec("curl", "-s", "http://127.0.0.1:9477/metrics").stdout
    prefix = f'pairwall_connections_refused_total{{server="{server}"}} '
    line = next((l for l in metrics.splitlines() if l.startswith(prefix)), None)
    assert line is not None, metrics[-2000:]
    return int(line.split()[-1])


def test_control_sessions_capped_and_counted(lan, fw):
    assert refused_count(lan, "control") == 0
    with contextlib.ExitStack() as stack:
        held = []
        for _ in range(16):
            s = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
            s.connect(str(fw.socket))
            held.append(s)
        # The daemon accepts asynchronously: give it the 16 before the one too many.
        deadline = time.monotonic() + 5
        while fw.ctl("status", check=False).returncode == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        refused = fw.ctl("status", check=False)
        assert refused.returncode != 0, refused.stdout
        assert "too many control connections" in refused.stdout + refused.stderr, refused.stdout + refused.stderr
        assert refused_count(lan, "control") >= 1
    # Closed: a session is free again.
    deadline = time.monotonic() + 5
    while fw.ctl("status", check=False).returncode != 0:
        assert time.monotonic() < deadline, "the control socket did not answer once the sessions closed"
        time.sleep(0.05)
    assert refused_count(lan, "metrics") == 0
