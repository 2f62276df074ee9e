"""`pairwalld --cleanup` and `pairwalld --remove-hooks` run while a daemon answers on the control
socket (by hand, as the ExecStopPost of a second instance that failed to start, or as the ExecStop
of pairwall-hooks.service) refuse, and the running daemon keeps its hooks and goes on filtering."""

import pytest

from daemon_net import ALLOWED, BLOCKED


@pytest.mark.parametrize("mode", ["--cleanup", "--remove-hooks"])
def test_refused_while_a_daemon_runs(lan, fw, mode):
    before = lan.hooks_present()
    assert any("-A FORWARD -j PAIRWALL" in l for l in before), before

    cp = lan.fw.exec(str(fw.bin / "pairwalld"), mode, "-c", str(fw.config), check=False)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "a pairwalld answers on" in cp.stdout + cp.stderr, cp.stdout + cp.stderr
    assert lan.hooks_present() == before
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"
    assert lan.connect(4, ALLOWED)["result"] == "ok"
