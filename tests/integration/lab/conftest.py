"""Chaos scenarios on the lab (tools/lab): a real pairwalld pair in network namespaces named pg-*.

Each scenario is one file named for what it proves. Those that need pairwalld fail, saying so, when
build/bin/pairwalld or pairwallctl is missing; the harness scenarios (driver none) run anyway. Long soak
variants are marked `soak` and run only with PAIRWALL_SOAK=1.
"""

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lab_support import ADVBASE_MS, BIN_DIR, PREFIX, need_pairwalld, need_root  # noqa: E402
from pairwall_lab.lab import Lab  # noqa: E402
from pairwall_lab.netns import FeatureMissing  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "soak: long variant, run only with PAIRWALL_SOAK=1")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PAIRWALL_SOAK") == "1":
        return
    skip = pytest.mark.skip(reason="soak variant: set PAIRWALL_SOAK=1 to run it")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def make_lab(tmp_path):
    """make_lab(driver) -> a lab that is up; always torn down afterwards, also on failure."""
    need_root()
    labs = []

    def make(driver="builtin", advbase_ms=ADVBASE_MS, sync=True, nat=False, defer=False, modulate=False,
             synproxy=False, scrub_tcp=False, rdr=False, ipv6=False):
        """sync: the scenario needs state sync (fails, saying why, when pairwalld runs none); nat: the
        firewalls translate the inside to the outside VIP (`pairwall-lab up --nat`); defer: both run
        `[sync] defer` (`pairwall-lab up --defer`); modulate, synproxy: their rules keep state with
        `modulate state`, `synproxy state` (`pairwall-lab up --modulate`, `--synproxy`); scrub_tcp: their
        rules scrub the inside's TCP with `reassemble tcp` (`pairwall-lab up --scrub-tcp`); rdr: their
        rules redirect an address beyond them to the server, which the drill dials (`pairwall-lab up --rdr`);
        ipv6: the lab is dual stack, and so is the drill's traffic (`pairwall-lab up --ipv6`)."""
        if driver != "none":
            need_pairwalld()
        lab = Lab(PREFIX, bin_dir=BIN_DIR, driver=driver, advbase_ms=advbase_ms, nat=nat, defer=defer,
                  modulate=modulate, synproxy=synproxy, scrub_tcp=scrub_tcp, rdr=rdr, ipv6=ipv6)
        labs.append(lab)
        # Every feature a scenario asks for is pairwalld's: one it reports missing fails the scenario.
        try:
            lab.up(replace=True)
        except FeatureMissing as e:
            pytest.fail(f"pairwalld lacks what the lab needs: {e}")
        if driver != "none" and sync:
            off = [n for n, on in lab.driver.sync_enabled().items() if not on]
            if off:
                pytest.fail(f"state sync is off on {', '.join(off)} (sync status reports enabled false), "
                            "which this scenario needs")
        return lab

    yield make
    for lab in labs:
        # Logs and generated configs outlive the lab, for whoever reads a failure (pytest keeps tmp_path).
        try:
            if lab.run_dir.exists():
                shutil.copytree(lab.run_dir, tmp_path / "lab-run", dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("*.sock", "*.key"))
        finally:
            lab.down()
    leftover = Lab(PREFIX).exists()
    assert not leftover, f"namespaces left behind: {leftover}"


@pytest.fixture
def out_dir(tmp_path):
    return tmp_path
