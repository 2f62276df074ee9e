#!/usr/bin/env python3
"""End-to-end throughput through one firewall namespace, every data path in one run.

    pairwall-bench e2e [--json] [--seconds S] [--build DIR]

Topology (created here, removed on exit):  pwb-c (client) -- pwb-fw -- pwb-s (server), veth.
Paths measured, in this order, on the same namespaces:
  forward           plain kernel forwarding
  kernel_conntrack  iptables stateful rules (conntrack ESTABLISHED + NEW for the test ports)
  nfqueue_null      every forwarded packet through NFQUEUE to pairwall-nfq-null (accepts all)
  pairwalld_q1      pairwalld with one queue
  pairwalld_q2      pairwalld with two queues (--queue-balance)
For each: UDP 64-byte packets/s delivered to the server (pairwall-udpgen, 16 flows from 4 client
addresses, offered as fast as the sender can for S seconds) and TCP Gbit/s (iperf3, S seconds).
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

NS_C, NS_FW, NS_S = "pwb-c", "pwb-fw", "pwb-s"
CLIENT_ADDRS = ["10.91.1.2", "10.91.1.3", "10.91.1.4", "10.91.1.5"]
SERVER = "10.91.2.2"
UDP_PORT = 9000
TCP_PORT = 5201


def sh(*args, check=True, **kw):
    return subprocess.run(list(args), check=check, capture_output=True, text=True, **kw)


def ns(name, *args, **kw):
    return sh("ip", "netns", "exec", name, *args, **kw)


def topology_down():
    for n in (NS_C, NS_FW, NS_S):
        sh("ip", "netns", "del", n, check=False)


def topology_up():
    topology_down()
    for n in (NS_C, NS_FW, NS_S):
        sh("ip", "netns", "add", n)
        ns(n, "ip", "link", "set", "lo", "up")
    sh("ip", "link", "add", "pwb-c0", "netns", NS_C, "type", "veth", "peer", "name", "pwb-fw0", "netns", NS_FW)
    sh("ip", "link", "add", "pwb-s0", "netns", NS_S, "type", "veth", "peer", "name", "pwb-fw1", "netns", NS_FW)
    for a in CLIENT_ADDRS:
        ns(NS_C, "ip", "addr", "add", a + "/24", "dev", "pwb-c0")
    ns(NS_C, "ip", "link", "set", "pwb-c0", "up")
    ns(NS_C, "ip", "route", "add", "default", "via", "10.91.1.1")
    ns(NS_FW, "ip", "addr", "add", "10.91.1.1/24", "dev", "pwb-fw0")
    ns(NS_FW, "ip", "addr", "add", "10.91.2.1/24", "dev", "pwb-fw1")
    ns(NS_FW, "ip", "link", "set", "pwb-fw0", "up")
    ns(NS_FW, "ip", "link", "set", "pwb-fw1", "up")
    ns(NS_FW, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    ns(NS_S, "ip", "addr", "add", SERVER + "/24", "dev", "pwb-s0")
    ns(NS_S, "ip", "link", "set", "pwb-s0", "up")
    ns(NS_S, "ip", "route", "add", "default", "via", "10.91.2.1")
    ns(NS_C, "ping", "-c", "1", "-W", "2", SERVER)


def flush_fw():
    for tool in ("iptables", "ip6tables"):
        ns(NS_FW, tool, "-F", check=False)
        ns(NS_FW, tool, "-X", check=False)
        ns(NS_FW, tool, "-P", "FORWARD", "ACCEPT", check=False)


def measure_udp(build, seconds):
    sink = subprocess.Popen(["ip", "netns", "exec", NS_S, f"{build}/bin/pairwall-udpgen", "recv", "--port",
                             str(UDP_PORT), "--duration", str(seconds + 5), "--idle", "1"],
                            stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    sent = json.loads(ns(NS_C, f"{build}/bin/pairwall-udpgen", "send", "--dst", SERVER, "--port", str(UDP_PORT),
                         "--src", ",".join(CLIENT_ADDRS), "--flows", "16", "--size", "64",
                         "--duration", str(seconds)).stdout)
    out, _ = sink.communicate(timeout=seconds + 10)
    got = json.loads(out)
    return {"udp_pps": round(got["received"] / seconds), "udp_offered_pps": round(sent["pps"]),
            "udp_latency_us_p50": got["latency_us_p50"], "udp_latency_us_p99": got["latency_us_p99"]}


def measure_tcp(seconds):
    server = subprocess.Popen(["ip", "netns", "exec", NS_S, "iperf3", "-s", "-1", "-p", str(TCP_PORT)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    try:
        result = json.loads(ns(NS_C, "iperf3", "-c", SERVER, "-p", str(TCP_PORT), "-t", str(seconds), "-J",
                               timeout=seconds + 20).stdout)
        return {"tcp_gbps": round(result["end"]["sum_received"]["bits_per_second"] / 1e9, 3)}
    finally:
        server.kill()
        server.wait()


class Background:
    """A process in the firewall namespace, stopped by PID."""

    def __init__(self, argv, ready):
        self.proc = subprocess.Popen(["ip", "netns", "exec", NS_FW] + argv, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited: {self.proc.stderr.read()[-2000:]}")
            if ready():
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{argv[0]} did not become ready")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def chain_installed():
    return ns(NS_FW, "iptables", "-S", "FORWARD", check=False).stdout.find("NFQUEUE") >= 0 or \
        ns(NS_FW, "iptables", "-S", check=False).stdout.find("NFQUEUE") >= 0


def run_path(name, build, seconds, workdir):
    flush_fw()
    helper = None
    if name == "kernel_conntrack":
        for args in (["-P", "FORWARD", "DROP"],
                     ["-A", "FORWARD", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
                     ["-A", "FORWARD", "-p", "udp", "--dport", str(UDP_PORT), "-m", "conntrack", "--ctstate", "NEW",
                      "-j", "ACCEPT"],
                     ["-A", "FORWARD", "-p", "tcp", "--dport", str(TCP_PORT), "-m", "conntrack", "--ctstate", "NEW",
                      "-j", "ACCEPT"]):
            ns(NS_FW, "iptables", *args)
    elif name == "nfqueue_null":
        helper = Background([f"{build}/bin/pairwall-nfq-null", "--queue", "0", "--hooks"], chain_installed)
    elif name.startswith("pairwalld_q"):
        queues = int(name[-1])
        rules = os.path.join(workdir, "rules.conf")
        with open(rules, "w") as f:
            f.write("set limit states 200000\nblock all\n"
                    f"pass proto udp to port {UDP_PORT} keep state\n"
                    f"pass proto tcp to port {TCP_PORT} flags S/SA keep state\n")
        config = os.path.join(workdir, f"pairwall-{queues}.toml")
        sock = os.path.join(workdir, f"control-{queues}.sock")
        with open(config, "w") as f:
            f.write(f'[node]\nid = 1\n[queue]\nfirst = 0\ncount = {queues}\n[rules]\nfile = "{rules}"\n'
                    f'[control]\nsocket = "{sock}"\n[metrics]\nlisten = ""\n')
        helper = Background([f"{build}/bin/pairwalld", "-f", "-c", config], chain_installed)
    try:
        result = {}
        result.update(measure_udp(build, seconds))
        result.update(measure_tcp(seconds))
        return result
    finally:
        if helper:
            helper.stop()
        flush_fw()


def main():
    parser = argparse.ArgumentParser(prog="pairwall-bench e2e")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../build"))
    parser.add_argument("--paths", default="forward,kernel_conntrack,nfqueue_null,pairwalld_q1,pairwalld_q2")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("pairwall-bench e2e: needs root (network namespaces, iptables)")
    for tool in ("iperf3", "iptables"):
        if not shutil.which(tool):
            sys.exit(f"pairwall-bench e2e: {tool} not found (tools/install-deps.sh installs it)")
    build = os.path.abspath(args.build)
    results = {}
    workdir = tempfile.mkdtemp(prefix="pwb-")
    try:
        topology_up()
        for path in args.paths.split(","):
            try:
                results[path] = run_path(path, build, args.seconds, workdir)
            except Exception as e:  # one broken path must not hide the others' figures
                results[path] = {"error": str(e)}
    finally:
        topology_down()
        shutil.rmtree(workdir, ignore_errors=True)
    if "nfqueue_null" in results and "pairwalld_q1" in results:
        null = results["nfqueue_null"].get("udp_pps")
        q1 = results["pairwalld_q1"].get("udp_pps")
        if null and q1:
            results["pairwalld_q1_vs_null_udp"] = round(q1 / null, 3)
    if args.json:
        print(json.dumps(results))
    else:
        for path, r in results.items():
            print(f"{path:18} {r}")


if __name__ == "__main__":
    main()
