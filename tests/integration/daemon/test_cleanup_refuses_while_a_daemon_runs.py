"""`pairwalld --cleanup` run while a daemon answers on the control socket (by hand, or as the
ExecStopPost of a second instance that failed to start) refuses, and the running daemon keeps its
hooks and goes on filtering."""

from daemon_net import ALLOWED, BLOCKED


def test_cleanup_refuses_while_a_daemon_runs(lan, fw):
    before = lan.hooks_present()
    assert any("-A FORWARD -j PAIRWALL" in l for l in before), before

    cp = lan.fw.exec(str(fw.bin / "pairwalld"), "--cleanup", "-c", str(fw.config), check=False)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "a pairwalld answers on" in cp.stdout + cp.stderr, cp.stdout + cp.stderr
    assert lan.hooks_present() == before
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"
    assert lan.connect(4, ALLOWED)["result"] == "ok"
