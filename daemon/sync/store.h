// What the sync protocol needs from the local state table. SyncService implements it over
// engine::Engine; the unit tests over a plain map, so that two protocol instances can be run
// against each other with crafted loss.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/engine/state.h"
#include "daemon/sync/time.h"

namespace pairwall::sync {

enum class ApplyResult : uint8_t {
  Applied,
  Stale,    // the table already holds a newer version (windows never move back)
  Unknown,  // an update or delete for a state the table does not have
  Failed,   // the table refused (full)
};

class StateStore {
 public:
  virtual ~StateStore() = default;

  // A record received from the peer.
  virtual ApplyResult apply(const engine::StateRecord& record, Micros now) = 0;

  // The state's current version as an Insert record; false when it no longer exists.
  virtual bool current(const engine::StateId& id, Micros now, engine::StateRecord& out) = 0;

  // Appends the id of every state (the snapshot of a bulk transfer).
  virtual void collect_ids(std::vector<engine::StateId>& out) = 0;
};

}  // namespace pairwall::sync
