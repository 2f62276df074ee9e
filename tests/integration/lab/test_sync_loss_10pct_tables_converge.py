"""10% of sync datagrams dropped both ways while states are created: once the loss stops, both tables
hold exactly the same states (the resend window and gap resync lose nothing silently). The lab holds the VIPs still (scripted driver):
the scenario is about sync, not election."""

from pairwall_lab import chaos, drill


def test_sync_loss_10pct_tables_converge(make_lab, out_dir):
    lab = make_lab("scripted")
    chaos.sync_loss(lab, 0.10)
    try:
        for i in range(5):
            chaos.preload_udp_states(lab, 4000, sport=20000 + i, rate=2000)  # 10 s of churn
        # Long-lived TCP too: updates (windows, TCP states) must converge as well as inserts.
        rep = drill.run(lab, connections=50, duration=6.0, kill=None, kill_after=1.0, restore_after=0.5,
                        out_dir=out_dir, churn_per_s=20)
    finally:
        chaos.clear_faults(lab)
    assert rep["survived"] == 50
    a, b, took = chaos.wait_tables_agree(lab, timeout=20)
    assert len(a) >= 20_000, f"only {len(a)} states on fwA"
    assert a == b, f"tables differ after {took:.1f} s: {len(a - b)} only on fwA, {len(b - a)} only on fwB"
