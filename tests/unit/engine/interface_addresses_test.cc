// Interface names in address positions (`em0`, `em0:network`) and `antispoof`: parsed, resolved
// against a host's addresses into const tables, and decided by the compiled rules.
#include "daemon/engine/rules/interface_addresses.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <variant>
#include <vector>

#include "daemon/engine/pool.h"
#include "daemon/engine/rules/compile.h"

namespace pairwall::engine::rules {
namespace {

RuleFile parse(const std::string& text) {
  auto parsed = parse_rules(text, "t.conf");
  if (auto* e = std::get_if<RuleError>(&parsed)) FAIL("parse error: " << e->to_string());
  return std::get<RuleFile>(std::move(parsed));
}

InterfaceAddress address(const std::string& text, uint8_t length) {
  InterfaceAddress a;
  a.address = *parse_address(text, &a.family);
  a.prefix_length = length;
  return a;
}

// A host: em0 outside (two IPv4 addresses in one /24, one IPv6), em1 inside, lo, and a link
// without addresses.
InterfaceAddresses host() {
  return {
      {"em0", {address("192.0.2.10", 24), address("192.0.2.11", 24), address("2001:db8::10", 64)}},
      {"em1", {address("10.1.0.1", 16), address("fd01::1", 64)}},
      {"lo", {address("127.0.0.1", 8), address("::1", 128)}},
      {"sync0", {}},
  };
}

std::string error_of(RuleFile file, const InterfaceAddresses& addresses = host()) {
  auto e = resolve_interfaces(file, addresses);
  return e ? e->to_string() : "(resolved)";
}

std::shared_ptr<const RuleSet> load(const std::string& text, InterfaceRegistry& ifs) {
  RuleFile file = parse(text);
  if (auto e = resolve_interfaces(file, host())) FAIL("resolve error: " << e->to_string());
  auto compiled = compile(file, ifs);
  if (auto* e = std::get_if<RuleError>(&compiled)) FAIL("compile error: " << e->to_string());
  return std::get<std::shared_ptr<const RuleSet>>(compiled);
}

PacketView tcp(const std::string& src, const std::string& dst) {
  PacketView p;
  Family f;
  p.src = *parse_address(src, &f);
  p.dst = *parse_address(dst, &f);
  p.family = f;
  p.proto = ipproto::kTcp;
  p.src_port = 40000;
  p.dst_port = 80;
  p.tcp.flags = tcpflag::kSyn;
  return p;
}

std::string prefixes_text(const std::vector<IpPrefix>& prefixes) {
  std::string out;
  for (const IpPrefix& p : prefixes) out += (out.empty() ? "" : " ") + to_string(p);
  return out;
}

std::string entries(const Table& t) {
  return prefixes_text(t.entries);
}

TEST_CASE("interface elements: names, networks, macros glued to a modifier", "[interfaces]") {
  const RuleFile f = parse(
      "int_if = \"em1\"\n"
      "net = 10.1.0.0\n"
      "pass in on $int_if from $int_if:network to ! em0\n"
      "pass in from $net/16\n");
  const auto& from = f.filter_rules.at(0).from.addresses.at(0);
  CHECK(from.kind == AddressElement::Kind::Interface);
  CHECK(from.table == "em1");
  CHECK(from.networks);
  CHECK(from.location.column == 25);
  const auto& to = f.filter_rules.at(0).to.addresses.at(0);
  CHECK(to.kind == AddressElement::Kind::Interface);
  CHECK(to.table == "em0");
  CHECK_FALSE(to.networks);
  CHECK(to.negated);
  // Word characters after a macro's name join its value, as pfctl's textual expansion has it.
  CHECK(to_string(f.filter_rules.at(1).from.addresses.at(0).prefix) == "10.1.0.0/16");
  // pf's `(em0)` is the same element.
  const RuleFile dynamic = parse("int_if = em1\npass in to ($int_if:network)\n");
  CHECK(dynamic.filter_rules.at(0).to.addresses.at(0).kind == AddressElement::Kind::Interface);
  CHECK(dynamic.filter_rules.at(0).to.addresses.at(0).table == "em1");
  CHECK(dynamic.filter_rules.at(0).to.addresses.at(0).networks);
  // IPv6 addresses that start with a letter stay addresses.
  const RuleFile v6 = parse("pass from fd01::1 to abcd::/16\n");
  CHECK(v6.filter_rules.at(0).from.addresses.at(0).kind == AddressElement::Kind::Prefix);
  CHECK(v6.filter_rules.at(0).to.addresses.at(0).kind == AddressElement::Kind::Prefix);
}

TEST_CASE("the host's IPv4 networks' broadcast addresses, sorted, set anew when they change",
          "[interfaces]") {
  RuleFile f = parse("pass all\n");
  REQUIRE_FALSE(resolve_interfaces(f, host()));
  // em0's two addresses share one network; IPv6 has no broadcast.
  CHECK(f.local_broadcasts == std::vector<uint32_t>{0x0a01ffff, 0x7fffffff, 0xc00002ff});
  CHECK_FALSE(refresh_local_broadcasts(f, host()));
  InterfaceAddresses moved = host();
  moved["em0"] = {address("192.0.2.10", 25), address("198.51.100.1", 31), address("203.0.113.9", 32)};
  moved["sync0"] = {address("169.254.0.1", 30)};
  CHECK(refresh_local_broadcasts(f, moved));
  CHECK(f.local_broadcasts == std::vector<uint32_t>{0x0a01ffff, 0x7fffffff, 0xa9fe0003, 0xc000027f});
  CHECK_FALSE(refresh_local_broadcasts(f, moved));
}

TEST_CASE("resolve_interfaces: one const table per element kind, networks masked, errors where named",
          "[interfaces]") {
  RuleFile f = parse(
      "pass in from em0:network to em0\n"
      "nat on em0 from em1:network to any -> 192.0.2.10\n"
      "block in from em0:network\n");
  REQUIRE_FALSE(resolve_interfaces(f, host()));
  REQUIRE(f.tables.size() == 3);
  CHECK(f.tables[0].name == "em0:network");
  CHECK(entries(f.tables[0]) == "192.0.2.0/24 2001:db8::/64");
  CHECK(f.tables[0].is_const);
  CHECK(f.tables[0].lists_entries);
  CHECK(f.tables[1].name == "em0:addresses");
  CHECK(entries(f.tables[1]) == "192.0.2.10/32 192.0.2.11/32 2001:db8::10/128");
  CHECK(f.tables[2].name == "em1:network");
  CHECK(entries(f.tables[2]) == "10.1.0.0/16 fd01::/64");

  // self: every address of the host, each once.
  RuleFile self = parse("pass in to self\n");
  REQUIRE_FALSE(resolve_interfaces(self, host()));
  REQUIRE(self.tables.size() == 1);
  CHECK(self.tables[0].name == "self:addresses");
  CHECK(entries(self.tables[0]) ==
        "10.1.0.1/32 127.0.0.1/32 192.0.2.10/32 192.0.2.11/32 ::1/128 2001:db8::10/128 fd01::1/128");
  CHECK(error_of(parse("pass in to self\n"), {}) ==
        "t.conf:1:12: this host has no address (write '(self)' to match its addresses once it has them)");

  // In a table's list, as pf allows: the addresses join the table's entries (or exceptions).
  RuleFile listed =
      parse("table <mine> { 198.51.100.1, em1:network, !em1, 10.1.0.0/16 }\npass in to <mine>\n");
  REQUIRE_FALSE(resolve_interfaces(listed, host()));
  REQUIRE(listed.tables.size() == 1);
  CHECK(entries(listed.tables[0]) == "198.51.100.1/32 10.1.0.0/16 fd01::/64");
  REQUIRE(listed.tables[0].negated_entries.size() == 2);
  CHECK(to_string(listed.tables[0].negated_entries[0]) == "10.1.0.1/32");
  CHECK(listed.tables[0].interfaces.empty());
  // A prefix the list holds already, the other way, stays as first listed.
  RuleFile both = parse("table <mine> { !10.1.0.0/16, em1:network }\npass in to <mine>\n");
  REQUIRE_FALSE(resolve_interfaces(both, host()));
  CHECK(entries(both.tables[0]) == "fd01::/64");
  REQUIRE(both.tables[0].negated_entries.size() == 1);
  CHECK(to_string(both.tables[0].negated_entries[0]) == "10.1.0.0/16");
  CHECK(error_of(parse("table <t> { em9 }\n")) == "t.conf:1:13: no interface named 'em9' on this host");
  // A table takes an interface's addresses as the rules load: `(sync0)` is no word of a table's
  // list, and the error does not offer it.
  CHECK(error_of(parse("table <t> { sync0 }\n")) ==
        "t.conf:1:13: interface 'sync0' has no address (a table holds the addresses it has when the rules "
        "load)");
  CHECK(error_of(parse("table <t> { self }\n"), {}) ==
        "t.conf:1:13: this host has no address (a table holds the addresses it has when the rules load)");

  CHECK(error_of(parse("pass all\npass in from em9\n")) ==
        "t.conf:2:14: no interface named 'em9' on this host (write '(em9)' to match its addresses once it "
        "exists)");
  CHECK(error_of(parse("pass in from em9:network\n")) ==
        "t.conf:1:14: no interface named 'em9' on this host (write '(em9:network)' to match its addresses "
        "once it exists)");
  CHECK(error_of(parse("pass in to sync0:network\n")) ==
        "t.conf:1:12: interface 'sync0' has no address (write '(sync0:network)' to match its addresses "
        "once it has them)");
  CHECK(error_of(parse("antispoof for { em1, em9 }\n")) ==
        "t.conf:1:22: no interface named 'em9' on this host (write '(em9:network)' to match its addresses "
        "once it exists)");
  // Without resolving, the compiler says what is missing rather than matching nothing.
  InterfaceRegistry ifs;
  auto unresolved = compile(parse("pass in from em0\n"), ifs);
  REQUIRE(std::holds_alternative<RuleError>(unresolved));
  CHECK(std::get<RuleError>(unresolved).to_string() ==
        "t.conf:1:14: the addresses of interface 'em0' are known only to rules loaded on a host "
        "(resolve_interfaces())");
  auto unresolved_table = compile(parse("table <t> { 10.0.0.1 em0 }\n"), ifs);
  REQUIRE(std::holds_alternative<RuleError>(unresolved_table));
  CHECK(std::get<RuleError>(unresolved_table).to_string() ==
        "t.conf:1:22: the addresses of interface 'em0' are known only to rules loaded on a host "
        "(resolve_interfaces())");
}

TEST_CASE("refresh_interface_tables follows the addresses, and says which tables changed", "[interfaces]") {
  RuleFile f = parse("table <mine> { em1 }\npass in from em1:network to { em0, self }\n");
  REQUIRE_FALSE(resolve_interfaces(f, host()));
  CHECK(refresh_interface_tables(f, host()).empty());
  InterfaceAddresses reordered = host();
  std::reverse(reordered["em0"].begin(), reordered["em0"].end());
  CHECK(refresh_interface_tables(f, reordered).empty());  // the kernel's order is no change

  InterfaceAddresses moved = host();
  moved["em1"] = {address("10.9.0.1", 24)};
  moved.erase("em0");
  const auto changed = refresh_interface_tables(f, moved);
  CHECK(changed == std::vector<std::string>{"em1:network", "em0:addresses", "self:addresses"});
  auto table = [&f](const std::string& name) -> const Table& {
    for (const Table& t : f.tables) {
      if (t.name == name) return t;
    }
    FAIL("no table " << name);
    return f.tables.front();
  };
  CHECK(entries(table("em1:network")) == "10.9.0.0/24");
  CHECK(entries(table("em0:addresses")).empty());  // gone: matches nothing
  CHECK(entries(table("self:addresses")) == "10.9.0.1/32 127.0.0.1/32 ::1/128");
  // A table listing an interface keeps what the load read.
  CHECK(entries(table("mine")) == "10.1.0.1/32 fd01::1/128");
}

TEST_CASE("interface elements decide packets like the tables they stand for", "[interfaces]") {
  InterfaceRegistry ifs;
  const IfaceId em0 = ifs.intern("em0");
  auto set = load(
      "block all\n"                                  // 0
      "pass in on em0 to em0\n"                      // 1
      "pass in on em1 from ! em1:network to any\n",  // 2
      ifs);
  const IfaceId em1 = ifs.intern("em1");
  CHECK(set->evaluate(tcp("203.0.113.1", "192.0.2.11"), Direction::In, em0) == 1);
  CHECK(set->evaluate(tcp("203.0.113.1", "192.0.2.12"), Direction::In, em0) == 0);
  CHECK(set->evaluate(tcp("2001:db8:1::1", "2001:db8::10"), Direction::In, em0) == 1);
  // A negated network: both families' networks are the exception, each in its own family.
  CHECK(set->evaluate(tcp("10.1.2.3", "192.0.2.10"), Direction::In, em1) == 0);
  CHECK(set->evaluate(tcp("10.2.2.3", "192.0.2.10"), Direction::In, em1) == 2);
  CHECK(set->evaluate(tcp("fd01::5", "2001:db8::10"), Direction::In, em1) == 0);
  CHECK(set->evaluate(tcp("fd02::5", "2001:db8::10"), Direction::In, em1) == 2);
  CHECK(set->rule(1).text == "pass in on em0 from any to em0 keep state");
}

TEST_CASE("(em0) loads before em0 has an address and matches nothing until it has one, as pf's",
          "[interfaces]") {
  // A link waiting for its DHCP lease: the rules load, and the table fills when the address comes.
  RuleFile f = parse("block all\npass in on sync0 to (sync0)\npass in from (sync0:network)\n");
  REQUIRE_FALSE(resolve_interfaces(f, host()));
  REQUIRE(f.tables.size() == 2);
  CHECK(f.tables[0].name == "sync0:addresses");
  CHECK(entries(f.tables[0]).empty());
  InterfaceRegistry ifs;
  const IfaceId sync0 = ifs.intern("sync0");
  auto compiled = compile(f, ifs);
  REQUIRE(std::holds_alternative<std::shared_ptr<const RuleSet>>(compiled));
  const auto& before = *std::get<std::shared_ptr<const RuleSet>>(compiled);
  CHECK(before.rule(1).text == "pass in on sync0 from any to (sync0) keep state");
  CHECK(before.evaluate(tcp("192.0.2.1", "198.51.100.7"), Direction::In, sync0) == 0);

  InterfaceAddresses leased = host();
  leased["sync0"] = {address("198.51.100.7", 24)};
  CHECK(refresh_interface_tables(f, leased) == std::vector<std::string>{"sync0:addresses", "sync0:network"});
  auto recompiled = compile(f, ifs);
  REQUIRE(std::holds_alternative<std::shared_ptr<const RuleSet>>(recompiled));
  const auto& after = *std::get<std::shared_ptr<const RuleSet>>(recompiled);
  CHECK(after.evaluate(tcp("192.0.2.1", "198.51.100.7"), Direction::In, sync0) == 1);
  CHECK(after.evaluate(tcp("198.51.100.9", "192.0.2.1"), Direction::In, sync0) == 2);

  // `sync0` written bare still needs its address, even where `(sync0)` made the table first.
  CHECK(error_of(parse("pass in to (sync0)\npass in to sync0\n")) ==
        "t.conf:2:12: interface 'sync0' has no address (write '(sync0)' to match its addresses once it "
        "has them)");
}

TEST_CASE("(tun0) of an interface the host does not have yet loads, said, and matches once it comes",
          "[interfaces]") {
  // A VPN or PPP link made after the firewall starts: current pf loads `(tun0)` before tun0 exists.
  RuleFile f = parse(
      "block all\n"
      "pass in on tun0 to (tun0)\n"
      "pass in from (tun0:network)\n"
      "nat on tun0 from 10.1.0.0/16 to any -> (tun0)\n");
  std::vector<RuleError> notices;
  REQUIRE_FALSE(resolve_interfaces(f, host(), &notices));
  REQUIRE(notices.size() == 3);
  CHECK(notices[0].to_string() ==
        "t.conf:2:20: warning: no interface named 'tun0' on this host yet: (tun0) matches no address until "
        "it has an address");
  CHECK(notices[1].to_string() ==
        "t.conf:3:14: warning: no interface named 'tun0' on this host yet: (tun0:network) matches no address "
        "until it has an address");
  CHECK(
      notices[2].to_string() ==
      "t.conf:4:40: warning: no interface named 'tun0' on this host yet: (tun0) translates nothing until it "
      "has an address");
  REQUIRE(f.tables.size() == 2);
  CHECK(entries(f.tables[0]).empty());
  CHECK(f.translation_rules[0].target_pending);
  InterfaceRegistry ifs;
  const IfaceId tun0 = ifs.intern("tun0");
  auto compiled = compile(f, ifs);
  REQUIRE(std::holds_alternative<std::shared_ptr<const RuleSet>>(compiled));
  CHECK(std::get<std::shared_ptr<const RuleSet>>(compiled)->evaluate(tcp("192.0.2.1", "198.51.100.7"),
                                                                     Direction::In, tun0) == 0);

  // The link comes up: its addresses fill the tables and the translation, as a refresh finds them.
  InterfaceAddresses up = host();
  up["tun0"] = {address("198.51.100.7", 24)};
  CHECK(refresh_interface_tables(f, up) ==
        std::vector<std::string>{"tun0:addresses", "tun0:network", "tun0 (translation address)"});
  CHECK_FALSE(f.translation_rules[0].target_pending);
  auto recompiled = compile(f, ifs);
  REQUIRE(std::holds_alternative<std::shared_ptr<const RuleSet>>(recompiled));
  const auto& after = *std::get<std::shared_ptr<const RuleSet>>(recompiled);
  CHECK(after.evaluate(tcp("192.0.2.1", "198.51.100.7"), Direction::In, tun0) == 1);
  CHECK(after.evaluate(tcp("198.51.100.9", "192.0.2.1"), Direction::In, tun0) == 2);

  // An interface the host has gives no notice, with or without an address.
  std::vector<RuleError> none;
  RuleFile present = parse("pass in to (sync0)\npass in to (em0)\n");
  REQUIRE_FALSE(resolve_interfaces(present, host(), &none));
  CHECK(none.empty());
}

TEST_CASE("a rule on an interface the host does not have loads, said once a name at its first rule",
          "[interfaces]") {
  // A misspelt `on eht0` would make a block rule a hole, unseen; pf loads rules on interfaces made
  // later (a VLAN, a tunnel) and so does this, with a word.
  RuleFile f = parse(
      "scrub in on vlan7 all max-mss 1400\n"
      "nat on ppp0 from 10.1.0.0/16 to any -> 192.0.2.1\n"
      "block in on eht0 from 198.51.100.0/24\n"
      "pass in on em0\n"
      "pass out on { em0, eht0 } received-on wg0\n"
      "anchor \"vpn\" on tun0 {\n"
      "  pass in on tun0 to (tun0)\n"
      "}\n"
      "pass in on ppp0\n");
  std::vector<RuleError> notices;
  REQUIRE_FALSE(resolve_interfaces(f, host(), &notices));
  std::vector<std::string> said;
  for (const RuleError& n : notices) said.push_back(n.to_string());
  const std::string absent = "' on this host yet: rules on it match nothing until it exists";
  CHECK(said ==
        std::vector<std::string>{
            "t.conf:7:22: warning: no interface named 'tun0' on this host yet: (tun0) matches no address "
            "until it has an address",
            "t.conf:1:1: warning: no interface named 'vlan7" + absent,
            "t.conf:2:1: warning: no interface named 'ppp0" + absent,
            "t.conf:3:1: warning: no interface named 'eht0" + absent,
            "t.conf:5:1: warning: no interface named 'wg0" + absent,
        });
  // Given no list of notices, nothing is said, and the rules load alike.
  RuleFile quiet = parse("block in on eht0\n");
  REQUIRE_FALSE(resolve_interfaces(quiet, host()));
}

TEST_CASE("antispoof expands as pfctl does and drops what arrives where it cannot come from",
          "[interfaces]") {
  InterfaceRegistry ifs;
  const IfaceId em0 = ifs.intern("em0");
  const IfaceId em1 = ifs.intern("em1");
  const IfaceId lo = ifs.intern("lo");
  auto set = load(
      "pass all\n"
      "antispoof log quick for { em1 lo }\n",
      ifs);
  REQUIRE(set->size() == 4);
  CHECK(set->rule(1).text == "block drop in log quick on ! em1 from em1:network to any");
  CHECK(set->rule(2).text == "block drop in log quick from em1 to any");
  CHECK(set->rule(3).text == "block drop in log quick on ! lo from lo:network to any");
  // em1's networks from elsewhere, em1's own addresses from anywhere: spoofed.
  CHECK(set->evaluate(tcp("10.1.0.5", "192.0.2.10"), Direction::In, em0) == 1);
  CHECK(set->evaluate(tcp("fd01::5", "2001:db8::10"), Direction::In, em0) == 1);
  CHECK(set->evaluate(tcp("10.1.0.1", "192.0.2.10"), Direction::In, em1) == 2);
  CHECK(set->evaluate(tcp("127.0.0.1", "192.0.2.10"), Direction::In, em0) == 3);
  // Where they belong, and everything leaving: passed.
  CHECK(set->evaluate(tcp("10.1.0.5", "192.0.2.10"), Direction::In, em1) == 0);
  CHECK(set->evaluate(tcp("10.2.0.5", "192.0.2.10"), Direction::In, em0) == 0);
  CHECK(set->evaluate(tcp("10.1.0.5", "192.0.2.10"), Direction::Out, em0) == 0);
  CHECK(set->evaluate(tcp("127.0.0.1", "127.0.0.1"), Direction::In, lo) == 0);

  // `quick` before `log` is the same, as pfctl's logquick takes them in either order.
  InterfaceRegistry swapped_ifs;
  auto swapped = load("pass all\nantispoof quick log for { em1 lo }\n", swapped_ifs);
  REQUIRE(swapped->size() == 4);
  for (uint32_t r = 1; r < 4; ++r) CHECK(swapped->rule(r).text == set->rule(r).text);
  InterfaceRegistry quick_ifs;
  CHECK(load("pass all\nantispoof quick for em1\n", quick_ifs)->rule(1).text ==
        "block drop in quick on ! em1 from em1:network to any");

  // A family keeps the expansion to it.
  InterfaceRegistry ifs4;
  auto v4 = load("pass all\nantispoof for em1 inet\n", ifs4);
  CHECK(v4->rule(1).text == "block drop in on ! em1 inet from em1:network to any");
  CHECK(v4->evaluate(tcp("fd01::5", "2001:db8::10"), Direction::In, ifs4.intern("em0")) == 0);
  CHECK(v4->evaluate(tcp("10.1.0.5", "192.0.2.10"), Direction::In, ifs4.intern("em0")) == 1);
}

TEST_CASE("a translation to an interface takes its address of the rule's family, and follows it",
          "[interfaces][nat]") {
  RuleFile f = parse(
      "nat on em0 from 10.1.0.0/16 to any -> (em0)\n"
      "nat on em0 inet6 proto udp from fd01::/64 to any -> em0 port 30000:30999\n"
      "binat on em0 from 10.1.0.7 to any -> (em0)\n"
      "pass all\n");
  REQUIRE(f.translation_rules[0].target_interface == "em0");
  CHECK(f.translation_rules[0].targets.empty());
  REQUIRE_FALSE(resolve_interfaces(f, host()));
  // The first address the kernel lists for the family, not the numerically lowest.
  CHECK(to_string(f.translation_rules[0].targets.at(0)) == "192.0.2.10/32");
  CHECK(to_string(f.translation_rules[1].targets.at(0)) == "2001:db8::10/128");
  CHECK(to_string(f.translation_rules[2].targets.at(0)) == "192.0.2.10/32");

  InterfaceRegistry ifs;
  const IfaceId em0 = ifs.intern("em0");
  auto compiled = compile(f, ifs);
  REQUIRE(std::holds_alternative<std::shared_ptr<const RuleSet>>(compiled));
  const auto& set = *std::get<std::shared_ptr<const RuleSet>>(compiled);
  CHECK(set.translation_rules()[0].text == "nat on em0 from 10.1.0.0/16 to any -> (em0)");
  CHECK(set.translation_rules()[1].text ==
        "nat on em0 inet6 proto udp from fd01::/64 to any -> (em0) port 30000:30999");
  const CompiledTranslation* t = set.translation(tcp("10.1.2.3", "198.51.100.1"), Direction::Out, em0);
  REQUIRE(t != nullptr);
  CHECK(to_string(t->targets.at(0)) == "192.0.2.10/32");

  // The address changes: the target follows, and the change is named.
  InterfaceAddresses moved = host();
  moved["em0"] = {address("203.0.113.5", 24), address("2001:db8::10", 64)};
  const auto changed = refresh_interface_tables(f, moved);
  CHECK(std::count(changed.begin(), changed.end(), "em0 (translation address)") == 2);
  CHECK(to_string(f.translation_rules[0].targets.at(0)) == "203.0.113.5/32");
  CHECK(to_string(f.translation_rules[1].targets.at(0)) == "2001:db8::10/128");
  // Gone: the target stays as it was.
  InterfaceAddresses gone = moved;
  gone["em0"] = {};
  CHECK(refresh_interface_tables(f, gone).empty());
  CHECK(to_string(f.translation_rules[0].targets.at(0)) == "203.0.113.5/32");

  // Refusals, where the target is written.
  CHECK(error_of(parse("nat on em0 from 10.0.0.0/8 to any -> em9\n")) ==
        "t.conf:1:38: no interface named 'em9' on this host");
  CHECK(error_of(parse("binat on em0 from 10.0.0.7 to any -> (em9)\n")) ==
        "t.conf:1:38: no interface named 'em9' on this host");
  CHECK(error_of(parse("nat on sync0 from 10.0.0.0/8 to any -> sync0\n")) ==
        "t.conf:1:40: interface 'sync0' has no IPv4 address to translate to (write '(sync0)' to "
        "translate once it has one)");
  CHECK(error_of(parse("binat on sync0 from 10.0.0.7 to any -> (sync0)\n")) ==
        "t.conf:1:40: interface 'sync0' has no IPv4 address to translate to");
  CHECK(error_of(parse("nat on lo inet6 from any to any -> lo\n")) == "(resolved)");
  auto refused = [](const std::string& text) {
    auto parsed = parse_rules(text, "t.conf");
    auto* e = std::get_if<RuleError>(&parsed);
    return e ? e->to_string() : std::string("(parsed)");
  };
  CHECK(refused("nat on em0 from any to any -> self\n") ==
        "t.conf:1:31: 'self' is every address of this host: translate to one interface's");
  CHECK(refused("nat on em0 from any to any -> em0:network\n") ==
        "t.conf:1:31: translate to em0 (its address), not to its networks");
  CHECK(refused("nat on em0 from any to any -> (10.0.0.1)\n") ==
        "t.conf:1:32: expected an interface name inside '( )', got '10.0.0.1'");
}

TEST_CASE("a translation to an interface round-robin takes every address of the family in turn",
          "[interfaces][nat][pool]") {
  const std::string text =
      "nat on em0 from 10.1.0.0/16 to any -> (em0) round-robin\n"
      "nat on em0 inet6 from fd01::/64 to any -> (em0) round-robin\n"
      "pass all\n";
  RuleFile f = parse(text);
  REQUIRE_FALSE(resolve_interfaces(f, host()));
  const auto targets = [&](std::size_t rule) { return prefixes_text(f.translation_rules[rule].targets); };
  CHECK(targets(0) == "192.0.2.10/32 192.0.2.11/32");
  CHECK(targets(1) == "2001:db8::10/128");

  InterfaceRegistry ifs;
  const IfaceId em0 = ifs.intern("em0");
  const std::shared_ptr<const RuleSet> set = load(text, ifs);
  CHECK(set->translation_rules()[0].text == "nat on em0 from 10.1.0.0/16 to any -> (em0) round-robin");
  const PacketView packet = tcp("10.1.2.3", "198.51.100.1");
  const CompiledTranslation* t = set->translation(packet, Direction::Out, em0);
  REQUIRE(t != nullptr);
  CHECK(t->pool == PoolType::RoundRobin);
  std::string taken;
  for (int i = 0; i < 3; ++i)
    taken += to_string(Family::V4, pool_address(*t, packet.src, packet.src, 0)) + " ";
  CHECK(taken == "192.0.2.10 192.0.2.11 192.0.2.10 ");

  // The addresses change: the pool follows them, all of them, and the change is named once.
  InterfaceAddresses moved = host();
  moved["em0"] = {address("203.0.113.5", 24), address("203.0.113.6", 24), address("2001:db8::10", 64)};
  const auto changed = refresh_interface_tables(f, moved);
  CHECK(std::count(changed.begin(), changed.end(), "em0 (translation address)") == 1);
  CHECK(targets(0) == "203.0.113.5/32 203.0.113.6/32");
  CHECK(refresh_interface_tables(f, moved).empty());
}

}  // namespace
}  // namespace pairwall::engine::rules
