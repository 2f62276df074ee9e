// Rule file -> RuleSet: validation errors with their locations, settings and per-rule timeouts,
// canonical text, and the three decision lists (filter, scrub, translation) through RuleSet.
#include "daemon/engine/rules/compile.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <variant>

namespace pairwall::engine::rules {
namespace {

RuleFile parse(const std::string& text) {
  auto parsed = parse_rules(text, "t.conf");
  if (auto* e = std::get_if<RuleError>(&parsed)) FAIL("parse error: " << e->to_string());
  return std::get<RuleFile>(std::move(parsed));
}

std::shared_ptr<const RuleSet> compile_ok(const RuleFile& file, InterfaceRegistry& ifs) {
  auto result = compile(file, ifs);
  if (auto* e = std::get_if<RuleError>(&result)) FAIL("compile error: " << e->to_string());
  return std::get<std::shared_ptr<const RuleSet>>(result);
}

std::shared_ptr<const RuleSet> compile_ok(const std::string& text, InterfaceRegistry& ifs) {
  return compile_ok(parse(text), ifs);
}

std::string compile_error(const RuleFile& file) {
  InterfaceRegistry ifs;
  auto result = compile(file, ifs);
  auto* e = std::get_if<RuleError>(&result);
  return e ? e->to_string() : "(compiled)";
}

PacketView packet(uint8_t proto, const std::string& src, uint16_t sport, const std::string& dst,
                  uint16_t dport) {
  PacketView p;
  Family f;
  p.src = *parse_address(src, &f);
  p.dst = *parse_address(dst, &f);
  p.family = f;
  p.proto = proto;
  p.src_port = sport;
  p.dst_port = dport;
  p.tcp.flags = tcpflag::kSyn;
  return p;
}

TEST_CASE("compile errors name file:line:column and what to do", "[compile]") {
  struct Row {
    std::string text;
    std::string expected;
  };
  const std::vector<Row> rows = {
      {"pass in from <nope> to any",
       "t.conf:1:14: table <nope> is not defined; define it before use with 'table <nope> { ... }'"},
      {"table <a> { 10.0.0.0/8 }\npass in from <a> to ! <b>",
       "t.conf:2:21: table <b> is not defined; define it before use with 'table <b> { ... }'"},
      {"block all\n  pass in inet icmp-type echoreq",
       "t.conf:2:3: 'icmp-type' needs 'proto icmp' and no other protocol"},
      {"pass proto { icmp tcp } icmp-type echoreq",
       "t.conf:1:1: 'icmp-type' needs 'proto icmp' and no other protocol"},
      {"pass proto icmp icmp6-type echoreq",
       "t.conf:1:1: 'icmp6-type' needs 'proto icmp6' and no other protocol"},
      {"pass in proto udp all flags S/SA", "t.conf:1:1: 'flags' applies to TCP only: add 'proto tcp'"},
      {"block all\nblock out quick from urpf-failed",
       "t.conf:2:1: 'urpf-failed' checks the interface a packet arrives on, which an out pass has not: "
       "write 'in', or no direction"},
      {"pass in proto icmp to any port 80",
       "t.conf:1:1: 'port' applies to TCP and UDP only: add 'proto tcp', 'proto udp' or 'proto { tcp, udp "
       "}'"},
      {"\n\npass in from any port 80",
       "t.conf:3:1: 'port' applies to TCP and UDP only: add 'proto tcp', 'proto udp' or 'proto { tcp, udp "
       "}'"},
      {"block return-rst all",
       "t.conf:1:1: 'return-rst' answers TCP only: add 'proto tcp', or write 'return' "
       "(a reset for TCP, ICMP for the rest)"},
      {"block return-rst (ttl 9) in proto { tcp udp } to port 53",
       "t.conf:1:1: 'return-rst' answers TCP only: add 'proto tcp', or write 'return' "
       "(a reset for TCP, ICMP for the rest)"},
      {"pass inet6 proto icmp all",
       "t.conf:1:1: proto icmp is IPv4's and the rule matches IPv6 only: use 'proto icmp6'"},
      {"pass proto { tcp icmp } to 2001:db8::/32",
       "t.conf:1:1: proto icmp is IPv4's and the rule matches IPv6 only: use 'proto icmp6'"},
      {"pass proto icmp6 from 10.0.0.0/8",
       "t.conf:1:1: proto icmp6 is IPv6's and the rule matches IPv4 only: use 'proto icmp'"},
      {"scrub in inet6 proto icmp all min-ttl 3",
       "t.conf:1:1: proto icmp is IPv4's and the rule matches IPv6 only: use 'proto icmp6'"},
      {"scrub in proto tcp to any port 80 max-mss 1400",
       "t.conf:1:1: scrub rules match interfaces, address families, protocols and addresses, not ports: "
       "remove 'port'"},
      {"pass from 10.0.0.0/8 to 2001:db8::/32",
       "t.conf:1:25: the source addresses are all IPv4 and the destination addresses all IPv6: the rule can "
       "never match"},
      {"nat on ext from 10.0.0.0/8 to any -> 2001:db8::1",
       "t.conf:1:1: the translation target 2001:db8::1 is IPv6 but the rule only matches IPv4 packets"},
      {"binat on ext from 10.0.0.0/24 to any -> 192.0.2.1",
       "t.conf:1:1: binat maps 10.0.0.0/24 onto 192.0.2.1: both sides need the same prefix length"},
      {"binat on ext from <t> to any -> 192.0.2.1",
       "t.conf:1:1: binat maps one internal address or prefix: write 'from ADDRESS[/LEN]'"},
      {"nat on ext inet6 proto icmp from 2001:db8:1::/48 -> 2001:db8::1",
       "t.conf:1:1: proto icmp is IPv4's and the rule matches IPv6 only: use 'proto icmp6'"},
      {"nat on ext proto icmp6 from any to any -> 192.0.2.1",
       "t.conf:1:1: proto icmp6 is IPv6's and the rule matches IPv4 only: use 'proto icmp'"},
      {"rdr on ext proto icmp to any -> 2001:db8::5",
       "t.conf:1:1: proto icmp is IPv4's and the rule matches IPv6 only: use 'proto icmp6'"},
      {"binat on ext proto icmp6 from 10.0.0.5 -> 192.0.2.5",
       "t.conf:1:1: proto icmp6 is IPv6's and the rule matches IPv4 only: use 'proto icmp'"},
      {"no nat on ext proto icmp from 2001:db8:1::/48",
       "t.conf:1:1: proto icmp is IPv4's and the rule matches IPv6 only: use 'proto icmp6'"},
      {"rdr on ext proto icmp to 192.0.2.1 -> 10.0.0.1 port 80",
       "t.conf:1:1: a translation 'port' needs 'proto tcp' or 'proto udp'"},
      {"nat on em0 proto tcp from 10.0.0.0/8 -> 192.0.2.1 port 6000:*",
       "t.conf:1:1: 'port 6000:*' maps an rdr's destination port range: a nat rule takes 'port P' or 'port "
       "P:Q'"},
      {"rdr on em0 proto tcp to 192.0.2.1 -> 10.0.0.5 port 6000:*",
       "t.conf:1:1: 'port 6000:*' maps an rdr's destination port range P:Q: the rule names none"},
      {"rdr on em0 proto tcp to 192.0.2.1 port { 80:89, > 1000 } -> 10.0.0.5 port 6000:*",
       "t.conf:1:1: 'port 6000:*' maps an rdr's destination port range P:Q, not '> 1000'"},
      {"rdr on em0 proto tcp to 192.0.2.1 port 60000:65000 -> 10.0.0.5 port 61000:*",
       "t.conf:1:1: rdr maps ports 60000:65000 onto 61000 and up, past port 65535"},
      {"rdr on ext proto tcp to port 80 -> <web> port 8080",
       "t.conf:1:36: table <web> is not defined; define it before use with 'table <web> { ... }'"},
      {"table <web> { 10.2.0.10 }\nrdr on ext proto tcp to port 80 -> <web> port 8080",
       "t.conf:2:36: table <web> may hold addresses of either family: limit the rule to one with 'inet' or "
       "'inet6'"},
      {"table <out> { 192.0.2.0/28 }\nnat on ext from 10.0.0.0/8 -> <out> bitmask",
       "t.conf:2:31: a table pool has no one network to graft onto: round-robin (its default), random or "
       "source-hash"},
      {"nat on ext from 10.0.0.0/8 -> { 192.0.2.1, 192.0.2.9 } bitmask",
       "t.conf:1:31: a list of translation addresses has no one network to graft onto: round-robin (its "
       "default), random or source-hash"},
      {"set timeout { udp.first 20, adaptive.start 6000 }",
       "t.conf:1:29: 'adaptive.start' without 'adaptive.end': set both (or neither, and they follow the "
       "state limit)"},
      {"pass in proto tcp all keep state (max-src-conn 5, overload <nope>)",
       "t.conf:1:60: table <nope> is not defined; define it before use with 'table <nope> persist'"},
      {"table <c> const { 10.0.0.1 }\npass in proto tcp all keep state (max-src-conn 5, overload <c> flush)",
       "t.conf:2:60: table <c> is const: 'overload' adds addresses to it"},
      {"table <t> persist\npass in proto tcp all keep state (max-src-states 5, overload <t>)",
       "t.conf:2:62: 'overload' acts when a source goes over 'max-src-conn' or 'max-src-conn-rate': add one"},
      {"pass in proto tcp all keep state (source-track global)",
       "t.conf:1:1: 'source-track global' without a limit tracks nothing: add max-src-states, max-src-conn "
       "or max-src-conn-rate"},
      {"set timeout adaptive.start 6000\nset timeout adaptive.end 6000",
       "t.conf:2:13: 'adaptive.end 6000' must be above 'adaptive.start 6000' (both 0 turn adaptive timeouts "
       "off)"},
      {"pass in on { em0, em1 } all label \"$if-in\"",
       "t.conf:1:35: the label's $if stands for one interface, and the rule lists 2: write a rule for each "
       "(pfctl expands them so)"},
      {"pass in proto tcp to port { 80, 443 } label \"web-$dstport\"",
       "t.conf:1:45: the label's $dstport stands for one destination port, and the rule lists 2: write a "
       "rule for each (pfctl expands them so)"},
      {"pass in from 2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff to 2001:db8:aaaa:bbbb:cccc:dddd:eeee:fffe "
       "label \"$srcaddr-$dstaddr\"",
       "t.conf:1:101: the label expands to 77 characters, over pf's 63: "
       "\"2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff-2001:db8:aaaa:bbbb:cccc:dddd:eeee:fffe\""},
      {"set limit table-entries 3\ntable <a> { 10.0.0.1 }\ntable <b> { 10.0.0.3, !10.0.0.4, 10.0.0.5 }",
       "t.conf:3:7: the tables hold 4 entries, over the limit of 3, <b> 3 of them (raise it with 'set "
       "limit table-entries N')"},
  };
  for (const Row& row : rows) {
    INFO(row.text);
    auto parsed = parse_rules(row.text, "t.conf");
    if (auto* e = std::get_if<RuleError>(&parsed)) {
      // The parser may already refuse a rule only compile() was expected to catch; either way the
      // message must be the same one a person sees.
      CHECK(e->to_string() == row.expected);
      continue;
    }
    CHECK(compile_error(std::get<RuleFile>(parsed)) == row.expected);
  }
}

// pfctl's label macros, expanded with the text pfctl gives each (expand_label()).
TEST_CASE("label macros expand to the rule's own fields, as pfctl's", "[compile]") {
  struct Row {
    const char* rule;
    const char* label;
  };
  const Row rows[] = {
      {"pass in on em0 proto tcp from 10.0.0.0/8 port > 1023 to 192.0.2.1 port 80 label "
       "\"$if:$proto:$srcaddr:$srcport>$dstaddr:$dstport\"",
       "em0:tcp:10.0.0.0/8:>1023>192.0.2.1:80"},
      {"pass in all label \"$if $proto [$srcaddr] [$srcport] $dstaddr\"", "any  [any] [] any"},
      {"pass in from ! <bad> to 2001:db8::/32 label \"$srcaddr to $dstaddr\"", "! <bad> to 2001:db8::/32"},
      {"pass in proto udp to port 5000:5010 label \"$dstport\"", "5000:5010"},
      {"pass in proto udp to port 5000 >< 5010 label \"$dstport\"", "5000><5010"},
      {"pass in proto udp to port != 53 label \"$dstport\"", "!=53"},
      {"pass in on em0 all label \"rule $nr on $if, $if\"", "rule 1 on em0, em0"},
      {"pass in all label \"$cost $ifname\"", "$cost anyname"},  // as pfctl: only its names
  };
  for (const Row& row : rows) {
    INFO(row.rule);
    InterfaceRegistry ifs;
    auto set = compile_ok(std::string("table <bad> { 192.0.2.9 }\nblock all\n") + row.rule, ifs);
    CHECK(set->rule(1).label == row.label);
    CHECK(set->rule(1).text.ends_with(std::string("label \"") + row.label + "\""));
  }
}

TEST_CASE("compile errors the parser cannot produce, from hand-built files", "[compile]") {
  RuleFile f;
  f.file = "h.conf";
  SECTION("unknown timeout in set timeout, at the name") {
    f.settings.timeouts["tcp.bogus"] = 5;
    f.settings.timeout_locations["tcp.bogus"] = {"h.conf", 3, 15};
    CHECK(
        compile_error(f) ==
        "h.conf:3:15: unknown timeout 'tcp.bogus' in 'set timeout'; expected one of tcp.first, tcp.opening, "
        "tcp.established, tcp.closing, tcp.finwait, tcp.closed, udp.first, udp.single, udp.multiple, "
        "icmp.first, "
        "icmp.error, other.first, other.single, other.multiple, src.track");
  }
  SECTION("zero timeout") {
    f.settings.timeouts["udp.first"] = 0;
    f.settings.timeout_locations["udp.first"] = {"h.conf", 2, 14};
    CHECK(compile_error(f) ==
          "h.conf:2:14: timeout 'udp.first' must be at least 1 second (0 would expire states at once)");
  }
  SECTION("unknown rule timeout override, at the rule") {
    FilterRule r;
    r.action = Action::Pass;
    r.location = {"h.conf", 7, 1};
    r.state.timeouts["tcp.estab"] = 60;
    f.filter_rules.push_back(r);
    CHECK(compile_error(f).rfind(
              "h.conf:7:1: unknown timeout 'tcp.estab' in the rule's state options; expected one of "
              "tcp.first,",
              0) == 0);
  }
  SECTION("state limit zero, at the file") {
    f.settings.limit_states = 0;
    CHECK(compile_error(f) == "h.conf: 'set limit states 0' would refuse every new connection");
  }
  SECTION("duplicate table") {
    Table t;
    t.name = "x";
    t.location = {"h.conf", 1, 7};
    f.tables.push_back(t);
    t.location = {"h.conf", 4, 7};
    f.tables.push_back(t);
    CHECK(compile_error(f) == "h.conf:4:7: table <x> is already defined at line 1");
  }
  SECTION("address family against inet6") {
    FilterRule r;
    r.location = {"h.conf", 2, 1};
    r.family = Family::V6;
    AddressElement e;
    e.kind = AddressElement::Kind::Prefix;
    e.prefix = *parse_prefix("10.0.0.0/8");
    e.location = {"h.conf", 2, 17};
    r.from.addresses.push_back(e);
    f.filter_rules.push_back(r);
    CHECK(compile_error(f) == "h.conf:2:17: address 10.0.0.0/8 is IPv4 but the rule is limited to inet6");
  }
  SECTION("tables over pf's default table-entries limit, at the table that goes over") {
    Table small;
    small.name = "small";
    small.location = {"h.conf", 1, 7};
    small.entries.push_back(*parse_prefix("10.0.0.1"));
    f.tables.push_back(small);
    Table big;
    big.name = "big";
    big.location = {"h.conf", 2, 7};
    for (uint32_t i = 0; i < kDefaultTableEntryLimit; ++i)
      big.entries.push_back(IpPrefix{Family::V4, IpAddress::v4(0x0b000000u + i), 32});
    f.tables.push_back(big);
    CHECK(compile_error(f) ==
          "h.conf:2:7: the tables hold 200001 entries, over the limit of 200000, <big> 200000 of them "
          "(raise it with 'set limit table-entries N')");
    f.tables[1].entries.pop_back();
    CHECK(compile_error(f) == "(compiled)");
  }
  SECTION("scrub with ports") {
    ScrubRule s;
    s.location = {"h.conf", 5, 1};
    s.to.ports.push_back({PortMatch::Op::Eq, 80, 0});
    f.scrub_rules.push_back(s);
    CHECK(compile_error(f) ==
          "h.conf:5:1: scrub rules match interfaces, address families, protocols and addresses, not ports: "
          "remove 'port'");
  }
}

// A table edit recompiles every list, and the scrub and translation rules keep their counters as the
// filter rules do; a reload of the main rules starts them at zero.
TEST_CASE("a recompile keeps the scrub and translation rules' counters where they are written alike",
          "[compile][counters]") {
  InterfaceRegistry ifs;
  const IfaceId wan = ifs.intern("wan0");
  const std::string nat = "nat on wan0 from 10.0.0.0/8 to any -> 192.0.2.1\n";
  const std::string rdr = "rdr on wan0 proto tcp to port 80:81 -> 10.0.0.5 port 8080\n";
  const auto before =
      compile_ok("scrub in all\nscrub out all max-mss 1400\n" + nat + rdr + "pass all\n", ifs);
  const auto after_file = parse("scrub in all\nscrub in on lan0 all\nscrub out all max-mss 1400\n" + rdr +
                                "binat on wan0 from 10.0.0.9 to any -> 192.0.2.9\n" + nat + "pass all\n");
  const auto compiled = compile(after_file, ifs, before.get());
  REQUIRE(std::holds_alternative<std::shared_ptr<const RuleSet>>(compiled));
  const auto after = std::get<std::shared_ptr<const RuleSet>>(compiled);

  const auto& scrubs = after->scrub_listing();
  REQUIRE(scrubs.size() == 3);
  CHECK(scrubs[0].stats == before->scrub_listing()[0].stats);
  CHECK(scrubs[2].stats == before->scrub_listing()[1].stats);
  CHECK(scrubs[1].stats != before->scrub_listing()[0].stats);
  CHECK(scrubs[1].stats != before->scrub_listing()[1].stats);
  // What the packet path counts is the kept counters, not only what rules show lists.
  PacketView p = packet(ipproto::kTcp, "10.0.0.1", 1000, "198.51.100.1", 443);
  CHECK(after->scrub(p, Direction::Out, wan).counters == before->scrub_listing()[1].stats.get());

  const auto& translations = after->translation_rules();
  REQUIRE(translations.size() == 3);
  CHECK(translations[0].stats == before->translation_rules()[1].stats);  // the rdr
  CHECK(translations[2].stats == before->translation_rules()[0].stats);  // the nat
  CHECK(translations[1].stats != before->translation_rules()[0].stats);
  CHECK(translations[1].stats != before->translation_rules()[1].stats);
  // Every entry of a rule (the rdr's per port, binat's two ways) counts where rules show reads.
  const CompiledTranslation* rdr_entry =
      after->translation(packet(ipproto::kTcp, "198.51.100.1", 1000, "192.0.2.1", 81), Direction::In, wan);
  REQUIRE(rdr_entry != nullptr);
  CHECK(rdr_entry->stats == before->translation_rules()[1].stats);
  const CompiledTranslation* nat_entry =
      after->translation(packet(ipproto::kTcp, "10.0.0.1", 1000, "198.51.100.1", 443), Direction::Out, wan);
  REQUIRE(nat_entry != nullptr);
  CHECK(nat_entry->stats == before->translation_rules()[0].stats);

  // A reload of the main rules (keeps_counters says no for "") starts every list at zero.
  const auto reloaded =
      compile(after_file, ifs, before.get(), [](std::string_view anchor) { return !anchor.empty(); });
  REQUIRE(std::holds_alternative<std::shared_ptr<const RuleSet>>(reloaded));
  const auto fresh = std::get<std::shared_ptr<const RuleSet>>(reloaded);
  CHECK(fresh->scrub_listing()[0].stats != before->scrub_listing()[0].stats);
  CHECK(fresh->translation_rules()[2].stats != before->translation_rules()[0].stats);
}

TEST_CASE("zero_counters() zeroes every rule's matches, packets and bytes, and keeps its state counts",
          "[compile][counters]") {
  InterfaceRegistry ifs;
  const auto set = compile_ok(
      "scrub in all\n"
      "binat on wan0 from 10.0.0.9 to any -> 192.0.2.9\n"
      "rdr on wan0 proto tcp to port 80:81 -> 10.0.0.5 port 8080\n"
      "block all\n"
      "anchor \"a\" {\n pass in proto tcp\n}\n"
      "pass out all\n",
      ifs);
  std::vector<const RuleStats*> every;
  for (uint32_t i = 0; i < set->size(); ++i) every.push_back(set->rule(i).stats.get());
  for (const ListedRule& t : set->translation_rules()) every.push_back(t.stats.get());
  for (const ListedRule& s : set->scrub_listing()) every.push_back(s.stats.get());
  REQUIRE(every.size() == 6);
  for (std::size_t i = 0; i < set->translation_count(); ++i) {
    RuleStats& stats = *set->translation_entry(static_cast<uint32_t>(i)).stats;
    stats.evaluations += 3;
    stats.packets += 5;
    stats.bytes += 700;
  }
  // rules show reads the translation and scrub rules' counters through const views; the workers
  // count them in the same objects.
  for (const RuleStats* listed : every) {
    auto& stats = const_cast<RuleStats&>(*listed);
    stats.evaluations += 3;
    stats.packets += 5;
    stats.bytes += 700;
    stats.states_current += 2;
    stats.states_created += 9;
  }

  CHECK(set->zero_counters() == 6);
  for (const RuleStats* stats : every) {
    CHECK(stats->evaluations == 0);
    CHECK(stats->packets == 0);
    CHECK(stats->bytes == 0);
    CHECK(stats->states_current == 2);
    CHECK(stats->states_created == 9);
  }
  // Every entry of a translation rule, binat's two ways and the rdr's per port, reads zero.
  for (std::size_t i = 0; i < set->translation_count(); ++i)
    CHECK(set->translation_entry(static_cast<uint32_t>(i)).stats->packets == 0);
}

TEST_CASE("zero_counters(anchor) zeroes that anchor's rules and its anchors', and no other",
          "[compile][counters]") {
  InterfaceRegistry ifs;
  const auto set = compile_ok(
      "scrub in all\n"
      "nat on wan0 from 10.0.0.0/8 to any -> 192.0.2.1\n"
      "block all\n"
      "anchor \"a\" {\n pass in proto tcp\n anchor \"b\" {\n  pass in proto udp\n }\n}\n"
      "anchor \"ab\" {\n pass in proto icmp\n}\n"
      "pass out all\n",
      ifs);
  REQUIRE(set->size() == 5);
  std::vector<RuleStats*> every;
  for (uint32_t i = 0; i < set->size(); ++i) every.push_back(set->rule(i).stats.get());
  every.push_back(set->translation_entry(0).stats.get());
  every.push_back(const_cast<RuleStats*>(set->scrub_listing()[0].stats.get()));
  for (RuleStats* stats : every) stats->packets = 7;

  CHECK(set->zero_counters("a") == 2);
  std::vector<std::string> zeroed;
  for (uint32_t i = 0; i < set->size(); ++i) {
    if (set->rule(i).stats->packets == 0) zeroed.push_back(set->rule(i).anchor);
  }
  CHECK(zeroed == std::vector<std::string>{"a", "a/b"});
  CHECK(every[5]->packets == 7);  // the nat rule
  CHECK(every[6]->packets == 7);  // the scrub rule
  CHECK(set->zero_counters("a/b") == 1);
  CHECK(set->zero_counters("") == 7);
  for (RuleStats* stats : every) CHECK(stats->packets == 0);
}

TEST_CASE("settings and per-rule state options reach the compiled rules", "[compile]") {
  InterfaceRegistry ifs;
  const IfaceId lan = ifs.intern("lan0");
  auto set = compile_ok(
      "set limit { states 5000, src-nodes 70 }\n"
      "set timeout { tcp.established 3600, udp.first 20 }\n"
      "block return log all\n"
      "pass in quick on { ext0, ! lan0 } inet6 proto tcp from any to 2001:db8::/32 port { 80, 443 } "
      "flags S/SA keep state (max 100, tcp.established 60)\n"
      "pass out proto udp all no state\n"
      "block return-rst in proto tcp all\n",
      ifs);
  REQUIRE(set->size() == 4);
  CHECK(set->state_limit() == 5000);
  CHECK(set->source_node_limit() == 70);
  CHECK(RuleSet().source_node_limit() == 10'000);  // pf's default
  CHECK(set->timeouts()[TimeoutClass::TcpEstablished] == std::chrono::seconds(3600));
  CHECK(set->timeouts()[TimeoutClass::UdpFirst] == std::chrono::seconds(20));
  CHECK(set->timeouts()[TimeoutClass::TcpFirst] == Timeouts::defaults()[TimeoutClass::TcpFirst]);
  CHECK_FALSE(set->adaptive_timeouts().start.has_value());
  CHECK_FALSE(set->adaptive_timeouts().end.has_value());

  const CompiledRule& block = set->rule(0);
  CHECK(block.number == 0);
  CHECK(block.action == Action::Block);
  CHECK(block.reply_rst_for_tcp);
  CHECK(block.log);
  CHECK_FALSE(block.keep_state);
  CHECK(block.location.line == 3);
  CHECK(block.text == "block return log all");

  const CompiledRule& web = set->rule(1);
  CHECK(web.quick);
  CHECK(web.keep_state);
  CHECK(web.max_states == 100);
  CHECK(web.timeouts[TimeoutClass::TcpEstablished] == std::chrono::seconds(60));
  CHECK(web.timeouts[TimeoutClass::UdpFirst] == std::chrono::seconds(20));
  CHECK(web.text ==
        "pass in quick on { ext0, ! lan0 } inet6 proto tcp from any to 2001:db8::/32 port { 80, 443 } flags "
        "S/SA "
        "keep state (max 100, tcp.established 60)");
  CHECK(ifs.find("ext0").has_value());
  CHECK(ifs.find("lan0") == lan);

  CHECK_FALSE(set->rule(2).keep_state);
  CHECK(set->rule(2).text == "pass out proto udp all no state");
  CHECK(set->rule(3).reply == BlockReply::ReturnRst);
  CHECK(set->rule(3).text == "block return-rst in proto tcp all");
}

TEST_CASE("adaptive timeouts scale every timeout as the table fills, as pf's do", "[compile]") {
  InterfaceRegistry ifs;
  auto set = compile_ok("set timeout { adaptive.start 6000, adaptive.end 12000 }\npass all\n", ifs);
  const AdaptiveTimeouts& adaptive = set->adaptive_timeouts();
  CHECK(adaptive.start == 6000u);
  CHECK(adaptive.end == 12000u);
  // The limit does not matter once both are given.
  CHECK(adaptive.scale(6000, 1'000'000) == 1.0);
  CHECK(adaptive.scale(9000, 1'000'000) == 0.5);
  CHECK(adaptive.scale(10500, 10) == 0.25);
  CHECK(adaptive.scale(12000, 1'000'000) == 0.0);
  CHECK(adaptive.scale(20000, 1'000'000) == 0.0);

  // Unset: 60 % and 120 % of the state limit.
  const AdaptiveTimeouts defaults;
  CHECK(defaults.scale(600, 1000) == 1.0);
  CHECK(defaults.scale(900, 1000) == 0.5);
  CHECK(defaults.scale(1000, 1000) == Approx(1.0 / 3));

  auto off = compile_ok("set timeout { adaptive.start 0, adaptive.end 0 }\npass all\n", ifs);
  CHECK(off->adaptive_timeouts().scale(1000, 1000) == 1.0);
  CHECK(off->adaptive_timeouts().scale(5000, 1000) == 1.0);
}

TEST_CASE("set block-policy and set skip reach the compiled rules", "[compile]") {
  InterfaceRegistry ifs;
  auto set = compile_ok(
      "set block-policy return\nset skip on { lo, sync0 }\nset skip on wg0\nblock all\nblock drop in all\n",
      ifs);
  CHECK(set->rule(0).reply == BlockReply::ReturnIcmp);
  CHECK(set->rule(0).reply_rst_for_tcp);
  CHECK(set->rule(0).text == "block all");
  CHECK(set->rule(1).reply == BlockReply::Drop);
  CHECK_FALSE(set->rule(1).reply_rst_for_tcp);
  CHECK(set->rule(1).text == "block drop in all");
  for (const char* name : {"lo", "sync0", "wg0"}) {
    INFO(name);
    REQUIRE(ifs.find(name).has_value());
    CHECK(set->skips(*ifs.find(name)));
  }
  CHECK_FALSE(set->skips(ifs.intern("eth0")));
  CHECK_FALSE(set->skips(kNoIface));

  auto plain = compile_ok("block all\n", ifs);
  CHECK(plain->rule(0).reply == BlockReply::Drop);
  CHECK_FALSE(plain->skips(*ifs.find("lo")));
}

TEST_CASE("canonical text parses back to the same rule", "[compile]") {
  const std::string text =
      "table <t> { 10.0.0.0/8, !10.1.0.0/16, 2001:db8::/32 }\n"
      "block drop in log quick on ext0 inet proto { tcp, udp } from { ! 10.0.0.0/8, <t> } port >= 1024 to "
      "192.0.2.1 port { 1000:2000, 3000 >< 3010, 4000 <> 5000, != 22, < 5, <= 6, > 7 }\n"
      "pass in inet proto icmp all icmp-type { 8, 3 code 1 }\n"
      "pass out inet6 proto icmp6 from ::1 to ! <t> icmp6-type 128 keep state\n"
      "block return-icmp out on ! lan0 proto 47 all\n"
      "pass proto tcp all flags /SAFR\n"
      "pass in proto tcp to port 80\n"
      "pass in proto { tcp, udp } all flags any\n"
      "pass out all\n"
      "pass out proto tcp all no state\n"
      "pass in proto udp all keep state (max 5, no-sync, udp.first 10)\n"
      "pass in proto tcp all keep state (source-track global, max-src-conn-rate 15/5, max-src-conn 9, "
      "max-src-states 3)\n"
      "pass in proto tcp all keep state (max-src-states 3, source-track rule, max-src-nodes 100)\n"
      "pass in proto tcp all keep state (max-src-conn 3, overload <t> flush global)\n"
      "pass in proto tcp all keep state (max-src-conn-rate 3/1, overload <t> flush)\n"
      "pass in proto tcp all keep state (max-src-conn 3, overload <t>)\n"
      "pass in proto tcp to port 443 label \"web \\\"tls\\\" \\\\ 443\"\n"
      "block in all label \"default\"\n"
      "pass in on lan0 proto tcp tag WEB\n"
      "pass out tag SEEN ! tagged WEB label \"x\"\n";
  InterfaceRegistry ifs;
  auto first = compile_ok(text, ifs);
  const std::size_t n = first->size();
  CHECK(first->rule(n - 2).text == "pass in on lan0 proto tcp all flags S/SA keep state tag WEB");
  CHECK(first->rule(n - 1).text == "pass out all keep state label \"x\" tag SEEN ! tagged WEB");
  std::string again = "table <t> { 10.0.0.0/8, !10.1.0.0/16, 2001:db8::/32 }\n";
  for (std::size_t i = 0; i < first->size(); ++i) again += first->rule(i).text + "\n";
  auto second = compile_ok(again, ifs);
  REQUIRE(second->size() == first->size());
  for (std::size_t i = 0; i < first->size(); ++i) CHECK(second->rule(i).text == first->rule(i).text);
  CHECK(first->rule(1).text == "pass in inet proto icmp all icmp-type { 8, 3 code 1 } keep state");
  CHECK(first->rule(4).text == "pass proto tcp all flags /FSRA keep state");
  // pf's defaults shown as pfctl shows them: flags S/SA on a stateful TCP rule, `flags any` kept.
  CHECK(first->rule(5).text == "pass in proto tcp from any to any port 80 flags S/SA keep state");
  CHECK(first->rule(6).text == "pass in proto { tcp, udp } all flags any keep state");
  CHECK(first->rule(7).text == "pass out all keep state");
  CHECK(first->rule(8).text == "pass out proto tcp all no state");
  CHECK(first->rule(9).text == "pass in proto udp all keep state (max 5, no-sync, udp.first 10)");
  CHECK(first->rule(9).no_sync);
  CHECK(first->rule(10).text ==
        "pass in proto tcp all flags S/SA keep state (max-src-states 3, max-src-conn 9, max-src-conn-rate "
        "15/5, "
        "source-track global)");
  const SourceLimits& limits = first->rule(10).sources;
  CHECK(limits.max_src_nodes == 0);
  CHECK(limits.max_src_states == 3);
  CHECK(limits.max_src_conn == 9);
  CHECK(limits.conn_rate_count == 15);
  CHECK(limits.conn_rate_seconds == 5);
  CHECK(limits.global);
  CHECK(first->rule(11).text ==
        "pass in proto tcp all flags S/SA keep state (max-src-nodes 100, max-src-states 3)");
  CHECK(first->rule(11).sources.max_src_nodes == 100);
  CHECK_FALSE(first->rule(11).sources.global);
  CHECK_FALSE(first->rule(9).sources.tracks());
  CHECK(first->rule(12).text ==
        "pass in proto tcp all flags S/SA keep state (max-src-conn 3, overload <t> flush global)");
  CHECK(first->rule(12).overload_table == "t");
  CHECK(first->rule(12).overload_flush == OverloadFlush::Global);
  CHECK(first->rule(13).text ==
        "pass in proto tcp all flags S/SA keep state (max-src-conn-rate 3/1, overload <t> flush)");
  CHECK(first->rule(13).overload_flush == OverloadFlush::Rule);
  CHECK(first->rule(14).text == "pass in proto tcp all flags S/SA keep state (max-src-conn 3, overload <t>)");
  CHECK(first->rule(14).overload_flush == OverloadFlush::None);
  CHECK(first->rule(11).overload_table.empty());
  CHECK_FALSE(first->rule(8).no_sync);
  CHECK(first->rule(15).label == "web \"tls\" \\ 443");
  CHECK(
      first->rule(15).text ==
      "pass in proto tcp from any to any port 443 flags S/SA keep state label \"web \\\"tls\\\" \\\\ 443\"");
  CHECK(first->rule(16).text == "block in all label \"default\"");
  CHECK(first->rule(8).label.empty());
}

TEST_CASE("translation rules have a canonical text that parses back to the same rule", "[compile]") {
  const std::string text =
      "nat pass on { wan0, wan1 } inet proto { tcp, udp } from { 10.0.0.0/8, 172.16.0.0/12 } to ! 10.0.0.0/8 "
      "-> "
      "203.0.113.1 "
      "port 40000:49999\n"
      "no nat on wan0 from 10.9.0.0/16 to any\n"
      "rdr on wan0 proto tcp to 203.0.113.1 port 8000:8010 -> 10.1.0.10 port 80\n"
      "binat on wan0 from 10.1.0.5 to any -> 203.0.113.5\n"
      "no rdr on wan0 inet6 proto udp from 2001:db8::/32 to any port 53\n"
      "nat on wan0 ! tagged LAN tag OUT -> 203.0.113.2\n"
      "pass all\n";
  InterfaceRegistry ifs;
  auto first = compile_ok(text, ifs);
  const auto& listed = first->translation_rules();
  REQUIRE(listed.size() == 6);
  std::string again;
  for (std::size_t i = 0; i < listed.size(); ++i) {
    CHECK(listed[i].number == i);
    CHECK(listed[i].location.line == i + 1);
    again += listed[i].text + "\n";
  }
  auto second = compile_ok(again, ifs);
  REQUIRE(second->translation_rules().size() == listed.size());
  for (std::size_t i = 0; i < listed.size(); ++i)
    CHECK(second->translation_rules()[i].text == listed[i].text);
  CHECK(listed[0].text ==
        "nat pass on { wan0, wan1 } inet proto { tcp, udp } from { 10.0.0.0/8, 172.16.0.0/12 } to ! "
        "10.0.0.0/8 -> "
        "203.0.113.1 port "
        "40000:49999");
  CHECK(listed[1].text == "no nat on wan0 from 10.9.0.0/16 to any");
  CHECK(listed[5].text == "nat on wan0 all tag OUT ! tagged LAN -> 203.0.113.2");
  CHECK(listed[2].text ==
        "rdr on wan0 proto tcp from any to 203.0.113.1 port 8000:8010 -> 10.1.0.10 port 80");
  CHECK(listed[3].text == "binat on wan0 from 10.1.0.5 to any -> 203.0.113.5");
}

TEST_CASE("RuleSet decides with pf semantics on both passes", "[compile]") {
  InterfaceRegistry ifs;
  const IfaceId ext = ifs.intern("ext0");
  const IfaceId lan = ifs.intern("lan0");
  auto set = compile_ok(
      "table <blocked> { 198.51.100.0/24, 2001:db8:bad::/48 }\n"
      "block all\n"                                                 // 0
      "pass out all\n"                                              // 1
      "block in quick from <blocked>\n"                             // 2
      "pass in on ext0 proto tcp to 192.0.2.10 port { 80, 443 }\n"  // 3
      "pass in on lan0 all\n"                                       // 4
      "pass in inet6 proto icmp6 all icmp6-type 128\n",             // 5
      ifs);
  CHECK(set->evaluate(packet(ipproto::kTcp, "203.0.113.5", 5000, "192.0.2.10", 443), Direction::In, ext) ==
        3);
  CHECK(set->evaluate(packet(ipproto::kTcp, "203.0.113.5", 5000, "192.0.2.10", 22), Direction::In, ext) == 0);
  CHECK(set->evaluate(packet(ipproto::kTcp, "198.51.100.7", 5000, "192.0.2.10", 443), Direction::In, ext) ==
        2);
  CHECK(set->evaluate(packet(ipproto::kTcp, "198.51.100.7", 5000, "192.0.2.10", 443), Direction::Out, ext) ==
        1);
  CHECK(set->evaluate(packet(ipproto::kUdp, "10.0.0.1", 5000, "8.8.8.8", 53), Direction::In, lan) == 4);
  auto ping6 = packet(ipproto::kIcmp6, "2001:db8::1", 0, "2001:db8::2", 0);
  ping6.icmp.type = 128;
  CHECK(set->evaluate(ping6, Direction::In, ext) == 5);
  Family f;
  ping6.src = *parse_address("2001:db8:bad::1", &f);
  CHECK(set->evaluate(ping6, Direction::In, ext) == 2);

  RuleSet empty;
  CHECK(empty.evaluate(ping6, Direction::In, ext) == kNoRule);
  CHECK_FALSE(empty.scrub(ping6, Direction::In, ext).matched);
  CHECK(empty.translation(ping6, Direction::In, ext) == nullptr);
}

// How often each rule decides `query` in `rounds` evaluations, one at a time or in batches.
std::map<uint32_t, int> decisions(const RuleSet& set, const MatchQuery& query, DecisionContext& context,
                                  int rounds, bool batched) {
  std::map<uint32_t, int> decided;
  if (!batched) {
    for (int i = 0; i < rounds; ++i) ++decided[set.evaluate(query, &context)];
    return decided;
  }
  const std::vector<MatchQuery> batch(Classifier::kBatch, query);
  std::vector<uint32_t> out(batch.size());
  for (int i = 0; i < rounds / static_cast<int>(batch.size()); ++i) {
    set.evaluate_batch(batch, out, &context);
    for (const uint32_t r : out) ++decided[r];
  }
  return decided;
}

TEST_CASE("probability: a rule decides with its chance, drawn per packet, else the next rule does",
          "[compile][probability]") {
  InterfaceRegistry ifs;
  const IfaceId lan = ifs.intern("lan0");
  auto set = compile_ok(
      "block all\n"                                           // 0
      "pass in proto udp all no state probability 30%\n"      // 1: the last match, 3 times in 10
      "block in quick proto udp to port 53 probability 0%\n"  // 2: a quick rule that never matches
      "pass in quick proto udp to port 54 probability 1\n",   // 3: certain, so it draws nothing
      ifs);
  CHECK(set->rule(1).text == "pass in proto udp all no state probability 30%");
  CHECK(set->rule(2).text == "block in quick proto udp from any to any port 53 probability 0%");
  CHECK(set->rule(3).text == "pass in quick proto udp from any to any port 54 keep state");
  InterfaceRegistry others;
  CHECK(compile_ok("pass all probability 0.000000001", others)->rule(0).text ==
        "pass all keep state probability 0.0000001%");
  CHECK(compile_ok("pass all probability 12.5%", others)->rule(0).text ==
        "pass all keep state probability 12.5%");
  const PacketView dns = packet(ipproto::kUdp, "10.0.0.1", 5000, "10.0.0.2", 53);
  uint64_t draws = 0x9e3779b97f4a7c15ull;
  DecisionContext context{&draws};
  const MatchQuery query{&dns, Direction::In, lan};
  for (const bool batched : {false, true}) {
    INFO("batched " << batched);
    const auto decided = decisions(*set, query, context, 10'016, batched);
    CHECK(decided.size() == 2);
    CHECK(decided.count(2) == 0);
    // 30 % of 10,016: 3,005, with a standard deviation of 46.
    CHECK(decided.at(1) > 2'700);
    CHECK(decided.at(1) < 3'300);
    CHECK(decided.at(0) + decided.at(1) == 10'016);
  }
  // The in pass alone, as the engine asks it where an out translation rule tests tags.
  std::map<uint32_t, int> in_pass;
  for (int i = 0; i < 2'000; ++i) ++in_pass[set->evaluate_in(query, &context).deciding];
  CHECK(in_pass.size() == 2);
  CHECK(in_pass[1] > 500);  // 30 % of 2,000: 600, sd 20
  CHECK(in_pass[1] < 700);
  // Without draws (a benchmark's), a rule matches what it describes.
  CHECK(set->evaluate(query) == 2);
  // A certain rule draws nothing.
  const PacketView other = packet(ipproto::kUdp, "10.0.0.1", 5000, "10.0.0.2", 54);
  const MatchQuery certain{&other, Direction::In, lan};
  const uint64_t before = draws;
  CHECK(set->evaluate(certain, &context) == 3);
  CHECK(draws == before);
}

TEST_CASE("once: a rule decides one packet, then the next rule decides", "[compile][once]") {
  InterfaceRegistry ifs;
  const IfaceId lan = ifs.intern("lan0");
  auto set = compile_ok(
      "block all\n"                                         // 0
      "pass in quick proto udp to port 53 no state once\n"  // 1
      "pass in proto udp to port 54 once\n",                // 2
      ifs);
  CHECK(set->rule(1).text == "pass in quick proto udp from any to any port 53 no state once");
  const PacketView dns = packet(ipproto::kUdp, "10.0.0.1", 5000, "10.0.0.2", 53);
  const MatchQuery query{&dns, Direction::In, lan};
  // Without a context (a benchmark's), the rules are a description: nothing is spent.
  CHECK(set->evaluate(query) == 1);
  CHECK(set->evaluate(query) == 1);
  uint64_t draws = 1;
  DecisionContext context{&draws};
  CHECK(set->evaluate(query, &context) == 1);
  CHECK(set->rule(1).stats->spent.load());
  CHECK(set->evaluate(query, &context) == 0);
  CHECK(set->evaluate_in(query, &context).deciding == 0);
  // In a batch, one packet alone takes it.
  const PacketView other = packet(ipproto::kUdp, "10.0.0.1", 5000, "10.0.0.2", 54);
  const std::vector<MatchQuery> batch(Classifier::kBatch, MatchQuery{&other, Direction::In, lan});
  std::vector<uint32_t> out(batch.size());
  set->evaluate_batch(batch, out, &context);
  CHECK(std::count(out.begin(), out.end(), 2u) == 1);
  CHECK(std::count(out.begin(), out.end(), 0u) == static_cast<long>(batch.size()) - 1);
}

TEST_CASE("once: a packet its in pass blocks does not spend an out rule", "[compile][once]") {
  InterfaceRegistry ifs;
  const IfaceId lan = ifs.intern("lan0");
  const IfaceId ext = ifs.intern("ext0");
  const std::string rules =
      "block all\n"                             // 0
      "pass in on lan0 all\n"                   // 1
      "block in quick on lan0 from 10.0.0.9\n"  // 2
      "pass out on ext0 proto udp all once\n";  // 3
  const PacketView blocked = packet(ipproto::kUdp, "10.0.0.9", 5000, "192.0.2.2", 53);
  const PacketView passed = packet(ipproto::kUdp, "10.0.0.1", 5000, "192.0.2.2", 53);
  uint64_t draws = 1;
  DecisionContext context{&draws};
  for (const bool batched : {false, true}) {
    INFO("batched " << batched);
    auto fresh = compile_ok(rules, ifs);
    CHECK(fresh->rule(3).text == "pass out on ext0 proto udp all keep state once");
    const MatchQuery passes[2][2] = {{{&blocked, Direction::In, lan}, {&blocked, Direction::Out, ext}},
                                     {{&passed, Direction::In, lan}, {&passed, Direction::Out, ext}}};
    std::array<uint32_t, 2> first{};
    std::array<uint32_t, 2> second{};
    std::array<uint32_t, 2> third{};
    if (batched) {
      const std::vector<std::array<const MatchQuery*, 2>> packets = {
          {&passes[0][0], &passes[0][1]}, {&passes[1][0], &passes[1][1]}, {&passes[1][0], &passes[1][1]}};
      std::vector<std::array<uint32_t, 2>> decided(packets.size());
      fresh->evaluate_passes_batch(packets, decided, &context);
      first = decided[0];
      second = decided[1];
      third = decided[2];
    } else {
      first = fresh->evaluate_passes(&passes[0][0], &passes[0][1], RuleSet::kUndecided, &context);
      second = fresh->evaluate_passes(&passes[1][0], &passes[1][1], RuleSet::kUndecided, &context);
      third = fresh->evaluate_passes(&passes[1][0], &passes[1][1], RuleSet::kUndecided, &context);
    }
    CHECK(first == std::array<uint32_t, 2>{2, kNoRule});
    CHECK(second == std::array<uint32_t, 2>{1, 3});
    CHECK(third == std::array<uint32_t, 2>{1, 0});
  }
  // Without `once` or `max-pkt-rate`, both passes are matched whatever the in pass decided.
  auto plain = compile_ok("block all\nblock in quick on lan0 from 10.0.0.9\npass out on ext0 all\n", ifs);
  const MatchQuery in{&blocked, Direction::In, lan};
  const MatchQuery out{&blocked, Direction::Out, ext};
  CHECK(plain->evaluate_passes(&in, &out, RuleSet::kUndecided, &context) == std::array<uint32_t, 2>{1, 2});
}

TEST_CASE("max-pkt-rate: a rule stops deciding while its packets come faster than its rate",
          "[compile][max-pkt-rate]") {
  InterfaceRegistry ifs;
  const IfaceId lan = ifs.intern("lan0");
  auto set = compile_ok(
      "block all\n"                                        // 0
      "pass in quick proto icmp all max-pkt-rate 10/2\n",  // 1
      ifs);
  CHECK(set->rule(1).text == "pass in quick proto icmp all keep state max-pkt-rate 10/2");
  const PacketView ping = packet(ipproto::kIcmp, "10.0.0.1", 0, "10.0.0.2", 0);
  const MatchQuery query{&ping, Direction::In, lan};
  uint64_t draws = 1;
  DecisionContext context{&draws, Millis{5'000}};
  for (int i = 0; i < 10; ++i) CHECK(set->evaluate(query, &context) == 1);
  // The 11th within the period is over the rate; so is every one after it, each counted.
  CHECK(set->evaluate(query, &context) == 0);
  CHECK(set->evaluate(query, &context) == 0);
  // Half a period later (1,008 ms in 16 ms steps), about half of the 12 has decayed: 5.95 left,
  // and four more fit under 10.
  context.now = Millis{6'000};
  for (int i = 0; i < 4; ++i) CHECK(set->evaluate(query, &context) == 1);
  CHECK(set->evaluate(query, &context) == 0);
  // A whole period: the count starts over.
  context.now = Millis{8'000};
  std::vector<uint32_t> out(Classifier::kBatch);
  set->evaluate_batch(std::vector<MatchQuery>(Classifier::kBatch, query), out, &context);
  CHECK(std::count(out.begin(), out.end(), 1u) == 10);
  // Without a context nothing is counted.
  context.now = Millis{20'000};
  for (int i = 0; i < 50; ++i) CHECK(set->evaluate(query) == 1);
  CHECK(set->evaluate(query, &context) == 1);
}

TEST_CASE("packet_rate_over: pf's decaying threshold, one word the workers raise together",
          "[compile][max-pkt-rate]") {
  RuleStats stats;
  // 3 packets in 4 seconds.
  CHECK_FALSE(packet_rate_over(stats, 3, 4, Millis{100'000}));
  CHECK_FALSE(packet_rate_over(stats, 3, 4, Millis{100'000}));
  CHECK_FALSE(packet_rate_over(stats, 3, 4, Millis{100'000}));
  CHECK(packet_rate_over(stats, 3, 4, Millis{100'000}));  // 4
  CHECK((stats.packet_rate.load() >> 32) == 4 * kRateUnit);
  // A clock a little behind another worker's decays nothing, and keeps the later time.
  CHECK(packet_rate_over(stats, 3, 4, Millis{99'000}));  // 5
  CHECK((stats.packet_rate.load() >> 32) == 5 * kRateUnit);
  // A second later, a quarter of the count has decayed (16 ms steps: 992 ms of them).
  CHECK(packet_rate_over(stats, 3, 4, Millis{101'000}));
  const uint64_t decayed = 5 * kRateUnit - 5 * kRateUnit * 992 / 4'000;
  CHECK((stats.packet_rate.load() >> 32) == decayed + kRateUnit);
  CHECK_FALSE(packet_rate_over(stats, 3, 4, Millis{105'000}));
  // A time far from the first (a capture's clock, months in) decays as well.
  RuleStats late;
  const Millis start{1'700'000'000'000};
  CHECK_FALSE(packet_rate_over(late, 1, 1, start));
  CHECK(packet_rate_over(late, 1, 1, start));
  CHECK_FALSE(packet_rate_over(late, 1, 1, start + Millis{1'100}));
  // Two threads raising the same rule lose no packet between them.
  RuleStats shared;
  auto raise = [&] {
    for (int i = 0; i < 100'000; ++i) packet_rate_over(shared, 1'000'000, 60, Millis{1'000});
  };
  std::thread a(raise);
  std::thread b(raise);
  a.join();
  b.join();
  CHECK((shared.packet_rate.load() >> 32) == 200'000 * kRateUnit);
}

TEST_CASE("probability: in a rule set of segments and through both passes, as in one",
          "[compile][probability]") {
  InterfaceRegistry ifs;
  const IfaceId lan = ifs.intern("lan0");
  const IfaceId ext = ifs.intern("ext0");
  // A tagged after a tag of the same pass: two segments (the second from rule 2).
  auto set = compile_ok(
      "match in on lan0 tag LAN\n"                      // 0
      "block all\n"                                     // 1
      "pass in tagged LAN probability 25%\n"            // 2
      "pass out on ext0 tagged LAN probability 50%\n",  // 3
      ifs);
  const PacketView udp = packet(ipproto::kUdp, "10.0.0.1", 5000, "192.0.2.2", 53);
  uint64_t draws = 7;
  DecisionContext context{&draws};
  const MatchQuery in{&udp, Direction::In, lan};
  for (const bool batched : {false, true}) {
    INFO("batched " << batched);
    const auto decided = decisions(*set, in, context, 8'000, batched);
    CHECK(decided.size() == 2);
    CHECK(decided.at(2) > 1'800);  // 25 % of 8,000: 2,000, sd 39
    CHECK(decided.at(2) < 2'200);
  }
  // Both passes at once: the out pass's rule, tested against the tag the in pass left.
  const MatchQuery out{&udp, Direction::Out, ext};
  const std::array<const MatchQuery*, 2> packet_passes = {&in, &out};
  std::vector<std::array<const MatchQuery*, 2>> packets(Classifier::kBatch / 2, packet_passes);
  std::vector<std::array<uint32_t, 2>> decided(packets.size());
  std::map<uint32_t, int> out_decided;
  for (int round = 0; round < 500; ++round) {
    set->evaluate_passes_batch(packets, decided, &context);
    for (const auto& d : decided) ++out_decided[d[1]];
  }
  CHECK(out_decided.size() == 2);
  CHECK(out_decided.at(3) > 3'600);  // 50 % of 8,000: 4,000, sd 45
  CHECK(out_decided.at(3) < 4'400);

  // A tag of the in pass tested in the out pass: one segment, its passes matched in turn.
  auto one = compile_ok(
      "block all\n"                                     // 0
      "pass in on lan0 tag LAN\n"                       // 1
      "pass out on ext0 tagged LAN probability 50%\n",  // 2
      ifs);
  std::map<uint32_t, int> in_decided;
  out_decided.clear();
  for (int round = 0; round < 500; ++round) {
    one->evaluate_passes_batch(packets, decided, &context);
    for (const auto& d : decided) {
      ++in_decided[d[0]];
      ++out_decided[d[1]];
    }
  }
  CHECK(in_decided.size() == 1);
  CHECK(out_decided.size() == 2);
  CHECK(out_decided.at(2) > 3'600);
  CHECK(out_decided.at(2) < 4'400);
}

TEST_CASE("scrub rules match the protocols they name, as filter rules do", "[compile][scrub]") {
  InterfaceRegistry ifs;
  const IfaceId ext = ifs.intern("ext0");
  auto set = compile_ok(
      "scrub in on ext0 proto tcp all max-mss 1440\n"
      "scrub in on ext0 proto { udp, icmp } all min-ttl 4\n",
      ifs);
  const ScrubAction tcp =
      set->scrub(packet(ipproto::kTcp, "198.51.100.1", 40000, "192.0.2.10", 80), Direction::In, ext);
  CHECK(tcp.matched);
  CHECK(tcp.max_mss == 1440);
  CHECK(tcp.min_ttl == 0);
  const ScrubAction udp =
      set->scrub(packet(ipproto::kUdp, "198.51.100.1", 40000, "192.0.2.10", 53), Direction::In, ext);
  CHECK(udp.matched);
  CHECK(udp.max_mss == 0);
  CHECK(udp.min_ttl == 4);
  constexpr uint8_t kGre = 47;
  CHECK_FALSE(set->scrub(packet(kGre, "198.51.100.1", 0, "192.0.2.10", 0), Direction::In, ext).matched);

  InterfaceRegistry tcp_ifs;
  auto tcp_only = compile_ok("scrub in proto tcp all max-mss 1440\n", tcp_ifs);
  CHECK(tcp_only
            ->scrub(packet(ipproto::kTcp, "198.51.100.1", 40000, "192.0.2.10", 80), Direction::In,
                    tcp_ifs.intern("ext0"))
            .matched);
  CHECK_FALSE(tcp_only
                  ->scrub(packet(ipproto::kUdp, "198.51.100.1", 40000, "192.0.2.10", 53), Direction::In,
                          tcp_ifs.intern("ext0"))
                  .matched);
}

TEST_CASE("scrub is first match; nat on out, rdr on in, binat on both and before nat", "[compile]") {
  InterfaceRegistry ifs;
  const IfaceId ext = ifs.intern("ext0");
  const IfaceId lan = ifs.intern("lan0");
  auto set = compile_ok(
      "scrub in on ext0 all max-mss 1400 min-ttl 3\n"
      "scrub all fragment reassemble\n"
      "no nat on ext0 from 10.9.0.0/16 to any\n"
      "nat on ext0 from 10.0.0.0/8 to any -> 203.0.113.1\n"
      "rdr on ext0 proto tcp to 203.0.113.1 port 80 -> 10.2.0.10 port 8080\n"
      "binat on ext0 from 10.3.0.5 to any -> 203.0.113.5\n",
      ifs);
  const auto tcp = packet(ipproto::kTcp, "10.1.1.1", 40000, "198.51.100.1", 80);
  const ScrubAction in_ext = set->scrub(tcp, Direction::In, ext);
  CHECK(in_ext.matched);
  CHECK(in_ext.max_mss == 1400);
  CHECK(in_ext.min_ttl == 3);
  CHECK_FALSE(in_ext.fragment_reassemble);
  const ScrubAction out_ext = set->scrub(tcp, Direction::Out, ext);
  CHECK(out_ext.matched);
  CHECK(out_ext.fragment_reassemble);
  CHECK(out_ext.max_mss == 0);

  const CompiledTranslation* nat = set->translation(tcp, Direction::Out, ext);
  REQUIRE(nat != nullptr);
  CHECK(nat->kind == TranslationRule::Kind::Nat);
  CHECK(nat->number == 1);
  CHECK(to_string(nat->targets.at(0)) == "203.0.113.1/32");
  CHECK(set->translation(tcp, Direction::In, ext) == nullptr);   // nat: out pass only
  CHECK(set->translation(tcp, Direction::Out, lan) == nullptr);  // on its interface only
  const auto exempt = packet(ipproto::kTcp, "10.9.1.1", 40000, "198.51.100.1", 80);
  REQUIRE(set->translation(exempt, Direction::Out, ext) != nullptr);
  CHECK(set->translation(exempt, Direction::Out, ext)->negated);

  const auto web = packet(ipproto::kTcp, "198.51.100.1", 40000, "203.0.113.1", 80);
  const CompiledTranslation* rdr = set->translation(web, Direction::In, ext);
  REQUIRE(rdr != nullptr);
  CHECK(rdr->kind == TranslationRule::Kind::Rdr);
  CHECK(rdr->port_low == 8080);
  CHECK(rdr->port_high == 8080);
  CHECK(set->translation(web, Direction::Out, ext) == nullptr);  // rdr: in pass only

  const auto from_host = packet(ipproto::kUdp, "10.3.0.5", 5000, "198.51.100.1", 53);
  const CompiledTranslation* out = set->translation(from_host, Direction::Out, ext);
  REQUIRE(out != nullptr);
  // nat's 10/8 comes first in the file, yet binat is asked first on the out pass, as pf asks it.
  CHECK(out->kind == TranslationRule::Kind::Binat);
  CHECK(out->number == 3);
  const auto to_external = packet(ipproto::kUdp, "198.51.100.1", 53, "203.0.113.5", 5000);
  const CompiledTranslation* in = set->translation(to_external, Direction::In, ext);
  REQUIRE(in != nullptr);
  CHECK(in->kind == TranslationRule::Kind::Binat);
  CHECK(in->number == 3);
  CHECK(to_string(in->source) == "10.3.0.5/32");
  CHECK(to_string(in->targets.at(0)) == "203.0.113.5/32");
}

TEST_CASE("no binat leaves the out pass to nat, no rdr the in pass to binat, as pf asks them", "[compile]") {
  InterfaceRegistry ifs;
  const IfaceId ext = ifs.intern("ext0");
  auto set = compile_ok(
      "no binat on ext0 from 10.3.0.5 to 192.0.2.0/24\n"
      "binat on ext0 from 10.3.0.5 to any -> 203.0.113.5\n"
      "nat on ext0 from 10.3.0.0/16 to any -> 203.0.113.1\n"
      "no rdr on ext0 proto tcp from 198.51.100.7 to 203.0.113.5 port 22\n"
      "rdr on ext0 proto tcp to 203.0.113.5 port 22 -> 10.3.0.9\n",
      ifs);
  const auto decided = [&](const PacketView& p, Direction d) -> std::string {
    const CompiledTranslation* t = set->translation(p, d, ext);
    return t == nullptr ? "none" : (t->negated ? "no " : "") + std::to_string(t->number);
  };
  // Exempt from binat, the host's traffic to 192.0.2.0/24 still meets the nat rules.
  CHECK(decided(packet(ipproto::kTcp, "10.3.0.5", 1000, "192.0.2.1", 80), Direction::Out) == "2");
  CHECK(decided(packet(ipproto::kTcp, "10.3.0.5", 1000, "198.51.100.1", 80), Direction::Out) == "1");
  CHECK(decided(packet(ipproto::kTcp, "10.3.0.6", 1000, "192.0.2.1", 80), Direction::Out) == "2");
  // Exempt from rdr, a connection to the binat address is mapped back by binat.
  CHECK(decided(packet(ipproto::kTcp, "198.51.100.7", 1000, "203.0.113.5", 22), Direction::In) == "1");
  CHECK(decided(packet(ipproto::kTcp, "198.51.100.8", 1000, "203.0.113.5", 22), Direction::In) == "4");
  // An exemption the second ruleset also holds stays one.
  CHECK(decided(packet(ipproto::kTcp, "192.0.2.1", 80, "203.0.113.5", 1000), Direction::In) == "no 0");
}

TEST_CASE("translation pools: the type each gets, the key source-hash derives, the listing",
          "[compile][nat]") {
  InterfaceRegistry ifs;
  const IfaceId ext = ifs.intern("ext0");
  auto set = compile_ok(
      "nat on ext0 proto tcp from 10.1.0.0/16 -> { 192.0.2.1, 192.0.2.8/30 }\n"
      "nat on ext0 proto tcp from 10.2.0.0/16 -> 192.0.2.16/28\n"
      "nat on ext0 proto tcp from 10.3.0.0/16 -> 192.0.2.16/28 source-hash static-port\n"
      "nat on ext0 proto tcp from 10.4.0.0/16 -> 192.0.2.16/28 source-hash "
      "0x000102030405060708090a0b0c0d0e0f\n"
      "nat on ext0 proto tcp from 10.5.0.0/16 -> 192.0.2.16/28 source-hash key \"pool\"\n"
      "nat on ext0 proto tcp from 10.6.0.0/16 -> 192.0.2.16/28 source-hash key \"pool2\"\n"
      "nat on ext0 proto tcp from 10.7.0.0/16 -> 192.0.2.16/28 source-hash key \"pool\"\n",
      ifs);
  auto rule = [&](int n) {
    const auto p = packet(ipproto::kTcp, "10." + std::to_string(n) + ".0.1", 4000, "198.51.100.1", 80);
    const CompiledTranslation* t = set->translation(p, Direction::Out, ext);
    REQUIRE(t != nullptr);
    return t;
  };
  CHECK(rule(1)->pool == PoolType::RoundRobin);  // a list
  CHECK(rule(1)->targets.size() == 2);
  CHECK(rule(2)->pool == PoolType::Bitmask);  // one prefix
  CHECK_FALSE(rule(2)->static_port);
  CHECK(rule(3)->pool == PoolType::SourceHash);
  CHECK(rule(3)->static_port);
  CHECK(rule(4)->hash_key.k0 == 0x0001020304050607ULL);  // the written key, read as two big-endian words
  CHECK(rule(4)->hash_key.k1 == 0x08090a0b0c0d0e0fULL);
  // A key from text: the same text the same key (on either node), another text another.
  CHECK(rule(5)->hash_key.k0 == rule(7)->hash_key.k0);
  CHECK(rule(5)->hash_key.k1 == rule(7)->hash_key.k1);
  CHECK(rule(5)->hash_key.k0 != rule(6)->hash_key.k0);
  CHECK(rule(3)->hash_key.k0 != rule(5)->hash_key.k0);  // the built-in key is neither
  const auto& listing = set->translation_rules();
  REQUIRE(listing.size() == 7);
  CHECK(listing[0].text == "nat on ext0 proto tcp from 10.1.0.0/16 to any -> { 192.0.2.1, 192.0.2.8/30 }");
  CHECK(listing[2].text ==
        "nat on ext0 proto tcp from 10.3.0.0/16 to any -> 192.0.2.16/28 source-hash static-port");
  CHECK(listing[3].text ==
        "nat on ext0 proto tcp from 10.4.0.0/16 to any -> 192.0.2.16/28 source-hash "
        "0x000102030405060708090a0b0c0d0e0f");
  CHECK(listing[4].text ==
        "nat on ext0 proto tcp from 10.5.0.0/16 to any -> 192.0.2.16/28 source-hash key \"pool\"");
}

TEST_CASE("binat maps the internal prefix outbound when no nat comes first", "[compile]") {
  InterfaceRegistry ifs;
  const IfaceId ext = ifs.intern("ext0");
  auto set = compile_ok("binat on ext0 from 10.3.0.0/24 to any -> 203.0.113.0/24\n", ifs);
  const auto out = packet(ipproto::kTcp, "10.3.0.9", 1000, "198.51.100.1", 80);
  REQUIRE(set->translation(out, Direction::Out, ext) != nullptr);
  CHECK(set->translation(out, Direction::In, ext) == nullptr);
  const auto in = packet(ipproto::kTcp, "198.51.100.1", 80, "203.0.113.9", 1000);
  REQUIRE(set->translation(in, Direction::In, ext) != nullptr);
  CHECK(set->translation(in, Direction::Out, ext) == nullptr);
}

TEST_CASE("a table of 50,000 entries compiles and decides by its longest entries", "[compile]") {
  RuleFile f;
  f.file = "big.conf";
  Table t;
  t.name = "big";
  for (uint32_t i = 0; i < 50'000; ++i) {
    // /24s spread over 10.0.0.0/8 and a few hundred /48s in IPv6, with holes punched in some.
    IpPrefix p;
    if (i % 100 == 99) {
      p.family = Family::V6;
      p.address = IpAddress{0x20010db800000000ull | uint64_t{i} << 16, 0};
      p.length = 48;
    } else {
      p.address = IpAddress::v4(0x0a000000u + (i << 8));
      p.length = 24;
    }
    t.entries.push_back(p);
    if (i % 10 == 0 && p.family == Family::V4) {
      p.address = IpAddress::v4(p.address.v4_value() + 128);
      p.length = 25;
      t.negated_entries.push_back(p);
    }
  }
  f.tables.push_back(t);
  FilterRule r;
  r.action = Action::Block;
  r.quick = true;
  AddressElement e;
  e.kind = AddressElement::Kind::Table;
  e.table = "big";
  r.from.addresses.push_back(e);
  f.filter_rules.push_back(FilterRule{});  // block all
  f.filter_rules.push_back(r);
  InterfaceRegistry ifs;
  auto set = compile_ok(f, ifs);
  auto from = [](uint32_t v4) {
    PacketView p;
    p.src = IpAddress::v4(v4);
    return p;
  };
  CHECK(set->evaluate(from(0x0a000001), Direction::In, 1) == 1);
  CHECK(set->evaluate(from(0x0a000081), Direction::In, 1) == 0);  // the negated upper half of 10.0.0.0/24
  CHECK(set->evaluate(from(0x0a000181), Direction::In, 1) == 1);  // 10.0.1.0/24 has no hole
  CHECK(set->evaluate(from(0x0ac34e05), Direction::In, 1) == 1);  // 10.195.78.0/24, the last IPv4 entry
  CHECK(set->evaluate(from(0x0b000000), Direction::In, 1) == 0);
  PacketView v6;
  v6.family = Family::V6;
  v6.src = IpAddress{0x20010db800000000ull | 99ull << 16 | 7, 42};
  CHECK(set->evaluate(v6, Direction::In, 1) == 1);
  v6.src.hi = 0x20010db800000000ull | 98ull << 16;
  CHECK(set->evaluate(v6, Direction::In, 1) == 0);
}

TEST_CASE("load_rules_file parses and compiles, or says why not", "[compile]") {
  char path[] = "/tmp/pairwall-compile-test-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  {
    std::ofstream out(path);
    out << "block all\npass in proto tcp to port 22\n";
  }
  InterfaceRegistry ifs;
  auto ok = load_rules_file(path, ifs);
  REQUIRE(std::holds_alternative<std::shared_ptr<const RuleSet>>(ok));
  CHECK(std::get<std::shared_ptr<const RuleSet>>(ok)->size() == 2);
  {
    std::ofstream out(path);
    out << "block all\npass in proto udp all flags S/SA\n";
  }
  auto bad = load_rules_file(path, ifs);
  REQUIRE(std::holds_alternative<RuleError>(bad));
  CHECK(std::get<RuleError>(bad).to_string() ==
        std::string(path) + ":2:1: 'flags' applies to TCP only: add 'proto tcp'");
  std::remove(path);
  auto missing = load_rules_file(path, ifs);
  REQUIRE(std::holds_alternative<RuleError>(missing));
  CHECK(std::get<RuleError>(missing).location.line == 0);
}

TEST_CASE("the rule set digest: equal for the same rules, not for others, blind to table entries",
          "[compile][digest]") {
  const std::string base =
      "table <t> persist { 192.0.2.1 }\n"
      "set timeout tcp.established 3600\n"
      "scrub in all max-mss 1400\n"
      "nat on ext0 proto tcp from 10.0.0.0/8 -> 203.0.113.1 port 50001:57999\n"
      "rdr on ext0 proto tcp to 203.0.113.1 port 80 -> 10.0.0.80\n"
      "block all\n"
      "pass in on lan0 proto tcp from 10.0.0.0/8 to ! <t> port 443\n";
  const auto digest = [](const std::string& text) {
    InterfaceRegistry ifs;
    return compile_ok(text, ifs)->digest();
  };
  const uint64_t d = digest(base);
  CHECK(d != 0);
  CHECK(digest(base) == d);  // another compile, another registry: the same digest

  // What a table holds changes at run time and may differ between nodes; nat's port range is
  // split between the nodes of an active/active pair.
  std::string entries = base;
  entries.replace(entries.find("192.0.2.1"), 9, "192.0.2.7, 198.51.100.0/24");
  CHECK(digest(entries) == d);
  std::string ports = base;
  ports.replace(ports.find("50001:57999"), 11, "58000:65535");
  CHECK(digest(ports) == d);

  // Whatever decides a packet differently does not digest alike.
  const std::pair<const char*, const char*> changes[] = {
      {"port 443", "port 444"},
      {"tcp.established 3600", "tcp.established 3601"},
      {"max-mss 1400", "max-mss 1300"},
      {"scrub in all", "scrub in proto tcp all"},
      {"-> 10.0.0.80", "-> 10.0.0.81"},
      {"-> 10.0.0.80", "tag WEB -> 10.0.0.80"},
      {"block all\n", "block all\nset skip on lo0\n"},
      {"table <t> persist", "set limit states 5000\ntable <t> persist"},
      {"table <t> persist", "set block-policy return\ntable <t> persist"},
      {"table <t> persist", "set fail-policy return\ntable <t> persist"},
      {"set timeout tcp.established 3600", "set timeout { tcp.established 3600, src.track 30 }"},
      {"port 443\n", "port 443 keep state (max-src-conn-rate 5/10, src.track 30)\n"},
      {"port 443\n", "port 443 probability 50%\n"},
      {"table <t> persist", "set state-policy if-bound\ntable <t> persist"},
      {"port 443\n", "port 443 keep state (if-bound)\n"},
  };
  for (const auto& [from, to] : changes) {
    INFO(from << " -> " << to);
    std::string changed = base;
    changed.replace(changed.find(from), std::string_view(from).size(), to);
    CHECK(digest(changed) != d);
  }
}

TEST_CASE(
    "set state-policy if-bound: the pass rules that keep state and say neither are bound, as their text says",
    "[compile]") {
  InterfaceRegistry ifs;
  auto set = compile_ok(
      "set state-policy if-bound\n"
      "pass in all\n"
      "pass in all keep state (floating)\n"
      "pass in all no state\n"
      "block in all\n"
      "pass out all keep state (max 3, if-bound)\n",
      ifs);
  REQUIRE(set->size() == 5);
  CHECK(set->rule(0).text == "pass in all keep state (if-bound)");
  CHECK(set->rule(0).if_bound);
  CHECK(set->rule(1).text == "pass in all keep state (floating)");
  CHECK_FALSE(set->rule(1).if_bound);
  CHECK_FALSE(set->rule(2).if_bound);
  CHECK(set->rule(2).text == "pass in all no state");
  CHECK_FALSE(set->rule(3).if_bound);
  CHECK(set->rule(4).if_bound);
  CHECK(set->rule(4).text == "pass out all keep state (max 3, if-bound)");
  // Floating, pf's default, as written.
  auto floating = compile_ok("pass in all\npass in all keep state (if-bound)\n", ifs);
  CHECK_FALSE(floating->rule(0).if_bound);
  CHECK(floating->rule(0).text == "pass in all keep state");
  CHECK(floating->rule(1).if_bound);
}

TEST_CASE("set state-defaults: the state options of pass rules that write no state of their own",
          "[compile]") {
  InterfaceRegistry ifs;
  auto set = compile_ok(
      "set state-defaults no-sync, max 5, udp.first 10, pflow\n"
      "pass in all\n"
      "pass in all keep state\n"
      "pass in all no state\n"
      "block in all\n",
      ifs);
  REQUIRE(set->size() == 4);
  CHECK(set->rule(0).text == "pass in all keep state (max 5, no-sync, pflow, udp.first 10)");
  CHECK(set->rule(0).no_sync);
  CHECK(set->rule(0).pflow);
  CHECK_FALSE(set->rule(1).pflow);
  CHECK(set->rule(0).max_states == 5);
  CHECK(set->rule(0).timeout(TimeoutClass::UdpFirst, set->timeouts()) == std::chrono::seconds(10));
  CHECK(set->rule(1).text == "pass in all keep state");
  CHECK_FALSE(set->rule(1).no_sync);
  CHECK(set->rule(2).text == "pass in all no state");
  CHECK_FALSE(set->rule(2).keep_state);
  CHECK(set->rule(3).text == "block in all");

  for (const auto& [text, error] : std::vector<std::pair<std::string, std::string>>{
           {"set state-defaults\n",
            "t.conf:1:19: empty state options: expected 'max N', 'no-sync' or a timeout such as "
            "'tcp.established N'"},
           {"set state-defaults no-sync\nset state-defaults max 3\n",
            "t.conf:2:5: 'set state-defaults' is already given at t.conf:1"},
           {"set state-defaults no-sync, no-sync\n",
            "t.conf:1:29: duplicate state option 'no-sync': already given at line 1, column 20"},
           {"set state-defaults overload <nope>, max-src-conn 3\npass in all\n",
            "t.conf:1:29: table <nope> is not defined; define it before use with 'table <nope> persist'"},
       }) {
    INFO(text);
    auto parsed = parse_rules(text, "t.conf");
    if (auto* e = std::get_if<RuleError>(&parsed)) {
      CHECK(e->to_string() == error);
      continue;
    }
    auto compiled = compile(std::get<RuleFile>(parsed), ifs);
    REQUIRE(std::holds_alternative<RuleError>(compiled));
    CHECK(std::get<RuleError>(compiled).to_string() == error);
  }
}

TEST_CASE("a tagged after a tag of the same pass sees the tag pf's file order gives it there",
          "[compile][tag]") {
  struct Row {
    std::string text;
    uint8_t proto;
    uint16_t port;
    uint32_t deciding;
    std::string tag;  // the tag the packet leaves the pass with, "" none
  };
  const std::string kServices =
      "match in proto tcp to port 80 tag WEB\n"
      "match in proto tcp to port 25 tag MAIL\n"
      "block all\n"
      "pass in tagged WEB\n"
      "pass in tagged MAIL\n";
  // The quick anchor decides in its second segment, which the segment after it must not undo.
  const std::string kQuickAnchor =
      "anchor \"a\" quick {\n"
      " match in tag A\n"
      " pass in proto tcp tagged A\n"
      "}\n"
      "match in tag B\n"
      "block in tagged B\n";
  const std::vector<Row> rows = {
      {"pass in on lan0 tag A\nblock in on lan0 tagged A\n", ipproto::kTcp, 80, 1, "A"},
      {"match in tag A\npass in quick ! tagged A\nblock all\n", ipproto::kTcp, 80, 2, "A"},
      {"pass in on ! wan0 tag A\npass in on lan0 tag B tagged A\nblock in tagged A\n", ipproto::kTcp, 80, 1,
       "B"},
      {kServices, ipproto::kTcp, 80, 3, "WEB"},
      {kServices, ipproto::kTcp, 25, 4, "MAIL"},
      {kServices, ipproto::kTcp, 22, 2, ""},
      {kServices, ipproto::kUdp, 80, 2, ""},
      {kQuickAnchor, ipproto::kTcp, 80, 1, "A"},
      {kQuickAnchor, ipproto::kUdp, 80, 3, "B"},
  };
  for (const Row& row : rows) {
    INFO(row.text << "proto " << int{row.proto} << " port " << row.port);
    InterfaceRegistry ifs;
    const auto set = compile_ok(row.text, ifs);
    const PacketView p = packet(row.proto, "10.0.0.1", 40000, "192.0.2.1", row.port);
    const MatchQuery in{&p, Direction::In, ifs.intern("lan0"), 0};
    const RuleSet::InPass passed = set->evaluate_in(in);
    CHECK(passed.deciding == row.deciding);
    CHECK(set->evaluate(p, Direction::In, in.iface) == row.deciding);
    uint16_t tag = 0;
    for (std::size_t i = 0; i < set->size(); ++i) {
      if (set->rule(i).text.ends_with(" tag " + row.tag)) tag = set->rule(i).tag;
    }
    CHECK(passed.tag == tag);
  }
}

TEST_CASE("tag stretches: at most 64 a rule set", "[compile][tag]") {
  std::string text;
  for (int i = 0; i < 63; ++i) text += "match in tag A\npass in tagged A\n";
  InterfaceRegistry ifs;
  CHECK(compile_ok(text, ifs)->size() == 126);
  text += "match in tag A\npass in tagged A\n";
  auto refused = compile(parse(text), ifs);
  REQUIRE(std::holds_alternative<RuleError>(refused));
  CHECK(std::get<RuleError>(refused).to_string().starts_with(
      "t.conf:128:16: a 'tagged' after a 'tag' of the same pass begins a new stretch of rules"));
  // Rules of passes apart stay in one.
  text.clear();
  for (int i = 0; i < 100; ++i) text += "match in on lan0 tag A\npass in on wan0 tagged A\n";
  CHECK(compile_ok(text, ifs)->size() == 200);
}

// pf's evaluation of one pass, rule by rule in file order, for the random rule sets below.
struct TagRule {
  std::string action = "pass";  // pass, block, match
  bool quick = false;
  std::string direction;  // "", in, out
  std::string iface;      // "", lan0, wan0
  std::string proto;      // "", tcp, udp
  uint16_t port = 0;
  std::string tag;
  std::string tagged;
  bool tagged_negated = false;
  int anchor = -1;  // the quick anchor holding it (-1 none); an anchor's rules stand together
  bool anchor_quick = false;

  std::string text() const {
    std::string t = action;
    if (!direction.empty()) t += " " + direction;
    if (quick) t += " quick";
    if (!iface.empty()) t += " on " + iface;
    if (!proto.empty()) t += " proto " + proto;
    if (port != 0) t += " to port " + std::to_string(port);
    if (direction.empty() && iface.empty() && proto.empty()) t += " all";
    if (!tagged.empty()) t += std::string(tagged_negated ? " ! tagged " : " tagged ") + tagged;
    if (!tag.empty()) t += " tag " + tag;
    return t;
  }

  bool matches(const std::string& dir, const std::string& on, const std::string& pr, uint16_t dport,
               const std::string& carried) const {
    if (!direction.empty() && direction != dir) return false;
    if (!iface.empty() && iface != on) return false;
    if (!proto.empty() && proto != pr) return false;
    if (port != 0 && port != dport) return false;
    if (!tagged.empty() && (carried == tagged) == tagged_negated) return false;
    return true;
  }
};

struct Evaluated {
  uint32_t deciding = kNoRule;
  std::string tag;
};

Evaluated evaluate_in_file_order(const std::vector<TagRule>& rules, const std::string& dir,
                                 const std::string& on, const std::string& pr, uint16_t dport,
                                 std::string tag) {
  Evaluated out{kNoRule, std::move(tag)};
  std::size_t stop = rules.size();  // past the end of a quick anchor that decided
  for (std::size_t i = 0; i < std::min(stop, rules.size()); ++i) {
    const TagRule& r = rules[i];
    if (!r.matches(dir, on, pr, dport, out.tag)) continue;
    if (!r.tag.empty()) out.tag = r.tag;
    if (r.action == "match") continue;
    out.deciding = static_cast<uint32_t>(i);
    if (r.quick) break;
    if (r.anchor >= 0 && r.anchor_quick) {
      std::size_t end = i;
      while (end + 1 < rules.size() && rules[end + 1].anchor == r.anchor) ++end;
      stop = std::min(stop, end + 1);
    }
  }
  return out;
}

TEST_CASE("random rule sets with tag, tagged and match decide as pf's evaluation in file order",
          "[compile][tag][random]") {
  std::mt19937 random(20261204);
  const auto pick = [&](std::initializer_list<const char*> list) {
    return std::string(list.begin()[std::uniform_int_distribution<std::size_t>(0, list.size() - 1)(random)]);
  };
  const auto chance = [&](int percent) {
    return std::uniform_int_distribution<int>(0, 99)(random) < percent;
  };
  int segmented = 0;
  for (int round = 0; round < 400; ++round) {
    std::vector<TagRule> rules(std::uniform_int_distribution<std::size_t>(1, 14)(random));
    int anchors = 0;
    for (std::size_t i = 0; i < rules.size(); ++i) {
      TagRule& r = rules[i];
      r.action = pick({"pass", "block", "match", "match"});
      r.direction = pick({"", "in", "in", "out"});
      r.iface = pick({"", "", "lan0", "wan0"});
      r.proto = pick({"", "tcp", "udp"});
      if (!r.proto.empty() && chance(40)) r.port = chance(50) ? 80 : 25;
      r.tag = pick({"", "A", "B", "C"});
      if (r.action == "match" && r.tag.empty()) r.tag = "A";
      r.quick = r.action != "match" && chance(20);
      if (chance(45)) {
        r.tagged = pick({"A", "B"});
        r.tagged_negated = chance(30);
      }
    }
    // A stretch of rules in an anchor, quick or not.
    if (rules.size() >= 3 && chance(40)) {
      const std::size_t first = std::uniform_int_distribution<std::size_t>(0, rules.size() - 2)(random);
      const std::size_t last = std::uniform_int_distribution<std::size_t>(first, rules.size() - 1)(random);
      const bool quick = chance(70);
      for (std::size_t i = first; i <= last; ++i) {
        rules[i].anchor = anchors;
        rules[i].anchor_quick = quick;
      }
      ++anchors;
    }
    std::string text;
    for (std::size_t i = 0; i < rules.size(); ++i) {
      if (rules[i].anchor >= 0 && (i == 0 || rules[i - 1].anchor != rules[i].anchor))
        text += "anchor \"a" + std::to_string(rules[i].anchor) + "\"" +
                (rules[i].anchor_quick ? " quick" : "") + " {\n";
      text += rules[i].text() + "\n";
      if (rules[i].anchor >= 0 && (i + 1 == rules.size() || rules[i + 1].anchor != rules[i].anchor))
        text += "}\n";
    }
    INFO(text);
    InterfaceRegistry ifs;
    const auto set = compile_ok(text, ifs);
    REQUIRE(set->size() == rules.size());
    // Tags by name: the numbers the compiled rules carry (0 for a name no rule tests).
    std::map<std::string, uint16_t> numbers = {{"", 0}};
    for (std::size_t i = 0; i < rules.size(); ++i)
      numbers[rules[i].tag] = rules[i].tag.empty() ? 0 : set->rule(i).tag;
    bool follows = false;  // whether some `tagged` follows a tag of its pass (a set of segments)
    for (std::size_t i = 0; i < rules.size(); ++i) {
      for (std::size_t t = 0; t < i && !rules[i].tagged.empty(); ++t)
        follows = follows || !rules[t].tag.empty();
    }
    segmented += follows;

    const IfaceId lan0 = ifs.intern("lan0");
    const IfaceId wan0 = ifs.intern("wan0");
    std::vector<PacketView> packets;
    std::vector<std::string> carried;
    for (const char* proto : {"tcp", "udp"}) {
      for (const uint16_t port : {80, 25, 22}) {
        for (const char* tag : {"", "A", "B"}) {
          if (numbers.count(tag) == 0) continue;  // a name no rule sets has no number to start with
          packets.push_back(packet(std::string(proto) == "tcp" ? ipproto::kTcp : ipproto::kUdp, "10.0.0.1",
                                   40000, "192.0.2.1", port));
          carried.emplace_back(tag);
        }
      }
    }
    std::vector<MatchQuery> ins;
    std::vector<MatchQuery> outs;
    for (std::size_t k = 0; k < packets.size(); ++k) {
      ins.push_back({&packets[k], Direction::In, lan0, numbers[carried[k]]});
      outs.push_back({&packets[k], Direction::Out, wan0, 0});
    }
    std::vector<std::array<const MatchQuery*, 2>> forwarded;
    for (std::size_t k = 0; k < packets.size(); ++k) forwarded.push_back({&ins[k], &outs[k]});
    std::vector<std::array<uint32_t, 2>> batched(packets.size());
    set->evaluate_passes_batch(forwarded, batched);
    std::vector<uint32_t> in_batch(packets.size());
    set->evaluate_batch(ins, in_batch);

    for (std::size_t k = 0; k < packets.size(); ++k) {
      const std::string proto = packets[k].proto == ipproto::kTcp ? "tcp" : "udp";
      INFO(proto << " port " << packets[k].dst_port << " carrying '" << carried[k] << "'");
      const Evaluated in =
          evaluate_in_file_order(rules, "in", "lan0", proto, packets[k].dst_port, carried[k]);
      const Evaluated out = evaluate_in_file_order(rules, "out", "wan0", proto, packets[k].dst_port, in.tag);
      const RuleSet::InPass passed = set->evaluate_in(ins[k]);
      CHECK(passed.deciding == in.deciding);
      CHECK(passed.tag == numbers[in.tag]);
      CHECK(in_batch[k] == in.deciding);
      const std::array<uint32_t, 2> passes = set->evaluate_passes(&ins[k], &outs[k]);
      CHECK(passes[0] == in.deciding);
      CHECK(passes[1] == out.deciding);
      CHECK(batched[k] == passes);
    }
  }
  CHECK(segmented > 100);  // the random sets exercise segments, not only sets of one
}

TEST_CASE("tag_notices: a tagged that no rule tags is said, where it stands", "[compile][tag]") {
  const RuleFile file = parse(
      "rdr on wan0 proto tcp to port 80 tag WEB -> 10.2.0.10\n"
      "nat on wan0 tagged LAN -> 203.0.113.1\n"
      "pass in on lan0 tag LAN\n"
      "pass out on wan0 tagged WEB\n"
      "pass out on wan0 ! tagged MAIL\n"
      "block out on wan0 tagged LAM\n");
  std::vector<RuleError> notices;
  tag_notices(file, notices);
  REQUIRE(notices.size() == 2);
  CHECK(notices[0].to_string() ==
        "t.conf:5:27: warning: no rule tags 'MAIL': '! tagged MAIL' matches every packet");
  CHECK(notices[1].to_string() == "t.conf:6:26: warning: no rule tags 'LAM': 'tagged LAM' never matches");
}

TEST_CASE("tagged tests at most 64 distinct tags in a rule set", "[compile][tag]") {
  std::string text = "block all\n";
  for (int i = 0; i < 64; ++i) text += "pass out tagged T" + std::to_string(i % 64) + "\n";
  text += "pass out ! tagged T3\n";
  InterfaceRegistry ifs;
  CHECK(compile_ok(text, ifs)->size() == 66);
  text += "pass out tagged T64\n";
  auto refused = compile(parse(text), ifs);
  REQUIRE(std::holds_alternative<RuleError>(refused));
  CHECK(std::get<RuleError>(refused).to_string() ==
        "t.conf:67:1: 'tagged' tests at most 64 distinct tags in a rule set: this is one more");
  // Translation rules' tags count with the filter rules'.
  text.resize(text.size() - std::string_view("pass out tagged T64\n").size());
  text += "nat on wan0 tagged T64 -> 203.0.113.1\n";
  refused = compile(parse(text), ifs);
  REQUIRE(std::holds_alternative<RuleError>(refused));
  CHECK(std::get<RuleError>(refused).to_string() ==
        "t.conf:67:1: 'tagged' tests at most 64 distinct tags in a rule set: this is one more");
}

}  // namespace
}  // namespace pairwall::engine::rules
