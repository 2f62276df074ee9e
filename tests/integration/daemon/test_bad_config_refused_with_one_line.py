"""A configuration pairwalld cannot use refuses to start: exit status 1 and one line on stderr
naming the file, the section and the key; nothing is installed."""

import pytest

from daemon_net import Daemon


@pytest.mark.parametrize("extra, message", [
    ("[queue]\ncount = 0\n", "[queue] count: expected 1..64, got 0"),
    ("[queue]\nfail_open = \"yes\"\n", "[queue] fail_open: expected true or false, got \"yes\""),
    ("[metrics]\nlisten = \"nowhere\"\n", "[metrics] listen: expected \"address:port\""),
    ("[bogus]\nx = 1\n", "[bogus]: unknown section"),
    ("[pflow]\ncollector = \"10.77.2.2:4739\"\nsource = \"fd77:2::1\"\n",
     "[pflow] source: expected an address of the collector's family (IPv4), got \"fd77:2::1\""),
])
def test_bad_config_refused_with_one_line(lan, tmp_path, extra, message):
    fw = Daemon(lan, tmp_path)
    fw.config.write_text(f'[node]\nid = 1\n[rules]\nfile = "{fw.rules}"\n[control]\nsocket = "{fw.socket}"\n' + extra)
    for args in (["--check"], ["-f"]):
        cp = lan.fw.exec(str(fw.bin / "pairwalld"), *args, "-c", str(fw.config), check=False, timeout=10)
        assert cp.returncode == 1, cp.stdout + cp.stderr
        err = cp.stderr.strip()
        assert "\n" not in err, err
        assert err.startswith(f"pairwalld: {fw.config}: "), err
        assert message in err, err
    assert lan.hooks_present() == []


def test_broken_rule_file_refused_at_start(lan, tmp_path):
    fw = Daemon(lan, tmp_path, rules="block all\npass in on $undefined all\n")
    cp = lan.fw.exec(str(fw.bin / "pairwalld"), "-f", "-c", str(fw.config), check=False, timeout=10)
    assert cp.returncode == 1
    assert f"{fw.rules}:2:" in cp.stderr, cp.stderr
    assert lan.hooks_present() == []
    cp = lan.fw.exec(str(fw.bin / "pairwalld"), "--check", "-c", str(fw.config), check=False, timeout=10)
    assert cp.returncode == 1
    assert f"{fw.rules}:2:" in cp.stderr, cp.stderr
