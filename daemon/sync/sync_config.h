// The [sync] section of pairwall.toml:
//
//   [sync]
//   interface = "sync0"        # the dedicated sync link; the socket is bound to it
//   address = "10.10.9.1"      # local address to bind (optional; default: any of the family)
//   peer = "10.10.9.2"         # unicast peer ... or:
//   group = "224.0.0.240"      # multicast group (IPv4 or IPv6), exactly one of the two; with
//                              # ttl_security a link-local one (224.0.0.0/24, ff02::/16)
//   port = 8370
//   key_file = "/etc/pairwall/sync.key"   # >= 32 bytes raw or 64+ hex digits, mode 0600
//   accept_key_file = "/etc/pairwall/sync.key.new"  # optional: a second key datagrams may be
//                              # signed with (never used to sign), for changing the key: SIGHUP
//                              # re-reads both files (README "Changing the keys")
//   flush_interval_ms = 10     # longest a change waits to fill a datagram
//   mtu = 1500                 # of the sync link: datagrams are filled up to it
//   bulk_timeout_min_s = 5     # shortest wait for a bulk; grows with the announced count
//   peer_node_id = 2           # optional: accept only this node id (default: the first heard)
//   resend_window = 4096       # datagrams kept for resending; an outage longer than this many
//                              # datagrams is covered by a resync instead. Alike on both nodes:
//                              # one over twice the peer's costs resends past the peer's window
//   pending_limit = 1048576    # local changes that may wait for an unreachable peer (one per
//                              # state); past it they are dropped and the peer gets a full resync
//   defer = false              # hold a new connection's first packet until the peer acks its
//                              # state (pfsync's defer), while the peer answers
//   defer_timeout_ms = 10      # the longest a packet is held
//   ttl_security = true        # send with TTL / hop limit 255 and take only what arrives with 255
//                              # (RFC 5082, pfsync's): the peer is on the link. false: the system's
//                              # default TTL and no check, for a routed path to a unicast peer
//   tables = ["bruteforce"]    # tables the pair shares: each change on either node (an overload,
//                              # pairwallctl tables, a reload's file) replaces the peer's entries,
//                              # and a node that starts takes the peer's with its bulk
#pragma once

#include <toml++/toml.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace pairwall::sync {

struct SyncConfig {
  std::string interface;
  std::string address;  // empty: any address of the peer's (or group's) family
  std::string peer;     // unicast peer, or empty
  std::string group;    // multicast group, or empty
  bool ipv6 = false;    // family of peer/group
  uint16_t port = 8370;
  std::string key_file;
  std::vector<uint8_t> key;         // loaded from key_file by parse_sync_config
  std::string accept_key_file;      // empty: none
  std::vector<uint8_t> accept_key;  // loaded from accept_key_file; empty: none
  std::chrono::milliseconds flush_interval{10};
  uint32_t mtu = 1500;
  std::chrono::seconds bulk_timeout_min{5};
  uint32_t peer_node_id = 0;
  uint32_t resend_window = 4096;
  uint32_t pending_limit = 1u << 20;
  bool defer = false;
  std::chrono::milliseconds defer_timeout{10};
  bool ttl_security = true;
  std::vector<std::string> tables;
};

// Reads and checks the [sync] section, and loads the key file (a relative path is relative to
// the config file's directory). Throws ConfigError naming the file, [sync] and the key, e.g.
// "pairwall.toml: [sync] port: expected 1..65535, got 0".
SyncConfig parse_sync_config(const toml::table& section, const std::string& file);

}  // namespace pairwall::sync
