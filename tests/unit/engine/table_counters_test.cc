// `table <name> counters`: which entry a packet counts in, what it counts as, and what a reload
// keeps; then end to end through Engine::process, for the packets rules decide and those their
// states pass.
#include "daemon/engine/rules/table_counters.h"

#include <catch2/catch.hpp>
#include <string>

#include "tests/unit/engine/firewall.h"
#include "tests/unit/support/packet_builder.h"

using namespace pairwall::engine;
using namespace pairwall::engine::rules;
using pairwall::test::Bytes;
using pairwall::test::Firewall;
using pairwall::test::PacketBuilder;

namespace {

IpPrefix prefix(const std::string& text) {
  const auto p = parse_prefix(text);
  REQUIRE(p);
  return *p;
}

IpAddress address(const std::string& text) {
  return prefix(text).address;
}

Table table(std::vector<std::string> entries, std::vector<std::string> negated = {}) {
  Table t;
  t.name = "t";
  t.counters = true;
  for (const auto& e : entries) t.entries.push_back(prefix(e));
  for (const auto& e : negated) t.negated_entries.push_back(prefix(e));
  return t;
}

uint64_t packets(const EntryCounters* c, CountedAs as) {
  return c->packets[static_cast<std::size_t>(as)].load();
}
uint64_t bytes(const EntryCounters* c, CountedAs as) {
  return c->bytes[static_cast<std::size_t>(as)].load();
}

// 10.1.0.10:40000 to 192.0.2.80:80: the SYN, the SYN-ACK, and an ACK with 100 bytes.
struct Handshake {
  Bytes syn, synack, ack;
};
Handshake handshake() {
  return {
      PacketBuilder().ipv4("10.1.0.10", "192.0.2.80").tcp(40000, 80).flags(tcpflag::kSyn).seq(1000).build(),
      PacketBuilder()
          .ipv4("192.0.2.80", "10.1.0.10")
          .tcp(80, 40000)
          .flags(tcpflag::kSyn | tcpflag::kAck)
          .seq(9000)
          .ack(1001)
          .build(),
      PacketBuilder()
          .ipv4("10.1.0.10", "192.0.2.80")
          .tcp(40000, 80)
          .flags(tcpflag::kAck)
          .seq(1001)
          .ack(9001)
          .payload(100)
          .build(),
  };
}

}  // namespace

TEST_CASE("a table entry counts the addresses it is the longest listed prefix of, a ! entry's included",
          "[tables]") {
  const TableCounters t(table({"10.0.0.0/8", "10.1.0.0/16", "2001:db8::/32", "0.0.0.0/0"}, {"10.1.2.0/24"}),
                        nullptr);
  const auto of = [&](const std::string& e) {
    const bool negated = e.starts_with("!");
    return t.listed({negated, prefix(negated ? e.substr(1) : e)});
  };
  REQUIRE(t.entries().size() == 5);
  CHECK(t.find(Family::V4, address("10.1.2.3")) == of("!10.1.2.0/24"));
  CHECK(t.find(Family::V4, address("10.1.3.1")) == of("10.1.0.0/16"));
  CHECK(t.find(Family::V4, address("10.1.255.255")) == of("10.1.0.0/16"));
  CHECK(t.find(Family::V4, address("10.2.0.1")) == of("10.0.0.0/8"));
  CHECK(t.find(Family::V4, address("11.0.0.1")) == of("0.0.0.0/0"));
  CHECK(t.find(Family::V4, address("255.255.255.255")) == of("0.0.0.0/0"));
  CHECK(t.find(Family::V6, address("2001:db8:1::1")) == of("2001:db8::/32"));
  CHECK(t.find(Family::V6, address("2001:db9::1")) == nullptr);
  CHECK(of("10.1.2.0/24") == nullptr);  // listed negated only
}

TEST_CASE("a table compiled again keeps the counters of the entries it still lists alike", "[tables]") {
  const TableCounters before(table({"10.0.0.0/8", "192.0.2.1"}, {"10.9.0.0/16"}), nullptr);
  before.listed({false, prefix("10.0.0.0/8")})->add(CountedAs::InBlock, 3, 300);
  const TableCounters after(table({"10.0.0.0/8", "10.9.0.0/16", "198.51.100.0/24"}), &before);
  EntryCounters* kept = after.listed({false, prefix("10.0.0.0/8")});
  CHECK(kept == before.listed({false, prefix("10.0.0.0/8")}));
  CHECK(packets(kept, CountedAs::InBlock) == 3);
  CHECK(bytes(kept, CountedAs::InBlock) == 300);
  // `!` flipped: another entry, as pf's; and one added starts at zero.
  EntryCounters* flipped = after.listed({false, prefix("10.9.0.0/16")});
  REQUIRE(flipped != nullptr);
  CHECK(flipped != before.listed({true, prefix("10.9.0.0/16")}));
  CHECK(packets(after.listed({false, prefix("198.51.100.0/24")}), CountedAs::InBlock) == 0);
  // A packet counted in the new table shows in the entry both share.
  count_in_tables(std::vector<CountedTable>{{&after, true}}, Family::V4, address("192.0.2.9"),
                  address("10.3.0.1"), CountedAs::OutPass, 1, 60);
  CHECK(packets(before.listed({false, prefix("10.0.0.0/8")}), CountedAs::OutPass) == 1);
  CHECK(packets(after.listed({false, prefix("198.51.100.0/24")}), CountedAs::OutPass) == 0);
}

TEST_CASE("a blocked packet counts in the entry of its rule's table, as In/Block or Out/Block", "[tables]") {
  Firewall fw(
      "table <bad> counters { 198.51.100.0/24, 198.51.100.7 }\n"
      "table <quiet> { 198.51.100.0/24 }\n"
      "pass all\n"
      "block in quick on wan0 from <bad>\n"
      "block out quick on wan0 to <bad>\n"
      "block in quick on wan0 from <quiet>\n");
  const TableCounters* bad = fw.engine.rules()->table_counters("bad");
  REQUIRE(bad != nullptr);
  CHECK(fw.engine.rules()->table_counters("quiet") == nullptr);
  const EntryCounters* host = bad->listed({false, prefix("198.51.100.7/32")});
  const EntryCounters* net = bad->listed({false, prefix("198.51.100.0/24")});

  const Bytes probe =
      PacketBuilder().ipv4("198.51.100.7", "10.1.0.10").tcp(5555, 22).flags(tcpflag::kSyn).build();
  CHECK(fw.in(probe).reason == Reason::RuleBlock);
  CHECK(fw.in(probe).reason == Reason::RuleBlock);
  CHECK(packets(host, CountedAs::InBlock) == 2);
  CHECK(bytes(host, CountedAs::InBlock) == 2 * probe.size());
  CHECK(packets(net, CountedAs::InBlock) == 0);

  // Forwarded out: the in pass on lan0 passes it (`pass all`, no table), the out pass blocks it.
  const Bytes leak = PacketBuilder().ipv4("10.1.0.10", "198.51.100.8").udp(5000, 53).build();
  CHECK(fw.out(leak).reason == Reason::RuleBlock);
  CHECK(packets(net, CountedAs::OutBlock) == 1);
  CHECK(bytes(net, CountedAs::OutBlock) == leak.size());
  for (const CountedAs as : {CountedAs::InPass, CountedAs::OutPass}) {
    CHECK(packets(net, as) == 0);
    CHECK(packets(host, as) == 0);
  }
}

TEST_CASE("a state's packets count in its rule's table entries once folded: the initiator's In, replies Out",
          "[tables]") {
  Firewall fw(
      "table <web> counters { 192.0.2.0/24 }\n"
      "table <clients> counters { 10.1.0.0/16 }\n"
      "block all\n"
      "pass in on lan0 proto tcp from <clients> to <web> port 80\n"
      "pass out on wan0 proto tcp\n");
  const TableCounters* web = fw.engine.rules()->table_counters("web");
  const TableCounters* clients = fw.engine.rules()->table_counters("clients");
  REQUIRE((web != nullptr && clients != nullptr));
  const EntryCounters* server = web->listed({false, prefix("192.0.2.0/24")});
  const EntryCounters* client = clients->listed({false, prefix("10.1.0.0/16")});

  const auto [syn, synack, ack] = handshake();
  REQUIRE(fw.out(syn).action == Verdict::Action::Accept);
  // The first packet counts as its rule decides it.
  CHECK(packets(server, CountedAs::InPass) == 1);
  CHECK(packets(client, CountedAs::InPass) == 1);
  REQUIRE(fw.in(synack).reason == Reason::State);
  REQUIRE(fw.out(ack).reason == Reason::State);

  CHECK(fw.engine.expire(fw.now + Millis{100'000'000}) == 1);
  for (const EntryCounters* e : {server, client}) {
    CHECK(packets(e, CountedAs::InPass) == 2);
    CHECK(bytes(e, CountedAs::InPass) == syn.size() + ack.size());
    CHECK(packets(e, CountedAs::OutPass) == 1);
    CHECK(bytes(e, CountedAs::OutPass) == synack.size());
    CHECK(packets(e, CountedAs::InBlock) == 0);
    CHECK(packets(e, CountedAs::OutBlock) == 0);
  }
}

TEST_CASE(
    "an out rule's table counts the addresses its pass sees, after nat, and its state's initiator as Out",
    "[tables]") {
  Firewall fw(
      "table <natted> counters { 203.0.113.1 }\n"
      "table <inside> counters { 10.1.0.0/16 }\n"
      "nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\n"
      "pass in on lan0 no state\n"
      "pass out on wan0 proto udp from { <natted>, <inside> }\n");
  const EntryCounters* natted =
      fw.engine.rules()->table_counters("natted")->listed({false, prefix("203.0.113.1/32")});
  const EntryCounters* inside =
      fw.engine.rules()->table_counters("inside")->listed({false, prefix("10.1.0.0/16")});
  const Bytes query = PacketBuilder().ipv4("10.1.0.10", "192.0.2.53").udp(5000, 53).build();
  REQUIRE(fw.out(query).action == Verdict::Action::Accept);
  CHECK(packets(natted, CountedAs::OutPass) == 1);
  CHECK(packets(inside, CountedAs::OutPass) == 0);  // the out pass saw the translated source

  uint16_t port = 0;
  fw.engine.states().for_each([&](const StateEntry& e) { port = e.key(1).port[0]; });
  REQUIRE(port != 0);
  const Bytes answer = PacketBuilder().ipv4("192.0.2.53", "203.0.113.1").udp(53, port).build();
  REQUIRE(fw.in(answer).reason == Reason::State);
  REQUIRE(fw.out(query).reason == Reason::State);
  CHECK(fw.engine.expire(fw.now + Millis{100'000'000}) == 1);
  CHECK(packets(natted, CountedAs::OutPass) == 2);
  CHECK(packets(natted, CountedAs::InPass) == 1);
  CHECK(bytes(natted, CountedAs::InPass) == answer.size());
  CHECK(packets(inside, CountedAs::OutPass) == 0);
  CHECK(packets(inside, CountedAs::InPass) == 0);
}

TEST_CASE("a reload keeps a table's entry counters, and a rule set without `counters` on it has none",
          "[tables]") {
  Firewall fw(
      "table <bad> counters { 198.51.100.0/24 }\n"
      "block in on wan0 from <bad>\n");
  const Bytes probe = PacketBuilder().ipv4("198.51.100.7", "10.1.0.10").udp(5555, 53).build();
  REQUIRE(fw.in(probe).reason == Reason::RuleBlock);
  const auto before = fw.engine.rules();
  auto compile_again = [&](const std::string& text) {
    auto parsed = parse_rules(text, "test.conf");
    REQUIRE(std::holds_alternative<RuleFile>(parsed));
    auto compiled = compile(std::get<RuleFile>(parsed), fw.engine.interfaces(), before.get());
    REQUIRE(std::holds_alternative<std::shared_ptr<const RuleSet>>(compiled));
    return std::get<std::shared_ptr<const RuleSet>>(compiled);
  };
  const auto kept = compile_again(
      "table <bad> counters { 198.51.100.0/24, 192.0.2.0/24 }\n"
      "block in on wan0 from <bad>\n");
  CHECK(packets(kept->table_counters("bad")->listed({false, prefix("198.51.100.0/24")}),
                CountedAs::InBlock) == 1);
  CHECK(compile_again("table <bad> { 198.51.100.0/24 }\nblock in on wan0 from <bad>\n")
            ->table_counters("bad") == nullptr);
}

// pfctl -z clears the rules' counters, not the tables': a state's packets from before it still
// count in its rule's table entries.
TEST_CASE("zeroing the rules' counters leaves the table entries the state packets they are owed",
          "[tables]") {
  Firewall fw(
      "table <web> counters { 192.0.2.0/24 }\n"
      "block all\n"
      "pass in on lan0 proto tcp to <web> port 80\n"
      "pass out on wan0 proto tcp\n");
  const TableCounters* web = fw.engine.rules()->table_counters("web");
  REQUIRE(web != nullptr);
  const EntryCounters* server = web->listed({false, prefix("192.0.2.0/24")});
  const auto [syn, synack, ack] = handshake();
  REQUIRE(fw.out(syn).action == Verdict::Action::Accept);
  REQUIRE(fw.in(synack).reason == Reason::State);
  REQUIRE(fw.out(ack).reason == Reason::State);
  // Established, the state stays in its queue: its next packet waits for a fold.
  REQUIRE(fw.out(ack).reason == Reason::State);
  const uint64_t folded = packets(server, CountedAs::InPass);
  REQUIRE(folded < 3);

  fw.engine.zero_rule_counters();
  CHECK(packets(server, CountedAs::InPass) == 3);
  CHECK(fw.engine.expire(fw.now + Millis{100'000'000}) == 1);
  CHECK(packets(server, CountedAs::InPass) == 3);
  CHECK(packets(server, CountedAs::OutPass) == 1);
  CHECK(fw.engine.rules()->rule(1).stats->packets == 0);
}
