// libFuzzer target for the packet parser: any byte string must parse or return a drop reason,
// never read outside the buffer (the sanitizers watch), and a parsed packet must only describe
// ranges inside the buffer, because the engine writes through them (max-mss, NAT).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "daemon/engine/packet.h"

namespace {

using pairwall::engine::Family;
using pairwall::engine::PacketView;
using pairwall::engine::parse_packet;
using pairwall::engine::parse_quoted_packet;
using pairwall::engine::Reason;

void require(bool ok) {
  if (!ok) std::abort();
}

void check_view(const PacketView& p, std::size_t size) {
  require(p.size == size);
  require(p.l3_header_length == p.l4_offset);
  require(std::size_t{p.l4_offset} + p.l4_length <= size);
  require(p.payload_offset >= p.l4_offset);
  require(std::size_t{p.payload_offset} + p.payload_length <= size);
  if (p.family == Family::V4) require(p.src.hi == 0 && p.dst.hi == 0 && (p.src.lo >> 32) == 0);
  if (p.tcp.has_mss) require(std::size_t{p.tcp.mss_offset} + 2 <= size);
  if (p.tcp.has_window_scale) require(p.tcp.window_scale <= 14);
  if (p.is_fragment && p.fragment_offset != 0) require(p.src_port == 0 && p.dst_port == 0);
  if (p.icmp.is_query) require(p.src_port == p.icmp.id && p.dst_port == p.icmp.id);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::span<const uint8_t> bytes(data, size);

  PacketView packet;
  if (parse_packet(bytes, packet) == Reason::Match) {
    check_view(packet, size);
    if (packet.is_icmp() && packet.icmp.is_error) {
      // parse_packet accepted the error, so its quote must parse, in the same family.
      require(packet.icmp.quoted_offset <= size);
      PacketView quoted;
      require(parse_quoted_packet(bytes.subspan(packet.icmp.quoted_offset), quoted) == Reason::Match);
      require(quoted.family == packet.family);
      require(quoted.data == data + packet.icmp.quoted_offset);
    }
  }

  // The quote parser on its own: it accepts truncated packets, so it sees other paths.
  PacketView quoted;
  if (parse_quoted_packet(bytes, quoted) == Reason::Match) {
    require(std::size_t{quoted.l4_offset} + quoted.l4_length <= size);
    require(std::size_t{quoted.l4_offset} + 8 <= size || quoted.src_port == 0);
  }
  return 0;
}
