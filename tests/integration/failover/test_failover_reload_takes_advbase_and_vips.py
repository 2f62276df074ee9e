"""OpenBSD takes `ifconfig carpN advbase N` and a carp interface's addresses on a running group; a
reload (SIGHUP) takes them here. The master goes from advbase 200 ms to 1 s and advertises that at
once: its backup, which now waits three of the new intervals, keeps still, though the master's next
advertisement comes after more than the backup's old master-down interval. A VIP added on lan0 and
an IPv6 VIP moved to another address are on the master within the reload and answer on the LAN; the
dropped one is gone. The backup, reloaded alike, holds none of them, but its rules' interface
addresses follow (`lan0` as an address counts the VIPs on both nodes). A VIP on a new link:
test_failover_reload_opens_a_new_links_channel.py."""

import json
import time

ADVBASE_MS = 200



def status(p, node):
    ok, text = p.ctl(node, "status")
    assert ok, text
    return json.loads(text)


def test_reload_takes_advbase_and_vips(pair_factory):
    p = pair_factory(advbase_ms=ADVBASE_MS, daemon="pairwalld", sync=False,
                     rules="pass all\npass in on lan0 to lan0\n")
    p.start("a")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=10)
    assert "fd31::1" in p.addresses("a", "lan0")
    assert p.ctl("a", "tables test lan0:addresses 10.31.0.1")[0]
    assert not p.ctl("a", "tables test lan0:addresses 10.31.0.5")[0]

    changes = [
        ("advbase_ms = 200\n", "advbase_ms = 1000\n"),
        ('address = "fd31::1/64" }', 'address = "fd31::5/64" }, { interface = "lan0", address = "10.31.0.5/24" }'),
    ]
    p.reload_with("a", changes)
    assert status(p, "a")["advbase_ms"] == 1000
    assert "advbase 200 -> 1000 ms" in p.log("a")
    assert "which a reload does not take" not in p.log("a"), p.log("a")
    p.wait_for(lambda: {"10.31.0.5", "fd31::5"} <= p.addresses("a", "lan0"), 2, what="the new VIPs on a")
    assert "fd31::1" not in p.addresses("a", "lan0")
    assert not {"10.31.0.5", "fd31::5", "fd31::1"} & p.addresses("b", "lan0")
    # The backup, reloaded alike, holds none of them, yet its rules count them as lan0's.
    p.reload_with("b", changes)
    assert not {"10.31.0.5", "fd31::5", "fd31::1"} & p.addresses("b", "lan0")
    assert p.ctl("b", "tables test lan0:addresses 10.31.0.5 fd31::5")[0]
    assert not p.ctl("b", "tables test lan0:addresses fd31::1")[0]

    # B's old master-down interval was 3 * 200 ms and its skew's share, 678 ms: had A stayed silent
    # until its next advertisement a second on, B would have taken the group.
    longest_silence = 0
    deadline = time.monotonic() + 3.5
    while time.monotonic() < deadline:
        assert p.role("a") == "master" and p.role("b") == "backup", (p.log("a"), p.log("b"))
        longest_silence = max(longest_silence, int(status(p, "b")["last_heard_ms_ago"]))
        time.sleep(0.05)
    assert longest_silence > 3 * ADVBASE_MS, longest_silence  # A now advertises every second
    assert p.last_transition("b", "master") is None

    # The new VIP answers on the LAN from the master.
    p.nsexec("c0", "ping", "-c", "1", "-W", "2", "10.31.0.5")
    assert p.neighbour_mac("c0", "10.31.0.5") == p.mac("a", "lan0")
