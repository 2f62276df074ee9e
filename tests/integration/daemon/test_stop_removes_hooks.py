"""SIGTERM stops the daemon cleanly: exit status 0, its iptables/ip6tables chains and jumps gone,
its control socket removed. Traffic then takes the kernel's own path again."""

import signal

from daemon_net import ALLOWED, BLOCKED


def test_stop_removes_hooks(lan, fw):
    present = lan.hooks_present()
    assert any("-A FORWARD -j PAIRWALL" in l for l in present), present
    assert any(l.startswith("ip6tables") for l in present), present
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"

    assert fw.stop(signal.SIGTERM) == 0, fw.log_text()
    assert lan.hooks_present() == []
    assert not fw.socket.exists()
    assert "hooks removed" in fw.log_text()
    # Nothing is queued any more: the kernel forwards on its own.
    assert lan.connect(4, BLOCKED)["result"] == "ok"
    assert lan.connect(4, ALLOWED)["result"] == "ok"


def test_sigint_stops_too(lan, fw):
    assert fw.stop(signal.SIGINT) == 0, fw.log_text()
    assert lan.hooks_present() == []
