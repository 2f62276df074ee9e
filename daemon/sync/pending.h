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
#include <memory>
#include <vector>

#include "daemon/engine/state.h"
#include "daemon/engine/state_id_map.h"
#include "daemon/sync/time.h"

namespace pairwall::sync {

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
  engine::StateIdMap by_id_;
  std::size_t live_ = 0;
  std::size_t estimated_bytes_ = 0;
  bool urgent_ = false;
  Micros oldest_{0};
  uint64_t coalesced_ = 0;

  // The last per-side TCP states sent for a state, by id hash: a lossy cache (a collision only
  // makes an update urgent that needed not be; a false "unchanged" needs a 24-bit tag collision
  // on the same slot and delays one change by at most the flush interval). Bounded memory for
  // any number of states.
  std::unique_ptr<uint32_t[]> tcp_states_;  // kTcpCacheSlots, zeroed
};

}  // namespace pairwall::sync
