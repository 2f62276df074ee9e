"""Chaos scenarios on the lab (tools/lab): a real pairwalld pair in network namespaces named pg-*.

Each scenario is one file named for what it proves. Those that need pairwalld skip, saying so, when
build/bin/pairwalld or pairwallctl is missing; the harness scenarios (driver none) run anyway. Long soak
variants are marked `soak` and run only with PAIRWALL_SOAK=1.
"""

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "lab"))

from pairwall_lab import topology  # noqa: E402
from pairwall_lab.lab import Lab  # noqa: E402

PREFIX = "pg-"
BIN_DIR = Path(os.environ.get("PAIRWALL_BIN_DIR", REPO / "build" / "bin"))
ADVBASE_MS = 200


def pytest_configure(config):
    config.addinivalue_line("markers", "soak: long variant, run only with PAIRWALL_SOAK=1")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PAIRWALL_SOAK") == "1":
        return
    skip = pytest.mark.skip(reason="soak variant: set PAIRWALL_SOAK=1 to run it")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


def need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces")


def need_pairwalld():
    missing = [b for b in ("pairwalld", "pairwallctl") if not os.access(BIN_DIR / b, os.X_OK)]
    if missing:
        pytest.skip(f"{', '.join(str(BIN_DIR / b) for b in missing)} not built: this scenario runs the real "
                    "pair (build with `cmake --preset release && cmake --build --preset release`)")


@pytest.fixture
def make_lab(tmp_path):
    """make_lab(driver) -> a lab that is up; always torn down afterwards, also on failure."""
    need_root()
    labs = []

    def make(driver="builtin", advbase_ms=ADVBASE_MS):
        if driver != "none":
            need_pairwalld()
        lab = Lab(PREFIX, bin_dir=BIN_DIR, driver=driver, advbase_ms=advbase_ms)
        labs.append(lab)
        lab.up(replace=True)
        return lab

    yield make
    for lab in labs:
        lab.down()
    leftover = Lab(PREFIX).exists()
    assert not leftover, f"namespaces left behind: {leftover}"


@pytest.fixture
def out_dir(tmp_path):
    return tmp_path


def failover_bound_ms(advbase_ms=ADVBASE_MS, skew=topology.NODES[1].advskew):
    """The issue's bound: 3·advbase + skew + 100 ms (skew as time: advskew/256·advbase)."""
    return 3 * advbase_ms + skew * advbase_ms / 256.0 + 100
