#include "daemon/engine/state_table.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <new>
#include <tuple>
#include <utility>

namespace pairwall::engine {
namespace {

constexpr std::size_t kChunkEntries = 1024;
constexpr std::size_t kMinBuckets = 64;  // per shard

// Four to eight buckets per state at the limit (64 to 128 bytes of index per state, against 384 of
// entry): about nine hits in ten then find their entry first on its chain, and nearly all of the
// others second, the two entries a batch prefetches (Shard::Bucket); the few left pay a cache miss
// more. pairwall-bench engine --only state --seconds 0.5 --runs 3, three alternating invocations,
// state_lookup_mpps at 1M: with chains' heads alone (8-byte buckets) two buckets 4.00-4.19, four
// 4.32-4.41, eight 4.44-4.55; on a later host four 6.48-7.10 against 7.33-7.56 once the second
// entry is prefetched too, and 6.76-7.20 with that and half the buckets (the index's size then
// unchanged, 33 MB at a million states; 67 MB now).
std::size_t buckets_for(uint32_t limit, std::size_t shard_count) {
  return std::max<std::size_t>(kMinBuckets, std::bit_ceil(std::size_t{limit} * 4 / shard_count + 1));
}

// Past this many small chunks a shard takes its entries from 2 MiB chunks backed by transparent
// huge pages: at a million states the entries span hundreds of MB, and with 4 KiB pages nearly
// every state hit is also a TLB miss. Small tables keep small chunks (a huge page is 2 MiB of
// memory as soon as it is touched).
constexpr std::size_t kSmallChunks = 2;
constexpr std::size_t kHugeChunkBytes = std::size_t{2} << 20;
constexpr std::size_t kHugeChunkEntries = kHugeChunkBytes / sizeof(StateEntry);

static_assert(sizeof(StateEntry) % 64 == 0);
// Six lines: TranslatorRefs fills the padding after `proxy`, the entry's last free bytes.
static_assert(sizeof(StateEntry) == 384);

// Entries learned from the peer are filed by their time left, rounded up to one of 8 steps per
// power of two milliseconds above 1,024 (so at most an eighth of it late), in queues of their own:
// a record's time left says nothing of where the other entries of its duration's queue stand.
// Longer than 2^40 ms (35 years) counts as that.
constexpr uint16_t kTimeLeft = 0x8000;  // a queue index's bit for the time-left queues
constexpr int kTimeLeftFirstPower = 10;
constexpr int kTimeLeftLastPower = 40;
constexpr uint16_t kTimeLeftSteps = 1 + 8 * (kTimeLeftLastPower - kTimeLeftFirstPower);

uint16_t time_left_step(Millis time_left) {
  const uint64_t ms = static_cast<uint64_t>(
      std::clamp<Millis::rep>(time_left.count(), 1, Millis::rep{1} << kTimeLeftLastPower));
  if (ms <= uint64_t{1} << kTimeLeftFirstPower) return 0;
  const int power = std::bit_width(ms - 1) - 1;  // ms in (2^power, 2^(power + 1)]
  const uint64_t unit = uint64_t{1} << (power - 3);
  const uint64_t eighths = (ms + unit - 1) / unit;  // 9 to 16
  return static_cast<uint16_t>(1 + 8 * (power - kTimeLeftFirstPower) + (eighths - 9));
}

Millis time_left_of(uint16_t step) {
  if (step == 0) return Millis{Millis::rep{1} << kTimeLeftFirstPower};
  const int power = kTimeLeftFirstPower + (step - 1) / 8;
  return Millis{static_cast<Millis::rep>(uint64_t{9u + (step - 1u) % 8u} << (power - 3))};
}

// The counters of the rules that translated the entry's connection, each once (see
// StateTable::attach_translators).
std::array<rules::RuleStats*, 2> translator_stats(const StateEntry& e) noexcept {
  std::array<rules::RuleStats*, 2> out{};
  if (!e.translators.any() || e.creator_rules == nullptr) return out;
  for (int pass = 0; pass < 2; ++pass) {
    const uint32_t index = e.translators.get(pass);
    if (index != TranslatorRefs::kNone) out[pass] = e.creator_rules->translation_entry(index).stats.get();
  }
  if (out[1] == out[0]) out[1] = nullptr;
  return out;
}

// Adds the entry's packets and bytes since the last fold to its creator's and translators'
// counters (see StateTable::attach_creator), and to the entries of the creator's tables that count
// (TableCounters): as the creator's pass saw the connection, the initiator's packets coming in
// and the replies going out (an `out` rule's the other way round). `into` leaves out the rules
// whose counters have just been set to zero (StateTable::mark_counted()); the tables always count.
void fold_counters(StateEntry& e, StateTable::FoldInto into = {}) noexcept {
  if (e.creator == nullptr && !e.translators.any()) return;
  uint64_t packets[2];
  uint64_t bytes[2];
  for (int side = 0; side < 2; ++side)
    std::tie(packets[side], bytes[side]) = e.folded[side].advance(e.packets[side], e.bytes[side]);
  const auto add = [&](rules::RuleStats& stats) {
    stats.packets.fetch_add(packets[0] + packets[1], std::memory_order_relaxed);
    stats.bytes.fetch_add(bytes[0] + bytes[1], std::memory_order_relaxed);
  };
  if (e.creator != nullptr) {
    if (into.creator) add(*e.creator->stats);
    if (!e.creator->counted_tables.empty()) {
      // The addresses its pass saw: an in pass's after rdr, an out pass's after nat as well.
      const bool out = e.creator->direction == rules::Direction::Out;
      const StateKey& wire = e.key(1);
      const IpAddress& src = out ? wire.addr[0] : e.key(0).addr[0];
      for (int side = 0; side < 2; ++side) {
        if (packets[side] == 0) continue;
        rules::count_in_tables(e.creator->counted_tables, wire.family, src, wire.addr[1],
                               rules::counted_as(out == (side == 0), true), packets[side], bytes[side]);
      }
    }
  }
  if (!into.translators) return;
  for (rules::RuleStats* stats : translator_stats(e)) {
    if (stats != nullptr) add(*stats);
  }
}

// What the entry counted so far is not its creator's or translators' to fold.
void fold_from_here(StateEntry& e) noexcept {
  for (int side = 0; side < 2; ++side) e.folded[side].advance(e.packets[side], e.bytes[side]);
}

void prefetch_read(const void* p) {
  __builtin_prefetch(p, 0, 3);
}
void prefetch_write(const void* p) {
  __builtin_prefetch(p, 1, 3);
}

// The lines a hit by key `k` reads: the hot ones, and the wire link's for the wire key.
void prefetch_hot(const StateEntry* e, int k) {
  const auto* bytes = reinterpret_cast<const char*>(e);
  for (std::size_t offset = 0; offset < StateEntry::kHotBytes; offset += 64) prefetch_write(bytes + offset);
  if (k != 0) prefetch_read(&e->wire_link);
}

// A slab of entries: new[] for small chunks, a 2 MiB aligned block advised for huge pages for
// the others.
struct ChunkDeleter {
  std::size_t count = 0;
  bool huge = false;
  void operator()(StateEntry* p) const noexcept {
    if (!huge) {
      delete[] p;
      return;
    }
    std::destroy_n(p, count);
    std::free(p);
  }
};
using Chunk = std::unique_ptr<StateEntry, ChunkDeleter>;

Chunk make_chunk(bool want_huge) {
  if (want_huge) {
    if (void* block = std::aligned_alloc(kHugeChunkBytes, kHugeChunkBytes)) {
      // Advice only: without THP the block is ordinary memory.
      madvise(block, kHugeChunkBytes, MADV_HUGEPAGE);
      auto* entries = static_cast<StateEntry*>(block);
      std::uninitialized_default_construct_n(entries, kHugeChunkEntries);
      return Chunk(entries, ChunkDeleter{kHugeChunkEntries, true});
    }
  }
  return Chunk(new StateEntry[kChunkEntries], ChunkDeleter{kChunkEntries, false});
}

uintptr_t tag(StateEntry* e, int k) {
  return reinterpret_cast<uintptr_t>(e) | static_cast<uintptr_t>(k);
}
StateEntry* untag_entry(uintptr_t t) {
  return reinterpret_cast<StateEntry*>(t & ~uintptr_t{1});
}
int untag_key(uintptr_t t) {
  return static_cast<int>(t & 1);
}

// Does `packet_key` (as the packet travels) match `k`, and in which direction?
bool key_matches(const StateKey& k, const StateKey& packet_key, bool& reversed) {
  if (k.proto != packet_key.proto || k.family != packet_key.family || k.link != packet_key.link) return false;
  if (k.addr[0] == packet_key.addr[0] && k.port[0] == packet_key.port[0] && k.addr[1] == packet_key.addr[1] &&
      k.port[1] == packet_key.port[1]) {
    reversed = false;
    return true;
  }
  if (k.addr[0] == packet_key.addr[1] && k.port[0] == packet_key.port[1] && k.addr[1] == packet_key.addr[0] &&
      k.port[1] == packet_key.port[0]) {
    reversed = true;
    return true;
  }
  return false;
}

}  // namespace

struct StateTable::Shard {
  struct Queue {
    Millis duration{0};
    StateEntry* head = nullptr;
    StateEntry* tail = nullptr;
  };

  // A chain's first link, and a hint of its second for prefetch_entry(): set as links come and
  // go, and only ever prefetched, so that a stale hint costs a useless prefetch, never a wrong
  // answer. Aligned to its size, so that a bucket never straddles two cache lines: the vector's
  // allocator honours the alignment (C++17's aligned new).
  struct alignas(16) Bucket {
    uintptr_t head = 0;
    uintptr_t second = 0;
  };
  static_assert(sizeof(Bucket) == 16 && alignof(Bucket) == 16);

  alignas(64) SpinLock lock;
  std::vector<Bucket> buckets;
  // The bucket array's address and size for prefetch_bucket(), which reads them without the
  // lock and only ever computes an address from them.
  std::atomic<const Bucket*> bucket_base{nullptr};
  std::atomic<std::size_t> bucket_mask{0};
  std::size_t links = 0;      // key links filed in this shard
  std::vector<Queue> queues;  // one per timeout duration
  // One per step of time left (time_left_step()), for entries filed by file_learned(); made on
  // first use. An entry's `queue` names one of these with kTimeLeft set.
  std::vector<Queue> time_left_queues;
  std::vector<Chunk> chunks;
  StateEntry* free_list = nullptr;

  Bucket& bucket(uint64_t hash) { return buckets[hash & (buckets.size() - 1)]; }

  static uintptr_t next_of(uintptr_t link) {
    return link == 0 ? 0 : untag_entry(link)->link(untag_key(link)).next;
  }

  void publish_buckets() {
    bucket_base.store(buckets.data(), std::memory_order_relaxed);
    bucket_mask.store(buckets.size() - 1, std::memory_order_relaxed);
  }

  // Grows the bucket array when the chains get long. Rare (doubling), under the shard lock.
  void maybe_grow() {
    if (links <= buckets.size() * 2) return;
    rehash(buckets.size() * 4);
  }

  // Moves every link to a bucket array of `size` (a power of two). Under the shard lock.
  void rehash(std::size_t size) {
    std::vector<Bucket> bigger(size);
    for (const Bucket& b : buckets) {
      for (uintptr_t head = b.head; head != 0;) {
        StateEntry* e = untag_entry(head);
        const int k = untag_key(head);
        const uintptr_t next = e->link(k).next;
        Bucket& slot = bigger[e->link(k).hash & (bigger.size() - 1)];
        e->link(k).next = slot.head;
        slot.second = slot.head;
        slot.head = tag(e, k);
        head = next;
      }
    }
    buckets.swap(bigger);
    publish_buckets();
  }

  StateEntry* allocate() {
    if (free_list == nullptr) {
      Chunk chunk = make_chunk(chunks.size() >= kSmallChunks);
      StateEntry* entries = chunk.get();
      const std::size_t count = chunk.get_deleter().count;
      chunks.push_back(std::move(chunk));
      for (std::size_t i = count; i-- > 0;) {
        entries[i].queue_next = free_list;
        free_list = &entries[i];
      }
    }
    StateEntry* e = free_list;
    free_list = e->queue_next;
    e->queue_next = nullptr;
    return e;
  }

  void release(StateEntry* e) {
    *e = StateEntry{};
    e->queue_next = free_list;
    free_list = e;
  }

  Queue& queue(uint16_t index) {
    return index & kTimeLeft ? time_left_queues[index & ~kTimeLeft] : queues[index];
  }

  // Every queue's index, those by duration first.
  template <typename Visit>
  void for_each_queue(Visit visit) {
    for (std::size_t i = 0; i < queues.size(); ++i) visit(static_cast<uint16_t>(i));
    for (std::size_t i = 0; i < time_left_queues.size(); ++i) visit(static_cast<uint16_t>(i | kTimeLeft));
  }

  uint16_t queue_for(Millis duration) {
    for (std::size_t i = 0; i < queues.size(); ++i) {
      if (queues[i].duration == duration) return static_cast<uint16_t>(i);
    }
    queues.push_back(Queue{duration, nullptr, nullptr});
    return static_cast<uint16_t>(queues.size() - 1);
  }

  uint16_t queue_for_time_left(Millis time_left) {
    if (time_left_queues.empty()) {
      time_left_queues.resize(kTimeLeftSteps);
      for (uint16_t step = 0; step < kTimeLeftSteps; ++step)
        time_left_queues[step].duration = time_left_of(step);
    }
    return static_cast<uint16_t>(time_left_step(time_left) | kTimeLeft);
  }

  void queue_prepend(StateEntry* e, uint16_t index) {
    Queue& q = queue(index);
    e->queue = index;
    e->queue_prev = nullptr;
    e->queue_next = q.head;
    (q.head ? q.head->queue_prev : q.tail) = e;
    q.head = e;
  }

  void queue_unlink(StateEntry* e) {
    Queue& q = queue(e->queue);
    (e->queue_prev ? e->queue_prev->queue_next : q.head) = e->queue_next;
    (e->queue_next ? e->queue_next->queue_prev : q.tail) = e->queue_prev;
    e->queue_prev = e->queue_next = nullptr;
  }

  void queue_append(StateEntry* e, uint16_t index) {
    Queue& q = queue(index);
    e->queue = index;
    e->queue_prev = q.tail;
    e->queue_next = nullptr;
    (q.tail ? q.tail->queue_next : q.head) = e;
    q.tail = e;
  }

  // Finds `key` among this shard's links. Caller holds the lock.
  StateEntry* lookup(const StateKey& key, uint64_t hash, int& key_index, bool& reversed) {
    for (uintptr_t link = bucket(hash).head; link != 0;) {
      StateEntry* e = untag_entry(link);
      const int k = untag_key(link);
      // A hit reads all of the hot part: ask for its lines together rather than one miss after
      // another as the packet path gets to them.
      prefetch_hot(e, k);
      if (e->link(k).hash == hash && key_matches(e->key(k), key, reversed)) {
        key_index = k;
        return e;
      }
      link = e->link(k).next;
    }
    return nullptr;
  }

  void link_key(StateEntry* e, int k) {
    Bucket& b = bucket(e->link(k).hash);
    e->link(k).next = b.head;
    b.second = b.head;
    b.head = tag(e, k);
    ++links;
    maybe_grow();
  }

  void unlink_key(StateEntry* e, int k) {
    Bucket& b = bucket(e->link(k).hash);
    uintptr_t* slot = &b.head;
    while (*slot != 0) {
      StateEntry* cur = untag_entry(*slot);
      const int ck = untag_key(*slot);
      if (cur == e && ck == k) {
        *slot = e->link(k).next;
        b.second = next_of(b.head);
        --links;
        return;
      }
      slot = &cur->link(ck).next;
    }
  }
};

struct StateTable::IdShard {
  alignas(64) SpinLock lock;
  std::vector<StateEntry*> buckets = std::vector<StateEntry*>(kMinBuckets, nullptr);
  std::size_t count = 0;
};

// ---- Handle -------------------------------------------------------------------------------

StateTable::Handle::Handle(Handle&& other) noexcept {
  *this = std::move(other);
}

StateTable::Handle& StateTable::Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    release();
    entry_ = std::exchange(other.entry_, nullptr);
    locked_[0] = std::exchange(other.locked_[0], nullptr);
    locked_[1] = std::exchange(other.locked_[1], nullptr);
    key_index_ = other.key_index_;
    reversed_ = other.reversed_;
  }
  return *this;
}

void StateTable::Handle::release() noexcept {
  // Unlock in reverse acquisition order.
  if (locked_[1] != nullptr) locked_[1]->lock.unlock();
  if (locked_[0] != nullptr) locked_[0]->lock.unlock();
  locked_[0] = locked_[1] = nullptr;
  entry_ = nullptr;
}

// ---- StateTable ---------------------------------------------------------------------------

StateTable::StateTable(std::size_t shard_count, SipKey key, uint32_t limit, SourceTable* sources)
    : key_(key), limit_(limit), sources_(sources) {
  shard_count = std::bit_ceil(std::clamp<std::size_t>(shard_count, 1, 4096));
  const std::size_t buckets = buckets_for(limit, shard_count);
  for (std::size_t i = 0; i < shard_count; ++i) {
    auto shard = std::make_unique<Shard>();
    shard->buckets.assign(buckets, Shard::Bucket{});
    shard->publish_buckets();
    shards_.push_back(std::move(shard));
    id_shards_.push_back(std::make_unique<IdShard>());
    // Half as many for the ids: sync and control look states up by id, packets never do.
    id_shards_.back()->buckets.assign(std::max(kMinBuckets, buckets / 2), nullptr);
  }
}

StateTable::~StateTable() = default;

void StateTable::set_limit(uint32_t limit) noexcept {
  limit_.store(limit, std::memory_order_relaxed);
  // A raised limit gets its buckets now, on the control thread, rather than by growth steps on
  // the packet path with chains twice as long in between.
  const std::size_t buckets = buckets_for(limit, shards_.size());
  for (auto& shard : shards_) {
    std::lock_guard guard(shard->lock);
    if (shard->buckets.size() >= buckets) continue;
    try {
      shard->rehash(buckets);
    } catch (const std::bad_alloc&) {
      // Keep the smaller array: lookups stay correct, chains longer.
    }
  }
}

uint64_t StateTable::hash(const StateKey& k) const noexcept {
  // Order the endpoints so that both directions of a flow hash alike.
  const bool swap = std::tie(k.addr[0], k.port[0]) > std::tie(k.addr[1], k.port[1]);
  const IpAddress& a = k.addr[swap ? 1 : 0];
  const IpAddress& b = k.addr[swap ? 0 : 1];
  const uint64_t pa = k.port[swap ? 1 : 0];
  const uint64_t pb = k.port[swap ? 0 : 1];
  const uint64_t words[5] = {
      a.hi, a.lo, b.hi, b.lo,
      pa << 48 | pb << 32 | uint64_t{k.link} << 16 | static_cast<uint64_t>(k.family) << 8 | k.proto};
  return siphash13(key_, words, 5);
}

uint64_t StateTable::id_hash(const StateId& id) const noexcept {
  const uint64_t words[2] = {id.creator, id.counter};
  return siphash13(key_, words, 2);
}

uint16_t StateTable::shard_index(uint64_t hash) const noexcept {
  // High bits pick the shard, low bits the bucket: independent.
  return static_cast<uint16_t>((hash >> 48) & (shards_.size() - 1));
}

StateTable::Shard& StateTable::shard_for(uint64_t hash) noexcept {
  return *shards_[shard_index(hash)];
}

void StateTable::lock_pair(Handle& handle, uint16_t a, uint16_t b) noexcept {
  if (a > b) std::swap(a, b);
  shards_[a]->lock.lock();
  handle.locked_[0] = shards_[a].get();
  if (b != a) {
    shards_[b]->lock.lock();
    handle.locked_[1] = shards_[b].get();
  }
}

void StateTable::prefetch_bucket(uint64_t hash) const noexcept {
  Shard& shard = *shards_[shard_index(hash)];
  prefetch_write(&shard.lock);
  const Shard::Bucket* base = shard.bucket_base.load(std::memory_order_relaxed);
  prefetch_read(base + (hash & shard.bucket_mask.load(std::memory_order_relaxed)));
}

void StateTable::prefetch_entry(uint64_t hash) noexcept {
  Shard& shard = *shards_[shard_index(hash)];
  shard.lock.lock();
  const Shard::Bucket b = shard.bucket(hash);
  shard.lock.unlock();
  // Entries are never returned to the system while the table lives, so even one removed since
  // the lock was dropped is memory that may be prefetched.
  if (b.head != 0) prefetch_hot(untag_entry(b.head), untag_key(b.head));
  if (b.second != 0) prefetch_hot(untag_entry(b.second), untag_key(b.second));
}

StateTable::Handle StateTable::find(const StateKey& key, uint64_t hash) noexcept {
  const uint16_t s = shard_index(hash);
  Handle handle;
  shards_[s]->lock.lock();
  handle.locked_[0] = shards_[s].get();
  for (int attempt = 0; attempt < 4; ++attempt) {
    int k = 0;
    bool reversed = false;
    StateEntry* e = shards_[s]->lookup(key, hash, k, reversed);
    if (e == nullptr) return Handle{};
    const bool two_shards = e->translated() && e->home != e->wire_shard;
    // While `s` is held the entry cannot go away (removal needs both locks), so its other shard
    // is stable to read.
    const uint16_t other = e->home == s ? e->wire_shard : e->home;
    // Held after a relock below: the entry found again may be another one of the same key (the
    // first removed meanwhile, a new nat port taken), whose other shard is not the pair held.
    const bool both_held = handle.locked_[1] != nullptr && (handle.locked_[0] == shards_[other].get() ||
                                                            handle.locked_[1] == shards_[other].get());
    if (!two_shards || both_held) {
      handle.entry_ = e;
      handle.key_index_ = k;
      handle.reversed_ = reversed;
      return handle;
    }
    // The entry spans two shards and only `s` (of them) is held.
    if (handle.locked_[1] == nullptr && other > s) {
      shards_[other]->lock.lock();
      handle.locked_[1] = shards_[other].get();
      handle.entry_ = e;
      handle.key_index_ = k;
      handle.reversed_ = reversed;
      return handle;
    }
    // Wrong order: drop `s`, take both in order, look again.
    handle.release();
    lock_pair(handle, other, s);
  }
  return Handle{};  // the entry kept moving under us; the caller treats it as a miss
}

StateTable::Handle StateTable::find_by_id(const StateId& id) noexcept {
  const uint64_t h = id_hash(id);
  IdShard& ids = *id_shards_[h & (id_shards_.size() - 1)];
  StateKey key;
  uint64_t key_hash = 0;
  {
    std::lock_guard guard(ids.lock);
    StateEntry* e = ids.buckets[(h >> 16) & (ids.buckets.size() - 1)];
    while (e != nullptr && e->id != id) e = e->next_id;
    if (e == nullptr) return Handle{};
    key = e->key(0);
    key_hash = e->stack_link.hash;
  }
  Handle handle = find(key, key_hash);
  if (handle && handle->id != id) handle.release();  // replaced between the two lookups
  return handle;
}

StateTable::Handle StateTable::create(const StateKey& stack, const StateKey& wire, const StateId& id,
                                      TimeoutClass timeout, Millis timeout_duration, Millis now,
                                      CreateStatus& status) noexcept {
  const bool translated = !(stack == wire);
  const uint64_t h0 = hash(stack);
  const uint64_t h1 = translated ? hash(wire) : h0;
  const uint16_t s0 = shard_index(h0);
  const uint16_t s1 = shard_index(h1);

  Handle handle;
  lock_pair(handle, s0, s1);
  int k = 0;
  bool reversed = false;
  const bool exists = shards_[s0]->lookup(stack, h0, k, reversed) != nullptr ||
                      (translated && shards_[s1]->lookup(wire, h1, k, reversed) != nullptr);
  if (exists) {
    handle.release();
    status = CreateStatus::Exists;
    Handle found = find(stack, h0);
    return found ? std::move(found) : find(wire, h1);
  }
  if (count_.fetch_add(1, std::memory_order_relaxed) >= limit_.load(std::memory_order_relaxed)) {
    count_.fetch_sub(1, std::memory_order_relaxed);
    status = CreateStatus::Full;
    return Handle{};
  }

  Shard& home = *shards_[s0];
  StateEntry* e = nullptr;
  try {
    e = home.allocate();
  } catch (const std::bad_alloc&) {
    count_.fetch_sub(1, std::memory_order_relaxed);
    status = CreateStatus::NoMemory;
    return Handle{};
  }
  e->stack_link.key = stack;
  e->wire_link.key = wire;
  e->stack_link.hash = h0;
  e->wire_link.hash = h1;
  e->home = s0;
  e->wire_shard = s1;
  e->id = id;
  e->flags = translated ? stateflag::kTranslated : 0;
  e->created = now;
  e->last_seen = now;
  e->queued_at = now;
  e->timeout = timeout;
  home.link_key(e, 0);
  if (translated) shards_[s1]->link_key(e, 1);
  home.queue_append(e, home.queue_for(timeout_duration));

  const uint64_t ih = id_hash(id);
  IdShard& ids = *id_shards_[ih & (id_shards_.size() - 1)];
  {
    std::lock_guard guard(ids.lock);
    StateEntry*& slot = ids.buckets[(ih >> 16) & (ids.buckets.size() - 1)];
    e->next_id = slot;
    slot = e;
    ++ids.count;
    // Grows like the key index: the table is sized for the limit it was built with, and a rule
    // set may raise the limit later (sync looks every applied record up by id).
    if (ids.count > ids.buckets.size() * 2) {
      std::vector<StateEntry*> bigger(ids.buckets.size() * 4, nullptr);
      for (StateEntry* head : ids.buckets) {
        while (head != nullptr) {
          StateEntry* next = head->next_id;
          StateEntry*& to = bigger[(id_hash(head->id) >> 16) & (bigger.size() - 1)];
          head->next_id = to;
          to = head;
          head = next;
        }
      }
      ids.buckets.swap(bigger);
    }
  }

  handle.entry_ = e;
  handle.key_index_ = 0;
  handle.reversed_ = false;
  status = CreateStatus::Created;
  return handle;
}

void StateTable::touch(Handle& handle, TimeoutClass timeout, Millis duration, Millis last_seen) noexcept {
  StateEntry* e = handle.get();
  Shard& home = *shards_[e->home];
  e->timeout = timeout;
  if (last_seen > e->last_seen) e->last_seen = last_seen;
  uint16_t q = e->queue;
  if (home.queue(q).duration != duration) {
    try {
      q = home.queue_for(duration);
    } catch (const std::bad_alloc&) {
      // Keep the old queue: the entry expires on its previous timeout, which is still bounded.
    }
  }
  if (q == e->queue && e->last_seen - e->queued_at < kRequeueAfter) return;
  fold_counters(*e);
  home.queue_unlink(e);
  home.queue_append(e, q);
  e->queued_at = e->last_seen;
}

void StateTable::file_learned(Handle& handle, TimeoutClass timeout, Millis duration, Millis last_seen,
                              Millis now) noexcept {
  StateEntry* e = handle.get();
  if (last_seen > e->last_seen) e->last_seen = last_seen;
  // Seen of late (here or by the peer): its place at its duration queue's tail is in order.
  if (e->last_seen + kRequeueAfter > now) return touch(handle, timeout, duration, e->last_seen);
  Shard& home = *shards_[e->home];
  uint16_t q = 0;
  try {
    q = home.queue_for_time_left(e->last_seen + duration - now);
  } catch (const std::bad_alloc&) {
    return touch(handle, timeout, duration, e->last_seen);  // late, but bounded by `duration`
  }
  e->timeout = timeout;
  home.queue_unlink(e);
  home.queue_append(e, q);
  e->queued_at = now;
}

void StateTable::attach_creator(Handle& handle, const rules::CompiledRule* rule,
                                std::shared_ptr<const rules::RuleSet> rules) noexcept {
  StateEntry* e = handle.get();
  e->creator = rule;
  e->creator_rules = std::move(rules);
  fold_from_here(*e);
  if (rule != nullptr) rule->stats->states_current.fetch_add(1, std::memory_order_relaxed);
}

void StateTable::attach_translators(Handle& handle, TranslatorRefs refs,
                                    std::shared_ptr<const rules::RuleSet> rules) noexcept {
  StateEntry* e = handle.get();
  if (e->creator_rules == nullptr) e->creator_rules = std::move(rules);
  e->translators = refs;
  fold_from_here(*e);
  for (rules::RuleStats* stats : translator_stats(*e)) {
    if (stats != nullptr) stats->states_current.fetch_add(1, std::memory_order_relaxed);
  }
}

// The one place an entry leaves the table.
void StateTable::unlink_and_free(StateEntry* e, FlowEnd end) noexcept {
  // Only the flows this node forwarded: a state learned from the peer and never taken over passed
  // no packet here.
  if (flows_ != nullptr && e->creator != nullptr && e->creator->pflow &&
      (e->packets[0] | e->packets[1]) != 0) {
    FlowRecord flow;
    flow.stack = e->key(0);
    flow.wire = e->key(1);
    for (int side = 0; side < 2; ++side) {
      flow.packets[side] = e->packets[side];
      flow.bytes[side] = e->bytes[side];
    }
    flow.created = e->created;
    flow.last_seen = e->last_seen;
    flow.end = end;
    flows_->push(flow);
  }
  fold_counters(*e);
  if (e->creator != nullptr) e->creator->stats->states_current.fetch_sub(1, std::memory_order_relaxed);
  for (rules::RuleStats* stats : translator_stats(*e)) {
    if (stats != nullptr) stats->states_current.fetch_sub(1, std::memory_order_relaxed);
  }
  if (e->source != nullptr) {
    // pf dates the node's end by the src.track of the rule of the state that was its last, or
    // where that rule names none, by the global one in force now.
    const Millis linger = e->creator != nullptr && e->creator->own_source_track
                              ? e->creator->timeouts.source_track
                              : sources_->default_linger();
    sources_->release(e->source, (e->flags & stateflag::kSourceConnection) != 0, linger);
  }
  Shard& home = *shards_[e->home];
  home.unlink_key(e, 0);
  if (e->translated()) shards_[e->wire_shard]->unlink_key(e, 1);
  home.queue_unlink(e);
  const uint64_t ih = id_hash(e->id);
  IdShard& ids = *id_shards_[ih & (id_shards_.size() - 1)];
  {
    std::lock_guard guard(ids.lock);
    StateEntry** slot = &ids.buckets[(ih >> 16) & (ids.buckets.size() - 1)];
    while (*slot != nullptr && *slot != e) slot = &(*slot)->next_id;
    if (*slot == e) {
      *slot = e->next_id;
      --ids.count;
    }
  }
  home.release(e);
  count_.fetch_sub(1, std::memory_order_relaxed);
}

void StateTable::erase(Handle& handle, FlowEnd end) noexcept {
  if (!handle) return;
  unlink_and_free(handle.get(), end);
  handle.release();
}

namespace {

// A scaled queue keeps its order: its entries' deadlines all shrink by the same factor.
Millis scaled(Millis duration, double scale) {
  if (scale >= 1.0) return duration;
  return Millis{static_cast<Millis::rep>(static_cast<double>(duration.count()) * scale)};
}

// A time left under `scale`, as the duration whose scaled value (as expire() scales a queue's) it is.
Millis unscaled(Millis left, double scale) {
  if (scale >= 1.0 || scale <= 0.0) return left;
  return Millis{static_cast<Millis::rep>(static_cast<double>(left.count()) / scale) + 1};
}

}  // namespace

std::size_t StateTable::expire(Millis now, const std::function<void(const StateEntry&)>& on_expired,
                               double timeout_scale) {
  return remove_expired(now, on_expired, timeout_scale, false);
}

std::size_t StateTable::remove_expired(Millis now, const std::function<void(const StateEntry&)>& on_expired,
                                       double timeout_scale, bool forced) {
  // A TCP state that expires closing or closed ends a connection that closed; any other, one that
  // fell idle.
  const auto flow_end = [forced](const StateEntry& e) {
    if (forced) return FlowEnd::ForcedEnd;
    const bool closed = e.timeout == TimeoutClass::TcpClosing || e.timeout == TimeoutClass::TcpFinWait ||
                        e.timeout == TimeoutClass::TcpClosed;
    return closed ? FlowEnd::EndOfFlow : FlowEnd::IdleTimeout;
  };
  std::size_t removed = 0;
  for (uint16_t s = 0; s < shards_.size(); ++s) {
    Shard& shard = *shards_[s];
    for (;;) {
      Handle handle;
      shard.lock.lock();
      handle.locked_[0] = &shard;
      // Pop expired heads that live in this shard alone; stop at the first that spans two.
      StateEntry* cross = nullptr;
      shard.for_each_queue([&](uint16_t qi) {
        auto& q = shard.queue(qi);
        const Millis duration = scaled(q.duration, timeout_scale);
        while (cross == nullptr && q.head != nullptr && q.head->queued_at + duration <= now) {
          StateEntry* e = q.head;
          if (e->last_seen + duration > now) {
            // Seen since it was queued, and so due within kRequeueAfter (touch() requeues an entry
            // seen later than that). At the tail as of its last packet while that keeps the queue
            // in order; behind entries queued after that packet, it would wait for them, up to a
            // timeout late: filed by its time left then, as file_learned() files.
            fold_counters(*e);
            shard.queue_unlink(e);
            bool in_order = q.tail == nullptr || q.tail->queued_at <= e->last_seen;
            if (!in_order) {
              try {
                shard.queue_append(
                    e, shard.queue_for_time_left(unscaled(e->last_seen + duration - now, timeout_scale)));
                e->queued_at = std::max(now, e->last_seen);
              } catch (const std::bad_alloc&) {
                in_order = true;  // late, but bounded by `duration`
              }
            }
            if (in_order) {
              shard.queue_append(e, qi);
              e->queued_at = e->last_seen;
            }
            continue;
          }
          if (e->translated() && e->wire_shard != s) {
            cross = e;
            break;
          }
          if (on_expired) on_expired(*e);
          unlink_and_free(e, flow_end(*e));
          ++removed;
        }
      });
      if (cross == nullptr) break;  // handle unlocks
      // Take both locks in order, then re-check that the entry is still an expired head.
      const uint16_t other = cross->wire_shard;
      if (other > s) {
        shards_[other]->lock.lock();
        handle.locked_[1] = shards_[other].get();
      } else {
        handle.release();
        lock_pair(handle, other, s);
      }
      const Shard::Queue& q = shard.queue(cross->queue);
      if (q.head == cross && cross->home == s && cross->wire_shard == other &&
          cross->last_seen + scaled(q.duration, timeout_scale) <= now) {
        if (on_expired) on_expired(*cross);
        unlink_and_free(cross, flow_end(*cross));
        ++removed;
      }
    }
  }
  return removed;
}

std::size_t StateTable::clear(const std::function<void(const StateEntry&)>& on_removed) {
  std::size_t removed = 0;
  for (;;) {
    // Expiring everything at "the end of time" removes each entry exactly once, with the same
    // cross-shard locking discipline as expire().
    const std::size_t n = remove_expired(Millis::max() / 2, on_removed, 1.0, true);
    removed += n;
    if (n == 0) break;
  }
  return removed;
}

std::size_t StateTable::refile(Millis now, const std::function<Millis(const StateEntry&)>& duration_of) {
  std::size_t moved = 0;
  for (const auto& shard : shards_) {
    std::lock_guard guard(shard->lock);
    shard->for_each_queue([&](uint16_t qi) {
      StateEntry* next = nullptr;
      for (StateEntry* e = shard->queue(qi).head; e != nullptr; e = next) {
        next = e->queue_next;
        const Millis duration = duration_of(*e);
        if (!(qi & kTimeLeft) && shard->queue(qi).duration == duration) continue;
        const Millis left = e->last_seen + duration - now;
        uint16_t filed = 0;
        try {
          filed = shard->queue_for_time_left(std::max(Millis{0}, left));
        } catch (const std::bad_alloc&) {
          return;  // the rest keep their places: due on their earlier timeouts, still bounded
        }
        if (filed == qi && left > Millis{0}) continue;
        fold_counters(*e);
        shard->queue_unlink(e);
        if (left > Millis{0}) {
          shard->queue_append(e, filed);
          e->queued_at = now;
        } else {
          // Past its new lifetime already: at the head of the shortest queue, due now, so that the
          // expiry pass that follows removes it. Every entry ahead of a head that is not due is due.
          shard->queue_prepend(e, filed);
          e->queued_at = now - shard->queue(filed).duration;
        }
        ++moved;
      }
    });
  }
  return moved;
}

void StateTable::mark_counted(const std::function<bool(const StateEntry&)>& creator_zeroed,
                              bool translators_zeroed) {
  for (const auto& shard : shards_) {
    std::lock_guard guard(shard->lock);
    shard->for_each_queue([&](uint16_t qi) {
      for (StateEntry* e = shard->queue(qi).head; e != nullptr; e = e->queue_next) {
        if (creator_zeroed(*e)) fold_counters(*e, FoldInto{false, !translators_zeroed});
      }
    });
  }
}

void StateTable::for_each(const std::function<void(const StateEntry&)>& visit) const {
  for (const auto& shard : shards_) {
    std::lock_guard guard(shard->lock);
    shard->for_each_queue([&](uint16_t qi) {
      for (const StateEntry* e = shard->queue(qi).head; e != nullptr; e = e->queue_next) visit(*e);
    });
  }
}

StateTable::SourcesDetached StateTable::detach_sources(const std::function<bool(const SourceNode&)>& choose) {
  SourcesDetached detached;
  if (sources_ == nullptr) return detached;
  for (const auto& shard : shards_) {
    std::lock_guard guard(shard->lock);
    shard->for_each_queue([&](uint16_t qi) {
      for (StateEntry* e = shard->queue(qi).head; e != nullptr; e = e->queue_next) {
        // The entry's node cannot go while the entry holds it: reading its key is safe here.
        if (e->source == nullptr || !choose(*e->source)) continue;
        const bool connection = (e->flags & stateflag::kSourceConnection) != 0;
        detached.nodes_freed += sources_->release(e->source, connection, Millis{0}, true);
        e->source = nullptr;
        e->flags = static_cast<uint8_t>(e->flags & ~stateflag::kSourceConnection);
        ++detached.states;
      }
    });
  }
  return detached;
}

}  // namespace pairwall::engine
