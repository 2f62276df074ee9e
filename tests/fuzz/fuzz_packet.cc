// libFuzzer target for the packet parser: any byte string must parse or return a drop reason,
// never read outside the buffer (the sanitizers watch), and a parsed packet must only describe
// ranges inside the buffer, because the engine writes through them (max-mss, NAT). The NAT
// rewrites then run on every packet that parses: they must stay inside it, and what they make
// must parse again, with the addresses and ports they wrote; `modulate state`'s likewise.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "daemon/engine/packet.h"
#include "daemon/engine/translate.h"

namespace {

using pairwall::engine::Family;
using pairwall::engine::IpAddress;
using pairwall::engine::PacketView;
using pairwall::engine::parse_packet;
using pairwall::engine::parse_quoted_packet;
using pairwall::engine::Reason;
using pairwall::engine::StateKey;

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
  // A query's identifier is its request's first port, its reply's second (the type the other).
  if (p.icmp.is_query) require((p.icmp.is_reply ? p.dst_port : p.src_port) == p.icmp.id);
}

// A key to translate to, made of the packet's own bytes so that the fuzzer steers it too.
StateKey key_from(const uint8_t* data, std::size_t size, const PacketView& p) {
  uint8_t mix[36] = {};
  std::memcpy(mix, data + size - std::min<std::size_t>(size, sizeof(mix)),
              std::min<std::size_t>(size, sizeof(mix)));
  StateKey k;
  k.family = p.family;
  k.proto = p.proto;
  for (int side = 0; side < 2; ++side) {
    uint64_t hi = 0;
    uint64_t lo = 0;
    std::memcpy(&hi, mix + side * 16, 8);
    std::memcpy(&lo, mix + side * 16 + 8, 8);
    k.addr[side] = p.family == Family::V4 ? IpAddress::v4(static_cast<uint32_t>(lo)) : IpAddress{hi, lo};
  }
  k.port[0] = static_cast<uint16_t>(mix[32] << 8 | mix[33]);
  k.port[1] = static_cast<uint16_t>(mix[34] << 8 | mix[35]);
  // No translation makes a segment or datagram to or from port 0, which the parser refuses.
  for (uint16_t& port : k.port) {
    if ((p.is_udp() || p.is_tcp()) && port == 0) port = 1;
  }
  // Translation changes a query's identifier, never the type its key holds beside it.
  if (p.icmp.is_query) k.port[p.icmp.is_reply ? 0 : 1] = p.icmp.is_reply ? p.src_port : p.dst_port;
  return k;
}

void check_rewrite(const uint8_t* data, std::size_t size, const PacketView& packet) {
  std::vector<uint8_t> copy(data, data + size);
  const StateKey to = key_from(data, size, packet);
  PacketView again;
  if (packet.is_icmp() && packet.icmp.is_error) {
    PacketView quoted;
    require(parse_quoted_packet(std::span<const uint8_t>(copy).subspan(packet.icmp.quoted_offset), quoted) ==
            Reason::Match);
    pairwall::engine::rewrite_icmp_error(copy, packet, quoted, to);
    require(parse_packet(copy, again) == Reason::Match);
    require(again.dst == to.addr[0]);
    // Where the quote's destination changed, the error comes from its new address.
    require(quoted.dst == to.addr[1] ? again.src == packet.src : again.src == to.addr[1]);
    return;
  }
  if (packet.is_fragment) return;  // the engine drops fragments before any translation
  pairwall::engine::rewrite_packet(copy, packet, to);
  if ((size & 1) != 0) pairwall::engine::complete_transport_checksum(copy, packet);
  require(parse_packet(copy, again) == Reason::Match);
  require(again.src == to.addr[0] && again.dst == to.addr[1]);
  if (packet.is_tcp() || packet.is_udp() || packet.icmp.is_query) {
    require(again.src_port == to.port[0] && again.dst_port == to.port[1]);
  }
}

// `modulate state`'s rewrites, by offsets the fuzzer steers: a segment's numbers (and SACK blocks,
// read from its options) shifted, or an ICMP error's quoted sequence number; they must stay inside
// the packet, which must parse again with the numbers they wrote.
void check_modulation(const uint8_t* data, std::size_t size, const PacketView& packet) {
  uint32_t seq_add = 0;
  uint32_t ack_sub = 0;
  std::memcpy(&seq_add, data, std::min<std::size_t>(size, 4));
  if (size > 4) std::memcpy(&ack_sub, data + 4, std::min<std::size_t>(size - 4, 4));
  std::vector<uint8_t> copy(data, data + size);
  PacketView again;
  if (packet.is_icmp() && packet.icmp.is_error) {
    PacketView quoted;
    require(parse_quoted_packet(std::span<const uint8_t>(copy).subspan(packet.icmp.quoted_offset), quoted) ==
            Reason::Match);
    if (!quoted.is_tcp()) return;
    pairwall::engine::demodulate_icmp_quote(copy, packet, quoted, seq_add);
    require(parse_packet(copy, again) == Reason::Match);
    PacketView quoted_again;
    require(parse_quoted_packet(std::span<const uint8_t>(copy).subspan(again.icmp.quoted_offset),
                                quoted_again) == Reason::Match);
    const bool holds_seq = (!quoted.is_fragment || quoted.is_first_fragment) &&
                           std::size_t{quoted.l4_offset} + 8 <= size - packet.icmp.quoted_offset;
    require(quoted_again.tcp.seq == (holds_seq ? quoted.tcp.seq - seq_add : quoted.tcp.seq));
    return;
  }
  if (!packet.is_tcp() || packet.is_fragment) return;  // the engine drops fragments first
  require(std::size_t{packet.l4_offset} + packet.tcp.header_length <= size);
  pairwall::engine::modulate_segment(copy, packet, seq_add, ack_sub);
  require(parse_packet(copy, again) == Reason::Match);
  require(again.tcp.seq == packet.tcp.seq + seq_add);
  const bool acks = (packet.tcp.flags & pairwall::engine::tcpflag::kAck) != 0;
  require(again.tcp.ack == (acks ? packet.tcp.ack - ack_sub : packet.tcp.ack));
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
    check_rewrite(data, size, packet);
    check_modulation(data, size, packet);
  }

  // The quote parser on its own: it accepts truncated packets, so it sees other paths.
  PacketView quoted;
  if (parse_quoted_packet(bytes, quoted) == Reason::Match) {
    require(std::size_t{quoted.l4_offset} + quoted.l4_length <= size);
    require(std::size_t{quoted.l4_offset} + 8 <= size || quoted.src_port == 0);
  }
  return 0;
}
