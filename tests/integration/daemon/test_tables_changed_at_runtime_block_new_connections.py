"""A table of the running rules changed with pairwallctl (as pfctl -T): adding the client to the
blocked table stops its new connections at once while a connection it already has keeps flowing
by its state, until `states kill` cuts it too; deleting the entry lets it in again; a const table
refuses edits, and a reload sets the table back to the file's contents."""

import signal

from daemon_net import ALLOWED, CLIENT4, CLIENT6, RULES
from netns import wait_until

BLOCKING = ("table <blocked> persist {}\ntable <fixed> const { 192.0.2.0/24 }\n" + RULES +
            "block in quick on $in_if from { <blocked> <fixed> }\n")


def test_tables_changed_at_runtime_block_new_connections(lan, daemon_factory):
    fw = daemon_factory(rules=BLOCKING)
    held = lan.hold(4)
    assert held.opened.get("connected"), held.opened
    assert lan.connect(6, ALLOWED)["result"] == "ok"

    assert fw.ctl("tables").stdout == (
        "<blocked>  0 entries\n<fixed>  1 entry, const\n1 of 200000 table entries used (set limit table-entries)\n"
    )
    added = fw.ctl("tables", "add", "blocked", CLIENT4, f"{CLIENT6}/128")
    # Hosts are shown as pfctl shows them, without /32 or /128; the JSON keeps the prefix.
    assert added.stdout == f"2 added, 0 deleted\n   {CLIENT4}\n   {CLIENT6}\n", added.stdout
    assert lan.connect(4, ALLOWED, timeout=1.0)["result"] == "timeout"
    assert lan.connect(6, ALLOWED, timeout=1.0)["result"] == "timeout"
    assert held.echo()["echo"], "an established connection stopped when its client was blocked"

    assert fw.json("states", "kill", CLIENT4) == {"states": "1"}
    assert not held.echo(timeout=1.0).get("echo"), "a killed connection still carries data"

    deleted = fw.json("tables", "delete", "blocked", CLIENT4)
    assert deleted["deleted"] == 1 and deleted["tables"][0]["entries"] == [f"{CLIENT6}/128"]
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert lan.connect(6, ALLOWED, timeout=1.0)["result"] == "timeout"

    refused = fw.ctl("tables", "add", "fixed", CLIENT4, check=False)
    assert refused.returncode == 1 and "tables: <fixed> is const" in refused.stderr
    assert fw.ctl("tables", "add", "blocked", check=False).returncode == 2

    fw.send_signal(signal.SIGHUP)
    wait_until(lambda: "SIGHUP: rules reloaded" in fw.log_text(), 5, what="SIGHUP reload in the log")
    assert fw.json("tables", "show", "blocked")["tables"][0]["count"] == 0
    assert lan.connect(6, ALLOWED)["result"] == "ok"
