// Packets this host makes in its own name or an end's: IP headers, and TCP segments without payload
// (synproxy's handshakes, return-rst's resets). Pure and noexcept; the caller sends them from this
// host (a raw socket: the kernel routes them and fills the IPv4 id).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "daemon/engine/address.h"

namespace pairwall::engine {

// The TTL (hop limit) of the segments this node sends in an end's name.
inline constexpr uint8_t kGeneratedTtl = 64;

// A TCP segment without payload.
struct SegmentSpec {
  Family family = Family::V4;
  IpAddress src;
  IpAddress dst;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint32_t seq = 0;
  uint32_t ack = 0;
  uint8_t flags = 0;
  uint16_t window = 0;
  uint16_t mss = 0;  // 0: no MSS option
  uint8_t ttl = kGeneratedTtl;
};

// The most a segment takes: IPv6 + TCP + an MSS option.
inline constexpr std::size_t kMaxSegmentSize = 64;

// A packet the engine made for the caller to send: a whole IP datagram, checksums complete.
struct GeneratedPacket {
  std::array<uint8_t, kMaxSegmentSize> bytes{};
  uint8_t size = 0;
  Family family = Family::V4;
  IpAddress destination;

  std::span<const uint8_t> datagram() const { return {bytes.data(), size}; }
};

// Writes an IPv4 header without options (checksum complete; DF set unless `dont_fragment` is
// false) or an IPv6 header carrying `upper_length` bytes of `protocol`; returns its length.
std::size_t write_ip_header(Family family, const IpAddress& src, const IpAddress& dst, uint8_t protocol,
                            uint8_t ttl, std::size_t upper_length, uint8_t* out,
                            bool dont_fragment = true) noexcept;

// Writes the whole segment into `out` (kMaxSegmentSize bytes at least); returns its length.
std::size_t write_segment(const SegmentSpec& spec, uint8_t* out) noexcept;

void build_segment(const SegmentSpec& spec, GeneratedPacket& out) noexcept;

}  // namespace pairwall::engine
