#include "daemon/control/progress_watch.h"

namespace pairwall::control {

void ProgressWatch::tick(Clock::time_point now, const std::vector<Sample>& samples) {
  if (last_.size() != samples.size()) last_.assign(samples.size(), Last{});
  std::optional<std::string> stuck;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    Last& w = last_[i];
    const bool waiting = s.queued.has_value() && *s.queued > 0;
    if (!w.seen || s.progress != w.progress || !waiting) {
      w = Last{s.progress, now, true};
      continue;
    }
    if (now - w.since >= stuck_after_ && !stuck) {
      const auto secs = std::chrono::duration_cast<std::chrono::seconds>(now - w.since).count();
      stuck = "queue " + std::to_string(s.queue) + " worker made no progress for " + std::to_string(secs) +
              " s with " + std::to_string(*s.queued) + " packets waiting";
    }
  }
  any_stuck_.store(stuck.has_value(), std::memory_order_relaxed);
  std::lock_guard lock(stuck_mutex_);
  stuck_ = std::move(stuck);
}

}  // namespace pairwall::control
