// SipHash-1-3 (Aumasson & Bernstein; the variant Rust's HashMap uses) over whole 64-bit words.
// Keyed with a per-boot secret so that nobody outside can predict bucket positions: the answer to
// the hash-collision attack that led pf to choose a tree (Hartmeier 2002, section 4).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace pairwall::engine {

struct SipKey {
  uint64_t k0 = 0;
  uint64_t k1 = 0;
};

namespace sip {

struct State {
  uint64_t v0, v1, v2, v3;

  void round() noexcept {
    v0 += v1;
    v1 = std::rotl(v1, 13);
    v1 ^= v0;
    v0 = std::rotl(v0, 32);
    v2 += v3;
    v3 = std::rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = std::rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = std::rotl(v1, 17);
    v1 ^= v2;
    v2 = std::rotl(v2, 32);
  }
  void compress(uint64_t m) noexcept {
    v3 ^= m;
    round();
    v0 ^= m;
  }
};

}  // namespace sip

// Inline: every packet is hashed, and with the word count known at the call the loop unrolls
// (pairwall-bench engine --only state --seconds 0.5 --runs 3, three alternating invocations:
// state_lookup_mpps at 1k states 6.99-7.01 -> 7.09-7.14).
inline uint64_t siphash13(const SipKey& key, const uint64_t* words, std::size_t count) noexcept {
  sip::State s{key.k0 ^ 0x736f6d6570736575ULL, key.k1 ^ 0x646f72616e646f6dULL, key.k0 ^ 0x6c7967656e657261ULL,
               key.k1 ^ 0x7465646279746573ULL};
  for (std::size_t i = 0; i < count; ++i) s.compress(words[i]);
  // Final block: the message length in bytes in the top byte, as the reference does.
  s.compress(static_cast<uint64_t>(count * 8) << 56);
  s.v2 ^= 0xff;
  s.round();
  s.round();
  s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

// A secret from the kernel's random source (getrandom).
SipKey random_sip_key();

}  // namespace pairwall::engine
