#pragma once

#include <atomic>

namespace pairwall::engine {

// A test-and-test-and-set lock: shard critical sections are a few hundred nanoseconds and never
// block, so spinning beats a futex round trip. Yields after a while so that a preempted holder on
// a two-core machine gets the CPU back.
class SpinLock {
 public:
  void lock() noexcept;
  bool try_lock() noexcept { return !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace pairwall::engine
