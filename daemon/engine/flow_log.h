// pflow(4)'s flows: what a state whose rule says `(pflow)` leaves behind when it goes. The engine's
// part, no I/O: the state table writes a FlowRecord as it removes such a state, whichever way it
// goes (expiry, a close, a kill, the peer's delete) and from whichever thread removes it; the
// exporter (daemon/io/flow_export.h) takes them every second and sends them to a collector.
//
// A node records the flows it forwarded: a state learned from the sync peer whose packets this
// node never saw leaves nothing, so that a pair's collector counts each connection once (in two
// parts, each node's own, when it failed over in between).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "daemon/engine/spin_lock.h"
#include "daemon/engine/state.h"
#include "daemon/engine/time.h"

namespace pairwall::engine {

// Why a flow ended: the values of IPFIX's flowEndReason (information element 136).
enum class FlowEnd : uint8_t {
  IdleTimeout = 1,  // its state expired idle
  EndOfFlow = 3,    // the connection closed (a TCP state expired closing or closed, or gave way to a new one)
  ForcedEnd = 4,    // a kill, a flush, a source limit, the peer's delete
};

struct FlowRecord {
  StateKey stack;                // as its first packet arrived: addr[0] and port[0] are the initiator's
  StateKey wire;                 // as it left, translated (equal to stack without a translation)
  uint64_t packets[2] = {0, 0};  // [0] from the initiator, [1] back
  uint64_t bytes[2] = {0, 0};
  Millis created{0};    // the engine's clock, as the state's
  Millis last_seen{0};  // its last packet
  FlowEnd end = FlowEnd::IdleTimeout;
};

class FlowLog {
 public:
  explicit FlowLog(std::size_t capacity);
  FlowLog(const FlowLog&) = delete;
  FlowLog& operator=(const FlowLog&) = delete;

  // Any thread; never allocates. False, and counted, when the log is full: the exporter has not
  // taken the records for a while.
  bool push(const FlowRecord& record) noexcept;
  // The records pushed since the last take, oldest first, in place of `out`'s. One thread.
  void take(std::vector<FlowRecord>& out);

  uint64_t recorded() const noexcept { return recorded_.load(std::memory_order_relaxed); }
  uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }

 private:
  const std::size_t capacity_;
  SpinLock lock_;
  std::vector<FlowRecord> records_;  // reserved to capacity_: push() never allocates
  std::atomic<uint64_t> recorded_{0};
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace pairwall::engine
