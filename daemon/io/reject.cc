#include "daemon/io/reject.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "daemon/engine/checksum.h"
#include "daemon/engine/packet.h"

namespace pairwall::io {
namespace {

using engine::checksum_fold;
using engine::checksum_sum;
using engine::Family;
using engine::IpAddress;
using engine::PacketView;
using engine::rules::BlockReply;

constexpr std::size_t kIpv4Header = 20;
constexpr std::size_t kIpv6Header = 40;
constexpr std::size_t kIcmpHeader = 8;
constexpr std::size_t kIpv4ErrorLimit = 576;  // RFC 1812 4.3.2.3
constexpr uint8_t kIpv4DestUnreachable = 3;   // RFC 792
constexpr uint8_t kIpv4CodePort = 3;
constexpr uint8_t kIpv4CodeAdminProhibited = 13;  // RFC 1812 5.2.7.1
constexpr uint8_t kIpv6DestUnreachable = 1;       // RFC 4443 3.1
constexpr uint8_t kIpv6CodeAdminProhibited = 1;
constexpr uint8_t kIpv6CodePort = 4;

bool v4_not_unicast(uint32_t a) {
  // This network, multicast, class E and broadcast. Loopback is answered: the kernel drops 127/8
  // arriving from outside as martian, so a loopback packet here is the host's own (hook OUTPUT).
  const uint32_t first = a >> 24;
  return first == 0 || first >= 224;
}

bool v6_not_unicast(const IpAddress& a) {
  const bool unspecified = a.hi == 0 && a.lo == 0;
  const bool multicast = (a.hi >> 56) == 0xff;
  return unspecified || multicast;
}

bool v6_multicast(const IpAddress& a) {
  return (a.hi >> 56) == 0xff;
}

bool is_icmp_error(const PacketView& p, std::span<const uint8_t> bytes) {
  if (!p.is_icmp()) return false;
  if (p.icmp.is_error) return true;
  // Redirects and source quench are error messages too (RFC 1812 4.3.2.7); ICMPv6 types below
  // 128 are errors and redirect is 137 (RFC 4443 2.1, 2.4(e)).
  if (p.l4_offset >= bytes.size()) return true;
  const uint8_t type = bytes[p.l4_offset];
  if (p.family == Family::V4) return type == 3 || type == 4 || type == 5 || type == 11 || type == 12;
  return type < 128 || type == 137;
}

bool tcp_checksum_ok(const PacketView& p, std::span<const uint8_t> bytes) {
  if (static_cast<std::size_t>(p.l4_offset) + p.l4_length > bytes.size()) return false;
  // The pseudo-header from the fixed header's addresses. With an IPv6 routing header that has
  // segments left, the sender summed its final destination instead (RFC 8200 8.1): such a segment
  // fails here and gets no reset, which errs the safe way.
  uint8_t addresses[32];
  std::size_t size = 8;
  if (p.family == Family::V4) {
    p.src.to_v4_bytes(addresses);
    p.dst.to_v4_bytes(addresses + 4);
  } else {
    p.src.to_v6_bytes(addresses);
    p.dst.to_v6_bytes(addresses + 16);
    size = 32;
  }
  uint32_t sum = checksum_sum(addresses, size) + engine::ipproto::kTcp + p.l4_length;
  sum = checksum_sum(bytes.data() + p.l4_offset, p.l4_length, sum);
  return checksum_fold(sum) == 0;
}

BuiltReply build_rst(const PacketView& p, uint8_t ttl, std::span<uint8_t> out) {
  engine::SegmentSpec rst;
  rst.family = p.family;
  rst.src = p.dst;
  rst.dst = p.src;
  rst.src_port = p.dst_port;
  rst.dst_port = p.src_port;
  rst.ttl = ttl;
  if (p.tcp.flags & engine::tcpflag::kAck) {
    rst.seq = p.tcp.ack;
    rst.flags = engine::tcpflag::kRst;
  } else {
    uint32_t seg_len = p.payload_length;
    if (p.tcp.flags & engine::tcpflag::kSyn) ++seg_len;
    if (p.tcp.flags & engine::tcpflag::kFin) ++seg_len;
    rst.ack = p.tcp.seq + seg_len;
    rst.flags = engine::tcpflag::kRst | engine::tcpflag::kAck;
  }
  return {RejectStatus::Built, ReplyKind::TcpRst, p.family, p.src, engine::write_segment(rst, out.data())};
}

BuiltReply build_icmp(const PacketView& p, std::span<const uint8_t> bytes, RejectIcmp kind, int16_t code,
                      uint8_t ttl, std::span<uint8_t> out) {
  BuiltReply r{RejectStatus::Built, ReplyKind::Icmp, p.family, p.src, 0};
  const bool v4 = p.family == Family::V4;
  const std::size_t limit = v4 ? kIpv4ErrorLimit : kMaxReplySize;
  const std::size_t ip_len = v4 ? kIpv4Header : kIpv6Header;
  const std::size_t quote = std::min(bytes.size(), limit - ip_len - kIcmpHeader);
  const std::size_t icmp_len = kIcmpHeader + quote;
  uint8_t* ip = out.data();
  // Without DF, as the kernel sends its own ICMP errors: up to 576 bytes, an unreachable must get
  // through a link of a smaller MTU, where DF would have it dropped and answered with yet another.
  engine::write_ip_header(p.family, p.dst, p.src, v4 ? engine::ipproto::kIcmp : engine::ipproto::kIcmp6, ttl,
                          icmp_len, ip, /*dont_fragment=*/false);
  uint8_t* icmp = ip + ip_len;
  std::memset(icmp, 0, kIcmpHeader);
  if (v4) {
    icmp[0] = kIpv4DestUnreachable;
    icmp[1] = kind == RejectIcmp::PortUnreachable ? kIpv4CodePort : kIpv4CodeAdminProhibited;
  } else {
    icmp[0] = kIpv6DestUnreachable;
    icmp[1] = kind == RejectIcmp::PortUnreachable ? kIpv6CodePort : kIpv6CodeAdminProhibited;
  }
  if (code >= 0) icmp[1] = static_cast<uint8_t>(code);
  std::memcpy(icmp + kIcmpHeader, bytes.data(), quote);
  // ICMPv4 sums the message alone (RFC 792); ICMPv6 adds the pseudo-header (RFC 4443 2.3).
  const uint32_t sum = v4 ? 0 : engine::pseudo_header_sum(p.family, ip, engine::ipproto::kIcmp6, icmp_len);
  engine::store_be16(icmp + 2, checksum_fold(checksum_sum(icmp, icmp_len, sum)));
  r.size = ip_len + icmp_len;
  return r;
}

}  // namespace

bool reply_address_v6(const IpAddress& destination, uint32_t ifindex, sockaddr_in6& out) noexcept {
  const bool link_local = (destination.hi >> 54) == (0xfe80 >> 6);
  if (link_local && ifindex == 0) return false;
  out = sockaddr_in6{};
  out.sin6_family = AF_INET6;
  destination.to_v6_bytes(out.sin6_addr.s6_addr);
  if (link_local) out.sin6_scope_id = ifindex;
  return true;
}

BuiltReply build_reject(std::span<const uint8_t> offending, BlockReply reply, RejectIcmp icmp, int16_t code,
                        uint8_t ttl, bool checksum_partial, std::span<uint8_t> out) noexcept {
  BuiltReply none;
  if (out.size() < kMaxReplySize) return none;
  PacketView p;
  if (engine::parse_packet(offending, p) != engine::Reason::Match) return none;
  // Quote the IP packet itself, not bytes past its length.
  const std::size_t ip_size = static_cast<std::size_t>(p.l4_offset) + p.l4_length;
  if (ip_size > 0 && ip_size < offending.size()) offending = offending.first(ip_size);
  none.status = RejectStatus::NotEligible;
  if (reply == BlockReply::Drop) return none;
  if (p.is_fragment && !p.is_first_fragment) return none;  // no transport header to answer
  if (p.family == Family::V4) {
    if (v4_not_unicast(p.src.v4_value()) || v4_not_unicast(p.dst.v4_value())) return none;
  } else if (v6_not_unicast(p.src) || v6_multicast(p.dst)) {
    return none;
  }
  if (reply == BlockReply::ReturnRst) {
    if (!p.is_tcp() || (p.tcp.flags & engine::tcpflag::kRst)) return none;
    if (!checksum_partial && !tcp_checksum_ok(p, offending)) return none;
    return build_rst(p, ttl, out);
  }
  if (is_icmp_error(p, offending)) return none;
  return build_icmp(p, offending, icmp, code, ttl, out);
}

Rejector::Rejector(RejectConfig config) : config_(config), bucket_(config.rate_per_second, config.burst) {
  auto open_raw = [&](int domain, const char* what) {
    const int fd = socket(domain, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, IPPROTO_RAW);
    if (fd < 0) {
      throw std::runtime_error(std::string("cannot open a raw ") + what +
                               " socket for TCP resets and ICMP unreachables: " + std::strerror(errno) +
                               " (needs CAP_NET_RAW)");
    }
    if (config_.mark != 0 && setsockopt(fd, SOL_SOCKET, SO_MARK, &config_.mark, sizeof(config_.mark)) != 0) {
      const int err = errno;
      close(fd);
      throw std::runtime_error(std::string("cannot set the mark on the raw ") + what +
                               " socket: " + std::strerror(err) + " (needs CAP_NET_ADMIN)");
    }
    return fd;
  };
  fd4_ = open_raw(AF_INET, "IPv4");
  try {
    fd6_ = open_raw(AF_INET6, "IPv6");
  } catch (...) {
    close(fd4_);
    throw;
  }
}

Rejector::~Rejector() {
  close(fd4_);
  close(fd6_);
}

RejectStatus Rejector::reject(std::span<const uint8_t> offending, BlockReply reply, int16_t code, uint8_t ttl,
                              bool checksum_partial, uint32_t ifindex, engine::Millis now) noexcept {
  const BuiltReply built = build_reject(offending, reply, config_.icmp, code, ttl != 0 ? ttl : config_.ttl,
                                        checksum_partial, buffer_);
  if (built.status == RejectStatus::Malformed) {
    counters_.malformed.add();
    return built.status;
  }
  if (built.status != RejectStatus::Built) {
    counters_.not_eligible.add();
    return built.status;
  }
  if (!bucket_.take(now)) {
    counters_.rate_limited.add();
    return RejectStatus::RateLimited;
  }
  if (!send_datagram(built.family, built.destination, ifindex, {buffer_, built.size}))
    return RejectStatus::SendFailed;
  (built.kind == ReplyKind::TcpRst ? counters_.rst_sent : counters_.icmp_sent).add();
  return RejectStatus::Sent;
}

RejectStatus Rejector::send(const engine::GeneratedPacket& packet, uint32_t ifindex) noexcept {
  if (!send_datagram(packet.family, packet.destination, ifindex, packet.datagram()))
    return RejectStatus::SendFailed;
  counters_.synproxy_sent.add();
  return RejectStatus::Sent;
}

bool Rejector::send_datagram(Family family, const IpAddress& destination, uint32_t ifindex,
                             std::span<const uint8_t> datagram) noexcept {
  ssize_t sent;
  if (family == Family::V4) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    destination.to_v4_bytes(reinterpret_cast<uint8_t*>(&to.sin_addr));
    sent = sendto(fd4_, datagram.data(), datagram.size(), MSG_DONTWAIT,
                  reinterpret_cast<const sockaddr*>(&to), sizeof(to));
  } else {
    sockaddr_in6 to;
    if (!reply_address_v6(destination, ifindex, to)) {
      counters_.unscoped.add();
      return false;
    }
    sent = sendto(fd6_, datagram.data(), datagram.size(), MSG_DONTWAIT,
                  reinterpret_cast<const sockaddr*>(&to), sizeof(to));
  }
  if (sent != static_cast<ssize_t>(datagram.size())) {
    counters_.send_errors.add();
    return false;
  }
  return true;
}

}  // namespace pairwall::io
