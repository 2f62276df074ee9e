"""Highest offered UDP rate with frame loss <= 0.005: the thesis's binary search, shared by the suites.

A trial offers `rate` packets/s (pairwall-udpgen send, paced) from the client namespace for `seconds`
and counts what the sink in the server namespace received. Loss = 1 - received / sent. The sink's
own socket drops (the server namespace's UDP RcvbufErrors) are counted apart: they are a fault of
the measurement, not of the firewall, and a trial that has them is reported as `sink_drops` > 0.

search() first offers as fast as the sender can (that bounds the search and, when it is lossless,
is the answer, marked sender_limited), then bisects between the last passing and the last failing
rate until they are within `resolution` of each other, `max_steps` trials were run, or `budget`
seconds went by. It returns the last passing rate, never an interpolation.
"""
import json
import subprocess
import time

import benchnet as bn

LOSS = 0.005


def backlog_drops():
    """Packets the kernel dropped for a full per-CPU input backlog (all CPUs; /proc/net/softnet_stat col 2)."""
    with open("/proc/net/softnet_stat") as f:
        return sum(int(line.split()[1], 16) for line in f if line.strip())


def trial(build, rate, seconds=1.0, flows=16, size=64, src=None, port=bn.UDP_PORT, dst=bn.SERVER,
          client=bn.NS_C, server=bn.NS_S, send=None):
    """One paced run (rate 0 = as fast as possible); returns sent, received, loss and latency.

    `send()`, when given, replaces pairwall-udpgen send as the sender; it must return a dict with
    the generator's `sent`, `pps` and `seconds`."""
    sink = subprocess.Popen(["ip", "netns", "exec", server] + bn.harness([f"{build}/bin/pairwall-udpgen", "recv",
                             "--port", str(port), "--duration", str(seconds + 5), "--idle", "0.5"]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    if send is None:
        cmd = [f"{build}/bin/pairwall-udpgen", "send", "--dst", dst, "--port", str(port),
               "--src", ",".join(src or bn.CLIENT_ADDRS), "--flows", str(flows), "--size", str(size),
               "--duration", str(seconds)]
        if rate > 0:
            cmd += ["--rate", str(int(rate))]

        def send():
            return json.loads(bn.ns(client, *bn.harness(cmd), timeout=seconds + 20).stdout)
    try:
        time.sleep(0.2)
        before = bn.udp_snmp(server)
        backlog = backlog_drops()
        sent = send()
        out, err = sink.communicate(timeout=seconds + 15)
        got = json.loads(out)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    backlog = backlog_drops() - backlog
    after = bn.udp_snmp(server)
    sink_drops = after.get("RcvbufErrors", 0) - before.get("RcvbufErrors", 0)
    n_sent, n_recv = sent["sent"], got["received"]
    lost = max(0, n_sent - n_recv - sink_drops)
    return {"rate": int(rate), "sent": n_sent, "received": n_recv, "sink_drops": sink_drops,
            "backlog_drops": backlog, "offered_pps": round(sent["pps"]),
            "delivered_pps": round(n_recv / max(sent["seconds"], 1e-9)),
            "loss": round(lost / n_sent, 5) if n_sent else 1.0,
            "latency_us_p50": got["latency_us_p50"], "latency_us_p99": got["latency_us_p99"]}


def search(run, resolution=0.03, max_steps=12, budget=90.0, loss=LOSS, log=None, confirm=True):
    """Bisect on `run(rate) -> trial dict`. Returns {lossless_pps, steps, trials, ...}. No trial starts
    that would end past `budget` seconds (one trial's time is taken from the first). With `confirm`,
    a failing rate is tried once more and fails only if both trials lose: on a shared machine a
    burst of another guest's work on the firewall's CPU otherwise drags the whole search down."""
    start = time.time()
    trials = []

    def probe(rate):
        t = run(rate)
        t["pass"] = t["loss"] <= loss
        trials.append(t)
        if log:
            log(f"  rate {int(rate):>8}  offered {t['offered_pps']:>8}  recv {t['received']:>8}  loss {t['loss']:.4f}"
                f"  backlog_drops {t['backlog_drops']}{'  SINK_DROPS ' + str(t['sink_drops']) if t['sink_drops'] else ''}"
                f"  {'ok' if t['pass'] else 'LOSS'}")
        return t

    top = probe(0)
    ceiling = top["offered_pps"]
    result = {"sender_max_pps": ceiling}
    if top["pass"]:
        result.update(lossless_pps=ceiling, sender_limited=True)
    else:
        good, bad = 0, ceiling
        # The delivered rate when overloaded is a close first guess at the lossless rate.
        rate = min(max(top["delivered_pps"], ceiling * 0.05), ceiling * 0.95)
        per_trial = time.time() - start
        while len(trials) < max_steps + 1 and time.time() - start + per_trial <= budget and \
                bad - good > resolution * bad:
            t = probe(rate)
            if not t["pass"] and confirm and time.time() - start + per_trial <= budget:
                t = probe(rate)
            # The rate actually offered counts: a paced sender can fall short of the asked rate.
            offered = min(rate, t["offered_pps"])
            if t["pass"]:
                good = max(good, offered)
            else:
                bad = max(good + 1, min(bad, offered))
            rate = (good + bad) / 2
        result.update(lossless_pps=int(good), sender_limited=False, failing_pps=int(bad))
    result["steps"] = len(trials)
    result["search_seconds"] = round(time.time() - start, 1)
    result["sink_drops"] = sum(t["sink_drops"] for t in trials)
    result["trials"] = [{k: t[k] for k in ("rate", "offered_pps", "sent", "received", "loss", "sink_drops",
                                            "backlog_drops")} for t in trials]
    return result


def lossless_and_latency(build, seconds=1.0, log=None, budget=90.0, **kw):
    """The lossless rate, then p50/p99 one-way latency at half of it (the issue's definition)."""
    r = search(lambda rate: trial(build, rate, seconds, **kw), budget=budget, log=log)
    half = r["lossless_pps"] / 2
    if half >= 1:
        t = trial(build, half, seconds, **kw)
        r.update(latency_rate_pps=int(half), latency_us_p50=t["latency_us_p50"], latency_us_p99=t["latency_us_p99"],
                 latency_loss=t["loss"])
    return r


if __name__ == "__main__":
    # Sanity of the generator and sink without a firewall rule: pwb-c -> pwb-fw (forwarding) -> pwb-s.
    import argparse
    import os
    import sys
    p = argparse.ArgumentParser(prog="lossless.py")
    p.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../build"))
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--rates", default="50000,100000,200000,0")
    p.add_argument("--no-pin", action="store_true")
    a = p.parse_args()
    bn.check_root("lossless")
    build = os.path.abspath(a.build)
    try:
        bn.topology_up(pin=not a.no_pin)
        print(bn.cpu_layout(), file=sys.stderr)
        for rate in map(float, a.rates.split(",")):
            print(json.dumps(trial(build, rate, a.seconds)))
        print(json.dumps(search(lambda r: trial(build, r, a.seconds), log=lambda s: print(s, file=sys.stderr))))
    finally:
        bn.topology_down()
