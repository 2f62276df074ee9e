"""A table filled from a file, as pf's `table <t> persist file "PATH"`, and refreshed from a feed
with `pairwallctl tables replace NAME -f FILE` (pfctl -T replace -f): the file's client address is
blocked from the first packet, a replace lets it in and shuts out the other family, a bad feed is
refused with its file:line:column and changes nothing, and a reload reads the table file again
while a table defined without entries keeps what it holds (pfctl -f's rule) until they expire."""

import signal

from daemon_net import ALLOWED, CLIENT4, CLIENT6, RULES
from netns import wait_until

FEED_RULES = 'table <feed> persist file "feed.txt"\ntable <kept> persist\n' + RULES + "block in quick on $in_if from <feed>\n"


def test_table_files_feed_the_rules(lan, tmp_path, daemon_factory):
    (tmp_path / "feed.txt").write_text(f"# blocked hosts\n{CLIENT4}  192.0.2.0/24\n")
    fw = daemon_factory(rules=FEED_RULES)
    assert fw.json("tables", "show", "feed")["tables"][0]["entries"] == [f"{CLIENT4}/32", "192.0.2.0/24"]
    assert lan.connect(4, ALLOWED, timeout=1.0)["result"] == "timeout"
    assert lan.connect(6, ALLOWED)["result"] == "ok"
    tested = fw.ctl("tables", "test", "feed", CLIENT4, CLIENT6, check=False)
    # pfctl -T test's status: 2 when not every address matches (1 is an error).
    assert (tested.returncode, tested.stdout) == (2, f"1/2 addresses match.\n   {CLIENT4}\n"), tested
    assert fw.ctl("tables", "test", "nosuch", CLIENT4, check=False).returncode == 1
    assert fw.ctl("tables", "test", "feed", "192.0.2.200").stdout == "1/1 address match.\n   192.0.2.200\n"

    fresh = tmp_path / "fresh.txt"
    fresh.write_text(f"192.0.2.0/24\n{CLIENT6}\n")
    replaced = fw.ctl("tables", "replace", "feed", "-f", fresh)
    assert replaced.stdout == f"1 added, 1 deleted\n   192.0.2.0/24\n   {CLIENT6}\n", replaced.stdout
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert lan.connect(6, ALLOWED, timeout=1.0)["result"] == "timeout"

    bad = tmp_path / "bad.txt"
    bad.write_text(f"{CLIENT4}\n10.0.0.1/8\n")
    refused = fw.ctl("tables", "replace", "feed", "-f", bad, check=False)
    assert refused.returncode == 2, refused
    assert f"{bad}:2:1: expected an address or prefix" in refused.stderr, refused.stderr
    assert fw.json("tables", "show", "feed")["tables"][0]["count"] == 2

    # A reload sets the table back to its file, read again; the table without entries keeps its.
    fw.ctl("tables", "add", "kept", "192.0.2.77")
    (tmp_path / "feed.txt").write_text(f"{CLIENT6}/128\n")
    fw.send_signal(signal.SIGHUP)
    wait_until(lambda: "SIGHUP: rules reloaded" in fw.log_text(), 5, what="SIGHUP reload in the log")
    assert fw.json("tables", "show", "feed")["tables"][0]["entries"] == [f"{CLIENT6}/128"]
    assert fw.json("tables", "show", "kept")["tables"][0]["entries"] == ["192.0.2.77/32"]
    # pfctl -s memory's table-entries line, below the list of tables.
    total = sum(t.get("count", 0) for t in fw.json("tables")["tables"])
    listed = fw.ctl("tables").stdout.splitlines()
    assert listed[-1] == f"{total} of 200000 table entries used (set limit table-entries)", listed
    # pfctl -T expire: an entry goes once it has been there the seconds given.
    assert fw.ctl("tables", "expire", "kept", "3600").stdout == "0 added, 0 deleted\n   192.0.2.77\n"
    assert fw.ctl("tables", "expire", "kept", "0").stdout == "0 added, 1 deleted\n"
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert lan.connect(6, ALLOWED, timeout=1.0)["result"] == "timeout"

    # A table file that cannot be read refuses the reload; the running rules stay.
    (tmp_path / "feed.txt").unlink()
    fw.send_signal(signal.SIGHUP)
    wait_until(lambda: "cannot read table file" in fw.log_text(), 5, what="the refused reload in the log")
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert lan.connect(6, ALLOWED, timeout=1.0)["result"] == "timeout"
