// Replies to a rejected packet (`block return-rst` / `block return-icmp`): a TCP RST or an ICMP
// destination unreachable, sent through a raw socket. The reply is spoofed from the rejected
// packet's destination, as the host it was meant for would have answered, so the sender tears
// the connection down at once instead of retrying into a silent drop.
//
// Building the reply is a pure function of the packet's bytes; sending is a sendto on a raw
// socket (IPPROTO_RAW: IPv4 with IP_HDRINCL, IPv6 with the header included since Linux 4.5).
// Replies are rate limited by a token bucket, so a flood of rejected packets cannot turn the
// firewall into a reflector. The same sockets send the segments `synproxy state` makes in a
// connection's ends' names (Rejector::send).
#pragma once

#include <netinet/in.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "daemon/engine/address.h"
#include "daemon/engine/rules/ast.h"
#include "daemon/engine/segment.h"
#include "daemon/engine/time.h"
#include "daemon/io/counter.h"

namespace pairwall::io {

// The ICMP code used by return-icmp. pf answers "port unreachable" by default.
enum class RejectIcmp : uint8_t {
  PortUnreachable,  // v4 type 3 code 3; v6 type 1 code 4
  AdminProhibited,  // v4 type 3 code 13 (RFC 1812 5.2.7.1); v6 type 1 code 1 (RFC 4443 3.1)
};

struct RejectConfig {
  RejectIcmp icmp = RejectIcmp::PortUnreachable;
  double rate_per_second = 100;  // per worker
  double burst = 20;
  uint32_t mark = 0;  // SO_MARK on the replies, so HooksConfig::bypass_mark can exempt them
  uint8_t ttl = 64;
};

enum class RejectStatus : uint8_t {
  Sent,
  Built,        // build_reject only: `out` holds the reply
  NotEligible,  // no reply allowed: an RST, an ICMP error, a later fragment, a multicast or
                // broadcast destination, an unspecified or multicast source (RFC 1122 3.2.2,
                // RFC 4443 2.4(e), RFC 9293 3.10.7.1), return-rst for a protocol other than TCP,
                // or for a segment whose checksum is wrong
  Malformed,    // the packet did not parse
  RateLimited,
  SendFailed,
};

enum class ReplyKind : uint8_t { None, TcpRst, Icmp };

struct BuiltReply {
  RejectStatus status = RejectStatus::Malformed;
  ReplyKind kind = ReplyKind::None;
  engine::Family family = engine::Family::V4;
  engine::IpAddress destination;  // where the reply goes: the rejected packet's source
  std::size_t size = 0;
};

// Every reply fits the IPv6 minimum MTU (RFC 8200 5); IPv4 ICMP errors stay within 576 bytes
// (RFC 1812 4.3.2.3).
inline constexpr std::size_t kMaxReplySize = 1280;

// Builds the reply to `offending` (an IP packet starting at its IP header) into `out`, which must
// hold kMaxReplySize bytes. ReturnRst answers TCP only (as pf); ReturnIcmp answers any protocol.
//   TCP RST (RFC 9293 3.10.7.1): if the segment has ACK, <SEQ=SEG.ACK><CTL=RST>; otherwise
//   <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>, SEG.LEN counting SYN and FIN. Not for a segment
//   whose checksum is wrong (pf's PFRES_PROTCKSUM): its ports and numbers cannot be trusted to name
//   the connection, and the receiver drops it anyway. `checksum_partial`: the kernel has yet to
//   finish the segment's checksum (NFQA_SKB_CSUMNOTREADY), or vouches for it otherwise (a GSO
//   packet, transport_checksum_vouched()), so it is not checked.
//   ICMP: the rejected packet quoted from its IP header, as much as fits; destination unreachable
//   with `code` (0..255), or where it is -1 the code `icmp` chooses.
// Checksums are complete. Pure and noexcept.
BuiltReply build_reject(std::span<const uint8_t> offending, engine::rules::BlockReply reply, RejectIcmp icmp,
                        int16_t code, uint8_t ttl, bool checksum_partial, std::span<uint8_t> out) noexcept;

// The address a reply to `destination` is sent to. A link-local destination (fe80::/10) names a
// host on one link only (RFC 4007 6), the link of interface `ifindex`: without it the kernel would
// send the reply over whichever link its routes list first. Returns false, leaving `out` unset, for a
// link-local destination when `ifindex` is 0.
bool reply_address_v6(const engine::IpAddress& destination, uint32_t ifindex, sockaddr_in6& out) noexcept;

// Tokens refill continuously at `rate` per second up to `burst`; the bucket starts full.
class TokenBucket {
 public:
  TokenBucket(double rate_per_second, double burst) : rate_(rate_per_second), burst_(burst), tokens_(burst) {}

  bool take(engine::Millis now) noexcept {
    if (started_) {
      const double elapsed_ms = static_cast<double>((now - last_).count());
      if (elapsed_ms > 0) tokens_ = std::min(burst_, tokens_ + elapsed_ms * rate_ / 1000.0);
    }
    started_ = true;
    if (now > last_) last_ = now;
    if (tokens_ < 1.0) return false;
    tokens_ -= 1.0;
    return true;
  }

 private:
  double rate_;
  double burst_;
  double tokens_;
  engine::Millis last_{0};
  bool started_ = false;
};

struct RejectCounters {
  Counter rst_sent;
  Counter icmp_sent;
  Counter synproxy_sent;  // segments `synproxy state` made (send())
  Counter rate_limited;
  Counter not_eligible;
  Counter malformed;
  Counter send_errors;
  Counter unscoped;  // a link-local destination with no interface to reach it by: not sent
};

// One per worker thread: its own sockets and bucket, nothing shared.
class Rejector {
 public:
  // Opens the raw sockets. Throws std::runtime_error when that is refused (needs CAP_NET_RAW).
  explicit Rejector(RejectConfig config = {});
  ~Rejector();
  Rejector(const Rejector&) = delete;
  Rejector& operator=(const Rejector&) = delete;

  // Builds and sends the reply to `offending`; never blocks. `code`: the unreachable's code for a
  // ReturnIcmp, -1 for RejectConfig::icmp's; `ttl`: the reply's TTL (hop limit), 0 for
  // RejectConfig::ttl; `checksum_partial` as build_reject's; `ifindex`: the interface `offending`
  // came in on (for a packet of this host, the one it was leaving by), over which a reply to a
  // link-local source goes back. Returns Sent or why not.
  RejectStatus reject(std::span<const uint8_t> offending, engine::rules::BlockReply reply, int16_t code,
                      uint8_t ttl, bool checksum_partial, uint32_t ifindex, engine::Millis now) noexcept;

  // Sends a packet the engine made (synproxy's handshake segments) through the same sockets; never
  // blocks. Not rate limited: each answers one packet of the connection it belongs to, as the
  // server it stands in for would have. `ifindex`: the interface beyond which its destination
  // lies, its scope when that is link-local. Returns Sent or SendFailed.
  RejectStatus send(const engine::GeneratedPacket& packet, uint32_t ifindex) noexcept;

  const RejectCounters& counters() const { return counters_; }

 private:
  bool send_datagram(engine::Family family, const engine::IpAddress& destination, uint32_t ifindex,
                     std::span<const uint8_t> datagram) noexcept;

  RejectConfig config_;
  TokenBucket bucket_;
  int fd4_ = -1;
  int fd6_ = -1;
  RejectCounters counters_;
  uint8_t buffer_[kMaxReplySize];
};

}  // namespace pairwall::io
