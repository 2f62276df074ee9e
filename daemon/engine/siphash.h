// SipHash-1-3 (Aumasson & Bernstein; the variant Rust's HashMap uses) over whole 64-bit words.
// Keyed with a per-boot secret so that nobody outside can predict bucket positions: the answer to
// the hash-collision attack that led pf to choose a tree (Hartmeier 2002, section 4).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pairwall::engine {

struct SipKey {
  uint64_t k0 = 0;
  uint64_t k1 = 0;
};

uint64_t siphash13(const SipKey& key, const uint64_t* words, std::size_t count) noexcept;

// A secret from the kernel's random source (getrandom).
SipKey random_sip_key();

}  // namespace pairwall::engine
