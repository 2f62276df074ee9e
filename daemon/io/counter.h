// A counter written by exactly one thread and read by any (metrics, the control socket): a relaxed
// load and store, never a locked read-modify-write on the packet path.
#pragma once

#include <atomic>
#include <cstdint>

namespace pairwall::io {

class Counter {
 public:
  void add(uint64_t n = 1) noexcept {
    value_.store(value_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  uint64_t get() const noexcept { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

}  // namespace pairwall::io
