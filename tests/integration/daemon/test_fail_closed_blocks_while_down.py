"""With fail_open = false (the default) a killed pairwalld leaves hooks without --queue-bypass:
nothing passes, not even what the rules allowed, until a daemon listens again or --cleanup runs.
systemd runs --cleanup after the crash too (ExecStopPost, SERVICE_RESULT=signal): it keeps the
hooks then, or the node would pass everything unfiltered until the restart."""

from daemon_net import ALLOWED


def test_fail_closed_blocks_while_down(lan, daemon_factory):
    fw = daemon_factory(fail_open=False)
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert lan.ping(4, count=1)["received"] == 1
    hooks = lan.hooks_present()
    assert not any("--queue-bypass" in l for l in hooks)

    fw.proc.kill()
    fw.proc.wait(timeout=5)
    assert lan.connect(4, ALLOWED, timeout=1.5)["result"] == "timeout"
    assert lan.connect(6, ALLOWED, timeout=1.5)["result"] == "timeout"
    assert lan.ping(4, count=2)["received"] == 0

    cleanup = [str(fw.bin / "pairwalld"), "--cleanup", "-c", str(fw.config)]
    cp = lan.fw.exec("env", "SERVICE_RESULT=signal", *cleanup, check=False)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert lan.hooks_present(), "a crashed fail-closed node keeps its hooks"
    assert lan.connect(4, ALLOWED, timeout=1.5)["result"] == "timeout"

    # A new daemon picks the queues up again. It replaces the dead one's hooks make-before-break
    # (the unit tests prove no moment is unhooked), and they end as they were, under their names.
    daemon_factory(fail_open=False)
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert lan.hooks_present() == hooks
