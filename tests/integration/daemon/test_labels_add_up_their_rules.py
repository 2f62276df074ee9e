"""`label "..."` in the running daemon: the rules that share a label add up under it in
`pairwallctl rules labels` (pfctl -s labels), and each rule's metrics carry its label."""

import time

from daemon_net import ALLOWED, RULES, UDP_PORT

LABELLED_RULES = (
    RULES
    + 'pass in on $in_if proto tcp to port 8080 label "client-out"\n'
    + 'pass in on $in_if proto udp to port 5353 label "client-out"\n'
    + 'pass in on $in_if inet proto icmp icmp-type echoreq label "ping"\n'
)


def test_labels_add_up_their_rules(lan, tmp_path, daemon_factory):
    fw = daemon_factory(rules=LABELLED_RULES)
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert lan.udp(4, UDP_PORT)["result"] == "ok"

    # A rule's counters take in its states' packets as the states move on (the connections'
    # close among them): read them once they have settled.
    def labelled_rules():
        rules = fw.json("rules", "show")["rules"]
        return [r for r in rules if r.get("label") == "client-out"]

    deadline = time.monotonic() + 5
    labelled = labelled_rules()
    while True:
        time.sleep(0.3)
        again = labelled_rules()
        if again == labelled or time.monotonic() > deadline:
            break
        labelled = again
    assert len(labelled) == 2 and all('label "client-out"' in r["text"] for r in labelled), labelled
    packets = sum(int(r["packets"]) for r in labelled)
    # The TCP connection's packets (handshake, data, close) and the UDP exchange's, not only the
    # two that made the states.
    assert packets > 4

    lines = fw.ctl("rules", "labels").stdout.splitlines()
    assert lines[0] == "# label evaluations packets bytes states states-created", lines
    client_out = next(l.split() for l in lines if l.startswith("client-out "))
    assert int(client_out[2]) == packets, lines
    assert int(client_out[5]) == 2, lines  # one TCP and one UDP state
    assert next(l.split() for l in lines if l.startswith("ping "))[2] == "0", lines

    metrics = lan.fw.exec("curl", "-s", "http://127.0.0.1:9477/metrics").stdout
    labelled_samples = [l for l in metrics.splitlines()
                        if l.startswith("pairwall_rule_packets_total{") and 'label="client-out"' in l]
    assert len(labelled_samples) == 2, labelled_samples
    assert sum(int(l.split()[-1]) for l in labelled_samples) == packets
