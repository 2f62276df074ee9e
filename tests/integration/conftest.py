"""Shared by every integration test folder: makes `netns` (the namespace helper) importable and
offers the checks most scenarios start with. Folder conftests add their own fixtures."""

import os
import shutil
import sys
from pathlib import Path

import pytest

INTEGRATION_DIR = Path(__file__).resolve().parent
if str(INTEGRATION_DIR) not in sys.path:
    sys.path.insert(0, str(INTEGRATION_DIR))


@pytest.fixture(scope="session")
def require_root():
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces, iptables and NFQUEUE")
    for tool in ("ip", "iptables", "ip6tables"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} not found (run tools/install-deps.sh)")
