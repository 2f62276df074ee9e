// IP addresses and prefixes as two 64-bit words in host order, so that comparisons, interval
// arithmetic and hashing are plain integer operations. An IPv4 address lives in the low 32 bits
// of `lo` with `hi == 0`; the family is carried beside the address, never inferred from it.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pairwall::engine {

enum class Family : uint8_t { V4 = 4, V6 = 6 };

struct IpAddress {
  uint64_t hi = 0;
  uint64_t lo = 0;

  static constexpr IpAddress v4(uint32_t host_order) { return {0, host_order}; }
  constexpr uint32_t v4_value() const { return static_cast<uint32_t>(lo); }

  // Reads 4 or 16 network-order bytes.
  static IpAddress from_v4_bytes(const uint8_t* p);
  static IpAddress from_v6_bytes(const uint8_t* p);
  void to_v4_bytes(uint8_t* p) const;
  void to_v6_bytes(uint8_t* p) const;

  friend constexpr auto operator<=>(const IpAddress&, const IpAddress&) = default;
};

struct IpPrefix {
  Family family = Family::V4;
  IpAddress address;   // host bits are zero
  uint8_t length = 0;  // 0..32 or 0..128

  // First and last address covered, inclusive.
  IpAddress first() const { return address; }
  IpAddress last() const;
  bool contains(Family f, const IpAddress& a) const;

  friend bool operator==(const IpPrefix&, const IpPrefix&) = default;
  friend auto operator<=>(const IpPrefix&, const IpPrefix&) = default;  // for sets of prefixes
};

// Parses "192.0.2.1", "192.0.2.0/24", "2001:db8::/32". Host bits set in a prefix are an error
// (nullopt), as in pfctl: "10.0.0.1/8" is almost always a typo.
std::optional<IpAddress> parse_address(std::string_view text, Family* family_out);
std::optional<IpPrefix> parse_prefix(std::string_view text);

// A table entry as an operator writes it: a prefix, with "!" before it for an exception.
struct TableEntry {
  bool negated = false;
  IpPrefix prefix;

  friend auto operator<=>(const TableEntry&, const TableEntry&) = default;
};
std::optional<TableEntry> parse_table_entry(std::string_view text);
// For a table entry refused only for its host bits ("10.0.0.1/8", "!10.0.0.1/8"): its network as
// the operator likely meant it ("10.0.0.0/8", "!10.0.0.0/8"), for the error to offer; else "".
std::string table_entry_network(std::string_view text);

// A table entry with how long ago it came into its table: what the sync link carries of a table
// the pair shares, so that `tables expire` on either node takes the same entries.
struct AgedTableEntry {
  TableEntry entry;
  uint32_t age_s = 0;
};

std::string to_string(Family f, const IpAddress& a);
std::string to_string(const IpPrefix& p);
// As pf writes it: a host without its /32 or /128, a network with its length.
std::string address_text(const IpPrefix& p);

}  // namespace pairwall::engine
