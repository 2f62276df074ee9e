#include "daemon/engine/rules/table_counters.h"

#include <algorithm>
#include <iterator>

namespace pairwall::engine::rules {

void EntryCounters::zero() noexcept {
  for (auto& p : packets) p.store(0, std::memory_order_relaxed);
  for (auto& b : bytes) b.store(0, std::memory_order_relaxed);
}

TableCounters::TableCounters(const Table& table, const TableCounters* earlier) : name_(table.name) {
  entries_.reserve(table.entry_count());
  for (const IpPrefix& p : table.entries) entries_.push_back({{false, p}, nullptr});
  for (const IpPrefix& p : table.negated_entries) entries_.push_back({{true, p}, nullptr});
  std::sort(entries_.begin(), entries_.end(),
            [](const Entry& a, const Entry& b) { return a.entry < b.entry; });
  for (Entry& e : entries_) {
    const Entry* kept = earlier != nullptr ? earlier->listed_entry(e.entry) : nullptr;
    e.counters = kept != nullptr ? kept->counters : std::make_shared<EntryCounters>();
  }
  std::vector<IpPrefix> prefixes;
  prefixes.reserve(entries_.size());
  for (const Entry& e : entries_) prefixes.push_back(e.entry.prefix);
  for (const Family family : {Family::V4, Family::V6}) {
    auto& spans = spans_[family == Family::V4 ? 0 : 1];
    for (const PrefixSpan& s : longest_prefix_spans(family, prefixes))
      spans.push_back({s.range.first, s.range.last, entries_[s.index].counters.get()});
  }
}

EntryCounters* TableCounters::find(Family family, const IpAddress& address) const noexcept {
  const auto& spans = spans_[family == Family::V4 ? 0 : 1];
  const AddressKey key = address_key(family, address);
  auto it = std::upper_bound(spans.begin(), spans.end(), key,
                             [](AddressKey k, const Span& s) { return k < s.first; });
  if (it == spans.begin() || std::prev(it)->last < key) return nullptr;
  return std::prev(it)->counters;
}

const TableCounters::Entry* TableCounters::listed_entry(const TableEntry& entry) const noexcept {
  const auto at = std::lower_bound(entries_.begin(), entries_.end(), entry,
                                   [](const Entry& x, const TableEntry& key) { return x.entry < key; });
  return at != entries_.end() && at->entry == entry ? &*at : nullptr;
}

EntryCounters* TableCounters::listed(const TableEntry& entry) const noexcept {
  const Entry* e = listed_entry(entry);
  return e != nullptr ? e->counters.get() : nullptr;
}

void count_in_tables(std::span<const CountedTable> tables, Family family, const IpAddress& src,
                     const IpAddress& dst, CountedAs as, uint64_t packet_count,
                     uint64_t byte_count) noexcept {
  for (const CountedTable& t : tables) {
    if (EntryCounters* entry = t.table->find(family, t.destination ? dst : src))
      entry->add(as, packet_count, byte_count);
  }
}

}  // namespace pairwall::engine::rules
