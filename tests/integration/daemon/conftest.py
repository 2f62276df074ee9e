"""Fixtures for the daemon scenarios: a fresh client — fw — server topology per test and the real
pairwalld in fw (daemon_net.py has the pieces)."""

import pytest

from daemon_net import PREFIX, Daemon, Lan
from netns import Topology, cleanup_stale


@pytest.fixture(scope="session", autouse=True)
def _stale_namespaces(require_root):
    cleanup_stale(PREFIX)


@pytest.fixture
def lan(require_root):
    with Topology(PREFIX) as topo:
        yield Lan(topo)


@pytest.fixture
def daemon_factory(lan, tmp_path):
    """daemon_factory(fail_open=False, queues=1, rules=RULES, hooks="forward", pcap=None, mark=None, sections="")
    -> a started Daemon; `sections`: more of pairwall.toml."""
    started = []

    def make(**kwargs):
        d = Daemon(lan, tmp_path, **kwargs).start()
        started.append(d)
        return d

    yield make
    for d in started:
        if d.proc and d.proc.poll() is None:
            lan.topo.stop(d.proc, timeout=10)
        # A fail-closed daemon leaves its hooks, killed or stopped: remove them, as `pairwalld --cleanup`
        # by hand does.
        if lan.hooks_present():
            lan.fw.exec(str(d.bin / "pairwalld"), "--cleanup", "-c", str(d.config), check=False)


@pytest.fixture
def fw(daemon_factory):
    """A running pairwalld with the default rules, fail-closed, one queue."""
    return daemon_factory()
