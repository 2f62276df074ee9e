// The tables the pair shares ([sync] tables), as one node's sync protocol carries them: whole, a
// version at a time. A table that changed here goes to the peer whole (in chunks that each fit a
// datagram), at most once a second, and replaces the peer's; the peer takes a version once all its
// chunks are in, and only when it is newer than the last it took of that table from this boot of
// the sender, so that a chunk resent for a resync after a newer version is stale, not a step back.
//
// Whole tables rather than entry changes: a version needs no order with the others, a lost one is
// made good by the next (or by the bulk, which sends every table again), and an `overload` table
// changes a few entries at a time, seconds apart. What this node holds of each table, its own or
// the peer's, is kept here too, for the bulk transfer to a peer that restarted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "daemon/engine/address.h"
#include "daemon/sync/time.h"
#include "proto/sync.pb.h"

namespace pairwall::sync {

struct SharedTable {
  std::string name;
  std::vector<engine::AgedTableEntry> entries;
};

class TableShare {
 public:
  // Shortest time between two versions of one table sent (a bulk's excepted).
  static constexpr Micros kResendGap{1'000'000};
  // What a peer's version may hold: past it, its chunks are refused as malformed (pf's default
  // `set limit table-entries` is 200,000).
  static constexpr std::size_t kMaxEntries = std::size_t{1} << 21;
  static constexpr std::size_t kMaxChunks = 1u << 16;
  // Tables received at once, in chunks: a peer may not make this node keep more.
  static constexpr std::size_t kMaxTables = 256;

  // This node's content of a table changed: sent whole once the gap since its last version allows.
  void set_local(SharedTable table, Micros now);
  // Every table held goes again at once (a bulk transfer to the peer).
  void send_all(Micros now);
  // The tables due at `now`, as TableChunk messages of at most `budget` bytes each, appended to
  // `out`: how many tables.
  std::size_t take_due(Micros now, std::size_t budget, std::deque<wire::Message>& out);
  // When take_due() has a table for: Micros::max() when none waits.
  Micros next_due() const noexcept;

  enum class Chunk : uint8_t {
    Partial,    // taken; the version lacks others
    Complete,   // the version is whole: `table` holds it
    Stale,      // of a version this node took already, or one older than it is assembling
    Malformed,  // a field out of range, or more than the limits allow
  };
  Chunk receive(const wire::TableChunk& chunk, Micros now, SharedTable& table);
  // The peer restarted: its versions start again.
  void peer_restarted() noexcept { incoming_.clear(); }

  std::size_t tables() const noexcept { return held_.size(); }

 private:
  struct Held {
    std::vector<engine::AgedTableEntry> entries;
    Micros taken{0};  // when `entries` held their ages
    Micros due = Micros::max();
    Micros last_sent = Micros::min();
  };
  struct Incoming {
    uint64_t taken = 0;  // the newest version taken
    uint64_t version = 0;
    std::vector<bool> got;  // by index, of `version`
    std::size_t missing = 0;
    std::vector<engine::AgedTableEntry> entries;
  };

  std::map<std::string, Held> held_;
  std::map<std::string, Incoming> incoming_;
  uint64_t next_version_ = 1;
};

}  // namespace pairwall::sync
