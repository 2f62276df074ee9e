"""ICMP and ICMPv6 echo: requests from the client pass by rule and their replies by state."""

import pytest

from daemon_net import settle


@pytest.mark.parametrize("family", [4, 6])
def test_icmp_echo(lan, fw, family):
    before = fw.reasons()
    r = lan.ping(family, count=3)
    assert r == {"sent": 3, "received": 3}
    settle()
    after = fw.reasons()
    assert after["match"] >= before["match"] + 1
    assert after["state"] >= before["state"] + 3  # the three replies at least
    proto = "icmp6" if family == 6 else "icmp"
    assert int(fw.json("states", "proto", proto)["matched"]) == 1
