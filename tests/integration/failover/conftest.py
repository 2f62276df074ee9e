"""Fixtures of the failover integration tests: a pair of nodes in namespaces named pf-f<N>-*."""

import itertools
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import failover_net  # noqa: E402

_ids = itertools.count()


def pytest_collection_modifyitems(config, items):
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="needs root (network namespaces)")
        for item in items:
            item.add_marker(skip)


@pytest.fixture
def pair_factory():
    made = []

    def make(**kwargs):
        if not Path(failover_net.FAILOVERD).exists():
            pytest.fail(f"{failover_net.FAILOVERD} not built (set PAIRWALL_BIN_DIR)")
        p = failover_net.Pair(f"pf-f{os.getpid() % 1000}{next(_ids)}-", **kwargs)
        made.append(p)
        p.up()
        return p

    yield make
    for p in made:
        p.cleanup()


@pytest.fixture
def report():
    """Appends one JSON object per measurement to $FAILOVER_RESULTS (if set) and prints it."""

    def write(**fields):
        line = json.dumps(fields, sort_keys=True)
        print(line)
        path = os.environ.get("FAILOVER_RESULTS")
        if path:
            with open(path, "a") as f:
                f.write(line + "\n")

    return write
