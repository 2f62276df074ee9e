// pf's `table <name> counters` (pfctl -T show -v): packets and bytes per table entry, by the
// direction of the pass that met them and by what its rule did. A table counts for the filter
// rules that name it as a source or destination: each packet such a rule decides, and the packets
// of the states it created, folded in when the rule's own counters are (StateTable).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "daemon/engine/address.h"
#include "daemon/engine/rules/ast.h"
#include "daemon/engine/rules/classifier.h"

namespace pairwall::engine::rules {

// pfctl's rows: In/Block, In/Pass, Out/Block, Out/Pass.
enum class CountedAs : uint8_t { InBlock, InPass, OutBlock, OutPass };
inline constexpr std::size_t kCountedAsCount = 4;

inline CountedAs counted_as(bool out, bool pass) {
  return static_cast<CountedAs>((out ? 2 : 0) + (pass ? 1 : 0));
}

struct EntryCounters {
  std::array<std::atomic<uint64_t>, kCountedAsCount> packets{};
  std::array<std::atomic<uint64_t>, kCountedAsCount> bytes{};

  void add(CountedAs as, uint64_t packet_count, uint64_t byte_count) noexcept {
    packets[static_cast<std::size_t>(as)].fetch_add(packet_count, std::memory_order_relaxed);
    bytes[static_cast<std::size_t>(as)].fetch_add(byte_count, std::memory_order_relaxed);
  }
  void zero() noexcept;
};

class TableCounters {
 public:
  struct Entry {
    TableEntry entry;
    std::shared_ptr<EntryCounters> counters;
  };

  // `earlier`: the table of the same name in the rule set this one replaces, whose entries the
  // table still holds (the same prefix, `!` alike) keep their counters, as pf's commit of a table
  // keeps the entries it finds again.
  TableCounters(const Table& table, const TableCounters* earlier);
  TableCounters(const TableCounters&) = delete;
  TableCounters& operator=(const TableCounters&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<Entry>& entries() const { return entries_; }
  // The counters of the entry that holds `address`: the longest prefix listed, a `!` entry
  // included, as pf's pfr_update_stats finds it. nullptr where no entry does.
  EntryCounters* find(Family family, const IpAddress& address) const noexcept;
  // Those of the entry listed as `entry`, nullptr where the table has none.
  EntryCounters* listed(const TableEntry& entry) const noexcept;

 private:
  const Entry* listed_entry(const TableEntry& entry) const noexcept;

  struct Span {
    AddressKey first = 0;
    AddressKey last = 0;
    EntryCounters* counters = nullptr;
  };
  std::string name_;
  std::vector<Entry> entries_;              // sorted
  std::array<std::vector<Span>, 2> spans_;  // by family, IPv4 first
};

// A filter rule's table that counts, and which of a packet's addresses it is asked of.
struct CountedTable {
  const TableCounters* table = nullptr;
  bool destination = false;
};

// Adds `packet_count` packets of `byte_count` bytes from `src` to `dst` to the entries of `tables`
// that hold those addresses.
void count_in_tables(std::span<const CountedTable> tables, Family family, const IpAddress& src,
                     const IpAddress& dst, CountedAs as, uint64_t packet_count, uint64_t byte_count) noexcept;

}  // namespace pairwall::engine::rules
