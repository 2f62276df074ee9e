// Source tracking (pf's source nodes): per source address, how many states and established TCP
// connections it holds under a rule's `max-src-*` limits, and how fast it opens connections.
//
// A node is keyed by its owner and the source address. The owner is the rule's RuleStats with
// `source-track rule` (pf's default: each rule counts alone), or nothing with `source-track
// global` (every such rule counts into one node per address). A node lives as long as states
// refer to it, and then for the src.track timeout of the rule whose state was its last (pf's
// pf_src_tree_remove_state): with 0, pf's default, the last state's removal frees it; with more,
// its connection rate still counts against the address's next connections for that long, and a
// new state of the address takes it up again, history and all. A node whose connections count
// against a max-src-conn-rate lives on for the rate's period at least, as pfctl raises the rule's
// src.track to it.
//
// A node left without states joins its shard's idle queue for its src.track, one FIFO queue per
// distinct duration; expire() dates the newcomers and frees the nodes whose time is up, so that
// idle nodes cost nothing per packet and an expiry pass costs what joined and what expired. A
// node is dated by the first pass after its last state went: it lives on at least src.track, at
// most a pass longer (pf's purge frees them later still, every `interval`).
//
// Sharded by a keyed hash of the key with a lock per shard; taken only while a state is created,
// a connection completes its handshake or a state is removed, by expiry, and always after the
// state table's own locks. Nodes come from per-shard chunks and return to a free list, so that a
// node's address stays valid for the states that hold it. `set limit src-nodes` bounds the whole
// table, idle nodes included (pf counts them too).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "daemon/engine/address.h"
#include "daemon/engine/siphash.h"
#include "daemon/engine/time.h"

namespace pairwall::engine {

// A rule's source limits; zero means no limit.
struct SourceLimits {
  uint32_t max_src_states = 0;
  uint32_t max_src_nodes = 0;
  uint32_t max_src_conn = 0;
  uint32_t conn_rate_count = 0;  // max-src-conn-rate COUNT / SECONDS
  uint32_t conn_rate_seconds = 0;
  bool global = false;  // source-track global

  bool tracks() const {
    return max_src_states != 0 || max_src_nodes != 0 || max_src_conn != 0 || conn_rate_count != 0;
  }
  bool limits_connections() const { return max_src_conn != 0 || conn_rate_count != 0; }
};

// Whose limits a node counts under: a rule's (source-track rule) or every global rule's.
struct SourceOwner {
  const void* id = nullptr;                // the rule's identity; nullptr for source-track global
  std::atomic<uint32_t>* nodes = nullptr;  // the rule's node count, for max-src-nodes
  uint32_t rule = 0;                       // its number, for listings
  // What `id` and `nodes` point into, held by the node: an idle node may outlive every state and
  // rule set that held its rule's counters, and its identity must not pass to another rule's.
  std::shared_ptr<const void> keep;
};

struct SourceNode {
  static constexpr uint16_t kNotIdle = UINT16_MAX;

  SourceNode* next = nullptr;  // the bucket's chain, or the free list
  // While it has no states: its place in its shard's idle queue (idle_queue), and since when it
  // has had none, as the first expiry pass after saw it (Millis::min() until that pass).
  SourceNode* idle_prev = nullptr;
  SourceNode* idle_next = nullptr;
  Millis idle_since{Millis::min()};
  uint16_t idle_queue = kNotIdle;
  SourceOwner owner;
  IpAddress address;
  Family family = Family::V4;
  uint16_t shard = 0;
  uint32_t states = 0;
  uint32_t connections = 0;  // states counted as established connections
  // pf's connection rate threshold: a count (x kRateUnit) that decays linearly over the rate's
  // period, raised by kRateUnit per connection.
  uint64_t rate = 0;
  Millis rate_at{0};
  uint32_t rate_seconds = 0;  // the rate's period, from the limits it was admitted under
};

// A node as listings show it.
struct SourceView {
  SourceOwner owner;
  Family family = Family::V4;
  IpAddress address;
  uint32_t states = 0;
  uint32_t connections = 0;
  double rate = 0;  // connections counted over the last rate_seconds
  uint32_t rate_seconds = 0;
};

class SourceTable {
 public:
  enum class Admission : uint8_t {
    Admitted,
    TableFull,    // set limit src-nodes reached
    NodesLimit,   // the rule's max-src-nodes reached by a new address
    StatesLimit,  // the address holds max-src-states states
    NoMemory,
  };

  SourceTable(std::size_t shard_count, SipKey key, uint32_t limit);
  ~SourceTable();
  SourceTable(const SourceTable&) = delete;
  SourceTable& operator=(const SourceTable&) = delete;

  // Counts one more state of `address` under `owner`'s `limits`, creating its node if need be. On
  // Admitted, `node` is where the state keeps its share, to give back with release().
  Admission admit(const SourceLimits& limits, const SourceOwner& owner, Family family,
                  const IpAddress& address, SourceNode*& node) noexcept;

  // A state of the node is gone; `was_connection` if it had been counted by established(). The
  // last one leaves the node for `linger` (its rule's src.track), or for its rate's period where
  // that is longer and connections count against the rate; else it frees the node. With `forget`
  // (the node is being killed) the last one frees it at once, whatever its linger and rate.
  // Returns whether it freed the node.
  bool release(SourceNode* node, bool was_connection, Millis linger = Millis{0},
               bool forget = false) noexcept;

  // Frees the nodes without states that `choose` picks, the idle ones lingering included (pfctl
  // -K, -F Sources; StateTable::detach_sources() takes their states off them first). A node that
  // holds states stays. Returns how many it freed.
  std::size_t kill(const std::function<bool(const SourceNode&)>& choose);

  // Frees the nodes left without states whose src.track has run out by `now` (called with the
  // state table's expiry, from one thread). Returns how many.
  std::size_t expire(Millis now) noexcept;

  // What established() found: the node over max-src-conn, over max-src-conn-rate, or neither.
  struct ConnectionCheck {
    bool over_conn = false;
    bool over_rate = false;
    bool within() const noexcept { return !over_conn && !over_rate; }
  };

  // A TCP connection of the node completed its handshake at `now`: counts it, and its rate, and
  // says which of the limits the node is now over (the connection still counts until its state
  // goes).
  ConnectionCheck established(SourceNode* node, const SourceLimits& limits, Millis now) noexcept;

  // Visits every node as of `now`, shard by shard under its lock (control path).
  void for_each(Millis now, const std::function<void(const SourceView&)>& visit) const;

  // Every node, idle ones included.
  std::size_t size() const noexcept { return count_.load(std::memory_order_relaxed); }
  uint32_t limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
  void set_limit(uint32_t limit) noexcept { limit_.store(limit, std::memory_order_relaxed); }
  // The running rule set's `set timeout src.track`: the linger of a node whose last state's rule
  // names none, read when that state goes (pf reads pf_default_rule's then), so that a reload
  // changes it for the states made before it too.
  Millis default_linger() const noexcept { return Millis{default_linger_.load(std::memory_order_relaxed)}; }
  void set_default_linger(Millis linger) noexcept {
    default_linger_.store(linger.count(), std::memory_order_relaxed);
  }

  static constexpr uint64_t kRateUnit = 1000;  // pf's PF_THRESHOLD_MULT

 private:
  struct Shard;
  uint64_t hash(const void* owner, Family family, const IpAddress& address) const noexcept;
  static uint64_t decayed_rate(const SourceNode& node, Millis now) noexcept;
  // Unlinks the node from its bucket and the counts, and gives it back to the shard's free list.
  void free_node(Shard& shard, SourceNode* node) noexcept;

  SipKey key_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<std::size_t> count_{0};
  std::atomic<uint32_t> limit_;
  std::atomic<Millis::rep> default_linger_{0};
};

}  // namespace pairwall::engine
