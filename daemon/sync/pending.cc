#include "daemon/sync/pending.h"

namespace pairwall::sync {
namespace {

constexpr std::size_t kTcpCacheSlots = 1 << 16;
constexpr uint8_t kTcp = 6;

}  // namespace

PendingRecords::PendingRecords() : tcp_states_(new uint32_t[kTcpCacheSlots]()) {}

std::size_t PendingRecords::estimate(const engine::StateRecord& r) noexcept {
  using Kind = engine::StateRecord::Kind;
  const bool v6 = r.stack_key.family == engine::Family::V6;
  // scrub reassemble tcp's figures: two timestamp offsets and TTLs, and the insert's flag.
  const std::size_t scrub = r.scrub[0] == engine::TcpScrub{} && r.scrub[1] == engine::TcpScrub{} ? 0 : 18;
  switch (r.kind) {
    case Kind::Insert:
      return (v6 ? 110 : 80) + (r.wire_key == r.stack_key ? 0 : (v6 ? 45 : 20)) + scrub;
    case Kind::Update:
      return 50 + scrub;
    case Kind::Delete:
    case Kind::Clear:
      return 14;
  }
  return 80;
}

bool PendingRecords::tcp_state_changed(const engine::StateRecord& r) noexcept {
  const std::size_t h = engine::StateIdHash{}(r.id);
  uint32_t& slot = tcp_states_[h % kTcpCacheSlots];
  // A synproxy state's handshake phase counts as its TCP states do: a node taking over needs the
  // step the master just took (the ISN it sent the server) as soon as the master took it.
  const uint32_t tag = static_cast<uint32_t>(h >> 42) & 0x3fffff;
  const uint32_t value = tag << 10 | (static_cast<uint32_t>(r.proxy) & 0x03) << 8 |
                         static_cast<uint32_t>(r.src.state & 0x0f) << 4 | (r.dst.state & 0x0f);
  const bool changed = slot != value;
  slot = value;
  return changed;
}

bool PendingRecords::add(const engine::StateRecord& r, Micros now) {
  using Kind = engine::StateRecord::Kind;
  bool urgent = false;
  switch (r.kind) {
    case Kind::Insert:
      urgent = true;
      if (r.stack_key.proto == kTcp) tcp_state_changed(r);
      break;
    case Kind::Update:
      // The cache does not know the protocol of an update; an update's states fit both.
      urgent = tcp_state_changed(r) && (r.src.state != 0 || r.dst.state != 0);
      break;
    case Kind::Clear:
      urgent = true;
      // What is pending for the states the clear names is moot: the peer removes them. The
      // records of other nodes' states go ahead of it, as pfsync sends its queue before a clear:
      // the peer keeps the states it created, and a delete of one must still reach it.
      for (auto& item : items_) {
        if (item.dead || (r.id.creator != 0 && item.record.id.creator != r.id.creator)) continue;
        item.dead = true;
        if (item.record.kind != Kind::Clear) by_id_.erase(item.record.id);
        --live_;
        estimated_bytes_ -= estimate(item.record);
      }
      break;
    case Kind::Delete:
      break;
  }

  if (r.kind != Kind::Clear) {
    if (const uint64_t* found = by_id_.find(r.id)) {
      Item& item = at(*found);
      ++coalesced_;
      estimated_bytes_ -= estimate(item.record);
      if (r.kind == Kind::Update && item.record.kind == Kind::Insert) {
        // Fold the newer tracking into the pending insert: the peer still needs the whole state.
        // (An update carries all an insert does but the keys, rule and flags.)
        item.record.src = r.src;
        item.record.dst = r.dst;
        item.record.timeout = r.timeout;
        item.record.expires_in = r.expires_in;
        item.record.seqdiff = r.seqdiff;
        item.record.proxy = r.proxy;
        item.record.proxy_isn = r.proxy_isn;
        item.record.scrub = r.scrub;
      } else if (!(r.kind == Kind::Update && item.record.kind == Kind::Delete)) {
        item.record = r;
      }
      estimated_bytes_ += estimate(item.record);
      urgent_ = urgent_ || urgent;
      return urgent;
    }
  }

  if (live_ == 0) oldest_ = now;
  const uint64_t index = first_index_ + items_.size();
  items_.push_back(Item{r, now, false});
  if (r.kind != Kind::Clear) by_id_.insert(r.id, index);
  ++live_;
  estimated_bytes_ += estimate(r);
  urgent_ = urgent_ || urgent;
  return urgent;
}

void PendingRecords::skip_dead() noexcept {
  while (!items_.empty() && items_.front().dead) {
    items_.pop_front();
    ++first_index_;
  }
}

const engine::StateRecord& PendingRecords::front() {
  skip_dead();
  return items_.front().record;
}

void PendingRecords::pop_front() {
  skip_dead();
  if (items_.empty()) return;
  Item& item = items_.front();
  if (item.record.kind != engine::StateRecord::Kind::Clear) by_id_.erase(item.record.id);
  estimated_bytes_ -= estimate(item.record);
  --live_;
  items_.pop_front();
  ++first_index_;
  skip_dead();
  if (live_ == 0) {
    urgent_ = false;
    estimated_bytes_ = 0;
  } else {
    oldest_ = items_.front().queued;
  }
}

void PendingRecords::clear() {
  first_index_ += items_.size();
  items_.clear();
  by_id_.clear();
  live_ = 0;
  estimated_bytes_ = 0;
  urgent_ = false;
}

}  // namespace pairwall::sync
