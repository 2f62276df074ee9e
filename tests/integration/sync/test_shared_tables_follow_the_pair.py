"""A table the pair shares ([sync] tables = ["bruteforce"]) follows the pair: the client goes over
`max-src-conn-rate 3/60` on node A, its `overload <bruteforce>` adds it there, and node B holds it
too within seconds, though no packet of the client crossed B; B restarted gets it back with its
bulk; an operator's delete on B empties A's; a table not listed (<local>) stays each node's own."""

from netns import wait_until
from sync_pair import CLIENT, RULES, SERVER, TCP_PORT

GUARDED = ("table <bruteforce> persist\ntable <local> persist\n" +
           RULES.replace("pass in on $in_if inet proto { tcp udp } from 10.88.1.0/24 to any keep state",
                         "pass in on $in_if inet proto tcp from 10.88.1.0/24 to any flags S/SA keep state "
                         "(max-src-conn-rate 3/60, overload <bruteforce> flush global)\n"
                         "pass in on $in_if inet proto udp from 10.88.1.0/24 to any keep state") +
           "block in quick on $in_if from { <bruteforce> <local> }\n")


def entries(node, table):
    return node.json("tables", "show", table)["tables"][0].get("entries", [])


def tables_metric(node, direction):
    return node.metrics().get(f'pairwall_sync_tables_total{{direction="{direction}"}}', 0)


def test_shared_tables_follow_the_pair(make_pair):
    assert "overload <bruteforce>" in GUARDED
    pair = make_pair(sync_extra='tables = ["bruteforce"]', metrics=True)
    for node in (pair.a, pair.b):
        (node.dir / "pairwall.rules").write_text(GUARDED)
    pair.start()
    a, b = pair.a, pair.b

    # Four connections within the rate's minute: the fourth puts the client over it on A.
    pair.flows("client", "open", SERVER, TCP_PORT, 4, "--sport", 45000, "--interval", 0.05, "--hold", 0)
    wait_until(lambda: entries(a, "bruteforce") == [f"{CLIENT}/32"], 5, what="the client in A's <bruteforce>")
    wait_until(lambda: entries(b, "bruteforce") == [f"{CLIENT}/32"], 5, what="the client in B's <bruteforce>")
    assert f"sync: <bruteforce> taken from the peer: 1 entries, 1 added, 0 deleted" in b.log_text()
    assert tables_metric(a, "sent") >= 1 and tables_metric(b, "received") >= 1
    # B took it from A, and does not send it back.
    assert tables_metric(b, "sent") == 0
    assert "tables        0 sent, 1 received whole ([sync] tables)\n" in b.ctl("sync", "status").stdout
    assert b.ctl("tables").stdout.splitlines()[:2] == ["<bruteforce>  1 entry, shared with the peer",
                                                      "<local>  0 entries"]

    # A change to a table not listed stays on its node; one to <bruteforce> made with it goes.
    a.ctl("tables", "add", "local", "10.88.1.77")
    a.ctl("tables", "add", "bruteforce", "10.88.1.99")
    wait_until(lambda: "10.88.1.99/32" in entries(b, "bruteforce"), 5, what="B holding A's second entry")
    assert entries(b, "local") == []

    # B restarted holds nothing of its own: its bulk from A brings the table.
    b.kill()
    b.start()
    wait_until(lambda: b.sync_status().get("bulk_done"), 20, what="B's bulk done")
    wait_until(lambda: sorted(entries(b, "bruteforce")) == [f"{CLIENT}/32", "10.88.1.99/32"], 5,
               what="B's <bruteforce> back from A")

    # An operator letting the client back in on either node lets it in on both.
    b.ctl("tables", "delete", "bruteforce", CLIENT)
    wait_until(lambda: entries(a, "bruteforce") == ["10.88.1.99/32"], 5, what="A's <bruteforce> without the client")
    assert entries(a, "local") == ["10.88.1.77/32"]
    # With its rate history gone too (pfctl -K), it connects through A again.
    a.ctl("sources", "kill", CLIENT)
    opened = pair.flows("client", "open", SERVER, TCP_PORT, 1, "--sport", 45100, "--hold", 0)
    assert opened[-1] == {"done": True} and any(line.get("ok") for line in opened), opened
