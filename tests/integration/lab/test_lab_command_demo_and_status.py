"""The command people run: `pairwall-lab up/status/drill/down` and `demo` work from the shell, print what
they promise, write the report and plot, and leave no namespace behind."""

import json
import os
import subprocess
import sys

import pytest

from lab_support import PREFIX, REPO, need_root

LAB = str(REPO / "tools" / "lab" / "pairwall-lab")


def lab_cmd(*args, timeout=120):
    return subprocess.run([sys.executable, LAB, "--prefix", PREFIX, *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def clean():
    need_root()
    yield
    lab_cmd("down")


def test_up_status_drill_down(clean, tmp_path):
    cp = lab_cmd("up", "--driver", "none", "--replace")
    assert cp.returncode == 0, cp.stderr
    st = json.loads(lab_cmd("status", "--json").stdout)
    assert st["up"] and st["driver"] == "none"
    assert st["nodes"]["fwA"]["role"] == "master" and st["nodes"]["fwB"]["role"] == "backup"
    cp = lab_cmd("drill", "--connections", "20", "--duration", "6", "--kill-after", "2", "--restore-after", "1.5",
                 "--out", str(tmp_path), "--json")
    assert cp.returncode == 0, cp.stderr
    rep = json.loads(cp.stdout)
    for key in ("connections", "survived", "failover_ms", "ping_lost", "tcp_stall_ms_max", "udp_lost", "states_a",
                "states_b", "role_changes"):
        assert key in rep
    assert rep["connections"] == 20 and rep["survived"] == 20
    assert json.loads((tmp_path / "report.json").read_text()) == rep
    cp = lab_cmd("up", "--driver", "none")
    assert cp.returncode == 1 and "already up" in cp.stderr
    cp = lab_cmd("down")
    assert cp.returncode == 0 and "removed 5 namespaces" in cp.stdout
    assert "is down" in lab_cmd("status").stdout


def test_demo_prints_summary_and_plot(clean, tmp_path):
    cp = lab_cmd("demo", "--driver", "none", "--no-build", "--connections", "20", "--duration", "6", "--kill-after",
                 "2", "--restore-after", "1.5", "--out", str(tmp_path))
    assert cp.returncode == 0, cp.stderr
    assert "20/20 connections survived" in cp.stdout
    assert "failover:" in cp.stdout and "roles before:" in cp.stdout
    if os.access("/usr/bin/python3", os.X_OK) and subprocess.run(
            ["/usr/bin/python3", "-c", "import matplotlib"], capture_output=True).returncode == 0:
        png = tmp_path / "drill.png"
        assert png.stat().st_size > 10_000
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not any(n.startswith(PREFIX) for n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                                 text=True).stdout.split())
