// Incremental Internet checksum update (RFC 1624 eqn. 3): rewriting a 16-bit word costs O(1)
// instead of a pass over the packet.
#pragma once

#include <cstddef>
#include <cstdint>

#include "daemon/engine/address.h"

namespace pairwall::engine {

inline uint16_t load_be16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}
inline uint32_t load_be32(const uint8_t* p) {
  return uint32_t{load_be16(p)} << 16 | load_be16(p + 2);
}
inline void store_be16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void store_be32(uint8_t* p, uint32_t v) {
  store_be16(p, static_cast<uint16_t>(v >> 16));
  store_be16(p + 2, static_cast<uint16_t>(v));
}

// HC' = ~(~HC + ~m + m')
inline void checksum_replace16(uint8_t* checksum, uint16_t old_word, uint16_t new_word) {
  uint32_t sum = static_cast<uint16_t>(~load_be16(checksum));
  sum += static_cast<uint16_t>(~old_word);
  sum += new_word;
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  store_be16(checksum, static_cast<uint16_t>(~sum));
}

// A 16-bit value at an odd offset from the start of what a checksum covers straddles two of its
// words and counts with its bytes swapped (RFC 1071 2(B)): TCP options have no alignment, so an
// MSS value or a SACK edge may sit there. The form to hand checksum_replace16() for such a value.
inline uint16_t as_summed(uint16_t value, bool odd_offset) {
  return odd_offset ? static_cast<uint16_t>(value << 8 | value >> 8) : value;
}

// One's complement sum of 16-bit big-endian words (RFC 1071), not yet folded or inverted.
inline uint32_t checksum_sum(const uint8_t* p, std::size_t n, uint32_t sum = 0) {
  for (; n > 1; p += 2, n -= 2) sum += static_cast<uint32_t>(p[0] << 8 | p[1]);
  if (n == 1) sum += static_cast<uint32_t>(p[0] << 8);
  return sum;
}

// The checksum field's value for a sum: folded and inverted.
inline uint16_t checksum_fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// The pseudo-header of RFC 9293 3.1 / RFC 8200 8.1 for the upper-layer checksum, from the
// addresses of the IP header at `ip`; for IPv6, with the destination at `ip + final_destination`
// where that is not 0 (a routing header's end, PacketView::final_destination_offset).
inline uint32_t pseudo_header_sum(Family family, const uint8_t* ip, uint8_t proto, std::size_t upper_length,
                                  std::size_t final_destination = 0) {
  if (family == Family::V4) return checksum_sum(ip + 12, 8) + proto + static_cast<uint32_t>(upper_length);
  return checksum_sum(ip + 8, 16) + checksum_sum(ip + (final_destination != 0 ? final_destination : 24), 16) +
         static_cast<uint32_t>(upper_length >> 16) + static_cast<uint32_t>(upper_length & 0xffff) + proto;
}

}  // namespace pairwall::engine
