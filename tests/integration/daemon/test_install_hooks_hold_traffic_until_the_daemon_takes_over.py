"""`pairwalld --install-hooks` (pairwall-hooks.service, early at boot) puts a fail-closed node's hooks
in place before any daemon listens: forwarded traffic is dropped, not passed unfiltered, until
pairwalld starts and takes the hooks over, under their own names. Run while a daemon answers, it
leaves that daemon's hooks alone. With a broken configuration it still installs fail-closed hooks by
their default names, and fails: a node that cannot start its daemon must not forward unfiltered."""

from daemon_net import ALLOWED, BLOCKED, Daemon


def test_install_hooks_hold_traffic_until_the_daemon_takes_over(lan, tmp_path):
    fw = Daemon(lan, tmp_path, fail_open=False)
    install = [str(fw.bin / "pairwalld"), "--install-hooks", "-c", str(fw.config)]
    try:
        assert lan.connect(4, ALLOWED)["result"] == "ok"  # the kernel's path, before any hook
        cp = lan.fw.exec(*install, check=False)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        hooks = lan.hooks_present()
        assert any("-A FORWARD -j PAIRWALL" in l for l in hooks), hooks
        assert lan.connect(4, ALLOWED, timeout=1.5)["result"] == "timeout"

        fw.start()
        assert lan.connect(4, ALLOWED)["result"] == "ok"
        assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"
        assert lan.hooks_present() == hooks

        cp = lan.fw.exec(*install, check=False)
        assert cp.returncode == 0 and "answers" in cp.stdout + cp.stderr, cp.stdout + cp.stderr
        assert lan.hooks_present() == hooks
        assert lan.connect(4, ALLOWED)["result"] == "ok"
    finally:
        if fw.proc is not None and fw.proc.poll() is None:
            lan.topo.stop(fw.proc, timeout=10)
        lan.fw.exec(str(fw.bin / "pairwalld"), "--cleanup", "-c", str(fw.config), check=False)
    assert lan.hooks_present() == []


def test_install_hooks_with_a_broken_config_closes_the_node_and_fails(lan, tmp_path):
    fw = Daemon(lan, tmp_path, fail_open=True)
    fw.config.write_text("[queue\nfail_open = true\n")
    pairwalld = str(fw.bin / "pairwalld")
    try:
        assert lan.connect(4, ALLOWED)["result"] == "ok"
        cp = lan.fw.exec(pairwalld, "--install-hooks", "-c", str(fw.config), check=False)
        assert cp.returncode == 1, cp.stdout + cp.stderr
        assert f"{fw.config}:1:" in cp.stderr and "fail-closed" in cp.stderr, cp.stdout + cp.stderr
        assert any("-A FORWARD -j PAIRWALL" in l for l in lan.hooks_present()), lan.hooks_present()
        assert lan.connect(4, ALLOWED, timeout=1.5)["result"] == "timeout"
    finally:
        lan.fw.exec(pairwalld, "--remove-hooks", "-c", str(fw.config), check=False)
    assert lan.hooks_present() == []
    assert lan.connect(4, ALLOWED)["result"] == "ok"
