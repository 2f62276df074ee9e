// Local state changes waiting to be sent: the batching and coalescing policy.
//
// - Records wait until a datagram's worth is pending or the flush interval passes, so that a
//   busy table fills datagrams to the MTU and a quiet one still sends within the interval.
// - Pending changes to one state coalesce into one record: an update folds into a pending insert
//   or replaces a pending update, a delete replaces anything pending for the state.
// - Inserts, clears and TCP state changes are urgent: they go out at the next poll, without
//   waiting for the interval (pfsync sends TCP state changes at once for the same reason: the
//   standby must know a connection is established before it may need to pass it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "daemon/engine/state.h"
#include "daemon/sync/time.h"

namespace pairwall::sync {

struct StateIdHash {
  std::size_t operator()(const engine::StateId& id) const noexcept {
    uint64_t x = id.counter * 0x9e3779b97f4a7c15ULL ^ id.creator;
    x ^= x >> 29;
    return static_cast<std::size_t>(x * 0xbf58476d1ce4e5b9ULL);
  }
};

// StateId -> queue index, open addressing with linear probing and backward-shift deletion: one
// array, no allocation per record (std::unordered_map allocates a node per insert). Grows at half
// full.
class PendingIndex {
 public:
  PendingIndex() : slots_(kInitial) {}

  uint64_t* find(const engine::StateId& id) noexcept {
    for (std::size_t i = home(id);; i = (i + 1) & mask()) {
      Slot& s = slots_[i];
      if (!s.used) return nullptr;
      if (s.id == id) return &s.index;
    }
  }
  void insert(const engine::StateId& id, uint64_t index) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    put(id, index);
    ++size_;
  }
  void erase(const engine::StateId& id) noexcept {
    std::size_t i = home(id);
    while (slots_[i].used && !(slots_[i].id == id)) i = (i + 1) & mask();
    if (!slots_[i].used) return;
    // Shift the following run back so that no probe sequence has a hole.
    for (std::size_t j = (i + 1) & mask(); slots_[j].used; j = (j + 1) & mask()) {
      const std::size_t h = home(slots_[j].id);
      const bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
      if (movable) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].used = false;
    --size_;
  }
  void clear() noexcept {
    for (auto& s : slots_) s.used = false;
    size_ = 0;
  }
  std::size_t size() const noexcept { return size_; }

 private:
  struct Slot {
    engine::StateId id;
    uint64_t index = 0;
    bool used = false;
  };
  static constexpr std::size_t kInitial = 1024;
  std::size_t mask() const noexcept { return slots_.size() - 1; }
  std::size_t home(const engine::StateId& id) const noexcept { return StateIdHash{}(id)&mask(); }
  void put(const engine::StateId& id, uint64_t index) noexcept {
    std::size_t i = home(id);
    while (slots_[i].used) i = (i + 1) & mask();
    slots_[i] = {id, index, true};
  }
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    for (const Slot& s : old) {
      if (s.used) put(s.id, s.index);
    }
  }

  std::vector<Slot> slots_;
  std::size_t size_ = 0;
};

class PendingRecords {
 public:
  PendingRecords();

  // Queues a local change. Returns true when it is urgent.
  bool add(const engine::StateRecord& record, Micros now);

  bool empty() const noexcept { return live_ == 0; }
  std::size_t size() const noexcept { return live_; }
  bool urgent() const noexcept { return urgent_ && live_ > 0; }
  // When the oldest pending record was queued.
  Micros oldest() const noexcept { return oldest_; }
  // A rough size of the pending records on the wire, to tell when a datagram's worth is waiting.
  std::size_t estimated_bytes() const noexcept { return estimated_bytes_; }
  uint64_t coalesced() const noexcept { return coalesced_; }

  // The oldest pending record; precondition !empty().
  const engine::StateRecord& front();
  void pop_front();

  // Forgets everything (a peer restart: it asks for a bulk instead).
  void clear();

 private:
  struct Item {
    engine::StateRecord record;
    Micros queued{0};
    bool dead = false;  // coalesced into another item, or dropped by a clear
  };

  static std::size_t estimate(const engine::StateRecord& r) noexcept;
  bool tcp_state_changed(const engine::StateRecord& r) noexcept;
  void skip_dead() noexcept;
  Item& at(uint64_t index) noexcept { return items_[index - first_index_]; }

  std::deque<Item> items_;
  uint64_t first_index_ = 0;  // absolute index of items_.front()
  PendingIndex by_id_;
  std::size_t live_ = 0;
  std::size_t estimated_bytes_ = 0;
  bool urgent_ = false;
  Micros oldest_{0};
  uint64_t coalesced_ = 0;

  // The last per-side TCP states sent for a state, by id hash: a lossy cache (a collision only
  // makes an update urgent that needed not be; a false "unchanged" needs a 24-bit tag collision
  // on the same slot and delays one change by at most the flush interval). Bounded memory for
  // any number of states.
  std::vector<uint32_t> tcp_states_;
};

}  // namespace pairwall::sync
