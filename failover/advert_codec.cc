#include "failover/advert_codec.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace pairwall::failover {

Advert advert_of(const OwnAdvert& own, uint32_t node_id, uint64_t boot_epoch, uint64_t counter) {
  Advert a;
  a.node_id = node_id;
  a.advbase_ms =
      static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(own.advbase).count());
  a.advskew = own.advskew;
  a.demotion = own.demotion;
  a.boot_epoch = boot_epoch;
  a.counter = counter;
  a.leaving = own.leaving;
  return a;
}

namespace {

constexpr uint8_t kMagic[4] = {'P', 'W', 'F', 'A'};

}  // namespace

const char* reject_name(Reject reason) {
  switch (reason) {
    case Reject::BadTtl:
      return "bad_ttl";
    case Reject::Truncated:
      return "truncated";
    case Reject::Malformed:
      return "malformed";
    case Reject::BadVersion:
      return "bad_version";
    case Reject::WrongVhid:
      return "wrong_vhid";
    case Reject::BadTag:
      return "bad_tag";
    case Reject::Replay:
      return "replay";
    case Reject::Duplicate:
      return "duplicate";
    case Reject::Own:
      return "own";
    case Reject::NotPeer:
      return "not_peer";
  }
  return "unknown";
}

AdvertCodec::AdvertCodec(std::string key, uint8_t vhid, uint32_t own_node_id, std::string accept_key)
    : key_(std::move(key)), accept_key_(std::move(accept_key)), vhid_(vhid), own_node_id_(own_node_id) {}

void AdvertCodec::set_keys(std::string key, std::string accept_key) {
  key_ = std::move(key);
  accept_key_ = std::move(accept_key);
}

void AdvertCodec::tag(const std::string& key, std::span<const uint8_t> data, uint8_t* out) noexcept {
  unsigned int len = kAdvertTagSize;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data.data(), data.size(), out, &len);
}

std::size_t AdvertCodec::encode(const Advert& advert, std::span<uint8_t> out) noexcept {
  message_.Clear();
  message_.set_node_id(advert.node_id);
  message_.set_advbase_ms(advert.advbase_ms);
  message_.set_advskew(advert.advskew);
  message_.set_demotion(advert.demotion);
  message_.set_boot_epoch(advert.boot_epoch);
  message_.set_counter(advert.counter);
  message_.set_leaving(advert.leaving);
  const std::size_t body = message_.ByteSizeLong();
  const std::size_t total = kAdvertHeaderSize + body + kAdvertTagSize;
  if (body > kAdvertMaxBody || out.size() < total) return 0;
  uint8_t* p = out.data();
  std::memcpy(p, kMagic, 4);
  p[4] = kAdvertVersion;
  p[5] = vhid_;
  p[6] = static_cast<uint8_t>(body >> 8);
  p[7] = static_cast<uint8_t>(body);
  if (!message_.SerializeToArray(p + kAdvertHeaderSize, static_cast<int>(body))) return 0;
  tag(key_, std::span<const uint8_t>(p, kAdvertHeaderSize + body), p + kAdvertHeaderSize + body);
  if (advert.node_id == own_node_id_) {
    sent_epoch_ = advert.boot_epoch;
    sent_counter_ = advert.counter;
    sent_ = true;
  }
  return total;
}

AdvertCodec::Result AdvertCodec::reject(Reject reason) noexcept {
  ++rejects_[static_cast<std::size_t>(reason)];
  return Result{false, reason, {}};
}

AdvertCodec::Result AdvertCodec::decode(std::span<const uint8_t> frame, int ttl, bool from_peer) noexcept {
  if (!from_peer) return reject(Reject::NotPeer);
  if (ttl != kAdvertTtl) return reject(Reject::BadTtl);
  if (frame.size() < kAdvertHeaderSize) return reject(Reject::Truncated);
  if (std::memcmp(frame.data(), kMagic, 4) != 0) return reject(Reject::Malformed);
  if (frame[4] != kAdvertVersion) return reject(Reject::BadVersion);
  const std::size_t body = (std::size_t{frame[6]} << 8) | frame[7];
  if (frame.size() < kAdvertHeaderSize + body + kAdvertTagSize) return reject(Reject::Truncated);
  if (frame.size() > kAdvertHeaderSize + body + kAdvertTagSize || body > kAdvertMaxBody) {
    return reject(Reject::Malformed);
  }
  if (frame[5] != vhid_) return reject(Reject::WrongVhid);

  const auto signed_with = [&](const std::string& key) {
    uint8_t expected[kAdvertTagSize];
    tag(key, frame.first(kAdvertHeaderSize + body), expected);
    return CRYPTO_memcmp(expected, frame.data() + kAdvertHeaderSize + body, kAdvertTagSize) == 0;
  };
  bool on_accept_key = false;
  if (!signed_with(key_)) {
    if (accept_key_.empty() || !signed_with(accept_key_)) return reject(Reject::BadTag);
    on_accept_key = true;
  }

  // Authentic from here on: whatever fails now is a peer bug, not an attack.
  message_.Clear();
  if (!message_.ParseFromArray(frame.data() + kAdvertHeaderSize, static_cast<int>(body))) {
    return reject(Reject::Malformed);
  }
  Advert a;
  a.node_id = message_.node_id();
  a.advbase_ms = message_.advbase_ms();
  a.demotion = message_.demotion();
  a.boot_epoch = message_.boot_epoch();
  a.counter = message_.counter();
  a.leaving = message_.leaving();
  const uint32_t skew = message_.advskew();
  // What proto/failover.proto allows each field; the leaving values rank a node below everyone,
  // and only a master that is going has a reason to send them.
  if (a.node_id == 0 || a.advbase_ms < kMinAdvbaseMs || a.advbase_ms > kMaxAdvbaseMs || skew > 255 ||
      (skew == kLeavingAdvskew && !a.leaving) || (a.demotion == kLeavingDemotion && !a.leaving)) {
    return reject(Reject::Malformed);
  }
  a.advskew = static_cast<uint8_t>(skew);
  if (a.node_id == own_node_id_) {
    // Multicast loop is off, yet a bridge loop, a reflecting switch port or two VIP interfaces on
    // one segment bring our own frames back (carp(4): "replay or network loop detected"). Another
    // node configured with our id runs under its own boot epoch.
    const bool ours = sent_ && a.boot_epoch == sent_epoch_ && a.counter <= sent_counter_;
    return reject(ours ? Reject::Replay : Reject::Own);
  }

  ReplayMark* mark = nullptr;
  for (auto& m : marks_) {
    if (m.node_id == a.node_id) mark = &m;
  }
  if (mark) {
    const auto seen = std::pair{mark->epoch, mark->counter};
    const auto now = std::pair{a.boot_epoch, a.counter};
    if (now == seen) return reject(Reject::Duplicate);
    if (now < seen) return reject(Reject::Replay);
  } else {
    // A new sender takes a free slot, or the one accepted from least recently.
    mark = &*std::min_element(marks_.begin(), marks_.end(), [](const ReplayMark& x, const ReplayMark& y) {
      return x.last_use < y.last_use;
    });
    mark->node_id = a.node_id;
  }
  mark->epoch = a.boot_epoch;
  mark->counter = a.counter;
  mark->last_use = ++uses_;
  ++accepted_;
  if (on_accept_key) ++accepted_on_accept_key_;
  return Result{true, Reject::Malformed, a};
}

}  // namespace pairwall::failover
