"""pf's brute-force guard through the real pairwalld: a rule with `max-src-conn-rate 3/60,
overload <bruteforce> flush global`. The client's first three connections pass; its fourth is cut
when its handshake completes, its address joins <bruteforce> (which `block quick` names) and every
state it holds is flushed, so that a connection it had already established on another service
stops too. Another source is untouched."""

from daemon_net import ALLOWED, BLOCKED, CLIENT4, RULES, settle
from netns import wait_until

FLOOD_GUARD = ("table <bruteforce> persist {}\n" + RULES +
               f"pass in on $in_if proto tcp to port {BLOCKED} "
               "keep state (max-src-conn-rate 3/60, overload <bruteforce> flush global)\n"
               f"pass out on $out_if proto tcp to port {BLOCKED}\n"
               "block in quick on $in_if from <bruteforce>\n")


def bruteforce_entries(fw):
    return fw.json("tables", "show", "bruteforce")["tables"][0].get("entries", [])


def test_overload_shuts_out_a_connection_flood(lan, daemon_factory):
    fw = daemon_factory(rules=FLOOD_GUARD)
    held = lan.hold(4)
    assert held.opened.get("connected"), held.opened
    assert held.echo()["echo"]

    for i in range(3):
        assert lan.connect(4, BLOCKED)["result"] == "ok", f"connection {i + 1} of 3 allowed"
    assert bruteforce_entries(fw) == []
    # pfctl -s Sources: the client's node under the guarding rule (@10), three connections counted.
    nodes = fw.json("sources")["sources"]
    assert [(n["address"], n["rule"], n["connections"], n["rate_seconds"]) for n in nodes] == [
        (CLIENT4, 10, 3, 60)], nodes
    assert f"{CLIENT4}  rule @10  states 3, connections 3, rate 3.0/60s" in fw.ctl("sources").stdout

    fourth = lan.connect(4, BLOCKED, timeout=1.0)
    assert fourth["result"] != "ok", fourth
    wait_until(lambda: bruteforce_entries(fw) == [f"{CLIENT4}/32"], 5, what="the client in <bruteforce>")
    assert f"overload: added {CLIENT4} to <bruteforce>" in fw.log_text()
    # Flushed with the table's update: every state of the client, on either service.
    assert int(fw.json("states", CLIENT4)["matched"]) == 0

    # The held connection stops, and the table keeps the client from coming back.
    assert not held.echo(timeout=1.0).get("echo"), "a flushed connection still carries data"
    assert lan.connect(4, ALLOWED, timeout=1.0)["result"] == "timeout"
    settle()
    reasons = fw.reasons()
    assert reasons["src_limit"] >= 1, reasons
    metrics = lan.fw.exec("curl", "-s", "http://127.0.0.1:9477/metrics").stdout.splitlines()
    assert "pairwall_source_overloads_total 1" in metrics, [m for m in metrics if "source" in m]
    assert "pairwall_source_overloads_lost_total 0" in metrics
    assert 'pairwall_table_entries{table="bruteforce"} 1' in metrics, [m for m in metrics if "table" in m]

    # The client's IPv6 address is another source: the limit and the table leave it alone.
    assert lan.connect(6, BLOCKED)["result"] == "ok"
    assert lan.connect(6, ALLOWED)["result"] == "ok"
