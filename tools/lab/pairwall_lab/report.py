"""Turns a traffic client's summary and the drill's timeline into the drill report.

Definitions (also in `pairwall-lab drill --help`):
- failover_ms: from the kill instant (taken just before the kill is issued) to the arrival at the client
  of the first probe reply (ping or UDP, one of each every 10 ms) that was sent after the kill and was
  forwarded by the new master, as its TTL stamp shows. Resolution: the probe period. null when no
  takeover is expected (a sync cut) or none happened while the drill ran.
- outage_ms: the longest time without any probe reply at the client from the kill to the end of the run,
  whichever node forwarded them.
- survived: connections established before the kill that never reset, closed or reconnected, and that
  carried data in both directions after the failover: a record from the server arrived, and the server
  acknowledged a record of the client, both after the failover instant (the kill when there is none).
- tcp_stall_ms_max: the longest time any connection went without a record arriving from the server or
  without the server's acknowledgement advancing (normal value: about one record period).
- ping_lost / udp_lost: probes sent that got no reply within 1 s after the last probe was sent.
- dual stack (`up --ipv6`): every other connection and a copy of each probe are IPv6's. failover_ms and
  outage_ms are then the worse of the two families', each measured on its own probes (a family whose
  traffic did not move would otherwise hide behind the other's); survived_by_family, ping6_lost and
  udp6_lost say which family lost what.
- churn (when short connections run): opened, ok, and failed_after_failover, those opened after the
  failover instant that did not complete (connect, one record each way); opened_last_second and
  failed_opened_last_second, those opened in the second before the kill and how many of them failed.
"""


def _ms(seconds):
    return None if seconds is None else round(seconds * 1000.0, 1)


def tag_to_node(tags):
    return {v: k for k, v in tags.items()}


def analyse(summary, t_kill, node_tags, old_master, new_master, role_changes=(), states=None, extra=None,
            until=None):
    """summary: the client's summary; node_tags: {node: TTL tag}; new_master: node expected to take over
    or None; until: where this kill's outage window ends (the next kill), default the end of the run.
    Returns the report dictionary."""
    families = {"inet": summary["ping"] + summary["udp"]}
    if "ping6" in summary:
        families["inet6"] = summary["ping6"] + summary["udp6"]
    probes = [p for family in families.values() for p in family]
    end = summary["end"]
    tag_node = tag_to_node(node_tags)
    window_end = until if until is not None else end

    def recovered(family_probes):
        if new_master is None:
            return None
        tag = node_tags[new_master]
        arrivals = [r for s, r, ttl in family_probes if s >= t_kill and r is not None and ttl == tag]
        return min(arrivals) if arrivals else None

    def longest_outage(family_probes):
        after = sorted(r for _s, r, _ttl in family_probes if r is not None and t_kill <= r < window_end)
        if not after:
            return window_end - t_kill
        return max([after[0] - t_kill] + [b - a for a, b in zip(after, after[1:])])

    recover_by_family = {f: recovered(p) for f, p in families.items()}
    outage_by_family = {f: longest_outage(p) for f, p in families.items()}
    recover = None if None in recover_by_family.values() else max(recover_by_family.values())
    outage = max(outage_by_family.values())

    # Which node forwarded the replies of the last second before the kill and of the last second of the run.
    def path(t0, t1):
        seen = {}
        for s, r, ttl in probes:
            if r is not None and t0 <= s < t1:
                node = tag_node.get(ttl, f"ttl{ttl}")
                seen[node] = seen.get(node, 0) + 1
        return seen

    t_ref = recover if recover is not None else t_kill
    survived = 0
    survived_by_family = {f: 0 for f in families}
    failed = []
    stall = 0.0
    reconnects = 0
    for c in summary["conns"]:
        reconnects += c["reconnects"]
        gaps = [c["max_rx_gap"], c["max_ack_gap"]]
        for last in (c["last_rx"], c["last_ack"]):
            if last is not None:
                gaps.append(max(0.0, end - last))
        if c["established"] is not None:
            stall = max(stall, *gaps)
        ok = (c["established"] is not None and c["established"] < t_kill and not c["failures"]
              and c["last_rx"] is not None and c["last_rx"] > t_ref
              and c["last_ack"] is not None and c["last_ack"] > t_ref)
        if ok:
            survived += 1
            survived_by_family[c.get("family", "inet")] += 1
        else:
            failed.append({"id": c["id"], "failures": [[_ms(t - t_kill), k] for t, k in c["failures"][:3]],
                           "last_rx_ms": _ms(c["last_rx"] - t_kill) if c["last_rx"] else None,
                           "last_ack_ms": _ms(c["last_ack"] - t_kill) if c["last_ack"] else None})

    churn = summary.get("churn") or []
    states = states or {}
    report = {
        "connections": summary["connections"],
        "established": summary["established"],
        "survived": survived,
        "failover_ms": _ms(recover - t_kill) if recover is not None else None,
        "outage_ms": _ms(outage),
        "ping_lost": sum(1 for _s, r, _t in summary["ping"] if r is None) if summary.get("ping_enabled") else None,
        "ping_sent": len(summary["ping"]),
        "tcp_stall_ms_max": _ms(stall),
        "udp_lost": sum(1 for _s, r, _t in summary["udp"] if r is None),
        "udp_sent": len(summary["udp"]),
        "states_a": states.get("fwA"),
        "states_b": states.get("fwB"),
        "role_changes": list(role_changes),
        "old_master": old_master,
        "new_master": new_master,
        "path_before_kill": path(t_kill - 1.0, t_kill),
        "path_at_end": path(end - 1.0, end),
        "reconnects": reconnects,
        "failed_connections": failed[:10],
    }
    if "inet6" in families:
        report.update({
            "survived_by_family": survived_by_family,
            "connections_by_family": {f: sum(1 for c in summary["conns"] if c.get("family", "inet") == f)
                                      for f in families},
            "failover_ms_by_family": {f: _ms(r - t_kill) if r is not None else None
                                      for f, r in recover_by_family.items()},
            "outage_ms_by_family": {f: _ms(o) for f, o in outage_by_family.items()},
            "ping6_lost": sum(1 for _s, r, _t in summary["ping6"] if r is None) if summary.get("ping_enabled")
            else None,
            "ping6_sent": len(summary["ping6"]),
            "udp6_lost": sum(1 for _s, r, _t in summary["udp6"] if r is None),
            "udp6_sent": len(summary["udp6"]),
        })
    if churn:
        # Short connections: all of them, and those opened after the failover (which must all work).
        # And those opened in the second before the kill: a state the peer had not yet received when
        # the master died fails them (what [sync] defer prevents).
        before = [c for c in churn if t_kill - 1.0 <= c[0] < t_kill]
        report["churn"] = {"opened": len(churn), "ok": sum(1 for c in churn if c[2] == "ok"),
                           "failed_after_failover": sum(1 for c in churn if c[0] >= t_ref and c[2] != "ok"),
                           "opened_last_second": len(before),
                           "failed_opened_last_second": sum(1 for c in before if c[2] != "ok")}
    if extra:
        report.update(extra)
    return report


def human(report):
    """A short summary for people (the demo's output)."""
    lines = []
    rc = report.get("role_changes") or []
    roles_after = ", ".join(f"{c['node']}→{c['to']} at {c['t_ms']:+.0f} ms" for c in rc) or "no change seen"
    lines.append(f"kill:          {report.get('kill', '?')} of {report['old_master']} "
                 f"(driver {report.get('driver', '?')})")
    lines.append(f"roles before:  {report.get('roles_before')}")
    lines.append(f"role changes:  {roles_after}")
    lines.append(f"roles after:   {report.get('roles_after')}")
    fo = report["failover_ms"]
    lines.append(f"failover:      {'no takeover measured' if fo is None else f'{fo:.0f} ms'}"
                 f" (longest outage {report['outage_ms']:.0f} ms)")
    lines.append(f"TCP:           {report['survived']}/{report['connections']} connections survived, "
                 f"longest stall {report['tcp_stall_ms_max']:.0f} ms, {report['reconnects']} reconnects")
    lines.append(f"probes:        ping lost {report['ping_lost']}/{report['ping_sent']}, "
                 f"UDP lost {report['udp_lost']}/{report['udp_sent']}")
    if "ping6_sent" in report:
        by = report["survived_by_family"]
        of = report["connections_by_family"]
        fo = {f: "no takeover measured" if ms is None else f"{ms:.0f} ms"
              for f, ms in report["failover_ms_by_family"].items()}
        lines.append(f"IPv6:          ping lost {report['ping6_lost']}/{report['ping6_sent']}, UDP lost "
                     f"{report['udp6_lost']}/{report['udp6_sent']}; connections survived IPv4 "
                     f"{by['inet']}/{of['inet']}, IPv6 {by['inet6']}/{of['inet6']}; failover IPv4 "
                     f"{fo['inet']}, IPv6 {fo['inet6']}")
    lines.append(f"states:        fwA {report['states_a']}, fwB {report['states_b']}")
    if report.get("cpu_steal_pct") is not None:
        lines.append(f"cpu steal:     {report['cpu_steal_pct']}% during the drill")
    if report.get("churn"):
        c = report["churn"]
        lines.append(f"short conns:   {c['ok']}/{c['opened']} completed, {c['failed_after_failover']} failed "
                     f"after the failover, {c['failed_opened_last_second']}/{c['opened_last_second']} opened in "
                     "the second before the kill failed")
    note = {"none": "driver none: kernel forwarding and a takeover scripted by the lab; this shows the lab, "
                    "not pairwall",
            "scripted": "driver scripted: pairwalld filtered, the lab moved the VIPs (pairwalld's election "
                        "was not used)"}.get(report.get("driver"))
    if note:
        lines.append(f"note:          {note}")
    return "\n".join(lines)
