"""Fixtures of the failover integration tests: a pair of nodes in namespaces named pf-f<N>-*.

    sudo python3 -m pytest -q tests/integration/failover            # against pairwalld (build/bin)
    FAILOVER_DAEMON=failoverd sudo -E python3 -m pytest -q tests/integration/failover
                                                  # against pairwall-failoverd, the service alone
    PAIRWALL_BIN_DIR=build-debug/bin ...          # another build
    FAILOVER_RESULTS=results.jsonl ...            # append the measured figures as JSON lines
"""

import itertools
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import failover_net  # noqa: E402

_ids = itertools.count()


@pytest.fixture(autouse=True)
def _root():
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces, iptables, netlink")


@pytest.fixture
def pair_factory():
    made = []

    def make(**kwargs):
        daemon = kwargs.get("daemon") or failover_net.DAEMON
        needed = [failover_net.PAIRWALLD, failover_net.PAIRWALLCTL] if daemon == "pairwalld" else [failover_net.FAILOVERD]
        for binary in needed:
            if not Path(binary).exists():
                pytest.fail(f"{binary} not built (set PAIRWALL_BIN_DIR)")
        p = failover_net.Pair(f"pf-f{os.getpid() % 1000}{next(_ids)}-", **kwargs)
        made.append(p)
        p.up()
        return p

    yield make
    for p in made:
        p.cleanup()


def _cpu_times():
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


@pytest.fixture
def report():
    """Appends one JSON object per measurement to $FAILOVER_RESULTS (if set) and prints it, with
    the CPU steal and load seen since the test started: figures from a noisy VM need both."""
    start = _cpu_times()

    def write(**fields):
        now = _cpu_times()
        delta = [b - a for a, b in zip(start, now)]
        total = sum(delta) or 1
        fields["cpu_steal_pct"] = round(100 * delta[7] / total, 1) if len(delta) > 7 else None
        fields["cpu_busy_pct"] = round(100 * (total - delta[3] - delta[4]) / total, 1)
        line = json.dumps(fields, sort_keys=True)
        print(line)
        path = os.environ.get("FAILOVER_RESULTS")
        if path:
            with open(path, "a") as f:
                f.write(line + "\n")

    return write
