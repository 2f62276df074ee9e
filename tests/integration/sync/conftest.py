"""Fixtures for the sync scenarios: a fresh pair of real pairwalld nodes per test (sync_pair.py)."""

import pytest

from netns import Topology, cleanup_stale
from sync_pair import PREFIX, Pair


@pytest.fixture(scope="session", autouse=True)
def _stale_namespaces(require_root):
    cleanup_stale(PREFIX)


@pytest.fixture
def make_pair(require_root, tmp_path):
    """make_pair(sync_extra="") -> a Pair whose nodes are not started yet."""
    with Topology(PREFIX) as topo:
        yield lambda **kw: Pair(topo, tmp_path, **kw)
