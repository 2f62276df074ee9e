"""With two queues the hooks spread flows over both workers by address (--queue-balance), each
flow staying on one worker; the workers share one state table, and `status` and `stats` sum them."""

from daemon_net import ALLOWED, BLOCKED, settle

SOURCES = [f"10.77.1.{i}" for i in range(10, 26)]


def test_two_queues_share_one_state_table(lan, daemon_factory):
    for a in SOURCES:
        lan.client.address("c0", f"{a}/24")
    fw = daemon_factory(queues=2)
    status = fw.json("status")
    assert [q["queue"] for q in status["queues"]] == [0, 1]
    assert any("--queue-balance 0:1" in l for l in lan.hooks_present()), lan.hooks_present()

    for a in SOURCES:
        r = lan.connect(4, ALLOWED, source=a)
        assert r["result"] == "ok", (a, r)
    assert lan.connect(4, BLOCKED, timeout=1.0, source=SOURCES[0])["result"] == "timeout"

    settle()
    status = fw.json("status")
    per_queue = [int(q["packets"]) for q in status["queues"]]
    assert all(n > 0 for n in per_queue), f"16 sources should reach both queues: {per_queue}"
    assert int(status["packets"]) == sum(per_queue)
    assert int(fw.json("states", "port", ALLOWED)["matched"]) == len(SOURCES)
