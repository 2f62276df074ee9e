"""`include "PATH"` in the running daemon's rules, as pfctl reads it: the included file's rules
stand where it is named and use the including file's macros, a reload reads it again, and an
error in it refuses the reload with that file's line and column while the running rules stay."""

import signal

from daemon_net import ALLOWED, CLIENT4, CLIENT6, RULES
from netns import wait_until

INCLUDING_RULES = RULES + 'include "site/blocked.conf"\n'


def test_include_splits_the_rule_set(lan, tmp_path, daemon_factory):
    (tmp_path / "site").mkdir()
    blocked = tmp_path / "site" / "blocked.conf"
    blocked.write_text(f"# hosts shut out\nblock in quick on $in_if from {CLIENT4}\n")
    fw = daemon_factory(rules=INCLUDING_RULES)
    assert lan.connect(4, ALLOWED, timeout=1.0)["result"] == "timeout"
    assert lan.connect(6, ALLOWED)["result"] == "ok"

    # A reload reads the included file again.
    blocked.write_text(f"block in quick on $in_if from {CLIENT6}\n")
    fw.send_signal(signal.SIGHUP)
    wait_until(lambda: "SIGHUP: rules reloaded" in fw.log_text(), 5, what="SIGHUP reload in the log")
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert lan.connect(6, ALLOWED, timeout=1.0)["result"] == "timeout"

    # An error in the included file names it; the running rules stay.
    blocked.write_text(f"block in quick on $in_if from {CLIENT4}\nblock in bogus\n")
    fw.send_signal(signal.SIGHUP)
    wait_until(lambda: f"{blocked}:2:10:" in fw.log_text(), 5, what="the refused reload in the log")
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert lan.connect(6, ALLOWED, timeout=1.0)["result"] == "timeout"
