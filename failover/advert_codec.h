// Encoding and checking of failover advertisements (format: proto/failover.proto). Runs once per
// received datagram: noexcept, every rejection returns a reason and is counted.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "failover/election.h"
#include "proto/failover.pb.h"

namespace pairwall::failover {

inline constexpr uint8_t kAdvertVersion = 1;
inline constexpr std::size_t kAdvertHeaderSize = 8;
inline constexpr std::size_t kAdvertTagSize = 32;  // HMAC-SHA256
inline constexpr std::size_t kAdvertMaxBody = 128;
inline constexpr std::size_t kAdvertMaxFrame = kAdvertHeaderSize + kAdvertMaxBody + kAdvertTagSize;
// RFC 5798 5.1.1.3 / 5.1.2.3: sent with 255, anything less crossed a router.
inline constexpr int kAdvertTtl = 255;

enum class Reject : uint8_t {
  BadTtl,
  Truncated,
  Malformed,
  BadVersion,
  WrongVhid,
  BadTag,
  Replay,
  Duplicate,
  Own,
  NotPeer,  // to a link with a peer (carppeer), from another address
};
inline constexpr std::size_t kRejectCount = 10;
const char* reject_name(Reject reason);  // snake_case, for metrics labels

struct Advert {
  uint32_t node_id = 0;
  uint32_t advbase_ms = 0;
  uint8_t advskew = 0;
  uint32_t demotion = 0;
  uint64_t boot_epoch = 0;
  uint64_t counter = 0;
  bool leaving = false;
};

// The frame's fields for `own`, sent by node `node_id` as its `counter`th advertisement of the
// start `boot_epoch`.
Advert advert_of(const OwnAdvert& own, uint32_t node_id, uint64_t boot_epoch, uint64_t counter);

class AdvertCodec {
 public:
  // `key` is the group's shared secret (raw bytes of the key file); frames are signed with it and
  // accepted under it or under `accept_key` (if not empty), the key the group is changing to or
  // from, so that its nodes need not change keys at the same moment.
  AdvertCodec(std::string key, uint8_t vhid, uint32_t own_node_id, std::string accept_key = {});
  void set_keys(std::string key, std::string accept_key);
  // A reload's vhid: frames are sent with it, and others refused (WrongVhid), from now on. The
  // peers' replay marks stay: a frame is signed with its vhid, so none sent for the old one passes.
  void set_vhid(uint8_t vhid) { vhid_ = vhid; }

  // Writes one frame into `out`; returns its size, or 0 when `out` is too small.
  std::size_t encode(const Advert& advert, std::span<uint8_t> out) noexcept;

  struct Result {
    bool ok = false;
    Reject reason = Reject::Malformed;  // meaningful when !ok
    Advert advert;
  };
  // Checks one received frame. `ttl` is the IPv4 TTL or IPv6 hop limit it arrived with, -1 when
  // the kernel did not report it (treated as bad). An accepted frame raises the sender's replay
  // mark; a rejected one changes nothing but its counter. A frame with our node id is Replay when
  // encode() made it (a loop on the segment brought it back), Own otherwise (another node has our
  // id). `from_peer` is false for a datagram that reached a link with a peer (carppeer) from
  // another address: NotPeer.
  Result decode(std::span<const uint8_t> frame, int ttl, bool from_peer = true) noexcept;

  const std::array<uint64_t, kRejectCount>& rejects() const { return rejects_; }
  uint64_t accepted() const { return accepted_; }
  uint64_t accepted_on_accept_key() const { return accepted_on_accept_key_; }  // of accepted()

 private:
  struct ReplayMark {
    uint32_t node_id = 0;  // 0: free slot
    uint64_t epoch = 0;
    uint64_t counter = 0;
    uint64_t last_use = 0;
  };
  Result reject(Reject reason) noexcept;
  static void tag(const std::string& key, std::span<const uint8_t> data, uint8_t* out) noexcept;

  std::string key_;
  std::string accept_key_;
  uint8_t vhid_;
  uint32_t own_node_id_;
  wire::Advertisement message_;  // reused: a scalar-only message parses without allocating
  std::array<ReplayMark, 8> marks_{};
  // The last frame we encoded with our own node id: what a loop would bring back.
  uint64_t sent_epoch_ = 0;
  uint64_t sent_counter_ = 0;
  bool sent_ = false;
  uint64_t uses_ = 0;
  std::array<uint64_t, kRejectCount> rejects_{};
  uint64_t accepted_ = 0;
  uint64_t accepted_on_accept_key_ = 0;
};

}  // namespace pairwall::failover
