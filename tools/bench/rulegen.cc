#include "tools/bench/rulegen.h"

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <stdexcept>
#include <string>

namespace pairwall::bench {

using namespace pairwall::engine;
using namespace pairwall::engine::rules;

namespace {

constexpr const char* kInterfaces[] = {"ext0", "lan0", "dmz0", "wan1"};
constexpr uint16_t kServices[] = {22,   25,   53,   80,   110,  123,  143,   443,  465,  587,
                                  993,  995,  1194, 1433, 1521, 3306, 3389,  5060, 5432, 5900,
                                  6379, 8080, 8443, 9000, 9090, 9200, 11211, 27017};

class Random {
 public:
  explicit Random(uint64_t seed) : rng_(seed) {}

  uint32_t pick(uint32_t n) { return static_cast<uint32_t>(rng_() % n); }
  bool chance(uint32_t percent) { return pick(100) < percent; }
  uint64_t bits() { return rng_(); }
  template <typename T, std::size_t N>
  const T& one_of(const T (&items)[N]) {
    return items[pick(N)];
  }

 private:
  std::mt19937_64 rng_;
};

IpAddress host_mask(Family f, uint8_t length) {
  if (f == Family::V4) return IpAddress::v4(length >= 32 ? 0 : 0xffffffffu >> length);
  if (length >= 128) return {0, 0};
  if (length >= 64) return {0, ~uint64_t{0} >> (length - 64)};
  return {length == 0 ? ~uint64_t{0} : ~uint64_t{0} >> length, ~uint64_t{0}};
}

IpPrefix make_prefix(Family f, IpAddress a, uint8_t length) {
  const IpAddress m = host_mask(f, length);
  return IpPrefix{f, IpAddress{a.hi & ~m.hi, a.lo & ~m.lo}, length};
}

IpAddress inside(const IpPrefix& p, Random& r) {
  const IpAddress m = host_mask(p.family, p.length);
  return IpAddress{p.address.hi | (r.bits() & m.hi), p.address.lo | (r.bits() & m.lo)};
}

// Prefix lengths as firewalls see them: many hosts, many /24 (/64), some wider networks.
IpPrefix v4_prefix(Random& r) {
  static constexpr struct {
    uint32_t base;
    uint8_t length;
  } kRegions[] = {{0x0a000000, 8}, {0x0a000000, 8}, {0xac100000, 12}, {0xc0a80000, 16}, {0x01000000, 3}};
  const auto& region = r.one_of(kRegions);
  const uint32_t roll = r.pick(100);
  uint8_t length = roll < 35   ? 32
                   : roll < 60 ? 24
                   : roll < 75 ? 16 + r.pick(8)
                   : roll < 90 ? 25 + r.pick(7)
                               : 8 + r.pick(8);
  length = std::max(length, region.length);
  const uint32_t host = region.length == 0 ? 0xffffffffu : 0xffffffffu >> region.length;
  return make_prefix(Family::V4, IpAddress::v4(region.base | (static_cast<uint32_t>(r.bits()) & host)),
                     length);
}

IpPrefix v6_prefix(Random& r) {
  const bool doc = r.chance(70);
  const uint32_t roll = r.pick(100);
  const uint8_t length = roll < 30 ? 128 : roll < 65 ? 64 : roll < 75 ? 56 : roll < 95 ? 48 : 36 + r.pick(12);
  IpAddress a{r.bits(), r.bits()};
  a.hi = doc ? (0x20010db800000000ull | (a.hi & 0xffffffffull)) : (0xfd00000000000000ull | (a.hi >> 8));
  return make_prefix(Family::V6, a, length);
}

IpPrefix prefix_of(Family f, Random& r) {
  return f == Family::V4 ? v4_prefix(r) : v6_prefix(r);
}

IpPrefix host_of(Family f, Random& r) {
  IpPrefix p = prefix_of(f, r);
  return IpPrefix{f, inside(p, r), static_cast<uint8_t>(f == Family::V4 ? 32 : 128)};
}

AddressElement element(const IpPrefix& p, bool negated = false) {
  AddressElement e;
  e.kind = AddressElement::Kind::Prefix;
  e.prefix = p;
  e.negated = negated;
  return e;
}

AddressElement table(const std::string& name, bool negated = false) {
  AddressElement e;
  e.kind = AddressElement::Kind::Table;
  e.table = name;
  e.negated = negated;
  return e;
}

PortMatch port(PortMatch::Op op, uint16_t low, uint16_t high = 0) {
  return PortMatch{op, low, high};
}

std::vector<PortMatch> dst_ports(Random& r) {
  const uint32_t roll = r.pick(100);
  if (roll < 55) return {port(PortMatch::Op::Eq, r.one_of(kServices))};
  if (roll < 70) {
    std::vector<PortMatch> out;
    for (uint32_t i = 0, n = 2 + r.pick(3); i < n; ++i)
      out.push_back(port(PortMatch::Op::Eq, r.one_of(kServices)));
    return out;
  }
  if (roll < 80) {
    const auto low = static_cast<uint16_t>(1024 + r.pick(60000));
    return {port(PortMatch::Op::RangeInclusive, low, static_cast<uint16_t>(low + r.pick(200)))};
  }
  if (roll < 85) return {port(PortMatch::Op::Ge, 1024)};
  if (roll < 88) return {port(PortMatch::Op::Outside, 1024, 49151)};
  return {};
}

Table make_table(const std::string& name, uint32_t entries, uint32_t v6_percent, Random& r) {
  Table t;
  t.name = name;
  for (uint32_t i = 0; i < entries; ++i) {
    const Family f = r.chance(v6_percent) ? Family::V6 : Family::V4;
    t.entries.push_back(r.chance(50) ? host_of(f, r) : prefix_of(f, r));
  }
  return t;
}

// A block list as feeds publish them: public hosts and small networks.
Table make_block_list(uint32_t entries, Random& r) {
  Table t;
  t.name = "blocked";
  for (uint32_t i = 0; i < entries; ++i) {
    if (r.chance(25)) {
      IpAddress a{0x2000000000000000ull | (r.bits() >> 4), r.bits()};
      const uint32_t roll = r.pick(100);
      t.entries.push_back(make_prefix(Family::V6, a, roll < 60 ? 128 : roll < 90 ? 64 : 48));
    } else {
      // 1.0.0.0 - 223.255.255.255 minus the private ranges the rules use.
      uint32_t a = 0;
      do {
        a = 0x01000000u + static_cast<uint32_t>(r.bits() % 0xdf000000u);
      } while ((a >> 24) == 10 || (a >> 20) == 0xac1 || (a >> 16) == 0xc0a8);
      const uint32_t roll = r.pick(100);
      t.entries.push_back(make_prefix(Family::V4, IpAddress::v4(a),
                                      roll < 60   ? 32
                                      : roll < 90 ? 24
                                                  : 16 + r.pick(8)));
    }
  }
  return t;
}

class Generator {
 public:
  explicit Generator(uint64_t seed) : r_(seed) {}

  GeneratedRules run(uint32_t count) {
    GeneratedRules out;
    out.interfaces.assign(std::begin(kInterfaces), std::end(kInterfaces));
    RuleFile& f = out.file;
    f.file = "bench.conf";
    f.tables.push_back(make_block_list(std::max<uint32_t>(16, count), r_));
    // Large rule sets name many address groups, each used by a handful of rules.
    groups_ = 1 + count / 200;
    for (uint32_t i = 0; i < groups_; ++i) {
      f.tables.push_back(make_table("servers" + std::to_string(i), 4 + r_.pick(40), 30, r_));
      f.tables.push_back(make_table("partners" + std::to_string(i), 2 + r_.pick(20), 20, r_));
    }

    FilterRule block_all;
    block_all.log = LogMode::First;
    add(f, block_all);
    FilterRule blocked;
    blocked.direction = Direction::In;
    blocked.quick = true;
    blocked.from.addresses.push_back(table("blocked"));
    add(f, blocked);
    if (count > 2) {
      FilterRule pass_out;
      pass_out.action = Action::Pass;
      pass_out.direction = Direction::Out;
      add(f, pass_out);
    }
    // About 1% quick rules in all, the rest of them spread through the set.
    const uint32_t quick_every = 100;
    while (f.filter_rules.size() < count) {
      FilterRule rule = bulk_rule();
      rule.quick = f.filter_rules.size() % quick_every == quick_every / 2;
      add(f, rule);
    }
    f.filter_rules.resize(count);
    return out;
  }

 private:
  void add(RuleFile& f, FilterRule rule) {
    rule.location = SourceLocation{f.file, static_cast<uint32_t>(f.filter_rules.size() + 1), 1};
    if (rule.action == Action::Block) rule.state.keep_state = false;
    f.filter_rules.push_back(std::move(rule));
  }

  std::vector<AddressElement> addresses(Family f, bool destination) {
    const uint32_t roll = r_.pick(100);
    if (destination) {
      if (roll < 40) return {element(host_of(f, r_))};
      if (roll < 70) return {element(prefix_of(f, r_))};
      if (roll < 80) return {table("servers" + std::to_string(r_.pick(groups_)))};
      if (roll < 85) return {element(host_of(f, r_)), element(host_of(f, r_)), element(prefix_of(f, r_))};
      return {};
    }
    if (roll < 50) return {};
    if (roll < 80) return {element(prefix_of(f, r_))};
    if (roll < 88) return {element(prefix_of(f, r_)), element(prefix_of(f, r_))};
    if (roll < 93) return {element(prefix_of(f, r_), true)};
    return {table("partners" + std::to_string(r_.pick(groups_)))};
  }

  FilterRule bulk_rule() {
    FilterRule r;
    r.action = r_.chance(75) ? Action::Pass : Action::Block;
    const uint32_t dir = r_.pick(100);
    r.direction = dir < 75 ? Direction::In : dir < 95 ? Direction::Out : Direction::Any;
    const uint32_t on = r_.pick(100);
    if (on < 85) {
      r.interfaces.push_back({r_.one_of(kInterfaces), false});
    } else if (on < 90) {
      r.interfaces.push_back({r_.one_of(kInterfaces), true});
    }
    const Family family = r_.chance(30) ? Family::V6 : Family::V4;
    if (r_.chance(30)) r.family = family;
    const uint32_t proto = r_.pick(100);
    if (proto < 60) {
      r.protocols = {ipproto::kTcp};
    } else if (proto < 85) {
      r.protocols = {ipproto::kUdp};
    } else if (proto < 95) {
      r.protocols = {family == Family::V4 ? ipproto::kIcmp : ipproto::kIcmp6};
    } else {
      r.protocols = {ipproto::kTcp, ipproto::kUdp};
    }
    r.from.addresses = addresses(family, false);
    r.to.addresses = addresses(family, true);
    const bool ports = r.protocols[0] == ipproto::kTcp || r.protocols[0] == ipproto::kUdp;
    if (ports) {
      r.to.ports = dst_ports(r_);
      if (r_.chance(5))
        r.from.ports = {r_.chance(50) ? port(PortMatch::Op::Gt, 1023) : port(PortMatch::Op::Eq, 53)};
    }
    if (r.protocols == std::vector<uint8_t>{ipproto::kTcp} && r.action == Action::Pass && r_.chance(50)) {
      r.flags = FlagsMatch{tcpflag::kSyn, tcpflag::kSyn | tcpflag::kAck};
    }
    if (!ports && r_.chance(50)) {
      r.icmp6_types = family == Family::V6;
      r.icmp_types = {IcmpTypeMatch{static_cast<uint8_t>(family == Family::V6 ? 128 : 8), -1}};
      r.family = family;
    }
    return r;
  }

  Random r_;
  uint32_t groups_ = 1;
};

uint16_t sample_port(const std::vector<PortMatch>& ports, bool source, Random& r) {
  if (ports.empty()) return source ? static_cast<uint16_t>(1024 + r.pick(64000)) : r.one_of(kServices);
  const PortMatch& m = ports[r.pick(static_cast<uint32_t>(ports.size()))];
  if (m.op == PortMatch::Op::Eq) return m.low;
  if (m.op == PortMatch::Op::RangeInclusive)
    return static_cast<uint16_t>(m.low + r.pick(m.high - m.low + 1u));
  for (int tries = 0; tries < 1000; ++tries) {
    const auto p = static_cast<uint16_t>(r.pick(65536));
    const bool ok = (m.op == PortMatch::Op::Ne && p != m.low) || (m.op == PortMatch::Op::Lt && p < m.low) ||
                    (m.op == PortMatch::Op::Le && p <= m.low) || (m.op == PortMatch::Op::Gt && p > m.low) ||
                    (m.op == PortMatch::Op::Ge && p >= m.low) ||
                    (m.op == PortMatch::Op::RangeExclusive && p > m.low && p < m.high) ||
                    (m.op == PortMatch::Op::Outside && (p < m.low || p > m.high));
    if (ok) return p;
  }
  return m.low;
}

IpAddress sample_address(const std::vector<AddressElement>& list, Family f, const RuleFile& file, Random& r) {
  std::vector<const AddressElement*> usable;
  for (const AddressElement& e : list) {
    if (!e.negated && (e.kind != AddressElement::Kind::Prefix || e.prefix.family == f)) usable.push_back(&e);
  }
  if (usable.empty()) return inside(prefix_of(f, r), r);
  const AddressElement& e = *usable[r.pick(static_cast<uint32_t>(usable.size()))];
  if (e.kind == AddressElement::Kind::Prefix) return inside(e.prefix, r);
  if (e.kind == AddressElement::Kind::Table) {
    for (const Table& t : file.tables) {
      if (t.name != e.table) continue;
      std::vector<const IpPrefix*> same;
      for (const IpPrefix& p : t.entries) {
        if (p.family == f) same.push_back(&p);
      }
      if (!same.empty()) return inside(*same[r.pick(static_cast<uint32_t>(same.size()))], r);
    }
  }
  return inside(prefix_of(f, r), r);
}

Family family_of(const FilterRule& rule, Random& r) {
  if (rule.family) return *rule.family;
  for (const auto* list : {&rule.from.addresses, &rule.to.addresses}) {
    for (const AddressElement& e : *list) {
      if (e.kind == AddressElement::Kind::Prefix && !e.negated) return e.prefix.family;
    }
  }
  if (!rule.protocols.empty() && rule.protocols[0] == ipproto::kIcmp6) return Family::V6;
  if (!rule.protocols.empty() && rule.protocols[0] == ipproto::kIcmp) return Family::V4;
  return r.chance(30) ? Family::V6 : Family::V4;
}

bool can_match(const FilterRule& rule, Family f) {
  if (rule.family && *rule.family != f) return false;
  if (!rule.icmp_types.empty() && rule.icmp6_types != (f == Family::V6)) return false;
  if (!rule.protocols.empty() && rule.protocols[0] == (f == Family::V4 ? ipproto::kIcmp6 : ipproto::kIcmp))
    return false;
  for (const auto* list : {&rule.from.addresses, &rule.to.addresses}) {
    if (list->empty()) continue;
    const bool usable = std::any_of(list->begin(), list->end(), [f](const AddressElement& e) {
      return e.kind != AddressElement::Kind::Prefix || e.prefix.family == f || e.negated;
    });
    if (!usable) return false;
  }
  return true;
}

}  // namespace

GeneratedRules generate_rules(uint32_t count, uint64_t seed) {
  return Generator(seed).run(count);
}

uint32_t tail_with_both_families(const RuleFile& file, uint32_t tail) {
  const auto& rules = file.filter_rules;
  tail = static_cast<uint32_t>(std::min<std::size_t>(tail, rules.size()));
  auto offers = [&](Family f) {
    return std::any_of(rules.end() - tail, rules.end(), [f](const FilterRule& rule) {
      return rule.direction != Direction::Out && can_match(rule, f);
    });
  };
  while (tail < rules.size() && !(offers(Family::V4) && offers(Family::V6))) ++tail;
  return tail;
}

std::vector<BenchPacket> packets_for_tail(const RuleFile& file, uint32_t tail, uint32_t count,
                                          InterfaceRegistry& ifaces, uint64_t seed,
                                          const std::function<bool(const BenchPacket&)>& keep) {
  Random r(seed);
  std::vector<const FilterRule*> targets;
  const std::size_t first = file.filter_rules.size() - std::min<std::size_t>(tail, file.filter_rules.size());
  for (std::size_t i = first; i < file.filter_rules.size(); ++i) {
    if (file.filter_rules[i].direction != Direction::Out) targets.push_back(&file.filter_rules[i]);
  }
  if (targets.empty()) throw std::runtime_error("rule generator: no in-pass rule near the end");
  std::vector<BenchPacket> out;
  for (uint64_t attempt = 0; out.size() < count; ++attempt) {
    if (attempt > 1000ull * count)
      throw std::runtime_error("rule generator: too few packets match near the end");
    // IPv4 and IPv6 in the same proportion at every rule count, where the tail allows.
    const Family wanted = r.chance(kIpv6PacketPercent) ? Family::V6 : Family::V4;
    const FilterRule* chosen = nullptr;
    for (int tries = 0; tries < 20 && chosen == nullptr; ++tries) {
      const FilterRule* t = targets[r.pick(static_cast<uint32_t>(targets.size()))];
      if (can_match(*t, wanted)) chosen = t;
    }
    const FilterRule& rule = chosen ? *chosen : *targets[r.pick(static_cast<uint32_t>(targets.size()))];
    BenchPacket p;
    PacketView& v = p.view;
    v.family = chosen ? wanted : family_of(rule, r);
    v.proto = rule.protocols.empty() ? ipproto::kTcp
                                     : rule.protocols[r.pick(static_cast<uint32_t>(rule.protocols.size()))];
    v.src = sample_address(rule.from.addresses, v.family, file, r);
    v.dst = sample_address(rule.to.addresses, v.family, file, r);
    if (v.is_tcp() || v.is_udp()) {
      v.src_port = sample_port(rule.from.ports, true, r);
      v.dst_port = sample_port(rule.to.ports, false, r);
    }
    v.tcp.flags = tcpflag::kSyn;
    if (v.is_icmp()) {
      v.icmp.type = rule.icmp_types.empty() ? static_cast<uint8_t>(v.proto == ipproto::kIcmp ? 8 : 128)
                                            : rule.icmp_types[0].type;
      v.icmp.is_query = true;
    }
    std::string name = kInterfaces[r.pick(4)];
    if (!rule.interfaces.empty()) {
      const InterfaceMatch& m = rule.interfaces[r.pick(static_cast<uint32_t>(rule.interfaces.size()))];
      if (!m.negated) {
        name = m.name;
      } else {
        while (name == m.name) name = kInterfaces[r.pick(4)];
      }
    }
    p.iface = ifaces.intern(name);
    if (keep(p)) out.push_back(p);
  }
  return out;
}

}  // namespace pairwall::bench
