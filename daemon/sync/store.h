// What the sync protocol needs from the local state table. SyncService implements it over
// engine::Engine; the unit tests over a plain map, so that two protocol instances can be run
// against each other with crafted loss.
#pragma once

#include <cstddef>
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
  Invalid,  // the record does not fit the state it names: dropped as malformed
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

  // The peer's sync sequence of the records apply() is given next: a state remembers the last one
  // that named it.
  virtual void set_peer_sequence(uint64_t sequence) = 0;
  // A full transfer ended with every record it announced: removes the states `peer` created that
  // no record from `sequence` (the transfer's snapshot) on named, which the peer no longer has
  // (their Deletes were lost), unless this node has taken them over. Returns how many.
  virtual std::size_t remove_peer_states_unnamed_since(uint32_t peer, uint64_t sequence) = 0;

  // The digest of the rules this node runs (engine::rules::RuleSet::digest), 0 if unknown.
  virtual uint64_t rules_digest() const { return 0; }

  // The interface numbers of the records' `bound` (if-bound states), which travel by name; nullptr:
  // the store keeps no bound states, and a record of one is refused.
  virtual engine::InterfaceRegistry* interfaces() { return nullptr; }
};

}  // namespace pairwall::sync
