// Packets held until the peer has the states they created (pfsync's `defer`).
//
// With sync, a connection's first packet normally leaves before its state's insert reaches the
// peer: kill the master in that moment and the peer meets the reply without a state. Held here,
// the first packet leaves only when the peer has acknowledged every state record the worker had
// queued up to that packet's batch (its ticket: the worker's record count then), or when the hold
// times out, so that a silent peer costs a new connection one timeout, never the connection.
// Packets of a state whose first packet is still held wait behind it, so holding never reorders
// a flow.
//
// A FIFO: tickets and deadlines only grow in the order packets are held, so the front is always
// the next to go. Bounded in packets and in bytes (the rewritten packets' copies; the kernel keeps
// every other packet itself); a packet that finds no room releases the oldest first, as pfsync
// does. No allocation after construction; holds_state() is a hash lookup.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "daemon/engine/state.h"
#include "daemon/engine/state_id_map.h"
#include "daemon/io/counter.h"
#include "daemon/io/verdict_plan.h"

namespace pairwall::io {

enum class ReleaseCause : uint8_t {
  Synced,   // the peer acknowledged the state's insert
  Timeout,  // the hold timed out
  Full,     // a newer packet needed the room
  Stopped,  // the peer went away or holding was turned off
  Count
};

// Written by the queue's worker, readable from any thread.
struct DeferCounters {
  Counter held;
  Counter released[static_cast<std::size_t>(ReleaseCause::Count)];
  Counter too_large;   // a rewritten packet larger than the byte room: not held
  Counter state_gone;  // released packets dropped: their state was removed while they waited
};

std::string_view release_cause_name(ReleaseCause cause);

class DeferQueue {
 public:
  using Clock = std::chrono::steady_clock;

  // A released packet: `bytes` (empty unless the decision is a rewrite) are valid until the next
  // call that changes the queue; `mark` is the one it came with.
  struct Release {
    uint32_t id;
    Decision decision;
    std::span<const uint8_t> bytes;
    ReleaseCause cause;
    uint32_t mark;
  };

  // Whether a held packet's state still exists when the packet goes.
  using StateAlive = std::function<bool(const engine::StateId&)>;

  // A packet whose state was removed while it waited (killed, flushed, an overload's flush) goes
  // as a drop, as pfsync's deferrals do (pfsync_delete_state drops them): a state removed to stop
  // a connection must not let its first packet out afterwards. Without `state_alive`, every
  // state counts as alive.
  DeferQueue(std::size_t max_packets, std::size_t max_bytes, StateAlive state_alive = {});

  bool empty() const noexcept { return count_ == 0; }
  std::size_t size() const noexcept { return count_; }
  const DeferCounters& counters() const noexcept { return counters_; }
  // The front's deadline; Clock::time_point::max() when empty.
  Clock::time_point next_deadline() const noexcept;

  // Whether a packet of `state` is held (so that the state's next packets wait behind it).
  bool holds_state(const engine::StateId& state) const noexcept;

  // Holds queue packet `id`, which came with `mark`, to be settled with `decision` (its rewritten
  // bytes copied when the decision carries them). Makes room by releasing the oldest through
  // `settle` when full. Returns false, holding nothing, for a rewrite larger than the byte room:
  // settle it now.
  template <typename Settle>
  bool hold(uint32_t id, Decision decision, std::span<const uint8_t> bytes, const engine::StateId& state,
            uint64_t ticket, Clock::time_point deadline, Settle&& settle, uint32_t mark = 0);

  // Releases, in order, the held packets whose tickets are at or below `synced` or whose deadline
  // has passed.
  template <typename Settle>
  void release(uint64_t synced, Clock::time_point now, Settle&& settle);

  // Releases everything.
  template <typename Settle>
  void release_all(ReleaseCause cause, Settle&& settle);

 private:
  struct Entry {
    uint32_t id = 0;
    Decision decision = Decision::Accept;
    engine::StateId state;
    uint64_t ticket = 0;
    Clock::time_point deadline;
    std::size_t offset = 0;  // of its bytes in the arena
    std::size_t length = 0;
    uint32_t mark = 0;
  };

  Entry& front() noexcept { return entries_[head_]; }
  // The held states, each with how many of its packets are held, so that the check every
  // state's packet makes while something is held is a hash probe rather than a scan of the queue.
  void index_add(const engine::StateId& state);
  void index_remove(const engine::StateId& state) noexcept;
  // Where `length` (> 0) bytes fit after the newest held bytes, or SIZE_MAX.
  std::size_t place(std::size_t length) const noexcept;
  void push(uint32_t id, Decision decision, std::span<const uint8_t> bytes, const engine::StateId& state,
            uint64_t ticket, Clock::time_point deadline, std::size_t offset, uint32_t mark) noexcept;
  Release pop(ReleaseCause cause) noexcept;

  std::vector<Entry> entries_;  // a ring of max_packets
  std::size_t head_ = 0;
  std::size_t count_ = 0;
  engine::StateIdMap by_state_;  // sized for max_packets: it never grows
  // The rewritten packets' bytes, a ring allocated in hold order: [begin_, end_), or when
  // wrapped_, [begin_, tail_end_) then [0, end_).
  std::vector<uint8_t> arena_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  std::size_t tail_end_ = 0;
  bool wrapped_ = false;
  std::size_t byte_entries_ = 0;  // held packets with bytes
  StateAlive state_alive_;
  DeferCounters counters_;
};

template <typename Settle>
bool DeferQueue::hold(uint32_t id, Decision decision, std::span<const uint8_t> bytes,
                      const engine::StateId& state, uint64_t ticket, Clock::time_point deadline,
                      Settle&& settle, uint32_t mark) {
  const std::size_t length = rewritten(decision) ? bytes.size() : 0;
  if (length > arena_.size()) {
    counters_.too_large.add();
    return false;
  }
  std::size_t offset = length > 0 ? place(length) : 0;
  while (count_ == entries_.size() || offset == SIZE_MAX) {
    settle(pop(ReleaseCause::Full));
    offset = length > 0 ? place(length) : 0;
  }
  push(id, decision, bytes.first(length), state, ticket, deadline, offset, mark);
  return true;
}

template <typename Settle>
void DeferQueue::release(uint64_t synced, Clock::time_point now, Settle&& settle) {
  while (count_ > 0) {
    const Entry& e = front();
    if (e.ticket <= synced) {
      settle(pop(ReleaseCause::Synced));
    } else if (e.deadline <= now) {
      settle(pop(ReleaseCause::Timeout));
    } else {
      break;
    }
  }
}

template <typename Settle>
void DeferQueue::release_all(ReleaseCause cause, Settle&& settle) {
  while (count_ > 0) settle(pop(cause));
}

}  // namespace pairwall::io
