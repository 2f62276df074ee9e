"""SIGTERM stops the daemon cleanly: exit status 0, its control socket removed. What happens to its
iptables/ip6tables chains and jumps follows [queue] fail_open, as after a crash:

- fail-closed (the default): they stay, without a listener, so that nothing passes unfiltered
  until the next daemon takes them over (`systemctl restart` opens no window). systemd's
  ExecStopPost (`pairwalld --cleanup` with SERVICE_RESULT=success) keeps them too, and
  `pairwalld --remove-hooks` (stopping pairwall-hooks.service) opens the node;
- fail-open: they are removed, and traffic takes the kernel's own path again."""

import signal

from daemon_net import ALLOWED, BLOCKED


def test_sigterm_keeps_fail_closed_hooks_until_removed(lan, fw):
    present = lan.hooks_present()
    assert any("-A FORWARD -j PAIRWALL" in l for l in present), present
    assert any(l.startswith("ip6tables") for l in present), present
    assert lan.connect(4, ALLOWED)["result"] == "ok"

    assert fw.stop(signal.SIGTERM) == 0, fw.log_text()
    assert not fw.socket.exists()
    assert "hooks kept" in fw.log_text()
    assert lan.hooks_present() == present
    assert lan.connect(4, ALLOWED, timeout=1.5)["result"] == "timeout"
    assert lan.connect(6, ALLOWED, timeout=1.5)["result"] == "timeout"

    after_stop = lan.fw.exec("env", "SERVICE_RESULT=success", str(fw.bin / "pairwalld"), "--cleanup", "-c",
                             str(fw.config), check=False)
    assert after_stop.returncode == 0, after_stop.stdout + after_stop.stderr
    assert lan.hooks_present() == present, "the unit's ExecStopPost opened a fail-closed node"

    opened = lan.fw.exec(str(fw.bin / "pairwalld"), "--remove-hooks", "-c", str(fw.config), check=False)
    assert opened.returncode == 0, opened.stdout + opened.stderr
    assert lan.hooks_present() == []
    # Nothing is queued any more: the kernel forwards on its own.
    assert lan.connect(4, BLOCKED)["result"] == "ok"
    assert lan.connect(6, ALLOWED)["result"] == "ok"


def test_sigterm_removes_fail_open_hooks(lan, daemon_factory):
    fw = daemon_factory(fail_open=True)
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"
    assert fw.stop(signal.SIGTERM) == 0, fw.log_text()
    assert lan.hooks_present() == []
    assert "hooks removed" in fw.log_text()
    assert lan.connect(4, BLOCKED)["result"] == "ok"


def test_sigint_stops_too(lan, fw):
    assert fw.stop(signal.SIGINT) == 0, fw.log_text()
    assert not fw.socket.exists()
    assert "hooks kept" in fw.log_text()



def test_remove_hooks_opens_the_node_even_with_a_broken_config(lan, fw):
    # The usual way to a closed node: the configuration was broken, and the restart failed.
    assert fw.stop(signal.SIGTERM) == 0, fw.log_text()
    assert lan.hooks_present()
    fw.config.write_text("[queue\nfail_open = false\n")
    cp = lan.fw.exec(str(fw.bin / "pairwalld"), "--remove-hooks", "-c", str(fw.config), check=False)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert f"{fw.config}:1:" in cp.stderr and "default names" in cp.stderr, cp.stdout + cp.stderr
    assert lan.hooks_present() == []
    assert lan.connect(4, ALLOWED)["result"] == "ok"
