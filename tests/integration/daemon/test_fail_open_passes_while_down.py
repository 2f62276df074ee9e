"""With fail_open = true the hooks carry --queue-bypass: while no pairwalld listens (killed with
SIGKILL, hooks left in place), the kernel passes packets uninspected. `pairwalld --cleanup`
(systemd's ExecStopPost) then removes the hooks."""

from daemon_net import BLOCKED


def test_fail_open_passes_while_down(lan, daemon_factory):
    fw = daemon_factory(fail_open=True)
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"
    assert any("--queue-bypass" in l for l in lan.hooks_present())

    fw.proc.kill()
    fw.proc.wait(timeout=5)
    assert lan.hooks_present(), "a killed daemon cannot remove its hooks"
    assert lan.connect(4, BLOCKED)["result"] == "ok", "fail-open should pass traffic while the daemon is down"
    assert lan.connect(6, BLOCKED)["result"] == "ok"

    cp = lan.fw.exec(str(fw.bin / "pairwalld"), "--cleanup", "-c", str(fw.config), check=False)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert lan.hooks_present() == []
