// Incremental Internet checksum update (RFC 1624 eqn. 3): rewriting a 16-bit word costs O(1)
// instead of a pass over the packet.
#pragma once

#include <cstdint>

namespace pairwall::engine {

inline uint16_t load_be16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}
inline void store_be16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
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

}  // namespace pairwall::engine
