#include "failover/failover_config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "daemon/control/config_section.h"
#include "daemon/control/key_file_check.h"
#include "failover/election.h"

namespace pairwall::failover {
namespace {

using control::ConfigSection;
using control::describe;
using control::valid_interface_name;

// Whether the bits of `a` past the first `prefix` of `bits` are all `one`.
bool host_part_is(const std::array<uint8_t, 16>& a, int bits, int prefix, bool one) {
  for (int i = prefix; i < bits; ++i) {
    if (((a[static_cast<std::size_t>(i / 8)] >> (7 - i % 8)) & 1) != (one ? 1 : 0)) return false;
  }
  return true;
}

// "ADDRESS/PREFIX" of a unicast host address; false when it is not one.
bool parse_vip(const std::string& text, Vip& vip, std::string& why) {
  const auto slash = text.find('/');
  if (slash == std::string::npos) {
    why = "expected ADDRESS/PREFIX (e.g. \"10.1.0.1/24\"), got \"" + text + "\"";
    return false;
  }
  const std::string addr = text.substr(0, slash);
  const std::string len = text.substr(slash + 1);
  if (inet_pton(AF_INET, addr.c_str(), vip.address.data()) == 1) {
    vip.family = AF_INET;
  } else if (inet_pton(AF_INET6, addr.c_str(), vip.address.data()) == 1) {
    vip.family = AF_INET6;
  } else {
    why = "\"" + addr + "\" is not an IPv4 or IPv6 address";
    return false;
  }
  const int max = vip.family == AF_INET ? 32 : 128;
  int n = -1;
  if (!len.empty() && len.size() <= 3 &&
      std::all_of(len.begin(), len.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    n = std::stoi(len);
  }
  if (n < 1 || n > max) {
    why = "prefix length of \"" + text + "\" must be 1.." + std::to_string(max);
    return false;
  }
  vip.prefix_len = static_cast<uint8_t>(n);
  const auto& a = vip.address;
  // Link-local addresses, 169.254.0.0/16 (RFC 3927) and fe80::/10 (RFC 4291 2.5.6), are each host's
  // own on its link, and no router forwards to them: nothing a service is reached at.
  const bool bad =
      vip.family == AF_INET
          ? (a[0] == 0 || a[0] >= 224 || a[0] == 127 || (a[0] == 169 && a[1] == 254))
          : (a[0] == 0xff || std::all_of(a.begin(), a.end() - 1, [](uint8_t b) { return b == 0; }) ||
             (a[0] == 0xfe && (a[1] & 0xc0) == 0x80));
  if (bad) {
    why = "\"" + addr + "\" cannot be a virtual address (unspecified, loopback, multicast or link-local)";
    return false;
  }
  // An IPv4-mapped address (::ffff:0:0/96, RFC 4291 2.5.5.2) stands for an IPv4 node in the sockets
  // API (RFC 3493 3.7): a client given one talks IPv4 to the address inside, never IPv6 to the VIP.
  if (vip.family == AF_INET6 && std::all_of(a.begin(), a.begin() + 10, [](uint8_t b) { return b == 0; }) &&
      a[10] == 0xff && a[11] == 0xff) {
    char v4[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, a.data() + 12, v4, sizeof v4);
    why = "\"" + addr +
          "\" is an IPv4-mapped address (::ffff:0:0/96), which no host is reached at over IPv6: " +
          "write it as IPv4, " + v4 + " with its IPv4 prefix";
    return false;
  }
  // Neighbours take an IPv4 prefix's first and last address for the network and its broadcast,
  // never for a host (but on a /31, RFC 3021).
  if (vip.family == AF_INET && n <= 30) {
    const bool network = host_part_is(a, 32, n, false);
    if (network || host_part_is(a, 32, n, true)) {
      why = "\"" + text + "\" is the " + (network ? "network" : "broadcast") +
            " address of its prefix, not a host's";
      return false;
    }
  }
  // An IPv6 prefix's address with the host part zero is its subnet-router anycast address (RFC 4291
  // 2.6.1): every node forwarding on the link, so both firewalls, answers for it already, and it
  // would never move (a /127 has none, RFC 6164).
  if (vip.family == AF_INET6 && n <= 126 && host_part_is(a, 128, n, false)) {
    why = "\"" + text +
          "\" is the subnet-router anycast address of its prefix, which every router on "
          "the link answers for";
    return false;
  }
  return true;
}

// As the sync key's (daemon/sync/key_file.h): a regular file of at most 4 KiB that no other user
// may read or write, since whoever holds the key can claim the VIPs.
std::string read_key(ConfigSection& r, const char* setting, const std::string& path) {
  int error = 0;
  if (const std::string problem = control::key_file_problem(path, kMaxKeyFileBytes, error); !problem.empty())
    r.fail(setting,
           error != 0 ? "cannot read \"" + path + "\": " + problem : "\"" + path + "\" is " + problem);
  std::ifstream in(path, std::ios::binary);
  if (!in) r.fail(setting, "cannot read \"" + path + "\": " + std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  std::string key = buf.str();
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) key.pop_back();
  if (key.size() < kMinKeyBytes) {
    r.fail(setting, "\"" + path + "\" holds " + std::to_string(key.size()) + " bytes, need at least " +
                        std::to_string(kMinKeyBytes) + " (e.g. head -c 32 /dev/urandom | base64)");
  }
  return key;
}

// An entry `{ interface = "...", address = "..." }` of `key` (a VIP or a peer), its address
// written as `form` ("ADDRESS/PREFIX"): the interface's name and the address's text.
struct LinkAddress {
  std::string interface;
  std::string address;
};
LinkAddress read_link_address(ConfigSection& r, const std::string& key, const toml::node& entry,
                              const std::string& form) {
  const toml::table* t = entry.as_table();
  if (!t) r.fail(key, "expected { interface = \"...\", address = \"" + form + "\" }, got " + describe(entry));
  for (auto&& [k, value] : *t) {
    if (k.str() != "interface" && k.str() != "address")
      r.fail(key + "." + std::string(k.str()), "unknown key");
  }
  const auto ifname = (*t)["interface"].value_exact<std::string>();
  if (!ifname || !valid_interface_name(*ifname)) {
    r.fail(key + ".interface", "expected an interface name (1..15 characters, no '/', ':' or spaces)");
  }
  const auto addr = (*t)["address"].value_exact<std::string>();
  if (!addr) r.fail(key + ".address", "expected a string \"" + form + "\"");
  // As ConfigSection::string(): inet_pton() would read "10.0.0.1\u0000junk" as 10.0.0.1.
  if (addr->find('\0') != std::string::npos)
    r.fail(key + ".address", "expected no NUL character, got " + describe(*t->get("address")));
  return {*ifname, *addr};
}

// One entry of `peers`: the other node's own unicast address on a link the group advertises on,
// in a family it has a VIP of there, one per link and family.
AdvertPeer parse_peer(ConfigSection& r, const std::string& key, const toml::node& entry,
                      const FailoverConfig& c) {
  auto [ifname, address] = read_link_address(r, key, entry, "ADDRESS");
  AdvertPeer peer;
  peer.interface = std::move(ifname);
  if (inet_pton(AF_INET, address.c_str(), peer.address.data()) == 1) {
    peer.family = AF_INET;
  } else if (inet_pton(AF_INET6, address.c_str(), peer.address.data()) == 1) {
    peer.family = AF_INET6;
  } else {
    r.fail(key + ".address", "\"" + address + "\" is not an IPv4 or IPv6 address");
  }
  const auto& a = peer.address;
  const bool unspecified_or_loopback6 = std::all_of(a.begin(), a.end() - 1, [](uint8_t b) { return b == 0; });
  const bool not_a_host = peer.family == AF_INET
                              ? (a[0] == 0 || a[0] >= 224 || a[0] == 127)
                              : (a[0] == 0xff || unspecified_or_loopback6 ||
                                 (std::all_of(a.begin(), a.begin() + 10, [](uint8_t b) { return b == 0; }) &&
                                  a[10] == 0xff && a[11] == 0xff));
  if (not_a_host) {
    r.fail(key + ".address", "\"" + address +
                                 "\" is not the peer's own address (unspecified, loopback, multicast, "
                                 "broadcast or IPv4-mapped); name the address the other node has on " +
                                 peer.interface);
  }
  const auto same_link = [&](const auto& other) {
    return other.interface == peer.interface && other.family == peer.family;
  };
  const char* family = peer.family == AF_INET ? "IPv4" : "IPv6";
  if (std::none_of(c.vips.begin(), c.vips.end(), same_link)) {
    r.fail(key + ".interface", peer.interface + " holds no " + family +
                                   " virtual address: advertisements go out only where the group has one");
  }
  if (std::any_of(c.peers.begin(), c.peers.end(), same_link)) {
    r.fail(key, "a second " + std::string(family) + " peer on " + peer.interface + ": one node is the other");
  }
  if (std::any_of(c.vips.begin(), c.vips.end(),
                  [&](const Vip& v) { return v.family == peer.family && v.address == peer.address; })) {
    r.fail(key + ".address", "\"" + address + "\" is a virtual address of the group, not the peer's own");
  }
  return peer;
}

}  // namespace

std::string Vip::text() const {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(family, address.data(), buf, sizeof buf);
  return std::string(buf) + "/" + std::to_string(prefix_len);
}

std::string AdvertPeer::text() const {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(family, address.data(), buf, sizeof buf);
  return buf;
}

std::string AdvertChannel::text() const {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(family, destination.data(), buf, sizeof buf);
  return interface + (family == AF_INET ? " (IPv4) to " : " (IPv6) to ") + buf + " port " +
         std::to_string(port);
}

std::vector<std::string> FailoverConfig::interfaces() const {
  std::vector<std::string> out;
  for (const auto& v : vips) {
    if (std::find(out.begin(), out.end(), v.interface) == out.end()) out.push_back(v.interface);
  }
  return out;
}

std::vector<std::string> FailoverConfig::watched_interfaces() const {
  std::vector<std::string> out = interfaces();
  for (const std::string& name : track_interfaces) {
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

std::vector<AdvertChannel> FailoverConfig::advert_channels() const {
  std::vector<AdvertChannel> out;
  for (const std::string& ifname : interfaces()) {
    for (const int family : {AF_INET, AF_INET6}) {
      const bool has_vip = std::any_of(vips.begin(), vips.end(), [&](const Vip& v) {
        return v.interface == ifname && v.family == family;
      });
      if (!has_vip) continue;
      AdvertChannel channel;
      channel.interface = ifname;
      channel.family = family;
      channel.port = port;
      const auto peer = std::find_if(peers.begin(), peers.end(), [&](const AdvertPeer& p) {
        return p.interface == ifname && p.family == family;
      });
      if (peer != peers.end()) {
        channel.destination = peer->address;
        channel.unicast = true;
      } else if (family == AF_INET) {
        std::copy(group4.begin(), group4.end(), channel.destination.begin());
      } else {
        channel.destination = group6;
      }
      out.push_back(channel);
    }
  }
  return out;
}

bool FailoverConfig::from_peer(const AdvertChannel& channel, const std::array<uint8_t, 16>& source) const {
  if (!channel.unicast) return true;
  // The bytes past an IPv4 address are zero on both sides.
  return source == channel.destination || std::any_of(vips.begin(), vips.end(), [&](const Vip& v) {
           return v.family == channel.family && v.address == source;
         });
}

uint32_t FailoverConfig::effective_announce_interval_ms() const {
  if (announce_interval_ms) return announce_interval_ms;
  // The repeats must come faster than the once-a-second tail that follows them: at advbase/2
  // alone, a slow group (advbase 10 s .. 255 s) announced every 5 s .. 127 s right after a
  // takeover, while a killed master's kernel may still answer for the VIPs, and the faster tail
  // only began once they were done.
  return std::clamp<uint32_t>(advbase_ms / 2, 10, 1000);
}

uint32_t FailoverConfig::effective_vip_lease_s() const {
  if (vip_lease_s < 0) return 0;
  if (vip_lease_s > 0) return static_cast<uint32_t>(vip_lease_s);
  // Long enough to survive a few missed renewals, short enough that the addresses of a killed
  // daemon leave its kernel soon after the backup has taken over (LAB-NOTES: kill -9).
  return std::max<uint32_t>(3, (4 * advbase_ms + 999) / 1000);
}

FailoverConfig parse_failover_config(const toml::table& section, const std::string& file) {
  ConfigSection r(&section, "failover", file);
  FailoverConfig c;

  if (auto v = r.string("driver")) {
    if (*v == "builtin") {
      c.driver = Driver::Builtin;
    } else if (*v == "keepalived") {
      c.driver = Driver::Keepalived;
    } else {
      r.fail("driver", "expected \"builtin\" or \"keepalived\", got \"" + *v + "\"");
    }
  }
  const bool builtin = c.driver == Driver::Builtin;
  if (!builtin) {
    // keepalived elects and announces: a builtin setting would be shown by status and metrics
    // while keepalived.conf's decides.
    for (const char* key :
         {"vhid", "advbase_ms", "advskew", "preempt", "port", "group4", "group6", "key_file",
          "accept_key_file", "announce_count", "announce_interval_ms", "vip_lease_s"}) {
      if (r.get(key) != nullptr) {
        r.fail(key,
               "the builtin election's; with driver = \"keepalived\", keepalived.conf decides it "
               "(priority, advert_int, virtual_ipaddress): remove it");
      }
    }
  }

  if (auto v = r.integer("vhid", 1, 255)) c.vhid = static_cast<uint8_t>(*v);
  if (auto v = r.integer("advbase_ms", kMinAdvbaseMs, kMaxAdvbaseMs))
    c.advbase_ms = static_cast<uint32_t>(*v);
  if (auto v = r.integer("advskew", 0, 254)) c.advskew = static_cast<uint8_t>(*v);
  if (auto v = r.boolean("preempt")) c.preempt = *v;
  if (auto v = r.integer("port", 1, 65535)) c.port = static_cast<uint16_t>(*v);
  if (auto v = r.integer("announce_count", 0, 100)) c.announce_count = static_cast<uint32_t>(*v);
  if (auto v = r.integer("announce_interval_ms", 0, 60'000))
    c.announce_interval_ms = static_cast<uint32_t>(*v);
  if (auto v = r.integer("vip_lease_s", -1, 86'400)) c.vip_lease_s = *v;

  if (auto v = r.string("group4")) {
    in_addr a{};
    if (inet_pton(AF_INET, v->c_str(), &a) != 1 || !IN_MULTICAST(ntohl(a.s_addr))) {
      r.fail("group4", "expected an IPv4 multicast address, got \"" + *v + "\"");
    }
    std::memcpy(c.group4.data(), &a, 4);
  }
  if (auto v = r.string("group6")) {
    in6_addr a{};
    if (inet_pton(AF_INET6, v->c_str(), &a) != 1 || !IN6_IS_ADDR_MULTICAST(&a)) {
      r.fail("group6", "expected an IPv6 multicast address, got \"" + *v + "\"");
    }
    // RFC 4291 2.7: scope 0 is reserved and 1 interface-local; the kernel does not send either out
    // of the node, so the peer would never hear us and both would be master.
    if ((a.s6_addr[1] & 0x0f) < 2) {
      r.fail("group6", "\"" + *v + "\" never leaves this node (interface-local or reserved scope); " +
                           "expected link-local scope or wider, e.g. \"ff02::12\"");
    }
    std::memcpy(c.group6.data(), &a, 16);
  }

  const auto key_path = [&](const char* setting, const std::string& v) {
    if (v.empty()) r.fail(setting, "expected a path, got \"\"");
    std::filesystem::path p(v);
    if (p.is_relative()) p = std::filesystem::path(file).parent_path() / p;
    return p.string();
  };
  if (auto v = r.string("key_file")) {
    c.key_file = key_path("key_file", *v);
    c.key = read_key(r, "key_file", c.key_file);
  } else if (builtin) {
    r.fail("key_file", "missing: advertisements are authenticated with a shared key file");
  }
  if (auto v = r.string("accept_key_file")) {
    c.accept_key_file = key_path("accept_key_file", *v);
    c.accept_key = read_key(r, "accept_key_file", c.accept_key_file);
    if (c.accept_key == c.key) r.fail("accept_key_file", "holds the key of key_file: name the other key");
  }

  if (auto v = r.strings("track_interfaces")) {
    if (!builtin) {
      r.fail("track_interfaces",
             "keepalived tracks interfaces itself (track_interface in keepalived.conf): remove it");
    }
    for (const std::string& name : *v) {
      if (!valid_interface_name(name)) {
        r.fail("track_interfaces",
               "\"" + name + "\" is not an interface name (1..15 characters, no '/', ':' or spaces)");
      }
      if (std::find(c.track_interfaces.begin(), c.track_interfaces.end(), name) != c.track_interfaces.end()) {
        r.fail("track_interfaces", "\"" + name + "\" is listed twice");
      }
      c.track_interfaces.push_back(name);
    }
  }
  if (auto v = r.string("notify")) {
    if (!builtin) {
      r.fail("notify",
             "keepalived runs its own notify scripts (notify_master, notify_backup, notify_fault in "
             "keepalived.conf): remove it");
    }
    c.notify = key_path("notify", *v);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(c.notify, ec) || ::access(c.notify.c_str(), X_OK) != 0) {
      r.fail("notify", c.notify + ": not an executable file");
    }
  }

  if (const toml::node* node = r.get("vips")) {
    const toml::array* arr = node->as_array();
    if (!arr)
      r.fail("vips", "expected an array of { interface = \"...\", address = \"ADDRESS/PREFIX\" }, got " +
                         describe(*node));
    for (std::size_t i = 0; i < arr->size(); ++i) {
      const std::string key = "vips[" + std::to_string(i) + "]";
      auto [ifname, address] = read_link_address(r, key, (*arr)[i], "ADDRESS/PREFIX");
      Vip vip;
      vip.interface = std::move(ifname);
      std::string why;
      if (!parse_vip(address, vip, why)) r.fail(key + ".address", why);
      for (const auto& other : c.vips) {
        if (other.family == vip.family && other.address == vip.address) {
          r.fail(key + ".address", "\"" + address + "\" is listed twice");
        }
      }
      c.vips.push_back(std::move(vip));
    }
  }
  if (builtin && c.vips.empty()) {
    r.fail("vips", "missing: a failover group needs at least one virtual address");
  }
  if (const toml::node* node = r.get("peers")) {
    if (!builtin) {
      r.fail("peers", "keepalived sends to its peers itself (unicast_peer in keepalived.conf): remove it");
    }
    const toml::array* arr = node->as_array();
    if (!arr)
      r.fail("peers",
             "expected an array of { interface = \"...\", address = \"ADDRESS\" }, got " + describe(*node));
    for (std::size_t i = 0; i < arr->size(); ++i) {
      c.peers.push_back(parse_peer(r, "peers[" + std::to_string(i) + "]", (*arr)[i], c));
    }
  }
  r.finish();
  return c;
}

}  // namespace pairwall::failover
