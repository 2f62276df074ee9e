// The decision structure behind RuleSet: which rule decides a packet, at a cost that does not
// grow with the number of rules.
//
// Rules are numbered by priority. pf's "first quick match, else last match" is a plain priority
// order: quick rules in file order, then the others in reverse file order, so the deciding rule is
// always the lowest set bit of "rules that match every field". First-match lists (scrub,
// translation) are the same structure with every rule treated as quick.
//
// Fields are classified on their own: a packet's value of a field falls into an equivalence class
// whose bitmap (one bit per rule, by priority) says which rules accept that value; identical
// bitmaps are stored once.
//   - Dense fields, small domains, bitmaps stored whole: direction x interface (x arrival
//     interface, tag and route checks where rules ask), family x protocol (x TOS where a rule
//     names one), transport detail (TCP flags; ICMP type, and code where a rule names one).
//   - Sparse fields: source and destination address (elementary intervals, v4 and v6 apart, found
//     for IPv4 by a direct table on the top bits over leaves of 8 starts, and for IPv6 by a
//     radix index over the interval starts that skips shared prefix bits: a top-bits table fails
//     on IPv6, where rule sets crowd under one /32) and source and destination port (TCP's and UDP's ports
//     apart, so that a rule's port list only offers it to its own protocol's packets; blocks of 256 ports,
//     identical blocks stored once). Their bitmaps are compressed as in Baboescu and
//     Varghese's aggregated bit vectors (a summary bit per 64-rule word, then the non-zero words),
//     and stay sparse because a rule that accepts most values of a field (a wildcard, `! 10/8`,
//     `port != 22`) is recorded where it does NOT match, against a per-field default.
//
// Plain ABV ANDs all fields' summaries, but in real rule sets most rules leave some field open,
// so every summary is nearly full and a packet decided by a late-priority rule (`block all` on
// line 1) scans all N/64 words. Here each rule is anchored at compile time on the one sparse field
// where it shares its values with the fewest rules, and each class keeps, per (direction,
// interface) group of the rules anchored on it, a summary of the words holding them. Rules that
// constrain no sparse field ("broad": `pass in on ext0 proto icmp`) are found through the dense
// classes, which keep a summary of the broad rules accepting them. A packet only visits the words
// its own anchors and broad rules point to, in priority order, one branch-free AND of all seven
// fields per word, and stops at the first match. Measured with pairwall-bench's generated rule
// sets: at 1,000 rules, packets that only `block all` decides took 145 ns without anchors and 81 ns
// with them; at 10,000 rules a packet visits 1.45 words on average (1.0 at 10 rules).
//
// What still grows: a 10,000-rule structure (16 MB with the compiled rules) does not stay in L1
// or L2, and a packet meets more candidate words (1.45, see above), whose count the branch
// predictor cannot know. match_batch() overlaps the misses of a batch, at the price of
// instructions: counted with callgrind on the benchmark's packets, one match() a packet takes
// about 500 instructions at 10 rules and 590 at 10,000, match_batch() 660 a packet at 10,000
// (130 of them an IPv6 walk's share: 3.6 radix rounds of about 47 instructions each, for a
// depth of 2 to 5, before the index's nodes were made wider; see IntervalIndex). Where a condition is a coin
// toss per packet in a large rule set (does this class record hold the pass's anchor group?), the batch
// computes with masks instead of branching: a mispredicted branch discards the loads the batch has in flight;
// where the condition is predictable (an IPv6 node's shape, a walk ending at a leaf), masks measured slower
// than branches. A batch of fewer than kBatchFloor queries is matched one query at a time.
// pairwall-bench engine (--seconds 0.5 --runs 3, three alternating invocations
// on a 2-core VM, fastest pass of each run, 30 % IPv6 packets at every rule count): 25.0 to 25.5
// Mpps at 10 rules and 15.3 to 15.9 at 10,000, a ratio of 0.61 to 0.62 (before batches were
// taken at every size, 0.67 to 0.69: the 10-rule figure rose by 14 %).
// Where the 10,000-rule time goes (time-stamp counter ticks a query, by stage, from a temporarily
// instrumented build, 10 -> 10,000 rules): the address walks 29-32 -> 55-58 (an IPv6 query's about
// 54 -> 107-114: as many radix steps, but a batch runs as many rounds as its deepest walk and the nodes
// leave L1; IPv4 one table round more); the candidate words' tests 16-17 -> 29-31 (0.45 failing
// words a packet; with none, by a temporary filter that tested only the first, 10,000 rules ran
// 11 % faster); the small-table lookups 25-26 -> 34-35 (the port blocks leave L1, inferred); every other
// stage a few ticks more, for the misses of lines the packets read once the structure outgrows L2.
// The 0.8 target is not met. Nor do misses to L3 make most of the gap: with fewer distinct
// packets, whose lines then mostly stay in L2, the ratio barely moves (pairwall-bench engine --only
// rules --seconds 0.5 --runs 3 --rule-packets N: N = 1,024 0.65, 2,048 0.62-0.63, 4,096 0.61-0.62,
// 16,384 0.48). An IPv6 walk takes as many radix steps at 10 rules as at 10,000 (2.0 on average);
// what grows is its lines' distance. Measured against this code and dropped (10 / 10,000 rules,
// Mpps): testing the first two candidate words without a branch on the first one's outcome 26.0 /
// 16.0 -> 21.7 / 14.7; testing the first candidate in the anchor stage 26.1 / 15.8 -> 25.1 / 15.9;
// the source and destination walks in one loop 26.0 / 15.9 -> 25.1 / 15.1; batches of 64, a 16-bit
// IPv4 top table, and selecting an IPv6 walk's last step by masks: no change.
//
// Worst case: a packet value shared by thousands of anchored rules of one group (e.g. 5,000 rules
// on one interface that differ only in the source port, all to the same host) makes those rules
// candidates, 64 per AND. No classifier escapes this in general (packet classification in d > 2
// fields costs O(log^(d-1) N) time or O(N^d) space).
//
// Matching semantics, relied on by compile.cc and the tests:
//   - an address element of a prefix (negated or not) only matches its own family; `any` and tables
//     match both; a table holds an address when its longest matching entry is not negated;
//   - a rule with ports only matches TCP and UDP packets that carry ports (not later fragments);
//   - a rule with flags only matches TCP, one with ICMP types only ICMP (or ICMPv6), and neither
//     matches a later fragment, whose transport header is absent; but flags marked TCP-only (pf's
//     default flags on a rule that is not TCP's alone) leave every other packet to the rule's
//     other fields, a later TCP fragment included.
//
// Immutable after construction; match() and match_batch() are noexcept, allocation-free and
// lock-free.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <span>
#include <vector>

#include "daemon/engine/address.h"
#include "daemon/engine/interfaces.h"
#include "daemon/engine/packet.h"
#include "daemon/engine/rules/ast.h"

namespace pairwall::engine::rules {

// Allocates cache-line aligned storage, so that records placed at multiples of 8 words start a line.
template <typename T>
struct LineAllocator {
  using value_type = T;
  LineAllocator() = default;
  template <typename U>
  LineAllocator(const LineAllocator<U>&) {}  // NOLINT: rebinding
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, std::size_t) { ::operator delete (p, std::align_val_t{64}); }
  friend bool operator==(const LineAllocator&, const LineAllocator&) { return true; }
};

// An address as one integer. IPv4 addresses are left-aligned (the top 32 bits) so that both
// families share the bit positions of the radix index; the family keeps them apart.
__extension__ typedef unsigned __int128 AddressKey;

inline AddressKey address_key(Family family, const IpAddress& a) {
  if (family == Family::V4) return static_cast<AddressKey>(a.v4_value()) << 96;
  return (static_cast<AddressKey>(a.hi) << 64) | a.lo;
}

struct KeyRange {
  AddressKey first = 0;
  AddressKey last = 0;  // inclusive
};

// The addresses of `family` that some prefix of `prefixes` holds, cut into the spans where one
// of them is the longest that does: ascending, disjoint, each with that prefix's index. Of a
// prefix listed twice the later one holds it. Prefixes of the other family are passed over.
struct PrefixSpan {
  KeyRange range;
  uint32_t index = 0;
};
std::vector<PrefixSpan> longest_prefix_spans(Family family, std::span<const IpPrefix> prefixes);

// A table resolved to disjoint, sorted address ranges per family.
class AddressTable {
 public:
  AddressTable() = default;
  // An address belongs to the table when the longest entry containing it is not negated; a prefix
  // listed both plain and negated counts as negated.
  AddressTable(const std::vector<IpPrefix>& entries, const std::vector<IpPrefix>& negated);

  const std::vector<KeyRange>& ranges(Family f) const { return f == Family::V4 ? v4_ : v6_; }
  bool contains(Family f, const IpAddress& a) const;

 private:
  std::vector<KeyRange> v4_;
  std::vector<KeyRange> v6_;
};

struct AddressTerm {
  AddressElement::Kind kind = AddressElement::Kind::Any;
  bool negated = false;
  IpPrefix prefix;
  const AddressTable* table = nullptr;  // Kind::Table; only read while the classifier is built
  IpAddress last;                       // Kind::Range: from prefix's address to this one
  friend bool operator==(const AddressTerm&, const AddressTerm&) = default;
};

struct InterfaceTerm {
  IfaceId id = kNoIface;
  bool negated = false;
  friend bool operator==(const InterfaceTerm&, const InterfaceTerm&) = default;
};

// What one rule requires of a packet. Empty lists mean "any"; a list matches if any element does.
struct MatchSpec {
  Direction direction = Direction::Any;
  std::vector<InterfaceTerm> interfaces;
  std::optional<Family> family;
  std::vector<uint8_t> protocols;
  std::vector<AddressTerm> src;
  std::vector<PortMatch> src_ports;
  std::vector<AddressTerm> dst;
  std::vector<PortMatch> dst_ports;
  std::optional<FlagsMatch> flags;
  bool flags_tcp_only = false;  // `flags` constrain TCP packets only, the rule's other protocols pass
  std::vector<IcmpTypeMatch> icmp_types;
  bool icmp6 = false;  // icmp_types are ICMPv6 types
  // `[!] tagged`: the tag (1 and up, MatchQuery::tag's numbering) a packet must (must not) carry;
  // 0 asks nothing. Kept with direction x interface, as one dense field.
  uint16_t tagged = 0;
  bool tagged_negated = false;
  // `from urpf-failed`: only packets whose query says their source failed the unicast reverse path
  // check (MatchQuery::urpf_failed). Kept with direction x interface and the tag.
  bool urpf_failed = false;
  // `from [!] no-route`, `to [!] no-route`: only packets whose query says the routing tables have
  // no route (have one) for the address (MatchQuery::src_no_route, dst_no_route). Kept with the
  // uRPF check.
  RouteTest src_route = RouteTest::None;
  RouteTest dst_route = RouteTest::None;
  // `received-on IF`: the interface the packet arrived on (an out pass's too), as `interfaces` is
  // the pass's own; empty means any, a packet the node sent itself included. Kept with direction x
  // interface, as one dense field.
  std::vector<InterfaceTerm> received_on;
  // `tos T`: the packet's DSCP (PacketView::tos) must be T. Kept with family x protocol, as one
  // dense field.
  std::optional<uint8_t> tos;
  bool quick = false;
  uint32_t rank = 0;  // MatchOrder::Ranked: the rule's place in the order of decision, 0 first
  // false: the rule matches no packet here (pf's `match`, which never decides; the tags it sets
  // are found by a classifier of their own).
  bool decides = true;
};

enum class MatchOrder : uint8_t {
  QuickOrLast,  // pf filter rules: the first matching quick rule, else the last matching rule
  First,        // scrub and translation rules: the first matching rule
  Ranked,       // the matching rule of the lowest MatchSpec::rank (ranks are 0..N-1, each once)
};

// Finds the elementary interval holding a key. For AddressKey (IPv6; IPv4 has its own, below): a
// radix tree over the sorted interval starts that skips the bits its starts share, which IPv6 rule
// sets need: they crowd under a few long prefixes. A child holding no start stores its interval's
// value itself; a child holding a few is a leaf of one cache line, keys and values side by side,
// searched without branches.
//
// A node of n starts has 8n to 16n children (up to 2^16): random bits below a shared prefix fill
// children unevenly, and with about one child a start many still held more than a leaf's three
// starts, so that walks took 2 to 4 rounds where most now take 1 or 2 (the destination index of
// pairwall-bench's 10,000 rules: 8,380 starts, 147,000 children, 4 bytes each). A walk's rounds
// are its cost: each is a dependent load and some 47 instructions of 128-bit arithmetic, and a
// batch runs as many as its deepest walk. pairwall-bench engine --only rules with IPv6 packets
// only, two invocations each, against one child a start: 10 rules 19.1-19.2 -> 20.7-20.9 Mpps,
// 1,000 14.9 -> 18.2-18.6, 10,000 12.0-12.2 -> 14.9-15.5, for 0.9 MB more at 10,000 rules
// (19.5 MB in all); 32n to 64n children ran no faster.
template <typename Key>
class IntervalIndex {
 public:
  // starts ascending and starts[0] == 0; values[i] (< 2^30) belongs to [starts[i], starts[i+1]).
  void build(const std::vector<Key>& starts, const std::vector<uint32_t>& values);
  uint32_t find(Key key) const noexcept;
  // find() for each key. The walks advance together, a level at a time, so that the loads of n
  // walks overlap instead of adding up. (Prefetching each walk's next node as well, measured:
  // 10 rules 18.3 -> 16.3 Mpps, 10,000 rules 14.3 -> 14.0; the out-of-order core already runs
  // ahead across walks.)
  void find_batch(std::span<const Key> keys, std::span<uint32_t> values) const noexcept;
  std::size_t memory_bytes() const;

  static constexpr uint32_t kLeafKeys = 3;  // a leaf of 16-byte keys fills one cache line

 private:
  static constexpr unsigned kBits = sizeof(Key) * 8;
  struct alignas(64) Leaf {
    Key keys[kLeafKeys];             // unused slots repeat the last key
    uint32_t values[kLeafKeys + 1];  // values[i]: keys below keys[i] (i = 0: the interval before)
  };
  struct Node {
    Key prefix = 0;  // the top `shift` bits every start under this node shares
    Key mask = 0;    // the top `shift` bits set, or 0 where the parent compared them all
    uint32_t child_base = 0;
    uint8_t shift = 0;  // children are chosen by key bits [shift, shift + stride) from the top
    uint8_t stride = 0;
  };
  // A child: kind in the top two bits, then a node index, a leaf index or the value itself.
  static constexpr uint32_t kKindMask = 0xc000'0000u;
  static constexpr uint32_t kNode = 0;
  static constexpr uint32_t kLeaf = 0x4000'0000u;
  static constexpr uint32_t kValue = 0x8000'0000u;

  static uint32_t child_index(Key key, unsigned shift, unsigned stride) noexcept;
  // A walk: the root, then step() while the entry is a node, then the value by last_step().
  uint32_t step(Key key, uint32_t node) const noexcept;
  uint32_t last_step(Key key, uint32_t entry) const noexcept;
  uint32_t build_entry(const std::vector<Key>& starts, const std::vector<uint32_t>& values, uint32_t lo,
                       uint32_t hi, uint32_t known_bits);

  std::vector<Node> nodes_;
  std::vector<uint32_t> children_;
  std::vector<Leaf> leaves_;
  uint32_t root_ = kValue;
};

// IPv4: the interval starts in leaves of 8 (keys and values in one cache line), found by a direct
// table on the top 12 bits of the key, as DXR does, instead of the levels of a search tree. An
// entry names the leaf holding its chunk's first address; the key's own leaf is at most 16 leaves
// further, found by counting, in the array of the leaves' first keys, those at or below the key
// (one 16-key compare without a branch). A chunk whose starts fill more than 17 leaves (a crowded
// /12, such as 10/8's) gets a table of its next 10 bits, and its crowded chunks one of the last
// 10. Every walk takes as many table rounds as the deepest chunk needs, one that has left the
// tables selecting its own entry again, so that no walk's depth is guessed by a branch: the batch
// loops know their trip counts. For 10,000 rules' starts this replaced a B+ tree's three levels of
// 16-key searches above the leaves by one table load, one masked table round and one count
// (pairwall-bench engine --only rules: 13.6 -> 14.3 Mpps at 10,000 rules, 18.9 -> 20.3 at 100).
// A trie of 8-bit tables down to leaves of each chunk's own starts was measured first and
// dropped: its partly filled leaves and tables took 2 MB for 10,000 rules' starts, and their
// misses cost more than its walks saved (13.6 -> 13.1).
//
// A walk's two counts (16 leaves' first keys, then the leaf's 8 keys) are a large part of its
// instructions, and the walks are bound by instructions. Where the CPU has AVX2, the batch counts
// 8 keys with one compare and reads the result with a popcount; SSE2 needs two compares and packs
// per 8 (pairwall-bench engine --only rules --seconds 0.5 --runs 3, the best of three alternating
// invocations of each: 100 rules 20.58 -> 20.87 Mpps, 1,000 18.30 -> 18.81, 10,000 14.28 -> 14.58;
// 10 rules, whose measured packets were then all IPv6, unchanged).
enum class KeyCounting : uint8_t {
  Baseline,  // SSE2 on x86-64, a loop elsewhere
  Avx2,      // x86-64 CPUs that have AVX2
};
KeyCounting best_key_counting() noexcept;  // the fastest this CPU runs, found once

template <>
class IntervalIndex<uint32_t> {
 public:
  // starts ascending and starts[0] == 0; values[i] belongs to [starts[i], starts[i+1]).
  void build(const std::vector<uint32_t>& starts, const std::vector<uint32_t>& values);
  uint32_t find(uint32_t key) const noexcept;
  void find_batch(std::span<const uint32_t> keys, std::span<uint32_t> values,
                  KeyCounting counting = best_key_counting()) const noexcept;
  std::size_t memory_bytes() const;

  static constexpr uint32_t kLeafKeys = 8;
  static constexpr uint32_t kWindow = 16;     // leaves past a chunk's first that one count reaches
  static constexpr uint32_t kTopBits = 12;    // 16 KB of entries
  static constexpr uint32_t kTableBits = 10;  // 4 KB per table; 12 + 10 + 10 = 32
  static_assert(kTopBits + 2 * kTableBits == 32, "the tables end at single addresses");

 private:
  // Keys are stored with the top bit flipped, so that signed SIMD compares order them as unsigned.
  struct alignas(64) Leaf {
    uint32_t keys[kLeafKeys];  // 8 consecutive starts; past the last start: max
    uint32_t values[kLeafKeys];
  };
  // An entry: a leaf index, or with kTable set, a table's index.
  static constexpr uint32_t kTable = 0x8000'0000u;

  uint32_t build_entry(const std::vector<uint32_t>& starts, uint32_t chunk_first, uint32_t chunk_bits,
                       uint32_t depth);
  // The walk's steps: its entry in the top table, in a table below (if it is still in the tables),
  // its leaf, the value.
  uint32_t top_entry(uint32_t key) const noexcept { return top_[key >> (32 - kTopBits)]; }
  uint32_t table_step(uint32_t entry, uint32_t key, uint32_t shift) const noexcept;
  template <KeyCounting kCounting>
  uint32_t leaf_of(uint32_t entry, uint32_t flipped_key) const noexcept;
  template <KeyCounting kCounting>
  uint32_t value(uint32_t leaf, uint32_t flipped_key) const noexcept;
  template <KeyCounting kCounting>
  void walk_batch(std::span<const uint32_t> keys, std::span<uint32_t> values) const noexcept;
#if defined(__x86_64__)
  // walk_batch() compiled for AVX2; flattened, so that the AVX2 counts are inlined into it.
  [[gnu::target("avx2,popcnt"), gnu::flatten]] void find_batch_avx2(
      std::span<const uint32_t> keys, std::span<uint32_t> values) const noexcept;
#endif

  uint32_t table_depth_ = 0;          // the most tables below the top one a walk meets
  std::vector<uint32_t> top_;         // 2^kTopBits entries
  std::vector<uint32_t> tables_;      // 2^kTableBits entries per table
  std::vector<uint32_t> leaf_first_;  // each leaf's first key, then kWindow maximum keys
  std::vector<Leaf> leaves_;
};

extern template class IntervalIndex<AddressKey>;

// One pass of one packet, for Classifier::match_batch().
struct MatchQuery {
  const PacketView* packet = nullptr;
  Direction direction = Direction::In;
  IfaceId iface = kNoIface;
  uint16_t tag = 0;                // the tag the packet carries (MatchSpec::tagged's numbering), 0 none
  bool urpf_failed = false;        // its source's route leaves by another interface than `iface` (an in pass)
  bool src_no_route = false;       // the routing tables have no route for its source
  bool dst_no_route = false;       // nor for its destination
  IfaceId received_on = kNoIface;  // the interface it arrived on (kNoIface: the node sent it)
};

class Classifier {
 public:
  // Builds the structure for `specs`; match() returns indexes into `specs`. Tables referenced by
  // the specs are only read here. Throws std::length_error for inputs beyond the structure's limits
  // (about 4 million rules, 65,536 distinct port classes).
  Classifier(std::span<const MatchSpec> specs, MatchOrder order);

  // The deciding rule for this packet on a pass in `direction` (In or Out; Any only matches rules
  // without a direction) on `iface`, or kNoMatch.
  uint32_t match(const PacketView& packet, Direction direction, IfaceId iface,
                 uint16_t tag = 0) const noexcept {
    return match(MatchQuery{&packet, direction, iface, tag});
  }
  uint32_t match(const MatchQuery& query) const noexcept;

  // match() among the rules of priority `first` and after: for MatchOrder::Ranked, the matching
  // rule of the lowest rank at least `first` (the last tag rule up to a deciding rule, see
  // RuleSet::tag_after()).
  uint32_t match_from(const MatchQuery& query, uint32_t first) const noexcept;
  // match() among the rules that come after `rule` in the order of decision: what decides where
  // `rule` (a rule this query matches) does not, as a rule with `probability` may not.
  uint32_t match_after(const MatchQuery& query, uint32_t rule) const noexcept {
    return match_from(query, rule_priority_[rule] + 1);
  }

  // match() for each query: out[i] for queries[i]. The lookups of kBatch queries advance together
  // through the stages of a match (small tables and address index, class records, the rest), the
  // first two prefetching what the next one reads, so that the queries' cache misses overlap
  // instead of adding up: a large rule set's structure lives in L2 and L3, not in L1. 32: the two
  // passes of each of a prefetch group's forwarded new flows (Engine::kPrefetchGroup).
  static constexpr std::size_t kBatch = 32;
  void match_batch(std::span<const MatchQuery> queries, std::span<uint32_t> out) const noexcept;

  // Fewer queries than this are matched one match() each: the batch's stages pay for their
  // bookkeeping with the misses they overlap and the keys they count with AVX2, and a few queries
  // give them too little of either. pairwall-bench engine --only rules --seconds 0.3 --runs 3,
  // match_batch() over chunks of n queries against one match() each, in Mpps: 10 rules n = 4
  // 19.7 / 22.8, n = 8 22.4 / 23.1, n = 16 24.6 / 23.3; 10,000 rules n = 4 9.7 / 10.5, n = 8
  // 11.8 / 10.5, n = 16 14.7 / 10.3. At any size of rule set: the batch's AVX2 counts and the
  // wider IPv6 nodes made full batches the faster way for 10 rules too (25.0-25.3 against
  // 21.8-22.0 at the time; the structure's size had decided before).
  static constexpr std::size_t kBatchFloor = 8;

  // How many 64-rule words match() tests for this packet: the candidates that fail, then the one
  // that decides (if any). What the structure's precision costs, for benchmarks and tests.
  uint32_t words_tested(const PacketView& packet, Direction direction, IfaceId iface) const noexcept;

  std::size_t size() const { return rule_count_; }
  std::size_t memory_bytes() const;

  static constexpr uint32_t kNoMatch = UINT32_MAX;

 private:
  friend class ClassifierBuilder;

  enum SparseField : uint8_t { kSrcAddr, kDstAddr, kSrcPort, kDstPort, kSparseFields };

  // Per 64-rule word and sparse field, the rules that the field's classes store by exception (they
  // accept a value unless its class lists them), per family.
  struct WordMasks {
    uint64_t by_default[kSparseFields] = {};
  };

  // One query's progress through a match: its records, then the words left to test.
  struct Probe {
    const uint64_t* dense[3];
    const uint64_t* sparse[kSparseFields];
    const uint64_t* block[kSparseFields];  // per field: the block of the summary word scanned
    uint32_t own[kSparseFields];           // where in a block the own group's anchors are
    uint32_t block_header[kSparseFields];  // the words before a block's words
    const WordMasks* masks;
    uint32_t group;
    uint32_t next_summary_word;  // the next summary word to scan
    uint32_t word_base;          // the first word of the scanned summary word's candidates
    uint64_t candidates;         // the candidate words left, as bits from word_base
  };
  // The stages, in order.
  void begin(Probe& probe, const MatchQuery& query) const noexcept;  // all but the addresses
  void set_addresses(Probe& probe, uint32_t src_record, uint32_t dst_record) const noexcept;
  template <bool kBatched>
  void find_anchors(Probe& probe) const noexcept;
  void next_candidates(Probe& probe) const noexcept;  // up to the first summary word with any
  // One query's stages up to finish(), as match() and words_tested() take them.
  void start(Probe& probe, const MatchQuery& query) const noexcept;
  // on_word() per word tested; rules of a priority below `first` are passed over.
  template <typename OnWord>
  uint32_t finish(Probe& probe, OnWord on_word, uint32_t first = 0) const noexcept;

  // Class records (offsets into the pools):
  //   dense:  summary[S], broad summary[S] (words with a broad rule that accepts this value),
  //           words[words_]                                                     (S = summary_words_)
  //   sparse: groups (those but 0 with anchors here), then a block per summary word: summary,
  //           anchor summary of group 0, then of each of `groups`, the words the summary names; 0
  // A sparse class's words hold, per rule, whether it differs from the rule's default; its anchor
  // summaries say which words hold rules anchored on this field that list this class, split by
  // the rules' (direction, interface) group so that a packet only meets its own pass's rules.
  // Blocks keep what a packet reads for one summary word together: most packets are decided in
  // the first, and read only the record's first lines. A block is found from the one before.
  const uint64_t* sparse_slot(const Probe& probe, int field, uint32_t word, bool& present) const noexcept;
  uint64_t sparse_word(const Probe& probe, int field, uint32_t word) const noexcept;
  uint32_t l4_record(const PacketView& packet, bool has_l4) const noexcept;
  uint32_t port_class(int side, uint32_t udp, uint16_t port) const noexcept;

  uint32_t rule_count_ = 0;
  uint32_t words_ = 1;
  uint32_t summary_words_ = 1;
  std::vector<uint32_t> priority_to_rule_;  // words_ * 64 entries, kNoMatch past the end
  std::vector<uint32_t> rule_priority_;     // its inverse, by rule
  std::vector<WordMasks> word_masks_[2];    // [v4/v6]
  std::vector<uint8_t> packet_group_;       // [direction row * iface_slots_ + slot] -> anchor group
  uint32_t group_count_ = 1;
  std::vector<uint64_t> dense_pool_;
  std::vector<uint64_t, LineAllocator<uint64_t>> sparse_pool_;

  // Dense lookups (values are offsets into dense_pool_).
  uint32_t iface_slots_ = 1;  // interface ids >= iface_slots_ - 1 share the last slot
  // iface_slots_ where a rule says `received-on`, else 1: the arrival interface's slots.
  uint32_t received_slots_ = 1;
  uint32_t tag_values_ = 1;  // 1 + the highest tag a rule's `tagged` names; other tags read as 0
  // The route checks some rule asks for (kUrpfFailed, kSrcNoRoute, kDstNoRoute): a query's outcomes
  // of them, masked by this, number its route row.
  uint32_t route_checks_ = 0;
  static constexpr uint32_t kUrpfFailed = 1;
  static constexpr uint32_t kSrcNoRoute = 2;
  static constexpr uint32_t kDstNoRoute = 4;
  uint32_t tag_slots_ = 1;  // tag_values_ * (route_checks_ + 1): a tag row per route row
  // [((direction row * iface_slots_ + slot) * received_slots_ + arrival slot) * tag_slots_ + route
  // row * tag_values_ + tag], rows In, Out, Any
  std::vector<uint32_t> iface_records_;
  // Where a rule names a `tos`: a row of protocol records for each TOS a rule names, and row 0 for
  // every other; tos_rows_[tos] is its row's first record (512 a row). All 0 elsewhere.
  std::array<uint16_t, 256> tos_rows_{};
  // Whether a query's dense records depend on more than its pass and protocol (received_slots_ or
  // tag_slots_ over 1, or a TOS row): the same branch for every query of a rule set.
  bool extended_rows_ = false;
  std::vector<uint32_t> proto_records_;  // [tos_rows_[tos] + is_v6 * 256 + proto]
  // [0, 256) TCP flags, [256, 512) ICMP type, [512, 768) ICMPv6 type, 768 no transport header.
  // An entry with kCodeTable set indexes l4_codes_ (256 entries per table) for per-code classes.
  std::vector<uint32_t> l4_records_;
  std::vector<uint32_t> l4_codes_;
  std::array<uint16_t, 256> l4_base_{};  // by protocol: 0 (TCP), 256 (ICMP), 512 (ICMPv6) or kL4Other
  static constexpr uint32_t kCodeTable = 0x8000'0000u;
  static constexpr uint32_t kL4Other = 768;

  // Sparse lookups (values are offsets into sparse_pool_).
  IntervalIndex<uint32_t> v4_index_[2];    // [src/dst]
  IntervalIndex<AddressKey> v6_index_[2];  // [src/dst]
  // [src/dst]: (TCP or UDP, port) -> class through blocks of 256 ports, identical blocks stored
  // once; UDP's blocks follow TCP's.
  uint16_t port_top_[2][512] = {};
  std::vector<uint16_t> port_blocks_[2];
  uint16_t port_none_class_[2] = {0, 0};   // the class of packets without ports
  std::vector<uint32_t> port_records_[2];  // class -> offset
};

}  // namespace pairwall::engine::rules
