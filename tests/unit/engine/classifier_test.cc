// The decision structure against pf's semantics: hand-written tables per field, then random rule
// sets checked against a linear reference evaluator that follows the rules one by one, as pf does.
#include "daemon/engine/rules/classifier.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace pairwall::engine::rules {
namespace {

constexpr uint32_t kNone = Classifier::kNoMatch;

IpPrefix prefix(const std::string& text) {
  auto p = parse_prefix(text);
  REQUIRE(p.has_value());
  return *p;
}

IpAddress address(const std::string& text) {
  Family f;
  auto a = parse_address(text, &f);
  REQUIRE(a.has_value());
  return *a;
}

AddressTerm net(const std::string& text, bool negated = false) {
  AddressTerm t;
  t.kind = AddressElement::Kind::Prefix;
  t.prefix = prefix(text);
  t.negated = negated;
  return t;
}

AddressTerm table_term(const AddressTable& table, bool negated = false) {
  AddressTerm t;
  t.kind = AddressElement::Kind::Table;
  t.table = &table;
  t.negated = negated;
  return t;
}

PortMatch port_op(PortMatch::Op op, uint16_t low, uint16_t high = 0) {
  return PortMatch{op, low, high};
}

struct Packet {
  PacketView view;

  static Packet make(uint8_t proto, const std::string& src, uint16_t sport, const std::string& dst,
                     uint16_t dport) {
    Packet p;
    Family f;
    p.view.src = *parse_address(src, &f);
    p.view.dst = *parse_address(dst, &f);
    p.view.family = f;
    p.view.proto = proto;
    p.view.src_port = sport;
    p.view.dst_port = dport;
    return p;
  }
  static Packet tcp(const std::string& src, uint16_t sport, const std::string& dst, uint16_t dport,
                    uint8_t flags = tcpflag::kSyn) {
    Packet p = make(ipproto::kTcp, src, sport, dst, dport);
    p.view.tcp.flags = flags;
    return p;
  }
  static Packet udp(const std::string& src, uint16_t sport, const std::string& dst, uint16_t dport) {
    return make(ipproto::kUdp, src, sport, dst, dport);
  }
  static Packet icmp(const std::string& src, const std::string& dst, uint8_t type, uint8_t code) {
    Packet p = make(ipproto::kIcmp, src, 0, dst, 0);
    if (p.view.family == Family::V6) p.view.proto = ipproto::kIcmp6;
    p.view.icmp.type = type;
    p.view.icmp.code = code;
    return p;
  }
};

uint32_t run(const std::vector<MatchSpec>& specs, const Packet& p, Direction dir = Direction::In,
             IfaceId iface = 1, MatchOrder order = MatchOrder::QuickOrLast) {
  const Classifier c(specs, order);
  return c.match(p.view, dir, iface);
}

// --- Reference: each rule tested in order, with the semantics classifier.h documents.

struct RefTable {
  std::vector<IpPrefix> entries;
  std::vector<IpPrefix> negated;
  AddressTable resolved;
};

bool bit_prefix_contains(const IpPrefix& p, Family f, const IpAddress& a) {
  if (p.family != f) return false;
  for (int i = 0; i < p.length; ++i) {
    const int width = f == Family::V4 ? 32 : 128;
    const int from_lsb = width - 1 - i;
    auto bit = [&](const IpAddress& x) {
      return from_lsb >= 64 ? (x.hi >> (from_lsb - 64)) & 1 : (x.lo >> from_lsb) & 1;
    };
    if (bit(p.address) != bit(a)) return false;
  }
  return true;
}

bool ref_table_contains(const RefTable& t, Family f, const IpAddress& a) {
  int best = -1;
  bool member = false;
  for (const IpPrefix& p : t.entries) {
    if (bit_prefix_contains(p, f, a) && p.length > best) best = p.length, member = true;
  }
  for (const IpPrefix& p : t.negated) {
    if (bit_prefix_contains(p, f, a) && p.length >= best) best = p.length, member = false;
  }
  return member;
}

// What a query says beyond the packet and its pass: what the routing tables said (MatchQuery's
// urpf_failed, src_no_route, dst_no_route) and where the packet arrived.
struct PassFacts {
  bool urpf_failed = false;
  bool src_no_route = false;
  bool dst_no_route = false;
  IfaceId received_on = kNoIface;
};

struct Reference {
  std::deque<RefTable> tables;

  const RefTable& table_of(const AddressTable* t) const {
    for (const RefTable& r : tables) {
      if (&r.resolved == t) return r;
    }
    FAIL("unknown table");
    return tables.front();
  }

  bool addresses(const std::vector<AddressTerm>& terms, Family f, const IpAddress& a) const {
    if (terms.empty()) return true;
    for (const AddressTerm& t : terms) {
      bool m = false;
      switch (t.kind) {
        case AddressElement::Kind::Any:
          m = !t.negated;
          break;
        case AddressElement::Kind::Prefix:
          m = t.prefix.family == f && bit_prefix_contains(t.prefix, f, a) != t.negated;
          break;
        case AddressElement::Kind::Range:
          m = t.prefix.family == f && (t.prefix.address <= a && a <= t.last) != t.negated;
          break;
        case AddressElement::Kind::Table:
          m = ref_table_contains(table_of(t.table), f, a) != t.negated;
          break;
        case AddressElement::Kind::Interface:
          FAIL("interface elements reach the classifier as tables");
          break;
      }
      if (m) return true;
    }
    return false;
  }

  static bool ports(const std::vector<PortMatch>& list, uint16_t port) {
    for (const PortMatch& m : list) {
      bool ok = false;
      switch (m.op) {
        case PortMatch::Op::Eq:
          ok = port == m.low;
          break;
        case PortMatch::Op::Ne:
          ok = port != m.low;
          break;
        case PortMatch::Op::Lt:
          ok = port < m.low;
          break;
        case PortMatch::Op::Le:
          ok = port <= m.low;
          break;
        case PortMatch::Op::Gt:
          ok = port > m.low;
          break;
        case PortMatch::Op::Ge:
          ok = port >= m.low;
          break;
        case PortMatch::Op::RangeInclusive:
          ok = port >= m.low && port <= m.high;
          break;
        case PortMatch::Op::RangeExclusive:
          ok = port > m.low && port < m.high;
          break;
        case PortMatch::Op::Outside:
          ok = port < m.low || port > m.high;
          break;
      }
      if (ok) return true;
    }
    return false;
  }

  bool matches(const MatchSpec& s, const PacketView& p, Direction dir, IfaceId iface, uint16_t tag = 0,
               PassFacts routes = {}) const {
    if (s.direction != Direction::Any && s.direction != dir) return false;
    if (s.tagged != 0 && (tag == s.tagged) == s.tagged_negated) return false;
    if (s.urpf_failed && !routes.urpf_failed) return false;
    if (s.src_route != RouteTest::None && routes.src_no_route != (s.src_route == RouteTest::NoRoute))
      return false;
    if (s.dst_route != RouteTest::None && routes.dst_no_route != (s.dst_route == RouteTest::NoRoute))
      return false;
    if (!s.received_on.empty() &&
        std::none_of(s.received_on.begin(), s.received_on.end(),
                     [&](const InterfaceTerm& t) { return (t.id == routes.received_on) != t.negated; })) {
      return false;
    }
    if (!s.interfaces.empty() &&
        std::none_of(s.interfaces.begin(), s.interfaces.end(),
                     [&](const InterfaceTerm& t) { return (t.id == iface) != t.negated; })) {
      return false;
    }
    if (s.family && *s.family != p.family) return false;
    if (s.tos && *s.tos != p.tos) return false;
    if (!s.protocols.empty() &&
        std::find(s.protocols.begin(), s.protocols.end(), p.proto) == s.protocols.end()) {
      return false;
    }
    const bool has_l4 = !p.is_fragment || p.is_first_fragment;
    const bool has_ports = has_l4 && (p.proto == ipproto::kTcp || p.proto == ipproto::kUdp);
    if (!s.src_ports.empty() && !(has_ports && ports(s.src_ports, p.src_port))) return false;
    if (!s.dst_ports.empty() && !(has_ports && ports(s.dst_ports, p.dst_port))) return false;
    if (s.flags && s.flags_tcp_only) {
      if (has_l4 && p.proto == ipproto::kTcp && (p.tcp.flags & s.flags->mask) != s.flags->set) return false;
    } else if (s.flags &&
               !(has_l4 && p.proto == ipproto::kTcp && (p.tcp.flags & s.flags->mask) == s.flags->set)) {
      return false;
    }
    if (!s.icmp_types.empty()) {
      if (!has_l4 || p.proto != (s.icmp6 ? ipproto::kIcmp6 : ipproto::kIcmp)) return false;
      if (std::none_of(s.icmp_types.begin(), s.icmp_types.end(), [&](const IcmpTypeMatch& t) {
            return t.type == p.icmp.type && (t.code < 0 || t.code == p.icmp.code);
          })) {
        return false;
      }
    }
    return addresses(s.src, p.family, p.src) && addresses(s.dst, p.family, p.dst);
  }

  uint32_t evaluate(const std::vector<MatchSpec>& specs, const PacketView& p, Direction dir, IfaceId iface,
                    MatchOrder order, uint16_t tag = 0, uint32_t first = 0, PassFacts routes = {}) const {
    uint32_t last = kNone;
    for (uint32_t r = first; r < specs.size(); ++r) {
      if (!matches(specs[r], p, dir, iface, tag, routes)) continue;
      if (order == MatchOrder::First || specs[r].quick) return r;
      last = r;
    }
    return last;
  }
};

// --- Tables

TEST_CASE("last matching rule wins, quick stops, nothing matching is kNoMatch", "[classifier]") {
  MatchSpec block_all;
  MatchSpec pass_tcp;
  pass_tcp.protocols = {ipproto::kTcp};
  MatchSpec quick_udp;
  quick_udp.protocols = {ipproto::kUdp};
  quick_udp.quick = true;
  MatchSpec quick_udp_53 = quick_udp;
  quick_udp_53.dst_ports = {port_op(PortMatch::Op::Eq, 53)};

  const auto tcp = Packet::tcp("10.0.0.1", 1000, "10.0.0.2", 80);
  const auto udp = Packet::udp("10.0.0.1", 1000, "10.0.0.2", 53);
  const auto icmp = Packet::icmp("10.0.0.1", "10.0.0.2", 8, 0);

  CHECK(run({block_all, pass_tcp}, tcp) == 1);
  CHECK(run({block_all, pass_tcp}, udp) == 0);
  CHECK(run({pass_tcp, block_all}, tcp) == 1);
  CHECK(run({block_all, quick_udp, pass_tcp, block_all}, udp) == 1);
  CHECK(run({block_all, quick_udp_53, quick_udp, block_all}, udp) == 1);
  CHECK(run({block_all, quick_udp, quick_udp_53, block_all}, udp) == 1);
  CHECK(run({pass_tcp, quick_udp}, icmp) == kNone);
  CHECK(run({}, tcp) == kNone);
  // First-match lists (scrub, translation) ignore `quick`.
  CHECK(run({block_all, pass_tcp}, tcp, Direction::In, 1, MatchOrder::First) == 0);
  CHECK(run({pass_tcp, block_all}, udp, Direction::In, 1, MatchOrder::First) == 1);
}

TEST_CASE("direction and interfaces, including negation and ids no rule names", "[classifier]") {
  auto spec = [](Direction d, std::vector<InterfaceTerm> ifs) {
    MatchSpec s;
    s.direction = d;
    s.interfaces = std::move(ifs);
    return s;
  };
  const auto p = Packet::tcp("10.0.0.1", 1000, "10.0.0.2", 80);
  struct Row {
    MatchSpec spec;
    Direction dir;
    IfaceId iface;
    bool match;
  };
  const std::vector<Row> rows = {
      {spec(Direction::In, {}), Direction::In, 1, true},
      {spec(Direction::In, {}), Direction::Out, 1, false},
      {spec(Direction::Out, {}), Direction::Out, 3, true},
      {spec(Direction::Any, {}), Direction::Out, 3, true},
      {spec(Direction::Any, {}), Direction::In, 0, true},
      {spec(Direction::In, {{2, false}}), Direction::In, 2, true},
      {spec(Direction::In, {{2, false}}), Direction::In, 3, false},
      {spec(Direction::In, {{2, false}}), Direction::Out, 2, false},
      {spec(Direction::Any, {{2, true}}), Direction::In, 2, false},
      {spec(Direction::Any, {{2, true}}), Direction::In, 3, true},
      {spec(Direction::Any, {{2, true}}), Direction::In, 500, true},
      {spec(Direction::Any, {{2, false}, {4, false}}), Direction::In, 4, true},
      {spec(Direction::Any, {{2, false}, {4, false}}), Direction::In, 500, false},
      {spec(Direction::In, {{2, false}}), Direction::Any, 2, false},
      {spec(Direction::Any, {{2, false}}), Direction::Any, 2, true},
  };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    INFO("row " << i);
    CHECK(run({rows[i].spec}, p, rows[i].dir, rows[i].iface) == (rows[i].match ? 0 : kNone));
  }
}

TEST_CASE("address family, protocol lists, address lists with negation", "[classifier]") {
  MatchSpec inet;
  inet.family = Family::V4;
  MatchSpec inet6;
  inet6.family = Family::V6;
  MatchSpec tcp_udp;
  tcp_udp.protocols = {ipproto::kTcp, ipproto::kUdp};
  MatchSpec from_list;  // pf expands a list into one rule per element: the union
  from_list.src = {net("10.0.0.0/8"), net("2001:db8::/32"), net("192.168.1.1")};
  MatchSpec not_ten;
  not_ten.src = {net("10.0.0.0/8", true)};
  MatchSpec ten_or_not_ten_one;  // {10/8, !10.1/16} is all of IPv4
  ten_or_not_ten_one.src = {net("10.0.0.0/8"), net("10.1.0.0/16", true)};
  MatchSpec to_host;
  to_host.dst = {net("192.0.2.10/32")};
  MatchSpec never;
  never.src = {AddressTerm{AddressElement::Kind::Any, true, {}, nullptr, {}}};

  struct Row {
    const MatchSpec* spec;
    Packet packet;
    bool match;
  };
  const std::vector<Row> rows = {
      {&inet, Packet::tcp("10.0.0.1", 1, "10.0.0.2", 2), true},
      {&inet, Packet::tcp("2001:db8::1", 1, "2001:db8::2", 2), false},
      {&inet6, Packet::tcp("2001:db8::1", 1, "2001:db8::2", 2), true},
      {&inet6, Packet::udp("10.0.0.1", 1, "10.0.0.2", 2), false},
      {&tcp_udp, Packet::udp("10.0.0.1", 1, "10.0.0.2", 2), true},
      {&tcp_udp, Packet::icmp("10.0.0.1", "10.0.0.2", 8, 0), false},
      {&from_list, Packet::tcp("10.255.255.255", 1, "1.1.1.1", 2), true},
      {&from_list, Packet::tcp("11.0.0.0", 1, "1.1.1.1", 2), false},
      {&from_list, Packet::tcp("9.255.255.255", 1, "1.1.1.1", 2), false},
      {&from_list, Packet::tcp("2001:db8:ffff::1", 1, "::1", 2), true},
      {&from_list, Packet::tcp("2001:db9::", 1, "::1", 2), false},
      {&from_list, Packet::tcp("192.168.1.1", 1, "1.1.1.1", 2), true},
      {&from_list, Packet::tcp("192.168.1.2", 1, "1.1.1.1", 2), false},
      {&not_ten, Packet::tcp("10.1.2.3", 1, "1.1.1.1", 2), false},
      {&not_ten, Packet::tcp("11.1.2.3", 1, "1.1.1.1", 2), true},
      {&not_ten, Packet::tcp("2001:db8::1", 1, "::1", 2), false},  // a v4 prefix only speaks for v4
      {&ten_or_not_ten_one, Packet::tcp("10.1.2.3", 1, "1.1.1.1", 2), true},
      {&ten_or_not_ten_one, Packet::tcp("172.16.0.1", 1, "1.1.1.1", 2), true},
      {&to_host, Packet::tcp("1.1.1.1", 1, "192.0.2.10", 2), true},
      {&to_host, Packet::tcp("1.1.1.1", 1, "192.0.2.11", 2), false},
      {&to_host, Packet::tcp("192.0.2.10", 1, "1.1.1.1", 2), false},
      {&never, Packet::tcp("1.1.1.1", 1, "1.1.1.1", 2), false},
  };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    INFO("row " << i);
    CHECK(run({*rows[i].spec}, rows[i].packet) == (rows[i].match ? 0 : kNone));
  }
}

TEST_CASE("tables: both families, nested prefixes, negated entries, negated table", "[classifier]") {
  const AddressTable table({prefix("10.0.0.0/8"), prefix("10.1.2.0/24"), prefix("2001:db8::/32"),
                            prefix("2001:db8:1:2::/64"), prefix("192.0.2.7/32")},
                           {prefix("10.1.0.0/16"), prefix("2001:db8:1::/48"), prefix("10.9.9.9/32")});
  MatchSpec in_table;
  in_table.src = {table_term(table)};
  MatchSpec not_in_table;
  not_in_table.src = {table_term(table, true)};
  struct Row {
    std::string address;
    bool member;
  };
  const std::vector<Row> rows = {
      {"10.0.0.0", true},         {"10.255.255.255", true},
      {"10.1.0.0", false},        {"10.1.255.255", false},
      {"10.1.2.0", true},         {"10.1.2.255", true},
      {"10.1.3.0", false},        {"10.9.9.9", false},
      {"10.9.9.8", true},         {"9.255.255.255", false},
      {"11.0.0.0", false},        {"192.0.2.7", true},
      {"192.0.2.6", false},       {"2001:db8::", true},
      {"2001:db8:ffff::1", true}, {"2001:db8:1::1", false},
      {"2001:db8:1:2::1", true},  {"2001:db8:1:3::", false},
      {"2001:db9::", false},      {"::", false},
      {"0.0.0.0", false},
  };
  for (const Row& row : rows) {
    INFO(row.address);
    Family f;
    const IpAddress a = *parse_address(row.address, &f);
    CHECK(table.contains(f, a) == row.member);
    const auto p =
        f == Family::V4 ? Packet::tcp(row.address, 1, "1.1.1.1", 2) : Packet::tcp(row.address, 1, "::1", 2);
    CHECK(run({in_table}, p) == (row.member ? 0 : kNone));
    CHECK(run({not_in_table}, p) == (row.member ? kNone : 0));
  }
  const AddressTable same_prefix_both_ways({prefix("10.0.0.0/8")}, {prefix("10.0.0.0/8")});
  CHECK_FALSE(same_prefix_both_ways.contains(Family::V4, address("10.0.0.1")));
  const AddressTable everything({prefix("0.0.0.0/0"), prefix("::/0")}, {});
  CHECK(everything.contains(Family::V4, address("255.255.255.255")));
  CHECK(everything.contains(Family::V6, address("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")));
}

TEST_CASE("port operators at their boundaries, on both sides, only for TCP and UDP", "[classifier]") {
  using Op = PortMatch::Op;
  struct Row {
    PortMatch match;
    uint16_t port;
    bool ok;
  };
  const std::vector<Row> rows = {
      {port_op(Op::Eq, 80), 79, false},
      {port_op(Op::Eq, 80), 80, true},
      {port_op(Op::Eq, 80), 81, false},
      {port_op(Op::Eq, 0), 0, true},
      {port_op(Op::Eq, 65535), 65535, true},
      {port_op(Op::Ne, 80), 80, false},
      {port_op(Op::Ne, 80), 81, true},
      {port_op(Op::Ne, 0), 0, false},
      {port_op(Op::Ne, 65535), 0, true},
      {port_op(Op::Lt, 1024), 1023, true},
      {port_op(Op::Lt, 1024), 1024, false},
      {port_op(Op::Lt, 0), 0, false},
      {port_op(Op::Le, 1024), 1024, true},
      {port_op(Op::Le, 1024), 1025, false},
      {port_op(Op::Le, 65535), 65535, true},
      {port_op(Op::Gt, 1024), 1024, false},
      {port_op(Op::Gt, 1024), 1025, true},
      {port_op(Op::Gt, 65535), 65535, false},
      {port_op(Op::Ge, 1024), 1023, false},
      {port_op(Op::Ge, 1024), 1024, true},
      {port_op(Op::Ge, 0), 0, true},
      {port_op(Op::RangeInclusive, 1000, 2000), 999, false},
      {port_op(Op::RangeInclusive, 1000, 2000), 1000, true},
      {port_op(Op::RangeInclusive, 1000, 2000), 2000, true},
      {port_op(Op::RangeInclusive, 1000, 2000), 2001, false},
      {port_op(Op::RangeInclusive, 0, 65535), 65535, true},
      {port_op(Op::RangeExclusive, 1000, 2000), 1000, false},
      {port_op(Op::RangeExclusive, 1000, 2000), 1001, true},
      {port_op(Op::RangeExclusive, 1000, 2000), 1999, true},
      {port_op(Op::RangeExclusive, 1000, 2000), 2000, false},
      {port_op(Op::RangeExclusive, 1000, 1001), 1000, false},
      {port_op(Op::RangeExclusive, 1000, 1001), 1001, false},
      {port_op(Op::Outside, 1000, 2000), 999, true},
      {port_op(Op::Outside, 1000, 2000), 1000, false},
      {port_op(Op::Outside, 1000, 2000), 2000, false},
      {port_op(Op::Outside, 1000, 2000), 2001, true},
      {port_op(Op::Outside, 0, 65535), 0, false},
      {port_op(Op::Outside, 0, 65535), 65535, false},
  };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    INFO("row " << i << " port " << rows[i].port);
    MatchSpec dst;
    dst.dst_ports = {rows[i].match};
    MatchSpec src;
    src.src_ports = {rows[i].match};
    const uint32_t expected = rows[i].ok ? 0 : kNone;
    CHECK(run({dst}, Packet::tcp("1.1.1.1", 5, "2.2.2.2", rows[i].port)) == expected);
    CHECK(run({dst}, Packet::udp("::1", 5, "::2", rows[i].port)) == expected);
    CHECK(run({src}, Packet::udp("1.1.1.1", rows[i].port, "2.2.2.2", 5)) == expected);
    // ICMP queries carry the identifier in the port fields; a port rule must not see it.
    auto icmp = Packet::icmp("1.1.1.1", "2.2.2.2", 8, 0);
    icmp.view.src_port = icmp.view.dst_port = rows[i].port;
    CHECK(run({dst}, icmp) == kNone);
    CHECK(run({src}, icmp) == kNone);
  }
  MatchSpec list;  // { 22, 80 443:444 } matches if any element does
  list.dst_ports = {port_op(Op::Eq, 22), port_op(Op::Eq, 80), port_op(Op::RangeInclusive, 443, 444)};
  CHECK(run({list}, Packet::tcp("1.1.1.1", 5, "2.2.2.2", 22)) == 0);
  CHECK(run({list}, Packet::tcp("1.1.1.1", 5, "2.2.2.2", 444)) == 0);
  CHECK(run({list}, Packet::tcp("1.1.1.1", 5, "2.2.2.2", 81)) == kNone);
}

TEST_CASE("a port list applies to its rule's protocols, and only offers the rule to them", "[classifier]") {
  using Op = PortMatch::Op;
  // One TCP rule for port 53, then UDP rules for port 53 and TCP rules for port 80 in turn (two
  // words where both protocols have rules), then one UDP rule for every port but 53 (listed by
  // default).
  std::vector<MatchSpec> specs(1);
  specs[0].protocols = {ipproto::kTcp};
  specs[0].dst_ports = {port_op(Op::Eq, 53)};
  for (int i = 1; i <= 128; ++i) {
    MatchSpec rule;
    rule.protocols = {i % 2 ? ipproto::kUdp : ipproto::kTcp};
    rule.dst_ports = {port_op(Op::Eq, i % 2 ? 53 : 80)};
    specs.push_back(rule);
  }
  MatchSpec not_53;
  not_53.protocols = {ipproto::kUdp};
  not_53.dst_ports = {port_op(Op::Ne, 53)};
  specs.push_back(not_53);
  const Classifier c(specs, MatchOrder::QuickOrLast);
  const auto tcp_53 = Packet::tcp("1.1.1.1", 5, "2.2.2.2", 53);
  const auto udp_53 = Packet::udp("1.1.1.1", 5, "2.2.2.2", 53);
  const auto tcp_54 = Packet::tcp("1.1.1.1", 5, "2.2.2.2", 54);
  const auto udp_54 = Packet::udp("1.1.1.1", 5, "2.2.2.2", 54);
  CHECK(c.match(tcp_53.view, Direction::In, 0) == 0);
  CHECK(c.match(udp_53.view, Direction::In, 0) == 127);
  CHECK(c.match(tcp_54.view, Direction::In, 0) == kNone);
  CHECK(c.match(udp_54.view, Direction::In, 0) == 129);
  CHECK(c.match(Packet::tcp("1.1.1.1", 5, "2.2.2.2", 80).view, Direction::In, 0) == 128);
  // The TCP packet to 53 meets no word for the UDP rules of 53: the one word it tests holds the
  // TCP rule.
  CHECK(c.words_tested(tcp_53.view, Direction::In, 0) == 1);
  CHECK(c.words_tested(udp_53.view, Direction::In, 0) == 1);
}

TEST_CASE("TCP flags apply to TCP only; ICMP types and codes per family", "[classifier]") {
  MatchSpec syn_only;  // flags S/SA
  syn_only.flags = FlagsMatch{tcpflag::kSyn, tcpflag::kSyn | tcpflag::kAck};
  MatchSpec syn_for_tcp = syn_only;  // pf's default flags on `pass all keep state`
  syn_for_tcp.flags_tcp_only = true;
  MatchSpec echo;  // icmp-type echoreq
  echo.icmp_types = {{8, -1}};
  MatchSpec unreach_port;  // icmp-type unreach code 3
  unreach_port.icmp_types = {{3, 3}};
  MatchSpec echo6;  // icmp6-type echoreq
  echo6.icmp_types = {{128, -1}};
  echo6.icmp6 = true;

  struct Row {
    const MatchSpec* spec;
    Packet packet;
    bool match;
  };
  const std::vector<Row> rows = {
      {&syn_only, Packet::tcp("1.1.1.1", 1, "2.2.2.2", 2, tcpflag::kSyn), true},
      {&syn_only, Packet::tcp("1.1.1.1", 1, "2.2.2.2", 2, tcpflag::kSyn | tcpflag::kEce | tcpflag::kCwr),
       true},
      {&syn_only, Packet::tcp("1.1.1.1", 1, "2.2.2.2", 2, tcpflag::kSyn | tcpflag::kAck), false},
      {&syn_only, Packet::tcp("1.1.1.1", 1, "2.2.2.2", 2, tcpflag::kAck), false},
      {&syn_only, Packet::udp("1.1.1.1", 1, "2.2.2.2", 2), false},
      {&syn_only, Packet::icmp("1.1.1.1", "2.2.2.2", 8, 0), false},
      {&syn_for_tcp, Packet::tcp("1.1.1.1", 1, "2.2.2.2", 2, tcpflag::kSyn), true},
      {&syn_for_tcp, Packet::tcp("1.1.1.1", 1, "2.2.2.2", 2, tcpflag::kAck), false},
      {&syn_for_tcp, Packet::udp("1.1.1.1", 1, "2.2.2.2", 2), true},
      {&syn_for_tcp, Packet::icmp("1.1.1.1", "2.2.2.2", 8, 0), true},
      {&echo, Packet::icmp("1.1.1.1", "2.2.2.2", 8, 0), true},
      {&echo, Packet::icmp("1.1.1.1", "2.2.2.2", 8, 7), true},
      {&echo, Packet::icmp("1.1.1.1", "2.2.2.2", 0, 0), false},
      {&echo, Packet::icmp("::1", "::2", 8, 0), false},
      {&echo, Packet::tcp("1.1.1.1", 1, "2.2.2.2", 2, 8), false},
      {&unreach_port, Packet::icmp("1.1.1.1", "2.2.2.2", 3, 3), true},
      {&unreach_port, Packet::icmp("1.1.1.1", "2.2.2.2", 3, 1), false},
      {&unreach_port, Packet::icmp("1.1.1.1", "2.2.2.2", 4, 3), false},
      {&echo6, Packet::icmp("::1", "::2", 128, 0), true},
      {&echo6, Packet::icmp("::1", "::2", 129, 0), false},
      {&echo6, Packet::icmp("1.1.1.1", "2.2.2.2", 128, 0), false},
  };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    INFO("row " << i);
    CHECK(run({*rows[i].spec}, rows[i].packet) == (rows[i].match ? 0 : kNone));
  }
  // Codes of one type and the whole type side by side.
  MatchSpec any_unreach;
  any_unreach.icmp_types = {{3, -1}};
  CHECK(run({any_unreach, unreach_port}, Packet::icmp("1.1.1.1", "2.2.2.2", 3, 3)) == 1);
  CHECK(run({any_unreach, unreach_port}, Packet::icmp("1.1.1.1", "2.2.2.2", 3, 0)) == 0);
}

TEST_CASE("a later fragment only matches rules that ask nothing of the transport header", "[classifier]") {
  MatchSpec plain;
  plain.protocols = {ipproto::kTcp};
  MatchSpec with_port = plain;
  with_port.dst_ports = {port_op(PortMatch::Op::Ge, 0)};
  MatchSpec with_flags = plain;
  with_flags.flags = FlagsMatch{0, tcpflag::kSyn};
  auto later = Packet::tcp("1.1.1.1", 0, "2.2.2.2", 0, 0);
  later.view.is_fragment = true;
  CHECK(run({plain, with_port}, later) == 0);
  CHECK(run({plain, with_flags}, later) == 0);
  auto first = later;
  first.view.is_first_fragment = true;
  CHECK(run({plain, with_port}, first) == 1);
  CHECK(run({plain, with_flags}, first) == 1);
}

TEST_CASE("a rule in a later summary word is found behind the class's words of the first", "[classifier]") {
  // 5,000 rules fill 79 words, two summary words (64 words each). The first rule of the file has the
  // lowest priority, in the last word; the UDP rules after it give the source class of 10.0.0.1
  // words in the first summary word, which a TCP packet passes to reach the rule.
  MatchSpec pass_tcp;
  pass_tcp.protocols = {ipproto::kTcp};
  pass_tcp.src = {net("10.0.0.1/32")};
  std::vector<MatchSpec> specs{pass_tcp};
  for (int i = 1; i < 5000; ++i) {
    MatchSpec block_udp;
    block_udp.protocols = {ipproto::kUdp};
    block_udp.src = {net(i % 3 == 0 ? "10.0.0.0/24" : "10.9.0.0/16")};
    specs.push_back(block_udp);
  }
  const Classifier classifier(specs, MatchOrder::QuickOrLast);
  const std::vector<Packet> packets{Packet::tcp("10.0.0.1", 1000, "10.0.0.2", 80),
                                    Packet::udp("10.0.0.1", 1000, "10.0.0.2", 53),
                                    Packet::tcp("10.0.0.7", 1000, "10.0.0.2", 80)};
  const std::vector<uint32_t> expected{0, 4998, kNone};
  std::vector<MatchQuery> queries;
  for (std::size_t i = 0; i < packets.size(); ++i) {
    CHECK(classifier.match(packets[i].view, Direction::In, 1) == expected[i]);
    queries.push_back({&packets[i].view, Direction::In, 1});
  }
  std::vector<uint32_t> batched(queries.size());
  classifier.match_batch(queries, batched);
  CHECK(batched == expected);
}

TEST_CASE("batches of every size decide as match() does, below the floor one query at a time",
          "[classifier]") {
  auto rules_to = [](int count) {
    std::vector<MatchSpec> specs;
    for (int i = 0; i < count; ++i) {
      MatchSpec pass;
      pass.protocols = {ipproto::kTcp};
      pass.dst = {net("10." + std::to_string(i / 256 % 256) + "." + std::to_string(i % 256) + ".0/24")};
      pass.dst_ports = {port_op(PortMatch::Op::Eq, static_cast<uint16_t>(1000 + i))};
      specs.push_back(pass);
    }
    return specs;
  };
  for (const int count : {10, 5000}) {
    const Classifier classifier(rules_to(count), MatchOrder::QuickOrLast);
    // Packets for rules spread over the set, every third one for no rule, some of them IPv6.
    std::vector<Packet> packets;
    for (int i = 0; i < 2 * static_cast<int>(Classifier::kBatch) + 5; ++i) {
      const int rule = i * 7919 % count;
      const std::string dst =
          "10." + std::to_string(rule / 256 % 256) + "." + std::to_string(rule % 256) + ".9";
      if (i % 5 == 4) {
        packets.push_back(
            Packet::tcp("2001:db8::1", 1000, "2001:db8::2", static_cast<uint16_t>(1000 + rule)));
      } else {
        packets.push_back(
            Packet::tcp("192.0.2.1", 1000, dst, static_cast<uint16_t>(1000 + rule + (i % 3 == 0))));
      }
    }
    std::vector<MatchQuery> queries;
    std::vector<uint32_t> expected;
    for (const Packet& p : packets) {
      queries.push_back({&p.view, Direction::In, 1});
      expected.push_back(classifier.match(p.view, Direction::In, 1));
    }
    const auto unmatched = std::count(expected.begin(), expected.end(), kNone);
    CHECK(unmatched > 0);
    CHECK(unmatched < static_cast<std::ptrdiff_t>(expected.size()));
    for (std::size_t n = 1; n <= queries.size(); ++n) {
      std::vector<uint32_t> batched(n, 12345);
      classifier.match_batch({queries.data(), n}, batched);
      INFO(count << " rules, a batch of " << n);
      CHECK(std::equal(batched.begin(), batched.end(), expected.begin()));
    }
  }
}

TEST_CASE("each interface's rules are found, past the anchor groups a class record can name",
          "[classifier]") {
  // A rule for one direction on one interface is anchored in that pass's group, up to 64 groups;
  // later passes share group 0. Each interface's rule gets a word of its own (the other rules
  // there cannot match), so only its group's anchors can offer it.
  constexpr uint32_t kInterfaces = 70;
  std::vector<MatchSpec> specs;
  for (uint32_t k = 1; k <= kInterfaces; ++k) {
    MatchSpec pass;
    pass.direction = Direction::In;
    pass.interfaces = {{static_cast<IfaceId>(k), false}};
    pass.src = {net("10.0." + std::to_string(k) + ".1/32")};
    specs.push_back(pass);
    for (int filler = 0; filler < 63; ++filler) {
      MatchSpec never;
      never.direction = Direction::In;
      never.interfaces = {{static_cast<IfaceId>(kInterfaces + 1), false}};
      never.src = {net("192.0.2." + std::to_string(filler) + "/32")};
      specs.push_back(never);
    }
  }
  const Classifier classifier(specs, MatchOrder::QuickOrLast);
  for (uint32_t k = 1; k <= kInterfaces; ++k) {
    INFO("interface " << k);
    const auto p = Packet::tcp("10.0." + std::to_string(k) + ".1", 1000, "10.0.0.2", 80);
    CHECK(classifier.match(p.view, Direction::In, k) == (k - 1) * 64);
    CHECK(classifier.match(p.view, Direction::In, k % kInterfaces + 1) == kNone);
  }
}

// --- Randomized cross-check

struct RandomRules {
  std::mt19937_64 rng;
  Reference& ref;

  RandomRules(uint64_t seed, Reference& reference) : rng(seed), ref(reference) {}

  uint32_t pick(uint32_t n) { return static_cast<uint32_t>(rng() % n); }
  bool chance(uint32_t percent) { return pick(100) < percent; }

  // Few distinct values, nested and adjacent, so that rules overlap and packets hit edges.
  std::vector<std::string> v4_nets = {"0.0.0.0/0",    "10.0.0.0/8",    "10.1.0.0/16",  "10.1.2.0/24",
                                      "10.1.2.3/32",  "10.2.0.0/15",   "192.0.2.0/24", "192.0.2.128/25",
                                      "192.0.2.7/32", "172.16.0.0/12", "11.0.0.0/8",   "255.255.255.255/32"};
  std::vector<std::string> v6_nets = {"::/0",
                                      "2001:db8::/32",
                                      "2001:db8:1::/48",
                                      "2001:db8:1:2::/64",
                                      "2001:db8::1/128",
                                      "2001:db8:8000::/33",
                                      "fd00::/8",
                                      "fd00::5/128",
                                      "ffff::/16"};
  std::vector<uint16_t> ports = {0, 1, 22, 53, 79, 80, 81, 443, 1023, 1024, 1025, 8080, 65534, 65535};

  IpPrefix random_net() {
    return chance(60) ? prefix(v4_nets[pick(v4_nets.size())]) : prefix(v6_nets[pick(v6_nets.size())]);
  }

  IpAddress random_address(Family f) {
    // Near a prefix boundary of the pool most of the time, anywhere otherwise.
    const auto& pool = f == Family::V4 ? v4_nets : v6_nets;
    const IpPrefix p = prefix(pool[pick(pool.size())]);
    IpAddress a = p.address;
    if (f == Family::V4) {
      const uint32_t host = p.length == 0 ? UINT32_MAX : p.length == 32 ? 0 : (1u << (32 - p.length)) - 1;
      switch (pick(4)) {
        case 0:
          break;
        case 1:
          a = IpAddress::v4(a.v4_value() | host);
          break;
        case 2:
          a = IpAddress::v4((a.v4_value() | host) + 1);
          break;
        case 3:
          a = IpAddress::v4(a.v4_value() - 1);
          break;
      }
      if (chance(10)) a = IpAddress::v4(static_cast<uint32_t>(rng()));
    } else {
      switch (pick(3)) {
        case 0:
          break;
        case 1:
          a.lo -= 1, a.hi -= (a.lo == UINT64_MAX);
          break;
        case 2:
          a.lo += pick(3);
          break;
      }
      if (chance(10)) a = IpAddress{rng(), rng()};
    }
    return a;
  }

  std::vector<AddressTerm> random_addresses() {
    std::vector<AddressTerm> out;
    if (chance(40)) return out;
    const uint32_t n = 1 + pick(chance(80) ? 1 : 3);
    for (uint32_t i = 0; i < n; ++i) {
      AddressTerm t;
      const uint32_t kind = pick(10);
      if (kind == 0) {
        t.kind = AddressElement::Kind::Any;
      } else if (kind <= 2 && !ref.tables.empty()) {
        t.kind = AddressElement::Kind::Table;
        t.table = &ref.tables[pick(ref.tables.size())].resolved;
      } else if (kind == 3) {
        // From one address to another of its family, often near it (the test addresses cluster).
        t.kind = AddressElement::Kind::Range;
        t.prefix = random_net();
        t.prefix.length = t.prefix.family == Family::V4 ? 32 : 128;
        IpPrefix other = random_net();
        for (int tries = 0; tries < 8 && other.family != t.prefix.family; ++tries) other = random_net();
        t.last = other.family == t.prefix.family ? other.address : t.prefix.address;
        if (t.last < t.prefix.address) std::swap(t.last, t.prefix.address);
      } else {
        t.kind = AddressElement::Kind::Prefix;
        t.prefix = random_net();
      }
      t.negated = chance(15);
      out.push_back(t);
    }
    return out;
  }

  std::vector<PortMatch> random_ports() {
    std::vector<PortMatch> out;
    const uint32_t n = 1 + pick(chance(70) ? 1 : 3);
    for (uint32_t i = 0; i < n; ++i) {
      PortMatch m;
      m.op = static_cast<PortMatch::Op>(pick(9));
      uint16_t a = ports[pick(ports.size())];
      uint16_t b = ports[pick(ports.size())];
      if (a > b) std::swap(a, b);
      m.low = a;
      m.high = b;
      out.push_back(m);
    }
    return out;
  }

  void add_table() {
    RefTable& t = ref.tables.emplace_back();
    const uint32_t n = 1 + pick(8);
    for (uint32_t i = 0; i < n; ++i) (chance(25) ? t.negated : t.entries).push_back(random_net());
    t.resolved = AddressTable(t.entries, t.negated);
  }

  MatchSpec random_rule() {
    MatchSpec s;
    s.direction = static_cast<Direction>(pick(3));
    if (chance(50)) {
      const uint32_t n = 1 + pick(2);
      for (uint32_t i = 0; i < n; ++i)
        s.interfaces.push_back({static_cast<IfaceId>(1 + pick(4)), chance(20)});
    }
    if (chance(30)) s.family = chance(50) ? Family::V4 : Family::V6;
    const uint32_t kind = pick(10);
    if (kind < 4) {
      s.protocols = {ipproto::kTcp};
      if (chance(30))
        s.flags = chance(50) ? FlagsMatch{tcpflag::kSyn, tcpflag::kSyn | tcpflag::kAck}
                             : FlagsMatch{0, tcpflag::kRst};
    } else if (kind < 6) {
      s.protocols = {ipproto::kUdp};
    } else if (kind < 7) {
      s.protocols = {ipproto::kTcp, ipproto::kUdp};
    } else if (kind < 8) {
      s.icmp6 = chance(50);
      s.protocols = {s.icmp6 ? ipproto::kIcmp6 : ipproto::kIcmp};
      if (chance(60)) {
        s.icmp_types.push_back({static_cast<uint8_t>(pick(2) == 0 ? (s.icmp6 ? 128 : 8) : 3),
                                static_cast<int16_t>(chance(40) ? pick(4) : -1)});
      }
    } else if (kind < 9) {
      s.protocols = {static_cast<uint8_t>(47 + pick(2))};
    }
    const bool port_ok = !s.protocols.empty() &&
                         std::all_of(s.protocols.begin(), s.protocols.end(),
                                     [](uint8_t p) { return p == ipproto::kTcp || p == ipproto::kUdp; });
    s.src = random_addresses();
    s.dst = random_addresses();
    if (port_ok && chance(25)) s.src_ports = random_ports();
    if (port_ok && chance(60)) s.dst_ports = random_ports();
    // Rules that break the compile checks must still classify correctly.
    if (!port_ok && chance(3)) s.dst_ports = random_ports();
    if (chance(2)) s.flags = FlagsMatch{tcpflag::kSyn, tcpflag::kSyn};
    // pf's default flags on a stateful rule that is not TCP's alone: they bind TCP packets only.
    if (!s.flags && s.icmp_types.empty() && chance(15)) {
      s.flags = FlagsMatch{tcpflag::kSyn, tcpflag::kSyn | tcpflag::kAck};
      s.flags_tcp_only = true;
    }
    s.quick = chance(10);
    return s;
  }

  PacketView random_packet() {
    PacketView p;
    p.family = chance(55) ? Family::V4 : Family::V6;
    static constexpr uint8_t kProtos[] = {
        ipproto::kTcp, ipproto::kTcp, ipproto::kUdp, ipproto::kIcmp, ipproto::kIcmp6, 47, 48, 50};
    p.proto = kProtos[pick(8)];
    p.src = random_address(p.family);
    p.dst = random_address(p.family);
    p.src_port = chance(80) ? ports[pick(ports.size())] : static_cast<uint16_t>(rng());
    p.dst_port = chance(80) ? ports[pick(ports.size())] : static_cast<uint16_t>(rng());
    p.tcp.flags = chance(50) ? tcpflag::kSyn : static_cast<uint8_t>(rng());
    p.icmp.type = static_cast<uint8_t>(chance(70) ? (pick(2) == 0 ? (chance(50) ? 128 : 8) : 3) : pick(256));
    p.icmp.code = static_cast<uint8_t>(pick(5));
    p.is_fragment = chance(5);
    p.is_first_fragment = p.is_fragment && chance(50);
    return p;
  }
};

// What the random rules ask beyond a packet's addresses, protocol, ports and pass.
struct Asks {
  // A fifth of the rules ask for (or against) one of three tags; the packets carry none, one of
  // them, or one that no rule names.
  bool tags = false;
  // A tenth of the rules are `from urpf-failed`; a third of the packets failed the check.
  bool urpf = false;
  // A tenth of the rules ask of each address that it have no route, a twentieth that it have one;
  // a third of the packets' sources and destinations have none.
  bool no_route = false;
  // A tenth of the rules name one or two arrival interfaces (some negated); the packets arrive on
  // one of them, another, or none.
  bool received = false;
  // A tenth of the rules name one of three TOS values; the packets carry one of them or another.
  bool tos = false;
};

void cross_check(uint64_t seed, uint32_t rules, uint32_t packets, MatchOrder order, Asks asks = {}) {
  const auto [tags, urpf, no_route, received, tos] = asks;
  Reference ref;
  RandomRules gen(seed, ref);
  for (int i = 0; i < 3; ++i) gen.add_table();
  std::vector<MatchSpec> specs;
  for (uint32_t i = 0; i < rules; ++i) specs.push_back(gen.random_rule());
  if (tags) {
    for (MatchSpec& s : specs) {
      if (!gen.chance(20)) continue;
      s.tagged = static_cast<uint16_t>(1 + gen.pick(3));
      s.tagged_negated = gen.chance(30);
    }
  }
  if (urpf) {
    for (MatchSpec& s : specs) s.urpf_failed = gen.chance(10);
  }
  if (no_route) {
    const auto test = [&gen] {
      const uint32_t roll = gen.pick(100);
      return roll < 10 ? RouteTest::NoRoute : roll < 15 ? RouteTest::Routed : RouteTest::None;
    };
    for (MatchSpec& s : specs) {
      s.src_route = test();
      s.dst_route = test();
    }
  }
  if (received) {
    for (MatchSpec& s : specs) {
      if (!gen.chance(10)) continue;
      for (uint32_t k = 0, n = 1 + gen.pick(2); k < n; ++k)
        s.received_on.push_back({static_cast<IfaceId>(1 + gen.pick(5)), gen.chance(30)});
    }
  }
  static constexpr uint8_t kTos[] = {0x10, 0xb8, 0x28, 0x04};  // the last named by no rule
  if (tos) {
    for (MatchSpec& s : specs) {
      if (gen.chance(10)) s.tos = kTos[gen.pick(3)];
    }
  }
  const Classifier classifier(specs, order);
  REQUIRE(classifier.size() == rules);
  uint32_t matched = 0;
  std::vector<PacketView> views(packets);
  std::vector<MatchQuery> queries(packets);
  std::vector<uint32_t> expected(packets);
  for (uint32_t i = 0; i < packets; ++i) {
    views[i] = gen.random_packet();
    if (tos && gen.chance(60)) views[i].tos = kTos[gen.pick(4)];
    queries[i] = {&views[i],
                  static_cast<Direction>(gen.pick(3)),
                  static_cast<IfaceId>(gen.pick(7)),
                  static_cast<uint16_t>(tags ? gen.pick(5) : 0),
                  urpf && gen.chance(33),
                  no_route && gen.chance(33),
                  no_route && gen.chance(33),
                  static_cast<IfaceId>(received ? gen.pick(8) : 0)};
  }
  for (uint32_t i = 0; i < packets; ++i) {
    const PacketView& p = views[i];
    const MatchQuery& q = queries[i];
    const PassFacts routes{q.urpf_failed, q.src_no_route, q.dst_no_route, q.received_on};
    expected[i] = ref.evaluate(specs, p, q.direction, q.iface, order, q.tag, 0, routes);
    const uint32_t got = classifier.match(q);
    if (order == MatchOrder::First) {
      // From a later rule on, as RuleSet::tag_after() asks of its first-match order.
      const uint32_t first = gen.pick(rules + 1);
      INFO("seed " << seed << " packet " << i << " from rule " << first);
      REQUIRE(classifier.match_from(q, first) ==
              ref.evaluate(specs, p, q.direction, q.iface, order, q.tag, first, routes));
    }
    if (got != expected[i]) {
      INFO("seed " << seed << " packet " << i << " proto " << int{p.proto} << " tos " << int{p.tos} << " src "
                   << to_string(p.family, p.src) << ":" << p.src_port << " dst " << to_string(p.family, p.dst)
                   << ":" << p.dst_port);
      REQUIRE(got == expected[i]);
    }
    matched += expected[i] != kNone;
  }
  // The batched lookup, in batches that end inside and between its internal groups.
  std::vector<uint32_t> batched(packets, kNone - 1);
  for (uint32_t at = 0, size = 1; at < packets; at += size, size = size * 3 % 67 + 1) {
    const uint32_t n = std::min(size, packets - at);
    classifier.match_batch({queries.data() + at, n}, {batched.data() + at, n});
  }
  for (uint32_t i = 0; i < packets; ++i) {
    INFO("seed " << seed << " batched packet " << i);
    REQUIRE(batched[i] == expected[i]);
  }
  // The generator must make the comparison meaningful: most packets decided by some rule, not all
  // by the same few.
  CHECK(matched > packets / 4);
}

TEST_CASE("random rule sets agree with a linear pf evaluator", "[classifier][random]") {
  for (uint64_t seed = 1; seed <= 12; ++seed)
    cross_check(seed, 50 + 40 * seed, 2000, MatchOrder::QuickOrLast);
  for (uint64_t seed = 100; seed <= 104; ++seed) cross_check(seed, 300, 2000, MatchOrder::First);
}

TEST_CASE("random large rule sets (more than one summary word) agree with the evaluator",
          "[classifier][random]") {
  cross_check(7001, 5000, 400, MatchOrder::QuickOrLast);
  cross_check(7002, 9000, 300, MatchOrder::First);
}

TEST_CASE("random rule sets with tagged agree with the evaluator, and so does a match from a later rule",
          "[classifier][random][tag]") {
  for (uint64_t seed = 200; seed <= 205; ++seed)
    cross_check(seed, 100 + 60 * (seed % 7), 2000, MatchOrder::QuickOrLast, {.tags = true});
  for (uint64_t seed = 300; seed <= 303; ++seed)
    cross_check(seed, 300, 2000, MatchOrder::First, {.tags = true});
  cross_check(7003, 6000, 300, MatchOrder::First, {.tags = true});
}

TEST_CASE("random rule sets with urpf-failed, with and without tags, agree with the evaluator",
          "[classifier][random][urpf]") {
  for (uint64_t seed = 400; seed <= 403; ++seed)
    cross_check(seed, 100 + 60 * seed % 7, 2000, MatchOrder::QuickOrLast, {.urpf = true});
  for (uint64_t seed = 410; seed <= 413; ++seed)
    cross_check(seed, 200, 2000, seed % 2 == 0 ? MatchOrder::QuickOrLast : MatchOrder::First,
                {.tags = true, .urpf = true});
  cross_check(7004, 6000, 300, MatchOrder::QuickOrLast, {.tags = true, .urpf = true});
}

TEST_CASE("random rule sets with no-route, with and without tags and urpf-failed, agree with the evaluator",
          "[classifier][random][no-route]") {
  for (uint64_t seed = 420; seed <= 423; ++seed)
    cross_check(seed, 100 + 60 * seed % 7, 2000, MatchOrder::QuickOrLast, {.no_route = true});
  for (uint64_t seed = 430; seed <= 433; ++seed)
    cross_check(seed, 200, 2000, seed % 2 == 0 ? MatchOrder::QuickOrLast : MatchOrder::First,
                {.tags = true, .urpf = seed % 3 == 0, .no_route = true});
  cross_check(7005, 6000, 300, MatchOrder::QuickOrLast, {.tags = true, .urpf = true, .no_route = true});
}

TEST_CASE("random rule sets with received-on, with tags, urpf-failed and no-route, agree with the evaluator",
          "[classifier][random][received-on]") {
  for (uint64_t seed = 440; seed <= 443; ++seed)
    cross_check(seed, 100 + 60 * seed % 7, 2000, MatchOrder::QuickOrLast, {.received = true});
  for (uint64_t seed = 450; seed <= 453; ++seed)
    cross_check(seed, 200, 2000, seed % 2 == 0 ? MatchOrder::QuickOrLast : MatchOrder::First,
                {.tags = seed % 2 == 1, .urpf = seed % 3 == 0, .no_route = true, .received = true});
  cross_check(7006, 6000, 300, MatchOrder::QuickOrLast,
              {.tags = true, .urpf = true, .no_route = true, .received = true});
}

TEST_CASE("random rule sets with tos, alone and with every other ask, agree with the evaluator",
          "[classifier][random][tos]") {
  for (uint64_t seed = 460; seed <= 463; ++seed)
    cross_check(seed, 100 + 60 * seed % 7, 2000, MatchOrder::QuickOrLast, {.tos = true});
  for (uint64_t seed = 470; seed <= 473; ++seed)
    cross_check(
        seed, 200, 2000, seed % 2 == 0 ? MatchOrder::QuickOrLast : MatchOrder::First,
        {.tags = seed % 2 == 1, .urpf = seed % 3 == 0, .no_route = true, .received = true, .tos = true});
  cross_check(7007, 6000, 300, MatchOrder::QuickOrLast,
              {.tags = true, .urpf = true, .no_route = true, .received = true, .tos = true});
}

template <typename Key>
void check_interval_index(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto random_key = [&rng]() -> Key {
    if constexpr (sizeof(Key) == 4) {
      return static_cast<Key>(rng());
    } else {
      return static_cast<Key>(rng()) << 64 | rng();
    }
  };
  std::vector<Key> starts{0};
  // Some sets large and crowded enough for IPv4 tables two deep below the top one.
  const auto n = static_cast<uint32_t>(seed % 5 == 0 ? 60000 + rng() % 20000 : rng() % 3000);
  // Clusters with long shared prefixes, as IPv6 rule sets have, and a spread of others.
  const Key cluster = random_key() & ~static_cast<Key>(0xffffff);
  for (uint32_t i = 0; i < n; ++i) {
    starts.push_back(i % 3 == 0 ? random_key() : static_cast<Key>(cluster + rng() % (seed * 1000 + 1)));
  }
  if (seed % 4 == 0) starts.push_back(static_cast<Key>(~Key{0}));  // an interval of one key at the very end
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  std::vector<uint32_t> values(starts.size());
  for (uint32_t i = 0; i < values.size(); ++i) values[i] = i * 3 + 1;
  IntervalIndex<Key> index;
  index.build(starts, values);
  std::vector<Key> keys;
  std::vector<uint32_t> expected;
  for (int probe = 0; probe < 5000; ++probe) {
    Key key;
    const Key s = starts[rng() % starts.size()];
    switch (probe % 5) {
      case 0:
        key = s;
        break;
      case 1:
        key = s - 1;
        break;
      case 2:
        key = s + 1;
        break;
      case 3:
        key = probe % 2 ? Key{0} : static_cast<Key>(~Key{0});
        break;
      default:
        key = random_key();
        break;
    }
    const auto i = std::upper_bound(starts.begin(), starts.end(), key) - starts.begin() - 1;
    if (index.find(key) != values[i]) {
      INFO("seed " << seed << " probe " << probe << " of " << starts.size() << " starts");
      REQUIRE(index.find(key) == values[i]);
    }
    keys.push_back(key);
    expected.push_back(values[i]);
  }
  // The same keys in batches of varied sizes, the walks of a batch at different depths; IPv4's
  // with each way of counting keys this CPU runs.
  auto check_batches = [&](auto find_batch) {
    std::vector<uint32_t> found(keys.size());
    for (std::size_t at = 0, size = 1; at < keys.size(); at += size, size = size % 41 + 1) {
      const std::size_t batch = std::min(size, keys.size() - at);
      find_batch(std::span<const Key>{keys.data() + at, batch},
                 std::span<uint32_t>{found.data() + at, batch});
    }
    for (std::size_t k = 0; k < keys.size(); ++k) {
      if (found[k] != expected[k]) {
        INFO("seed " << seed << " batched probe " << k << " of " << starts.size() << " starts");
        REQUIRE(found[k] == expected[k]);
      }
    }
  };
  if constexpr (sizeof(Key) == 4) {
    for (KeyCounting counting : {KeyCounting::Baseline, best_key_counting()}) {
      check_batches([&](std::span<const Key> k, std::span<uint32_t> v) { index.find_batch(k, v, counting); });
    }
  } else {
    check_batches([&](std::span<const Key> k, std::span<uint32_t> v) { index.find_batch(k, v); });
  }
}

TEST_CASE("interval index finds the interval of any key, shallow or deep", "[classifier]") {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    check_interval_index<uint32_t>(seed);
    check_interval_index<AddressKey>(seed);
  }
}

}  // namespace
}  // namespace pairwall::engine::rules
