"""A reload takes [log] pcap_file: logging turned on, moved to another file, and off again, with no
restart (which on a pair's master hands the group over). What was logged before a move stays in the
file it was logged for; a pcap_file whose directory does not exist is refused with the reload, and
logging goes on where it was."""

from daemon_net import UDP_PORT, metric
from test_log_rules_write_pflog_pcap import LOGGED_RULES, read_pflog, rule_number

LOGGED = "pairwall_pcap_logged_total"


def reload_with_pcap(fw, path):
    """Rewrites the daemon's config with `path` as [log] pcap_file (none when None) and reloads it."""
    lines = [l for l in fw.config.read_text().splitlines() if not l.startswith("pcap_file")]
    at = lines.index("[log]") + 1
    if path is not None:
        lines.insert(at, f'pcap_file = "{path}"')
    fw.config.write_text("\n".join(lines) + "\n")
    return fw.ctl("reload", check=False)


def test_reload_moves_the_pcap_log(lan, daemon_factory, tmp_path):
    fw = daemon_factory(rules=LOGGED_RULES)
    logging = f"rule {rule_number(fw, 'pass in log on f0 proto udp')}/"
    first, second = tmp_path / "first.pcap", tmp_path / "second.pcap"

    # Off at start: a packet of a `log` rule goes nowhere.
    assert lan.udp(4, UDP_PORT)["result"] == "ok"
    assert metric(lan, LOGGED) == 0

    # On by a reload.
    out = reload_with_pcap(fw, first)
    assert out.returncode == 0 and "which a reload does not take" not in out.stdout + out.stderr, out
    assert f"reload: pcap log off -> {first}" in fw.log_text()
    assert lan.udp(4, UDP_PORT)["result"] == "ok"
    lines = read_pflog(first, lambda ls: len(ls) >= 1)
    assert len(lines) == 1 and logging in lines[0], lines

    # Moved: the next state's packet is in the second file, the first keeps its one.
    assert reload_with_pcap(fw, second).returncode == 0
    assert lan.udp(4, UDP_PORT)["result"] == "ok"
    lines = read_pflog(second, lambda ls: len(ls) >= 1)
    assert len(lines) == 1 and logging in lines[0], lines
    assert len(read_pflog(first, lambda ls: True)) == 1

    # A directory that does not exist: refused, and logging stays where it was.
    missing = tmp_path / "no-such-dir" / "third.pcap"
    out = reload_with_pcap(fw, missing)
    assert out.returncode != 0 and str(missing.parent) in out.stderr, out
    assert lan.udp(4, UDP_PORT)["result"] == "ok"
    assert len(read_pflog(second, lambda ls: len(ls) >= 2)) == 2

    # Off: nothing more is written.
    assert reload_with_pcap(fw, None).returncode == 0
    assert f"reload: pcap log {second} -> off" in fw.log_text()
    assert lan.udp(4, UDP_PORT)["result"] == "ok"
    assert len(read_pflog(second, lambda ls: len(ls) > 2, timeout=1.0)) == 2
    assert metric(lan, LOGGED) == 3
    assert metric(lan, "pairwall_pcap_write_errors_total") == 0
