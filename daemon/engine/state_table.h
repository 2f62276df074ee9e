// The state table: one entry per connection, sharded by key hash with one lock per shard.
//
// Indexes. Every entry is reachable by its stack key, by its wire key when the state translates
// (the two keys then usually hash to different shards), and by its StateId (for sync updates that
// carry only the id, as pfsync's compact updates do). Keys hash symmetrically, so a packet from
// either end finds the entry with one lookup.
//
// Locking. An entry belongs to the shard of its stack key (its "home"): the home lock protects
// its fields and its expiry queue. A translated entry whose wire key lives in another shard is
// only touched with both locks held, always taken in ascending shard order. The id index has its
// own locks, never held while a shard lock is being acquired.
//
// Expiry. Each shard keeps one FIFO queue per distinct timeout duration, ordered by the time each
// entry joined it. A packet only records its time; the entry moves to the tail when its class
// changes or its place is kRequeueAfter old, so a busy flow costs no list surgery (and no cache
// misses on its neighbours) per packet. expire() pops heads: an expired head is removed, a head
// seen since it was queued (so due within kRequeueAfter) goes back to the tail, or, when entries
// queued after its last packet are there (it would wait for them, up to a timeout late), is filed
// by its time left. Work per call is O(expired + requeued), each entry requeued at most once per
// timeout period, never a sweep (the load-model thesis measured the jitter of pf's purge sweep);
// an entry expires at most about kRequeueAfter late (one learned from the peer, filed by its time
// left, at most an eighth of that).
//
// Memory. Entries come from per-shard slabs of fixed-size chunks and return to a free list; the
// table never exceeds its limit, and hitting the limit is counted by the caller (StateLimit).
// Past two small chunks a shard's chunks are 2 MiB blocks advised for transparent huge pages, so
// that a large table does not cost a TLB miss per hit. Chunks are only freed with the table.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "daemon/engine/flow_log.h"
#include "daemon/engine/rules/ruleset.h"
#include "daemon/engine/siphash.h"
#include "daemon/engine/source_table.h"
#include "daemon/engine/spin_lock.h"
#include "daemon/engine/state.h"
#include "daemon/engine/tcp_scrub.h"
#include "daemon/engine/time.h"
#include "daemon/engine/timeouts.h"

namespace pairwall::engine {

// One of an entry's two keys and its link in the key index.
struct KeyLink {
  uintptr_t next = 0;  // tagged: entry pointer | key index of the next link in the bucket's chain
  uint64_t hash = 0;
  StateKey key;
};

// The translation rules (nat, rdr, binat) of this node that rewrote a connection, [0] on its in
// pass and [1] on its out pass, as indexes of RuleSet::translation_entry() in the entry's
// creator_rules: 12 bits each, in the three bytes the entry has left. kNone for a pass no rule
// translated, and for a state learned from a peer whose rule set's digest differs (of the same
// digest, its translation rules are this node's by number, as pfsync takes a state's nat rule).
// An entry at kNone or past it, in a rule set of more translation entries than
// that, names no rule: its rule counts the connection's creation and first packet alone.
class TranslatorRefs {
 public:
  static constexpr uint32_t kNone = 0xfff;

  uint32_t get(int pass) const noexcept {
    return pass == 0 ? bytes_[0] | (bytes_[1] & 0x0fu) << 8 : bytes_[1] >> 4 | uint32_t{bytes_[2]} << 4;
  }
  void set(int pass, uint32_t index) noexcept {
    if (index > kNone) index = kNone;
    if (pass == 0) {
      bytes_[0] = static_cast<uint8_t>(index);
      bytes_[1] = static_cast<uint8_t>((bytes_[1] & 0xf0u) | index >> 8);
    } else {
      bytes_[1] = static_cast<uint8_t>((bytes_[1] & 0x0fu) | (index & 0x0fu) << 4);
      bytes_[2] = static_cast<uint8_t>(index >> 4);
    }
  }
  bool any() const noexcept { return get(0) != kNone || get(1) != kNone; }

 private:
  uint8_t bytes_[3] = {0xff, 0xff, 0xff};
};

// How many of one direction's packets and bytes a state's rules have counted (fold_counters()),
// modulo 2^24 and 2^40: what it counts between two folds, which come at least once a second while
// packets arrive (StateTable::touch()), stays far below either. One word where two would take
// the entry past six cache lines.
struct FoldMark {
  static constexpr uint64_t kPacketMask = (uint64_t{1} << 24) - 1;
  static constexpr uint64_t kByteMask = (uint64_t{1} << 40) - 1;
  uint64_t packets : 24 = 0;
  uint64_t bytes : 40 = 0;

  // What `packets_now` and `bytes_now` add to the mark, which then holds them.
  std::pair<uint64_t, uint64_t> advance(uint64_t packets_now, uint64_t bytes_now) noexcept {
    const uint64_t p = (packets_now - packets) & kPacketMask;
    const uint64_t b = (bytes_now - bytes) & kByteMask;
    packets = packets_now & kPacketMask;
    bytes = bytes_now & kByteMask;
    return {p, b};
  }
};
static_assert(sizeof(FoldMark) == 8);

// Laid out hot then cold: every field a packet hitting the state by its stack key reads or writes
// sits in the first kHotBytes (three cache lines, from a 64-byte aligned start), so that a batch
// can prefetch exactly those lines for each packet before deciding any (Engine::process_batch);
// the wire link, which only translated states' packets from the far side meet, takes the line
// after them, prefetched with them when the lookup is for that key. Against four hot lines with
// both keys up front (pairwall-bench engine --only state --seconds 0.5 --runs 3, three
// alternating invocations): state_lookup_mpps 4.58-5.08 -> 5.29-5.47 at 100k states, 4.17-4.41
// -> 4.35-4.58 at 1M.
struct alignas(64) StateEntry {
  static constexpr std::size_t kHotBytes = 192;

  // Line 0: the stack link (lookup), the time of the last packet.
  KeyLink stack_link;  // as the first packet arrived
  Millis last_seen{0};
  // Line 1: the tracking and the counters.
  PeerTracking peer[2];  // [0] the initiator, [1] the responder
  uint64_t packets[2] = {0, 0};
  uint64_t bytes[2] = {0, 0};
  // Line 2: identity, expiry and sync.
  StateId id;
  // `if-bound` (if_bound()): the interface of each pass whose rule bound the state to it, [0] the in
  // pass's, by which the initiator's packets arrive and its replies leave, [1] the out pass's, the
  // other way round; kNoIface for a pass that floats. As pf's per-interface states, the state knows
  // only the packets of its connection that cross those interfaces.
  IfaceId bound[2] = {kNoIface, kNoIface};
  Millis queued_at{0};  // when the entry took its place in its expiry queue
  Millis last_synced{0};
  // The rule that created the state, kept alive across reloads by creator_rules.
  const rules::CompiledRule* creator = nullptr;
  uint32_t rule = rules::kNoRule;
  uint16_t queue = 0;
  uint16_t home = 0;
  uint16_t wire_shard = 0;
  TimeoutClass timeout = TimeoutClass::TcpFirst;
  uint8_t flags = 0;       // stateflag::*
  bool adopted = true;     // false while the peer's records moved the tracking last (not seen here since)
  bool scrub_tcp = false;  // `scrub reassemble tcp`: its segments are normalized by `scrub` below
  // The interface the packets this node decides before routing leave by (their scrub out): an rdr'd
  // connection's from its initiator, a nat'd one's replies. kNoIface where unknown (learned from
  // the peer: asked of the Router then) or delivered to this node.
  IfaceId leaves_by = kNoIface;
  SourceNode* source = nullptr;  // the source node counting it (its rule tracks sources)

  // Line 3: the wire link (after translation; equal to the stack key's without).
  alignas(64) KeyLink wire_link;

  // Cold: creation, requeue (at most once a second per entry), removal, snapshots.
  StateEntry* next_id = nullptr;
  StateEntry* queue_prev = nullptr;
  StateEntry* queue_next = nullptr;
  Millis created{0};
  uint64_t named_at = 0;  // the peer's sync sequence that last named it (Engine::apply)
  std::shared_ptr<const rules::RuleSet> creator_rules;
  // `modulate state` (stateflag::kModulated): what each end's sequence numbers gain on the way
  // through. Cold: read only for modulated states, which pay for the extra line.
  uint32_t seqdiff[2] = {0, 0};
  // `synproxy state` (which sets kModulated as well): the handshakes' progress, and the initial
  // sequence numbers this node chose, [0] answering the initiator, [1] opening to the responder.
  Proxy proxy = Proxy::None;
  TranslatorRefs translators;  // counted like the creator (StateTable::attach_translators)
  uint32_t proxy_isn[2] = {0, 0};
  // `scrub reassemble tcp` (scrub_tcp), per end: the figures the peer gets, and this node's watch
  // over the end's timestamps.
  TcpScrub scrub[2];
  TimestampWatch watch[2];
  // What of packets and bytes, per direction as packets and bytes, the creator's counters hold
  // already (StateTable folds the rest in).
  FoldMark folded[2];

  // Key 0 is the stack key, key 1 the wire key.
  KeyLink& link(int k) { return k == 0 ? stack_link : wire_link; }
  const KeyLink& link(int k) const { return k == 0 ? stack_link : wire_link; }
  const StateKey& key(int k) const { return link(k).key; }
  bool translated() const { return (flags & stateflag::kTranslated) != 0; }
  bool if_bound() const { return bound[0] != kNoIface || bound[1] != kNoIface; }
};

class StateTable {
 public:
  struct Shard;

  static constexpr Millis kRequeueAfter{1000};

  // A found or created entry with the shard lock(s) it needs held. Movable, not copyable;
  // releasing (or destroying) it unlocks.
  class Handle {
   public:
    Handle() = default;
    Handle(Handle&& other) noexcept;
    Handle& operator=(Handle&& other) noexcept;
    ~Handle() { release(); }

    explicit operator bool() const { return entry_ != nullptr; }
    StateEntry* operator->() const { return entry_; }
    StateEntry& operator*() const { return *entry_; }
    StateEntry* get() const { return entry_; }
    // Which key the lookup matched (0 stack, 1 wire) and whether the packet travels from that
    // key's endpoint 1 to endpoint 0 (a reply).
    int key_index() const { return key_index_; }
    bool reversed() const { return reversed_; }
    void release() noexcept;

   private:
    friend class StateTable;
    StateEntry* entry_ = nullptr;
    Shard* locked_[2] = {nullptr, nullptr};
    int key_index_ = 0;
    bool reversed_ = false;
  };

  enum class CreateStatus : uint8_t { Created, Exists, Full, NoMemory };

  // `sources` (optional) must outlive the table: entries give their source nodes back to it.
  StateTable(std::size_t shard_count, SipKey key, uint32_t limit, SourceTable* sources = nullptr);
  ~StateTable();
  StateTable(const StateTable&) = delete;
  StateTable& operator=(const StateTable&) = delete;

  uint64_t hash(const StateKey& key) const noexcept;

  // Finds the entry with `key` (either direction). `hash` must be hash(key).
  Handle find(const StateKey& key, uint64_t hash) noexcept;

  // Finds by id; the handle holds the entry's locks like find().
  Handle find_by_id(const StateId& id) noexcept;

  // Creates an entry for `stack` / `wire` (equal without translation) and files it in the expiry
  // queue for `timeout_duration`. When either key already exists, returns that entry with
  // status Exists (a concurrent worker created it first). Full when the limit is reached.
  Handle create(const StateKey& stack, const StateKey& wire, const StateId& id, TimeoutClass timeout,
                Millis timeout_duration, Millis now, CreateStatus& status) noexcept;

  // Records activity: entry->last_seen = last_seen, class `timeout`, queue for `duration`.
  void touch(Handle& handle, TimeoutClass timeout, Millis duration, Millis last_seen) noexcept;
  // touch() for what the peer reports, whose `last_seen` (its time left on this node's clock) may
  // lie long before `now`: filed at its duration queue's tail, such an entry would wait behind
  // entries of later deadlines, up to `duration` late. It joins a queue of its time left instead,
  // and expires at most an eighth of that late.
  void file_learned(Handle& handle, TimeoutClass timeout, Millis duration, Millis last_seen,
                    Millis now) noexcept;

  // Makes `rule` (of `rules`) the entry's creator and counts the entry in the rule's
  // states_current. The count is given back when the entry is removed, whichever way (erase,
  // expire, clear): removal has one path, unlink_and_free(), and that is where it happens.
  // The entry's later packets and bytes are added to the rule's, as pf counts a state's packets to
  // its rule: whenever the entry is requeued (at most once a second) and at its removal, never
  // per packet. Those it holds already are the rule's (the packet that made it matched the rule).
  void attach_creator(Handle& handle, const rules::CompiledRule* rule,
                      std::shared_ptr<const rules::RuleSet> rules) noexcept;

  // Makes the rules `refs` names (of `rules`, the set the connection's first packet met) the
  // entry's translators, counted as attach_creator() counts the creator: states_current now, later
  // packets and bytes as they are folded, states_current given back at removal. A rule that
  // translated both passes counts once. Call it after attach_creator(), if at all.
  void attach_translators(Handle& handle, TranslatorRefs refs,
                          std::shared_ptr<const rules::RuleSet> rules) noexcept;

  // Makes `node` (admitted by the table's sources) count the entry; given back, with its
  // connection if stateflag::kSourceConnection is set, when the entry is removed.
  void attach_source(Handle& handle, SourceNode* node) noexcept { handle->source = node; }

  // Batch lookups: start loading what find(key, hash) is going to read, so that the cache and
  // TLB misses of a batch's packets overlap instead of adding up. Hints only: they change
  // nothing and never fault. prefetch_bucket() takes no lock; prefetch_entry() takes the shard
  // lock for a moment to read the bucket, so call it once the bucket has had time to arrive.
  void prefetch_bucket(uint64_t hash) const noexcept;
  void prefetch_entry(uint64_t hash) noexcept;

  // Removes the entry the handle holds; the handle becomes empty. `end`: why its flow ended, for
  // a flow log.
  void erase(Handle& handle, FlowEnd end = FlowEnd::ForcedEnd) noexcept;

  // Where the entries whose creating rule says (pflow) leave their flow as they are removed
  // (nullptr: nowhere). Set before the table is used; must outlive it.
  void set_flow_log(FlowLog* log) noexcept { flows_ = log; }

  // Removes every entry whose last_seen + queue duration * timeout_scale <= now (the scale of
  // adaptive timeouts, 1 without). `on_expired` sees each entry (under its lock) before it is
  // freed. Returns the number removed.
  // Every removal gives back the creating rule's states_current (see attach_creator).
  std::size_t expire(Millis now, const std::function<void(const StateEntry&)>& on_expired,
                     double timeout_scale = 1.0);

  // Files anew, by its time left at `now` (as file_learned() files), every entry whose lifetime
  // `duration_of` says is no longer the one its queue keeps: after a reload that changed the
  // timeouts, an idle entry would otherwise expire on the old one. Control path, each shard locked
  // in turn, O(entries). Returns how many moved.
  std::size_t refile(Millis now, const std::function<Millis(const StateEntry&)>& duration_of);

  // Removes every entry; returns how many.
  std::size_t clear(const std::function<void(const StateEntry&)>& on_removed);

  // Where a state's packets go when they are folded into counters, besides its creator's counting
  // tables, which always take them in.
  struct FoldInto {
    bool creator = true;
    bool translators = true;
  };
  // pfctl -z: the packets and bytes so far of each entry whose creating rule's counters were set
  // to zero (`creator_zeroed`) marked as counted, so that fold_counters() gives that rule only what
  // comes after; its translation rules take them in now unless theirs were zeroed too, and so do
  // its creator's counting tables, which pfctl -z leaves alone. Control path, each shard locked in
  // turn, O(entries).
  void mark_counted(const std::function<bool(const StateEntry&)>& creator_zeroed, bool translators_zeroed);

  // Visits every entry under its shard lock, shard by shard (not a consistent snapshot of the
  // whole table; each entry is consistent).
  void for_each(const std::function<void(const StateEntry&)>& visit) const;

  // Takes the entries whose source node `choose` picks off that node, as pf_src_tree_remove_state
  // for pfctl -K and -F Sources: they go on, counted by no node, and a node left without states is
  // freed at once. Control path, each shard locked in turn.
  struct SourcesDetached {
    std::size_t states = 0;
    std::size_t nodes_freed = 0;
  };
  SourcesDetached detach_sources(const std::function<bool(const SourceNode&)>& choose);

  std::size_t size() const noexcept { return count_.load(std::memory_order_relaxed); }
  uint32_t limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
  // Also sizes the key index for the new limit when it grows (control path, each shard locked
  // in turn).
  void set_limit(uint32_t limit) noexcept;
  std::size_t shard_count() const noexcept { return shards_.size(); }

 private:
  Shard& shard_for(uint64_t hash) noexcept;
  uint16_t shard_index(uint64_t hash) const noexcept;
  uint64_t id_hash(const StateId& id) const noexcept;
  void lock_pair(Handle& handle, uint16_t a, uint16_t b) noexcept;
  void unlink_and_free(StateEntry* entry, FlowEnd end) noexcept;
  // expire(); `forced`: every entry removed is a forced end (clear()), not an expiry.
  std::size_t remove_expired(Millis now, const std::function<void(const StateEntry&)>& on_expired,
                             double timeout_scale, bool forced);

  SipKey key_;
  std::vector<std::unique_ptr<Shard>> shards_;
  struct IdShard;
  std::vector<std::unique_ptr<IdShard>> id_shards_;
  std::atomic<std::size_t> count_{0};
  std::atomic<uint32_t> limit_;
  SourceTable* sources_;  // may be null: then no entry has a source
  FlowLog* flows_ = nullptr;
};

}  // namespace pairwall::engine
