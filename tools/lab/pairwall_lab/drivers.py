"""Who holds the virtual IPs in the lab, and how a drill fails and restores the master.

- `none`: no pairwalld. The VIPs sit on fwA and the kernel forwards. A drill's kill is followed by a
  scripted takeover (VIPs moved to the other node plus gratuitous ARP after 3·advbase + skew), so the
  traffic and measurement machinery runs end to end before the daemon exists. It proves the lab, not
  pairwall.
- `builtin`: pairwalld in each firewall with generated config, rules and sync key; its own election.
- `keepalived`: pairwalld for filtering and sync, keepalived for the election, configured from the shipped
  packaging/keepalived/keepalived.conf: role changes reach pairwalld through the notify FIFO and
  pairwall-notify.sh (`pairwallctl failover set-role`), a weighted track script runs `pairwallctl health`.
- `scripted`: pairwalld for filtering and sync, no [failover] section; the lab moves the VIPs as with
  `none`. The real data path under the drill, apart from the election.
- `conntrackd`: no pairwalld; the baseline pair: kernel conntrack with iptables stateful rules, conntrackd
  (FT-FW) and keepalived calling conntrack-tools' primary-backup.sh (ConntrackdDriver).

Roles are read through `pairwallctl -s SOCKET failover status --json` in each namespace, or from the VIPs
held in the kernel for `none` and `scripted`.
"""

import json
import os
import re
import secrets
import shutil
import signal
import time

from pathlib import Path

from . import netns, topology
from .netns import FeatureMissing, LabError

REPO_DIR = Path(__file__).resolve().parents[3]

KILL_KINDS = ("master", "crash", "node", "link", "sync", "handover")
# `handover`'s administrative demotion, as an operator raises it for maintenance (CARP's carpdemote):
# any amount puts a healthy backup above the master, whose demotion is then this plus its own.
HANDOVER_DEMOTION = 100


def takeover_delay_s(advbase_ms, advskew):
    # CARP: a backup declares the master dead after 3 advertisement intervals plus its skew.
    return (3 * advbase_ms + advskew * advbase_ms / 256.0) / 1000.0


def find_key(obj, names):
    """First value of any key in `names`, searched depth first through dicts and lists."""
    if isinstance(obj, dict):
        for k in names:
            if k in obj:
                return obj[k]
        for v in obj.values():
            r = find_key(v, names)
            if r is not None:
                return r
    elif isinstance(obj, list):
        for v in obj:
            r = find_key(v, names)
            if r is not None:
                return r
    return None


# proto/control.proto FailoverStatus.Role and SyncStatus.BulkState, by number for JSON that prints enums
# as integers.
ROLE_NAMES = {0: "init", 1: "backup", 2: "master", 3: "fault"}
BULK_DONE = {"DONE", "done", 3}


def role_of(failover_status):
    """Lower-case role from `pairwallctl failover status --json`, "unknown" when unreadable."""
    if failover_status is None:
        return "unknown"
    role = find_key(failover_status, ("role",))
    if isinstance(role, int):
        return ROLE_NAMES.get(role, str(role))
    return str(role).lower() if role is not None else "init"  # proto3 JSON omits the zero value


def bulk_done(sync_status):
    """True when the node has its peer's table: bulk state DONE, or sync not configured."""
    if sync_status is None:
        return False
    if not find_key(sync_status, ("enabled",)):
        return True  # proto3 JSON leaves out `enabled: false`
    return find_key(sync_status, ("bulk_state", "bulkState")) in BULK_DONE


def kill9_pid(pid):
    if pid is None or not netns.pid_alive(pid):
        return
    netns.kill9_and_wait(pid, f"process {pid}")


def kill_keepalived_abruptly(lab, node, node_dir):
    """kill -9 of `node`'s keepalived as a crash leaves it: no priority 0 advert, the VIPs left in place. The
    VRRP child first: killed after its parent it would be told to stop and leave cleanly (priority 0 advert, VIPs
    removed), which is a handover, not a crash. The parent is frozen before: running, it respawns a killed child
    at once, and the new child, left behind when the parent dies, takes the group back."""
    parent = lab.pid_of(node, "keepalived")
    if parent is not None and netns.pid_alive(parent):
        try:
            os.kill(parent, signal.SIGSTOP)
        except ProcessLookupError:
            parent = None
    for child in ("vrrp.pid", "checkers.pid"):
        try:
            pid = int((node_dir / child).read_text())
            # A pid file an earlier keepalived left names no child of this one, and perhaps another process.
            if parent is not None and netns.parent_pid(pid) == parent:
                kill9_pid(pid)
        except (OSError, ValueError):
            pass
    kill9_pid(parent)


class Driver:
    name = "?"

    def __init__(self, lab):
        self.lab = lab

    def start(self):
        raise NotImplementedError

    def stop(self):
        pass

    def roles(self):
        """{node: "master" | "backup" | "down" | other role string}."""
        raise NotImplementedError

    def states(self):
        """{node: state count or None when it cannot be read}."""
        return {n.name: None for n in topology.NODES}

    def node_status(self):
        return {n.name: {"role": r} for n, r in zip(topology.NODES, self.roles().values())}

    def kill(self, node, kind):
        """Fails `node` as `kind` says. Returns nothing; the caller records the instant."""
        p = self.lab.prefix
        if kind in ("master", "crash", "node"):
            self.kill_software(node, kind)
            if kind == "node":
                topology.set_node_links(p, node, False)  # a power loss: every cable out
        elif kind == "link":
            topology.set_lan_port(p, node, "out", False)
        elif kind == "sync":
            topology.set_sync_link(p, node, False)
        elif kind == "handover":
            self.hand_over(node)
        else:
            raise LabError(f"unknown kill kind {kind!r}; expected one of {', '.join(KILL_KINDS)}")

    def restore(self, node, kind):
        p = self.lab.prefix
        if kind == "node":
            topology.set_node_links(p, node, True)
        elif kind == "link":
            topology.set_lan_port(p, node, "out", True)
        elif kind == "sync":
            topology.set_sync_link(p, node, True)
        elif kind == "handover":
            self.hand_back(node)
        if kind in ("master", "crash", "node"):
            self.restart_software(node, kind)

    # Whether hand_over() can: the drill refuses --kill handover before any traffic where it cannot.
    can_hand_over = False

    def hand_over(self, node):
        """A planned handover: `node`, the master, gives the group up with nothing failed."""
        raise NotImplementedError

    def hand_back(self, node):
        """Ends hand_over(): `node` is healthy again and stays backup (no preempt in the lab)."""
        raise NotImplementedError

    def kill_software(self, node, kind):
        """The firewall software of `node` dies as kill -9 leaves it: addresses stay in its kernel. For
        `crash`, what its supervisor runs after it too, where the stack has such a step."""
        raise NotImplementedError

    def restart_software(self, node, kind):
        raise NotImplementedError

    def after_kill(self, node, kind, t_kill):
        """Hook run right after the kill (the scripted takeover of `none`)."""


class NoneDriver(Driver):
    name = "none"

    def start(self):
        topology.add_vips(self.lab.prefix, "fwA")
        self._announce("fwA")

    def _announce(self, node):
        ns = self.lab.ns[node]
        for ifname, vip in ((topology.IF_IN, topology.VIP_IN), (topology.IF_OUT, topology.VIP_OUT)):
            netns.nsexec(ns, self.lab.python, str(self.lab.pkg_dir / "garp.py"), ifname, vip, "--count", "3",
                         "--interval-ms", "50")

    def roles(self):
        held = topology.vip_holders(self.lab.prefix)
        out = {}
        for n in topology.NODES:
            cp = netns.nsexec(self.lab.ns[n.name], "cat", "/proc/sys/net/ipv4/ip_forward", check=False)
            forwarding = cp.stdout.strip() == "1"
            links = netns.addresses(self.lab.ns[n.name])
            carrier = all(links.get(i, {}).get("carrier") for i in (topology.IF_IN, topology.IF_OUT))
            if len(held[n.name]) == 2 and forwarding and carrier:
                out[n.name] = "master"
            elif not forwarding or not carrier:
                out[n.name] = "down"
            else:
                out[n.name] = "backup"
        return out

    def kill_software(self, node, kind):
        # The forwarder "process" is the kernel's forwarding: turn it off; the VIPs stay (as after kill -9).
        netns.sysctl(self.lab.ns[node], "net.ipv4.ip_forward", 0)

    def restart_software(self, node, kind):
        netns.sysctl(self.lab.ns[node], "net.ipv4.ip_forward", 1)

    def after_kill(self, node, kind, t_kill):
        if kind == "sync":
            return  # sync loss does not move the group
        peer = topology.other(node)
        delay = takeover_delay_s(self.lab.advbase_ms, topology.NODE_BY_NAME[peer].advskew)
        time.sleep(max(0.0, t_kill + delay - time.monotonic()))
        topology.del_vips(self.lab.prefix, node)  # a real master that died could not; see LAB-NOTES
        topology.add_vips(self.lab.prefix, peer)
        self._announce(peer)


RULES_TEMPLATE = """\
# Generated by pairwall-lab: pass what the inside starts, keep state, block the rest.
in_if = "{in_if}"
out_if = "{out_if}"
set limit states 400000
# UDP flows preloaded by the chaos scenarios must outlive a bulk resync.
set timeout {{ tcp.established 86400, udp.first 600, udp.single 600, udp.multiple 600 }}
{scrub}{nat}{rdr}block all
# Only the inside's own network may arrive on the inside, and only there (both nodes resolve
# $in_if:network from their own address on it, the same network).
antispoof quick for $in_if inet
pass in on $in_if inet from $in_if:network to any {state} state
pass out on $out_if inet from $in_if:network to any {state} state
{nat_pass}{inet6}"""

# `up --ipv6` adds these to RULES_TEMPLATE: the inside's IPv6 network passes as its IPv4 one does (nat and
# rdr stay IPv4's). The inside's network is the global one: a link-local address is never forwarded.
INET6_RULES = """\
# --ipv6: the same for the inside's IPv6 network.
antispoof quick for $in_if inet6
pass in on $in_if inet6 from {inside6} to any {state} state
pass out on $out_if inet6 from {inside6} to any {state} state
"""

# `up --nat` adds these to RULES_TEMPLATE (they render empty otherwise, leaving the default rules as they
# were). The inside leaves on the outside LAN as the outside VIP, which both nodes share, so the node that
# takes over owns the translated address; pf's nat picks the source port from 50001:65535 by default. The
# out pass sees the translated source, so it needs a rule of its own.
NAT_RULES = """\
# --nat: the inside leaves through $out_if as the outside VIP.
nat on $out_if inet from {inside} to any -> {vip_out}
"""
NAT_PASS_RULES = """\
pass out on $out_if inet from {vip_out} to any {state} state
"""

# `up --rdr` adds this to RULES_TEMPLATE: an address beyond the firewalls, which neither routes, is
# redirected to the server before routing (a transparent rdr). The filter rules see the server's address.
RDR_RULES = """\
# --rdr: what the inside sends to {service} goes to the server.
rdr on $in_if inet to {service} -> {server}
"""

# `up --scrub-tcp` adds this to RULES_TEMPLATE, where pf has scrub rules: after the options, before nat and
# the filter rules. The TCP states its packets create raise each end's TTL to the highest it has sent with
# and shift each end's timestamps by an offset of its own, which the states carry to the peer.
SCRUB_TCP_RULES = """\
# --scrub-tcp: normalize the inside's TCP connections, timestamps included.
scrub on $in_if all reassemble tcp
"""


def rules_text(nat=False, modulate=False, synproxy=False, scrub_tcp=False, rdr=False, ipv6=False):
    """The rule file the lab gives both firewalls; with `modulate` (`synproxy`), its states are kept by
    `modulate state` (`synproxy state`); with `scrub_tcp`, the inside's TCP states are scrubbed by
    `scrub ... reassemble tcp`; with `rdr`, the service address is redirected to the server; with `ipv6`,
    the inside's IPv6 network passes too."""
    state = "modulate" if modulate else "synproxy" if synproxy else "keep"
    fields = dict(inside=topology.INSIDE_NET, vip_out=topology.VIP_OUT, state=state, service=topology.SERVICE_ADDR,
                  server=topology.SERVER_ADDR, inside6=topology.INSIDE_NET6)
    return RULES_TEMPLATE.format(in_if=topology.IF_IN, out_if=topology.IF_OUT, inside=topology.INSIDE_NET,
                                 state=fields["state"], scrub=SCRUB_TCP_RULES if scrub_tcp else "",
                                 nat=NAT_RULES.format(**fields) if nat else "",
                                 rdr=RDR_RULES.format(**fields) if rdr else "",
                                 nat_pass=NAT_PASS_RULES.format(**fields) if nat else "",
                                 inet6=INET6_RULES.format(**fields) if ipv6 else "")

CONFIG_TEMPLATE = """\
# Generated by pairwall-lab for node {name} ({ns}).
[node]
id = {node_id}
name = "{name}"

[queue]
first = {queue_first}
count = 1
fail_open = false
exclude_interfaces = ["{if_sync}"]

[rules]
file = "{rules}"

[log]
level = "info"

[control]
socket = "{socket}"

[metrics]
listen = "127.0.0.1:{metrics_port}"

[sync]
interface = "{if_sync}"
address = "{own_sync}"
peer = "{peer_sync}"
port = {sync_port}
key_file = "{sync_key}"
{sync_defer}"""

FAILOVER_TEMPLATE = """
[failover]
driver = "{failover_driver}"
{builtin_election}vips = [ {{ interface = "{if_in}", address = "{vip_in}/{plen}" }},
         {{ interface = "{if_out}", address = "{vip_out}/{plen}" }}{vips6} ]
"""
VIPS6 = """,
         {{ interface = "{if_in}", address = "{vip_in6}/{plen6}" }},
         {{ interface = "{if_out}", address = "{vip_out6}/{plen6}" }}"""

# The builtin election's settings; keepalived.conf holds keepalived's (pairwalld refuses these there).
BUILTIN_ELECTION = """vhid = 1
advbase_ms = {advbase_ms}
advskew = {advskew}
preempt = false
key_file = "{failover_key}"
"""

# The keepalived mode runs what we ship: packaging/keepalived/keepalived.conf (notify FIFO read by
# pairwall-notify.sh, weighted health script, VRRPv3) with only the node's names, paths, interfaces, VIPs and
# the lab's advert interval substituted.
SHIPPED_KEEPALIVED = REPO_DIR / "packaging" / "keepalived"


def shipped_keepalived_conf(text, *, name, ctl, socket, fifo, demotion_file, if_in, if_out, vip_in, vip_out, plen,
                            advert_s, vip_in6="fd31::1", vip_out6="fd32::1"):
    """The shipped keepalived.conf for one lab node; LabError when a line it substitutes is gone. Its IPv6
    VIPs stay the shipped ones, on the lab's interfaces, unless `vip_in6` and `vip_out6` say otherwise."""
    replaced = [
        ("router_id pairwall-a", f"router_id {name}"),
        ('script "/usr/bin/pairwallctl health"', f'script "{ctl} -s {socket} health"'),
        ("vrrp_notify_fifo /run/keepalived-pairwall-notify.fifo", f"vrrp_notify_fifo {fifo}"),
        ('vrrp_notify_fifo_script "/usr/lib/pairwall/pairwall-notify.sh -i pairwall -t /run/keepalived-pairwall-demotion"',
         f'vrrp_notify_fifo_script "{SHIPPED_KEEPALIVED / "pairwall-notify.sh"} -i pairwall -s {socket} -c {ctl} '
         f'-t {demotion_file}"'),
        ('file "/run/keepalived-pairwall-demotion"', f'file "{demotion_file}"'),
        ("advert_int 0.1", f"advert_int {advert_s}"),
        ("10.31.0.1/24 dev lan0", f"{vip_in}/{plen} dev {if_in}"),
        ("10.32.0.1/24 dev lan1", f"{vip_out}/{plen} dev {if_out}"),
        ("fd31::1/64 dev lan0", f"{vip_in6}/64 dev {if_in}"),
        ("fd32::1/64 dev lan1", f"{vip_out6}/64 dev {if_out}"),
        ("interface lan0", f"interface {if_in}"),
        ("  track_interface {\n    lan1\n", f"  track_interface {{\n    {if_out}\n"),
    ]
    for old, new in replaced:
        if old not in text:
            raise LabError(f"{SHIPPED_KEEPALIVED / 'keepalived.conf'} no longer contains {old!r}: adapt the lab")
        text = text.replace(old, new)
    return f"# Generated by pairwall-lab from {SHIPPED_KEEPALIVED / 'keepalived.conf'}.\n" + text


class PairwalldDriver(Driver):
    """pairwalld in both firewalls; the election is its own (builtin) or keepalived's."""

    # Whether pairwalld (or keepalived for it) owns the VIPs; the scripted driver moves them itself.
    elects = True

    def __init__(self, lab, keepalived=False):
        super().__init__(lab)
        self.keepalived = keepalived
        self.name = "keepalived" if keepalived else "builtin"

    # -- files

    def node_dir(self, node):
        return self.lab.run_dir / node

    def socket(self, node):
        return self.node_dir(node) / "control.sock"

    def write_configs(self):
        key = self.lab.run_dir / "sync.key"
        fkey = self.lab.run_dir / "failover.key"
        for path in (key, fkey):
            path.write_text(secrets.token_hex(32) + "\n")
            path.chmod(0o600)
        if self.keepalived:
            self.lab.fifo_dir.mkdir(parents=True, exist_ok=True)
        for i, n in enumerate(topology.NODES):
            d = self.node_dir(n.name)
            d.mkdir(parents=True, exist_ok=True)
            peer = topology.NODE_BY_NAME[topology.other(n.name)]
            rules = d / "pairwall.rules"
            rules.write_text(rules_text(nat=self.lab.nat, modulate=self.lab.modulate, synproxy=self.lab.synproxy,
                                        scrub_tcp=self.lab.scrub_tcp, rdr=self.lab.rdr, ipv6=self.lab.ipv6))
            fields = dict(
                name=n.name, ns=self.lab.ns[n.name], node_id=n.node_id, queue_first=0, rules=rules,
                socket=self.socket(n.name), metrics_port=9477 + i, if_sync=topology.IF_SYNC, own_sync=n.sync,
                peer_sync=peer.sync, sync_port=topology.SYNC_PORT, sync_key=key,
                failover_driver=self.name, advbase_ms=self.lab.advbase_ms, advskew=n.advskew,
                failover_key=fkey, if_in=topology.IF_IN, if_out=topology.IF_OUT, vip_in=topology.VIP_IN,
                vip_out=topology.VIP_OUT, plen=topology.PREFIXLEN, vip_in6=topology.VIP_IN6,
                vip_out6=topology.VIP_OUT6, plen6=topology.PREFIXLEN6,
                sync_defer="defer = true\n" if self.lab.defer else "")
            fields["vips6"] = VIPS6.format(**fields) if self.lab.ipv6 else ""
            fields["builtin_election"] = "" if self.keepalived else BUILTIN_ELECTION.format(**fields)
            text = CONFIG_TEMPLATE.format(**fields)
            if self.elects:
                text += FAILOVER_TEMPLATE.format(**fields)
            (d / "pairwall.toml").write_text(text)
            if self.keepalived:
                (d / "keepalived.conf").write_text(shipped_keepalived_conf(
                    (SHIPPED_KEEPALIVED / "keepalived.conf").read_text(), name=n.name,
                    ctl=self.lab.bin("pairwallctl"), socket=self.socket(n.name), fifo=self.lab.fifo_dir / f"{n.name}-keepalived-notify.fifo",
                    demotion_file=self.lab.fifo_dir / f"{n.name}-keepalived-demotion",
                    if_in=topology.IF_IN, if_out=topology.IF_OUT, vip_in=topology.VIP_IN, vip_out=topology.VIP_OUT,
                    plen=topology.PREFIXLEN, advert_s=self.lab.advbase_ms / 1000.0,
                    **(dict(vip_in6=topology.VIP_IN6, vip_out6=topology.VIP_OUT6) if self.lab.ipv6 else {})))

    # -- processes

    def start_daemon(self, node):
        d = self.node_dir(node)
        # A socket left by a killed daemon would make wait_socket() return before the new one listens.
        self.socket(node).unlink(missing_ok=True)
        self.lab.spawn(node, "pairwalld", [self.lab.bin("pairwalld"), "-f", "-c", str(d / "pairwall.toml")])

    def start_keepalived(self, node):
        d = self.node_dir(node)
        self.lab.spawn(node, "keepalived", [
            "keepalived", "-n", "-l", "-D", "-f", str(d / "keepalived.conf"), "-p", str(d / "keepalived.pid"),
            "-r", str(d / "vrrp.pid"), "-c", str(d / "checkers.pid")])

    def start(self):
        self.start_daemons_only()
        if self.keepalived:
            for n in topology.NODES:
                self.start_keepalived(n.name)
        self.wait_pair_ready()

    def start_daemons_only(self):
        for b in ("pairwalld", "pairwallctl"):
            if not os.access(self.lab.bin(b), os.X_OK):
                raise LabError(f"{self.lab.bin(b)} not found: build it first (cmake --preset release && "
                               "cmake --build --preset release), or use --driver none")
        self.write_configs()
        if self.lab.nat or self.lab.rdr:
            self.check_configs()
        for n in topology.NODES:
            self.start_daemon(n.name)
            # fwA first, so that with equal conditions the lower skew also comes up first.
            self.wait_socket(n.name)

    def check_configs(self):
        """`pairwalld --check` of each node's config and rules: a refusal is a LabError with its reason,
        before any daemon starts."""
        for n in topology.NODES:
            cp = netns.nsexec(self.lab.ns[n.name], self.lab.bin("pairwalld"), "--check", "-c",
                              str(self.node_dir(n.name) / "pairwall.toml"), check=False)
            if cp.returncode != 0:
                said = (cp.stderr or cp.stdout or "").strip()
                raise LabError(f"pairwalld --check refuses the config of {n.name}: {said}")

    def wait_socket(self, node, timeout=15.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.socket(node).exists():
                return
            # The pid alone: right after the spawn `ip netns exec` may not have entered the namespace yet.
            pid = self.lab.pid_of(node, "pairwalld")
            if pid is None or not netns.pid_alive(pid):
                raise LabError(f"pairwalld in {self.lab.ns[node]} exited at start:\n"
                               f"{self.lab.log_tail(node, 'pairwalld')}")
            time.sleep(0.05)
        raise LabError(f"pairwalld in {self.lab.ns[node]}: no control socket {self.socket(node)} after "
                       f"{timeout:.0f} s:\n{self.lab.log_tail(node, 'pairwalld')}")

    def wait_pair_ready(self, timeout=30.0):
        """Until one node is master, the other backup, and both report bulk sync done."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            st = self.node_status()
            last = st
            roles = sorted(s.get("role") or "?" for s in st.values())
            if roles == ["backup", "master"] and all(s.get("bulk_done") for s in st.values()):
                return st
            if self.elects and all(isinstance(s.get("failover"), dict) and s["failover"].get("enabled") is False
                                   for s in st.values()):
                raise FeatureMissing("pairwalld reports no failover service (failover status: enabled false), so "
                               "nobody will become master: this pairwalld does not run [failover] yet; use "
                               "--driver scripted (the lab moves the VIPs) until it does")
            time.sleep(0.1)
        raise LabError(f"the pair did not settle within {timeout:.0f} s (want one master, one backup, bulk "
                       f"sync done); last status: {json.dumps(last)}; see logs in {self.lab.run_dir}")

    def pairwallctl(self, node, *args, timeout=5):
        """One pairwallctl command on `node`'s control socket; the completed process."""
        return netns.nsexec(self.lab.ns[node], self.lab.bin("pairwallctl"), "-s", str(self.socket(node)), *args,
                            check=False, timeout=timeout)

    def ctl(self, node, *args, timeout=5):
        cp = self.pairwallctl(node, *args, timeout=timeout)
        if cp.returncode != 0:
            return None
        try:
            return json.loads(cp.stdout)
        except json.JSONDecodeError:
            return None

    @property
    def can_hand_over(self):
        return self.elects

    def hand_over(self, node):
        # What an operator does before maintenance: the master's demotion rises, it advertises it at once,
        # and the healthy backup takes the group on that advertisement (in keepalived mode, through the
        # track file's weight: keepalived's priority falls below the backup's).
        self._demotion(node, "demote")

    def hand_back(self, node):
        self._demotion(node, "promote")

    def _demotion(self, node, verb):
        cp = self.pairwallctl(node, "failover", verb, str(HANDOVER_DEMOTION))
        if cp.returncode != 0:
            raise LabError(f"pairwallctl failover {verb} {HANDOVER_DEMOTION} on {node}: {cp.stderr.strip()}")

    def node_status(self):
        out = {}
        for n in topology.NODES:
            if not self.lab.process_alive(n.name, "pairwalld"):
                out[n.name] = {"role": "down", "bulk_done": False, "states": None}
                continue
            fo = self.ctl(n.name, "failover", "status", "--json")
            sy = self.ctl(n.name, "sync", "status", "--json")
            out[n.name] = {"role": role_of(fo), "bulk_done": bulk_done(sy),
                           "demotion": find_key(fo, ("demotion",)),
                           "sync_peer": find_key(sy, ("peer_state", "peerState")), "failover": fo, "sync": sy}
        return out

    def roles(self):
        # Only the failover status: this is polled every 100 ms during a drill.
        return {n.name: role_of(self.ctl(n.name, "failover", "status", "--json"))
                if self.lab.process_alive(n.name, "pairwalld") else "down" for n in topology.NODES}

    def sync_enabled(self):
        """{node: whether its pairwalld runs state sync} (False also when it cannot be asked)."""
        out = {}
        for n in topology.NODES:
            sy = self.ctl(n.name, "sync", "status", "--json") if self.lab.process_alive(n.name, "pairwalld") \
                else None
            out[n.name] = bool(sy and find_key(sy, ("enabled",)))
        return out

    def states(self):
        out = {}
        for n in topology.NODES:
            r = self.ctl(n.name, "states", "--count", "--json") if self.lab.process_alive(n.name, "pairwalld") \
                else None
            c = find_key(r, ("total", "count", "states")) if r is not None else None
            c = int(c) if isinstance(c, str) and c.isdigit() else c  # proto3 JSON prints 64-bit ints as strings
            out[n.name] = int(c) if isinstance(c, (int, float)) else None
        return out

    def kill_software(self, node, kind):
        # A node's keepalived first: its VRRP process, left running a moment after pairwalld, would read the
        # track file's demotion and hand the group over, where a node that loses its power hands nothing.
        if kind == "node" and self.keepalived:
            kill_keepalived_abruptly(self.lab, node, self.node_dir(node))
        self.lab.kill9(node, "pairwalld")
        if kind == "crash":
            # What systemd runs once the daemon has died, however it died (the unit's ExecStopPost).
            netns.nsexec(self.lab.ns[node], "env", "SERVICE_RESULT=signal", self.lab.bin("pairwalld"), "--cleanup",
                         "-c", str(self.node_dir(node) / "pairwall.toml"))

    def restart_software(self, node, kind):
        self.start_daemon(node)
        self.wait_socket(node)
        if kind == "node" and self.keepalived:
            self.start_keepalived(node)


class ScriptedDriver(PairwalldDriver):
    """pairwalld filters (and syncs) in both firewalls, but the lab moves the VIPs as with `none`: the
    real data path under the drill before, or without, pairwalld's own election."""

    elects = False

    def __init__(self, lab):
        super().__init__(lab)
        self.name = "scripted"
        self.vips = NoneDriver(lab)

    def start(self):
        super().start_daemons_only()
        self.vips.start()
        self.wait_pair_ready()

    def roles(self):
        held = topology.vip_holders(self.lab.prefix)
        out = {}
        for n in topology.NODES:
            links = netns.addresses(self.lab.ns[n.name])
            carrier = all(links.get(i, {}).get("carrier") for i in (topology.IF_IN, topology.IF_OUT))
            if not self.lab.process_alive(n.name, "pairwalld") or not carrier:
                out[n.name] = "down"
            else:
                out[n.name] = "master" if len(held[n.name]) == 2 else "backup"
        return out

    def node_status(self):
        st = super().node_status()
        for node, role in self.roles().items():
            st[node]["role"] = role
        return st

    def after_kill(self, node, kind, t_kill):
        self.vips.after_kill(node, kind, t_kill)


# -- the baseline: kernel conntrack + conntrackd (FT-FW) + keepalived, as conntrack-tools documents it

CONNTRACKD_EXAMPLES = "/usr/share/doc/conntrackd/examples/sync"

# keepalived.conf for the baseline, shaped like conntrack-tools' sync/keepalived.conf: one VRRP instance per
# VIP interface, both in one sync group whose transitions call primary-backup.sh. Differences, each needed
# here: VRRPv3 with the lab's advert interval (sub-second adverts need v3, which has no PASS authentication);
# addresses with their LAN prefix; distinct priorities with nopreempt, so that the node restored after a
# drill does not take the group back (a second failover). The priority is 256 - advskew (at most 254): a
# VRRPv3 backup waits 3 adverts + (256 - priority)/256 of one, the same master-down interval as pairwall's
# 3·advbase + advskew/256·advbase, so both elections detect a dead master equally fast.
CONNTRACKD_KEEPALIVED_TEMPLATE = """\
# Generated by pairwall-lab for node {name} ({ns}), after conntrack-tools' sync/keepalived.conf.
global_defs {{
  router_id {name}
  vrrp_version 3
  script_user root
  enable_script_security
}}

vrrp_sync_group G1 {{
  group {{
    VI_1
    VI_2
  }}
  notify_master "{script} primary"
  notify_backup "{script} backup"
  notify_fault "{script} fault"
}}

vrrp_instance VI_1 {{
  interface {if_in}
  state BACKUP
  virtual_router_id 61
  priority {priority}
  advert_int {advert_s}
  nopreempt
  virtual_ipaddress {{
    {vip_in}/{plen} dev {if_in}
  }}
}}

vrrp_instance VI_2 {{
  interface {if_out}
  state BACKUP
  virtual_router_id 62
  priority {priority}
  advert_int {advert_s}
  nopreempt
  virtual_ipaddress {{
    {vip_out}/{plen} dev {if_out}
  }}
}}
"""


def _render(text, replacements, what):
    """`text` with each (regex, replacement) applied once; LabError naming `what` when one no longer matches
    (the packaged example changed)."""
    for pattern, repl in replacements:
        text, n = re.subn(pattern, repl, text, count=1, flags=re.M)
        if n != 1:
            raise LabError(f"{what}: no line matches {pattern!r}; the packaged example changed, adapt the lab")
    return text


def conntrackd_conf(example_text, *, sync_addr, sync_if, lock, socket, log, ignore):
    """conntrack-tools' sync/ftfw/conntrackd.conf with this node's addresses and files. As LAB-NOTES says:
    its own LockFile and UNIX Path (two daemons on one machine), `Systemd off` (no systemd in a namespace),
    UDP and ICMP added to the protocol filter (the example replicates only TCP, SCTP and DCCP)."""
    return _render(example_text, [
        (r"^(\s*)IPv4_interface 192\.168\.100\.100\s*$", rf"\g<1>IPv4_interface {sync_addr}"),
        (r"^(\s*)Interface eth2\s*$", rf"\g<1>Interface {sync_if}"),
        (r"^(\s*)#\s*Systemd on\s*$", r"\g<1>Systemd off"),
        (r"^(\s*)LogFile on\s*$", rf"\g<1>LogFile {log}"),
        (r"^(\s*)LockFile /var/lock/conntrack\.lock\s*$", rf"\g<1>LockFile {lock}"),
        (r"^(\s*)Path /var/run/conntrackd\.ctl\s*$", rf"\g<1>Path {socket}"),
        (r"^(\s*)# UDP\s*$", r"\g<1>UDP"),
        (r"^(\s*)# ICMP\b.*$", r"\g<1>ICMP"),
        # The example's own addresses (loopback, VIPs, its interfaces, dedicated link) become the lab's.
        (r"^(\s*)IPv4_address 127\.0\.0\.1 # loopback\s*\n(?:\s*IPv4_address 192\.168\.\S+.*\n)+",
         lambda m: "".join(f"{m.group(1)}IPv4_address {a}\n" for a in ignore)),
    ], "sync/ftfw/conntrackd.conf")


def primary_backup_sh(example_text, *, lock, config):
    """conntrack-tools' primary-backup.sh with this node's paths (binary from PATH, lock file, config)."""
    binary = shutil.which("conntrackd") or "/usr/sbin/conntrackd"
    return _render(example_text, [
        (r"^CONNTRACKD_BIN=.*$", f"CONNTRACKD_BIN={binary}"),
        (r"^CONNTRACKD_LOCK=.*$", f"CONNTRACKD_LOCK={lock}"),
        (r"^CONNTRACKD_CONFIG=.*$", f"CONNTRACKD_CONFIG={config}"),
    ], "sync/primary-backup.sh")


# The stateful rule set of the lab's pairwalld (RULES_TEMPLATE) in iptables: what the inside starts passes
# and keeps state, the rest is dropped. TCP states are created by a SYN only, as pf's default `flags S/SA`:
# a mid-stream packet (a connection the node has no state for) is dropped, not picked up.
CONNTRACKD_FORWARD_RULES = (
    ["-P", "FORWARD", "DROP"],
    ["-A", "FORWARD", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
    ["-A", "FORWARD", "-i", "{in_if}", "-o", "{out_if}", "-s", "{inside}", "-p", "tcp", "--syn", "-m", "conntrack",
     "--ctstate", "NEW", "-j", "ACCEPT"],
    ["-A", "FORWARD", "-i", "{in_if}", "-o", "{out_if}", "-s", "{inside}", "-p", "udp", "-m", "conntrack",
     "--ctstate", "NEW", "-j", "ACCEPT"],
    ["-A", "FORWARD", "-i", "{in_if}", "-o", "{out_if}", "-s", "{inside}", "-p", "icmp", "-m", "conntrack",
     "--ctstate", "NEW", "-j", "ACCEPT"],
    # The example's advice for the sync messages (INPUT and OUTPUT accept everything here anyway).
    ["-A", "INPUT", "-d", "225.0.0.50", "-j", "ACCEPT"],
    ["-A", "OUTPUT", "-d", "225.0.0.50", "-j", "ACCEPT"],
)


class ConntrackdDriver(Driver):
    """The baseline pair: kernel conntrack with iptables stateful rules, conntrackd (FT-FW, external cache)
    over the sync link, keepalived (VRRPv3) moving the VIPs and calling conntrack-tools' primary-backup.sh
    at each transition (commit the external cache into the kernel on becoming master, resync request on
    becoming backup). No pairwalld.

    Kinds of kill: `master` is the firewall software dying: keepalived (its VRRP process first, so that it
    cannot leave cleanly) and conntrackd are killed -9 and the node stops forwarding (the data plane of a
    dead pairwalld stops too); its addresses stay in its kernel. `node` adds every link down. Roles are the
    VIPs keepalived put in each kernel, "down" when the node's keepalived or forwarding is gone."""

    name = "conntrackd"

    def node_dir(self, node):
        return self.lab.run_dir / node

    def conf(self, node):
        return self.node_dir(node) / "conntrackd.conf"

    def lock(self, node):
        return self.node_dir(node) / "conntrackd.lock"

    # -- files and rules

    def write_configs(self):
        ex = os.path.join(CONNTRACKD_EXAMPLES, "ftfw", "conntrackd.conf")
        script = os.path.join(CONNTRACKD_EXAMPLES, "primary-backup.sh")
        try:
            conf_text = open(ex, encoding="utf-8").read()
            script_text = open(script, encoding="utf-8").read()
        except OSError as e:
            raise LabError(f"conntrack-tools' examples not found ({e}): install conntrackd "
                           "(tools/install-deps.sh)") from e
        for n in topology.NODES:
            d = self.node_dir(n.name)
            d.mkdir(parents=True, exist_ok=True)
            ignore = ["127.0.0.1", topology.VIP_IN, topology.VIP_OUT, n.inside, n.outside, n.sync]
            self.conf(n.name).write_text(conntrackd_conf(
                conf_text, sync_addr=n.sync, sync_if=topology.IF_SYNC, lock=self.lock(n.name),
                socket=d / "conntrackd.sock", log=self.lab.log_file(n.name, "conntrackd-daemon"), ignore=ignore))
            sh = d / "primary-backup.sh"
            sh.write_text(primary_backup_sh(script_text, lock=self.lock(n.name), config=self.conf(n.name)))
            sh.chmod(0o755)
            (d / "keepalived.conf").write_text(CONNTRACKD_KEEPALIVED_TEMPLATE.format(
                name=n.name, ns=self.lab.ns[n.name], script=sh, if_in=topology.IF_IN, if_out=topology.IF_OUT,
                priority=min(254, 256 - n.advskew), advert_s=self.lab.advbase_ms / 1000.0, vip_in=topology.VIP_IN,
                vip_out=topology.VIP_OUT, plen=topology.PREFIXLEN))

    def install_rules(self, node):
        # The lab's pairwalld rules keep UDP states 600 s (the preloaded flows outlive a resync); the kernel's
        # default for a flow without replies is 30 s.
        for key in ("nf_conntrack_udp_timeout", "nf_conntrack_udp_timeout_stream"):
            netns.sysctl(self.lab.ns[node], f"net.netfilter.{key}", 600)
        fields = dict(in_if=topology.IF_IN, out_if=topology.IF_OUT, inside=topology.INSIDE_NET)
        for rule in CONNTRACKD_FORWARD_RULES:
            netns.nsexec(self.lab.ns[node], "iptables", "-w", *[a.format(**fields) for a in rule])

    # -- processes

    def conntrackd_pid(self, node):
        """The node's conntrackd, found by namespace (primary-backup.sh may have started it itself)."""
        for pid in netns.netns_pids(self.lab.ns[node]):
            try:
                with open(f"/proc/{pid}/comm", encoding="ascii") as f:
                    if f.read().strip() == "conntrackd" and netns.pid_alive(pid):
                        return pid
            except OSError:
                continue
        return None

    def cctl(self, node, *args, timeout=10):
        """`conntrackd -C CONF ARGS` in the node; CompletedProcess (never raises for a failing command)."""
        return netns.nsexec(self.lab.ns[node], "conntrackd", "-C", str(self.conf(node)), *args, check=False,
                            timeout=timeout)

    def start_conntrackd(self, node):
        self.lock(node).unlink(missing_ok=True)  # left by a kill -9; the daemon refuses to start over it
        self.lab.spawn(node, "conntrackd", ["conntrackd", "-C", str(self.conf(node))])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.cctl(node, "-s", "cache").returncode == 0:
                return
            if not self.lab.process_alive(node, "conntrackd"):
                break
            time.sleep(0.05)
        raise LabError(f"conntrackd in {self.lab.ns[node]} did not start:\n{self.lab.log_tail(node, 'conntrackd')}\n"
                       f"{self.lab.log_tail(node, 'conntrackd-daemon')}")

    def start_keepalived(self, node):
        d = self.node_dir(node)
        self.lab.spawn(node, "keepalived", [
            "keepalived", "-n", "-l", "-D", "-P", "-f", str(d / "keepalived.conf"), "-p", str(d / "keepalived.pid"),
            "-r", str(d / "vrrp.pid"), "-c", str(d / "checkers.pid")])

    def start(self):
        for tool in ("conntrackd", "keepalived", "conntrack", "iptables"):
            if shutil.which(tool) is None:
                raise LabError(f"{tool} not found: run tools/install-deps.sh")
        self.write_configs()
        for n in topology.NODES:
            self.install_rules(n.name)
            self.start_conntrackd(n.name)
        for n in topology.NODES:
            self.start_keepalived(n.name)
        self.wait_pair_ready()

    def keepalived_alive(self, node):
        return self.lab.process_alive(node, "keepalived")

    def wait_pair_ready(self, timeout=30.0):
        """Until one node holds the VIPs, the other is backup, and both conntrackd answer."""
        deadline = time.monotonic() + timeout
        roles = None
        while time.monotonic() < deadline:
            roles = self.roles()
            if sorted(roles.values()) == ["backup", "master"] and all(
                    self.conntrackd_pid(n.name) for n in topology.NODES):
                return self.node_status()
            time.sleep(0.1)
        raise LabError(f"the baseline pair did not settle within {timeout:.0f} s (want one master, one backup); "
                       f"roles {roles}; see logs in {self.lab.run_dir}")

    def roles(self):
        held = topology.vip_holders(self.lab.prefix)
        out = {}
        for n in topology.NODES:
            ns = self.lab.ns[n.name]
            links = netns.addresses(ns)
            carrier = all(links.get(i, {}).get("carrier") for i in (topology.IF_IN, topology.IF_OUT))
            cp = netns.nsexec(ns, "cat", "/proc/sys/net/ipv4/ip_forward", check=False)
            if not carrier or cp.stdout.strip() != "1" or not self.keepalived_alive(n.name):
                out[n.name] = "down"
            elif len(held[n.name]) == 2:
                out[n.name] = "master"
            elif not held[n.name]:
                out[n.name] = "backup"
            else:
                out[n.name] = "split"
        return out

    def cache_counts(self, node):
        """{"internal": n, "external": n} from `conntrackd -s cache` (None each when it cannot be read)."""
        out = {"internal": None, "external": None}
        if self.conntrackd_pid(node) is None:
            return out
        cp = self.cctl(node, "-s", "cache")
        # "cache:internal\tactive objects:\t  N" (conntrack-tools 1.4)
        for line in cp.stdout.splitlines():
            for which in ("internal", "external"):
                if line.startswith(f"cache:{which}") and "active objects:" in line:
                    digits = line.split("active objects:", 1)[1].strip()
                    out[which] = int(digits) if digits.isdigit() else None
        return out

    def kernel_count(self, node):
        cp = netns.nsexec(self.lab.ns[node], "conntrack", "-C", check=False)
        return int(cp.stdout.strip()) if cp.returncode == 0 and cp.stdout.strip().isdigit() else None

    def states(self):
        """The states each node holds for the pair: a master's conntrackd internal cache (the forwarded flows
        it tracks and replicates), a backup's external cache (the peer's flows it would commit)."""
        roles = self.roles()
        out = {}
        for n in topology.NODES:
            c = self.cache_counts(n.name)
            out[n.name] = c["internal"] if roles[n.name] == "master" else c["external"]
        return out

    def node_status(self):
        roles = self.roles()
        out = {}
        for n in topology.NODES:
            c = self.cache_counts(n.name)
            out[n.name] = {"role": roles[n.name], "conntrackd": self.conntrackd_pid(n.name) is not None,
                           "keepalived": self.keepalived_alive(n.name), "kernel_states": self.kernel_count(n.name),
                           "internal_cache": c["internal"], "external_cache": c["external"]}
        return out

    def kill_software(self, node, kind):
        netns.sysctl(self.lab.ns[node], "net.ipv4.ip_forward", 0)
        kill_keepalived_abruptly(self.lab, node, self.node_dir(node))
        kill9_pid(self.conntrackd_pid(node))

    def restart_software(self, node, kind):
        netns.sysctl(self.lab.ns[node], "net.ipv4.ip_forward", 1)
        self.start_conntrackd(node)
        self.start_keepalived(node)


def make(lab, name):
    if name == "none":
        return NoneDriver(lab)
    if name == "scripted":
        return ScriptedDriver(lab)
    if name == "builtin":
        return PairwalldDriver(lab)
    if name == "keepalived":
        return PairwalldDriver(lab, keepalived=True)
    if name == "conntrackd":
        return ConntrackdDriver(lab)
    raise LabError(f"unknown driver {name!r}; expected builtin, keepalived, conntrackd, scripted or none")
