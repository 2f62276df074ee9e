"""Who holds the virtual IPs in the lab, and how a drill fails and restores the master.

- `none`: no pairwalld. The VIPs sit on fwA and the kernel forwards. A drill's kill is followed by a
  scripted takeover (VIPs moved to the other node plus gratuitous ARP after 3·advbase + skew), so the
  traffic and measurement machinery runs end to end before the daemon exists. It proves the lab, not
  pairwall.
- `builtin`: pairwalld in each firewall with generated config, rules and sync key; its own election.
- `keepalived`: pairwalld for filtering and sync, keepalived (VRRPv3) for the election; its notify scripts
  call `pairwallctl failover set-role`, its track script `pairwallctl health`.
- `scripted`: pairwalld for filtering and sync, no [failover] section; the lab moves the VIPs as with
  `none`. The real data path under the drill, apart from the election.

Roles are read through `pairwallctl -s SOCKET failover status --json` in each namespace, or from the VIPs
held in the kernel for `none` and `scripted`.
"""

import json
import os
import secrets
import time

from . import netns, topology
from .netns import FeatureMissing, LabError

KILL_KINDS = ("master", "node", "link", "sync")


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
        raise NotImplementedError

    def restore(self, node, kind):
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

    def kill(self, node, kind):
        p = self.lab.prefix
        if kind == "master":
            # The forwarder "process" is the kernel's forwarding: turn it off; the VIPs stay (as after kill -9).
            netns.sysctl(self.lab.ns[node], "net.ipv4.ip_forward", 0)
        elif kind == "node":
            netns.sysctl(self.lab.ns[node], "net.ipv4.ip_forward", 0)
            topology.set_node_links(p, node, False)
        elif kind == "link":
            topology.set_lan_port(p, node, "out", False)
        elif kind == "sync":
            topology.set_sync_link(p, node, False)
        else:
            raise LabError(f"unknown kill kind {kind!r}; expected one of {', '.join(KILL_KINDS)}")

    def after_kill(self, node, kind, t_kill):
        if kind == "sync":
            return  # sync loss does not move the group
        peer = topology.other(node)
        delay = takeover_delay_s(self.lab.advbase_ms, topology.NODE_BY_NAME[peer].advskew)
        time.sleep(max(0.0, t_kill + delay - time.monotonic()))
        topology.del_vips(self.lab.prefix, node)  # a real master that died could not; see LAB-NOTES
        topology.add_vips(self.lab.prefix, peer)
        self._announce(peer)

    def restore(self, node, kind):
        p = self.lab.prefix
        if kind == "node":
            topology.set_node_links(p, node, True)
        elif kind == "link":
            topology.set_lan_port(p, node, "out", True)
        elif kind == "sync":
            topology.set_sync_link(p, node, True)
        netns.sysctl(self.lab.ns[node], "net.ipv4.ip_forward", 1)


RULES_TEMPLATE = """\
# Generated by pairwall-lab: pass what the inside starts, keep state, block the rest.
in_if = "{in_if}"
out_if = "{out_if}"
set limit states 400000
# UDP flows preloaded by the chaos scenarios must outlive a bulk resync.
set timeout {{ tcp.established 86400, udp.first 600, udp.single 600, udp.multiple 600 }}
block all
pass in on $in_if inet from {inside} to any keep state
pass out on $out_if inet from {inside} to any keep state
"""

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
"""

FAILOVER_TEMPLATE = """
[failover]
driver = "{failover_driver}"
vhid = 1
advbase_ms = {advbase_ms}
advskew = {advskew}
preempt = false
key_file = "{failover_key}"
vips = [ {{ interface = "{if_in}", address = "{vip_in}/{plen}" }},
         {{ interface = "{if_out}", address = "{vip_out}/{plen}" }} ]
"""

KEEPALIVED_TEMPLATE = """\
# Generated by pairwall-lab for node {name} ({ns}).
global_defs {{
  router_id {name}
  script_user root
  enable_script_security
  vrrp_version 3
}}

vrrp_script pairwall_health {{
  script "{ctl} -s {socket} health"
  interval 1
  fall 1
  rise 2
}}

vrrp_instance pairwall {{
  state BACKUP
  interface {if_in}
  virtual_router_id 51
  priority {priority}
  advert_int {advert_s}
  nopreempt
  virtual_ipaddress {{
    {vip_in}/{plen} dev {if_in}
    {vip_out}/{plen} dev {if_out}
  }}
  track_interface {{
    {if_out}
  }}
  track_script {{
    pairwall_health
  }}
  notify_master "{ctl} -s {socket} failover set-role master"
  notify_backup "{ctl} -s {socket} failover set-role backup"
  notify_fault "{ctl} -s {socket} failover set-role fault"
}}
"""


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
        for i, n in enumerate(topology.NODES):
            d = self.node_dir(n.name)
            d.mkdir(parents=True, exist_ok=True)
            peer = topology.NODE_BY_NAME[topology.other(n.name)]
            rules = d / "pairwall.rules"
            rules.write_text(RULES_TEMPLATE.format(in_if=topology.IF_IN, out_if=topology.IF_OUT,
                                                   inside=topology.INSIDE_NET))
            fields = dict(
                name=n.name, ns=self.lab.ns[n.name], node_id=n.node_id, queue_first=0, rules=rules,
                socket=self.socket(n.name), metrics_port=9477 + i, if_sync=topology.IF_SYNC, own_sync=n.sync,
                peer_sync=peer.sync, sync_port=topology.SYNC_PORT, sync_key=key,
                failover_driver=self.name, advbase_ms=self.lab.advbase_ms, advskew=n.advskew,
                failover_key=fkey, if_in=topology.IF_IN, if_out=topology.IF_OUT, vip_in=topology.VIP_IN,
                vip_out=topology.VIP_OUT, plen=topology.PREFIXLEN)
            text = CONFIG_TEMPLATE.format(**fields)
            if self.elects:
                text += FAILOVER_TEMPLATE.format(**fields)
            (d / "pairwall.toml").write_text(text)
            if self.keepalived:
                (d / "keepalived.conf").write_text(KEEPALIVED_TEMPLATE.format(
                    name=n.name, ns=self.lab.ns[n.name], ctl=self.lab.bin("pairwallctl"),
                    socket=self.socket(n.name), if_in=topology.IF_IN, if_out=topology.IF_OUT,
                    priority=200 - n.advskew, advert_s=self.lab.advbase_ms / 1000.0, vip_in=topology.VIP_IN,
                    vip_out=topology.VIP_OUT, plen=topology.PREFIXLEN))

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
        for n in topology.NODES:
            self.start_daemon(n.name)
            # fwA first, so that with equal conditions the lower skew also comes up first.
            self.wait_socket(n.name)

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

    def ctl(self, node, *args, timeout=5):
        cp = netns.nsexec(self.lab.ns[node], self.lab.bin("pairwallctl"), "-s", str(self.socket(node)), *args,
                          check=False, timeout=timeout)
        if cp.returncode != 0:
            return None
        try:
            return json.loads(cp.stdout)
        except json.JSONDecodeError:
            return None

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

    def kill(self, node, kind):
        p = self.lab.prefix
        if kind in ("master", "node"):
            self.lab.kill9(node, "pairwalld")
            if kind == "node":
                if self.keepalived:
                    self.lab.kill9(node, "keepalived")
                topology.set_node_links(p, node, False)
        elif kind == "link":
            topology.set_lan_port(p, node, "out", False)
        elif kind == "sync":
            topology.set_sync_link(p, node, False)
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
        if kind in ("master", "node"):
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


def make(lab, name):
    if name == "none":
        return NoneDriver(lab)
    if name == "scripted":
        return ScriptedDriver(lab)
    if name == "builtin":
        return PairwalldDriver(lab)
    if name == "keepalived":
        return PairwalldDriver(lab, keepalived=True)
    raise LabError(f"unknown driver {name!r}; expected builtin, keepalived, scripted or none")
