"""The Debian package (`cmake --build --preset release --target package`), as an operator installs
it: its control fields ask for the libraries the binaries link and the programs the hooks run, and
every absolute path that the shipped units and keepalived.conf name is in it, executable where it is
run. The packaged binaries are the stripped ones, so the test runs the packaged pairwall-check on
the packaged sample rules."""

import re
import shlex
import shutil
import subprocess

import pytest

from daemon_net import REPO, bin_dir

PACKAGING = REPO / "packaging"


def run(args, **kw):
    cp = subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)
    assert cp.returncode == 0, f"{args}: {cp.stdout}{cp.stderr}"
    return cp.stdout


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    for tool in ("cpack", "dpkg-deb", "dpkg-shlibdeps"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} missing (tools/install-deps.sh installs it)")
    config = bin_dir().parent / "CPackConfig.cmake"
    assert config.exists(), f"{config}: configure the build first (cmake --preset release)"
    out = tmp_path_factory.mktemp("deb")
    run(["cpack", "--config", str(config), "-B", str(out)])
    debs = list(out.glob("pairwall_*.deb"))
    assert len(debs) == 1, list(out.iterdir())
    root = out / "root"
    run(["dpkg-deb", "-x", str(debs[0]), str(root)])
    return debs[0], root


def named_paths():
    """Absolute paths of programs the shipped files run."""
    paths = set()
    for unit in (PACKAGING / "systemd").glob("*.service"):
        for m in re.finditer(r"^Exec\w+=[-+@!:]*(\S+)", unit.read_text(), re.M):
            paths.add(m.group(1))
    for conf in (PACKAGING / "keepalived").glob("*.conf"):
        for m in re.finditer(r'^\s*(?:vrrp_notify_fifo_script|script)\s+"([^"]+)"', conf.read_text(), re.M):
            paths.add(shlex.split(m.group(1))[0])
    return paths


def test_control_fields_ask_for_what_the_node_needs(package):
    deb, _ = package
    fields = run(["dpkg-deb", "-f", str(deb), "Package", "Version", "Architecture", "Depends"])
    cmake = (REPO / "CMakeLists.txt").read_text()
    version = re.search(r"project\(pairwall VERSION (\S+)", cmake).group(1)
    assert "Package: pairwall\n" in fields
    assert f"Version: {version}\n" in fields
    depends = re.search(r"^Depends: (.*)$", fields, re.M).group(1)
    names = {d.strip().split()[0] for d in depends.split(",")}
    for needed in ("iptables", "libnetfilter-queue1", "libmnl0", "libssl3", "libsystemd0"):
        assert needed in names, depends
    assert any(n.startswith("libprotobuf") for n in names), depends


def test_every_path_the_units_and_keepalived_name_is_packaged(package):
    _, root = package
    paths = named_paths()
    # Kernel modules and the xtables lock come from the system; everything of ours must be here.
    ours = {p for p in paths if "pairwall" in p}
    assert {"/usr/sbin/pairwalld", "/usr/bin/pairwallctl", "/usr/lib/pairwall/pairwall-notify.sh"} <= ours, paths
    for p in ours:
        f = root / p.lstrip("/")
        assert f.is_file(), f"{p} is named but not packaged"
        assert f.stat().st_mode & 0o111, f"{p} is not executable"
    for unit in ("pairwalld.service", "pairwall-hooks.service"):
        assert (root / "usr/lib/systemd/system" / unit).is_file()
    for example in ("pairwall.toml", "sample.conf", "keepalived.conf", "keepalived-sync-group.conf"):
        assert (root / "usr/share/doc/pairwall/examples" / example).is_file()


def test_packaged_binaries_run(package):
    _, root = package
    check = root / "usr/bin/pairwall-check"
    out = run([str(check), "-f", str(root / "usr/share/doc/pairwall/examples/sample.conf")])
    assert "OK" in out
    cp = subprocess.run([str(root / "usr/sbin/pairwalld"), "--help"], capture_output=True, text=True, timeout=30)
    assert "usage: pairwalld" in cp.stdout + cp.stderr


def test_maintainer_scripts_are_valid_shell(package):
    deb, _ = package
    listing = run(["dpkg-deb", "-I", str(deb)])
    for script in ("postinst", "prerm", "postrm"):
        assert re.search(rf"\s{script}\s", listing), listing
        run(["sh", "-n", str(PACKAGING / "debian" / script)])
