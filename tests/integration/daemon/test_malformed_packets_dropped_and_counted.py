"""Malformed packets sent through the firewall are dropped and counted by reason; the daemon keeps
running, keeps answering its control socket and keeps passing good traffic."""

from daemon_net import ALLOWED, HERE, SERVER4, settle

# What each crafted kind is counted as (craft.py names its kinds after the expected reason).
EXPECTED = {
    "short": "short",
    "bad_tcp_header": "bad_tcp_header",
    "bad_tcp_options": "bad_tcp_options",
    "bad_tcp_flags": "bad_tcp_flags",
    "bad_udp_header": "bad_udp_header",
    "bad_icmp": "bad_icmp",
}


def test_malformed_packets_dropped_and_counted(lan, fw):
    before = fw.reasons()
    metrics_before = lan.fw.exec("curl", "-s", "http://127.0.0.1:9477/metrics").stdout

    cp = lan.client.exec(lan.python, str(HERE / "craft.py"), SERVER4, "--count", "3", timeout=60)
    import json

    sent = json.loads(cp.stdout.strip().splitlines()[-1])["sent"]
    assert sum(sent.values()) >= 20

    settle()
    after = fw.reasons()
    for kind, n in sent.items():
        reason = EXPECTED[kind]
        assert after[reason] - before[reason] >= n, f"{kind}: {reason} rose by {after[reason] - before[reason]}, sent {n}"
    malformed = sum(after[r] - before[r] for r in set(EXPECTED.values()))
    assert malformed >= sum(sent.values())

    # The same counters on /metrics.
    metrics = lan.fw.exec("curl", "-s", "http://127.0.0.1:9477/metrics").stdout
    assert metrics != metrics_before
    line = next(l for l in metrics.splitlines() if l.startswith('pairwall_verdicts_total{reason="bad_udp_header"}'))
    assert int(line.split()[-1]) == after["bad_udp_header"]

    # Still alive and still filtering.
    assert fw.proc.poll() is None
    assert fw.ctl("status").returncode == 0
    assert lan.connect(4, ALLOWED)["result"] == "ok"
