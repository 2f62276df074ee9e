// The sync datagram's outer frame: fixed binary header, protobuf payload, truncated HMAC tag.
// proto/sync.proto has the frame diagram and the meaning of every field; this file only encodes
// and checks it. Nothing here looks at the payload: the tag is verified before any protobuf is
// parsed.
#pragma once

#include <openssl/types.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "daemon/sync/counters.h"

namespace pairwall::sync {

inline constexpr uint16_t kMagic = 0x5057;  // "PW"
inline constexpr uint8_t kVersion = 2;      // 2: new epochs prove themselves (Keepalive.challenge)
inline constexpr std::size_t kHeaderSize = 68;
inline constexpr std::size_t kTagSize = 16;  // HMAC-SHA-256-128, RFC 4868 section 2.6
inline constexpr std::size_t kOverhead = kHeaderSize + kTagSize;
inline constexpr std::size_t kMaxPayload = 65507 - kOverhead;  // largest UDP payload, IPv4

// RFC 5082 (GTSM), as pfsync's PFSYNC_DFLTTL: datagrams leave with TTL / hop limit 255. Every
// router on the way takes one off, so one that arrives with 255 was sent on the sync link itself.
inline constexpr int kLinkTtl = 255;

// Whether a datagram that arrived with `ttl` (the IPv4 TTL or IPv6 hop limit; -1 when the kernel
// did not report it) may go on to the frame checks: with `ttl_security`, only at kLinkTtl. It costs
// a comparison, so that datagrams from beyond the link are turned away before a tag is computed.
constexpr bool ttl_accepted(bool ttl_security, int ttl) noexcept {
  return !ttl_security || ttl == kLinkTtl;
}

namespace frameflag {
inline constexpr uint8_t kSequenced = 0x01;  // reliable payload with a data sequence
inline constexpr uint8_t kAck = 0x02;        // ack epoch / cumulative ack / bitmap valid
inline constexpr uint8_t kAckNow = 0x04;     // the sender waits for this datagram's ack: no delay
}  // namespace frameflag

struct Header {
  uint8_t version = kVersion;
  uint8_t flags = 0;
  uint32_t node_id = 0;
  uint64_t epoch = 0;
  uint64_t xmit = 0;       // transmission counter, anti-replay
  uint64_t seq = 0;        // data sequence, 0 when not kSequenced
  uint64_t send_base = 0;  // oldest sequence the sender can still resend
  uint64_t ack_epoch = 0;
  uint64_t cum_ack = 0;
  uint64_t sack = 0;  // bit i: sequence cum_ack + 2 + i received
  uint16_t payload_len = 0;
};

// HMAC-SHA256 with the keys set at construction. Not thread-safe: one per thread.
class Authenticator {
 public:
  // `key` signs and verifies. `also_accept`, when not empty, verifies too: the key the pair is
  // changing to or from, so that its two nodes need not change keys at the same moment. Throws
  // std::runtime_error when OpenSSL cannot set up HMAC-SHA256 (a broken installation).
  explicit Authenticator(std::span<const uint8_t> key, std::span<const uint8_t> also_accept = {});
  ~Authenticator();
  Authenticator(const Authenticator&) = delete;
  Authenticator& operator=(const Authenticator&) = delete;

  // Writes the first kTagSize bytes of HMAC-SHA256(key, data). False only if OpenSSL fails.
  bool tag(std::span<const uint8_t> data, uint8_t* out) noexcept;
  // Constant-time comparison against the tag of `data` under `key`, then under `also_accept`.
  bool verify(std::span<const uint8_t> data, const uint8_t* tag) noexcept;
  // The last verify() that succeeded did so under `also_accept`: the peer signs with it.
  bool last_verified_by_also_accept() const noexcept { return by_also_accept_; }

 private:
  static bool tag_with(EVP_MAC_CTX* ctx, std::span<const uint8_t> data, uint8_t* out) noexcept;

  EVP_MAC* mac_ = nullptr;
  EVP_MAC_CTX* ctx_ = nullptr;
  EVP_MAC_CTX* also_accept_ctx_ = nullptr;
  bool by_also_accept_ = false;
};

// Writes header, payload and tag to `out`. Returns the datagram size, or 0 when `out` is too small,
// the payload too large, or the tag could not be computed. Sets header.payload_len itself.
std::size_t seal(const Header& header, std::span<const uint8_t> payload, Authenticator& auth,
                 std::span<uint8_t> out) noexcept;

// Checks magic, version, length and tag, in that order. On success fills `header` and `payload`
// (a view into `datagram`) and returns true; otherwise sets `why` and returns false.
bool open(std::span<const uint8_t> datagram, Authenticator& auth, Header& header,
          std::span<const uint8_t>& payload, DropReason& why) noexcept;

// The header fields only, no checks beyond the size; for tests and diagnostics.
void write_header(const Header& header, uint8_t* out) noexcept;
Header read_header(const uint8_t* in) noexcept;

}  // namespace pairwall::sync
