// Bounds-checked parsing of one IP packet (starting at the IP header, as NFQUEUE delivers it)
// into a flat descriptor that the rest of the engine reads. Parsing never copies the packet and
// never reads outside [data, data + size).
#pragma once

#include <cstdint>
#include <span>

#include "daemon/engine/address.h"
#include "daemon/engine/reason.h"

namespace pairwall::engine {

namespace ipproto {
inline constexpr uint8_t kIcmp = 1;
inline constexpr uint8_t kIgmp = 2;
inline constexpr uint8_t kTcp = 6;
inline constexpr uint8_t kUdp = 17;
inline constexpr uint8_t kAh = 51;
inline constexpr uint8_t kIcmp6 = 58;
}  // namespace ipproto

namespace tcpflag {
inline constexpr uint8_t kFin = 0x01;
inline constexpr uint8_t kSyn = 0x02;
inline constexpr uint8_t kRst = 0x04;
inline constexpr uint8_t kPsh = 0x08;
inline constexpr uint8_t kAck = 0x10;
inline constexpr uint8_t kUrg = 0x20;
inline constexpr uint8_t kEce = 0x40;
inline constexpr uint8_t kCwr = 0x80;
}  // namespace tcpflag

struct TcpInfo {
  uint32_t seq = 0;
  uint32_t ack = 0;
  uint16_t window = 0;  // unscaled, as on the wire
  uint8_t flags = 0;
  uint8_t header_length = 0;  // bytes
  // Options (RFC 9293 3.2, RFC 7323, RFC 2018). Only meaningful where the option was present.
  uint16_t mss = 0;
  uint8_t window_scale = 0;
  bool has_mss = false;
  bool has_window_scale = false;
  bool sack_permitted = false;
  bool has_timestamps = false;
  uint32_t ts_value = 0;
  uint32_t ts_echo = 0;
  uint16_t mss_offset = 0;           // offset of the (last) MSS value from the packet start
  uint16_t ts_offset = 0;            // offset of the (last) timestamp option's value from the packet start
  bool timestamps_repeated = false;  // more than one timestamp option: no stack sends that
};

struct IcmpInfo {
  uint8_t type = 0;
  uint8_t code = 0;
  uint16_t id = 0;        // echo / query identifier
  bool is_error = false;  // destination unreachable, time exceeded, parameter problem, packet too big
  bool is_query = false;  // carries an identifier: echo, timestamp, information and mask requests and replies
  bool is_reply = false;  // answers a request: matches the request's state in reverse
  bool keeps_no_state = false;  // a neighbor advertisement: passed, but no state is made for it
  uint16_t quoted_offset = 0;   // start of the quoted packet inside an error, from the packet start
};

struct PacketView {
  const uint8_t* data = nullptr;
  uint32_t size = 0;

  Family family = Family::V4;
  uint8_t proto = 0;  // upper-layer protocol after IPv6 extension headers
  IpAddress src;
  IpAddress dst;
  // Host order. ICMP messages other than errors are keyed by them too, as pf keys them: a request
  // by (identifier, type), its reply by (the request's type, identifier) (packet.cc, IcmpKeying).
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint8_t ttl = 0;  // hop limit for IPv6
  uint8_t tos = 0;  // the DSCP: IPv4's TOS or IPv6's traffic class, ECN bits cleared (pf's `tos`)

  uint16_t l3_header_length = 0;  // IPv4 header with options and any AH, or IPv6 header plus extensions
  uint16_t l4_offset = 0;
  uint16_t l4_length = 0;  // bytes from l4_offset to the end of the IP payload
  uint16_t payload_offset = 0;
  uint16_t payload_length = 0;

  // pf's badopts: IPv4 options, IPv6 hop-by-hop or destination options other than padding, or a
  // routing header. Only a rule with `allow-opts` (and its state) passes such a packet. The router
  // alert that IGMP and MLD carry (RFC 2236, RFC 2710) does not count for them.
  bool has_ip_options = false;
  bool router_alert = false;       // a router alert option was among them
  bool is_fragment = false;        // any fragment (MF set or offset != 0)
  bool is_first_fragment = false;  // offset 0; carries the L4 header
  bool dont_fragment = false;
  // A routing header with segments left (RFC 8200 4.4): the destination field holds the route's
  // next stop, and the upper layer's pseudo-header its end (8.1), which no translation changes.
  bool route_pending = false;
  // Where that end lies in the packet, for the routing types that carry it whole (2, RFC 6275 6.4;
  // 4, RFC 8754 2); 0 for the others.
  uint16_t final_destination_offset = 0;
  uint32_t fragment_id = 0;
  uint16_t fragment_offset = 0;  // bytes

  TcpInfo tcp;
  IcmpInfo icmp;

  bool is_tcp() const { return proto == ipproto::kTcp; }
  bool is_udp() const { return proto == ipproto::kUdp; }
  bool is_icmp() const { return proto == ipproto::kIcmp || proto == ipproto::kIcmp6; }
};

// Parses `bytes` into `out`. Returns Reason::Match on success, otherwise the drop reason
// (Short, BadIpHeader, ...). A non-first fragment parses successfully with ports zero and
// is_fragment set; the policy for fragments belongs to normalization, not to the parser.
Reason parse_packet(std::span<const uint8_t> bytes, PacketView& out) noexcept;

// An MLD query, report or done (RFC 2710 3, RFC 3810 5) sent other than from a link-local address
// with hop limit 1, as every one is: it is not of this link, and its router alert is no excuse.
// pf_walk_header6 drops it whatever the rules allow.
bool mld_off_link(const PacketView& p) noexcept;

// Parses the packet quoted inside an ICMP/ICMPv6 error. The quote is usually truncated, so only
// the IP header and the first 8 bytes of the transport header are required (RFC 792, RFC 4443
// 2.4(c)); the TCP sequence number is available, options and payload are not.
Reason parse_quoted_packet(std::span<const uint8_t> bytes, PacketView& out) noexcept;

}  // namespace pairwall::engine
