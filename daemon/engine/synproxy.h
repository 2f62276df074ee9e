// `synproxy state`, as pf's: this node answers a TCP client's SYN itself and opens the connection
// to the server only once the client has completed that handshake, so that a flood of SYNs from
// forged sources never reaches the server. Once the server has answered, the two handshakes are
// spliced: each end keeps the initial sequence number it chose, the node shifts each end's numbers
// into the other's by the offsets of `modulate state` (Engine::track_modulated), and the window
// scale, SACK and timestamp options the client offered are not passed on (pf does the same: its
// SYN-ACK carries an MSS option only). Each step reaches the sync peer in the state's records
// (StateRecord::proxy, proxy_isn), so that a node taking over finishes a handshake its peer began.
//
// The engine makes the segments it sends in the two ends' names here, into packets the caller
// sends from this host (GeneratedPacket). Pure and noexcept.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "daemon/engine/address.h"
#include "daemon/engine/state.h"

namespace pairwall::engine {

// For people: "awaiting initiator", "awaiting responder", "spliced"; "" for None.
std::string_view proxy_name(Proxy proxy);

// A packet the engine made for the caller to send: a whole IP datagram, checksums complete, sent
// from this host like any it originates (a raw socket: the kernel routes it).
struct GeneratedPacket {
  static constexpr std::size_t kMaxSize = 64;  // IPv6 + TCP + an MSS option
  std::array<uint8_t, kMaxSize> bytes{};
  uint8_t size = 0;
  Family family = Family::V4;
  IpAddress destination;

  std::span<const uint8_t> datagram() const { return {bytes.data(), size}; }
};

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
};

// The TTL (hop limit) of the segments this node sends in an end's name.
inline constexpr uint8_t kGeneratedTtl = 64;

void build_segment(const SegmentSpec& spec, GeneratedPacket& out) noexcept;

}  // namespace pairwall::engine
