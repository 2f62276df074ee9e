#include "daemon/engine/rules/classifier.h"

#include <algorithm>
#include <array>
#include <bit>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace pairwall::engine::rules {

namespace {

constexpr AddressKey kKeyMax = ~static_cast<AddressKey>(0);
// The port fields' domain: (protocol, port), TCP's 65,536 ports, then UDP's.
constexpr uint32_t kPorts = 65536;
constexpr AddressKey kPortMax = 2 * kPorts - 1;

// Bits of `key` outside a prefix of `length` bits (top-aligned), all ones.
AddressKey host_mask(Family family, uint8_t length) {
  const unsigned prefix_bits = std::min<unsigned>(length, family == Family::V4 ? 32 : 128);
  return prefix_bits == 0 ? kKeyMax : (static_cast<AddressKey>(1) << (128 - prefix_bits)) - 1;
}

KeyRange prefix_range(const IpPrefix& p) {
  const AddressKey mask = host_mask(p.family, p.length);
  const AddressKey key = address_key(p.family, p.address);
  return {key & ~mask, key | mask};
}

// Sorts and merges overlapping or adjacent ranges.
void normalize(std::vector<KeyRange>& ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const KeyRange& a, const KeyRange& b) { return a.first < b.first; });
  std::size_t out = 0;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    if (out > 0 && (ranges[out - 1].last == kKeyMax || ranges[i].first <= ranges[out - 1].last + 1)) {
      ranges[out - 1].last = std::max(ranges[out - 1].last, ranges[i].last);
    } else {
      ranges[out++] = ranges[i];
    }
  }
  ranges.resize(out);
}

// Complement of normalized ranges within [0, max].
std::vector<KeyRange> complement(const std::vector<KeyRange>& ranges, AddressKey max) {
  std::vector<KeyRange> out;
  AddressKey next = 0;
  bool exhausted = false;
  for (const KeyRange& r : ranges) {
    if (r.first > next) out.push_back({next, r.first - 1});
    if (r.last >= max) {
      exhausted = true;
      break;
    }
    next = r.last + 1;
  }
  if (!exhausted) out.push_back({next, max});
  return out;
}

// A rule's port list applies to the protocols it names (TCP and UDP when it names neither). In
// the other protocol's half, which the protocol field rejects anyway, it accepts every port when
// its list covers most ports (such a rule is likely stored by exception, so accepting adds none)
// and no port otherwise. Either way a TCP packet's port class does not offer it the UDP rules of
// its port as candidates, nor the reverse.
std::vector<KeyRange> protocol_port_ranges(const std::vector<KeyRange>& ports,
                                           const std::vector<uint8_t>& protocols) {
  auto names = [&protocols](uint8_t proto) {
    return protocols.empty() || std::find(protocols.begin(), protocols.end(), proto) != protocols.end();
  };
  AddressKey covered = 0;
  for (const KeyRange& k : ports) covered += k.last - k.first + 1;
  const bool most = covered * 2 > kPorts;
  std::vector<KeyRange> out;
  for (const uint8_t proto : {ipproto::kTcp, ipproto::kUdp}) {
    const AddressKey base = proto == ipproto::kTcp ? 0 : kPorts;
    if (names(proto)) {
      for (const KeyRange& k : ports) out.push_back({base + k.first, base + k.last});
    } else if (most) {
      out.push_back({base, base + kPorts - 1});
    }
  }
  normalize(out);  // the halves may touch
  return out;
}

bool covers_all(const std::vector<KeyRange>& ranges, AddressKey max) {
  return ranges.size() == 1 && ranges[0].first == 0 && ranges[0].last >= max;
}

std::vector<KeyRange> port_ranges(const std::vector<PortMatch>& ports) {
  std::vector<KeyRange> out;
  auto add = [&out](int lo, int hi) {
    lo = std::max(lo, 0);
    hi = std::min(hi, 65535);
    if (lo <= hi) out.push_back({static_cast<AddressKey>(lo), static_cast<AddressKey>(hi)});
  };
  for (const PortMatch& p : ports) {
    const int low = p.low;
    const int high = p.high;
    switch (p.op) {
      case PortMatch::Op::Eq:
        add(low, low);
        break;
      case PortMatch::Op::Ne:
        add(0, low - 1), add(low + 1, 65535);
        break;
      case PortMatch::Op::Lt:
        add(0, low - 1);
        break;
      case PortMatch::Op::Le:
        add(0, low);
        break;
      case PortMatch::Op::Gt:
        add(low + 1, 65535);
        break;
      case PortMatch::Op::Ge:
        add(low, 65535);
        break;
      case PortMatch::Op::RangeInclusive:
        add(low, high);
        break;
      case PortMatch::Op::RangeExclusive:
        add(low + 1, high - 1);
        break;
      case PortMatch::Op::Outside:
        add(0, low - 1), add(high + 1, 65535);
        break;
    }
  }
  normalize(out);
  return out;
}

// std::popcount is a library call unless the target has POPCNT, which the baseline x86-64 target
// lacks; match() is therefore also built for CPUs with POPCNT (see there), where this is one
// instruction.
inline uint64_t popcount64(uint64_t x) {
  return static_cast<uint64_t>(__builtin_popcountll(x));
}

uint32_t checked_u32(std::size_t v, const char* what) {
  if (v > UINT32_MAX - 1) throw std::length_error(std::string("rule set too large: ") + what);
  return static_cast<uint32_t>(v);
}

// Deduplicates bitmaps of `words` 64-bit words. Each distinct bitmap becomes one class.
class BitmapInterner {
 public:
  explicit BitmapInterner(uint32_t words) : words_(words) {}

  uint32_t intern(const std::vector<uint64_t>& bits) {
    key_.clear();
    for (uint32_t w = 0; w < words_; ++w) {
      if (bits[w] == 0) continue;
      key_.append(reinterpret_cast<const char*>(&w), sizeof w);
      key_.append(reinterpret_cast<const char*>(&bits[w]), sizeof bits[w]);
    }
    auto [it, inserted] = ids_.try_emplace(key_, static_cast<uint32_t>(classes_.size()));
    if (inserted) classes_.push_back(bits);
    return it->second;
  }

  const std::vector<std::vector<uint64_t>>& classes() const { return classes_; }

 private:
  uint32_t words_;
  std::string key_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<std::vector<uint64_t>> classes_;
};

struct Event {
  AddressKey key;
  uint32_t bit;
  bool add;
};

struct Intervals {
  std::vector<AddressKey> starts;  // starts[0] == 0
  std::vector<uint32_t> classes;   // interner ids
};

// Splits [0, max] into elementary intervals over which the set of covering rules is constant.
Intervals sweep(std::vector<Event>& events, BitmapInterner& interner, uint32_t words) {
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.key < b.key; });
  std::vector<uint64_t> current(words, 0);
  Intervals out;
  std::size_t i = 0;
  AddressKey key = 0;
  for (;;) {
    for (; i < events.size() && events[i].key == key; ++i) {
      const uint64_t bit = uint64_t{1} << (events[i].bit % 64);
      if (events[i].add) {
        current[events[i].bit / 64] |= bit;
      } else {
        current[events[i].bit / 64] &= ~bit;
      }
    }
    const uint32_t cls = interner.intern(current);
    if (out.classes.empty() || out.classes.back() != cls) {
      out.starts.push_back(key);
      out.classes.push_back(cls);
    }
    if (i == events.size()) break;
    key = events[i].key;
  }
  return out;
}

// Range-maximum over the rule count of each elementary interval (sparse table).
class RangeMax {
 public:
  explicit RangeMax(std::vector<uint32_t> values) {
    levels_.push_back(std::move(values));
    for (std::size_t span = 2; span <= levels_[0].size(); span *= 2) {
      const auto& prev = levels_.back();
      std::vector<uint32_t> next(levels_[0].size() - span + 1);
      for (std::size_t i = 0; i < next.size(); ++i) next[i] = std::max(prev[i], prev[i + span / 2]);
      levels_.push_back(std::move(next));
    }
  }
  uint32_t max(std::size_t first, std::size_t last) const {  // inclusive
    const std::size_t level = std::bit_width(last - first + 1) - 1;
    return std::max(levels_[level][first], levels_[level][last + 1 - (std::size_t{1} << level)]);
  }

 private:
  std::vector<std::vector<uint32_t>> levels_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// AddressTable

std::vector<PrefixSpan> longest_prefix_spans(Family family, std::span<const IpPrefix> prefixes) {
  struct Item {
    KeyRange range;
    uint8_t length;
    uint32_t index;
  };
  std::vector<Item> items;
  for (uint32_t i = 0; i < prefixes.size(); ++i) {
    if (prefixes[i].family == family) items.push_back({prefix_range(prefixes[i]), prefixes[i].length, i});
  }
  // Outer prefixes first, so the stack below holds the chain of prefixes containing a point with
  // the longest on top; of a prefix listed twice, the later one on top.
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.range.first != b.range.first) return a.range.first < b.range.first;
    if (a.length != b.length) return a.length < b.length;
    return a.index < b.index;
  });
  std::vector<PrefixSpan> out;
  std::vector<const Item*> stack;
  AddressKey pos = 0;
  bool exhausted = false;  // pos ran past the end of the address space
  auto close_top = [&]() {
    const Item* top = stack.back();
    stack.pop_back();
    if (exhausted || pos > top->range.last) return;
    out.push_back({{pos, top->range.last}, top->index});
    if (top->range.last == kKeyMax) {
      exhausted = true;
    } else {
      pos = top->range.last + 1;
    }
  };
  for (const Item& item : items) {
    while (!stack.empty() && stack.back()->range.last < item.range.first) close_top();
    if (!exhausted && pos < item.range.first) {
      if (!stack.empty()) out.push_back({{pos, item.range.first - 1}, stack.back()->index});
      pos = item.range.first;
    }
    stack.push_back(&item);
  }
  while (!stack.empty()) close_top();
  return out;
}

AddressTable::AddressTable(const std::vector<IpPrefix>& entries, const std::vector<IpPrefix>& negated) {
  // The negated entries after the plain ones: a prefix listed both ways counts as negated.
  std::vector<IpPrefix> all = entries;
  all.insert(all.end(), negated.begin(), negated.end());
  for (const Family family : {Family::V4, Family::V6}) {
    std::vector<KeyRange>& out = family == Family::V4 ? v4_ : v6_;
    for (const PrefixSpan& span : longest_prefix_spans(family, all)) {
      if (span.index >= entries.size()) continue;  // a negated entry's: not in the table
      if (!out.empty() && out.back().last != kKeyMax && out.back().last + 1 == span.range.first) {
        out.back().last = span.range.last;
      } else {
        out.push_back(span.range);
      }
    }
  }
}

bool AddressTable::contains(Family f, const IpAddress& a) const {
  const auto& r = ranges(f);
  const AddressKey key = address_key(f, a);
  auto it =
      std::upper_bound(r.begin(), r.end(), key, [](AddressKey k, const KeyRange& x) { return k < x.first; });
  return it != r.begin() && std::prev(it)->last >= key;
}

// ---------------------------------------------------------------------------------------------
// IntervalIndex

template <typename Key>
void IntervalIndex<Key>::build(const std::vector<Key>& starts, const std::vector<uint32_t>& values) {
  if (starts.size() >= kValue) throw std::length_error("rule set too large: address intervals");
  for (uint32_t v : values) {
    if (v & kKindMask) throw std::length_error("rule set too large: class pool");
  }
  nodes_.clear();
  children_.clear();
  leaves_.assign(1, Leaf{});  // the dummy leaf, read when find() lands on a value
  root_ = build_entry(starts, values, 0, static_cast<uint32_t>(starts.size()), 0);
  nodes_.shrink_to_fit();
  children_.shrink_to_fit();
  leaves_.shrink_to_fit();
}

// The entry for starts[lo, hi), which share their top `known_bits` bits; keys that reach it and
// lie below starts[lo] belong to the interval before (lo > 0 there: starts[0] == 0).
template <typename Key>
uint32_t IntervalIndex<Key>::build_entry(const std::vector<Key>& starts, const std::vector<uint32_t>& values,
                                         uint32_t lo, uint32_t hi, uint32_t known_bits) {
  const uint32_t before = values[lo == 0 ? 0 : lo - 1];
  if (lo == hi) return kValue | before;
  if (hi - lo <= kLeafKeys) {
    Leaf leaf;
    leaf.values[0] = before;
    for (uint32_t j = 0; j < kLeafKeys; ++j) {
      const uint32_t i = std::min(lo + j, hi - 1);
      leaf.keys[j] = starts[i];
      leaf.values[j + 1] = values[i];
    }
    leaves_.push_back(leaf);
    return kLeaf | static_cast<uint32_t>(leaves_.size() - 1);
  }
  // At least two distinct starts: the first and last differ below `known_bits`.
  const Key diff = starts[lo] ^ starts[hi - 1];
  const auto diff_hi = static_cast<uint64_t>(diff >> 64);
  const unsigned common = static_cast<unsigned>(
      diff_hi != 0 ? std::countl_zero(diff_hi) : 64 + std::countl_zero(static_cast<uint64_t>(diff)));
  // 8n to 16n children for n starts (see classifier.h).
  const unsigned stride = std::clamp<unsigned>(std::bit_width(hi - lo) + 3, 1, std::min(16u, kBits - common));
  Node node;
  // Only bits the parent has not compared need checking; a zero mask makes the check pass.
  node.mask = common == known_bits ? 0 : static_cast<Key>(~(static_cast<Key>(~Key{0}) >> common));
  node.prefix = starts[lo] & node.mask;
  node.shift = static_cast<uint8_t>(common);
  node.stride = static_cast<uint8_t>(stride);
  // Two entries before the children answer for keys below and above the shared prefix.
  children_.push_back(kValue | before);
  children_.push_back(kValue | values[hi - 1]);
  node.child_base = static_cast<uint32_t>(children_.size());
  const auto index = static_cast<uint32_t>(nodes_.size());
  if (index >= kLeaf) throw std::length_error("rule set too large: address index");
  nodes_.push_back(node);
  const uint32_t fanout = 1u << stride;
  children_.resize(children_.size() + fanout);
  auto child_of = [&](Key key) {
    return static_cast<uint32_t>(static_cast<Key>(key << common) >> (kBits - stride));
  };
  uint32_t first = lo;
  for (uint32_t c = 0; c < fanout; ++c) {
    uint32_t last = first;
    while (last < hi && child_of(starts[last]) == c) ++last;
    const uint32_t entry = build_entry(starts, values, first, last, common + stride);
    children_[node.child_base + c] = entry;
    first = last;
  }
  return index;
}

// Key bits [shift, shift + stride) from the top, from 64-bit halves: a variable shift of a
// 128-bit integer costs several times as much.
template <typename Key>
inline uint32_t IntervalIndex<Key>::child_index(Key key, unsigned shift, unsigned stride) noexcept {
  static_assert(sizeof(Key) == 16, "IPv4 has its own index");
  const auto hi = static_cast<uint64_t>(key >> 64);
  const auto lo = static_cast<uint64_t>(key);
  const uint64_t window = shift >= 64  ? lo << (shift - 64)
                          : shift == 0 ? hi
                                       : (hi << shift) | (lo >> (64 - shift));
  return static_cast<uint32_t>(window >> (64 - stride));
}

template <typename Key>
inline uint32_t IntervalIndex<Key>::step(Key key, uint32_t node_index) const noexcept {
  const Node& node = nodes_[node_index];
  // Outside the shared prefix the key lies before or after every start under this node: the two
  // entries before the children say which interval. Selected without a branch.
  const Key masked = key & node.mask;
  const int64_t inside = child_index(key, node.shift, node.stride);
  const int64_t outside = masked < node.prefix ? -2 : -1;
  return children_[node.child_base + (masked == node.prefix ? inside : outside)];
}

template <typename Key>
inline uint32_t IntervalIndex<Key>::last_step(Key key, uint32_t entry) const noexcept {
  // A value, or a leaf to search; leaf 0 is a dummy so that both are computed without a branch.
  const bool is_leaf = (entry & kKindMask) == kLeaf;
  const Leaf& leaf = leaves_[is_leaf ? entry & ~kKindMask : 0];
  uint32_t below = 0;
  for (uint32_t j = 0; j < kLeafKeys; ++j) below += leaf.keys[j] <= key;
  return is_leaf ? leaf.values[below] : entry & ~kKindMask;
}

template <typename Key>
uint32_t IntervalIndex<Key>::find(Key key) const noexcept {
  uint32_t entry = root_;
  while ((entry & kKindMask) == kNode) entry = step(key, entry);
  return last_step(key, entry);
}

template <typename Key>
void IntervalIndex<Key>::find_batch(std::span<const Key> keys, std::span<uint32_t> values) const noexcept {
  constexpr std::size_t kWalks = 32;
  uint32_t entry[kWalks];
  for (std::size_t first = 0; first < keys.size(); first += kWalks) {
    const std::size_t n = std::min(kWalks, keys.size() - first);
    const Key* key = keys.data() + first;
    for (std::size_t i = 0; i < n; ++i) entry[i] = root_;
    for (bool walking = (root_ & kKindMask) == kNode; walking;) {
      walking = false;
      // Without a branch per walk (a mispredicted one would discard the loads in flight): a walk
      // that has left the nodes steps node 0 too, and keeps its entry.
      for (std::size_t i = 0; i < n; ++i) {
        const bool at_node = (entry[i] & kKindMask) == kNode;
        const uint32_t next = step(key[i], at_node ? entry[i] : 0);
        entry[i] = at_node ? next : entry[i];
        walking = walking | ((entry[i] & kKindMask) == kNode);
      }
    }
    for (std::size_t i = 0; i < n; ++i) values[first + i] = last_step(key[i], entry[i]);
  }
}

template <typename Key>
std::size_t IntervalIndex<Key>::memory_bytes() const {
  return nodes_.capacity() * sizeof(Node) + children_.capacity() * sizeof(uint32_t) +
         leaves_.capacity() * sizeof(Leaf);
}

template class IntervalIndex<AddressKey>;

// --- IntervalIndex<uint32_t>: IPv4, leaves under a direct table.

namespace {
// Flipping the top bit maps unsigned order onto signed order, which SSE2 compares.
constexpr uint32_t kSignFlip = 0x8000'0000u;
}  // namespace

void IntervalIndex<uint32_t>::build(const std::vector<uint32_t>& starts,
                                    const std::vector<uint32_t>& values) {
  if (starts.empty() || starts[0] != 0 || values.size() != starts.size())
    throw std::logic_error("interval index: the starts must begin at 0, one value each");
  const uint32_t n = checked_u32(starts.size(), "address intervals");
  const uint32_t last = n - 1;
  // The leaves: the starts in order, 8 to a leaf. Slots past the last start hold the maximum key
  // and the last value, so that a key at the very top lands on the last interval either way.
  const uint32_t leaf_count = (n + kLeafKeys - 1) / kLeafKeys;
  leaves_.assign(leaf_count, Leaf{});
  for (uint32_t i = 0; i < leaf_count * kLeafKeys; ++i) {
    Leaf& leaf = leaves_[i / kLeafKeys];
    leaf.keys[i % kLeafKeys] = (i < n ? starts[i] : UINT32_MAX) ^ kSignFlip;
    leaf.values[i % kLeafKeys] = values[std::min(i, last)];
  }
  leaf_first_.clear();
  for (const Leaf& leaf : leaves_) leaf_first_.push_back(leaf.keys[0]);
  leaf_first_.resize(leaf_first_.size() + kWindow, UINT32_MAX ^ kSignFlip);
  tables_.clear();
  table_depth_ = 0;
  top_.resize(std::size_t{1} << kTopBits);
  constexpr uint32_t chunk_bits = 32 - kTopBits;
  for (uint32_t chunk = 0; chunk < top_.size(); ++chunk)
    top_[chunk] = build_entry(starts, chunk << chunk_bits, chunk_bits, 0);
  tables_.shrink_to_fit();
}

// The entry for the 2^chunk_bits addresses from chunk_first, `depth` tables below the top one.
uint32_t IntervalIndex<uint32_t>::build_entry(const std::vector<uint32_t>& starts, uint32_t chunk_first,
                                              uint32_t chunk_bits, uint32_t depth) {
  const uint32_t chunk_last = chunk_first + static_cast<uint32_t>((uint64_t{1} << chunk_bits) - 1);
  // The intervals holding the chunk's first and last addresses, and their leaves.
  const auto first = std::upper_bound(starts.begin(), starts.end(), chunk_first) - starts.begin() - 1;
  const auto last = std::upper_bound(starts.begin() + first, starts.end(), chunk_last) - starts.begin() - 1;
  const auto first_leaf = static_cast<uint32_t>(first / kLeafKeys);
  if (static_cast<uint32_t>(last / kLeafKeys) - first_leaf <= kWindow) return first_leaf;
  // More leaves than one count reaches: a table of the next bits. (A chunk of one address, where
  // the tables end, is never this: its first and last interval are one.)
  const auto table = static_cast<uint32_t>(tables_.size() >> kTableBits);
  if (table >= (1u << (32 - kTableBits))) throw std::length_error("rule set too large: address index");
  table_depth_ = std::max(table_depth_, depth + 1);
  tables_.resize(tables_.size() + (std::size_t{1} << kTableBits));
  const uint32_t sub_bits = chunk_bits - kTableBits;
  for (uint32_t j = 0; j < (1u << kTableBits); ++j) {
    const uint32_t entry = build_entry(starts, chunk_first + (j << sub_bits), sub_bits, depth + 1);
    tables_[(std::size_t{table} << kTableBits) + j] = entry;
  }
  return kTable | table;
}

KeyCounting best_key_counting() noexcept {
#if defined(__x86_64__)
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
  }();
  if (avx2) return KeyCounting::Avx2;
#endif
  return KeyCounting::Baseline;
}

namespace {

// Of N ascending keys (top bit flipped), those at or below the key.
template <uint32_t N>
inline uint32_t rank_baseline(const uint32_t* keys, uint32_t flipped_key) noexcept {
#if defined(__SSE2__)
  const __m128i x = _mm_set1_epi32(static_cast<int32_t>(flipped_key));
  const auto* k = reinterpret_cast<const __m128i*>(keys);
  const __m128i above_low =
      _mm_packs_epi32(_mm_cmpgt_epi32(_mm_loadu_si128(k), x), _mm_cmpgt_epi32(_mm_loadu_si128(k + 1), x));
  __m128i above_high = _mm_setzero_si128();
  if constexpr (N == 16) {
    above_high = _mm_packs_epi32(_mm_cmpgt_epi32(_mm_loadu_si128(k + 2), x),
                                 _mm_cmpgt_epi32(_mm_loadu_si128(k + 3), x));
  }
  const auto above = static_cast<uint32_t>(_mm_movemask_epi8(_mm_packs_epi16(above_low, above_high)));
  // The keys ascend: those above the key are a suffix, which starts at the count of the others.
  return static_cast<uint32_t>(std::countr_zero(above | (uint32_t{1} << N)));
#else
  uint32_t at_or_below = 0;
  for (uint32_t j = 0; j < N; ++j)
    at_or_below += static_cast<int32_t>(keys[j]) <= static_cast<int32_t>(flipped_key);
  return at_or_below;
#endif
}

#if defined(__x86_64__)
// rank_baseline() for code compiled for AVX2.
template <uint32_t N>
[[gnu::target("avx2,popcnt")]] inline uint32_t rank_avx2(const uint32_t* keys,
                                                         uint32_t flipped_key) noexcept {
  const __m256i x = _mm256_set1_epi32(static_cast<int32_t>(flipped_key));
  const auto* k = reinterpret_cast<const __m256i*>(keys);
  if constexpr (N == 8) {
    const __m256i above = _mm256_cmpgt_epi32(_mm256_loadu_si256(k), x);
    return N - static_cast<uint32_t>(__builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(above))));
  } else {
    static_assert(N == 16);
    // Packing interleaves the halves' lanes; a count does not mind the order.
    const __m256i above = _mm256_packs_epi32(_mm256_cmpgt_epi32(_mm256_loadu_si256(k), x),
                                             _mm256_cmpgt_epi32(_mm256_loadu_si256(k + 1), x));
    return N - static_cast<uint32_t>(__builtin_popcount(_mm256_movemask_epi8(above))) / 2;
  }
}
#endif

template <KeyCounting kCounting, uint32_t N>
inline uint32_t rank(const uint32_t* keys, uint32_t flipped_key) noexcept {
  static_assert(N == 8 || N == 16);
#if defined(__x86_64__)
  if constexpr (kCounting == KeyCounting::Avx2)
    return rank_avx2<N>(keys, flipped_key);
  else
#endif
    return rank_baseline<N>(keys, flipped_key);
}

}  // namespace

// A walk still in the tables takes the slot of the key's bits below `shift`; one that has left
// them keeps its entry. By masks: whether a chunk is crowded is a coin toss from walk to walk.
inline uint32_t IntervalIndex<uint32_t>::table_step(uint32_t entry, uint32_t key,
                                                    uint32_t shift) const noexcept {
  const uint32_t in_table = 0u - (entry >> 31);
  const uint32_t slot =
      (((entry & ~kTable) << kTableBits) | ((key >> shift) & ((1u << kTableBits) - 1))) & in_table;
  return (tables_[slot] & in_table) | (entry & ~in_table);
}

// The leaves from the entry's on whose first key is at or below the key; only the maximum key
// counts the padding past the last leaf, and it belongs to the last leaf.
template <KeyCounting kCounting>
inline uint32_t IntervalIndex<uint32_t>::leaf_of(uint32_t entry, uint32_t flipped_key) const noexcept {
  const uint32_t leaf = entry + rank<kCounting, kWindow>(&leaf_first_[entry + 1], flipped_key);
  return std::min(leaf, static_cast<uint32_t>(leaves_.size()) - 1);
}

// The walk only enters a leaf whose first start is at or below the key: at least one counts.
template <KeyCounting kCounting>
inline uint32_t IntervalIndex<uint32_t>::value(uint32_t leaf, uint32_t flipped_key) const noexcept {
  const Leaf& l = leaves_[leaf];
  return l.values[rank<kCounting, kLeafKeys>(l.keys, flipped_key) - 1];
}

uint32_t IntervalIndex<uint32_t>::find(uint32_t key) const noexcept {
  uint32_t entry = top_entry(key);
  uint32_t shift = 32 - kTopBits;
  for (uint32_t depth = 0; depth < table_depth_; ++depth) {
    shift -= kTableBits;
    entry = table_step(entry, key, shift);
  }
  const uint32_t flipped = key ^ kSignFlip;
  return value<KeyCounting::Baseline>(leaf_of<KeyCounting::Baseline>(entry, flipped), flipped);
}

void IntervalIndex<uint32_t>::find_batch(std::span<const uint32_t> keys, std::span<uint32_t> values,
                                         KeyCounting counting) const noexcept {
#if defined(__x86_64__)
  if (counting == KeyCounting::Avx2) return find_batch_avx2(keys, values);
#endif
  (void)counting;
  walk_batch<KeyCounting::Baseline>(keys, values);
}

#if defined(__x86_64__)
void IntervalIndex<uint32_t>::find_batch_avx2(std::span<const uint32_t> keys,
                                              std::span<uint32_t> values) const noexcept {
  walk_batch<KeyCounting::Avx2>(keys, values);
}
#endif

template <KeyCounting kCounting>
[[gnu::always_inline]] inline void IntervalIndex<uint32_t>::walk_batch(
    std::span<const uint32_t> keys, std::span<uint32_t> values) const noexcept {
  constexpr std::size_t kWalks = 32;
  uint32_t entry[kWalks];
  for (std::size_t first = 0; first < keys.size(); first += kWalks) {
    const std::size_t n = std::min(kWalks, keys.size() - first);
    const uint32_t* key = keys.data() + first;
    for (std::size_t i = 0; i < n; ++i) entry[i] = top_entry(key[i]);
    uint32_t shift = 32 - kTopBits;
    for (uint32_t depth = 0; depth < table_depth_; ++depth) {
      shift -= kTableBits;
      for (std::size_t i = 0; i < n; ++i) entry[i] = table_step(entry[i], key[i], shift);
    }
    for (std::size_t i = 0; i < n; ++i) {
      entry[i] = leaf_of<kCounting>(entry[i], key[i] ^ kSignFlip);
      __builtin_prefetch(leaves_[entry[i]].keys);
    }
    for (std::size_t i = 0; i < n; ++i) values[first + i] = value<kCounting>(entry[i], key[i] ^ kSignFlip);
  }
}

std::size_t IntervalIndex<uint32_t>::memory_bytes() const {
  return (top_.capacity() + tables_.capacity() + leaf_first_.capacity()) * sizeof(uint32_t) +
         leaves_.capacity() * sizeof(Leaf);
}

// ---------------------------------------------------------------------------------------------
// Classifier

class ClassifierBuilder {
 public:
  ClassifierBuilder(Classifier& c, std::span<const MatchSpec> specs, MatchOrder order)
      : c_(c), specs_(specs), order_(order) {}

  void run() {
    const std::size_t n = specs_.size();
    c_.rule_count_ = checked_u32(n, "rules");
    c_.words_ = std::max<uint32_t>(1, static_cast<uint32_t>((n + 63) / 64));
    c_.summary_words_ = (c_.words_ + 63) / 64;
    assign_priorities();
    for (auto& masks : c_.word_masks_) masks.assign(c_.words_, {});
    broad_.assign(c_.words_, 0);
    anchored_.assign(c_.words_, {});
    prepare_sparse_fields();
    choose_anchors();
    build_dense_fields();  // after the anchors: dense records summarize the broad rules
    assign_groups();
    emit_sparse_fields();
    c_.dense_pool_.shrink_to_fit();
    c_.sparse_pool_.shrink_to_fit();
  }

 private:
  using Field = Classifier::SparseField;
  static constexpr int kFields = Classifier::kSparseFields;

  // A sparse field as seen during the build. Address fields have a domain per family (their
  // intervals are indexed apart); ports have one.
  struct SparseBuild {
    std::vector<bool> wildcard;                                // by rule: the field is not constrained
    std::vector<std::array<std::vector<KeyRange>, 2>> ranges;  // by rule and domain: values accepted
    std::vector<std::array<bool, 2>> by_default;               // by rule and domain: stored as exceptions
    std::vector<uint64_t> default_bits[2];                     // by domain, by priority
    BitmapInterner interner;
    Intervals intervals[2];
    uint32_t no_port_class = 0;
    explicit SparseBuild(uint32_t words) : interner(words) {}
  };

  void assign_priorities() {
    const uint32_t n = c_.rule_count_;
    c_.priority_to_rule_.assign(std::size_t{c_.words_} * 64, Classifier::kNoMatch);
    priority_.assign(n, 0);
    uint32_t next = 0;
    if (order_ == MatchOrder::Ranked) {
      std::vector<bool> taken(n, false);
      for (uint32_t r = 0; r < n; ++r) {
        const uint32_t rank = specs_[r].rank;
        if (rank >= n || taken[rank])
          throw std::invalid_argument("classifier: ranks are not 0..N-1, each once");
        taken[rank] = true;
        priority_[r] = rank;
      }
    }
    for (uint32_t r = 0; r < n && order_ != MatchOrder::Ranked; ++r) {
      if (order_ == MatchOrder::First || specs_[r].quick) priority_[r] = next++;
    }
    if (order_ == MatchOrder::QuickOrLast) {
      for (uint32_t r = n; r-- > 0;) {
        if (!specs_[r].quick) priority_[r] = next++;
      }
    }
    for (uint32_t r = 0; r < n; ++r) c_.priority_to_rule_[priority_[r]] = r;
    c_.rule_priority_ = priority_;
  }

  void set_bit(std::vector<uint64_t>& bits, uint32_t rule) const {
    bits[priority_[rule] / 64] |= uint64_t{1} << (priority_[rule] % 64);
  }

  // --- Dense fields: every value of a small domain gets the bitmap of the rules accepting it.

  uint32_t intern_dense(const std::vector<uint64_t>& words) {
    auto [it, inserted] =
        dense_ids_.try_emplace(std::string(reinterpret_cast<const char*>(words.data()), words.size() * 8), 0);
    if (inserted) {
      it->second = checked_u32(c_.dense_pool_.size(), "dense pool");
      const std::size_t base = c_.dense_pool_.size();
      const uint32_t sw = c_.summary_words_;
      c_.dense_pool_.resize(base + 2 * sw + c_.words_, 0);
      for (uint32_t w = 0; w < c_.words_; ++w) {
        const uint64_t bit = uint64_t{1} << (w % 64);
        c_.dense_pool_[base + 2 * sw + w] = words[w];
        if (words[w] != 0) c_.dense_pool_[base + w / 64] |= bit;
        if (words[w] & broad_[w]) c_.dense_pool_[base + sw + w / 64] |= bit;
      }
    }
    return it->second;
  }

  // Builds one bitmap per value in [0, domain) from accept(rule, value), and returns the records.
  template <typename Accept>
  std::vector<uint32_t> dense_domain(uint32_t domain, Accept accept) {
    std::vector<std::vector<uint64_t>> bits(domain, std::vector<uint64_t>(c_.words_, 0));
    for (uint32_t r = 0; r < c_.rule_count_; ++r) {
      for (uint32_t v = 0; v < domain; ++v) {
        if (accept(specs_[r], v)) set_bit(bits[v], r);
      }
    }
    std::vector<uint32_t> records(domain);
    for (uint32_t v = 0; v < domain; ++v) records[v] = intern_dense(bits[v]);
    return records;
  }

  static bool has_ports(const MatchSpec& s) { return !s.src_ports.empty() || !s.dst_ports.empty(); }

  void build_dense_fields() {
    // Direction x interface. Ids above every id the rules name behave alike: the last slot.
    IfaceId max_id = 0;
    bool received_on = false;
    for (const MatchSpec& s : specs_) {
      for (const InterfaceTerm& t : s.interfaces) max_id = std::max(max_id, t.id);
      for (const InterfaceTerm& t : s.received_on) max_id = std::max(max_id, t.id);
      received_on = received_on || !s.received_on.empty();
    }
    c_.iface_slots_ = uint32_t{max_id} + 2;
    c_.received_slots_ = received_on ? c_.iface_slots_ : 1;
    const uint32_t slots = c_.iface_slots_;
    const uint32_t received = c_.received_slots_;
    // With the tag a packet carries: most rule sets name none, and this field stays as it was.
    // And the outcomes of the route checks that rules ask for (uRPF, no-route), where one does.
    uint16_t max_tag = 0;
    for (const MatchSpec& s : specs_) {
      max_tag = std::max(max_tag, s.tagged);
      if (s.urpf_failed) c_.route_checks_ |= Classifier::kUrpfFailed;
      if (s.src_route != RouteTest::None) c_.route_checks_ |= Classifier::kSrcNoRoute;
      if (s.dst_route != RouteTest::None) c_.route_checks_ |= Classifier::kDstNoRoute;
    }
    c_.tag_values_ = uint32_t{max_tag} + 1;
    c_.tag_slots_ = c_.tag_values_ * (c_.route_checks_ + 1);
    const uint32_t tags = c_.tag_slots_;
    const uint32_t values = c_.tag_values_;
    const auto any_of = [](const std::vector<InterfaceTerm>& terms, uint32_t id) {
      return terms.empty() || std::any_of(terms.begin(), terms.end(),
                                          [id](const InterfaceTerm& t) { return (t.id == id) != t.negated; });
    };
    c_.iface_records_ = dense_domain(3 * slots * received * tags, [=](const MatchSpec& s, uint32_t v) {
      static constexpr Direction kRows[3] = {Direction::In, Direction::Out, Direction::Any};
      const Direction row = kRows[v / tags / received / slots];
      if (!s.decides) return false;
      if (s.direction != Direction::Any && s.direction != row) return false;
      if (s.tagged != 0 && (v % tags % values == s.tagged) == s.tagged_negated) return false;
      const uint32_t routes = v % tags / values;
      if (s.urpf_failed && (routes & Classifier::kUrpfFailed) == 0) return false;
      const auto route_holds = [routes](RouteTest test, uint32_t no_route) {
        return test == RouteTest::None || ((routes & no_route) != 0) == (test == RouteTest::NoRoute);
      };
      if (!route_holds(s.src_route, Classifier::kSrcNoRoute) ||
          !route_holds(s.dst_route, Classifier::kDstNoRoute))
        return false;
      // Slot 0 is no interface (a packet the node sent), the last every interface no rule names.
      return any_of(s.received_on, v / tags % received) && any_of(s.interfaces, v / tags / received % slots);
    });

    // Family x protocol, with the protocols that ports, flags and ICMP types imply, and a row per
    // TOS the rules name.
    std::vector<uint8_t> tos_named;  // by row, from 1
    for (const MatchSpec& s : specs_) {
      if (s.tos && c_.tos_rows_[*s.tos] == 0) {
        tos_named.push_back(*s.tos);
        c_.tos_rows_[*s.tos] = static_cast<uint16_t>(512 * tos_named.size());
      }
    }
    const auto tos_slots = static_cast<uint32_t>(tos_named.size()) + 1;
    c_.extended_rows_ = c_.received_slots_ * c_.tag_slots_ * tos_slots > 1;
    c_.proto_records_ = dense_domain(512 * tos_slots, [&tos_named](const MatchSpec& s, uint32_t v) {
      const Family family = v % 512 >= 256 ? Family::V6 : Family::V4;
      const uint8_t proto = static_cast<uint8_t>(v % 256);
      const uint32_t row = v / 512;
      if (s.tos && (row == 0 || tos_named[row - 1] != *s.tos)) return false;
      if (s.family && *s.family != family) return false;
      if (!s.protocols.empty() &&
          std::find(s.protocols.begin(), s.protocols.end(), proto) == s.protocols.end()) {
        return false;
      }
      if (has_ports(s) && proto != ipproto::kTcp && proto != ipproto::kUdp) return false;
      if (s.flags && !s.flags_tcp_only && proto != ipproto::kTcp) return false;
      if (!s.icmp_types.empty() && proto != (s.icmp6 ? ipproto::kIcmp6 : ipproto::kIcmp)) return false;
      return true;
    });

    // Transport details: TCP flags, ICMP type (and code where some rule names one).
    std::vector<uint32_t> code_table_of(Classifier::kL4Other + 1, UINT32_MAX);
    uint32_t code_tables = 0;
    for (const MatchSpec& s : specs_) {
      for (const IcmpTypeMatch& t : s.icmp_types) {
        const uint32_t e = (s.icmp6 ? 512 : 256) + t.type;
        if (t.code >= 0 && code_table_of[e] == UINT32_MAX) code_table_of[e] = code_tables++;
      }
    }
    const uint32_t base = Classifier::kL4Other + 1;
    // Value v < base: an l4 entry; v >= base: code (v - base) % 256 of code table (v - base) / 256.
    std::vector<uint32_t> entry_of_table(code_tables);
    for (uint32_t e = 0; e < base; ++e) {
      if (code_table_of[e] != UINT32_MAX) entry_of_table[code_table_of[e]] = e;
    }
    auto records = dense_domain(base + 256 * code_tables, [&](const MatchSpec& s, uint32_t v) {
      uint32_t entry = v;
      int code = -1;
      if (v >= base) {
        entry = entry_of_table[(v - base) / 256];
        code = static_cast<int>((v - base) % 256);
      }
      if (entry < 256) return s.icmp_types.empty() && (!s.flags || (entry & s.flags->mask) == s.flags->set);
      if (s.flags && !s.flags_tcp_only) return false;
      if (entry == Classifier::kL4Other) return s.icmp_types.empty();
      if (s.icmp_types.empty()) return true;
      const bool v6 = entry >= 512;
      const uint8_t type = static_cast<uint8_t>(entry % 256);
      return s.icmp6 == v6 &&
             std::any_of(s.icmp_types.begin(), s.icmp_types.end(), [&](const IcmpTypeMatch& t) {
               return t.type == type && (t.code < 0 || t.code == code);
             });
    });
    c_.l4_base_.fill(Classifier::kL4Other);
    c_.l4_base_[ipproto::kTcp] = 0;
    c_.l4_base_[ipproto::kIcmp] = 256;
    c_.l4_base_[ipproto::kIcmp6] = 512;
    c_.l4_records_.assign(records.begin(), records.begin() + base);
    c_.l4_codes_.assign(records.begin() + base, records.end());
    for (uint32_t e = 0; e < base; ++e) {
      if (code_table_of[e] != UINT32_MAX) c_.l4_records_[e] = Classifier::kCodeTable | code_table_of[e];
    }
  }

  // --- Sparse fields: elementary intervals, each with the bitmap of the specific rules covering it.

  static std::vector<KeyRange> address_ranges(const std::vector<AddressTerm>& terms, Family family) {
    std::vector<KeyRange> out;
    for (const AddressTerm& t : terms) {
      switch (t.kind) {
        case AddressElement::Kind::Any:
          if (!t.negated) out.push_back({0, kKeyMax});
          break;
        case AddressElement::Kind::Prefix:
        case AddressElement::Kind::Range:
          if (t.prefix.family == family) {
            // A range ends where its last address's host prefix does (an IPv4 key's low bits).
            const uint8_t host = family == Family::V4 ? 32 : 128;
            std::vector<KeyRange> one{
                t.kind == AddressElement::Kind::Prefix
                    ? prefix_range(t.prefix)
                    : KeyRange{prefix_range(IpPrefix{family, t.prefix.address, host}).first,
                               prefix_range(IpPrefix{family, t.last, host}).last}};
            if (t.negated) one = complement(one, kKeyMax);
            out.insert(out.end(), one.begin(), one.end());
          }
          break;
        case AddressElement::Kind::Table:
          if (t.table != nullptr) {
            const auto& r = t.table->ranges(family);
            if (t.negated) {
              const auto c = complement(r, kKeyMax);
              out.insert(out.end(), c.begin(), c.end());
            } else {
              out.insert(out.end(), r.begin(), r.end());
            }
          } else if (t.negated) {
            out.push_back({0, kKeyMax});
          }
          break;
        case AddressElement::Kind::Interface:  // the compiler hands these over as tables
          break;
      }
    }
    normalize(out);
    return out;
  }

  void prepare_sparse_fields() {
    const uint32_t n = c_.rule_count_;
    for (int f = 0; f < kFields; ++f) {
      fields_[f] = std::make_unique<SparseBuild>(c_.words_);
      SparseBuild& b = *fields_[f];
      const bool address = f == Field::kSrcAddr || f == Field::kDstAddr;
      const AddressKey max = address ? kKeyMax : kPortMax;
      b.wildcard.assign(n, false);
      b.ranges.resize(n);
      b.by_default.assign(n, {false, false});
      for (uint32_t r = 0; r < n; ++r) {
        const MatchSpec& s = specs_[r];
        if (address) {
          const auto& terms = f == Field::kSrcAddr ? s.src : s.dst;
          if (!terms.empty()) {
            b.ranges[r][0] = address_ranges(terms, Family::V4);
            b.ranges[r][1] = address_ranges(terms, Family::V6);
          }
          b.wildcard[r] =
              terms.empty() || (covers_all(b.ranges[r][0], max) && covers_all(b.ranges[r][1], max));
        } else {
          // A port list, even one covering every port, is not a wildcard: it also requires that
          // the packet has ports at all.
          const auto& ports = f == Field::kSrcPort ? s.src_ports : s.dst_ports;
          b.ranges[r][0] = protocol_port_ranges(port_ranges(ports), s.protocols);
          b.wildcard[r] = ports.empty();
        }
        if (b.wildcard[r]) b.ranges[r] = {};
      }
      for (int d = 0; d < (address ? 2 : 1); ++d) sweep_domain(b, d, max);
      if (!address) {
        // Packets without ports: only rules without a port list accept them.
        std::vector<uint64_t> exceptions(c_.words_, 0);
        for (uint32_t r = 0; r < n; ++r) {
          if (!b.wildcard[r] && b.by_default[r][0]) set_bit(exceptions, r);
        }
        b.no_port_class = b.interner.intern(exceptions);
      }
    }
  }

  // Elementary intervals of one domain. A rule's bit in a class says where it differs from its
  // default: a rule that accepts most intervals (a wildcard, `! 10.0.0.0/8`, `port != 22`) is
  // accepted by default and listed where it is not; the others are listed where they are. Either
  // way few classes hold its bit, which keeps the compressed bitmaps small.
  void sweep_domain(SparseBuild& b, int d, AddressKey max) {
    const uint32_t n = c_.rule_count_;
    std::vector<AddressKey> bounds{0};
    for (uint32_t r = 0; r < n; ++r) {
      for (const KeyRange& k : b.ranges[r][d]) {
        bounds.push_back(k.first);
        if (k.last < max) bounds.push_back(k.last + 1);
      }
    }
    std::sort(bounds.begin(), bounds.end());
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
    auto interval_of = [&bounds](AddressKey k) {
      return static_cast<std::size_t>(std::upper_bound(bounds.begin(), bounds.end(), k) - bounds.begin() - 1);
    };
    b.default_bits[d].assign(c_.words_, 0);
    std::vector<Event> events;
    for (uint32_t r = 0; r < n; ++r) {
      bool by_default = b.wildcard[r];
      if (!by_default) {
        std::size_t covered = 0;
        for (const KeyRange& k : b.ranges[r][d]) covered += interval_of(k.last) - interval_of(k.first) + 1;
        by_default = covered * 2 > bounds.size();
      }
      b.by_default[r][d] = by_default;
      if (by_default) set_bit(b.default_bits[d], r);
      if (b.wildcard[r]) continue;
      for (const KeyRange& k : by_default ? complement(b.ranges[r][d], max) : b.ranges[r][d]) {
        events.push_back({k.first, priority_[r], true});
        if (k.last < max) events.push_back({k.last + 1, priority_[r], false});
      }
    }
    b.intervals[d] = sweep(events, b.interner, c_.words_);
  }

  // Each rule that constrains a sparse field (and is not stored by default there) is anchored on
  // the one where the most crowded interval it covers holds the fewest such rules: that bounds how
  // many candidates a packet matching it through that field brings along.
  void choose_anchors() {
    const uint32_t n = c_.rule_count_;
    constexpr uint32_t kUnscored = UINT32_MAX;
    std::vector<std::array<uint32_t, kFields>> score(n);
    for (int f = 0; f < kFields; ++f) {
      SparseBuild& b = *fields_[f];
      for (uint32_t r = 0; r < n; ++r) {
        const bool eligible = !b.wildcard[r] && !b.by_default[r][0] && !b.by_default[r][1];
        score[r][f] = eligible ? 0 : kUnscored;
      }
      for (int d = 0; d < 2; ++d) {
        const Intervals& iv = b.intervals[d];
        if (iv.starts.empty()) continue;
        std::vector<uint32_t> class_count(b.interner.classes().size(), UINT32_MAX);
        std::vector<uint32_t> counts(iv.classes.size());
        for (std::size_t i = 0; i < counts.size(); ++i) {
          uint32_t& c = class_count[iv.classes[i]];
          if (c == UINT32_MAX) {
            const auto& bits = b.interner.classes()[iv.classes[i]];
            c = 0;
            for (uint32_t w = 0; w < c_.words_; ++w) c += std::popcount(bits[w] & ~b.default_bits[d][w]);
          }
          counts[i] = c;
        }
        const RangeMax range_max(std::move(counts));
        auto interval_of = [&iv](AddressKey k) {
          return static_cast<std::size_t>(std::upper_bound(iv.starts.begin(), iv.starts.end(), k) -
                                          iv.starts.begin() - 1);
        };
        for (uint32_t r = 0; r < n; ++r) {
          if (score[r][f] == kUnscored) continue;
          for (const KeyRange& k : b.ranges[r][d]) {
            score[r][f] = std::max(score[r][f], range_max.max(interval_of(k.first), interval_of(k.last)));
          }
        }
      }
    }
    static constexpr Field kPreference[kFields] = {Field::kDstAddr, Field::kSrcAddr, Field::kDstPort,
                                                   Field::kSrcPort};
    for (uint32_t r = 0; r < n; ++r) {
      const uint32_t p = priority_[r];
      const uint64_t bit = uint64_t{1} << (p % 64);
      int best = -1;
      for (const Field f : kPreference) {
        if (score[r][f] != kUnscored && (best < 0 || score[r][f] < score[r][best])) best = f;
      }
      if (best < 0) {
        broad_[p / 64] |= bit;
      } else {
        anchored_[p / 64][best] |= bit;
      }
      for (int fam = 0; fam < 2; ++fam) {
        Classifier::WordMasks& m = c_.word_masks_[fam][p / 64];
        for (int f = 0; f < kFields; ++f) {
          const int d = f == Field::kSrcAddr || f == Field::kDstAddr ? fam : 0;
          if (fields_[f]->by_default[r][d]) m.by_default[f] |= bit;
        }
      }
    }
  }

  // The (direction, interface) group of each rule, for splitting anchor summaries: a rule for one
  // direction on one interface can only be a candidate for packets of that pass. The rest share
  // group 0, which every packet consults. At most kMaxGroups; the rest fall back to group 0.
  static constexpr uint32_t kMaxGroups = 64;  // a class record keeps its groups in one word

  void assign_groups() {
    const uint32_t slots = c_.iface_slots_;
    c_.packet_group_.assign(3 * slots, 0);
    group_of_priority_.assign(std::size_t{c_.words_} * 64, 0);
    c_.group_count_ = 1;
    for (uint32_t r = 0; r < c_.rule_count_; ++r) {
      const MatchSpec& s = specs_[r];
      if (s.direction == Direction::Any || s.interfaces.size() != 1 || s.interfaces[0].negated) continue;
      uint8_t& group = c_.packet_group_[(s.direction == Direction::In ? 0 : slots) + s.interfaces[0].id];
      if (group == 0 && c_.group_count_ < kMaxGroups) group = static_cast<uint8_t>(c_.group_count_++);
      group_of_priority_[priority_[r]] = group;
    }
  }

  void emit_sparse_fields() {
    const uint32_t sw = c_.summary_words_;
    for (int f = 0; f < kFields; ++f) {
      SparseBuild& b = *fields_[f];
      const auto& classes = b.interner.classes();
      std::vector<uint32_t> offsets(classes.size());
      std::vector<std::vector<uint64_t>> group_summaries(c_.group_count_);
      for (std::size_t id = 0; id < classes.size(); ++id) {
        const std::vector<uint64_t>& bits = classes[id];
        for (auto& g : group_summaries) g.assign(sw, 0);
        uint64_t own_groups = 0;  // the groups other than 0 with anchors on this class
        for (uint32_t w = 0; w < c_.words_; ++w) {
          for (uint64_t a = bits[w] & anchored_[w][f]; a != 0; a &= a - 1) {
            const uint32_t g = group_of_priority_[w * 64 + static_cast<uint32_t>(std::countr_zero(a))];
            group_summaries[g][w / 64] |= uint64_t{1} << (w % 64);
            own_groups |= uint64_t{g != 0} << g;
          }
        }
        // Each record starts a cache line: its first line holds all that most packets read.
        c_.sparse_pool_.resize((c_.sparse_pool_.size() + 7) / 8 * 8, 0);
        offsets[id] = checked_u32(c_.sparse_pool_.size(), "sparse pool");
        c_.sparse_pool_.push_back(own_groups);
        for (uint32_t s = 0; s < sw; ++s) {
          const uint32_t end = std::min(c_.words_, (s + 1) * 64);
          uint64_t summary = 0;
          for (uint32_t w = s * 64; w < end; ++w) summary |= uint64_t{bits[w] != 0} << (w % 64);
          c_.sparse_pool_.push_back(summary);
          for (uint32_t g = 0; g < c_.group_count_; ++g) {
            if (g == 0 || (own_groups >> g & 1)) c_.sparse_pool_.push_back(group_summaries[g][s]);
          }
          for (uint32_t w = s * 64; w < end; ++w) {
            if (bits[w] != 0) c_.sparse_pool_.push_back(bits[w]);
          }
        }
        c_.sparse_pool_.push_back(0);  // read, then masked off, for words not present
      }
      if (f == Field::kSrcAddr || f == Field::kDstAddr) {
        for (int fam = 0; fam < 2; ++fam) {
          const Intervals& iv = b.intervals[fam];
          std::vector<uint32_t> values(iv.classes.size());
          for (std::size_t i = 0; i < values.size(); ++i) values[i] = offsets[iv.classes[i]];
          if (fam == 0) {
            std::vector<uint32_t> starts(iv.starts.size());
            for (std::size_t i = 0; i < starts.size(); ++i)
              starts[i] = static_cast<uint32_t>(iv.starts[i] >> 96);
            c_.v4_index_[f].build(starts, values);
          } else {
            c_.v6_index_[f].build(iv.starts, values);
          }
        }
      } else {
        if (classes.size() > 65536) throw std::length_error("rule set too large: distinct port classes");
        const int side = f == Field::kSrcPort ? 0 : 1;
        std::vector<uint16_t> table(2 * kPorts);
        const Intervals& iv = b.intervals[0];
        for (std::size_t i = 0; i < iv.starts.size(); ++i) {
          const auto first = static_cast<uint32_t>(iv.starts[i]);
          const auto end = i + 1 < iv.starts.size() ? static_cast<uint32_t>(iv.starts[i + 1]) : 2 * kPorts;
          std::fill(table.begin() + first, table.begin() + end, static_cast<uint16_t>(iv.classes[i]));
        }
        // Blocks of 256 ports, identical blocks stored once: rules name few ports, so most blocks
        // are one class and the whole table stays small.
        std::map<std::vector<uint16_t>, uint16_t> blocks;
        auto& stored = c_.port_blocks_[side];
        stored.clear();
        for (uint32_t hi = 0; hi < 2 * kPorts / 256; ++hi) {
          std::vector<uint16_t> block(table.begin() + hi * 256, table.begin() + (hi + 1) * 256);
          auto [it, inserted] = blocks.try_emplace(block, static_cast<uint16_t>(blocks.size()));
          if (inserted) stored.insert(stored.end(), block.begin(), block.end());
          c_.port_top_[side][hi] = it->second;
        }
        c_.port_none_class_[side] = static_cast<uint16_t>(b.no_port_class);
        c_.port_records_[side] = std::move(offsets);
      }
      fields_[f].reset();
    }
  }

  Classifier& c_;
  std::span<const MatchSpec> specs_;
  MatchOrder order_;
  std::vector<uint32_t> priority_;                       // by rule
  std::vector<uint8_t> group_of_priority_;               // anchor group, by priority
  std::vector<uint64_t> broad_;                          // by word: the broad rules
  std::vector<std::array<uint64_t, kFields>> anchored_;  // by word and field: the rules anchored there
  std::unordered_map<std::string, uint32_t> dense_ids_;
  std::unique_ptr<SparseBuild> fields_[kFields];
};

Classifier::Classifier(std::span<const MatchSpec> specs, MatchOrder order) {
  ClassifierBuilder(*this, specs, order).run();
}

// Where a sparse record keeps a word's bits (a word of the block being scanned), and whether it
// keeps them at all: an absent word's slot is the next present word's (or the next block's first
// word, or the record's trailing zero), which the caller masks off.
[[gnu::always_inline]] inline const uint64_t* Classifier::sparse_slot(const Probe& probe, int field,
                                                                      uint32_t word,
                                                                      bool& present) const noexcept {
  const uint64_t* block = probe.block[field];
  const uint64_t summary = block[0];
  const uint64_t below = summary & ((uint64_t{1} << (word % 64)) - 1);
  present = (summary >> (word % 64) & 1) != 0;
  return block + probe.block_header[field] + popcount64(below);
}

[[gnu::always_inline]] inline uint64_t Classifier::sparse_word(const Probe& probe, int field,
                                                               uint32_t word) const noexcept {
  bool present = false;
  const uint64_t value = *sparse_slot(probe, field, word, present);
  return value & (uint64_t{0} - uint64_t{present});
}

[[gnu::always_inline]] inline uint32_t Classifier::port_class(int side, uint32_t udp,
                                                              uint16_t port) const noexcept {
  return port_blocks_[side][uint32_t{port_top_[side][udp << 8 | port >> 8]} * 256 + (port & 255)];
}

[[gnu::always_inline]] inline uint32_t Classifier::l4_record(const PacketView& p,
                                                             bool has_l4) const noexcept {
  // TCP: the flags; ICMP: the type, at 256 or 512; anything else, or no transport header: kL4Other.
  // Selected by masks: in a batch of mixed protocols, branches here would be guesses.
  const uint32_t base = has_l4 ? l4_base_[p.proto] : kL4Other;
  const uint32_t flags = p.tcp.flags;
  const uint32_t type = p.icmp.type;
  const uint32_t value = type ^ ((flags ^ type) & (uint32_t{0} - uint32_t{p.proto == ipproto::kTcp}));
  const uint32_t entry = base + (value & (uint32_t{0} - uint32_t{base != kL4Other}));
  const uint32_t record = l4_records_[entry];
  if (!(record & kCodeTable)) return record;
  return l4_codes_[(record & ~kCodeTable) * 256 + p.icmp.code];
}

[[gnu::always_inline]] inline void Classifier::begin(Probe& probe, const MatchQuery& query) const noexcept {
  const PacketView& p = *query.packet;
  const uint32_t row = query.direction == Direction::In ? 0 : query.direction == Direction::Out ? 1 : 2;
  const uint32_t slot = std::min<uint32_t>(query.iface, iface_slots_ - 1);
  const bool v6 = p.family == Family::V6;
  // A later fragment has no transport header: only rules that ask nothing of it can match.
  const bool has_l4 = !p.is_fragment || p.is_first_fragment;
  const bool has_ports = has_l4 && (p.proto == ipproto::kTcp || p.proto == ipproto::kUdp);
  uint32_t pass = row * iface_slots_ + slot;
  uint32_t tos_row = 0;
  // Only where a rule names an arrival interface, tests tags, asks the routing tables or names a
  // TOS (the same branch for every packet of a rule set): the products and clamps would lengthen
  // every query's way to its first record (10 rules -1.5 %).
  if (extended_rows_) {
    tos_row = tos_rows_[p.tos];
    const uint32_t routes = (query.urpf_failed ? kUrpfFailed : 0) | (query.src_no_route ? kSrcNoRoute : 0) |
                            (query.dst_no_route ? kDstNoRoute : 0);
    pass =
        (pass * received_slots_ + std::min<uint32_t>(query.received_on, received_slots_ - 1)) * tag_slots_ +
        (query.tag < tag_values_ ? query.tag : 0) + (routes & route_checks_) * tag_values_;
  }
  probe.dense[0] = dense_pool_.data() + iface_records_[pass];
  probe.dense[1] = dense_pool_.data() + proto_records_[tos_row + (v6 ? 256 : 0) + p.proto];
  probe.dense[2] = dense_pool_.data() + l4_record(p, has_l4);
  const uint32_t udp = p.proto == ipproto::kUdp;
  probe.sparse[kSrcPort] = sparse_pool_.data() +
                           port_records_[0][has_ports ? port_class(0, udp, p.src_port) : port_none_class_[0]];
  probe.sparse[kDstPort] = sparse_pool_.data() +
                           port_records_[1][has_ports ? port_class(1, udp, p.dst_port) : port_none_class_[1]];
  probe.group = packet_group_[row * iface_slots_ + slot];
  probe.masks = word_masks_[v6].data();
}

[[gnu::always_inline]] inline void Classifier::set_addresses(Probe& probe, uint32_t src_record,
                                                             uint32_t dst_record) const noexcept {
  probe.sparse[kSrcAddr] = sparse_pool_.data() + src_record;
  probe.sparse[kDstAddr] = sparse_pool_.data() + dst_record;
}

template <bool kBatched>
[[gnu::always_inline]] inline void Classifier::find_anchors(Probe& probe) const noexcept {
  // In each field's blocks: the group every packet consults, and this pass's own.
  const uint64_t group_bit = uint64_t{1} << probe.group;
#pragma GCC unroll 4
  for (int f = 0; f < kSparseFields; ++f) {
    const uint64_t own_groups = probe.sparse[f][0];
    probe.block[f] = probe.sparse[f] + 1;
    probe.block_header[f] = 2 + static_cast<uint32_t>(popcount64(own_groups));
    // Without an own summary, point at the shared one: OR-ing it twice changes nothing.
    const bool present = (own_groups & group_bit) != 0;
    const auto own = 2 + static_cast<uint32_t>(popcount64(own_groups & (group_bit - 1)));
    if constexpr (kBatched) {
      // In a batch, by a mask: whether a record has the pass's group is a coin toss per packet
      // in a large rule set, and a wrong guess would discard the batch's loads in flight.
      probe.own[f] = 1 + ((own - 1) & (0u - uint32_t{present}));
    } else {
      // Alone, by a branch: a right guess lets the next loads start before the header arrives.
      probe.own[f] = present ? own : 1;
    }
  }
  probe.next_summary_word = 0;
  probe.word_base = 0;
  probe.candidates = 0;
}

[[gnu::always_inline]] inline void Classifier::next_candidates(Probe& probe) const noexcept {
  const uint32_t sw_count = summary_words_;
  while (probe.candidates == 0 && probe.next_summary_word < sw_count) {
    const uint32_t sw = probe.next_summary_word++;
    if (sw != 0) {
#pragma GCC unroll 4
      for (int f = 0; f < kSparseFields; ++f)
        probe.block[f] += probe.block_header[f] + popcount64(probe.block[f][0]);
    }
    // Broad rules are candidates where all three dense fields have one that accepts the packet;
    // anchored rules where their field lists them and the dense fields have any rule for it.
    const uint64_t* const* dense = probe.dense;
    uint64_t anchored = 0;
#pragma GCC unroll 4
    for (int f = 0; f < kSparseFields; ++f) anchored |= probe.block[f][1] | probe.block[f][probe.own[f]];
    probe.word_base = sw * 64;
    probe.candidates = (anchored & dense[0][sw] & dense[1][sw] & dense[2][sw]) |
                       (dense[0][sw_count + sw] & dense[1][sw_count + sw] & dense[2][sw_count + sw]);
  }
}

template <typename OnWord>
[[gnu::always_inline]] inline uint32_t Classifier::finish(Probe& probe, OnWord on_word,
                                                          uint32_t first) const noexcept {
  const uint32_t sw_count = summary_words_;
  const uint64_t* const* dense = probe.dense;
  for (;;) {
    while (probe.candidates != 0) {
      const uint32_t w = probe.word_base + static_cast<uint32_t>(std::countr_zero(probe.candidates));
      probe.candidates &= probe.candidates - 1;
      on_word();
      if (w < first / 64) continue;  // with `first` 0, as match() passes it, compiled away
      // Every rule of the word is tested, whatever brought the word here: rules anchored elsewhere
      // (another group, another field) that do not match fail like any other; no branch per field
      // keeps the pipeline full.
      const WordMasks& m = probe.masks[w];
      uint64_t all = dense[0][2 * sw_count + w] & dense[1][2 * sw_count + w] & dense[2][2 * sw_count + w];
      if (w == first / 64) all &= ~uint64_t{0} << (first % 64);
#pragma GCC unroll 4
      for (int f = 0; f < kSparseFields; ++f) all &= sparse_word(probe, f, w) ^ m.by_default[f];
      if (all != 0) return priority_to_rule_[w * 64 + static_cast<uint32_t>(std::countr_zero(all))];
    }
    if (probe.next_summary_word >= sw_count) return kNoMatch;
    next_candidates(probe);
  }
}

// Built twice, with and without POPCNT (the rank of a compressed word is a popcount); the loader
// picks one version once for the CPU it runs on. GCC only: clang 14 emits the clones but no symbol
// that callers in other files can link against. PAIRWALL_NO_CLONES: the thread sanitizer's build.
#if defined(__x86_64__) && !defined(__POPCNT__) && !defined(__clang__) && !defined(PAIRWALL_NO_CLONES)
#define PAIRWALL_POPCNT_CLONES __attribute__((target_clones("popcnt", "default")))
#else
#define PAIRWALL_POPCNT_CLONES
#endif

// Inlined into match()'s clones: out of line it is built for the baseline target only, and each
// of its popcounts is a library call (pairwall-bench engine --only rules --seconds 0.3 --runs 3,
// three alternating invocations: rules_single_mpps 19.7-19.8 -> 22.8-23.6 at 10 rules, 8.9-9.0 ->
// 10.5 at 10,000).
[[gnu::always_inline]] inline void Classifier::start(Probe& probe, const MatchQuery& query) const noexcept {
  begin(probe, query);
  const PacketView& p = *query.packet;
  const bool v6 = p.family == Family::V6;
  set_addresses(probe,
                v6 ? v6_index_[0].find(address_key(Family::V6, p.src)) : v4_index_[0].find(p.src.v4_value()),
                v6 ? v6_index_[1].find(address_key(Family::V6, p.dst)) : v4_index_[1].find(p.dst.v4_value()));
  find_anchors<false>(probe);
  next_candidates(probe);
}

PAIRWALL_POPCNT_CLONES
uint32_t Classifier::match(const MatchQuery& query) const noexcept {
  Probe probe;
  start(probe, query);
  return finish(probe, [] {});
}

uint32_t Classifier::match_from(const MatchQuery& query, uint32_t first) const noexcept {
  Probe probe;
  start(probe, query);
  return finish(
      probe, [] {}, first);
}

uint32_t Classifier::words_tested(const PacketView& p, Direction direction, IfaceId iface) const noexcept {
  Probe probe;
  start(probe, MatchQuery{&p, direction, iface, 0});
  uint32_t words = 0;
  finish(probe, [&words] { ++words; });
  return words;
}

PAIRWALL_POPCNT_CLONES
void Classifier::match_batch(std::span<const MatchQuery> queries, std::span<uint32_t> out) const noexcept {
  for (std::size_t first = 0; first < queries.size(); first += kBatch) {
    const std::size_t n = std::min(kBatch, queries.size() - first);
    const MatchQuery* query = queries.data() + first;
    if (n < kBatchFloor) {
      for (std::size_t i = 0; i < n; ++i) out[first + i] = match(query[i]);
      continue;
    }
    Probe probes[kBatch];

    // 1. The fields looked up in small tables, then the address index walks, per family. The
    // port records are known here and start loading while the walks run.
    uint32_t v4_keys[2][kBatch];
    AddressKey v6_keys[2][kBatch];
    uint32_t records[2][2][kBatch];  // [v4/v6][src/dst]
    uint8_t v4_probe[kBatch];
    uint8_t v6_probe[kBatch];
    std::size_t v4_count = 0;
    std::size_t v6_count = 0;
    for (std::size_t i = 0; i < n; ++i) {
      begin(probes[i], query[i]);
      __builtin_prefetch(probes[i].sparse[kSrcPort]);
      __builtin_prefetch(probes[i].sparse[kDstPort]);
      // Written to both families' lists, kept in one: a branch would guess the family.
      const PacketView& p = *query[i].packet;
      const bool v6 = p.family == Family::V6;
      v6_keys[0][v6_count] = address_key(Family::V6, p.src);
      v6_keys[1][v6_count] = address_key(Family::V6, p.dst);
      v6_probe[v6_count] = static_cast<uint8_t>(i);
      v4_keys[0][v4_count] = p.src.v4_value();
      v4_keys[1][v4_count] = p.dst.v4_value();
      v4_probe[v4_count] = static_cast<uint8_t>(i);
      v6_count += v6;
      v4_count += !v6;
    }
    for (int side = 0; side < 2; ++side) {
      v4_index_[side].find_batch({v4_keys[side], v4_count}, {records[0][side], v4_count});
      v6_index_[side].find_batch({v6_keys[side], v6_count}, {records[1][side], v6_count});
    }

    // 2. The address records' first lines (header, anchor and word summaries).
    for (std::size_t j = 0; j < v4_count; ++j)
      set_addresses(probes[v4_probe[j]], records[0][0][j], records[0][1][j]);
    for (std::size_t j = 0; j < v6_count; ++j)
      set_addresses(probes[v6_probe[j]], records[1][0][j], records[1][1][j]);
    for (std::size_t i = 0; i < n; ++i) {
      __builtin_prefetch(probes[i].sparse[kSrcAddr]);
      __builtin_prefetch(probes[i].sparse[kDstAddr]);
    }

    // 3. The pass's own anchor summaries and the first candidate word; 4. the tests, in priority
    // order. Neither prefetches for the next: the lines they read are mostly the records' first,
    // which stage 2 brings, and prefetching the own anchor summaries and the first candidate
    // word's lines cost more instructions than their misses did (pairwall-bench engine --only
    // rules --seconds 0.5 --runs 3, three alternating invocations each: 1,000 rules 18.1-18.4 ->
    // 20.6-21.1 Mpps, 10,000 rules 13.9-14.3 -> 15.2-15.4).
    for (std::size_t i = 0; i < n; ++i) {
      find_anchors<true>(probes[i]);
      next_candidates(probes[i]);
    }
    for (std::size_t i = 0; i < n; ++i) out[first + i] = finish(probes[i], [] {});
  }
}

std::size_t Classifier::memory_bytes() const {
  std::size_t bytes = sizeof(*this) +
                      (priority_to_rule_.capacity() + rule_priority_.capacity()) * sizeof(uint32_t) +
                      (word_masks_[0].capacity() + word_masks_[1].capacity()) * sizeof(WordMasks) +
                      (dense_pool_.capacity() + sparse_pool_.capacity()) * 8 + packet_group_.capacity() +
                      (iface_records_.capacity() + proto_records_.capacity() + l4_records_.capacity() +
                       l4_codes_.capacity()) *
                          sizeof(uint32_t);
  for (int side = 0; side < 2; ++side)
    bytes += v4_index_[side].memory_bytes() + v6_index_[side].memory_bytes();
  for (int side = 0; side < 2; ++side) {
    bytes +=
        port_blocks_[side].capacity() * sizeof(uint16_t) + port_records_[side].capacity() * sizeof(uint32_t);
  }
  return bytes;
}

}  // namespace pairwall::engine::rules
