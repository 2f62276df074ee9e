#!/usr/bin/python3
"""The drill's picture: TCP throughput and ping over time (IPv6's too in a dual-stack drill), which node
forwarded, the kill marked.

  plot.py SAMPLES.jsonl REPORT.json OUT.png [CLIENT.json]

Also imported by pairwall-lab. Needs matplotlib (python3-matplotlib).
"""

import json
import sys

NODE_COLOURS = {"fwA": "tab:blue", "fwB": "tab:orange"}


def plot(samples_path, report, out_png, client=None):
    """client: the traffic client's summary, for the final count of lost pings."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(samples_path, encoding="utf-8") as f:
        samples = [json.loads(line) for line in f if line.strip()]
    if not samples:
        raise ValueError(f"{samples_path}: no samples")
    t0 = samples[0]["t"]
    t_kill = t0 + report["t_kill_s"] if "t_kill_s" in report else None
    # Samples are stamped at their end; the first one begins 100 ms before its stamp.
    xs = [s["t"] - t0 for s in samples]
    # Delivered data only: bytes the client received plus client bytes the server acknowledged (bytes
    # written into a socket during an outage are not throughput).
    mbps = [(s["tcp_rx_bytes"] + s.get("tcp_acked_bytes", 0)) * 8 / 0.1 / 1e6 for s in samples]
    rtt = [s["ping_rtt_ms"] for s in samples]
    dual_stack = "ping6_sent" in samples[0]
    rtt6 = [s.get("ping6_rtt_ms") for s in samples]
    lost = [s["ping_sent"] - s["ping_rcvd"] for s in samples]
    lost6 = [s.get("ping6_sent", 0) - s.get("ping6_rcvd", 0) for s in samples]
    if client is not None:
        # The final verdict on each ping (late replies included), binned by send time.
        def binned(pings):
            out = [0] * len(samples)
            for sent, reply, _ttl in pings:
                i = int((sent - t0) // 0.1) + 1
                if reply is None and 0 <= i < len(out):
                    out[i] += 1
            return out

        lost = binned(client["ping"])
        lost6 = binned(client.get("ping6", []))
    tag_node = {"101": "fwA", "102": "fwB"}

    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(10, 6))
    ax1.plot(xs, mbps, color="black", lw=1)
    ax1.set_ylabel("TCP Mbit/s delivered")
    # Which node forwarded most probe replies in each sample, as a coloured band.
    for s, x in zip(samples, xs):
        ttls = s.get("reply_ttl") or {}
        if ttls:
            node = tag_node.get(max(ttls, key=ttls.get))
            if node:
                ax1.axvspan(x - 0.1, x, color=NODE_COLOURS[node], alpha=0.15, lw=0)
    ax2.plot(xs, [r if r is not None else float("nan") for r in rtt], color="tab:green", lw=1,
             label="IPv4 ping RTT" if dual_stack else "ping RTT")
    ax3 = ax2.twinx()
    ax3.bar(xs, lost, width=0.08, color="tab:red", alpha=0.6, label="IPv4 pings lost" if dual_stack else "pings lost")
    if dual_stack:
        ax2.plot(xs, [r if r is not None else float("nan") for r in rtt6], color="tab:purple", lw=1, ls="--",
                 label="IPv6 ping RTT")
        ax3.bar(xs, lost6, width=0.08, bottom=lost, color="tab:purple", alpha=0.6, label="IPv6 pings lost")
        ax2.legend(loc="upper left", fontsize=8)
        ax3.legend(loc="upper right", fontsize=8)
    ax2.set_ylabel("ping RTT ms")
    ax3.set_ylabel("pings lost / 100 ms")
    ax2.set_xlabel("seconds")
    for ax in (ax1, ax2):
        if t_kill is not None:
            ax.axvline(t_kill - t0, color="red", ls="--", lw=1.5)
    if t_kill is not None:
        ax1.annotate(f"kill ({report.get('kill')}) of {report.get('old_master')}", (t_kill - t0, max(mbps) or 1),
                     color="red", xytext=(5, -12), textcoords="offset points")
        for rc in report.get("role_changes", []):
            x = t_kill - t0 + rc["t_ms"] / 1000.0
            ax1.axvline(x, color=NODE_COLOURS.get(rc["node"], "grey"), ls=":", lw=1)
    fo = report.get("failover_ms")
    fig.suptitle(f"pairwall drill: {report.get('survived')}/{report.get('connections')} connections survived, "
                 f"failover {'n/a' if fo is None else f'{fo:.0f} ms'} "
                 f"(band: node forwarding — fwA blue, fwB orange)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        report = json.load(f)
    client = None
    if len(argv) == 4:
        with open(argv[3], encoding="utf-8") as f:
            client = json.load(f)
    print(plot(argv[0], report, argv[2], client))
    return 0


if __name__ == "__main__":
    sys.exit(main())
