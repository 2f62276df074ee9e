"""`table <name> counters` on a running daemon, as pfctl -T show -v and -T zero: an entry counts the
packets its table's rules blocked and passed, the replies of the states they made included, and
`tables zero` clears them."""

from daemon_net import ALLOWED, BLOCKED, RULES
from netns import wait_until

COUNTED = ("table <clients> counters { 10.77.1.0/24 }\n" + RULES +
           "pass in on $in_if proto tcp from <clients> to port 8080\n"
           "block in quick on $in_if proto tcp from <clients> to port 8081\n")


def entry(fw):
    shown = fw.json("tables", "show", "clients", "-v")["tables"][0]
    assert shown["entries"] == ["10.77.1.0/24"] and shown["counters"], shown
    return {key: int(value) for key, value in shown["entry_stats"][0].items()}


def test_table_counters_count_what_the_rules_did(lan, daemon_factory):
    fw = daemon_factory(rules=COUNTED)
    assert fw.ctl("tables").stdout.startswith("<clients>  1 entry, counters\n")
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"
    # The connection's own packets reach the entry as its state's counters are folded in.
    wait_until(lambda: entry(fw).get("out_pass_packets", 0) > 0, 10, what="the replies counted in the entry")
    counted = entry(fw)
    assert counted.get("in_pass_packets", 0) >= 2, counted  # the SYN, its ACK
    assert counted.get("in_block_packets", 0) >= 1, counted  # the SYN to the blocked port
    assert counted.get("out_block_packets", 0) == 0, counted

    assert fw.ctl("tables", "zero", "clients").stdout == "1/1 addresses zeroed\n"
    zeroed = entry(fw)
    assert all(zeroed.get(key, 0) == 0 for key in ("in_block_packets", "in_pass_packets", "out_pass_packets")), zeroed
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"
    assert entry(fw).get("in_block_packets", 0) >= 1
