#include "daemon/engine/rules/classifier.h"

#include <algorithm>
#include <array>
#include <bit>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

namespace pairwall::engine::rules {

namespace {

constexpr AddressKey kKeyMax = ~static_cast<AddressKey>(0);
constexpr AddressKey kPortMax = 65535;

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
    uint32_t count = 0;
    for (uint32_t w = 0; w < words_; ++w) {
      if (bits[w] == 0) continue;
      key_.append(reinterpret_cast<const char*>(&w), sizeof w);
      key_.append(reinterpret_cast<const char*>(&bits[w]), sizeof bits[w]);
      count += static_cast<uint32_t>(std::popcount(bits[w]));
    }
    auto [it, inserted] = ids_.try_emplace(key_, static_cast<uint32_t>(classes_.size()));
    if (inserted) {
      classes_.push_back(bits);
      counts_.push_back(count);
    }
    return it->second;
  }

  const std::vector<std::vector<uint64_t>>& classes() const { return classes_; }
  uint32_t count(uint32_t id) const { return counts_[id]; }

 private:
  uint32_t words_;
  std::string key_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<std::vector<uint64_t>> classes_;
  std::vector<uint32_t> counts_;
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

AddressTable::AddressTable(const std::vector<IpPrefix>& entries, const std::vector<IpPrefix>& negated) {
  struct Item {
    KeyRange range;
    uint8_t length;
    bool negated;
  };
  for (const Family family : {Family::V4, Family::V6}) {
    std::vector<Item> items;
    for (const IpPrefix& p : entries) {
      if (p.family == family) items.push_back({prefix_range(p), p.length, false});
    }
    for (const IpPrefix& p : negated) {
      if (p.family == family) items.push_back({prefix_range(p), p.length, true});
    }
    // Outer prefixes first, so the stack below holds the chain of prefixes containing a point
    // with the longest on top; for the same prefix the negated one goes on top and wins.
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
      if (a.range.first != b.range.first) return a.range.first < b.range.first;
      if (a.length != b.length) return a.length < b.length;
      return a.negated < b.negated;
    });
    std::vector<KeyRange>& out = family == Family::V4 ? v4_ : v6_;
    auto emit = [&out](AddressKey first, AddressKey last, bool member) {
      if (!member) return;
      if (!out.empty() && out.back().last != kKeyMax && out.back().last + 1 == first) {
        out.back().last = last;
      } else {
        out.push_back({first, last});
      }
    };
    std::vector<const Item*> stack;
    AddressKey pos = 0;
    bool exhausted = false;  // pos ran past the end of the address space
    auto close_top = [&]() {
      const Item* top = stack.back();
      stack.pop_back();
      if (exhausted || pos > top->range.last) return;
      emit(pos, top->range.last, !top->negated);
      if (top->range.last == kKeyMax) {
        exhausted = true;
      } else {
        pos = top->range.last + 1;
      }
    };
    for (const Item& item : items) {
      while (!stack.empty() && stack.back()->range.last < item.range.first) close_top();
      if (!exhausted && pos < item.range.first) {
        emit(pos, item.range.first - 1, !stack.empty() && !stack.back()->negated);
        pos = item.range.first;
      }
      stack.push_back(&item);
    }
    while (!stack.empty()) close_top();
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

void IntervalIndex::build(std::vector<AddressKey> starts, std::vector<uint32_t> values) {
  starts_ = std::move(starts);
  values_ = std::move(values);
  nodes_.clear();
  children_.clear();
  root_ = build_entry(0, static_cast<uint32_t>(starts_.size()), 0);
}

// Builds the entry for starts_[lo, hi), all of which share their top `known_bits` bits.
uint32_t IntervalIndex::build_entry(uint32_t lo, uint32_t hi, uint32_t known_bits) {
  if (hi - lo <= kLeafSize) return kLeafFlag | lo << 4 | (hi - lo);
  // hi - lo >= 2 distinct starts, so the first and last differ somewhere below `known_bits`.
  const AddressKey diff = starts_[lo] ^ starts_[hi - 1];
  const uint64_t diff_hi = static_cast<uint64_t>(diff >> 64);
  const unsigned common =
      diff_hi != 0 ? std::countl_zero(diff_hi) : 64 + std::countl_zero(static_cast<uint64_t>(diff));
  const unsigned stride = std::clamp<unsigned>(std::bit_width(hi - lo) - 1, 1, std::min(16u, 128 - common));
  if (lo >= (1u << 27) || hi >= (1u << 27)) throw std::length_error("rule set too large: address intervals");
  Node node;
  node.prefix = common == 0 ? 0 : starts_[lo] & ~(kKeyMax >> common);
  node.shift = static_cast<uint8_t>(common);
  node.check_prefix = common > known_bits;
  node.lo = lo;
  node.hi = hi;
  node.stride = static_cast<uint8_t>(stride);
  node.child_base = static_cast<uint32_t>(children_.size());
  const uint32_t index = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back(node);
  const uint32_t fanout = 1u << stride;
  children_.resize(children_.size() + fanout);
  auto child_of = [&](AddressKey key) { return static_cast<uint32_t>((key << common) >> (128 - stride)); };
  uint32_t first = lo;
  for (uint32_t c = 0; c < fanout; ++c) {
    uint32_t last = first;
    while (last < hi && child_of(starts_[last]) == c) ++last;
    // An empty child answers with the interval before it (starts_[first - 1]): first >= 1 there,
    // because the node's first child holds starts_[lo] and lo is 0 or preceded by a smaller start.
    const uint32_t entry = build_entry(first, last, common + stride);
    children_[node.child_base + c] = entry;
    first = last;
  }
  return index;
}

uint32_t IntervalIndex::find(AddressKey key) const noexcept {
  uint32_t entry = root_;
  while (!(entry & kLeafFlag)) {
    const Node& node = nodes_[entry];
    if (node.check_prefix) {
      // Outside the shared prefix: the key lies before or after every start under this node.
      const AddressKey q = key >> (128 - node.shift);
      const AddressKey p = node.prefix >> (128 - node.shift);
      if (q != p) return values_[q < p ? node.lo - 1 : node.hi - 1];
    }
    entry = children_[node.child_base + static_cast<uint32_t>((key << node.shift) >> (128 - node.stride))];
  }
  uint32_t i = (entry >> 4) & 0x7ff'ffff;
  const uint32_t end = i + (entry & 0xf);
  while (i < end && starts_[i] <= key) ++i;
  return values_[i - 1];
}

std::size_t IntervalIndex::memory_bytes() const {
  return nodes_.capacity() * sizeof(Node) + children_.capacity() * sizeof(uint32_t) +
         starts_.capacity() * sizeof(AddressKey) + values_.capacity() * sizeof(uint32_t);
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
    c_.word_masks_.assign(c_.words_, {});
    c_.broad_summary_.assign(c_.summary_words_, 0);
    build_dense_fields();
    prepare_sparse_fields();
    choose_anchors();
    emit_sparse_fields();
  }

 private:
  using Field = Classifier::SparseField;
  static constexpr int kFields = Classifier::kSparseFields;

  // A sparse field as seen during the build. Address fields hold both families: key ranges of a
  // rule are per family and the families' intervals are indexed apart.
  struct SparseBuild {
    std::vector<bool> wildcard;                                // by rule
    std::vector<std::array<std::vector<KeyRange>, 2>> ranges;  // by rule, [v4/v6] (ports use [0])
    BitmapInterner interner;
    Intervals intervals[2];
    explicit SparseBuild(uint32_t words) : interner(words) {}
  };

  void assign_priorities() {
    const uint32_t n = c_.rule_count_;
    c_.priority_to_rule_.assign(std::size_t{c_.words_} * 64, Classifier::kNoMatch);
    priority_.assign(n, 0);
    uint32_t next = 0;
    for (uint32_t r = 0; r < n; ++r) {
      if (order_ == MatchOrder::First || specs_[r].quick) priority_[r] = next++;
    }
    if (order_ == MatchOrder::QuickOrLast) {
      for (uint32_t r = n; r-- > 0;) {
        if (!specs_[r].quick) priority_[r] = next++;
      }
    }
    for (uint32_t r = 0; r < n; ++r) c_.priority_to_rule_[priority_[r]] = r;
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
      c_.dense_pool_.resize(base + c_.summary_words_ + c_.words_, 0);
      for (uint32_t w = 0; w < c_.words_; ++w) {
        c_.dense_pool_[base + c_.summary_words_ + w] = words[w];
        if (words[w] != 0) c_.dense_pool_[base + w / 64] |= uint64_t{1} << (w % 64);
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
    for (const MatchSpec& s : specs_) {
      for (const InterfaceTerm& t : s.interfaces) max_id = std::max(max_id, t.id);
    }
    c_.iface_slots_ = uint32_t{max_id} + 2;
    const uint32_t slots = c_.iface_slots_;
    c_.iface_records_ = dense_domain(3 * slots, [slots](const MatchSpec& s, uint32_t v) {
      static constexpr Direction kRows[3] = {Direction::In, Direction::Out, Direction::Any};
      const Direction row = kRows[v / slots];
      if (s.direction != Direction::Any && s.direction != row) return false;
      if (s.interfaces.empty()) return true;
      const uint32_t id = v % slots;
      return std::any_of(s.interfaces.begin(), s.interfaces.end(),
                         [id](const InterfaceTerm& t) { return (t.id == id) != t.negated; });
    });

    // Family x protocol, with the protocols that ports, flags and ICMP types imply.
    c_.proto_records_ = dense_domain(512, [](const MatchSpec& s, uint32_t v) {
      const Family family = v >= 256 ? Family::V6 : Family::V4;
      const uint8_t proto = static_cast<uint8_t>(v % 256);
      if (s.family && *s.family != family) return false;
      if (!s.protocols.empty() &&
          std::find(s.protocols.begin(), s.protocols.end(), proto) == s.protocols.end()) {
        return false;
      }
      if (has_ports(s) && proto != ipproto::kTcp && proto != ipproto::kUdp) return false;
      if (s.flags && proto != ipproto::kTcp) return false;
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
      if (s.flags) return false;
      if (entry == Classifier::kL4Other) return s.icmp_types.empty();
      if (s.icmp_types.empty()) return true;
      const bool v6 = entry >= 512;
      const uint8_t type = static_cast<uint8_t>(entry % 256);
      return s.icmp6 == v6 &&
             std::any_of(s.icmp_types.begin(), s.icmp_types.end(), [&](const IcmpTypeMatch& t) {
               return t.type == type && (t.code < 0 || t.code == code);
             });
    });
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
          if (t.prefix.family == family) {
            std::vector<KeyRange> one{prefix_range(t.prefix)};
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
      b.wildcard.assign(n, false);
      b.ranges.resize(n);
      const bool address = f == Field::kSrcAddr || f == Field::kDstAddr;
      // Class 0 is the empty bitmap: the port class of packets without ports.
      b.interner.intern(std::vector<uint64_t>(c_.words_, 0));
      std::vector<Event> events[2];
      for (uint32_t r = 0; r < n; ++r) {
        const MatchSpec& s = specs_[r];
        if (address) {
          const auto& terms = f == Field::kSrcAddr ? s.src : s.dst;
          if (terms.empty()) {
            b.wildcard[r] = true;
            continue;
          }
          b.ranges[r][0] = address_ranges(terms, Family::V4);
          b.ranges[r][1] = address_ranges(terms, Family::V6);
          if (covers_all(b.ranges[r][0], kKeyMax) && covers_all(b.ranges[r][1], kKeyMax)) {
            b.wildcard[r] = true;
            b.ranges[r] = {};
            continue;
          }
        } else {
          const auto& ports = f == Field::kSrcPort ? s.src_ports : s.dst_ports;
          // A port list, even one covering every port, is never a wildcard: it also requires that
          // the packet has ports at all.
          if (ports.empty()) {
            b.wildcard[r] = true;
            continue;
          }
          b.ranges[r][0] = port_ranges(ports);
        }
        for (int fam = 0; fam < 2; ++fam) {
          for (const KeyRange& k : b.ranges[r][fam]) {
            events[fam].push_back({k.first, priority_[r], true});
            const AddressKey max = address ? kKeyMax : kPortMax;
            if (k.last < max) events[fam].push_back({k.last + 1, priority_[r], false});
          }
        }
      }
      b.intervals[0] = sweep(events[0], b.interner, c_.words_);
      if (address) b.intervals[1] = sweep(events[1], b.interner, c_.words_);
    }
  }

  // Each rule that constrains a sparse field is anchored on the one where the most crowded
  // interval it covers holds the fewest specific rules: that bounds how many candidates a packet
  // matching it through that field brings along.
  void choose_anchors() {
    const uint32_t n = c_.rule_count_;
    constexpr uint32_t kUnscored = UINT32_MAX;
    std::vector<std::array<uint32_t, kFields>> score(n);
    for (int f = 0; f < kFields; ++f) {
      SparseBuild& b = *fields_[f];
      for (uint32_t r = 0; r < n; ++r) score[r][f] = b.wildcard[r] ? kUnscored : 0;
      for (int fam = 0; fam < 2; ++fam) {
        const Intervals& iv = b.intervals[fam];
        if (iv.starts.empty()) continue;
        std::vector<uint32_t> counts(iv.classes.size());
        for (std::size_t i = 0; i < counts.size(); ++i) counts[i] = b.interner.count(iv.classes[i]);
        const RangeMax range_max(std::move(counts));
        auto interval_of = [&iv](AddressKey k) {
          return static_cast<std::size_t>(std::upper_bound(iv.starts.begin(), iv.starts.end(), k) -
                                          iv.starts.begin() - 1);
        };
        for (uint32_t r = 0; r < n; ++r) {
          for (const KeyRange& k : b.ranges[r][fam]) {
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
      Classifier::WordMasks& m = c_.word_masks_[p / 64];
      int best = -1;
      for (const Field f : kPreference) {
        if (score[r][f] != kUnscored && (best < 0 || score[r][f] < score[r][best])) best = f;
      }
      if (best < 0) {
        m.broad |= bit;
        c_.broad_summary_[p / 64 / 64] |= uint64_t{1} << (p / 64 % 64);
      } else {
        m.anchored[best] |= bit;
      }
      for (int f = 0; f < kFields; ++f) {
        if (fields_[f]->wildcard[r]) m.wildcard[f] |= bit;
      }
    }
  }

  void emit_sparse_fields() {
    const uint32_t sw = c_.summary_words_;
    for (int f = 0; f < kFields; ++f) {
      SparseBuild& b = *fields_[f];
      const auto& classes = b.interner.classes();
      std::vector<uint32_t> offsets(classes.size());
      for (std::size_t id = 0; id < classes.size(); ++id) {
        const std::vector<uint64_t>& bits = classes[id];
        offsets[id] = checked_u32(c_.sparse_pool_.size(), "sparse pool");
        const std::size_t base = c_.sparse_pool_.size();
        c_.sparse_pool_.resize(base + 3 * sw, 0);
        uint64_t rank = 0;
        for (uint32_t w = 0; w < c_.words_; ++w) {
          if (w % 64 == 0) c_.sparse_pool_[base + 2 * sw + w / 64] = rank;
          if (bits[w] == 0) continue;
          const uint64_t bit = uint64_t{1} << (w % 64);
          if (bits[w] & c_.word_masks_[w].anchored[f]) c_.sparse_pool_[base + w / 64] |= bit;
          c_.sparse_pool_[base + sw + w / 64] |= bit;
          c_.sparse_pool_.push_back(bits[w]);
          ++rank;
        }
        c_.sparse_pool_.push_back(0);  // read, then masked off, for words not present
      }
      if (f == Field::kSrcAddr || f == Field::kDstAddr) {
        for (int fam = 0; fam < 2; ++fam) {
          Intervals& iv = b.intervals[fam];
          std::vector<uint32_t> values(iv.classes.size());
          for (std::size_t i = 0; i < values.size(); ++i) values[i] = offsets[iv.classes[i]];
          c_.address_index_[f][fam].build(std::move(iv.starts), std::move(values));
        }
      } else {
        if (classes.size() > 65536) throw std::length_error("rule set too large: distinct port classes");
        const int side = f == Field::kSrcPort ? 0 : 1;
        auto& table = c_.port_classes_[side];
        table.assign(65536, 0);
        const Intervals& iv = b.intervals[0];
        for (std::size_t i = 0; i < iv.starts.size(); ++i) {
          const auto first = static_cast<uint32_t>(iv.starts[i]);
          const auto end = i + 1 < iv.starts.size() ? static_cast<uint32_t>(iv.starts[i + 1]) : 65536u;
          std::fill(table.begin() + first, table.begin() + end, static_cast<uint16_t>(iv.classes[i]));
        }
        c_.port_records_[side] = std::move(offsets);
      }
      fields_[f].reset();
    }
  }

  Classifier& c_;
  std::span<const MatchSpec> specs_;
  MatchOrder order_;
  std::vector<uint32_t> priority_;  // by rule
  std::unordered_map<std::string, uint32_t> dense_ids_;
  std::unique_ptr<SparseBuild> fields_[kFields];
};

Classifier::Classifier(std::span<const MatchSpec> specs, MatchOrder order) {
  ClassifierBuilder(*this, specs, order).run();
}

inline uint64_t Classifier::sparse_word(const uint64_t* record, uint32_t word) const noexcept {
  const uint32_t sw = summary_words_;
  const uint64_t summary = record[sw + word / 64];
  const uint64_t below = summary & ((uint64_t{1} << (word % 64)) - 1);
  const uint64_t value = record[3 * sw + record[2 * sw + word / 64] + std::popcount(below)];
  return (summary >> (word % 64) & 1) ? value : 0;
}

inline uint32_t Classifier::l4_record(const PacketView& p, bool has_l4) const noexcept {
  uint32_t entry = kL4Other;
  if (has_l4) {
    if (p.proto == ipproto::kTcp) {
      entry = p.tcp.flags;
    } else if (p.proto == ipproto::kIcmp) {
      entry = 256 + p.icmp.type;
    } else if (p.proto == ipproto::kIcmp6) {
      entry = 512 + p.icmp.type;
    }
  }
  const uint32_t record = l4_records_[entry];
  if (!(record & kCodeTable)) return record;
  return l4_codes_[(record & ~kCodeTable) * 256 + p.icmp.code];
}

uint32_t Classifier::match(const PacketView& p, Direction direction, IfaceId iface) const noexcept {
  const uint32_t row = direction == Direction::In ? 0 : direction == Direction::Out ? 1 : 2;
  const uint32_t slot = std::min<uint32_t>(iface, iface_slots_ - 1);
  const bool v6 = p.family == Family::V6;
  // A later fragment has no transport header: only rules that ask nothing of it can match.
  const bool has_l4 = !p.is_fragment || p.is_first_fragment;
  const bool has_ports = has_l4 && (p.proto == ipproto::kTcp || p.proto == ipproto::kUdp);

  const uint64_t* dense[3] = {
      dense_pool_.data() + iface_records_[row * iface_slots_ + slot],
      dense_pool_.data() + proto_records_[(v6 ? 256 : 0) + p.proto],
      dense_pool_.data() + l4_record(p, has_l4),
  };
  const uint64_t* sparse[kSparseFields] = {
      sparse_pool_.data() + address_index_[0][v6].find(address_key(p.family, p.src)),
      sparse_pool_.data() + address_index_[1][v6].find(address_key(p.family, p.dst)),
      sparse_pool_.data() + port_records_[0][has_ports ? port_classes_[0][p.src_port] : 0],
      sparse_pool_.data() + port_records_[1][has_ports ? port_classes_[1][p.dst_port] : 0],
  };

  const uint32_t sw_count = summary_words_;
  for (uint32_t sw = 0; sw < sw_count; ++sw) {
    uint64_t candidates = broad_summary_[sw] | sparse[0][sw] | sparse[1][sw] | sparse[2][sw] | sparse[3][sw];
    candidates &= dense[0][sw] & dense[1][sw] & dense[2][sw];
    while (candidates != 0) {
      const uint32_t w = sw * 64 + static_cast<uint32_t>(std::countr_zero(candidates));
      candidates &= candidates - 1;
      const WordMasks& m = word_masks_[w];
      uint64_t hit = m.broad;
      uint64_t all = dense[0][sw_count + w] & dense[1][sw_count + w] & dense[2][sw_count + w];
      for (int f = 0; f < kSparseFields; ++f) {
        const uint64_t s = sparse_word(sparse[f], w);
        hit |= s & m.anchored[f];
        all &= s | m.wildcard[f];
      }
      hit &= all;
      if (hit != 0) return priority_to_rule_[w * 64 + static_cast<uint32_t>(std::countr_zero(hit))];
    }
  }
  return kNoMatch;
}

std::size_t Classifier::memory_bytes() const {
  std::size_t bytes = sizeof(*this) + priority_to_rule_.capacity() * sizeof(uint32_t) +
                      word_masks_.capacity() * sizeof(WordMasks) +
                      (broad_summary_.capacity() + dense_pool_.capacity() + sparse_pool_.capacity()) * 8 +
                      (iface_records_.capacity() + proto_records_.capacity() + l4_records_.capacity() +
                       l4_codes_.capacity()) *
                          sizeof(uint32_t);
  for (const auto& side : address_index_) {
    for (const IntervalIndex& index : side) bytes += index.memory_bytes();
  }
  for (int side = 0; side < 2; ++side) {
    bytes +=
        port_classes_[side].capacity() * sizeof(uint16_t) + port_records_[side].capacity() * sizeof(uint32_t);
  }
  return bytes;
}

}  // namespace pairwall::engine::rules
