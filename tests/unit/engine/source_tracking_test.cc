// Source tracking end to end with crafted packets: max-src-states, max-src-nodes, max-src-conn
// and max-src-conn-rate, per rule and global, and the node table's own limit.
#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "daemon/engine/engine.h"
#include "daemon/engine/rules/compile.h"
#include "daemon/engine/rules/parser.h"
#include "daemon/engine/source_table.h"
#include "tests/unit/engine/firewall.h"
#include "tests/unit/support/packet_builder.h"

using namespace pairwall::engine;
using pairwall::test::Bytes;
using pairwall::test::Firewall;
using pairwall::test::PacketBuilder;

namespace {

const std::string kServer = "192.0.2.80";

// One TCP connection of `client` from `port` to the server's port 22.
struct Connection {
  std::string client;
  uint16_t port;

  PacketBuilder from_client() const {
    PacketBuilder b;
    b.ipv4(client, kServer).tcp(port, 22);
    return b;
  }
  PacketBuilder from_server() const {
    PacketBuilder b;
    b.ipv4(kServer, client).tcp(22, port);
    return b;
  }
  Bytes syn() const { return from_client().flags(tcpflag::kSyn).seq(1000).build(); }
  Bytes synack() const {
    return from_server().flags(tcpflag::kSyn | tcpflag::kAck).seq(9000).ack(1001).build();
  }
  Bytes ack() const { return from_client().flags(tcpflag::kAck).seq(1001).ack(9001).build(); }
  Bytes data() const { return from_client().flags(tcpflag::kAck).seq(1001).ack(9001).payload(10).build(); }
};

// The three-way handshake; returns the verdict of the client's ACK, which completes it.
Verdict handshake(Firewall& fw, const Connection& c) {
  REQUIRE(fw.out(c.syn()).reason == Reason::Match);
  REQUIRE(fw.in(c.synack()).reason == Reason::State);
  return fw.out(c.ack());
}

uint32_t source_nodes_of(Firewall& fw, uint32_t rule) {
  return fw.engine.rules()->rule(rule).stats->source_nodes.load();
}

}  // namespace

TEST_CASE("max-src-states limits the states of each source address, not of the rule",
          "[engine][limits][source]") {
  Firewall fw("pass out proto tcp keep state (max-src-states 2)");
  CHECK(fw.out(Connection{"10.1.0.1", 1001}.syn()).reason == Reason::Match);
  CHECK(fw.out(Connection{"10.1.0.1", 1002}.syn()).reason == Reason::Match);
  const Verdict third = fw.out(Connection{"10.1.0.1", 1003}.syn());
  CHECK(third.action == Verdict::Action::Drop);
  CHECK(third.reason == Reason::SourceLimit);
  CHECK(fw.worker.counters().get(Reason::SourceLimit) == 1);
  // Another address has its own count.
  CHECK(fw.out(Connection{"10.1.0.2", 1001}.syn()).reason == Reason::Match);
  CHECK(fw.engine.states().size() == 3);
  CHECK(fw.engine.sources().size() == 2);
  CHECK(source_nodes_of(fw, 0) == 2);
  CHECK(fw.engine.rules()->rule(0).stats->states_current.load() == 3);

  // States that expire give their place back, and the last one frees its node.
  fw.engine.expire(fw.now + Millis{1'000'000});
  CHECK(fw.engine.sources().size() == 0);
  CHECK(source_nodes_of(fw, 0) == 0);
  CHECK(fw.out(Connection{"10.1.0.1", 1004}.syn()).reason == Reason::Match);
}

TEST_CASE("max-src-nodes limits how many addresses a rule's states come from", "[engine][limits][source]") {
  Firewall fw("pass out proto tcp keep state (max-src-nodes 2)");
  CHECK(fw.out(Connection{"10.1.0.1", 1001}.syn()).reason == Reason::Match);
  CHECK(fw.out(Connection{"10.1.0.2", 1001}.syn()).reason == Reason::Match);
  CHECK(fw.out(Connection{"10.1.0.3", 1001}.syn()).reason == Reason::SourceLimit);
  // Known addresses open more states.
  CHECK(fw.out(Connection{"10.1.0.1", 1002}.syn()).reason == Reason::Match);
  CHECK(source_nodes_of(fw, 0) == 2);
}

TEST_CASE("source-track: per rule by default, shared by the rules that say global",
          "[engine][limits][source]") {
  struct Case {
    const char* options;
    Reason web;  // the address's second state, made by the other rule
    std::size_t nodes;
  };
  for (const Case c : {Case{"max-src-states 1", Reason::Match, 2},
                       Case{"max-src-states 1, source-track rule", Reason::Match, 2},
                       Case{"max-src-states 1, source-track global", Reason::SourceLimit, 1}}) {
    INFO(c.options);
    Firewall fw(std::string("pass out proto tcp to port 22 keep state (") + c.options + ")\n" +
                "pass out proto tcp to port 80 keep state (" + c.options + ")");
    CHECK(fw.out(Connection{"10.1.0.1", 1001}.syn()).reason == Reason::Match);
    PacketBuilder web;
    web.ipv4("10.1.0.1", kServer).tcp(1002, 80).flags(tcpflag::kSyn).seq(1);
    CHECK(fw.out(web.build()).reason == c.web);
    CHECK(fw.engine.sources().size() == c.nodes);
  }
}

TEST_CASE("max-src-conn counts connections once their handshake completes", "[engine][limits][source]") {
  Firewall fw("pass out proto tcp keep state (max-src-conn 2)");
  const Connection a{"10.1.0.1", 1001};
  const Connection b{"10.1.0.1", 1002};
  const Connection c{"10.1.0.1", 1003};
  CHECK(handshake(fw, a).reason == Reason::State);
  CHECK(handshake(fw, b).reason == Reason::State);
  // A third handshake starts (half-open connections do not count) but may not complete.
  const Verdict third = handshake(fw, c);
  CHECK(third.action == Verdict::Action::Drop);
  CHECK(third.reason == Reason::SourceLimit);
  CHECK(fw.engine.states().size() == 2);
  // The refused connection's state is gone; the two admitted ones carry on.
  CHECK(fw.out(c.data()).reason != Reason::State);
  CHECK(fw.out(a.data()).reason == Reason::State);
  CHECK(fw.out(b.data()).reason == Reason::State);
  // Another source has its own count.
  CHECK(handshake(fw, Connection{"10.1.0.2", 1001}).reason == Reason::State);
}

TEST_CASE("source-track global: a node counts the connections of every rule tracking it, limits or not",
          "[engine][limits][source]") {
  // pf_src_connlimit counts each connection of a state with source nodes in its node, whatever
  // the rule's limits; a rule with max-src-conn on a node others share counts theirs too.
  Firewall fw(
      "pass out proto tcp to port 22 keep state (source-track global, max-src-states 10)\n"
      "pass out proto tcp to port 80 keep state (source-track global, max-src-conn 2)\n");
  CHECK(handshake(fw, Connection{"10.1.0.1", 1001}).reason == Reason::State);
  CHECK(handshake(fw, Connection{"10.1.0.1", 1002}).reason == Reason::State);
  uint32_t connections = 0;
  fw.engine.sources().for_each(fw.now, [&](const SourceView& v) { connections = v.connections; });
  CHECK(connections == 2);
  // The address's third connection, made by the rule that limits them, is one too many.
  PacketBuilder web;
  web.ipv4("10.1.0.1", kServer).tcp(1003, 80);
  const auto from_web = [](uint8_t flags, uint32_t seq, uint32_t ack) {
    return PacketBuilder().ipv4(kServer, "10.1.0.1").tcp(80, 1003).flags(flags).seq(seq).ack(ack).build();
  };
  REQUIRE(fw.out(PacketBuilder(web).flags(tcpflag::kSyn).seq(1000).build()).reason == Reason::Match);
  REQUIRE(fw.in(from_web(tcpflag::kSyn | tcpflag::kAck, 9000, 1001)).reason == Reason::State);
  CHECK(fw.out(PacketBuilder(web).flags(tcpflag::kAck).seq(1001).ack(9001).build()).reason ==
        Reason::SourceLimit);
}

TEST_CASE("max-src-conn and its rate count no connection a reset ends in its handshake",
          "[engine][limits][source]") {
  // pf_src_connlimit counts a connection when its handshake completes; a reset that ends the
  // handshake (a closed port's RST|ACK, a scanner's RST after the SYN-ACK) completes nothing.
  Firewall fw("pass out proto tcp keep state (max-src-conn 1, max-src-conn-rate 2/60)");
  uint16_t port = 1000;
  for (int i = 0; i < 5; ++i) {
    const Connection refused{"10.1.0.1", ++port};
    REQUIRE(fw.out(refused.syn()).reason == Reason::Match);
    CHECK(fw.in(refused.from_server().flags(tcpflag::kRst | tcpflag::kAck).seq(0).ack(1001).build()).reason ==
          Reason::State);
    const Connection scanned{"10.1.0.1", ++port};
    REQUIRE(fw.out(scanned.syn()).reason == Reason::Match);
    REQUIRE(fw.in(scanned.synack()).reason == Reason::State);
    CHECK(fw.out(scanned.from_client().flags(tcpflag::kRst).seq(1001).build()).reason == Reason::State);
  }
  fw.engine.sources().for_each(fw.now, [](const SourceView& v) {
    CHECK(v.connections == 0);
    CHECK(v.rate == Approx(0.0));
  });
  CHECK(fw.worker.counters().get(Reason::SourceLimit) == 0);
  CHECK(handshake(fw, Connection{"10.1.0.1", ++port}).reason == Reason::State);
}

TEST_CASE("each source limit counts what it refuses or cuts under its own name, as pf's limit counters",
          "[engine][limits][source]") {
  struct Case {
    const char* options;
    SourceLimitKind kind;
  };
  const SourceLimitKind kinds[] = {SourceLimitKind::States, SourceLimitKind::Nodes, SourceLimitKind::Conn,
                                   SourceLimitKind::ConnRate};
  for (const Case c :
       {Case{"max-src-states 1", SourceLimitKind::States}, Case{"max-src-nodes 1", SourceLimitKind::Nodes},
        Case{"max-src-conn 1", SourceLimitKind::Conn},
        Case{"max-src-conn-rate 1/60", SourceLimitKind::ConnRate}}) {
    INFO(c.options);
    Firewall fw(std::string("pass out proto tcp keep state (") + c.options + ")");
    CHECK(handshake(fw, Connection{"10.1.0.1", 1001}).reason == Reason::State);
    // The same address's second connection (for max-src-nodes, a second address) goes over: a
    // new state's limits refuse its SYN, a connection's cut its handshake's end.
    const bool at_state = c.kind == SourceLimitKind::States || c.kind == SourceLimitKind::Nodes;
    const Connection second{c.kind == SourceLimitKind::Nodes ? "10.1.0.2" : "10.1.0.1", 1002};
    CHECK((at_state ? fw.out(second.syn()) : handshake(fw, second)).reason == Reason::SourceLimit);
    for (const SourceLimitKind k : kinds) CHECK(fw.worker.source_limited(k) == (k == c.kind ? 1u : 0u));
  }
  // Over max-src-conn and its rate at once: counted under both, as pf_src_connlimit counts it.
  Firewall fw("pass out proto tcp keep state (max-src-conn 1, max-src-conn-rate 1/60)");
  CHECK(handshake(fw, Connection{"10.1.0.1", 1001}).reason == Reason::State);
  CHECK(handshake(fw, Connection{"10.1.0.1", 1002}).reason == Reason::SourceLimit);
  CHECK(fw.worker.source_limited(SourceLimitKind::Conn) == 1);
  CHECK(fw.worker.source_limited(SourceLimitKind::ConnRate) == 1);
  CHECK(fw.worker.counters().get(Reason::SourceLimit) == 1);
}

TEST_CASE("max-src-conn-rate: N connections per S seconds, the count decaying over S",
          "[engine][limits][source]") {
  Firewall fw("pass out proto tcp keep state (max-src-conn-rate 3/10)");
  uint16_t port = 1000;
  for (int i = 0; i < 3; ++i) CHECK(handshake(fw, Connection{"10.1.0.1", ++port}).reason == Reason::State);
  CHECK(handshake(fw, Connection{"10.1.0.1", ++port}).reason == Reason::SourceLimit);
  auto listed_rate = [&] {
    double rate = -1;
    fw.engine.sources().for_each(fw.now, [&](const SourceView& v) { rate = v.rate; });
    return rate;
  };
  CHECK(listed_rate() == Approx(4.0));
  // Five seconds later half of the count has decayed: 4 - 2 = 2, and one more fits.
  fw.now += Millis{5'000};
  CHECK(listed_rate() == Approx(2.0));
  CHECK(handshake(fw, Connection{"10.1.0.1", ++port}).reason == Reason::State);
  CHECK(handshake(fw, Connection{"10.1.0.1", ++port}).reason == Reason::SourceLimit);
  // A full period later the count starts again.
  fw.now += Millis{10'000};
  for (int i = 0; i < 3; ++i) CHECK(handshake(fw, Connection{"10.1.0.1", ++port}).reason == Reason::State);
}

TEST_CASE("src.track: a node outlives its last state that long, its connection rate with it",
          "[engine][limits][source]") {
  struct Case {
    const char* rules;
    const char* what;
  };
  for (const Case c :
       {Case{"set timeout src.track 30\npass out proto tcp keep state (max-src-conn-rate 2/20)", "global"},
        Case{"pass out proto tcp keep state (max-src-conn-rate 2/20, src.track 30)", "per rule"},
        Case{"set timeout src.track 5\n"
             "pass out proto tcp keep state (max-src-conn-rate 2/20, src.track 30)",
             "the rule's over the global one"},
        Case{"set timeout src.track 30\n"
             "pass out proto tcp keep state (max-src-conn-rate 2/20, src.track 0)",
             "a rule's 0 is the global one, as pf's"}}) {
    INFO(c.what);
    Firewall fw(c.rules);
    CHECK(handshake(fw, Connection{"10.1.0.1", 1001}).reason == Reason::State);
    CHECK(handshake(fw, Connection{"10.1.0.1", 1002}).reason == Reason::State);
    CHECK(fw.engine.kill_states([](const StateEntry&) { return true; }) == 2);
    fw.engine.expire(fw.now);
    CHECK(fw.engine.sources().size() == 1);
    CHECK(source_nodes_of(fw, 0) == 1);
    // Its two connections of the last 20 seconds still count: a third is one too many.
    fw.now += Millis{5'000};
    CHECK(handshake(fw, Connection{"10.1.0.1", 1003}).reason == Reason::SourceLimit);
    // That cut state's removal leaves the node idle again, dated by the next pass.
    fw.engine.expire(fw.now);
    fw.engine.expire(fw.now + Millis{29'000});
    CHECK(fw.engine.sources().size() == 1);
    fw.engine.expire(fw.now + Millis{30'000});
    CHECK(fw.engine.sources().size() == 0);
    CHECK(source_nodes_of(fw, 0) == 0);
  }
  // Without src.track (pf's default 0) a node no rate counts goes with its last state.
  Firewall fw("pass out proto tcp keep state (max-src-conn 2)");
  CHECK(handshake(fw, Connection{"10.1.0.1", 1001}).reason == Reason::State);
  CHECK(fw.engine.kill_states([](const StateEntry&) { return true; }) == 1);
  CHECK(fw.engine.sources().size() == 0);
  CHECK(source_nodes_of(fw, 0) == 0);
}

TEST_CASE("src.track: a node whose connections count against a rate lives on for the rate's period",
          "[engine][limits][source]") {
  // pfctl raises a rule's src.track to its max-src-conn-rate seconds: with the default 0, the
  // rate would start again from nothing once the address's states were gone, and a rate longer
  // than the states of closed connections live would never hold.
  Firewall fw("pass out proto tcp keep state (max-src-conn-rate 2/60)");
  CHECK(handshake(fw, Connection{"10.1.0.1", 1001}).reason == Reason::State);
  CHECK(handshake(fw, Connection{"10.1.0.1", 1002}).reason == Reason::State);
  CHECK(fw.engine.kill_states([](const StateEntry&) { return true; }) == 2);
  fw.engine.expire(fw.now);
  CHECK(fw.engine.sources().size() == 1);
  fw.now += Millis{10'000};
  CHECK(handshake(fw, Connection{"10.1.0.1", 1003}).reason == Reason::SourceLimit);
  fw.engine.expire(fw.now);
  fw.engine.expire(fw.now + Millis{59'999});
  CHECK(fw.engine.sources().size() == 1);
  fw.engine.expire(fw.now + Millis{60'000});
  CHECK(fw.engine.sources().size() == 0);
  CHECK(source_nodes_of(fw, 0) == 0);
  // A node whose handshakes never completed has no rate to keep: it goes with its last state.
  CHECK(fw.out(Connection{"10.1.0.2", 1001}.syn()).reason == Reason::Match);
  CHECK(fw.engine.kill_states([](const StateEntry&) { return true; }) == 1);
  CHECK(fw.engine.sources().size() == 0);
}

TEST_CASE("src.track: a reload's global value holds for the states made before it, a rule's own stays",
          "[engine][limits][source][reload]") {
  // pf_src_tree_remove_state reads the rule's src.track when its last state goes, and where the
  // rule sets none, pf_default_rule's: the global value in force then, not at the state's birth.
  const std::string rule = "pass out proto tcp keep state (max-src-conn-rate 2/10)";
  const std::string own = "pass out proto tcp keep state (max-src-conn-rate 2/10, src.track 30)";
  struct Case {
    std::string before;
    std::string after;
    Millis lingers;
    const char* what;
  };
  for (const Case& c :
       {Case{"set timeout src.track 30\n" + rule, "set timeout src.track 0\n" + rule, Millis{10'000},
             "the global src.track taken back to 0: the rate's period alone"},
        Case{rule, "set timeout src.track 30\n" + rule, Millis{30'000}, "the global src.track set"},
        Case{own, "set timeout src.track 0\n" + own, Millis{30'000}, "the rule's own src.track"}}) {
    INFO(c.what);
    Firewall fw(c.before);
    CHECK(handshake(fw, Connection{"10.1.0.1", 1001}).reason == Reason::State);
    CHECK(handshake(fw, Connection{"10.1.0.1", 1002}).reason == Reason::State);
    // Reloaded as the daemon reloads: the rule, written alike, keeps its counters and its nodes.
    auto parsed = rules::parse_rules(c.after, "test.conf");
    REQUIRE(std::holds_alternative<rules::RuleFile>(parsed));
    auto compiled =
        rules::compile(std::get<rules::RuleFile>(parsed), fw.engine.interfaces(), fw.engine.rules().get());
    REQUIRE(std::holds_alternative<std::shared_ptr<const rules::RuleSet>>(compiled));
    fw.engine.load_rules(std::get<std::shared_ptr<const rules::RuleSet>>(compiled));
    CHECK(fw.engine.kill_states([](const StateEntry&) { return true; }) == 2);
    fw.engine.expire(fw.now);
    fw.engine.expire(fw.now + c.lingers - Millis{1});
    CHECK(fw.engine.sources().size() == 1);
    fw.engine.expire(fw.now + c.lingers);
    CHECK(fw.engine.sources().size() == 0);
  }
}

TEST_CASE("src.track: a new state takes up the idle node, which then waits for its own last state",
          "[engine][limits][source]") {
  Firewall fw("set timeout src.track 30\npass out proto tcp keep state (max-src-states 5)");
  CHECK(fw.out(Connection{"10.1.0.1", 1001}.syn()).reason == Reason::Match);
  CHECK(fw.engine.kill_states([](const StateEntry&) { return true; }) == 1);
  fw.engine.expire(fw.now);
  CHECK(fw.out(Connection{"10.1.0.1", 1002}.syn()).reason == Reason::Match);
  CHECK(fw.engine.sources().size() == 1);
  // Long past the first state's src.track, the node stays with its new state.
  fw.engine.expire(fw.now + Millis{60'000});
  CHECK(fw.engine.sources().size() == 1);
  fw.engine.sources().for_each(fw.now, [](const SourceView& v) { CHECK(v.states == 1); });
}

TEST_CASE("set limit src-nodes bounds the node table", "[engine][limits][source]") {
  Firewall fw("set limit src-nodes 2\npass out proto tcp keep state (max-src-states 10)");
  CHECK(fw.out(Connection{"10.1.0.1", 1001}.syn()).reason == Reason::Match);
  CHECK(fw.out(Connection{"10.1.0.2", 1001}.syn()).reason == Reason::Match);
  CHECK(fw.out(Connection{"10.1.0.3", 1001}.syn()).reason == Reason::SourceNodeLimit);
  CHECK(fw.worker.counters().get(Reason::SourceNodeLimit) == 1);
  CHECK(fw.engine.states().size() == 2);
}

TEST_CASE("rules without source limits keep no source nodes", "[engine][limits][source]") {
  Firewall fw("pass out proto tcp keep state (max 10)");
  CHECK(handshake(fw, Connection{"10.1.0.1", 1001}).reason == Reason::State);
  CHECK(fw.engine.sources().size() == 0);
}

TEST_CASE("a source node's count never goes to the sync peer", "[engine][limits][source][sync]") {
  Firewall fw("pass out proto tcp keep state (max-src-conn 5)");
  CHECK(handshake(fw, Connection{"10.1.0.1", 1001}).reason == Reason::State);
  // The local state carries the flag; none of the records made of it do.
  bool counted = false;
  fw.engine.states().for_each(
      [&](const StateEntry& e) { counted = counted || (e.flags & stateflag::kSourceConnection) != 0; });
  CHECK(counted);
  const std::vector<StateRecord> records = fw.drain();
  REQUIRE_FALSE(records.empty());
  for (const StateRecord& r : records) CHECK((r.flags & stateflag::kSourceConnection) == 0);
}

namespace {

// The node of `address` as `fw` lists it: {states, connections}; {0, 0} for none.
std::pair<uint32_t, uint32_t> node_of(const Firewall& fw, const std::string& address) {
  std::pair<uint32_t, uint32_t> found{0, 0};
  fw.engine.sources().for_each(fw.now, [&](const SourceView& v) {
    if (v.address == parse_address(address, nullptr).value()) found = {v.states, v.connections};
  });
  return found;
}

}  // namespace

TEST_CASE("states learned from the peer count in their sources' nodes: the limits hold across a failover",
          "[engine][limits][source][sync]") {
  const std::string rules = "pass out proto tcp keep state (max-src-states 3, max-src-conn 1)";
  Firewall master(rules, 1);
  Firewall backup(rules, 2);
  const Connection open{"10.1.0.1", 1001};
  const Connection half_open{"10.1.0.1", 1002};
  CHECK(handshake(master, open).reason == Reason::State);
  CHECK(master.out(half_open.syn()).reason == Reason::Match);
  backup.learn_from(master);
  CHECK(node_of(backup, "10.1.0.1") == std::pair<uint32_t, uint32_t>{2, 1});
  CHECK(source_nodes_of(backup, 0) == 1);

  // The backup carries the connections now: the learned one goes on, and the source's next
  // connection meets max-src-conn where its first left it.
  CHECK(backup.out(open.data()).reason == Reason::State);
  const Connection next{"10.1.0.1", 1003};
  CHECK(handshake(backup, next).reason == Reason::SourceLimit);
  // And max-src-states: two learned states and one of its own fill the address's three.
  CHECK(backup.out(Connection{"10.1.0.1", 1004}.syn()).reason == Reason::Match);
  CHECK(backup.out(Connection{"10.1.0.1", 1005}.syn()).reason == Reason::SourceLimit);
  CHECK(backup.out(Connection{"10.1.0.2", 1001}.syn()).reason == Reason::Match);
}

TEST_CASE("a learned state is never refused by a source limit, and its delete gives its share back",
          "[engine][limits][source][sync]") {
  const std::string rules = "pass out proto tcp keep state (max-src-states 1)";
  Firewall master(rules, 1);
  Firewall backup(rules, 2);
  // Both nodes saw a connection of the address (an asymmetric path): the creator decided each.
  CHECK(backup.out(Connection{"10.1.0.1", 1001}.syn()).reason == Reason::Match);
  backup.drain();
  CHECK(master.out(Connection{"10.1.0.1", 1002}.syn()).reason == Reason::Match);
  const std::vector<StateRecord> inserts = master.drain();
  REQUIRE(inserts.size() == 1);
  CHECK(backup.engine.apply(inserts[0], backup.now));
  CHECK(backup.engine.states().size() == 2);
  CHECK(node_of(backup, "10.1.0.1") == std::pair<uint32_t, uint32_t>{2, 0});

  StateRecord gone;
  gone.kind = StateRecord::Kind::Delete;
  gone.id = inserts[0].id;
  CHECK(backup.engine.apply(gone, backup.now));
  CHECK(node_of(backup, "10.1.0.1") == std::pair<uint32_t, uint32_t>{1, 0});
  backup.engine.flush_states();
  CHECK(backup.engine.sources().size() == 0);
}

TEST_CASE("a learned connection counts once, when the peer's update says its handshake completed",
          "[engine][limits][source][sync]") {
  const std::string rules = "pass out proto tcp keep state (max-src-conn 5)";
  Firewall master(rules, 1);
  Firewall backup(rules, 2);
  const Connection c{"10.1.0.1", 1001};
  CHECK(master.out(c.syn()).reason == Reason::Match);
  backup.learn_from(master);
  CHECK(node_of(backup, "10.1.0.1") == std::pair<uint32_t, uint32_t>{1, 0});
  CHECK(master.in(c.synack()).reason == Reason::State);
  CHECK(master.out(c.ack()).reason == Reason::State);
  CHECK(master.out(c.data()).reason == Reason::State);
  backup.learn_from(master);
  CHECK(node_of(backup, "10.1.0.1") == std::pair<uint32_t, uint32_t>{1, 1});
  // The whole table again (a bulk after a restart of the peer's sync): counted once still.
  master.engine.snapshot(master.now, [&](const StateRecord& r) { backup.engine.apply(r, backup.now); });
  CHECK(node_of(backup, "10.1.0.1") == std::pair<uint32_t, uint32_t>{1, 1});
}

TEST_CASE("killing source nodes frees their addresses from the limits, their states going on (pfctl -K)",
          "[engine][limits][source]") {
  Firewall fw("pass out proto tcp keep state (max-src-states 2, max-src-conn 2)");
  const Connection a1{"10.1.0.1", 1001};
  const Connection a2{"10.1.0.1", 1002};
  CHECK(handshake(fw, a1).reason == Reason::State);
  CHECK(handshake(fw, a2).reason == Reason::State);
  CHECK(fw.out(Connection{"10.1.0.1", 1003}.syn()).reason == Reason::SourceLimit);
  CHECK(fw.out(Connection{"10.1.0.2", 1001}.syn()).reason == Reason::Match);
  REQUIRE(fw.engine.sources().size() == 2);

  const IpAddress killed = IpAddress::v4(0x0a010001);
  const Engine::SourcesKilled result =
      fw.engine.kill_sources([&](const SourceNode& n) { return n.address == killed; });
  CHECK(result.nodes == 1);
  CHECK(result.states == 2);
  CHECK(fw.engine.sources().size() == 1);
  CHECK(source_nodes_of(fw, 0) == 1);
  // The connections carry on; the address counts from nothing, its old states no longer in it.
  CHECK(fw.out(a1.data()).reason == Reason::State);
  CHECK(fw.out(a2.data()).reason == Reason::State);
  CHECK(handshake(fw, Connection{"10.1.0.1", 1004}).reason == Reason::State);
  CHECK(handshake(fw, Connection{"10.1.0.1", 1005}).reason == Reason::State);
  CHECK(fw.out(Connection{"10.1.0.1", 1006}.syn()).reason == Reason::SourceLimit);
  const auto counted = [&] {
    std::pair<uint32_t, uint32_t> states_and_connections{0, 0};
    fw.engine.sources().for_each(fw.now, [&](const SourceView& v) {
      if (v.address == killed) states_and_connections = {v.states, v.connections};
    });
    return states_and_connections;
  };
  CHECK(counted() == std::pair<uint32_t, uint32_t>{2, 2});
  // The old states' removal gives nothing back to the address's new node.
  CHECK(fw.engine.kill_states([&](const StateEntry& e) {
    return e.key(0).addr[0] == killed && (e.key(0).port[0] == 1001 || e.key(0).port[0] == 1002);
  }) == 2);
  CHECK(counted() == std::pair<uint32_t, uint32_t>{2, 2});
  CHECK(fw.engine.states().size() == 3);
  fw.engine.expire(fw.now + Millis{1'000'000'000});
  CHECK(fw.engine.states().size() == 0);
  CHECK(fw.engine.sources().size() == 0);
  CHECK(source_nodes_of(fw, 0) == 0);
}

TEST_CASE("killing every source node forgets the lingering ones' rates too (pfctl -F Sources)",
          "[engine][limits][source]") {
  Firewall fw("pass out proto tcp keep state (max-src-conn-rate 2/60)");
  CHECK(handshake(fw, Connection{"10.1.0.1", 1001}).reason == Reason::State);
  CHECK(handshake(fw, Connection{"10.1.0.1", 1002}).reason == Reason::State);
  CHECK(fw.engine.kill_states([](const StateEntry& e) { return e.key(0).port[0] == 1001; }) == 1);
  CHECK(handshake(fw, Connection{"10.1.0.2", 1001}).reason == Reason::State);
  CHECK(fw.engine.kill_states(
            [](const StateEntry& e) { return e.key(0).addr[0] == IpAddress::v4(0x0a010002); }) == 1);
  fw.engine.expire(fw.now);
  REQUIRE(fw.engine.sources().size() == 2);  // 10.1.0.2 idle, keeping its rate for 60 s
  CHECK(handshake(fw, Connection{"10.1.0.1", 1003}).reason == Reason::SourceLimit);

  const Engine::SourcesKilled result = fw.engine.kill_sources([](const SourceNode&) { return true; });
  CHECK(result.nodes == 2);
  CHECK(result.states == 1);
  CHECK(fw.engine.sources().size() == 0);
  CHECK(source_nodes_of(fw, 0) == 0);
  CHECK(handshake(fw, Connection{"10.1.0.1", 1004}).reason == Reason::State);
  CHECK(handshake(fw, Connection{"10.1.0.1", 1005}).reason == Reason::State);
  CHECK(handshake(fw, Connection{"10.1.0.1", 1006}).reason == Reason::SourceLimit);
}

TEST_CASE("SourceTable: kill frees the chosen nodes without states, lingering or not", "[source][table]") {
  SourceTable table(2, SipKey{3, 4}, 100);
  const SourceLimits limits;
  std::atomic<uint32_t> nodes{0};
  const int rule_identity = 0;
  const SourceOwner owner{&rule_identity, &nodes, 1, nullptr};
  SourceNode* held[4] = {};
  for (uint32_t i = 0; i < 4; ++i) {
    REQUIRE(table.admit(limits, owner, Family::V4, IpAddress::v4(0x0a000001 + i), held[i]) ==
            SourceTable::Admission::Admitted);
  }
  table.release(held[0], false, Millis{30'000});  // lingers
  table.release(held[1], false, Millis{30'000});  // lingers, not chosen
  const auto chosen = [](const SourceNode& n) { return n.address != IpAddress::v4(0x0a000002); };
  CHECK(table.kill(chosen) == 1);  // held[0]; held[2] and held[3] still have a state
  CHECK(table.size() == 3);
  CHECK(nodes.load() == 3);
  // A state given back with `forget` frees its node at once, however long it would linger.
  CHECK(table.release(held[2], false, Millis{30'000}, true));
  CHECK(table.size() == 2);
  CHECK(table.expire(Millis{31'000}) == 0);  // held[1] dated by this pass
  CHECK(table.expire(Millis{61'000}) == 1);
  CHECK(table.size() == 1);
}

TEST_CASE("SourceTable: nodes are found again, freed with their last state, reused", "[source][table]") {
  SourceTable table(4, SipKey{1, 2}, 100);
  SourceLimits limits;
  limits.max_src_states = 3;
  std::atomic<uint32_t> nodes{0};
  const int rule_identity = 0;
  const SourceOwner owner{&rule_identity, &nodes, 7, nullptr};
  const IpAddress a = IpAddress::v4(0x0a000001);
  const IpAddress b = IpAddress::v4(0x0a000002);
  SourceNode* first = nullptr;
  SourceNode* again = nullptr;
  SourceNode* other = nullptr;
  REQUIRE(table.admit(limits, owner, Family::V4, a, first) == SourceTable::Admission::Admitted);
  REQUIRE(table.admit(limits, owner, Family::V4, a, again) == SourceTable::Admission::Admitted);
  CHECK(first == again);
  CHECK(first->states == 2);
  // The same address of another family, or under another owner, is another node.
  REQUIRE(table.admit(limits, SourceOwner{}, Family::V4, a, other) == SourceTable::Admission::Admitted);
  CHECK(other != first);
  CHECK(table.size() == 2);
  CHECK(nodes.load() == 1);
  table.release(first, false);
  table.release(first, false);
  CHECK(table.size() == 1);
  CHECK(nodes.load() == 0);
  SourceNode* fresh = nullptr;
  REQUIRE(table.admit(limits, owner, Family::V4, b, fresh) == SourceTable::Admission::Admitted);
  CHECK(fresh->states == 1);
  CHECK(fresh->connections == 0);
  std::vector<SourceView> listed;
  table.for_each(Millis{0}, [&](const SourceView& v) { listed.push_back(v); });
  REQUIRE(listed.size() == 2);
  for (const SourceView& v : listed) {
    CHECK(v.states == 1);
    CHECK((v.owner.id == nullptr || (v.owner.id == &rule_identity && v.owner.rule == 7)));
  }
}

TEST_CASE("SourceTable: idle nodes expire by their own src.track, without states only", "[source][table]") {
  SourceTable table(1, SipKey{5, 6}, 100);
  const SourceLimits limits;
  SourceNode* nodes[3] = {};
  for (uint32_t i = 0; i < 3; ++i) {
    REQUIRE(table.admit(limits, SourceOwner{}, Family::V4, IpAddress::v4(0x0a000001 + i), nodes[i]) ==
            SourceTable::Admission::Admitted);
  }
  table.release(nodes[0], false, Millis{30'000});
  table.release(nodes[1], false, Millis{10'000});
  table.release(nodes[2], false, Millis{10'000});
  CHECK(table.expire(Millis{1'000}) == 0);  // dated by this pass
  // A state comes back to one of them before its time is up: it is no longer idle.
  SourceNode* again = nullptr;
  REQUIRE(table.admit(limits, SourceOwner{}, Family::V4, IpAddress::v4(0x0a000002), again) ==
          SourceTable::Admission::Admitted);
  CHECK(again == nodes[1]);
  CHECK(table.expire(Millis{10'999}) == 0);
  CHECK(table.expire(Millis{11'000}) == 1);  // nodes[2]
  CHECK(table.size() == 2);
  CHECK(table.expire(Millis{31'000}) == 1);  // nodes[0]
  CHECK(table.size() == 1);
  table.release(again, false);
  CHECK(table.size() == 0);
}

TEST_CASE("SourceTable: a large rate decays over a long period without overflow", "[source][table]") {
  // A day's period: a source that kept completing 5,000 handshakes a second holds a count near
  // 4.3 * 10^11 (x kRateUnit), which times the milliseconds of most of a day overflows 64 bits.
  SourceTable table(1, SipKey{7, 8}, 100);
  SourceLimits limits;
  limits.conn_rate_count = 100;
  limits.conn_rate_seconds = 86'400;
  SourceNode* node = nullptr;
  REQUIRE(table.admit(limits, SourceOwner{}, Family::V4, IpAddress::v4(0x0a000001), node) ==
          SourceTable::Admission::Admitted);
  node->rate = 432'000'000'000ull;
  node->rate_at = Millis{0};
  node->rate_seconds = limits.conn_rate_seconds;
  // Three quarters of the period later, a quarter of the count is left.
  double rate = 0;
  table.for_each(Millis{64'800'000}, [&](const SourceView& v) { rate = v.rate; });
  CHECK(rate == Approx(108'000'000.0));
  const SourceTable::ConnectionCheck check = table.established(node, limits, Millis{64'800'000});
  CHECK(check.over_rate);
  CHECK_FALSE(check.over_conn);
  table.release(node, true);
}

TEST_CASE("SourceTable: many addresses spread over the shards and come back", "[source][table]") {
  SourceTable table(8, SipKey{3, 4}, 100'000);
  SourceLimits limits;
  std::vector<SourceNode*> nodes;
  for (uint32_t i = 0; i < 5000; ++i) {
    SourceNode* n = nullptr;
    REQUIRE(table.admit(limits, SourceOwner{}, Family::V6, IpAddress{0x20010db8ull << 32, i}, n) ==
            SourceTable::Admission::Admitted);
    nodes.push_back(n);
  }
  CHECK(table.size() == 5000);
  for (uint32_t i = 0; i < 5000; i += 7) {
    SourceNode* n = nullptr;
    REQUIRE(table.admit(limits, SourceOwner{}, Family::V6, IpAddress{0x20010db8ull << 32, i}, n) ==
            SourceTable::Admission::Admitted);
    CHECK(n == nodes[i]);
    table.release(n, false);
  }
  for (SourceNode* n : nodes) table.release(n, false);
  CHECK(table.size() == 0);
}

TEST_CASE("flushed and killed states give their source nodes back", "[engine][limits][source]") {
  Firewall fw("pass out proto tcp keep state (max-src-conn 5, max-src-states 5)");
  CHECK(handshake(fw, Connection{"10.1.0.1", 1001}).reason == Reason::State);
  CHECK(fw.out(Connection{"10.1.0.2", 1001}.syn()).reason == Reason::Match);
  CHECK(fw.engine.sources().size() == 2);
  CHECK(fw.engine.kill_states([](const StateEntry& e) { return e.key(0).port[0] == 1001; }) == 2);
  CHECK(fw.engine.sources().size() == 0);
  CHECK(handshake(fw, Connection{"10.1.0.1", 1002}).reason == Reason::State);
  CHECK(fw.engine.flush_states() == 1);
  CHECK(fw.engine.sources().size() == 0);
  CHECK(source_nodes_of(fw, 0) == 0);
}

TEST_CASE("overload: the source that goes over a connection limit is queued for its table",
          "[engine][limits][source]") {
  Firewall fw(
      "table <bruteforce> persist {}\n"
      "block quick from <bruteforce>\n"
      "pass out proto tcp keep state (max-src-conn-rate 2/60, overload <bruteforce> flush global)\n"
      "pass out proto tcp to port 22 keep state (max-src-conn 1)\n");
  SourceOverload o;
  // The last rule has no overload: going over its limit queues nothing.
  CHECK(handshake(fw, Connection{"10.1.0.9", 1001}).reason == Reason::State);
  CHECK(handshake(fw, Connection{"10.1.0.9", 1002}).reason == Reason::SourceLimit);
  CHECK_FALSE(fw.worker.overloads().pop(o));

  fw.load(
      "table <bruteforce> persist {}\n"
      "block quick from <bruteforce>\n"
      "pass out proto tcp keep state (max-src-conn-rate 2/60, overload <bruteforce> flush global)\n");
  CHECK(handshake(fw, Connection{"10.1.0.1", 1001}).reason == Reason::State);
  CHECK(handshake(fw, Connection{"10.1.0.1", 1002}).reason == Reason::State);
  CHECK(handshake(fw, Connection{"10.1.0.1", 1003}).reason == Reason::SourceLimit);
  REQUIRE(fw.worker.overloads().pop(o));
  CHECK(std::string(o.table.data()) == "bruteforce");
  CHECK(o.rule == 1);
  CHECK(o.family == Family::V4);
  CHECK(o.address == IpAddress::v4(0x0a010001));
  CHECK(o.flush == rules::OverloadFlush::Global);
  CHECK(o.owner == fw.engine.rules()->rule(1).stats.get());
  CHECK_FALSE(fw.worker.overloads().pop(o));
  CHECK(fw.worker.overloads_queued() == 1);
  CHECK(fw.worker.overloads_lost() == 0);
}
