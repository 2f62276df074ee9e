#include "daemon/engine/source_table.h"

#include <algorithm>
#include <bit>
#include <mutex>
#include <new>

#include "daemon/engine/spin_lock.h"

namespace pairwall::engine {

namespace {
constexpr std::size_t kChunkNodes = 64;
constexpr std::size_t kMinBuckets = 16;
}  // namespace

struct SourceTable::Shard {
  // The nodes without states that live on for `duration`, oldest first.
  struct IdleQueue {
    Millis duration{0};
    SourceNode* head = nullptr;
    SourceNode* tail = nullptr;
  };

  alignas(64) SpinLock lock;
  std::vector<SourceNode*> buckets = std::vector<SourceNode*>(kMinBuckets, nullptr);
  std::size_t count = 0;
  SourceNode* free = nullptr;
  std::vector<std::unique_ptr<SourceNode[]>> chunks;
  std::vector<IdleQueue> idle;  // one per distinct src.track met: a handful in any rule set

  // Appends the node to the idle queue for `duration`; false when a new queue found no memory.
  bool park(SourceNode* node, Millis duration) {
    std::size_t q = 0;
    while (q < idle.size() && idle[q].duration != duration) ++q;
    if (q == idle.size()) {
      if (q == SourceNode::kNotIdle) return false;
      try {
        idle.push_back(IdleQueue{duration});
      } catch (const std::bad_alloc&) {
        return false;
      }
    }
    IdleQueue& queue = idle[q];
    node->idle_queue = static_cast<uint16_t>(q);
    node->idle_since = Millis::min();
    node->idle_prev = queue.tail;
    node->idle_next = nullptr;
    (queue.tail != nullptr ? queue.tail->idle_next : queue.head) = node;
    queue.tail = node;
    return true;
  }

  void unpark(SourceNode* node) {
    IdleQueue& queue = idle[node->idle_queue];
    (node->idle_prev != nullptr ? node->idle_prev->idle_next : queue.head) = node->idle_next;
    (node->idle_next != nullptr ? node->idle_next->idle_prev : queue.tail) = node->idle_prev;
    node->idle_prev = node->idle_next = nullptr;
    node->idle_queue = SourceNode::kNotIdle;
  }

  SourceNode*& bucket(uint64_t hash) { return buckets[(hash >> 16) & (buckets.size() - 1)]; }

  // Doubles the buckets once the chains average one node; kept as they are when memory is short.
  void grow(SourceTable& table) {
    if (count < buckets.size()) return;
    std::vector<SourceNode*> bigger(buckets.size() * 2, nullptr);
    for (SourceNode* head : buckets) {
      while (head != nullptr) {
        SourceNode* next = head->next;
        SourceNode*& slot =
            bigger[(table.hash(head->owner.id, head->family, head->address) >> 16) & (bigger.size() - 1)];
        head->next = slot;
        slot = head;
        head = next;
      }
    }
    buckets.swap(bigger);
  }

  SourceNode* allocate() {
    if (free == nullptr) {
      chunks.push_back(std::make_unique<SourceNode[]>(kChunkNodes));
      for (std::size_t i = 0; i < kChunkNodes; ++i) {
        chunks.back()[i].next = free;
        free = &chunks.back()[i];
      }
    }
    SourceNode* node = free;
    free = node->next;
    *node = SourceNode{};
    return node;
  }
};

SourceTable::SourceTable(std::size_t shard_count, SipKey key, uint32_t limit) : key_(key), limit_(limit) {
  shard_count = std::bit_ceil(std::clamp<std::size_t>(shard_count, 1, 4096));
  for (std::size_t i = 0; i < shard_count; ++i) shards_.push_back(std::make_unique<Shard>());
}

SourceTable::~SourceTable() = default;

uint64_t SourceTable::hash(const void* owner, Family family, const IpAddress& address) const noexcept {
  const uint64_t words[3] = {reinterpret_cast<uintptr_t>(owner) ^ static_cast<uint64_t>(family), address.hi,
                             address.lo};
  return siphash13(key_, words, 3);
}

SourceTable::Admission SourceTable::admit(const SourceLimits& limits, const SourceOwner& owner, Family family,
                                          const IpAddress& address, SourceNode*& node) noexcept {
  const uint64_t h = hash(owner.id, family, address);
  const auto shard_index = static_cast<uint16_t>(h & (shards_.size() - 1));
  Shard& shard = *shards_[shard_index];
  std::lock_guard guard(shard.lock);
  SourceNode* n = shard.bucket(h);
  while (n != nullptr && (n->owner.id != owner.id || n->family != family || n->address != address))
    n = n->next;
  if (n == nullptr) {
    if (count_.load(std::memory_order_relaxed) >= limit_.load(std::memory_order_relaxed))
      return Admission::TableFull;
    // Checked and counted under this shard's lock only: two workers creating a rule's last
    // allowed node at once in different shards can overshoot max-src-nodes by one each.
    if (limits.max_src_nodes != 0 && owner.nodes != nullptr &&
        owner.nodes->load(std::memory_order_relaxed) >= limits.max_src_nodes)
      return Admission::NodesLimit;
    try {
      n = shard.allocate();
      ++shard.count;
      shard.grow(*this);
    } catch (const std::bad_alloc&) {
      if (n != nullptr) {
        --shard.count;
        n->next = shard.free;
        shard.free = n;
      }
      return Admission::NoMemory;
    }
    n->owner = owner;
    n->rate_seconds = limits.conn_rate_seconds;
    n->family = family;
    n->address = address;
    n->shard = shard_index;
    SourceNode*& head = shard.bucket(h);
    n->next = head;
    head = n;
    count_.fetch_add(1, std::memory_order_relaxed);
    if (owner.nodes != nullptr) owner.nodes->fetch_add(1, std::memory_order_relaxed);
  } else if (limits.max_src_states != 0 && n->states >= limits.max_src_states) {
    return Admission::StatesLimit;
  } else if (n->idle_queue != SourceNode::kNotIdle) {
    shard.unpark(n);
  }
  ++n->states;
  node = n;
  return Admission::Admitted;
}

bool SourceTable::release(SourceNode* node, bool was_connection, Millis linger, bool forget) noexcept {
  Shard& shard = *shards_[node->shard];
  std::lock_guard guard(shard.lock);
  if (was_connection && node->connections > 0) --node->connections;
  if (--node->states > 0) return false;
  // As pfctl raises a rule's src.track to its max-src-conn-rate seconds: while connections still
  // count against its rate, the node outlives its last state by the rate's period, or a rate
  // longer than the states of closed connections live (10/3600) would start again from nothing.
  if (node->rate != 0) linger = std::max(linger, Millis{static_cast<Millis::rep>(node->rate_seconds) * 1000});
  // Short of memory for a new queue, the node goes now rather than never.
  if (!forget && linger > Millis{0} && shard.park(node, linger)) return false;
  free_node(shard, node);
  return true;
}

std::size_t SourceTable::kill(const std::function<bool(const SourceNode&)>& choose) {
  std::size_t freed = 0;
  for (const auto& owned : shards_) {
    Shard& shard = *owned;
    std::lock_guard guard(shard.lock);
    for (SourceNode* const head : shard.buckets) {  // a chain's walk keeps its own next
      for (SourceNode *n = head, *next = nullptr; n != nullptr; n = next) {
        next = n->next;
        if (n->states != 0 || !choose(*n)) continue;
        if (n->idle_queue != SourceNode::kNotIdle) shard.unpark(n);
        free_node(shard, n);
        ++freed;
      }
    }
  }
  return freed;
}

void SourceTable::free_node(Shard& shard, SourceNode* node) noexcept {
  SourceNode** slot = &shard.bucket(hash(node->owner.id, node->family, node->address));
  while (*slot != nullptr && *slot != node) slot = &(*slot)->next;
  if (*slot == node) *slot = node->next;
  if (node->owner.nodes != nullptr) node->owner.nodes->fetch_sub(1, std::memory_order_relaxed);
  node->owner = SourceOwner{};
  --shard.count;
  count_.fetch_sub(1, std::memory_order_relaxed);
  node->next = shard.free;
  shard.free = node;
}

std::size_t SourceTable::expire(Millis now) noexcept {
  std::size_t freed = 0;
  for (const auto& owned : shards_) {
    Shard& shard = *owned;
    std::lock_guard guard(shard.lock);
    for (Shard::IdleQueue& queue : shard.idle) {
      // The nodes that went idle since the last pass are the queue's undated tail.
      for (SourceNode* n = queue.tail; n != nullptr && n->idle_since == Millis::min(); n = n->idle_prev)
        n->idle_since = now;
      while (queue.head != nullptr && queue.head->idle_since + queue.duration <= now) {
        SourceNode* n = queue.head;
        shard.unpark(n);
        free_node(shard, n);
        ++freed;
      }
    }
  }
  return freed;
}

SourceTable::ConnectionCheck SourceTable::established(SourceNode* node, const SourceLimits& limits,
                                                      Millis now) noexcept {
  Shard& shard = *shards_[node->shard];
  std::lock_guard guard(shard.lock);
  ++node->connections;
  ConnectionCheck check;
  check.over_conn = limits.max_src_conn != 0 && node->connections > limits.max_src_conn;
  if (limits.conn_rate_count != 0) {
    node->rate_seconds = limits.conn_rate_seconds;
    node->rate = decayed_rate(*node, now) + kRateUnit;
    node->rate_at = now;
    check.over_rate = node->rate > static_cast<uint64_t>(limits.conn_rate_count) * kRateUnit;
  }
  return check;
}

// pf_add_threshold's decay: the count falls in proportion to the time since it was last raised,
// to nothing after a whole period.
uint64_t SourceTable::decayed_rate(const SourceNode& node, Millis now) noexcept {
  const auto period = static_cast<uint64_t>(node.rate_seconds) * 1000;
  const auto elapsed = static_cast<uint64_t>(std::max<int64_t>(0, (now - node.rate_at).count()));
  if (elapsed >= period) return 0;
  // In 128 bits: a day's period in milliseconds times a count of some 10^11 (a source that keeps
  // completing thousands of handshakes a second) no longer fits in 64.
  __extension__ typedef unsigned __int128 Wide;
  return node.rate - static_cast<uint64_t>(static_cast<Wide>(node.rate) * elapsed / period);
}

void SourceTable::for_each(Millis now, const std::function<void(const SourceView&)>& visit) const {
  for (const auto& shard : shards_) {
    std::lock_guard guard(shard->lock);
    for (const SourceNode* head : shard->buckets) {
      for (const SourceNode* n = head; n != nullptr; n = n->next) {
        SourceView v;
        v.owner = n->owner;
        v.family = n->family;
        v.address = n->address;
        v.states = n->states;
        v.connections = n->connections;
        v.rate = static_cast<double>(decayed_rate(*n, now)) / kRateUnit;
        v.rate_seconds = n->rate_seconds;
        visit(v);
      }
    }
  }
}

}  // namespace pairwall::engine
