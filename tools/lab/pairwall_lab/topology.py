"""The lab's network: five namespaces, two bridged LANs, a sync link, virtual IPs.

    client (eth0 10.10.1.10) ── br-in ──┬── fwA in0 10.10.1.2  ┐          ┌ fwA out0 10.10.2.2 ─┬── br-out ── server
                                        └── fwB in0 10.10.1.3  ┘ sync0 ══ └ fwB out0 10.10.2.3 ─┘   (eth0 10.10.2.10)
    VIPs: 10.10.1.1 (inside), 10.10.2.1 (outside); sync link fwA 10.10.9.1 ═ fwB 10.10.9.2
    with `up --ipv6` also fd10:1::/64 inside (client ::10, fwA ::2, fwB ::3, VIP ::1) and fd10:2::/64
    outside (server ::10, fwA ::2, fwB ::3, VIP ::1): dual stack, the sync link IPv4 alone

Both bridges live in their own namespace (PREFIX + "sw"), so that a firewall's namespace can lose all its
links (a node death) while the LANs stay up, and so that the root namespace is never touched. The client
routes everything through the inside VIP, the server through the outside VIP.

Each firewall stamps the IP TTL of probe replies it forwards to the client (ICMP echo reply, UDP from the
probe port) with its own tag, 101 for fwA and 102 for fwB, in mangle POSTROUTING, after the filter: the
client then knows which node forwarded each reply, which is how the drill sees traffic "through the new
master"; IPv6 replies get the same stamp in their hop limit. TCP is left untouched. The IPv6 addresses skip
duplicate address detection (link-local ones included): an address under DAD cannot send, and the pair's
IPv6 advertisements go out from the link-local one.
"""

from dataclasses import dataclass

from . import netns


@dataclass(frozen=True)
class Node:
    name: str
    node_id: int
    inside: str
    outside: str
    sync: str
    advskew: int
    ttl_tag: int
    inside6: str
    outside6: str


INSIDE_NET = "10.10.1.0/24"
OUTSIDE_NET = "10.10.2.0/24"
VIP_IN = "10.10.1.1"
VIP_OUT = "10.10.2.1"
CLIENT_ADDR = "10.10.1.10"
SERVER_ADDR = "10.10.2.10"
# An address beyond the firewalls, routed by none of them: `up --rdr` redirects it to the server (a
# transparent rdr, decided before routing), and the drill's client then dials it.
SERVICE_ADDR = "10.10.3.10"
PREFIXLEN = 24
# `up --ipv6`: the LANs in IPv6 too.
INSIDE_NET6 = "fd10:1::/64"
OUTSIDE_NET6 = "fd10:2::/64"
VIP_IN6 = "fd10:1::1"
VIP_OUT6 = "fd10:2::1"
CLIENT_ADDR6 = "fd10:1::10"
SERVER_ADDR6 = "fd10:2::10"
PREFIXLEN6 = 64
SYNC_PREFIXLEN = 30
TCP_PORT = 5201
UDP_PORT = 5202
SYNC_PORT = 8370

NODES = (
    Node("fwA", 1, "10.10.1.2", "10.10.2.2", "10.10.9.1", 0, 101, "fd10:1::2", "fd10:2::2"),
    Node("fwB", 2, "10.10.1.3", "10.10.2.3", "10.10.9.2", 100, 102, "fd10:1::3", "fd10:2::3"),
)
NODE_BY_NAME = {n.name: n for n in NODES}
IF_IN, IF_OUT, IF_SYNC = "in0", "out0", "sync0"
ROLES = ("client", "fwA", "fwB", "server", "sw")


def ns_names(prefix):
    return {r: prefix + r for r in ROLES}


def sw_port(node_name, lan):
    """Name of a node's port on a bridge in the switch namespace, e.g. fwa-in."""
    return f"{node_name.lower()}-{lan}"


def other(node_name):
    return "fwB" if node_name == "fwA" else "fwA"


def build(prefix, ipv6=False):
    """Creates the namespaces and links, with `ipv6` dual stack. Precondition: none of the lab's namespaces
    exists."""
    ns = ns_names(prefix)
    for name in ns.values():
        netns.run(["ip", "netns", "add", name])
        netns.ip(name, "link", "set", "lo", "up")

    sw = ns["sw"]
    for br in ("br-in", "br-out"):
        netns.ip(sw, "link", "add", br, "type", "bridge")
        # No STP/forward delay: ports forward as soon as they are up, so a link that comes back is usable at
        # once (as with a switch port with portfast).
        netns.ip(sw, "link", "set", br, "type", "bridge", "forward_delay", "0", "stp_state", "0")
        netns.ip(sw, "link", "set", br, "up")
    try:
        # Bridged frames should not traverse iptables in the switch: that namespace is wire, not firewall.
        netns.sysctl(sw, "net.bridge.bridge-nf-call-iptables", 0)
    except netns.LabError:
        pass  # br_netfilter not loaded: nothing to turn off

    def attach(port, br, peer_ns, peer_if, addr, addr6):
        netns.ip(sw, "link", "add", port, "type", "veth", "peer", "name", peer_if, "netns", peer_ns)
        netns.ip(sw, "link", "set", port, "master", br, "up")
        netns.ip(peer_ns, "addr", "add", f"{addr}/{PREFIXLEN}", "dev", peer_if)
        if ipv6:
            # Before the link comes up, which gives it its link-local address. A link taken down (a node's
            # power loss, `drill --kill node`) keeps its addresses, as IPv4's do: the node's network
            # configuration would give them back when it came up again.
            netns.sysctl(peer_ns, f"net.ipv6.conf.{peer_if}.accept_dad", 0)
            netns.sysctl(peer_ns, f"net.ipv6.conf.{peer_if}.keep_addr_on_down", 1)
            netns.ip(peer_ns, "addr", "add", f"{addr6}/{PREFIXLEN6}", "dev", peer_if, "nodad")
        netns.ip(peer_ns, "link", "set", peer_if, "up")

    attach("cli-in", "br-in", ns["client"], "eth0", CLIENT_ADDR, CLIENT_ADDR6)
    attach("srv-out", "br-out", ns["server"], "eth0", SERVER_ADDR, SERVER_ADDR6)
    for n in NODES:
        attach(sw_port(n.name, "in"), "br-in", ns[n.name], IF_IN, n.inside, n.inside6)
        attach(sw_port(n.name, "out"), "br-out", ns[n.name], IF_OUT, n.outside, n.outside6)

    a, b = NODES
    netns.ip(ns[a.name], "link", "add", IF_SYNC, "type", "veth", "peer", "name", IF_SYNC, "netns", ns[b.name])
    for n in NODES:
        netns.ip(ns[n.name], "addr", "add", f"{n.sync}/{SYNC_PREFIXLEN}", "dev", IF_SYNC)
        netns.ip(ns[n.name], "link", "set", IF_SYNC, "up")
        netns.sysctl(ns[n.name], "net.ipv4.ip_forward", 1)
        netns.sysctl(ns[n.name], "net.ipv4.conf.all.send_redirects", 0)
        for proto_match in (["-p", "icmp", "--icmp-type", "echo-reply"], ["-p", "udp", "--sport", str(UDP_PORT)]):
            netns.nsexec(ns[n.name], "iptables", "-t", "mangle", "-A", "POSTROUTING", "-o", IF_IN,
                         *proto_match, "-j", "TTL", "--ttl-set", str(n.ttl_tag))
        if ipv6:
            netns.sysctl(ns[n.name], "net.ipv6.conf.all.forwarding", 1)
            for proto_match in (["-p", "ipv6-icmp", "--icmpv6-type", "echo-reply"],
                                ["-p", "udp", "--sport", str(UDP_PORT)]):
                netns.nsexec(ns[n.name], "ip6tables", "-t", "mangle", "-A", "POSTROUTING", "-o", IF_IN,
                             *proto_match, "-j", "HL", "--hl-set", str(n.ttl_tag))

    netns.ip(ns["client"], "route", "add", "default", "via", VIP_IN)
    netns.ip(ns["server"], "route", "add", "default", "via", VIP_OUT)
    if ipv6:
        netns.ip(ns["client"], "-6", "route", "add", "default", "via", VIP_IN6)
        netns.ip(ns["server"], "-6", "route", "add", "default", "via", VIP_OUT6)


def vip_holders(prefix):
    """{node: [VIPs it holds in its kernel]}, those of `up --ipv6` included."""
    ns = ns_names(prefix)
    out = {}
    for n in NODES:
        addrs = netns.addresses(ns[n.name])
        held = []
        for ifname, vip in ((IF_IN, VIP_IN), (IF_OUT, VIP_OUT), (IF_IN, VIP_IN6), (IF_OUT, VIP_OUT6)):
            if any(a.split("/")[0] == vip for a in addrs.get(ifname, {}).get("addrs", [])):
                held.append(vip)
        out[n.name] = held
    return out


def add_vips(prefix, node_name):
    ns = ns_names(prefix)[node_name]
    for ifname, vip in ((IF_IN, VIP_IN), (IF_OUT, VIP_OUT)):
        netns.ip(ns, "addr", "replace", f"{vip}/{PREFIXLEN}", "dev", ifname)


def del_vips(prefix, node_name):
    ns = ns_names(prefix)[node_name]
    for ifname, vip in ((IF_IN, VIP_IN), (IF_OUT, VIP_OUT)):
        netns.ip(ns, "addr", "del", f"{vip}/{PREFIXLEN}", "dev", ifname, check=False)


def set_node_links(prefix, node_name, up):
    """All links of a firewall namespace down (a power loss seen from the wire) or back up."""
    ns = ns_names(prefix)[node_name]
    for ifname in (IF_IN, IF_OUT, IF_SYNC):
        netns.ip(ns, "link", "set", ifname, "up" if up else "down")


def set_lan_port(prefix, node_name, lan, up):
    """A node's cable on one LAN pulled (switch side): the node sees its carrier go."""
    netns.ip(ns_names(prefix)["sw"], "link", "set", sw_port(node_name, lan), "up" if up else "down")


def set_sync_link(prefix, node_name, up):
    netns.ip(ns_names(prefix)[node_name], "link", "set", IF_SYNC, "up" if up else "down")
