// A map from state id to a number without allocation per entry, for the tables that follow states
// by id beside the state table: sync's pending records (id -> queue index) and the held packets
// of defer (id -> packets held).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "daemon/engine/state.h"

namespace pairwall::engine {

struct StateIdHash {
  std::size_t operator()(const StateId& id) const noexcept {
    uint64_t x = id.counter * 0x9e3779b97f4a7c15ULL ^ id.creator;
    x ^= x >> 29;
    return static_cast<std::size_t>(x * 0xbf58476d1ce4e5b9ULL);
  }
};

// StateId -> a number, open addressing with linear probing and backward-shift deletion: one
// array, no allocation per record (std::unordered_map allocates a node per insert). Grows at half
// full.
class StateIdMap {
 public:
  // Room for `expected` ids before the first growth.
  explicit StateIdMap(std::size_t expected = 512)
      : slots_(std::bit_ceil(std::max<std::size_t>(2 * expected, 2))) {}

  uint64_t* find(const StateId& id) noexcept {
    Slot& s = slots_[probe(id)];
    return s.used ? &s.index : nullptr;
  }
  void insert(const StateId& id, uint64_t index) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    put(id, index);
    ++size_;
  }
  void erase(const StateId& id) noexcept {
    std::size_t i = probe(id);
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
  bool contains(const StateId& id) const noexcept { return slots_[probe(id)].used; }
  std::size_t size() const noexcept { return size_; }

 private:
  struct Slot {
    StateId id;
    uint64_t index = 0;
    bool used = false;
  };
  std::size_t mask() const noexcept { return slots_.size() - 1; }
  std::size_t home(const StateId& id) const noexcept { return StateIdHash{}(id)&mask(); }
  // The slot holding `id`, or the free slot that ends its probe sequence.
  std::size_t probe(const StateId& id) const noexcept {
    std::size_t i = home(id);
    while (slots_[i].used && !(slots_[i].id == id)) i = (i + 1) & mask();
    return i;
  }
  void put(const StateId& id, uint64_t index) noexcept {
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

}  // namespace pairwall::engine
