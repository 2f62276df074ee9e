// The [failover] section of pairwall.toml.
//
//   [failover]
//   driver = "builtin"          # or "keepalived": keepalived runs VRRP, we only follow its role
//   vhid = 1                    # 1..255, the group on the wire
//   advbase_ms = 1000           # 10..255000; the master advertises every advbase + advskew/256*advbase
//   advskew = 0                 # 0..254, lower is preferred
//   preempt = false             # take the group from a master with a higher advskew than ours
//   key_file = "failover.key"   # shared secret, at least 16 bytes; relative to this file's directory
//   accept_key_file = "failover.key.new"  # optional: a second key advertisements may be signed
//                               # with (never used to sign), for changing the key: SIGHUP re-reads
//                               # both files (README "Changing the keys")
//   vips = [ { interface = "lan0", address = "10.1.0.1/24" },
//            { interface = "lan0", address = "fd00:1::1/64" },
//            { interface = "lan1", address = "10.2.0.1/24" } ]
//   # optional
//   group4 = "224.0.0.18"       # advertisement groups (RFC 5798 5.1.1.2 / 5.1.2.2)
//   group6 = "ff02::12"
//   port = 8112
//   peers = [ { interface = "lan0", address = "10.1.0.3" } ]
//                               # carp(4)'s carppeer: on that link, in that family, advertisements
//                               # go to the peer's own address instead of the group (links that
//                               # carry no multicast); both nodes name each other
//   announce_count = 5          # gratuitous ARP / unsolicited NA repeats after the first one
//   announce_interval_ms = 0    # between them; 0 = advbase / 2, at most 1000
//   vip_lease_s = 0             # kernel lifetime of a VIP, renewed while master; 0 = automatic
//                               # (max(3 s, 4 * advbase)); -1 = permanent
//   track_interfaces = ["wan0"] # links without VIPs whose carrier counts too: one without it
//                               # demotes the node (DemoteReason::TrackedLink), as keepalived's
//                               # track_interface with a weight
//   notify = "notify.sh"        # run at each role change: notify.sh MASTER|BACKUP|FAULT|STOP VHID
//                               # CAUSE (failover/role_script.h); relative to this file's directory
#pragma once

#include <toml++/toml.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/control/config_error.h"

namespace pairwall::failover {

enum class Driver : uint8_t { Builtin, Keepalived };

struct Vip {
  std::string interface;
  int family = 0;  // AF_INET or AF_INET6
  std::array<uint8_t, 16> address{};
  uint8_t prefix_len = 0;
  std::string text() const;  // "10.1.0.1/24"
  bool operator==(const Vip& o) const {
    return interface == o.interface && family == o.family && address == o.address &&
           prefix_len == o.prefix_len;
  }
};

// The other node's own address on one VIP link, in one family (carp(4)'s carppeer).
struct AdvertPeer {
  std::string interface;
  int family = 0;  // AF_INET or AF_INET6
  std::array<uint8_t, 16> address{};
  std::string text() const;  // "10.1.0.3"
  bool operator==(const AdvertPeer&) const = default;
};

// Where a node's advertisements go out: one interface, in one family, to the group or to the peer
// named for that link. A channel whose destination or port changed is another socket.
struct AdvertChannel {
  std::string interface;
  int family = 0;                         // AF_INET or AF_INET6
  std::array<uint8_t, 16> destination{};  // the group or the peer (IPv4: the first 4 bytes)
  uint16_t port = 0;
  bool unicast = false;      // to the peer: sent with TTL 255 to its address, heard from it alone
  std::string text() const;  // "lan0 (IPv4) to 224.0.0.18 port 8112"
  bool operator==(const AdvertChannel&) const = default;
};

struct FailoverConfig {
  Driver driver = Driver::Builtin;
  uint8_t vhid = 1;
  uint32_t advbase_ms = 1000;
  uint8_t advskew = 0;
  bool preempt = false;
  std::string key_file;         // resolved path
  std::string key;              // its contents, trailing newline removed
  std::string accept_key_file;  // resolved path; empty: none
  std::string accept_key;       // its contents; empty: none
  std::vector<Vip> vips;
  std::array<uint8_t, 4> group4{224, 0, 0, 18};
  std::array<uint8_t, 16> group6{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12};
  uint16_t port = 8112;
  std::vector<AdvertPeer> peers;  // at most one per VIP interface and family
  uint32_t announce_count = 5;
  uint32_t announce_interval_ms = 0;
  int64_t vip_lease_s = 0;
  std::vector<std::string> track_interfaces;
  std::string notify;  // resolved path; empty: none

  // The VIP interfaces, each once, in the order they first appear.
  std::vector<std::string> interfaces() const;
  // Those, then the tracked interfaces that hold no VIP: the links whose carrier is watched.
  std::vector<std::string> watched_interfaces() const;
  // Each VIP interface in each family it has a VIP of, in the order of interfaces(), IPv4 first:
  // to that link's peer if it has one, else to the family's group.
  std::vector<AdvertChannel> advert_channels() const;
  // Whether a datagram from `source` (IPv4: the first 4 bytes) reached `channel` from the node it
  // listens to: any source on a group's; on a peer's, the peer's own address or one of the group's
  // VIPs of the family, which a master's kernel may choose as the source.
  bool from_peer(const AdvertChannel& channel, const std::array<uint8_t, 16>& source) const;
  uint32_t effective_announce_interval_ms() const;
  // 0 = permanent.
  uint32_t effective_vip_lease_s() const;
};

inline constexpr std::size_t kMinKeyBytes = 16;
inline constexpr std::size_t kMaxKeyFileBytes = 4096;

// Validates `section` ([failover] of `file`); relative key_file paths are resolved against the
// directory of `file`. Throws ConfigError "FILE: [failover] KEY: what is wrong".
FailoverConfig parse_failover_config(const toml::table& section, const std::string& file);

}  // namespace pairwall::failover
