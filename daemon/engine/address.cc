#include "daemon/engine/address.h"

#include <arpa/inet.h>

#include <array>
#include <cstring>

namespace pairwall::engine {

namespace {

uint64_t load_be64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}

void store_be64(uint64_t v, uint8_t* p) {
  for (int i = 7; i >= 0; --i) {
    p[i] = static_cast<uint8_t>(v);
    v >>= 8;
  }
}

// Host bits of a prefix of `length` within the family's width, as a 128-bit mask (hi, lo).
IpAddress host_mask(Family f, uint8_t length) {
  if (f == Family::V4) {
    uint64_t m = length >= 32 ? 0 : (uint64_t{0xffffffff} >> length);
    return {0, m};
  }
  if (length >= 128) return {0, 0};
  if (length >= 64) return {0, length == 64 ? ~uint64_t{0} : (~uint64_t{0} >> (length - 64))};
  return {length == 0 ? ~uint64_t{0} : (~uint64_t{0} >> length), ~uint64_t{0}};
}

}  // namespace

IpAddress IpAddress::from_v4_bytes(const uint8_t* p) {
  return v4(static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
            static_cast<uint32_t>(p[2]) << 8 | p[3]);
}

IpAddress IpAddress::from_v6_bytes(const uint8_t* p) {
  return {load_be64(p), load_be64(p + 8)};
}

void IpAddress::to_v4_bytes(uint8_t* p) const {
  uint32_t v = v4_value();
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

void IpAddress::to_v6_bytes(uint8_t* p) const {
  store_be64(hi, p);
  store_be64(lo, p + 8);
}

IpAddress IpPrefix::last() const {
  IpAddress m = host_mask(family, length);
  return {address.hi | m.hi, address.lo | m.lo};
}

bool IpPrefix::contains(Family f, const IpAddress& a) const {
  if (f != family) return false;
  IpAddress m = host_mask(family, length);
  return (a.hi & ~m.hi) == address.hi && (a.lo & ~m.lo) == address.lo;
}

std::optional<IpAddress> parse_address(std::string_view text, Family* family_out) {
  // inet_pton needs a terminated string; nothing longer than this is an address.
  std::array<char, INET6_ADDRSTRLEN + 1> buf{};
  if (text.empty() || text.size() >= buf.size()) return std::nullopt;
  std::memcpy(buf.data(), text.data(), text.size());

  std::array<uint8_t, 16> bytes{};
  if (text.find(':') == std::string_view::npos) {
    if (inet_pton(AF_INET, buf.data(), bytes.data()) != 1) return std::nullopt;
    if (family_out) *family_out = Family::V4;
    return IpAddress::from_v4_bytes(bytes.data());
  }
  if (inet_pton(AF_INET6, buf.data(), bytes.data()) != 1) return std::nullopt;
  if (family_out) *family_out = Family::V6;
  return IpAddress::from_v6_bytes(bytes.data());
}

namespace {

// "ADDRESS[/LEN]" with LEN within the family's width; host bits not looked at.
std::optional<IpPrefix> parse_prefix_any_bits(std::string_view text) {
  std::string_view addr_text = text;
  std::optional<unsigned> length;
  if (auto slash = text.find('/'); slash != std::string_view::npos) {
    addr_text = text.substr(0, slash);
    std::string_view len_text = text.substr(slash + 1);
    if (len_text.empty() || len_text.size() > 3) return std::nullopt;
    unsigned v = 0;
    for (char c : len_text) {
      if (c < '0' || c > '9') return std::nullopt;
      v = v * 10 + static_cast<unsigned>(c - '0');
    }
    length = v;
  }
  Family family = Family::V4;
  auto address = parse_address(addr_text, &family);
  if (!address) return std::nullopt;
  unsigned width = family == Family::V4 ? 32 : 128;
  if (!length) length = width;
  if (*length > width) return std::nullopt;
  return IpPrefix{family, *address, static_cast<uint8_t>(*length)};
}

IpPrefix network_of(const IpPrefix& p) {
  const IpAddress m = host_mask(p.family, p.length);
  return IpPrefix{p.family, {p.address.hi & ~m.hi, p.address.lo & ~m.lo}, p.length};
}

}  // namespace

std::optional<IpPrefix> parse_prefix(std::string_view text) {
  const auto p = parse_prefix_any_bits(text);
  if (!p || network_of(*p) != *p) return std::nullopt;
  return p;
}

std::optional<TableEntry> parse_table_entry(std::string_view text) {
  const bool negated = text.starts_with('!');
  const auto prefix = parse_prefix(text.substr(negated ? 1 : 0));
  if (!prefix) return std::nullopt;
  return TableEntry{negated, *prefix};
}

std::string table_entry_network(std::string_view text) {
  const bool negated = text.starts_with('!');
  const auto p = parse_prefix_any_bits(text.substr(negated ? 1 : 0));
  if (!p || network_of(*p) == *p) return {};
  return (negated ? "!" : "") + to_string(network_of(*p));
}

std::string to_string(Family f, const IpAddress& a) {
  std::array<uint8_t, 16> bytes{};
  std::array<char, INET6_ADDRSTRLEN> buf{};
  if (f == Family::V4) {
    a.to_v4_bytes(bytes.data());
    inet_ntop(AF_INET, bytes.data(), buf.data(), buf.size());
  } else {
    a.to_v6_bytes(bytes.data());
    inet_ntop(AF_INET6, bytes.data(), buf.data(), buf.size());
  }
  return buf.data();
}

std::string to_string(const IpPrefix& p) {
  return to_string(p.family, p.address) + "/" + std::to_string(p.length);
}

std::string address_text(const IpPrefix& p) {
  const bool host = p.length == (p.family == Family::V4 ? 32 : 128);
  return host ? to_string(p.family, p.address) : to_string(p);
}

}  // namespace pairwall::engine
