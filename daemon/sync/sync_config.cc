#include "daemon/sync/sync_config.h"

#include <arpa/inet.h>
#include <net/if.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <set>

#include "daemon/control/config_error.h"
#include "daemon/sync/key_file.h"

namespace pairwall::sync {
namespace {

enum class AddrKind : uint8_t { V4, V6 };

struct Parsed {
  AddrKind family = AddrKind::V4;
  bool multicast = false;
  bool link_local_group = false;  // a group no multicast router forwards, whatever the TTL
  bool node_group = false;        // a group that never leaves this node (IPv6 scope 0, 1 or 15)
  bool unspecified = false;
  std::string mapped_v4;  // of an IPv4-mapped address, ::ffff:a.b.c.d (RFC 4291 section 2.5.5.2)
};

bool parse_ip(const std::string& text, Parsed& out) {
  std::array<uint8_t, 16> buf{};
  if (inet_pton(AF_INET, text.c_str(), buf.data()) == 1) {
    out.family = AddrKind::V4;
    out.multicast = (buf[0] & 0xf0) == 0xe0;
    out.link_local_group = buf[0] == 224 && buf[1] == 0 && buf[2] == 0;  // RFC 5771 section 4
    out.unspecified = buf[0] == 0 && buf[1] == 0 && buf[2] == 0 && buf[3] == 0;
    return true;
  }
  if (inet_pton(AF_INET6, text.c_str(), buf.data()) == 1) {
    out.family = AddrKind::V6;
    out.multicast = buf[0] == 0xff;
    // The scope, not the flags: ff02::/16, and ff12::/16 and the like too (RFC 4291 section 2.7).
    const uint8_t scope = buf[1] & 0x0f;
    out.link_local_group = out.multicast && scope == 0x2;
    // Interface-local (1) stays on this node; 0 and 15 are reserved, and Linux sends neither out.
    out.node_group = out.multicast && (scope == 0x0 || scope == 0x1 || scope == 0xf);
    out.unspecified = true;
    for (uint8_t b : buf) out.unspecified = out.unspecified && b == 0;
    bool v4_mapped = buf[10] == 0xff && buf[11] == 0xff;
    for (int i = 0; i < 10; ++i) v4_mapped = v4_mapped && buf[i] == 0;
    std::array<char, INET_ADDRSTRLEN> v4{};
    if (v4_mapped && inet_ntop(AF_INET, buf.data() + 12, v4.data(), v4.size()) != nullptr)
      out.mapped_v4 = v4.data();
    return true;
  }
  return false;
}

class Reader {
 public:
  Reader(const toml::table& section, const std::string& file) : section_(section), file_(file) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw ConfigError(file_ + ": [sync] " + key + ": " + what);
  }

  std::string string(const std::string& key, bool required) const {
    const toml::node* n = section_.get(key);
    if (n == nullptr) {
      if (required) fail(key, "missing (required)");
      return {};
    }
    if (!n->is_string()) fail(key, "expected a string");
    std::string v = *n->value<std::string>();
    if (v.empty()) fail(key, "empty");
    return v;
  }

  bool boolean(const std::string& key, bool def) const {
    const toml::node* n = section_.get(key);
    if (n == nullptr) return def;
    if (!n->is_boolean()) fail(key, "expected true or false");
    return *n->value<bool>();
  }

  int64_t integer(const std::string& key, int64_t def, int64_t lo, int64_t hi) const {
    const toml::node* n = section_.get(key);
    if (n == nullptr) return def;
    if (!n->is_integer()) fail(key, "expected an integer");
    const int64_t v = *n->value<int64_t>();
    if (v < lo || v > hi) {
      fail(key, "expected " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + std::to_string(v));
    }
    return v;
  }

 private:
  const toml::table& section_;
  const std::string& file_;
};

// The sync socket of an IPv6 address is IPv6 only (IPV6_V6ONLY): an IPv4-mapped address can
// neither be bound nor sent to there (ENETUNREACH at every datagram).
void refuse_v4_mapped(const Reader& r, const std::string& key, const std::string& text, const Parsed& p) {
  if (p.mapped_v4.empty()) return;
  r.fail(key, "\"" + text + "\" is an IPv4-mapped address: write the IPv4 address (\"" + p.mapped_v4 + "\")");
}

// `fe80::2%sync0`, as `ip address` prints it: an IPv6 link-local address with its zone, which can
// only be the sync interface (the socket scopes link-local addresses to it). The address without it.
std::string without_zone(const Reader& r, const std::string& key, const std::string& text,
                         const std::string& interface) {
  const auto percent = text.find('%');
  if (percent == std::string::npos) return text;
  const std::string address = text.substr(0, percent);
  const std::string zone = text.substr(percent + 1);
  std::array<uint8_t, 16> buf{};
  const bool parsed = inet_pton(AF_INET6, address.c_str(), buf.data()) == 1;
  const bool link_local_unicast = buf[0] == 0xfe && (buf[1] & 0xc0) == 0x80;  // fe80::/10
  const bool link_local_group = buf[0] == 0xff && (buf[1] & 0x0f) == 0x2;     // ff02::/16 and the like
  if (!parsed || !(link_local_unicast || link_local_group)) {
    r.fail(key, "\"" + text + "\": a zone (%" + zone + ") goes with an IPv6 link-local address only");
  }
  if (zone != interface) {
    r.fail(key, "\"" + text + "\": the zone is " + zone + ", not the sync interface " + interface);
  }
  return address;
}

}  // namespace

SyncConfig parse_sync_config(const toml::table& section, const std::string& file) {
  static const std::set<std::string> kKeys = {"interface",
                                              "address",
                                              "peer",
                                              "group",
                                              "port",
                                              "key_file",
                                              "accept_key_file",
                                              "mtu",
                                              "flush_interval_ms",
                                              "bulk_timeout_min_s",
                                              "peer_node_id",
                                              "resend_window",
                                              "pending_limit",
                                              "defer",
                                              "defer_timeout_ms",
                                              "ttl_security",
                                              "tables"};
  Reader r(section, file);
  for (const auto& [key, value] : section) {
    (void)value;
    if (kKeys.count(std::string(key.str())) == 0) {
      r.fail(std::string(key.str()),
             "unknown key (known: interface, address, peer, group, port, key_file, accept_key_file, mtu, "
             "flush_interval_ms, bulk_timeout_min_s, peer_node_id, resend_window, pending_limit, defer, "
             "defer_timeout_ms, ttl_security, tables)");
    }
  }

  SyncConfig c;
  c.interface = r.string("interface", true);
  if (c.interface.size() >= IFNAMSIZ || c.interface.find_first_of("/ \t") != std::string::npos) {
    r.fail("interface", "not an interface name: \"" + c.interface + "\"");
  }

  c.peer = without_zone(r, "peer", r.string("peer", false), c.interface);
  c.group = without_zone(r, "group", r.string("group", false), c.interface);
  if (c.peer.empty() == c.group.empty()) {
    r.fail(c.peer.empty() ? "peer" : "group", "set exactly one of peer (unicast) and group (multicast)");
  }
  const std::string target_key = c.peer.empty() ? "group" : "peer";
  const std::string& target = c.peer.empty() ? c.group : c.peer;
  Parsed t;
  if (!parse_ip(target, t)) r.fail(target_key, "not an IPv4 or IPv6 address: \"" + target + "\"");
  if (t.unspecified) r.fail(target_key, "the unspecified address cannot be a destination");
  refuse_v4_mapped(r, target_key, target, t);
  if (!c.group.empty() && !t.multicast) r.fail("group", "not a multicast address: \"" + c.group + "\"");
  if (!c.peer.empty() && t.multicast) r.fail("peer", "a multicast address: use group = \"" + c.peer + "\"");
  if (!c.group.empty() && t.node_group) {
    r.fail("group",
           "\"" + c.group +
               "\" has interface-local or reserved scope: it never reaches the peer; use a link-local "
               "group (ff02::/16)");
  }
  c.ipv6 = t.family == AddrKind::V6;
  c.ttl_security = r.boolean("ttl_security", true);
  // Datagrams with TTL 255 to a wider group would be forwarded by a multicast router: the state
  // table off the link. Without ttl_security a group gets the system's multicast TTL, 1.
  if (!c.group.empty() && c.ttl_security && !t.link_local_group) {
    r.fail("group", "\"" + c.group +
                        "\" is not a link-local group (224.0.0.0/24, ff02::/16): sent with TTL 255 "
                        "(ttl_security), a multicast router would forward it; use a link-local group or "
                        "ttl_security = false");
  }

  c.address = without_zone(r, "address", r.string("address", false), c.interface);
  if (!c.address.empty()) {
    Parsed a;
    if (!parse_ip(c.address, a)) r.fail("address", "not an IPv4 or IPv6 address: \"" + c.address + "\"");
    if (a.family != t.family) r.fail("address", "family differs from " + target_key + " \"" + target + "\"");
    refuse_v4_mapped(r, "address", c.address, a);
    if (a.multicast) r.fail("address", "a multicast address cannot be the local address");
  }

  c.port = static_cast<uint16_t>(r.integer("port", 8370, 1, 65535));
  c.mtu = static_cast<uint32_t>(r.integer("mtu", 1500, c.ipv6 ? 1280 : 576, 65535));
  c.flush_interval = std::chrono::milliseconds(r.integer("flush_interval_ms", 10, 0, 1000));
  c.bulk_timeout_min = std::chrono::seconds(r.integer("bulk_timeout_min_s", 5, 1, 3600));
  c.peer_node_id = static_cast<uint32_t>(r.integer("peer_node_id", 0, 0, 0xffffffff));
  c.resend_window = static_cast<uint32_t>(r.integer("resend_window", 4096, 64, 65536));
  c.pending_limit = static_cast<uint32_t>(r.integer("pending_limit", 1 << 20, 16, 1 << 26));
  c.defer = r.boolean("defer", false);
  c.defer_timeout = std::chrono::milliseconds(r.integer("defer_timeout_ms", 10, 1, 1000));
  // A timeout with no word of defer is a mistake; with `defer = false` it waits for a reload that
  // turns defer on again.
  if (section.get("defer") == nullptr && section.get("defer_timeout_ms") != nullptr) {
    r.fail("defer_timeout_ms", "set without defer (defer = true, or defer = false to keep it for later)");
  }

  if (const toml::node* n = section.get("tables")) {
    const toml::array* names = n->as_array();
    if (names == nullptr) r.fail("tables", "expected an array of table names, e.g. [\"bruteforce\"]");
    for (const toml::node& name : *names) {
      const std::optional<std::string> text = name.value<std::string>();
      if (!name.is_string() || !text) r.fail("tables", "expected table names (strings)");
      // A table name as the rules write it, without its brackets (pf's PF_TABLE_NAME_SIZE).
      const auto letter = [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)) || ch == '_'; };
      const bool word =
          !text->empty() && letter(text->front()) &&
          std::all_of(text->begin(), text->end(), [&letter](char ch) {
            return letter(ch) || std::isdigit(static_cast<unsigned char>(ch)) || ch == '-' || ch == '.';
          });
      if (!word || text->size() > 31) {
        r.fail("tables",
               "\"" + *text +
                   "\" is not a table name (up to 31 letters, digits, _ - or ., a letter or _ first; "
                   "no <>)");
      }
      if (std::find(c.tables.begin(), c.tables.end(), *text) != c.tables.end())
        r.fail("tables", "\"" + *text + "\" is listed twice");
      c.tables.push_back(*text);
    }
  }

  const auto beside_config = [&file](const std::string& path) {
    std::filesystem::path resolved(path);
    if (resolved.is_relative()) resolved = std::filesystem::path(file).parent_path() / resolved;
    return resolved.string();
  };
  c.key_file = beside_config(r.string("key_file", true));
  c.key = load_key_file(c.key_file, file + ": [sync] key_file");
  c.accept_key_file = r.string("accept_key_file", false);
  if (!c.accept_key_file.empty()) {
    c.accept_key_file = beside_config(c.accept_key_file);
    c.accept_key = load_key_file(c.accept_key_file, file + ": [sync] accept_key_file");
    if (c.accept_key == c.key) r.fail("accept_key_file", "holds the key of key_file: name the other key");
  }
  return c;
}

}  // namespace pairwall::sync
