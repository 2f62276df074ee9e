#include "daemon/engine/synproxy.h"

#include <cstring>

#include "daemon/engine/checksum.h"
#include "daemon/engine/packet.h"

namespace pairwall::engine {
namespace {

constexpr std::size_t kIpv4Header = 20;
constexpr std::size_t kIpv6Header = 40;
constexpr std::size_t kTcpHeader = 20;
constexpr std::size_t kMssOption = 4;  // kind 2, length 4 (RFC 9293 3.2)

}  // namespace

std::string_view proxy_name(Proxy proxy) {
  switch (proxy) {
    case Proxy::Initiator:
      return "awaiting initiator";
    case Proxy::Responder:
      return "awaiting responder";
    case Proxy::Spliced:
      return "spliced";
    case Proxy::None:
      break;
  }
  return "";
}

void build_segment(const SegmentSpec& spec, GeneratedPacket& out) noexcept {
  const std::size_t tcp_length = kTcpHeader + (spec.mss != 0 ? kMssOption : 0);
  uint8_t* ip = out.bytes.data();
  std::memset(ip, 0, out.bytes.size());
  std::size_t ip_length = 0;
  if (spec.family == Family::V4) {
    ip_length = kIpv4Header;
    ip[0] = 0x45;
    store_be16(ip + 2, static_cast<uint16_t>(kIpv4Header + tcp_length));
    store_be16(ip + 6, 0x4000);  // DF; the id is left 0 for the kernel to fill (raw(7))
    ip[8] = kGeneratedTtl;
    ip[9] = ipproto::kTcp;
    spec.src.to_v4_bytes(ip + 12);
    spec.dst.to_v4_bytes(ip + 16);
    store_be16(ip + 10, checksum_fold(checksum_sum(ip, kIpv4Header)));
  } else {
    ip_length = kIpv6Header;
    ip[0] = 0x60;
    store_be16(ip + 4, static_cast<uint16_t>(tcp_length));
    ip[6] = ipproto::kTcp;
    ip[7] = kGeneratedTtl;
    spec.src.to_v6_bytes(ip + 8);
    spec.dst.to_v6_bytes(ip + 24);
  }
  uint8_t* tcp = ip + ip_length;
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
  const uint32_t pseudo = pseudo_header_sum(spec.family, ip, ipproto::kTcp, tcp_length);
  store_be16(tcp + 16, checksum_fold(checksum_sum(tcp, tcp_length, pseudo)));
  out.size = static_cast<uint8_t>(ip_length + tcp_length);
  out.family = spec.family;
  out.destination = spec.dst;
}

}  // namespace pairwall::engine
