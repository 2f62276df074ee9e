"""pflow: the flows of the states whose rule says (pflow), sent as IPFIX to the [pflow] collector
as their states go, as pf's pflow(4) sends them. A collector in the server's namespace reads what
the firewall sends; a UDP exchange and a TCP connection (IPv4 and IPv6) pass the firewall, and
their states are killed: each state's two records (one a direction) arrive with its addresses,
ports and counts. A state of a rule without pflow sends nothing."""

import struct
import subprocess

from daemon_net import ALLOWED, CLIENT4, RULES, SERVER4, UDP_PORT, read_line, settle
from netns import wait_until

COLLECTOR_PORT = 4739
RULES_PFLOW = RULES.replace("pass in on $in_if proto tcp to port 8080",
                            "pass in on $in_if proto tcp to port 8080 keep state (pflow)").replace(
    "pass in on $in_if proto udp to port 5353", "pass in on $in_if proto udp to port 5353 keep state (pflow)")

# Writes each datagram it receives as a hex line, for at most a minute.
COLLECTOR = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(0.5)
print("listening", flush=True)
end = time.monotonic() + 60
with open(sys.argv[3], "w") as out:
    while time.monotonic() < end:
        try:
            data, _ = s.recvfrom(65535)
        except socket.timeout:
            continue
        out.write(data.hex() + "\\n")
        out.flush()
"""


def read_ipfix(messages):
    """[(template id, {ie: bytes})] of the data records, and the message headers, as RFC 7011 reads."""
    templates, records, headers = {}, [], []
    for m in messages:
        version, length, export_time, sequence, domain = struct.unpack_from("!HHIII", m)
        assert version == 10 and length == len(m), (version, length, len(m))
        headers.append((sequence, domain))
        at = 16
        while at < len(m):
            set_id, set_length = struct.unpack_from("!HH", m, at)
            end, at = at + set_length, at + 4
            if set_id == 2:
                while at + 4 <= end:
                    tid, count = struct.unpack_from("!HH", m, at)
                    at += 4
                    templates[tid] = [struct.unpack_from("!HH", m, at + 4 * i) for i in range(count)]
                    at += 4 * count
            else:
                fields = templates[set_id]
                size = sum(n for _, n in fields)
                while at + size <= end:
                    record = {}
                    for ie, n in fields:
                        record[ie] = m[at:at + n]
                        at += n
                    records.append((set_id, record))
            assert at == end
    return records, headers


def number(record, ie):
    return int.from_bytes(record[ie], "big")


def start_collector(lan, path, port):
    collector = lan.topo.spawn(lan.server, [lan.python, "-c", COLLECTOR, SERVER4, str(port), str(path)],
                               stdout=subprocess.PIPE)
    assert "listening" in read_line(collector, 10)
    return collector


def collected(path):
    lines = path.read_text().split() if path.exists() else []
    return read_ipfix([bytes.fromhex(l) for l in lines])


def test_pflow_exports_flows_to_a_collector(lan, daemon_factory, tmp_path):
    received = tmp_path / "collector.hex"
    collector = start_collector(lan, received, COLLECTOR_PORT)
    fw = daemon_factory(rules=RULES_PFLOW,
                        sections=f'\n[pflow]\ncollector = "{SERVER4}:{COLLECTOR_PORT}"\nobservation_domain = 77\n')
    for family in (4, 6):
        assert lan.udp(family)["result"] == "ok", family
        assert lan.connect(family, ALLOWED)["result"] == "ok", family
    assert lan.ping(4)["received"] >= 1  # by a rule without pflow: its state sends nothing
    settle()
    for proto in ("udp", "tcp", "icmp"):
        fw.ctl("states", "kill", "proto", proto)

    wait_until(lambda: len(collected(received)[0]) >= 8, 10, what="8 records (4 flows) at the collector")
    settle()
    found, headers = collected(received)
    assert len(found) == 8, found
    assert all(domain == 77 for _, domain in headers)
    by_flow = {}
    for tid, r in found:
        family = 4 if tid == 256 else 6
        assert tid in (256, 257)
        src, dst = (8, 12) if family == 4 else (27, 28)
        by_flow.setdefault((family, number(r, 4)), []).append((r[src], r[dst], number(r, 7), number(r, 11), r))
    for (family, proto), directions in sorted(by_flow.items()):
        assert len(directions) == 2, (family, proto)
        (src, dst, sport, dport, out), (rsrc, rdst, rsport, rdport, back) = directions
        service = UDP_PORT if proto == 17 else ALLOWED
        assert (dport, rsport, rdport) == (service, service, sport), (family, proto)
        assert (rsrc, rdst) == (dst, src)
        if family == 4:
            assert src == bytes(map(int, CLIENT4.split(".")))
        assert number(out, 2) >= 1 and number(back, 2) >= 1  # packets each way
        assert number(out, 1) > 0 and number(back, 1) > 0    # bytes
        assert number(out, 136) == 4                         # forced end: killed
        assert number(out, 153) >= number(out, 152) > 1_700_000_000_000  # wall clock, in ms
    assert sorted(by_flow) == [(4, 6), (4, 17), (6, 6), (6, 17)]
    tcp = by_flow[(4, 6)][0][4]
    assert number(tcp, 2) >= 3  # SYN, ACK, data, FIN...

    text = lan.fw.exec("curl", "-s", "http://127.0.0.1:9477/metrics").stdout
    assert 'pairwall_pflow_flows_total{result="sent"} 4' in text, text
    assert 'pairwall_pflow_flows_total{result="dropped"} 0' in text
    lan.topo.stop(collector)


def test_reload_moves_the_pflow_collector(lan, daemon_factory, tmp_path):
    """[pflow] collector moved by a reload, then taken out: the next flows go to the new collector,
    the templates first, then nowhere (dropped and counted)."""
    first, second = tmp_path / "first.hex", tmp_path / "second.hex"
    collectors = [start_collector(lan, first, COLLECTOR_PORT), start_collector(lan, second, COLLECTOR_PORT + 1)]
    fw = daemon_factory(rules=RULES_PFLOW, sections=f'\n[pflow]\ncollector = "{SERVER4}:{COLLECTOR_PORT}"\n')

    def one_flow():
        assert lan.udp(4)["result"] == "ok"
        fw.ctl("states", "kill", "proto", "udp")

    one_flow()
    wait_until(lambda: len(collected(first)[0]) == 2, 10, what="the first flow at the first collector")

    text = fw.config.read_text()
    fw.config.write_text(text.replace(f":{COLLECTOR_PORT}", f":{COLLECTOR_PORT + 1}"))
    answer = fw.ctl("reload")
    assert "which a reload does not take" not in answer.stdout + answer.stderr
    wait_until(lambda: f"pflow {SERVER4}:{COLLECTOR_PORT} -> {SERVER4}:{COLLECTOR_PORT + 1}" in fw.log_text(), 5,
               what="the move in the log")
    one_flow()
    wait_until(lambda: len(collected(second)[0]) == 2, 10, what="the second flow at the second collector")
    found, headers = collected(second)
    assert headers[0][0] == 0  # a new transport session: its sequence starts again
    assert len(collected(first)[0]) == 2

    fw.config.write_text(text.split("\n[pflow]")[0] + "\n")
    fw.ctl("reload")
    wait_until(lambda: "-> off" in fw.log_text(), 5, what="pflow off in the log")
    one_flow()
    wait_until(lambda: 'pairwall_pflow_flows_total{result="unsent"} 1' in
               lan.fw.exec("curl", "-s", "http://127.0.0.1:9477/metrics").stdout, 10, what="the flow unsent")
    settle()
    assert len(collected(first)[0]) == 2 and len(collected(second)[0]) == 2
    for c in collectors:
        lan.topo.stop(c)
