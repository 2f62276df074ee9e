"""The shipped units, as systemd reads them: `systemd-analyze verify` accepts pairwalld.service and
pairwall-hooks.service (directives, types, the commands they name), and pairwalld's sandbox stays where it was designed — the two capabilities the
daemon needs and nothing else, and an overall exposure systemd rates "OK" or better. The daemon
itself runs under the same options in the other tests' namespaces only through sd_notify; this
test is what catches a typo or a loosened option in the file."""

import re
import shutil
import subprocess

import pytest

from daemon_net import REPO, bin_dir

UNITS = REPO / "packaging" / "systemd"
# systemd-analyze security: 0 (confined) .. 10 (exposed); "OK" ends at 3.9.
MAX_EXPOSURE = 3.0


def unit_file(tmp_path, name):
    if not shutil.which("systemd-analyze"):
        pytest.fail("systemd-analyze missing (package systemd; tools/install-deps.sh installs it)")
    # The units name /usr/sbin/pairwalld; verify checks that the commands exist, so point them at
    # the build.
    for unit in UNITS.glob("*.service"):
        (tmp_path / unit.name).write_text(unit.read_text().replace("/usr/sbin/pairwalld", str(bin_dir() / "pairwalld")))
    return tmp_path / name


@pytest.mark.parametrize("name", ["pairwalld.service", "pairwall-hooks.service"])
def test_unit_verifies(tmp_path, name):
    unit = unit_file(tmp_path, name)
    cp = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and not cp.stderr.strip(), cp.stderr


def test_unit_is_confined(tmp_path):
    unit = unit_file(tmp_path, "pairwalld.service")
    text = unit.read_text()
    caps = re.findall(r"^(CapabilityBoundingSet|AmbientCapabilities)=(.*)$", text, re.M)
    assert dict(caps) == {"CapabilityBoundingSet": "CAP_NET_ADMIN CAP_NET_RAW",
                          "AmbientCapabilities": "CAP_NET_ADMIN CAP_NET_RAW"}
    cp = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit)],
                        capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", cp.stdout)
    assert m, cp.stdout + cp.stderr
    assert float(m.group(1)) <= MAX_EXPOSURE, cp.stdout
