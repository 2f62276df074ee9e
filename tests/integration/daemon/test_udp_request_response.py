"""UDP request/response through the firewall: the request matches a pass rule and creates a state,
the response passes by that state; a port no rule passes gets nothing back."""

import pytest

from daemon_net import UDP_PORT, settle


@pytest.mark.parametrize("family", [4, 6])
def test_udp_request_response(lan, fw, family):
    before = fw.reasons()
    for _ in range(3):
        r = lan.udp(family, UDP_PORT)
        assert r["result"] == "ok", r
    blocked = lan.udp(family, 5354, timeout=1.0)
    assert blocked["result"] in ("timeout",), blocked

    settle()
    after = fw.reasons()
    assert after["state"] >= before["state"] + 3, "responses should pass by state"
    assert after["rule_block"] >= before["rule_block"] + 1
    states = fw.json("states", "proto", "udp")
    assert int(states["matched"]) >= 1
    # One request, one response: pf's MULTIPLE:SINGLE (the responder becomes MULTIPLE only once the
    # requester sends again).
    assert any(s["dst"]["port"] == UDP_PORT and (s["src_state"], s["dst_state"]) == ("MULTIPLE", "SINGLE")
               for s in states["states"]), states
