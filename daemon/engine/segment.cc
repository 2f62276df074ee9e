#include "daemon/engine/segment.h"

#include <cstring>

#include "daemon/engine/checksum.h"
#include "daemon/engine/packet.h"

namespace pairwall::engine {
namespace {

constexpr std::size_t kIpv4Header = 20;
constexpr std::size_t kIpv6Header = 40;
constexpr std::size_t kTcpHeader = 20;
constexpr std::size_t kMssOption = 4;  // kind 2, length 4 (RFC 9293 3.2)

static_assert(kIpv6Header + kTcpHeader + kMssOption <= kMaxSegmentSize);

}  // namespace

std::size_t write_ip_header(Family family, const IpAddress& src, const IpAddress& dst, uint8_t protocol,
                            uint8_t ttl, std::size_t upper_length, uint8_t* out,
                            bool dont_fragment) noexcept {
  if (family == Family::V4) {
    std::memset(out, 0, kIpv4Header);
    out[0] = 0x45;
    store_be16(out + 2, static_cast<uint16_t>(kIpv4Header + upper_length));
    store_be16(out + 6, dont_fragment ? 0x4000 : 0);  // the id is left 0 for the kernel to fill (raw(7))
    out[8] = ttl;
    out[9] = protocol;
    src.to_v4_bytes(out + 12);
    dst.to_v4_bytes(out + 16);
    store_be16(out + 10, checksum_fold(checksum_sum(out, kIpv4Header)));
    return kIpv4Header;
  }
  std::memset(out, 0, kIpv6Header);
  out[0] = 0x60;
  store_be16(out + 4, static_cast<uint16_t>(upper_length));
  out[6] = protocol;
  out[7] = ttl;
  src.to_v6_bytes(out + 8);
  dst.to_v6_bytes(out + 24);
  return kIpv6Header;
}

std::size_t write_segment(const SegmentSpec& spec, uint8_t* out) noexcept {
  const std::size_t tcp_length = kTcpHeader + (spec.mss != 0 ? kMssOption : 0);
  const std::size_t ip_length =
      write_ip_header(spec.family, spec.src, spec.dst, ipproto::kTcp, spec.ttl, tcp_length, out);
  uint8_t* tcp = out + ip_length;
  std::memset(tcp, 0, tcp_length);
  store_be16(tcp + 0, spec.src_port);
  store_be16(tcp + 2, spec.dst_port);
  store_be32(tcp + 4, spec.seq);
  store_be32(tcp + 8, spec.ack);
  tcp[12] = static_cast<uint8_t>((tcp_length / 4) << 4);
  tcp[13] = spec.flags;
  store_be16(tcp + 14, spec.window);
  if (spec.mss != 0) {
    tcp[20] = 2;
    tcp[21] = kMssOption;
    store_be16(tcp + 22, spec.mss);
  }
  const uint32_t pseudo = pseudo_header_sum(spec.family, out, ipproto::kTcp, tcp_length);
  store_be16(tcp + 16, checksum_fold(checksum_sum(tcp, tcp_length, pseudo)));
  return ip_length + tcp_length;
}

void build_segment(const SegmentSpec& spec, GeneratedPacket& out) noexcept {
  out.size = static_cast<uint8_t>(write_segment(spec, out.bytes.data()));
  out.family = spec.family;
  out.destination = spec.dst;
}

}  // namespace pairwall::engine
