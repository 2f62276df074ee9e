#include "daemon/io/defer_queue.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace pairwall::io {

std::string_view release_cause_name(ReleaseCause cause) {
  switch (cause) {
    case ReleaseCause::Synced:
      return "synced";
    case ReleaseCause::Timeout:
      return "timeout";
    case ReleaseCause::Full:
      return "full";
    case ReleaseCause::Stopped:
      return "stopped";
    case ReleaseCause::Count:
      break;
  }
  return "unknown";
}

DeferQueue::DeferQueue(std::size_t max_packets, std::size_t max_bytes, StateAlive state_alive)
    : entries_(max_packets), by_state_(max_packets), arena_(max_bytes), state_alive_(std::move(state_alive)) {
  if (max_packets == 0) throw std::invalid_argument("defer queue: room for at least one packet is needed");
}

void DeferQueue::index_add(const engine::StateId& state) {
  if (uint64_t* held = by_state_.find(state)) {
    ++*held;
  } else {
    by_state_.insert(state, 1);
  }
}

void DeferQueue::index_remove(const engine::StateId& state) noexcept {
  uint64_t* held = by_state_.find(state);
  if (held != nullptr && --*held == 0) by_state_.erase(state);
}

DeferQueue::Clock::time_point DeferQueue::next_deadline() const noexcept {
  return count_ == 0 ? Clock::time_point::max() : entries_[head_].deadline;
}

bool DeferQueue::holds_state(const engine::StateId& state) const noexcept {
  return by_state_.contains(state);
}

std::size_t DeferQueue::place(std::size_t length) const noexcept {
  if (byte_entries_ == 0) return 0;
  if (!wrapped_) {
    if (end_ + length <= arena_.size()) return end_;
    return length <= begin_ ? 0 : SIZE_MAX;
  }
  return end_ + length <= begin_ ? end_ : SIZE_MAX;
}

void DeferQueue::push(uint32_t id, Decision decision, std::span<const uint8_t> bytes,
                      const engine::StateId& state, uint64_t ticket, Clock::time_point deadline,
                      std::size_t offset, uint32_t mark) noexcept {
  if (!bytes.empty()) {
    if (byte_entries_ == 0) {
      begin_ = offset;
    } else if (offset < end_) {
      wrapped_ = true;
      tail_end_ = end_;
    }
    std::copy(bytes.begin(), bytes.end(), arena_.begin() + static_cast<std::ptrdiff_t>(offset));
    end_ = offset + bytes.size();
    ++byte_entries_;
  }
  entries_[(head_ + count_) % entries_.size()] =
      Entry{id, decision, state, ticket, deadline, offset, bytes.size(), mark};
  index_add(state);
  ++count_;
  counters_.held.add();
}

DeferQueue::Release DeferQueue::pop(ReleaseCause cause) noexcept {
  const Entry& e = front();
  Release r{e.id, e.decision, std::span<const uint8_t>(arena_.data() + e.offset, e.length), cause, e.mark};
  if (e.length > 0) {
    if (--byte_entries_ == 0) {
      begin_ = end_ = tail_end_ = 0;
      wrapped_ = false;
    } else {
      begin_ = e.offset + e.length;
      if (wrapped_ && begin_ == tail_end_) {
        begin_ = 0;
        wrapped_ = false;
      }
    }
  }
  if (state_alive_ && !state_alive_(e.state)) {
    r.decision = Decision::Drop;
    r.bytes = {};
    counters_.state_gone.add();
  }
  index_remove(e.state);
  head_ = (head_ + 1) % entries_.size();
  --count_;
  counters_.released[static_cast<std::size_t>(cause)].add();
  return r;
}

}  // namespace pairwall::io
