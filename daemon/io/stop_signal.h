// Tells queue workers to stop: an atomic flag they check after every batch, and an eventfd that
// wakes the ones blocked in poll. The eventfd is never read, so it stays readable for all of them.
#pragma once

#include <atomic>

namespace pairwall::io {

class StopSignal {
 public:
  StopSignal();  // throws std::runtime_error when no eventfd can be created
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // Async-signal-safe: an atomic store and a write(2).
  void request() noexcept;
  bool requested() const noexcept { return flag_.load(std::memory_order_relaxed); }
  const std::atomic<bool>& flag() const noexcept { return flag_; }
  int fd() const noexcept { return fd_; }

 private:
  std::atomic<bool> flag_{false};
  int fd_ = -1;
};

}  // namespace pairwall::io
