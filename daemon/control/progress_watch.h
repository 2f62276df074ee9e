// Tells a stuck packet worker from an idle one, for the systemd watchdog and `health`.
//
// A worker is stuck when packets wait in its kernel queue and its progress counter (packets
// received, polls, receive calls) has not moved for `stuck_after`. An idle worker has nothing
// queued and is never stuck, however long it sleeps in poll().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace pairwall::control {

class ProgressWatch {
 public:
  using Clock = std::chrono::steady_clock;

  struct Sample {
    uint16_t queue = 0;
    uint64_t progress = 0;           // any counter the worker advances whenever it runs
    std::optional<uint32_t> queued;  // packets waiting in the kernel queue; nullopt: unknown
  };

  explicit ProgressWatch(std::chrono::milliseconds stuck_after = std::chrono::seconds(3))
      : stuck_after_(stuck_after) {}

  // One observation of every worker, in the same order each time. Without the kernel's view
  // (queued unknown) a worker is never accused.
  void tick(Clock::time_point now, const std::vector<Sample>& samples);

  // Why the first stuck worker is stuck, or nullopt when none is. From any thread (the control
  // socket's answers `health` on its own).
  std::optional<std::string> stuck() const {
    std::lock_guard lock(stuck_mutex_);
    return stuck_;
  }
  // Whether any worker was stuck at the last tick(), from any thread (the failover service asks).
  bool any_stuck() const noexcept { return any_stuck_.load(std::memory_order_relaxed); }

 private:
  struct Last {
    uint64_t progress = 0;
    Clock::time_point since{};
    bool seen = false;
  };
  std::chrono::milliseconds stuck_after_;
  std::vector<Last> last_;
  mutable std::mutex stuck_mutex_;
  std::optional<std::string> stuck_;  // under stuck_mutex_
  std::atomic<bool> any_stuck_{false};
};

}  // namespace pairwall::control
