// Engine::process end to end with crafted packets: rule semantics across the two passes, state
// tracking per protocol, normalization, limits, the sync records, and peer records applied.
#include "daemon/engine/engine.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "daemon/engine/rules/compile.h"
#include "daemon/engine/rules/parser.h"
#include "tests/unit/engine/firewall.h"
#include "tests/unit/support/packet_builder.h"

using namespace pairwall::engine;
using pairwall::test::Bytes;
using pairwall::test::Firewall;
using pairwall::test::PacketBuilder;
using Action = Verdict::Action;

namespace {

constexpr uint16_t kClientPort = 40000;
const std::string kClient = "10.1.0.10";
const std::string kServer = "192.0.2.80";
const std::string kClient6 = "2001:db8:1::10";
const std::string kServer6 = "2001:db8:2::80";

PacketBuilder tcp4(const std::string& src, uint16_t sport, const std::string& dst, uint16_t dport) {
  PacketBuilder b;
  b.ipv4(src, dst).tcp(sport, dport);
  return b;
}

Bytes syn(uint16_t dport, uint32_t isn = 1000) {
  return tcp4(kClient, kClientPort, kServer, dport).flags(tcpflag::kSyn).seq(isn).wscale(7).build();
}
Bytes synack(uint16_t dport, uint32_t isn = 1000, uint32_t server_isn = 9000) {
  return tcp4(kServer, dport, kClient, kClientPort)
      .flags(tcpflag::kSyn | tcpflag::kAck)
      .seq(server_isn)
      .ack(isn + 1)
      .wscale(7)
      .build();
}
Bytes ack_from_client(uint16_t dport, uint32_t seq, uint32_t ack, std::size_t payload = 0) {
  return tcp4(kClient, kClientPort, kServer, dport)
      .flags(tcpflag::kAck)
      .seq(seq)
      .ack(ack)
      .window(512)
      .payload(payload)
      .build();
}
Bytes ack_from_server(uint16_t dport, uint32_t seq, uint32_t ack, std::size_t payload = 0) {
  return tcp4(kServer, dport, kClient, kClientPort)
      .flags(tcpflag::kAck)
      .seq(seq)
      .ack(ack)
      .window(512)
      .payload(payload)
      .build();
}

// A connection to port 80 from `isn` opened and closed by both ends (FIN, FIN, last ACK), each
// segment passing by its state; returns the state's id.
StateId open_and_close(Firewall& fw, uint32_t isn = 1000) {
  REQUIRE(fw.out(syn(80, isn)).action == Action::Accept);
  REQUIRE(fw.in(synack(80, isn)).reason == Reason::State);
  const auto fin = [](bool from_client, uint32_t seq, uint32_t ack) {
    auto b = from_client ? tcp4(kClient, kClientPort, kServer, 80) : tcp4(kServer, 80, kClient, kClientPort);
    return b.flags(tcpflag::kFin | tcpflag::kAck).seq(seq).ack(ack).build();
  };
  REQUIRE(fw.out(fin(true, isn + 1, 9001)).reason == Reason::State);
  REQUIRE(fw.in(fin(false, 9001, isn + 2)).reason == Reason::State);
  const Verdict last = fw.out(ack_from_client(80, isn + 2, 9002));
  REQUIRE(last.reason == Reason::State);
  return last.state;
}

constexpr const char* kWebOnly = R"(
block all
pass in on lan0 proto tcp to port { 80 443 } flags S/SA keep state
pass out on wan0 proto tcp to port { 80 443 } keep state
pass in on lan0 proto udp to port 53
pass out on wan0 proto udp to port 53
pass in on lan0 inet proto icmp icmp-type echoreq
pass out on wan0 inet proto icmp icmp-type echoreq
pass in on lan0 inet6 proto icmp6 icmp6-type echoreq
pass out on wan0 inet6 proto icmp6 icmp6-type echoreq
pass in on lan0 inet6 proto tcp to port 22
pass out on wan0 inet6 proto tcp to port 22
)";

}  // namespace

TEST_CASE("pf rule semantics over the two passes", "[engine][rules]") {
  struct Case {
    const char* name;
    const char* rules;
    bool outbound;  // lan0 -> wan0, else wan0 -> lan0
    uint16_t port;
    Action action;
    Reason reason;
    uint32_t rule;
  };
  const Case cases[] = {
      {"no rules: implicit pass", "", true, 80, Action::Accept, Reason::DefaultPass, rules::kNoRule},
      {"block all", "block all", true, 80, Action::Drop, Reason::RuleBlock, 0},
      {"last match wins", "block all\npass all no state", true, 80, Action::Accept, Reason::Match, 1},
      {"earlier block overridden only when later rule matches",
       "block all\npass proto tcp to port 81 no state", true, 80, Action::Drop, Reason::RuleBlock, 0},
      {"quick stops evaluation", "block quick proto tcp to port 80\npass all no state", true, 80,
       Action::Drop, Reason::RuleBlock, 0},
      {"quick pass beats later block", "pass quick all no state\nblock all", true, 80, Action::Accept,
       Reason::Match, 0},
      {"in pass on the arrival interface", "block in on wan0 all", false, 80, Action::Drop, Reason::RuleBlock,
       0},
      {"in pass ignores the other interface", "block in on wan0 all", true, 80, Action::Accept,
       Reason::DefaultPass, rules::kNoRule},
      {"out pass on the departure interface", "pass all no state\nblock out on wan0 proto tcp", true, 80,
       Action::Drop, Reason::RuleBlock, 1},
      {"out pass of the other direction", "pass all no state\nblock out on wan0 proto tcp", false, 80,
       Action::Accept, Reason::Match, 0},
      {"return-rst rejects", "block return-rst proto tcp all", true, 80, Action::Reject, Reason::RuleBlock,
       0},
      {"negated interface", "block in on ! lan0 all", true, 80, Action::Accept, Reason::DefaultPass,
       rules::kNoRule},
      {"negated address", "block from ! 10.1.0.0/16", true, 80, Action::Accept, Reason::DefaultPass,
       rules::kNoRule},
      {"table match", "table <clients> { 10.1.0.0/24 }\nblock from <clients>", true, 80, Action::Drop,
       Reason::RuleBlock, 0},
      {"port range", "block all\npass proto tcp to port 70:90 no state", true, 80, Action::Accept,
       Reason::Match, 1},
      {"port operator", "block all\npass proto tcp to port > 1024 no state", true, 80, Action::Drop,
       Reason::RuleBlock, 0},
      {"inet6 rule does not match v4", "block inet6 all", true, 80, Action::Accept, Reason::DefaultPass,
       rules::kNoRule},
  };
  for (const auto& c : cases) {
    SECTION(c.name) {
      Firewall fw(c.rules);
      const Bytes packet = c.outbound
                               ? tcp4(kClient, kClientPort, kServer, c.port).flags(tcpflag::kSyn).build()
                               : tcp4(kServer, c.port, kClient, kClientPort).flags(tcpflag::kSyn).build();
      const Verdict v = c.outbound ? fw.out(packet) : fw.in(packet);
      CHECK(v.action == c.action);
      CHECK(reason_name(v.reason) == reason_name(c.reason));
      CHECK(v.rule == c.rule);
    }
  }
}

TEST_CASE("block replies: return-rst for TCP, return for both, never to a reset", "[engine][rules]") {
  struct Case {
    const char* rules;
    Bytes packet;
    Action action;
    rules::BlockReply reply;
  };
  const Bytes udp = PacketBuilder().ipv4(kClient, kServer).udp(1, 2).build();
  const Bytes tcp = syn(80);
  const Bytes rst = tcp4(kClient, 1, kServer, 2).flags(tcpflag::kRst).build();
  const auto v4_icmp = [](uint8_t type) { return PacketBuilder().ipv4(kClient, kServer).icmp(type, 0); };
  const auto v6_icmp = [](uint8_t type) { return PacketBuilder().ipv6(kClient6, kServer6).icmp(type, 0); };
  const Case cases[] = {
      {"block return-rst proto tcp all", tcp, Action::Reject, rules::BlockReply::ReturnRst},
      {"block return-rst proto tcp all", rst, Action::Drop, rules::BlockReply::Drop},
      {"block return-icmp all", udp, Action::Reject, rules::BlockReply::ReturnIcmp},
      {"block return all", tcp, Action::Reject, rules::BlockReply::ReturnRst},
      {"block return all", udp, Action::Reject, rules::BlockReply::ReturnIcmp},
      {"block drop all", tcp, Action::Drop, rules::BlockReply::Drop},
      {"block all", tcp, Action::Drop, rules::BlockReply::Drop},
      // set block-policy return: a block rule that names no reply is `block return`.
      {"set block-policy return\nblock all", tcp, Action::Reject, rules::BlockReply::ReturnRst},
      {"set block-policy return\nblock all", udp, Action::Reject, rules::BlockReply::ReturnIcmp},
      {"set block-policy return\nblock drop all", tcp, Action::Drop, rules::BlockReply::Drop},
      {"set block-policy return\nblock return-icmp all", tcp, Action::Reject, rules::BlockReply::ReturnIcmp},
      {"set block-policy drop\nblock all", udp, Action::Drop, rules::BlockReply::Drop},
      // ICMP: a query or its reply is answered, as pf answers ICMP_INFOTYPE and ICMPv6 from 128 on
      // but redirects; an error (every ICMPv6 type below 128 is one) or a redirect never is.
      {"block return all", v4_icmp(8).build(), Action::Reject, rules::BlockReply::ReturnIcmp},
      {"block return all", v4_icmp(0).build(), Action::Reject, rules::BlockReply::ReturnIcmp},
      {"block return all", v4_icmp(13).payload(12).build(), Action::Reject, rules::BlockReply::ReturnIcmp},
      {"block return all", v4_icmp(10).build(), Action::Reject, rules::BlockReply::ReturnIcmp},
      {"block return all", v4_icmp(3).icmp_error(3, 3, udp).build(), Action::Drop, rules::BlockReply::Drop},
      {"block return all", v4_icmp(31).build(), Action::Drop, rules::BlockReply::Drop},
      {"block return all", v4_icmp(40).build(), Action::Drop, rules::BlockReply::Drop},
      {"block return all", v4_icmp(6).build(), Action::Drop, rules::BlockReply::Drop},
      {"block return all", v6_icmp(128).build(), Action::Reject, rules::BlockReply::ReturnIcmp},
      {"block return all", v6_icmp(139).build(), Action::Reject, rules::BlockReply::ReturnIcmp},
      {"block return all", v6_icmp(100).build(), Action::Drop, rules::BlockReply::Drop},
      {"block return all", v6_icmp(127).build(), Action::Drop, rules::BlockReply::Drop},
      {"block return all", v6_icmp(137).ttl(255).payload(32).build(), Action::Drop, rules::BlockReply::Drop},
  };
  for (const auto& c : cases) {
    INFO(c.rules << ", case " << (&c - cases));
    Firewall fw(c.rules);
    const Verdict v = fw.out(c.packet);
    CHECK(v.reason == Reason::RuleBlock);
    CHECK(v.action == c.action);
    CHECK(v.reply == c.reply);
  }
}

TEST_CASE("block return leaves a packet to or from a network's broadcast address unanswered",
          "[engine][rules]") {
  // RFC 1122 3.2.2: every host of the network would hear the answer. The host's networks as the
  // rules were loaded with them: lan0 10.1.0.0/24, wan0 192.0.2.0/24 and a /31 link, which has no
  // broadcast address (RFC 3021).
  Firewall fw("pass all\n");
  rules::InterfaceAddresses host;
  const auto v4 = [](const char* text, uint8_t length) {
    rules::InterfaceAddress a;
    a.address = *parse_address(text, &a.family);
    a.prefix_length = length;
    return a;
  };
  host["lan0"] = {v4("10.1.0.1", 24)};
  host["wan0"] = {v4("192.0.2.1", 24)};
  host["p2p0"] = {v4("198.51.100.0", 31)};
  auto parsed = rules::parse_rules("block return all\n", "t.conf");
  auto& file = std::get<rules::RuleFile>(parsed);
  REQUIRE_FALSE(rules::resolve_interfaces(file, host));
  auto compiled = rules::compile(file, fw.engine.interfaces());
  fw.engine.load_rules(std::get<std::shared_ptr<const rules::RuleSet>>(compiled));

  const auto udp = [](const std::string& src, const std::string& dst) {
    return PacketBuilder().ipv4(src, dst).udp(137, 137).payload(50).build();
  };
  const Verdict name_query = fw.out(udp(kClient, "10.1.0.255"));
  CHECK(name_query.reason == Reason::RuleBlock);
  CHECK(name_query.action == Action::Drop);
  CHECK(fw.out(udp(kClient, "192.0.2.255")).action == Action::Drop);
  CHECK(fw.in(udp("10.1.0.255", kClient)).action ==
        Action::Drop);  // a forged source: the answer's destination
  CHECK(fw.out(tcp4(kClient, 40000, "192.0.2.255", 80).build()).action == Action::Drop);
  // A host's own address, and the /31's ends, are answered.
  CHECK(fw.out(udp(kClient, "10.1.0.20")).action == Action::Reject);
  CHECK(fw.out(udp(kClient, "198.51.100.1")).action == Action::Reject);
  CHECK(fw.out(tcp4(kClient, 40000, kServer, 80).build()).action == Action::Reject);
}

TEST_CASE("return-icmp codes: written per family, by name or number, and listed as written",
          "[engine][rules]") {
  Firewall fw(
      "block return-icmp(host-unr, admin-unr) in on lan0 proto udp to port 53\n"
      "block return-icmp(13) in on lan0 proto udp to port 54\n"
      "block return-icmp6(addr-unr) in on lan0 proto udp to port 55\n"
      "block return-icmp in on lan0 proto udp to port 56\n");
  const auto& rules = *fw.engine.rules();
  CHECK(rules.rule(0).text ==
        "block return-icmp(host-unr, admin-unr) in on lan0 proto udp from any to any port 53");
  CHECK(rules.rule(1).text ==
        "block return-icmp(filter-prohib) in on lan0 proto udp from any to any port 54");
  CHECK(rules.rule(2).text == "block return-icmp6(addr-unr) in on lan0 proto udp from any to any port 55");
  CHECK(rules.rule(3).text == "block return-icmp in on lan0 proto udp from any to any port 56");
  struct Case {
    bool v6;
    uint16_t port;
    int16_t code;
  };
  for (const Case c : {Case{false, 53, 1}, Case{true, 53, 1}, Case{false, 54, 13}, Case{true, 54, -1},
                       Case{false, 55, -1}, Case{true, 55, 3}, Case{false, 56, -1}, Case{true, 56, -1}}) {
    CAPTURE(c.v6, c.port);
    PacketBuilder b;
    if (c.v6) {
      b.ipv6(kClient6, kServer6);
    } else {
      b.ipv4(kClient, kServer);
    }
    const Verdict v = fw.out(b.udp(5000, c.port).payload(8).build());
    CHECK(v.action == Action::Reject);
    CHECK(v.reply == rules::BlockReply::ReturnIcmp);
    CHECK(v.reply_code == c.code);
  }
}

TEST_CASE("return-rst (ttl N): the reset's TTL travels with the verdict and the listing", "[engine][rules]") {
  Firewall fw(
      "block return-rst (ttl 7) in on lan0 proto tcp to port 81\n"
      "block return-rst in on lan0 proto tcp to port 82\n"
      "block return in on lan0 proto tcp to port 83\n");
  const auto& rules = *fw.engine.rules();
  CHECK(rules.rule(0).text == "block return-rst (ttl 7) in on lan0 proto tcp from any to any port 81");
  CHECK(rules.rule(1).text == "block return-rst in on lan0 proto tcp from any to any port 82");
  for (const auto& [port, ttl] : {std::pair{81, 7}, std::pair{82, 0}, std::pair{83, 0}}) {
    CAPTURE(port);
    const Verdict v = fw.out(syn(static_cast<uint16_t>(port)));
    CHECK(v.action == Action::Reject);
    CHECK(v.reply == rules::BlockReply::ReturnRst);
    CHECK(v.reply_ttl == ttl);
  }
}

TEST_CASE("TCP connection passes by state in both directions; unsolicited replies do not", "[engine][tcp]") {
  Firewall fw(kWebOnly);
  Verdict v = fw.out(syn(80));
  REQUIRE(v.action == Action::Accept);
  CHECK(v.reason == Reason::Match);
  CHECK(v.rule == 1);
  CHECK(v.state.counter != 0);
  CHECK(fw.engine.states().size() == 1);

  CHECK(fw.in(synack(80)).reason == Reason::State);
  CHECK(fw.out(ack_from_client(80, 1001, 9001)).reason == Reason::State);
  CHECK(fw.out(ack_from_client(80, 1001, 9001, 1000)).reason == Reason::State);
  CHECK(fw.in(ack_from_server(80, 9001, 2001, 1400)).reason == Reason::State);

  SECTION("out-of-window data is dropped with its own reason") {
    const Verdict bad = fw.in(ack_from_server(80, 9001 + 50'000'000, 2001, 100));
    CHECK(bad.action == Action::Drop);
    CHECK(bad.reason == Reason::BadSeq);
    CHECK(fw.worker.counters().get(Reason::BadSeq) == 1);
  }
  SECTION("a reply from a port with no state meets the rules") {
    CHECK(fw.in(synack(443)).reason == Reason::RuleBlock);
  }
  SECTION("a port the rules block") {
    const Verdict blocked = fw.out(syn(25));
    CHECK(blocked.action == Action::Drop);
    CHECK(blocked.reason == Reason::RuleBlock);
    CHECK(blocked.rule == 0);
  }
  SECTION("flags S/SA: a stray ACK cannot create a state") {
    CHECK(fw.out(tcp4(kClient, 40001, kServer, 80).flags(tcpflag::kAck).build()).reason == Reason::RuleBlock);
  }
}

TEST_CASE("a stateful pass rule without flags starts TCP states from a SYN only, as pf's default S/SA",
          "[engine][tcp]") {
  const Bytes stray_ack = tcp4(kClient, 40001, kServer, 80).flags(tcpflag::kAck).seq(5000).ack(7000).build();
  SECTION("a rule for TCP") {
    Firewall fw("block all\npass in on lan0 proto tcp\npass out on wan0 proto tcp\n");
    CHECK(fw.out(stray_ack).reason == Reason::RuleBlock);
    CHECK(fw.out(syn(80)).reason == Reason::Match);
    CHECK(fw.in(synack(80)).reason == Reason::State);
  }
  SECTION("a rule for every protocol: TCP's packets need the SYN, the others pass as before") {
    Firewall fw("block all\npass in on lan0 all keep state\npass out on wan0 all keep state\n");
    CHECK(fw.out(stray_ack).reason == Reason::RuleBlock);
    CHECK(fw.out(syn(80)).reason == Reason::Match);
    CHECK(fw.out(PacketBuilder().ipv4(kClient, kServer).udp(5000, 53).payload(8).build()).reason ==
          Reason::Match);
    CHECK(fw.out(PacketBuilder().ipv4(kClient, kServer).icmp_echo(7, 1).build()).reason == Reason::Match);
    CHECK(fw.engine.states().size() == 3);
  }
  SECTION("flags any picks up a connection mid-stream, and a rule without state checks no flags") {
    Firewall any("block all\npass in on lan0 proto tcp flags any\npass out on wan0 proto tcp flags any\n");
    CHECK(any.out(stray_ack).reason == Reason::Match);
    CHECK(any.engine.states().size() == 1);
    Firewall stateless(
        "block all\npass in on lan0 proto tcp no state\npass out on wan0 proto tcp no state\n");
    CHECK(stateless.out(stray_ack).reason == Reason::Match);
    CHECK(stateless.engine.states().size() == 0);
  }
}

TEST_CASE("keep state (sloppy): no window checks, one direction is enough, and the peer tracks alike",
          "[engine][tcp][sloppy]") {
  Firewall fw(
      "block all\npass in on lan0 proto tcp keep state (sloppy)\npass out on wan0 proto tcp keep state "
      "(sloppy)\n"
      "pass in on lan0 proto tcp to port 443\npass out on wan0 proto tcp to port 443\n");
  CHECK(fw.engine.rules()->rule(1).text == "pass in on lan0 proto tcp all flags S/SA keep state (sloppy)");
  // Only the client's half crosses this node: SYN, then its ACK and data.
  REQUIRE(fw.out(syn(80)).reason == Reason::Match);
  CHECK(fw.out(ack_from_client(80, 1001, 9001)).reason == Reason::State);
  CHECK(fw.out(ack_from_client(80, 1001, 9001, 1000)).reason == Reason::State);
  // Out of any window: the sloppy state passes it where a full one drops it.
  CHECK(fw.in(ack_from_server(80, 9001 + 50'000'000, 2001, 100)).reason == Reason::State);
  REQUIRE(fw.out(syn(443)).reason == Reason::Match);
  REQUIRE(fw.in(synack(443)).reason == Reason::State);
  CHECK(fw.in(ack_from_server(443, 9001 + 50'000'000, 1001, 100)).reason == Reason::BadSeq);
  // A router's "fragmentation needed" quoting the client's data far past the SYN: a sloppy state
  // has no window to hold the quote against, so the error passes (path MTU discovery keeps
  // working); a full state checks it.
  auto frag_needed = [](const Bytes& quote) {
    return PacketBuilder().ipv4("198.51.100.1", kClient).icmp_error(3, 4, quote).build();
  };
  CHECK(fw.in(frag_needed(ack_from_client(80, 1001 + 5'000'000, 9001, 1000))).reason == Reason::State);
  CHECK(fw.in(frag_needed(ack_from_client(443, 1001 + 5'000'000, 9001, 1000))).reason == Reason::BadSeq);

  // The flag travels with the state's insert: the peer tracks it sloppily too.
  const auto records = fw.drain();
  const auto sloppy_insert = std::find_if(records.begin(), records.end(), [](const StateRecord& r) {
    return r.kind == StateRecord::Kind::Insert && (r.flags & stateflag::kSloppy) != 0;
  });
  REQUIRE(sloppy_insert != records.end());
  Firewall peer("block all\n", 2);
  REQUIRE(peer.engine.apply(*sloppy_insert, peer.now));
  CHECK(peer.out(ack_from_client(80, 1001 + 70'000'000, 9001)).reason == Reason::State);
}

// pf's loose branch passes stragglers after a close that the strict window test would drop, but
// does not renew the state's life: a flood of them cannot keep it.
TEST_CASE("packets of the loose branch after a close pass without keeping the state alive", "[engine][tcp]") {
  Firewall fw(std::string("set timeout { tcp.closing 10, tcp.finwait 10, tcp.closed 10 }\n") + kWebOnly);
  auto fin = [](bool from_client, uint32_t seq, uint32_t ack) {
    auto b = from_client ? tcp4(kClient, kClientPort, kServer, 80) : tcp4(kServer, 80, kClient, kClientPort);
    return b.flags(tcpflag::kFin | tcpflag::kAck).seq(seq).ack(ack).window(512).build();
  };
  REQUIRE(fw.out(syn(80)).reason == Reason::Match);
  REQUIRE(fw.in(synack(80)).reason == Reason::State);
  REQUIRE(fw.out(ack_from_client(80, 1001, 9001)).reason == Reason::State);
  REQUIRE(fw.out(fin(true, 1001, 9001)).reason == Reason::State);
  REQUIRE(fw.in(fin(false, 9001, 1002)).reason == Reason::State);
  REQUIRE(fw.out(ack_from_client(80, 1002, 9002)).reason == Reason::State);
  const Millis closed_at = fw.now;
  // Six seconds on, an ACK acking far beyond anything sent: only the loose branch passes it.
  fw.now = closed_at + Millis{6'000};
  CHECK(fw.out(ack_from_client(80, 1002, 9002 + 1'000'000)).reason == Reason::State);
  CHECK(fw.out(ack_from_client(80, 1002, 9002 + 1'000'000)).reason == Reason::State);
  // The state still ends ten seconds after the close.
  CHECK(fw.engine.expire(closed_at + Millis{9'999}) == 0);
  CHECK(fw.engine.expire(closed_at + Millis{10'000}) == 1);
}

// As pf's: flags on a rule that names no protocol (pfctl -sr prints `pass in all flags S/SA` for a
// plain `pass in all`) test TCP packets and leave the others to the rule's other fields.
TEST_CASE("flags on a rule of any protocol test TCP packets alone", "[engine][tcp]") {
  Firewall fw("block all\npass in on lan0 all flags S/SA no state\npass out on wan0 all no state\n");
  CHECK(fw.out(PacketBuilder().ipv4(kClient, kServer).udp(5353, 53).build()).reason == Reason::Match);
  CHECK(fw.out(syn(80)).reason == Reason::Match);
  CHECK(fw.out(ack_from_client(80, 1001, 9001)).reason == Reason::RuleBlock);
}

TEST_CASE("no state: replies must pass the rules themselves", "[engine][tcp]") {
  Firewall fw("block all\npass out on wan0 proto tcp no state\npass in on lan0 proto tcp no state");
  CHECK(fw.out(syn(80)).reason == Reason::Match);
  CHECK(fw.engine.states().size() == 0);
  CHECK(fw.in(synack(80)).reason == Reason::RuleBlock);
}

TEST_CASE("a closed connection's ports can be reused by a new SYN", "[engine][tcp]") {
  Firewall fw(kWebOnly);
  const StateId old_id = open_and_close(fw);
  const Verdict again = fw.out(syn(80, 777777));
  CHECK(again.reason == Reason::Match);
  CHECK_FALSE(again.state == old_id);
  CHECK(fw.engine.states().size() == 1);
}

TEST_CASE("a closed connection's ports can be reused by the other end's SYN too", "[engine][tcp]") {
  // As pf_test_state_tcp: a SYN on a closed state makes way for a new connection whichever end
  // sends it, and the rules decide that connection. Tracked by the old state, it passed without
  // the rules wherever the old windows took it in, and then lived by the old state's timeout.
  // The server opens a connection to the client on the same two ports.
  const Bytes reversed = tcp4(kServer, 80, kClient, kClientPort).flags(tcpflag::kSyn).seq(12345).build();

  Firewall open("pass all");
  const StateId old_id = open_and_close(open);
  const Verdict v = open.in(reversed);
  CHECK(v.reason == Reason::Match);
  CHECK_FALSE(v.state == old_id);
  CHECK(open.engine.states().size() == 1);
  CHECK(open.out(tcp4(kClient, kClientPort, kServer, 80)
                     .flags(tcpflag::kSyn | tcpflag::kAck)
                     .seq(4444)
                     .ack(12346)
                     .build())
            .reason == Reason::State);

  Firewall web(kWebOnly);
  open_and_close(web);
  CHECK(web.in(reversed).reason == Reason::RuleBlock);

  // Behind nat, the server's SYN to the outside address is not the inside host's connection: it
  // is not translated to the inside host by the closed state.
  Firewall nat("nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\npass all");
  REQUIRE(nat.out(syn(80)).action == Action::Accept);
  const uint16_t port = pairwall::test::get16(nat.last_packet, 20);
  const auto from_server = [&](uint8_t flags, uint32_t seq, uint32_t ack) {
    return tcp4(kServer, 80, "203.0.113.1", port).flags(flags).seq(seq).ack(ack).build();
  };
  const auto from_client = [&](uint8_t flags, uint32_t seq, uint32_t ack) {
    return tcp4(kClient, kClientPort, kServer, 80).flags(flags).seq(seq).ack(ack).build();
  };
  REQUIRE(nat.in(tcp4(kServer, 80, "203.0.113.1", port)
                     .flags(tcpflag::kSyn | tcpflag::kAck)
                     .seq(9000)
                     .ack(1001)
                     .wscale(7)
                     .build())
              .reason == Reason::State);
  REQUIRE(nat.out(from_client(tcpflag::kFin | tcpflag::kAck, 1001, 9001)).reason == Reason::State);
  REQUIRE(nat.in(from_server(tcpflag::kFin | tcpflag::kAck, 9001, 1002)).reason == Reason::State);
  REQUIRE(nat.out(from_client(tcpflag::kAck, 1002, 9002)).reason == Reason::State);
  const Bytes inbound = from_server(tcpflag::kSyn, 12345, 0);
  CHECK(nat.in(inbound).reason == Reason::Match);
  CHECK(nat.last_packet == inbound);
}

// pf_test_state's challenge ACK: a client that rebooted connects again from the same port (an NFS
// client's) while the firewall still holds its old connection, established for a day more.
TEST_CASE("a SYN on an established connection is answered with a challenge ACK, whose reset frees the ports",
          "[engine][tcp]") {
  for (const bool modulated : {false, true}) {
    INFO((modulated ? "modulate state" : "keep state"));
    Firewall fw(modulated ? "block all\npass all modulate state\n" : kWebOnly);
    REQUIRE(fw.out(syn(80)).action == Action::Accept);
    const uint32_t client_shift = pairwall::test::get32(fw.last_packet, 24) - 1000;
    REQUIRE(fw.in(synack(80, 1000 + client_shift)).reason == Reason::State);
    const uint32_t server_shift = pairwall::test::get32(fw.last_packet, 24) - 9000;
    CHECK((server_shift != 0) == modulated);
    REQUIRE(fw.out(ack_from_client(80, 1001, 9001 + server_shift, 100)).reason == Reason::State);
    REQUIRE(fw.in(ack_from_server(80, 9001, 1101 + client_shift, 200)).reason == Reason::State);

    const Verdict again = fw.out(syn(80, 555555));
    CHECK(again.action == Action::Drop);
    CHECK(again.reason == Reason::StateMismatch);
    // In the server's name, to the client: the server's next sequence number as the client knows
    // it, and the client's own.
    const auto made = fw.worker.generated(again);
    REQUIRE(made.size() == 1);
    CHECK(Bytes(made[0].datagram().begin(), made[0].datagram().end()) ==
          tcp4(kServer, 80, kClient, kClientPort)
              .df()
              .ip_id(0)
              .ttl(kGeneratedTtl)
              .flags(tcpflag::kAck)
              .seq(9201 + server_shift)
              .ack(1101)
              .window(0)
              .build());
    // The rebooted client answers it with a reset, which closes the state; its next SYN opens a new one.
    CHECK(fw.out(tcp4(kClient, kClientPort, kServer, 80).flags(tcpflag::kRst).seq(1101).build()).reason ==
          Reason::State);
    CHECK(fw.out(syn(80, 555555)).reason == Reason::Match);
  }
}

TEST_CASE("port reuse gives the old state's place back to its rule's (max N)", "[engine][tcp][limits]") {
  Firewall fw("pass all keep state (max 1)");
  const auto current = [&] { return fw.engine.rules()->rule(0).stats->states_current.load(); };
  for (uint32_t isn : {1000u, 777777u, 5555555u}) {
    INFO("connection with isn " << isn);
    open_and_close(fw, isn);  // each SYN takes the closed state's place
    CHECK(current() == 1);
  }
  CHECK(fw.engine.states().size() == 1);
  CHECK(current() == 1);
  CHECK(fw.worker.counters().get(Reason::RuleStateLimit) == 0);
  fw.engine.expire(fw.now + Millis{1'000'000});
  CHECK(current() == 0);
}

TEST_CASE("a rule's counters take in its states' packets, within a second and at the state's end",
          "[engine][counters]") {
  Firewall fw("pass out on wan0 proto udp\n");
  const Bytes query = PacketBuilder().ipv4(kClient, kServer).udp(5353, 53).payload(40).build();
  const Bytes answer = PacketBuilder().ipv4(kServer, kClient).udp(53, 5353).payload(100).build();
  const auto& stats = *fw.engine.rules()->rule(0).stats;
  REQUIRE(fw.out(query).reason == Reason::Match);
  CHECK(stats.packets == 1);
  CHECK(stats.bytes == query.size());
  REQUIRE(fw.in(answer).reason == Reason::State);
  REQUIRE(fw.out(query).reason == Reason::State);
  fw.now += Millis{1'500};
  REQUIRE(fw.in(answer).reason == Reason::State);
  CHECK(stats.packets == 4);
  CHECK(stats.bytes == 2 * query.size() + 2 * answer.size());
  REQUIRE(fw.out(query).reason == Reason::State);
  CHECK(fw.engine.expire(fw.now + Millis{1'000'000}) == 1);
  CHECK(stats.packets == 5);
  CHECK(stats.bytes == 3 * query.size() + 2 * answer.size());
  CHECK(stats.evaluations == 1);
}

// pfctl -z: a state's packets from before the rules' counters were zeroed do not fold in after it.
TEST_CASE("zeroed rule counters take in only the state packets that come after", "[engine][counters]") {
  Firewall fw("nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\npass out on wan0 proto udp\n");
  const Bytes query = PacketBuilder().ipv4(kClient, kServer).udp(5353, 53).payload(40).build();
  const auto& stats = *fw.engine.rules()->rule(0).stats;
  const auto& nat_stats = *fw.engine.rules()->translation_rules()[0].stats;
  REQUIRE(fw.out(query).reason == Reason::Match);
  REQUIRE(fw.out(query).reason == Reason::State);
  REQUIRE(fw.out(query).reason == Reason::State);
  REQUIRE(nat_stats.packets >= 1);

  CHECK(fw.engine.zero_rule_counters() == 2);
  CHECK(stats.packets == 0);
  CHECK(stats.evaluations == 0);
  CHECK(nat_stats.packets == 0);
  CHECK(fw.engine.rules()->rule(0).stats->states_current == 1);
  // The two packets the state passed before the zero are not folded in at its end; the one after is.
  REQUIRE(fw.out(query).reason == Reason::State);
  CHECK(fw.engine.expire(fw.now + Millis{1'000'000}) == 1);
  CHECK(stats.packets == 1);
  CHECK(stats.bytes == query.size());
  CHECK(nat_stats.packets == 1);
}

// pfctl -a NAME -z: the anchor's rules count afresh; the translation rules of their states, whose
// counters stay, still take in those states' earlier packets, and other rules' states are left.
TEST_CASE("zeroing one anchor's rule counters leaves its states' translations and other rules counting",
          "[engine][counters]") {
  Firewall fw(
      "nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\n"
      "anchor \"a\" {\n pass out on wan0 proto udp to port 53\n}\n"
      "pass out on wan0 proto udp to port 123\n");
  const auto& dns = *fw.engine.rules()->rule(0).stats;
  const auto& ntp = *fw.engine.rules()->rule(1).stats;
  const auto& nat = *fw.engine.rules()->translation_rules()[0].stats;
  const Bytes query = PacketBuilder().ipv4(kClient, kServer).udp(5353, 53).payload(40).build();
  const Bytes time = PacketBuilder().ipv4(kClient, kServer).udp(5353, 123).payload(40).build();
  // Three packets a flow: the first counted as the rules decide it, the second folded in as its
  // state moves to udp.single's queue, the third waiting for a fold.
  for (int i = 0; i < 3; ++i) {
    REQUIRE(fw.out(query).action == Verdict::Action::Accept);
    REQUIRE(fw.out(time).action == Verdict::Action::Accept);
  }
  REQUIRE(dns.packets == 2);
  REQUIRE(ntp.packets == 2);
  REQUIRE(nat.packets == 4);

  CHECK(fw.engine.zero_rule_counters("a") == 1);
  CHECK(dns.packets == 0);
  CHECK(nat.packets == 5);  // the dns state's third packet, owed to the nat rule still
  CHECK(fw.engine.expire(fw.now + Millis{1'000'000}) == 2);
  CHECK(dns.packets == 0);  // its state's third packet came before the zero
  CHECK(ntp.packets == 3);
  CHECK(nat.packets == 6);
}

// One packet of a traffic mix, with where the kernel saw it.
struct Sent {
  Bytes bytes;
  Hook hook = Hook::Forward;
  bool outbound = true;  // Forward: lan0 -> wan0, else wan0 -> lan0; Input/Output: on lan0
};

PacketMeta meta_of(const Sent& sent, const Firewall& fw) {
  const IfaceId from = sent.outbound ? fw.lan : fw.wan;
  const IfaceId to = sent.outbound ? fw.wan : fw.lan;
  switch (sent.hook) {
    case Hook::Forward:
      return PacketMeta{Hook::Forward, from, to, false};
    case Hook::Input:
      return PacketMeta{Hook::Input, fw.lan, kNoIface, false};
    case Hook::Output:
      return PacketMeta{Hook::Output, kNoIface, fw.lan, false};
    case Hook::Prerouting:
      return PacketMeta{Hook::Prerouting, from, kNoIface, false};
  }
  return {};
}

// Two firewalls with the same rules and the same hash key: one sees the traffic packet by packet,
// the other in batches larger and smaller than a prefetch group. Every verdict, the states, the
// counters and the rules' statistics must agree.
void check_batched_like_single(const std::string& rules, const std::vector<Sent>& traffic) {
  Firewall single(rules);
  Firewall batched(rules);
  std::vector<Verdict> expected;
  for (const Sent& sent : traffic) {
    Bytes copy = sent.bytes;
    expected.push_back(single.engine.process(single.worker, copy, meta_of(sent, single), single.now));
  }

  std::vector<Bytes> buffers;
  for (const Sent& sent : traffic) buffers.push_back(sent.bytes);
  std::size_t at = 0;
  for (const std::size_t size :
       {std::size_t{1}, std::size_t{7}, std::size_t{64}, std::size_t{3}, buffers.size()}) {
    if (at >= buffers.size()) break;
    const std::size_t n = std::min(size, buffers.size() - at);
    std::vector<BatchPacket> batch(n);
    for (std::size_t i = 0; i < n; ++i) {
      batch[i].bytes = buffers[at + i];
      batch[i].meta = meta_of(traffic[at + i], batched);
    }
    batched.engine.process_batch(batched.worker, batch, batched.now);
    for (std::size_t i = 0; i < n; ++i) {
      INFO("packet " << at + i);
      CHECK(batch[i].verdict.action == expected[at + i].action);
      CHECK(batch[i].verdict.reason == expected[at + i].reason);
      CHECK(batch[i].verdict.rule == expected[at + i].rule);
      CHECK(batch[i].verdict.state.counter == expected[at + i].state.counter);
    }
    at += n;
  }
  REQUIRE(at == buffers.size());
  CHECK(batched.engine.states().size() == single.engine.states().size());
  CHECK(batched.worker.packets() == single.worker.packets());
  for (std::size_t r = 0; r < kReasonCount; ++r) {
    CHECK(batched.worker.counters().get(static_cast<Reason>(r)) ==
          single.worker.counters().get(static_cast<Reason>(r)));
  }
  const auto single_rules = single.engine.rules();
  const auto batched_rules = batched.engine.rules();
  for (uint32_t r = 0; r < single_rules->size(); ++r) {
    INFO("rule " << r);
    CHECK(batched_rules->rule(r).stats->evaluations.load() ==
          single_rules->rule(r).stats->evaluations.load());
    CHECK(batched_rules->rule(r).stats->states_created.load() ==
          single_rules->rule(r).stats->states_created.load());
  }
  for (std::size_t r = 0; r < single_rules->scrub_listing().size(); ++r) {
    INFO("scrub rule " << r);
    const auto& single_scrub = *single_rules->scrub_listing()[r].stats;
    const auto& batched_scrub = *batched_rules->scrub_listing()[r].stats;
    CHECK(batched_scrub.packets.load() == single_scrub.packets.load());
    CHECK(batched_scrub.bytes.load() == single_scrub.bytes.load());
  }
}

TEST_CASE("process_batch decides each packet as process() would, in order", "[engine][batch]") {
  // Within a batch a packet sees the states the packets before it created or changed: here the
  // reply of a connection often travels in the same group as its first packet.
  std::vector<Sent> traffic;
  for (uint16_t i = 0; i < 40; ++i) {
    const uint16_t port = static_cast<uint16_t>(kClientPort + i);
    const uint16_t dport = i % 5 == 0 ? 25 : 80;  // some blocked
    const uint32_t isn = 1000u + i * 100'000u;
    traffic.push_back({tcp4(kClient, port, kServer, dport).flags(tcpflag::kSyn).seq(isn).build()});
    traffic.push_back({tcp4(kServer, dport, kClient, port)
                           .flags(tcpflag::kSyn | tcpflag::kAck)
                           .seq(9000)
                           .ack(isn + 1)
                           .build(),
                       Hook::Forward, false});
    traffic.push_back(
        {tcp4(kClient, port, kServer, dport).flags(tcpflag::kAck).seq(isn + 1).ack(9001).build()});
    traffic.push_back(
        {tcp4(kClient, port, kServer, dport).flags(tcpflag::kAck).seq(isn + 90'000'000).ack(9001).build()});
  }
  traffic.push_back({Bytes{0x45, 0x00}});  // malformed
  traffic.push_back({PacketBuilder().ipv4("198.51.100.1", kClient).icmp_error(3, 4, traffic[0].bytes).build(),
                     Hook::Forward, false});
  check_batched_like_single(kWebOnly, traffic);
}

TEST_CASE("process_batch: new flows of a group meet the rules together, in packet order", "[engine][batch]") {
  // Datagrams of one new flow back to back (the second belongs to the state the first creates),
  // flows blocked on the in or the out pass, a rule's state limit reached inside a group, local
  // traffic with one pass only, and an ICMP error quoting a state created in the same group.
  const std::string rules = R"(
block all
pass in on lan0 proto udp to port 53 keep state (max 5)
pass out on wan0 proto udp to port 53
block out on wan0 proto udp to 192.0.2.99
pass in on lan0 proto tcp to port 22
pass out on lan0 proto udp to port 514
pass in on lan0 inet proto icmp icmp-type echoreq
pass out on wan0 inet proto icmp icmp-type echoreq
)";
  std::vector<Sent> traffic;
  for (uint16_t i = 0; i < 12; ++i) {
    const auto port = static_cast<uint16_t>(kClientPort + i);
    const std::string server = i % 4 == 3 ? "192.0.2.99" : kServer;
    const Bytes query = PacketBuilder().ipv4(kClient, server).udp(port, 53).payload(30).build();
    traffic.push_back({query});
    traffic.push_back({query});
    traffic.push_back(
        {PacketBuilder().ipv4(server, kClient).udp(53, port).payload(90).build(), Hook::Forward, false});
    traffic.push_back(
        {PacketBuilder().ipv4(kServer, kClient).icmp_error(3, 3, query).build(), Hook::Forward, false});
    traffic.push_back(
        {tcp4(kClient, port, "10.1.0.1", 22).flags(tcpflag::kSyn).seq(77).build(), Hook::Input});
    traffic.push_back(
        {PacketBuilder().ipv4("10.1.0.1", kClient).udp(514, 514).payload(10).build(), Hook::Output});
    traffic.push_back({PacketBuilder().ipv4(kClient, kServer).icmp_echo(i, 1).build()});
    traffic.push_back({PacketBuilder().ipv6(kClient6, kServer6).udp(port, 53).payload(20).build()});
  }
  check_batched_like_single(rules, traffic);
}

TEST_CASE("probability: a rule decides its share of new flows, in process() and process_batch() alike",
          "[engine][batch][probability]") {
  // One datagram a flow, so that every packet meets the rules; the worker's draws are seeded, and
  // both ways of processing draw in packet order, in pass then out pass.
  const std::string rules = R"(
block all
pass in on lan0 proto udp to port 53
pass out on wan0 proto udp to port 53 probability 0.5
block in quick on lan0 proto udp to port 53 probability 30%
)";
  std::vector<Sent> traffic;
  for (uint16_t i = 0; i < 400; ++i) {
    const auto port = static_cast<uint16_t>(kClientPort + i);
    traffic.push_back({PacketBuilder().ipv4(kClient, kServer).udp(port, 53).payload(30).build()});
  }
  check_batched_like_single(rules, traffic);

  Firewall fw(rules);
  std::map<uint32_t, int> decided;
  for (const Sent& sent : traffic) {
    Bytes copy = sent.bytes;
    const Verdict v = fw.engine.process(fw.worker, copy, meta_of(sent, fw), fw.now);
    ++decided[v.rule];
    CHECK((v.action == Verdict::Action::Accept) == (v.rule == 1));
  }
  // In 30 % (120 of 400, sd 9.2) the quick block decides; of the rest, the out pass's pass rule in
  // half (140, sd 8.4), and the flow passes with the in pass's rule as the state's; `block all`
  // blocks the other half on the out pass.
  CHECK(decided.size() == 3);
  CHECK(decided[3] > 80);
  CHECK(decided[3] < 160);
  CHECK(decided[1] > 100);
  CHECK(decided[1] < 180);
  CHECK(decided[0] + decided[1] + decided[3] == 400);
  const auto set = fw.engine.rules();
  CHECK(set->rule(2).stats->evaluations.load() == static_cast<uint64_t>(decided[1]));
  CHECK(set->rule(3).stats->evaluations.load() == static_cast<uint64_t>(decided[3]));
}

TEST_CASE("tos: a rule matches the packet's DSCP, whatever its ECN bits, in both families", "[engine][tos]") {
  Firewall fw(R"(
block all
pass in on lan0 proto udp tos ef no state
pass out on wan0 proto udp no state
block in quick on lan0 proto udp to port 9 tos af11
)");
  const auto udp4 = [](uint8_t tos, uint16_t port) {
    return PacketBuilder().ipv4(kClient, kServer).tos(tos).udp(kClientPort, port).payload(8).build();
  };
  const auto udp6 = [](uint8_t tos, uint16_t port) {
    return PacketBuilder().ipv6(kClient6, kServer6).tos(tos).udp(kClientPort, port).payload(8).build();
  };
  CHECK(fw.engine.rules()->rule(1).text == "pass in on lan0 proto udp all no state tos 184");
  for (const bool v6 : {false, true}) {
    INFO("IPv6 " << v6);
    const auto udp = v6 ? udp6 : udp4;
    CHECK(fw.out(udp(0xb8, 53)).action == Verdict::Action::Accept);
    CHECK(fw.out(udp(0xb9, 53)).action == Verdict::Action::Accept);  // ECN(1): still ef
    CHECK(fw.out(udp(0xbb, 53)).rule == 1);                          // CE
    const Verdict plain = fw.out(udp(0x00, 53));
    CHECK(plain.action == Verdict::Action::Drop);
    CHECK(plain.rule == 0);
    CHECK(fw.out(udp(0x28, 9)).rule == 3);  // af11: the quick block
    CHECK(fw.out(udp(0xb8, 9)).rule == 1);
  }
}

TEST_CASE("once: the first connection passes and keeps its state; the next meets the rules after it",
          "[engine][once]") {
  Firewall fw(R"(
block all
pass in on lan0 proto tcp to port 21 once
pass out on wan0 all
)");
  CHECK(fw.out(syn(21)).action == Verdict::Action::Accept);
  CHECK(fw.in(synack(21)).action == Verdict::Action::Accept);
  CHECK(fw.out(ack_from_client(21, 1001, 9001)).action == Verdict::Action::Accept);
  const Verdict second = fw.out(tcp4(kClient, kClientPort + 1, kServer, 21).flags(tcpflag::kSyn).build());
  CHECK(second.action == Verdict::Action::Drop);
  CHECK(second.rule == 0);
  CHECK(fw.engine.rules()->rule(1).stats->evaluations.load() == 1);
  // The first connection's state lives on.
  CHECK(fw.out(ack_from_client(21, 1001, 9001, 10)).action == Verdict::Action::Accept);
}

TEST_CASE("once and max-pkt-rate: process() and process_batch() spend and count alike",
          "[engine][batch][once][max-pkt-rate]") {
  // A flow's first datagram meets the rules; some flows come from a source the in pass blocks,
  // which neither the out pass's `once` nor its rate may see.
  const std::string rules = R"(
block all
pass in on lan0 proto udp
block in quick on lan0 from 10.1.0.99
pass out on wan0 proto udp to port 53 max-pkt-rate 40/10
pass out quick on wan0 proto udp to port 54 once
)";
  std::vector<Sent> traffic;
  for (uint16_t i = 0; i < 300; ++i) {
    const auto port = static_cast<uint16_t>(kClientPort + i);
    const std::string client = i % 5 == 0 ? "10.1.0.99" : kClient;
    traffic.push_back(
        {PacketBuilder().ipv4(client, kServer).udp(port, i % 3 == 0 ? 54 : 53).payload(30).build()});
  }
  check_batched_like_single(rules, traffic);

  Firewall fw(rules);
  for (const Sent& sent : traffic) {
    Bytes copy = sent.bytes;
    fw.engine.process(fw.worker, copy, meta_of(sent, fw), fw.now);
  }
  const auto set = fw.engine.rules();
  // Port 53's flows from the passed client: 160; the rate admits its first 40.
  CHECK(set->rule(3).stats->evaluations.load() == 40);
  CHECK(set->rule(4).stats->evaluations.load() == 1);
  CHECK(set->rule(2).stats->evaluations.load() == 60);
}

TEST_CASE("received-on: an out pass's rules see where a forwarded packet arrived; the node's own, nowhere",
          "[engine][received-on]") {
  Firewall fw(R"(
block all
pass in all no state
pass out on wan0 all no state received-on ! lan0
pass out on lan0 all no state received-on { wan0, vpn0 }
)");
  const IfaceId dmz = fw.engine.interfaces().intern("dmz0");
  const IfaceId vpn = *fw.engine.interfaces().find("vpn0");
  CHECK(fw.engine.rules()->rule(2).text == "pass out on wan0 all no state received-on ! lan0");
  CHECK(fw.engine.rules()->rule(3).text == "pass out on lan0 all no state received-on { wan0, vpn0 }");
  const auto datagram = [] {
    return PacketBuilder().ipv4(kClient, kServer).udp(kClientPort, 53).payload(8).build();
  };
  const struct {
    PacketMeta meta;
    bool passes;
  } cases[] = {
      {{Hook::Forward, fw.lan, fw.wan}, false},
      {{Hook::Forward, dmz, fw.wan}, true},
      {{Hook::Forward, fw.wan, fw.lan}, true},
      {{Hook::Forward, vpn, fw.lan}, true},
      {{Hook::Forward, dmz, fw.lan}, false},
      {{Hook::Output, kNoIface, fw.wan}, true},  // received on none: not on lan0
      {{Hook::Output, kNoIface, fw.lan}, false},
  };
  for (const auto& c : cases) {
    INFO("in " << c.meta.in_iface << " out " << c.meta.out_iface);
    const Verdict v = fw.run(datagram(), c.meta);
    CHECK((v.action == Verdict::Action::Accept) == c.passes);
  }
  // The out passes that passed, each decided by its rule.
  CHECK(fw.engine.rules()->rule(2).stats->evaluations.load() == 2);
  CHECK(fw.engine.rules()->rule(3).stats->evaluations.load() == 2);
  CHECK(fw.engine.rules()->rule(0).stats->evaluations.load() == 3);
}

TEST_CASE("UDP request creates a state that passes the reply until it expires", "[engine][udp]") {
  Firewall fw(kWebOnly);
  auto query = PacketBuilder().ipv4(kClient, kServer).udp(5353, 53).payload(40).build();
  auto answer = PacketBuilder().ipv4(kServer, kClient).udp(53, 5353).payload(120).build();
  CHECK(fw.out(query).reason == Reason::Match);
  CHECK(fw.in(answer).reason == Reason::State);
  // Answered once, it is on udp.single, 30 s by default; another answer keeps it there.
  fw.now += Millis{29'000};
  CHECK(fw.engine.expire(fw.now) == 0);
  CHECK(fw.in(answer).reason == Reason::State);
  fw.now += Millis{30'000};
  CHECK(fw.engine.expire(fw.now) == 1);
  CHECK(fw.in(answer).reason == Reason::RuleBlock);
}

TEST_CASE("a connection's first two packets on two workers at once are both tracked",
          "[engine][udp][workers]") {
  // Request and reply start together on two workers: each misses the state table and passes the
  // rules, and one of them finds the state the other has just created. That one is the
  // connection's second packet and its end of the state must see it, as if it had come later.
  Firewall fw("pass all\n");
  Worker reply_worker(fw.engine);
  constexpr uint16_t kFlows = 20000;
  std::vector<Bytes> requests;
  std::vector<Bytes> replies;
  for (uint16_t i = 0; i < kFlows; ++i) {
    requests.push_back(PacketBuilder().ipv4(kClient, kServer).udp(10000 + i, 53).payload(40).build());
    replies.push_back(PacketBuilder().ipv4(kServer, kClient).udp(53, 10000 + i).payload(120).build());
  }
  std::vector<Verdict> request_verdicts(kFlows);
  std::vector<Verdict> reply_verdicts(kFlows);
  std::atomic<uint32_t> arrived{0};
  auto send = [&](Worker& worker, std::vector<Bytes>& packets, std::vector<Verdict>& verdicts,
                  const PacketMeta& meta) {
    for (uint32_t i = 0; i < kFlows; ++i) {
      // Both threads start each connection together.
      arrived.fetch_add(1);
      for (uint32_t spins = 0; arrived.load() < 2 * (i + 1); ++spins)
        if (spins > 1000) std::this_thread::yield();
      verdicts[i] = fw.engine.process(worker, packets[i], meta, fw.now);
    }
  };
  std::thread reply_thread([&] {
    send(reply_worker, replies, reply_verdicts, PacketMeta{Hook::Forward, fw.wan, fw.lan, false});
  });
  send(fw.worker, requests, request_verdicts, PacketMeta{Hook::Forward, fw.lan, fw.wan, false});
  reply_thread.join();

  for (uint32_t i = 0; i < kFlows; ++i) {
    INFO("connection " << i);
    REQUIRE(request_verdicts[i].action == Action::Accept);
    REQUIRE(reply_verdicts[i].action == Action::Accept);
    REQUIRE(request_verdicts[i].state == reply_verdicts[i].state);
  }
  uint32_t states = 0;
  uint32_t untracked_ends = 0;
  fw.engine.snapshot(fw.now, [&](const StateRecord& r) {
    ++states;
    for (const PeerTracking* end : {&r.src, &r.dst})
      if (end->state == static_cast<uint8_t>(FlowState::NoTraffic)) ++untracked_ends;
  });
  CHECK(states == kFlows);
  CHECK(untracked_ends == 0);
}

TEST_CASE("log marks the packets a rule decides; log (all) also those of its states", "[engine][log]") {
  auto query = PacketBuilder().ipv4(kClient, kServer).udp(5353, 53).payload(40).build();
  auto answer = PacketBuilder().ipv4(kServer, kClient).udp(53, 5353).payload(120).build();
  auto other = PacketBuilder().ipv4(kClient, kServer).udp(5353, 99).payload(40).build();
  const std::string base = "block log all\npass out on wan0 proto udp to port 53\n";

  SECTION("log: the state's first packet and blocked packets, not later state matches") {
    Firewall fw(base + "pass in log on lan0 proto udp to port 53\n");
    const Verdict first = fw.out(query);
    CHECK(first.reason == Reason::Match);
    CHECK(first.log);
    CHECK(first.rule == 2);
    const Verdict reply = fw.in(answer);
    CHECK(reply.reason == Reason::State);
    CHECK_FALSE(reply.log);
    const Verdict blocked = fw.out(other);
    CHECK(blocked.reason == Reason::RuleBlock);
    CHECK(blocked.log);
    CHECK(blocked.rule == 0);
  }
  SECTION("log (all): every packet of the state") {
    Firewall fw(base + "pass in log (all) on lan0 proto udp to port 53\n");
    CHECK(fw.out(query).log);
    const Verdict reply = fw.in(answer);
    CHECK(reply.reason == Reason::State);
    CHECK(reply.log);
    CHECK(fw.out(query).log);
    // An ICMP error quoting the query is the state's too (pf_test takes the log of the state an
    // error matches).
    auto unreachable = PacketBuilder().ipv4(kServer, kClient).icmp_error(3, 3, query).build();
    const Verdict error = fw.in(unreachable);
    CHECK(error.reason == Reason::State);
    CHECK(error.log);
  }
  // pf_test_rule() logs the packet of a `log` rule before pf_create_state() tries to make its
  // state: a connection the rule's or the table's limit refuses is in the log all the same.
  SECTION("log: a packet whose state is refused is logged, by its rule") {
    Firewall fw(base + "pass in log on lan0 proto udp to port 53 keep state (max 1)\n");
    CHECK(fw.out(query).log);
    const Verdict refused = fw.out(PacketBuilder().ipv4(kClient, kServer).udp(5354, 53).payload(40).build());
    CHECK(refused.reason == Reason::RuleStateLimit);
    CHECK(refused.log == logpass::kIn);
    REQUIRE(refused.by_rule != nullptr);
    CHECK(refused.by_rule->number == 2);
    Firewall full("set limit states 1\n" + base + "pass in log on lan0 proto udp to port 53\n");
    CHECK(full.out(query).log);
    const Verdict no_room =
        full.out(PacketBuilder().ipv4(kClient, kServer).udp(5354, 53).payload(40).build());
    CHECK(no_room.reason == Reason::StateLimit);
    CHECK(no_room.log == logpass::kIn);
    Firewall silent("set limit states 1\n" + base + "pass in on lan0 proto udp to port 53\n");
    silent.out(query);
    CHECK_FALSE(silent.out(PacketBuilder().ipv4(kClient, kServer).udp(5354, 53).payload(40).build()).log);
  }
  SECTION("no log: nothing") {
    Firewall fw("pass in on lan0 proto udp to port 53\npass out on wan0 proto udp to port 53\n");
    CHECK_FALSE(fw.out(query).log);
    CHECK_FALSE(fw.in(answer).log);
  }
  SECTION("each pass logs on its own: the out pass's rule where it logs and the in pass's does not") {
    Firewall fw(
        "pass in on lan0 all\npass out log on wan0 all\nblock out log on wan0 proto udp to port 99\n");
    const Verdict passed = fw.out(query);
    CHECK(passed.log == logpass::kOut);
    CHECK(passed.rule == 0);  // the in pass decided first
    REQUIRE(passed.out_log_rule != nullptr);
    CHECK(passed.out_log_rule->number == 1);
    const Verdict blocked = fw.out(other);
    CHECK(blocked.log == logpass::kOut);
    CHECK(blocked.rule == 2);
    Firewall both("pass in log on lan0 all\npass out log on wan0 all\n");
    const Verdict twice = both.out(query);
    CHECK(twice.log == (logpass::kIn | logpass::kOut));
    CHECK(twice.rule == 0);
    REQUIRE(twice.out_log_rule != nullptr);
    CHECK(twice.out_log_rule->number == 1);
    Firewall in_only("pass in log on lan0 all\npass out on wan0 all\n");
    const Verdict once = in_only.out(query);
    CHECK(once.log == logpass::kIn);
    CHECK(once.out_log_rule == nullptr);
  }
  SECTION("the in pass's log survives the out pass's block, which logs on its own") {
    Firewall fw("pass in log on lan0 all\nblock out on wan0 proto udp to port 99\n");
    const Verdict blocked = fw.out(other);
    CHECK(blocked.action == Verdict::Action::Drop);
    CHECK(blocked.rule == 1);
    CHECK(blocked.log == logpass::kIn);
    REQUIRE(blocked.in_log_rule != nullptr);
    CHECK(blocked.in_log_rule->number == 0);
    Firewall both("pass in log on lan0 all\nblock out log on wan0 proto udp to port 99\n");
    CHECK(both.out(other).log == (logpass::kIn | logpass::kOut));
    // And when the out pass refuses its IP options.
    Firewall options("pass in log on lan0 all allow-opts\npass out on wan0 all\n");
    const Verdict refused = options.out(
        PacketBuilder().ipv4(kClient, kServer).ip_options({7, 7, 4, 0, 0, 0, 0, 0}).udp(5353, 99).build());
    CHECK(reason_name(refused.reason) == "ip_options");
    CHECK(refused.log == (logpass::kIn | logpass::kOut));
    REQUIRE(refused.in_log_rule != nullptr);
    CHECK(refused.in_log_rule->number == 0);
    Firewall silent("pass in on lan0 all\nblock out log on wan0 proto udp to port 99\n");
    const Verdict out_only = silent.out(other);
    CHECK(out_only.log == logpass::kOut);
    CHECK(out_only.in_log_rule == nullptr);
  }
}

TEST_CASE("set timeout changes how long a state lives", "[engine][udp]") {
  Firewall fw("set timeout udp.first 5\npass all");
  CHECK(fw.out(PacketBuilder().ipv4(kClient, kServer).udp(1, 2).build()).reason == Reason::Match);
  CHECK(fw.engine.expire(fw.now + Millis{4'999}) == 0);
  CHECK(fw.engine.expire(fw.now + Millis{5'000}) == 1);
}

TEST_CASE("adaptive timeouts expire idle states sooner as the table fills", "[engine][udp]") {
  // UDP timeouts of 60 s, scaled from 10 states on, to nothing at 20.
  const std::string rules =
      "set timeout { udp.first 60, udp.single 60, adaptive.start 10, adaptive.end 20 }\npass all\n";
  auto open_flows = [](Firewall& fw, uint16_t count) {
    for (uint16_t port = 1; port <= count; ++port)
      REQUIRE(fw.out(PacketBuilder().ipv4(kClient, kServer).udp(port, 53).build()).reason == Reason::Match);
  };
  SECTION("15 states: half the timeout") {
    Firewall fw(rules);
    open_flows(fw, 15);
    CHECK(fw.engine.expire(fw.now + Millis{29'999}) == 0);
    CHECK(fw.engine.timeout_scale() == 0.5);
    CHECK(fw.engine.expire(fw.now + Millis{30'000}) == 15);
    CHECK(fw.engine.states().size() == 0);
  }
  SECTION("10 states: the whole timeout") {
    Firewall fw(rules);
    open_flows(fw, 10);
    CHECK(fw.engine.expire(fw.now + Millis{59'999}) == 0);
    CHECK(fw.engine.timeout_scale() == 1.0);
    CHECK(fw.engine.expire(fw.now + Millis{60'000}) == 10);
  }
  SECTION("a busy state outlives the scaled timeout") {
    Firewall fw(rules);
    open_flows(fw, 15);
    const Millis start = fw.now;
    fw.now += Millis{20'000};
    CHECK(fw.out(PacketBuilder().ipv4(kClient, kServer).udp(1, 53).build()).reason == Reason::State);
    CHECK(fw.engine.expire(start + Millis{30'000}) == 14);
    // One state left: below adaptive.start, its whole 60 s from its last packet.
    CHECK(fw.engine.expire(fw.now + Millis{59'999}) == 0);
    CHECK(fw.engine.expire(fw.now + Millis{60'000}) == 1);
  }
}

TEST_CASE("set skip: a pass on a skipped interface is not filtered, the other pass is", "[engine]") {
  Firewall fw("set skip on { lan0, lo }\nblock all\npass out on wan0 proto udp\n");
  const Bytes udp = PacketBuilder().ipv4(kClient, kServer).udp(1, 53).build();
  const Bytes tcp = syn(80);
  // Forwarded lan0 -> wan0: only the out pass on wan0 meets the rules.
  const Verdict out_udp = fw.out(udp);
  CHECK(out_udp.action == Action::Accept);
  CHECK(out_udp.reason == Reason::Match);
  CHECK(out_udp.rule == 1);
  CHECK(fw.out(tcp).reason == Reason::RuleBlock);
  // Forwarded wan0 -> lan0: the in pass on wan0 is filtered.
  CHECK(fw.in(PacketBuilder().ipv4(kServer, kClient).udp(53, 2).build()).reason == Reason::RuleBlock);
  // Delivered to the node through lan0, or sent by it there: no pass left, not inspected, not even
  // parsed (pf does not look at a skipped interface's packets).
  const Verdict local = fw.run(tcp, PacketMeta{Hook::Input, fw.lan, kNoIface, false});
  CHECK(local.action == Action::Accept);
  CHECK(local.reason == Reason::Skipped);
  CHECK(fw.run(Bytes{0x45, 0x00}, PacketMeta{Hook::Output, kNoIface, fw.lan, false}).reason ==
        Reason::Skipped);
  CHECK(fw.run(tcp, PacketMeta{Hook::Input, fw.wan, kNoIface, false}).reason == Reason::RuleBlock);
  // Before routing, a skipped packet is left to the hooks after routing, where its out pass may
  // still be filtered.
  const Verdict early = fw.run(tcp, PacketMeta{Hook::Prerouting, fw.lan, kNoIface, false});
  CHECK(early.reason == Reason::Skipped);
  CHECK_FALSE(early.claimed);
  CHECK(fw.engine.states().size() == 1);  // the UDP flow's, created on its out pass
}

TEST_CASE("ICMP echo state: the reply with the same id passes, another id does not", "[engine][icmp]") {
  Firewall fw(kWebOnly);
  CHECK(fw.out(PacketBuilder().ipv4(kClient, kServer).icmp_echo(77, 1).build()).reason == Reason::Match);
  CHECK(fw.in(PacketBuilder().ipv4(kServer, kClient).icmp_echo(77, 1, true).build()).reason == Reason::State);
  CHECK(fw.in(PacketBuilder().ipv4(kServer, kClient).icmp_echo(78, 1, true).build()).reason ==
        Reason::RuleBlock);
}

// pf_test_state_udp: a query answered once is MULTIPLE:SINGLE and lives udp.single (30 s), not
// udp.multiple (60 s): a resolver's lookups hold their states half as long as a conversation's.
TEST_CASE("UDP state: one answer keeps udp.single, the asker's next packet makes it udp.multiple",
          "[engine][udp]") {
  Firewall fw("pass all");
  const auto query = [](uint16_t port) {
    return PacketBuilder().ipv4(kClient, kServer).udp(port, 53).payload(20).build();
  };
  const auto answer = [](uint16_t port) {
    return PacketBuilder().ipv4(kServer, kClient).udp(53, port).payload(60).build();
  };
  CHECK(fw.out(query(5001)).reason == Reason::Match);
  CHECK(fw.in(answer(5001)).reason == Reason::State);
  CHECK(fw.out(query(5002)).reason == Reason::Match);
  CHECK(fw.in(answer(5002)).reason == Reason::State);
  CHECK(fw.out(query(5002)).reason == Reason::State);
  fw.engine.states().for_each([](const StateEntry& e) {
    INFO(e.key(0).port[0]);
    CHECK(e.timeout == (e.key(0).port[0] == 5001 ? TimeoutClass::UdpSingle : TimeoutClass::UdpMultiple));
  });
  fw.engine.expire(fw.now + Millis{30'000});
  CHECK(fw.engine.states().size() == 1);
  fw.engine.expire(fw.now + Millis{60'000});
  CHECK(fw.engine.states().size() == 0);
}

// pf_test_state_icmp: a query's state takes icmp.error on every packet after its first, so that
// the pings of a host that never answers leave it for 10 s after the last, not icmp.first's 20.
TEST_CASE("ICMP echo state: a request repeated unanswered moves it to icmp.error", "[engine][icmp]") {
  Firewall fw(kWebOnly);
  const auto request = [](uint16_t sequence) {
    return PacketBuilder().ipv4(kClient, kServer).icmp_echo(77, sequence).build();
  };
  CHECK(fw.out(request(1)).reason == Reason::Match);
  fw.now += Millis{1'000};
  CHECK(fw.out(request(2)).reason == Reason::State);
  fw.engine.states().for_each([](const StateEntry& e) { CHECK(e.timeout == TimeoutClass::IcmpError); });
  fw.engine.expire(fw.now + Millis{9'999});
  CHECK(fw.engine.states().size() == 1);
  fw.engine.expire(fw.now + Millis{10'000});
  CHECK(fw.engine.states().size() == 0);
}

// A state is keyed by the request's type and id in one order, its reply's in the other (pf's
// pf_icmp_mapping): only the answer rides it back, not a request or another message from the far end.
TEST_CASE("ICMP echo state: the far end's own requests and other types do not ride it", "[engine][icmp]") {
  Firewall fw(kWebOnly);
  for (const bool v6 : {false, true}) {
    INFO((v6 ? "IPv6" : "IPv4"));
    auto client_to_server = [&] {
      return v6 ? PacketBuilder().ipv6(kClient6, kServer6) : PacketBuilder().ipv4(kClient, kServer);
    };
    auto server_to_client = [&] {
      return v6 ? PacketBuilder().ipv6(kServer6, kClient6) : PacketBuilder().ipv4(kServer, kClient);
    };
    CHECK(fw.out(client_to_server().icmp_echo(77, 1).build()).reason == Reason::Match);
    // The server's echo request with the client's id: blocked, as before the client's ping.
    CHECK(fw.in(server_to_client().icmp_echo(77, 1).build()).reason == Reason::RuleBlock);
    // A message of another type (a timestamp request; an ICMPv6 node information query) with that id.
    auto other = server_to_client();
    other.icmp(v6 ? 139 : 13, 0, (uint32_t{77} << 16) | 1);
    if (!v6) other.payload(12);
    CHECK(fw.in(other.build()).reason == Reason::RuleBlock);
    // The reply still passes, and the client's next request too.
    CHECK(fw.in(server_to_client().icmp_echo(77, 1, true).build()).reason == Reason::State);
    CHECK(fw.out(client_to_server().icmp_echo(77, 2).build()).reason == Reason::State);
  }
}

// An identifier equal to the request's type makes the request's key read the same both ways, so
// the direction a message may take on its state is checked as pf_icmp_state_lookup checks it.
TEST_CASE("ICMP echo state: with an identifier equal to its type, only the reply rides it back",
          "[engine][icmp]") {
  Firewall fw(kWebOnly);
  for (const bool v6 : {false, true}) {
    INFO((v6 ? "IPv6" : "IPv4"));
    const uint16_t id = v6 ? 128 : 8;  // the echo request's type
    auto client_to_server = [&] {
      return v6 ? PacketBuilder().ipv6(kClient6, kServer6) : PacketBuilder().ipv4(kClient, kServer);
    };
    auto server_to_client = [&] {
      return v6 ? PacketBuilder().ipv6(kServer6, kClient6) : PacketBuilder().ipv4(kServer, kClient);
    };
    CHECK(fw.out(client_to_server().icmp_echo(id, 1).build()).reason == Reason::Match);
    const Verdict request = fw.in(server_to_client().icmp_echo(id, 1).build());
    CHECK(request.action == Action::Drop);
    CHECK(request.reason == Reason::StateMismatch);
    const Verdict reply = fw.out(client_to_server().icmp_echo(id, 1, true).build());
    CHECK(reply.action == Action::Drop);
    CHECK(reply.reason == Reason::StateMismatch);
    CHECK(fw.in(server_to_client().icmp_echo(id, 1, true).build()).reason == Reason::State);
    CHECK(fw.out(client_to_server().icmp_echo(id, 2).build()).reason == Reason::State);
  }
}

TEST_CASE("ICMPv6 neighbor discovery: an advertisement answers its solicitation's state, makes none",
          "[engine][icmp]") {
  Firewall fw(
      "block all\n"
      "pass in on lan0 inet6 proto icmp6 icmp6-type { neighbrsol neighbradv }\n"
      "pass out on wan0 inet6 proto icmp6 icmp6-type { neighbrsol neighbradv }\n"
      "pass in on wan0 inet6 proto icmp6 icmp6-type neighbradv no state\n"
      "pass out on lan0 inet6 proto icmp6 icmp6-type neighbradv no state\n");
  const Bytes target = {0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80};
  const Bytes other_target = {0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x81};
  auto solicitation = PacketBuilder().ipv6(kClient6, kServer6).ttl(255).icmp(135, 0).payload(target).build();
  auto advertisement = [&](const Bytes& t) {
    return PacketBuilder().ipv6(kServer6, kClient6).ttl(255).icmp(136, 0, 0x60000000).payload(t).build();
  };
  CHECK(fw.out(solicitation).reason == Reason::Match);
  CHECK(fw.engine.states().size() == 1);
  CHECK(fw.in(advertisement(target)).reason == Reason::State);
  // Another target's advertisement is the rules' to judge (here: passed without a state).
  CHECK(fw.in(advertisement(other_target)).reason == Reason::Match);
  CHECK(fw.engine.states().size() == 1);
  // An unsolicited advertisement passed by a rule that keeps state makes none.
  const Verdict unsolicited = fw.out(PacketBuilder()
                                         .ipv6(kClient6, kServer6)
                                         .ttl(255)
                                         .icmp(136, 0, 0x20000000)
                                         .payload(other_target)
                                         .build());
  CHECK(unsolicited.reason == Reason::Match);
  CHECK(fw.engine.states().size() == 1);
}

// A neighbor discovery message that a router forwarded (its hop limit below 255) was sent from off
// the link to pass for a neighbour's: pf drops it before the rules, and it makes no state.
TEST_CASE("ICMPv6 neighbor discovery with a hop limit below 255 is dropped whatever the rules",
          "[engine][icmp]") {
  Firewall fw("pass all\n");
  const Bytes target = {0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80};
  for (const uint8_t type : {133, 134, 135, 136, 137}) {
    INFO(int{type});
    const auto message = [&](uint8_t hop_limit) {
      return PacketBuilder().ipv6(kServer6, kClient6).ttl(hop_limit).icmp(type, 0).payload(target).build();
    };
    const Verdict forwarded = fw.in(message(64));
    CHECK(forwarded.action == Action::Drop);
    CHECK(forwarded.reason == Reason::BadIcmp);
    CHECK(fw.engine.states().size() == 0);
  }
  CHECK(fw.worker.counters().get(Reason::BadIcmp) == 5);
  const Verdict on_link =
      fw.in(PacketBuilder().ipv6(kServer6, kClient6).ttl(255).icmp(135, 0).payload(target).build());
  CHECK(on_link.reason == Reason::Match);
}

// Address resolution asks the target's solicited-node group (RFC 4861 7.2.2) and is answered from
// the target's own address: pf_icmp_state_lookup finds the solicitation's state for the answer by
// that group (PF_ICMP_MULTI_SOLICITED), so that a node whose rules keep state on what it sends
// out resolves its neighbours.
TEST_CASE(
    "ICMPv6 neighbor discovery: an advertisement answers a solicitation sent to the solicited-node group",
    "[engine][icmp]") {
  Firewall fw("block all\npass out on wan0 inet6 proto icmp6 icmp6-type neighbrsol keep state\n");
  const std::string self = "2001:db8:2::1";
  const Bytes target = {0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0x80};
  const auto from_node = [&](Bytes p) {
    return fw.run(std::move(p), PacketMeta{Hook::Output, kNoIface, fw.wan});
  };
  const auto to_node = [&](Bytes p) {
    return fw.run(std::move(p), PacketMeta{Hook::Input, fw.wan, kNoIface});
  };
  const auto advertisement = [&](const std::string& from) {
    return PacketBuilder().ipv6(from, self).ttl(255).icmp(136, 0, 0x60000000).payload(target).build();
  };
  REQUIRE(
      from_node(PacketBuilder().ipv6(self, "ff02::1:ff34:80").ttl(255).icmp(135, 0).payload(target).build())
          .reason == Reason::Match);
  CHECK(to_node(advertisement("2001:db8:2::1234:80")).reason == Reason::State);
  // An advertisement of another target is not the answer: the rules decide it.
  const Bytes other_target = {0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0x81};
  CHECK(to_node(PacketBuilder()
                    .ipv6("2001:db8:2::1234:81", self)
                    .ttl(255)
                    .icmp(136, 0, 0x60000000)
                    .payload(other_target)
                    .build())
            .reason == Reason::RuleBlock);
}

// The target of an advertisement, not the address it comes from, says which solicitation it
// answers (RFC 4861 4.4, 7.2.4): a proxy answers for addresses not its own (RFC 4861 7.2.8, a
// router's proxy_ndp), and the answer to duplicate address detection goes to all nodes, as its
// solicitation came from the unspecified address (RFC 4862 5.4.3). pf keys both messages by the
// target (pf_state_key_addr_setup), so that these answers find their solicitation's state.
TEST_CASE("ICMPv6 neighbor discovery: an advertisement is matched to its solicitation by its target",
          "[engine][icmp]") {
  Firewall fw("block all\npass out on wan0 inet6 proto icmp6 icmp6-type neighbrsol keep state\n");
  const std::string self = "2001:db8:2::1";
  const std::string proxy = "fe80::1";
  const Bytes target = {0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0x80};
  const auto from_node = [&](Bytes p) {
    return fw.run(std::move(p), PacketMeta{Hook::Output, kNoIface, fw.wan});
  };
  const auto to_node = [&](Bytes p) {
    return fw.run(std::move(p), PacketMeta{Hook::Input, fw.wan, kNoIface});
  };
  const auto solicitation = [&](const std::string& from, const std::string& to) {
    return PacketBuilder().ipv6(from, to).ttl(255).icmp(135, 0).payload(target).build();
  };
  const auto advertisement = [&](const std::string& from, const std::string& to) {
    return PacketBuilder().ipv6(from, to).ttl(255).icmp(136, 0, 0x60000000).payload(target).build();
  };
  SECTION("address resolution answered by a proxy") {
    REQUIRE(from_node(solicitation(self, "ff02::1:ff34:80")).reason == Reason::Match);
    CHECK(to_node(advertisement(proxy, self)).reason == Reason::State);
  }
  SECTION("reachability confirmation answered by a proxy") {
    REQUIRE(from_node(solicitation(self, "2001:db8:2::1234:80")).reason == Reason::Match);
    CHECK(to_node(advertisement(proxy, self)).reason == Reason::State);
  }
  SECTION("duplicate address detection answered by the address's owner") {
    REQUIRE(from_node(solicitation("::", "ff02::1:ff34:80")).reason == Reason::Match);
    CHECK(to_node(advertisement("2001:db8:2::1234:80", "ff02::1")).reason == Reason::State);
  }
  CHECK(fw.engine.states().size() == 1);
}

// An echo request to all nodes of a link (ping ff02::1) is answered by each of them, from its own
// address: pf finds the request's state for such a reply by the all-nodes group in place of the
// reply's source (pf_icmp_state_lookup's multicast retry, pf_state_key_addr_setup).
TEST_CASE("ICMPv6 echo replies to a request sent to all nodes find the request's state", "[engine][icmp]") {
  Firewall fw("block all\npass out on wan0 inet6 proto icmp6 keep state\n");
  const std::string self = "fe80::1";
  const auto from_node = [&](Bytes p) {
    return fw.run(std::move(p), PacketMeta{Hook::Output, kNoIface, fw.wan});
  };
  const auto to_node = [&](Bytes p) {
    return fw.run(std::move(p), PacketMeta{Hook::Input, fw.wan, kNoIface});
  };
  REQUIRE(from_node(PacketBuilder().ipv6(self, "ff02::1").ttl(1).icmp_echo(77, 1).build()).reason ==
          Reason::Match);
  for (const std::string neighbour : {"fe80::2", "fe80::3"})
    CHECK(to_node(PacketBuilder().ipv6(neighbour, self).icmp_echo(77, 1, true).build()).reason ==
          Reason::State);
  // Another identifier's reply, and a neighbour's own request, are the rules' to judge.
  CHECK(to_node(PacketBuilder().ipv6("fe80::2", self).icmp_echo(78, 1, true).build()).reason ==
        Reason::RuleBlock);
  CHECK(to_node(PacketBuilder().ipv6("fe80::2", self).icmp_echo(77, 1).build()).reason == Reason::RuleBlock);
  CHECK(fw.engine.states().size() == 1);
}

TEST_CASE("ICMP errors are matched to the state of the packet they quote", "[engine][icmp]") {
  Firewall fw(kWebOnly);
  const Bytes first = syn(80);
  REQUIRE(fw.out(first).action == Action::Accept);
  SECTION("quoting the connection's own packet") {
    auto unreach = PacketBuilder().ipv4("198.51.100.1", kClient).icmp_error(3, 4, first).build();
    const Verdict v = fw.in(unreach);
    CHECK(v.reason == Reason::State);
    CHECK(v.action == Action::Accept);
  }
  SECTION("quoting a connection that does not exist") {
    auto unreach = PacketBuilder().ipv4("198.51.100.1", kClient).icmp_error(3, 4, syn(443)).build();
    CHECK(fw.in(unreach).reason == Reason::RuleBlock);
  }
  SECTION("quoting a sequence number outside the window") {
    auto quoted = tcp4(kClient, kClientPort, kServer, 80).flags(tcpflag::kAck).seq(1000 + 80'000'000).build();
    auto unreach = PacketBuilder().ipv4("198.51.100.1", kClient).icmp_error(3, 4, quoted).build();
    CHECK(fw.in(unreach).reason == Reason::BadSeq);
  }
}

// pf counts every packet a state passes in the state and in its rule (pf_counters_inc), the ICMP
// errors matched to it by their quote too, in the direction they travel: back to the quoted
// packet's sender.
TEST_CASE("an ICMP error its state passes counts in the state's packets and bytes, and its rule's",
          "[engine][icmp]") {
  Firewall fw(kWebOnly);
  const Bytes first = syn(80);
  REQUIRE(fw.out(first).action == Action::Accept);
  const Bytes unreach = PacketBuilder().ipv4("198.51.100.1", kClient).icmp_error(3, 4, first).build();
  REQUIRE(fw.in(unreach).reason == Reason::State);
  std::shared_ptr<const pairwall::engine::rules::RuleStats> creator_stats;
  fw.engine.states().for_each([&](const StateEntry& e) {
    CHECK(e.packets[0] == 1);
    CHECK(e.bytes[0] == first.size());
    CHECK(e.packets[1] == 1);
    CHECK(e.bytes[1] == unreach.size());
    creator_stats = e.creator->stats;
  });
  REQUIRE(creator_stats != nullptr);
  const uint64_t packets_before = creator_stats->packets.load();
  CHECK(fw.engine.expire(fw.now + Millis{100'000'000}) == 1);
  CHECK(creator_stats->packets.load() == packets_before + 1);
}

TEST_CASE("an ICMP error must travel back toward the sender of the packet it quotes", "[engine][icmp]") {
  struct Case {
    const char* name;
    bool v6;
    bool quote_client;  // quotes the client's SYN, else the server's SYN-ACK
    bool to_client;     // the error's destination
    Reason reason;
  };
  const Case cases[] = {
      {"v4 error about the client's packet, to the client", false, true, true, Reason::State},
      {"v4 error about the client's packet, to the server", false, true, false, Reason::StateMismatch},
      {"v4 error about the server's packet, to the server", false, false, false, Reason::State},
      {"v4 error about the server's packet, to the client", false, false, true, Reason::StateMismatch},
      {"v6 error about the client's packet, to the client", true, true, true, Reason::State},
      {"v6 error about the client's packet, to the server", true, true, false, Reason::StateMismatch},
      {"v6 error about the server's packet, to the server", true, false, false, Reason::State},
      {"v6 error about the server's packet, to the client", true, false, true, Reason::StateMismatch},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    Firewall fw("pass all");
    const std::string& client = c.v6 ? kClient6 : kClient;
    const std::string& server = c.v6 ? kServer6 : kServer;
    const std::string router = c.v6 ? "2001:db8:9::1" : "198.51.100.1";
    const auto tcp = [&](const std::string& src, uint16_t sport, const std::string& dst, uint16_t dport) {
      PacketBuilder b;
      if (c.v6) {
        b.ipv6(src, dst).tcp(sport, dport);
      } else {
        b.ipv4(src, dst).tcp(sport, dport);
      }
      return b;
    };
    const Bytes client_syn = tcp(client, kClientPort, server, 80).flags(tcpflag::kSyn).seq(1000).build();
    const Bytes server_synack =
        tcp(server, 80, client, kClientPort).flags(tcpflag::kSyn | tcpflag::kAck).seq(9000).ack(1001).build();
    REQUIRE(fw.out(client_syn).reason == Reason::Match);
    REQUIRE(fw.in(server_synack).reason == Reason::State);
    PacketBuilder error;
    if (c.v6) {
      error.ipv6(router, c.to_client ? client : server)
          .icmp_error(1, 4, c.quote_client ? client_syn : server_synack);
    } else {
      error.ipv4(router, c.to_client ? client : server)
          .icmp_error(3, 4, c.quote_client ? client_syn : server_synack);
    }
    const Verdict v = c.to_client ? fw.in(error.build()) : fw.out(error.build());
    CHECK(v.reason == c.reason);
    CHECK(v.action == (c.reason == Reason::State ? Action::Accept : Action::Drop));
    CHECK(fw.worker.counters().get(Reason::StateMismatch) == (c.reason == Reason::StateMismatch ? 1u : 0u));
  }
}

TEST_CASE("IPv6: TCP and ICMPv6 echo through states", "[engine][ipv6]") {
  Firewall fw(kWebOnly);
  auto s = PacketBuilder().ipv6(kClient6, kServer6).tcp(50000, 22).flags(tcpflag::kSyn).seq(5).build();
  auto sa = PacketBuilder()
                .ipv6(kServer6, kClient6)
                .tcp(22, 50000)
                .flags(tcpflag::kSyn | tcpflag::kAck)
                .seq(70)
                .ack(6)
                .build();
  CHECK(fw.out(s).reason == Reason::Match);
  CHECK(fw.in(sa).reason == Reason::State);
  CHECK(fw.out(PacketBuilder().ipv6(kClient6, kServer6).tcp(50000, 23).flags(tcpflag::kSyn).build()).reason ==
        Reason::RuleBlock);
  CHECK(fw.out(PacketBuilder().ipv6(kClient6, kServer6).icmp_echo(9, 1).build()).reason == Reason::Match);
  CHECK(fw.in(PacketBuilder().ipv6(kServer6, kClient6).icmp_echo(9, 1, true).build()).reason ==
        Reason::State);
}

TEST_CASE("malformed packets are dropped with a reason and counted", "[engine][malformed]") {
  Firewall fw("pass all");
  const Bytes good = syn(80);
  struct Case {
    const char* name;
    Bytes packet;
    Reason reason;
  };
  const Case cases[] = {
      {"empty", Bytes{}, Reason::Short},
      {"truncated IP header", pairwall::test::truncated(good, 10), Reason::Short},
      {"truncated TCP header", pairwall::test::truncated(good, 30), Reason::Short},
      {"IHL below 5", tcp4(kClient, 1, kServer, 2).ihl(4).build(), Reason::BadIpHeader},
      {"version 5", tcp4(kClient, 1, kServer, 2).version(5).build(), Reason::BadIpVersion},
      {"TCP data offset below 5", tcp4(kClient, 1, kServer, 2).data_offset(3).build(), Reason::BadTcpHeader},
      {"SYN+FIN", tcp4(kClient, 1, kServer, 2).flags(tcpflag::kSyn | tcpflag::kFin).build(),
       Reason::BadTcpFlags},
      {"SYN+RST", tcp4(kClient, 1, kServer, 2).flags(tcpflag::kSyn | tcpflag::kRst).build(),
       Reason::BadTcpFlags},
      {"no flags", tcp4(kClient, 1, kServer, 2).flags(0).build(), Reason::BadTcpFlags},
      {"FIN without ACK", tcp4(kClient, 1, kServer, 2).flags(tcpflag::kFin).build(), Reason::BadTcpFlags},
      {"fragment", tcp4(kClient, 1, kServer, 2).fragment(0, true, 7).payload(60).build(), Reason::Fragment},
  };
  for (const auto& c : cases) {
    SECTION(c.name) {
      const Verdict v = fw.out(c.packet);
      CHECK(v.action == Action::Drop);
      CHECK(reason_name(v.reason) == reason_name(c.reason));
      CHECK(v.log == logpass::kIn);  // logged on the first pass, whatever the rules say (pf's)
      CHECK(fw.worker.counters().get(c.reason) == 1);
      CHECK(fw.engine.states().size() == 0);
    }
  }
}

TEST_CASE("state limits: the table's and a rule's own", "[engine][limits]") {
  SECTION("set limit states") {
    Firewall fw("set limit states 2\npass all");
    CHECK(fw.out(syn(80)).reason == Reason::Match);
    CHECK(fw.out(syn(81)).reason == Reason::Match);
    CHECK(fw.out(syn(82)).reason == Reason::StateLimit);
    CHECK(fw.worker.counters().get(Reason::StateLimit) == 1);
  }
  SECTION("keep state (max 1)") {
    Firewall fw("pass all keep state (max 1)");
    CHECK(fw.out(syn(80)).reason == Reason::Match);
    CHECK(fw.out(syn(81)).reason == Reason::RuleStateLimit);
    fw.engine.expire(fw.now + Millis{1'000'000});
    CHECK(fw.out(syn(82)).reason == Reason::Match);
  }
}

// pf's `set fail-policy return`: a connection a pass rule lets by but the node cannot take (no room
// for its state, no free nat port) is answered as `block return` answers, not dropped silently.
TEST_CASE("set fail-policy return answers what a pass rule let by and the node could not take",
          "[engine][limits]") {
  const auto udp = [](uint16_t sport) {
    return PacketBuilder().ipv4(kClient, kServer).udp(sport, 53).build();
  };
  const auto echo = PacketBuilder().ipv4(kClient, kServer).icmp_echo(7, 1).build();
  SECTION("the table full: TCP gets a reset, the rest an unreachable") {
    Firewall fw("set limit states 1\nset fail-policy return\npass all\n");
    CHECK(fw.engine.rules()->fail_policy_return());
    CHECK(fw.out(syn(80)).reason == Reason::Match);
    const Verdict tcp = fw.out(syn(81));
    CHECK(tcp.reason == Reason::StateLimit);
    CHECK(tcp.action == Action::Reject);
    CHECK(tcp.reply == rules::BlockReply::ReturnRst);
    for (const Bytes& other : {udp(5000), echo}) {
      const Verdict v = fw.out(other);
      CHECK(v.reason == Reason::StateLimit);
      CHECK(v.action == Action::Reject);
      CHECK(v.reply == rules::BlockReply::ReturnIcmp);
      CHECK(v.reply_code == -1);  // port unreachable
    }
  }
  SECTION("a rule's own limit and a nat without a free port alike") {
    Firewall fw(
        "set fail-policy return\nnat on wan0 proto udp from 10.1.0.0/16 to any -> 203.0.113.1 port 40000\n"
        "pass proto tcp all keep state (max 1)\npass proto udp all\n");
    CHECK(fw.out(syn(80)).reason == Reason::Match);
    const Verdict rule_full = fw.out(syn(81));
    CHECK(rule_full.reason == Reason::RuleStateLimit);
    CHECK(rule_full.reply == rules::BlockReply::ReturnRst);
    CHECK(fw.out(udp(5000)).reason == Reason::Match);
    const Verdict no_port = fw.out(udp(5001));
    CHECK(no_port.reason == Reason::TranslationFailed);
    CHECK(no_port.action == Action::Reject);
    CHECK(no_port.reply == rules::BlockReply::ReturnIcmp);
  }
  SECTION("drop, written or not, drops") {
    for (const char* policy : {"", "set fail-policy drop\n"}) {
      Firewall fw(std::string("set limit states 1\n") + policy + "pass all\n");
      CHECK_FALSE(fw.engine.rules()->fail_policy_return());
      fw.out(syn(80));
      const Verdict v = fw.out(syn(81));
      CHECK(v.reason == Reason::StateLimit);
      CHECK(v.action == Action::Drop);
    }
  }
}

TEST_CASE("scrub: max-mss rewrites the option with a correct checksum, min-ttl raises the TTL",
          "[engine][scrub]") {
  Firewall fw("scrub in all max-mss 1400 min-ttl 5\npass all");
  const Verdict v = fw.out(tcp4(kClient, 1, kServer, 2).flags(tcpflag::kSyn).mss(1460).build());
  CHECK(v.rewritten);
  CHECK(fw.last_packet == tcp4(kClient, 1, kServer, 2).flags(tcpflag::kSyn).mss(1400).build());
  const Verdict small = fw.out(tcp4(kClient, 3, kServer, 2).flags(tcpflag::kSyn).mss(1200).build());
  CHECK_FALSE(small.rewritten);
  // After a single no-operation the option's value sits at an odd offset, where it counts in the
  // checksum with its bytes swapped; the builder computes the expected checksum afresh.
  const Bytes nop{pairwall::test::tcpopt::kNop};
  const Verdict odd =
      fw.out(tcp4(kClient, 5, kServer, 2).flags(tcpflag::kSyn).tcp_options_raw(nop).mss(1460).build());
  CHECK(odd.rewritten);
  CHECK(fw.last_packet ==
        tcp4(kClient, 5, kServer, 2).flags(tcpflag::kSyn).tcp_options_raw(nop).mss(1400).build());
  // As pf: raised to the minimum, the IPv4 header checksum (and nothing else) following.
  const Verdict low = fw.out(tcp4(kClient, 4, kServer, 2).flags(tcpflag::kSyn).ttl(3).build());
  CHECK(low.action == Verdict::Action::Accept);
  CHECK(low.rewritten);
  CHECK(fw.last_packet == tcp4(kClient, 4, kServer, 2).flags(tcpflag::kSyn).ttl(5).build());
  const Verdict high = fw.out(tcp4(kClient, 6, kServer, 2).flags(tcpflag::kSyn).ttl(64).build());
  CHECK_FALSE(high.rewritten);
  const Verdict low6 = fw.out(PacketBuilder().ipv6(kClient6, kServer6).ttl(1).udp(7, 53).payload(4).build());
  CHECK(low6.rewritten);
  CHECK(fw.last_packet == PacketBuilder().ipv6(kClient6, kServer6).ttl(5).udp(7, 53).payload(4).build());
}

TEST_CASE("scrub: min-ttl leaves link-local multicast as it is, whose receivers want its TTL 1",
          "[engine][scrub]") {
  // This node's own group membership: MLD and IGMP reports leave with TTL 1, and a receiver (a
  // pairwall peer's screen() among them) drops MLD, or IGMP to all hosts, with any other.
  Firewall fw("scrub out all min-ttl 64\npass all allow-opts");
  const PacketMeta own{Hook::Output, kNoIface, fw.lan, false};
  const Bytes alert{0, 0, 5, 2, 0, 0, 1, 0};  // hop-by-hop: router alert (MLD), PadN
  const Bytes mld = PacketBuilder()
                        .ipv6("fe80::1", "ff02::16")
                        .ttl(1)
                        .ipv6_ext_raw(pairwall::test::ip6ext::kHopByHop, alert)
                        .icmp(143, 0)
                        .payload(16)
                        .build();
  const Bytes igmp = PacketBuilder()
                         .ipv4("10.1.0.1", "224.0.0.1")
                         .ttl(1)
                         .ip_options({148, 4, 0, 0})
                         .raw_l4(ipproto::kIgmp, Bytes(8, 0))
                         .build();
  for (const Bytes& report : {mld, igmp}) {
    const Verdict v = fw.run(report, own);
    CHECK(v.action == Verdict::Action::Accept);
    CHECK_FALSE(v.rewritten);
    CHECK(fw.last_packet == report);
    // As a peer sees it: passed, with the TTL it was sent with.
    Firewall peer("pass all allow-opts");
    CHECK(peer.run(fw.last_packet, PacketMeta{Hook::Input, fw.lan, kNoIface, false}).action ==
          Verdict::Action::Accept);
  }
  // Other multicast is forwarded, and raised as any packet is.
  const auto routed = [](uint8_t ttl) {
    return PacketBuilder().ipv4("10.1.0.1", "239.1.2.3").ttl(ttl).udp(5000, 5000).payload(4).build();
  };
  CHECK(fw.run(routed(1), own).rewritten);
  CHECK(fw.last_packet == routed(64));
}

TEST_CASE("scrub: a rule with proto tcp applies to TCP and not to UDP", "[engine][scrub]") {
  Firewall fw("scrub in proto tcp all max-mss 1400 min-ttl 5\npass all");
  const Verdict tcp = fw.out(tcp4(kClient, 1, kServer, 2).flags(tcpflag::kSyn).mss(1460).ttl(3).build());
  CHECK(tcp.action == Verdict::Action::Accept);
  CHECK(tcp.rewritten);
  CHECK(fw.last_packet == tcp4(kClient, 1, kServer, 2).flags(tcpflag::kSyn).mss(1400).ttl(5).build());
  const Bytes udp = PacketBuilder().ipv4(kClient, kServer).ttl(3).udp(7, 53).payload(4).build();
  const Verdict other = fw.out(udp);
  CHECK(other.action == Verdict::Action::Accept);
  CHECK_FALSE(other.rewritten);
  CHECK(fw.last_packet == udp);
}

TEST_CASE("scrub: max-mss lowers every MSS option of a segment, not only the last", "[engine][scrub]") {
  // As pf_normalize_mss: a receiver that reads the first of two options must not find a larger
  // size than the clamp allows.
  Firewall fw("scrub in all max-mss 1400\npass all");
  const auto syn = [](uint16_t port, uint16_t first, uint16_t second) {
    return tcp4(kClient, port, kServer, 2).flags(tcpflag::kSyn).mss(first).mss(second).build();
  };
  CHECK(fw.out(syn(1, 1460, 1300)).rewritten);
  CHECK(fw.last_packet == syn(1, 1400, 1300));
  CHECK(fw.out(syn(2, 1300, 1460)).rewritten);
  CHECK(fw.last_packet == syn(2, 1300, 1400));
  CHECK(fw.out(syn(3, 1500, 1460)).rewritten);
  CHECK(fw.last_packet == syn(3, 1400, 1400));
  CHECK_FALSE(fw.out(syn(4, 1200, 1300)).rewritten);
}

TEST_CASE("scrub: an urgent pointer without URG is cleared, as pf_normalize_tcp does, checksum kept",
          "[engine][scrub]") {
  const auto segment = [](uint8_t flags, uint16_t urgent) {
    return tcp4(kClient, 1, kServer, 2).flags(flags).seq(5).ack(7).urgent(urgent).payload(10).build();
  };
  Firewall fw("scrub in all\npass all");
  const Verdict stray = fw.out(segment(tcpflag::kAck, 0x1234));
  CHECK(stray.action == Verdict::Action::Accept);
  CHECK(stray.rewritten);
  // The builder sums the expected segment afresh: the incremental update must agree with it.
  CHECK(fw.last_packet == segment(tcpflag::kAck, 0));
  // With URG the pointer means something, and without one there is nothing to clear.
  CHECK_FALSE(fw.out(segment(tcpflag::kAck | tcpflag::kUrg, 0x1234)).rewritten);
  CHECK(fw.last_packet == segment(tcpflag::kAck | tcpflag::kUrg, 0x1234));
  CHECK_FALSE(fw.out(segment(tcpflag::kAck, 0)).rewritten);
  // Only where a scrub rule applies, as pf's.
  Firewall plain("pass all");
  CHECK_FALSE(plain.out(segment(tcpflag::kAck, 0x1234)).rewritten);
  CHECK(plain.last_packet == segment(tcpflag::kAck, 0x1234));
  Firewall elsewhere("scrub in on wan0 all\npass all");
  CHECK_FALSE(elsewhere.out(segment(tcpflag::kAck, 0x1234)).rewritten);
  // A checksum the kernel has yet to finish is finished over the cleared pointer.
  const Verdict partial = fw.out(segment(tcpflag::kAck, 0x1234), true);
  CHECK(partial.rewritten);
  CHECK(fw.last_packet == segment(tcpflag::kAck, 0));
}

TEST_CASE("scrub: the TCP header's reserved bits are cleared, as pf_normalize_tcp does; AE is kept",
          "[engine][scrub]") {
  const auto segment = [](uint8_t reserved) {
    return tcp4(kClient, 1, kServer, 2)
        .flags(tcpflag::kAck)
        .seq(5)
        .ack(7)
        .tcp_reserved(reserved)
        .payload(10)
        .build();
  };
  Firewall fw("scrub in all\npass all");
  const Verdict v = fw.out(segment(0x0e));
  CHECK(v.action == Verdict::Action::Accept);
  CHECK(v.rewritten);
  // The builder sums the expected segment afresh: the incremental update must agree with it.
  CHECK(fw.last_packet == segment(0));
  // AE is Accurate ECN's: cleared on one direction's packets alone, it would garble the counter
  // the ends feed back congestion by. FreeBSD's pf keeps it too.
  CHECK(fw.out(segment(0x0f)).rewritten);
  CHECK(fw.last_packet == segment(0x01));
  CHECK_FALSE(fw.out(segment(0x01)).rewritten);
  // A checksum the kernel has yet to finish is finished over the cleared bits.
  CHECK(fw.out(segment(0x02), true).rewritten);
  CHECK(fw.last_packet == segment(0));
  // Only where a scrub rule applies, as pf's.
  Firewall plain("pass all");
  CHECK_FALSE(plain.out(segment(0x0e)).rewritten);
  CHECK(plain.last_packet == segment(0x0e));
}

TEST_CASE("IP options pass only by rules with allow-opts, and by their states", "[engine][options]") {
  const Bytes record_route{7, 7, 4, 0, 0, 0, 0, 0};
  auto udp_out = [&](uint16_t sport, bool options) {
    PacketBuilder b = PacketBuilder().ipv4(kClient, kServer);
    if (options) b.ip_options(record_route);
    return b.udp(sport, 53).payload(8).build();
  };
  auto udp_back = [&](uint16_t dport, bool options) {
    PacketBuilder b = PacketBuilder().ipv4(kServer, kClient);
    if (options) b.ip_options(record_route);
    return b.udp(53, dport).payload(8).build();
  };

  SECTION("a pass rule without allow-opts, and the default pass, drop them and log") {
    Firewall fw("pass all");
    const Verdict v = fw.out(udp_out(1000, true));
    CHECK(v.action == Verdict::Action::Drop);
    CHECK(reason_name(v.reason) == "ip_options");
    CHECK(v.rule == 0);
    CHECK(v.log);
    CHECK(fw.out(udp_out(1001, false)).action == Verdict::Action::Accept);
    Firewall open_door("");
    CHECK(reason_name(open_door.out(udp_out(1000, true)).reason) == "ip_options");
    // An IGMP report's router alert is not refused.
    const Bytes igmp = PacketBuilder()
                           .ipv4(kClient, "224.0.0.22")
                           .ip_options({148, 4, 0, 0})
                           .raw_l4(ipproto::kIgmp, Bytes(8, 0))
                           .build();
    CHECK(fw.out(igmp).action == Verdict::Action::Accept);
    // To all hosts, IGMP never leaves its link (TTL 1): another TTL is refused, as pf's, even where
    // the rules allow options.
    auto to_all_hosts = [](uint8_t ttl) {
      return PacketBuilder().ipv4(kClient, "224.0.0.1").ttl(ttl).raw_l4(ipproto::kIgmp, Bytes(8, 0)).build();
    };
    Firewall allowing("pass all allow-opts");
    CHECK(allowing.out(to_all_hosts(1)).action == Verdict::Action::Accept);
    const Verdict routed = allowing.out(to_all_hosts(2));
    CHECK(reason_name(routed.reason) == "ip_options");
    CHECK(routed.log);
  }
  SECTION("MLD sent other than from a link-local address with hop limit 1 is refused whatever they allow") {
    // RFC 2710 3, RFC 3810 5: MLD never leaves its link; pf_walk_header6 drops any other as
    // PFRES_IPOPTIONS, with its router alert or without.
    const Bytes alert{0, 0, 5, 2, 0, 0, 1, 0};  // hop-by-hop: router alert (MLD), PadN
    auto mld = [&](const std::string& src, uint8_t hop_limit, uint8_t type, bool with_alert) {
      PacketBuilder b = PacketBuilder().ipv6(src, "ff02::16").ttl(hop_limit);
      if (with_alert) b.ipv6_ext_raw(pairwall::test::ip6ext::kHopByHop, alert);
      return b.icmp(type, 0).payload(16).build();
    };
    Firewall allowing("pass all allow-opts");
    for (const uint8_t type : {130, 131, 132, 143}) {
      INFO(int{type});
      CHECK(allowing.out(mld("fe80::1", 1, type, true)).action == Verdict::Action::Accept);
      for (const bool with_alert : {true, false}) {
        INFO(with_alert);
        const Verdict routed = allowing.out(mld("fe80::1", 64, type, with_alert));
        CHECK(reason_name(routed.reason) == "ip_options");
        CHECK(routed.log);
        CHECK(reason_name(allowing.out(mld("2001:db8:1::10", 1, type, with_alert)).reason) == "ip_options");
      }
    }
  }
  SECTION("every pass of a forwarded packet must allow them") {
    Firewall fw("pass in all allow-opts\npass out all");
    CHECK(reason_name(fw.out(udp_out(1000, true)).reason) == "ip_options");
    Firewall both("pass in all allow-opts\npass out all allow-opts");
    CHECK(both.out(udp_out(1000, true)).action == Verdict::Action::Accept);
    CHECK(both.engine.states().find_by_id({1, 1})->flags & stateflag::kAllowOpts);
  }
  SECTION("a state passes them only when its rules allowed them") {
    Firewall fw("pass all allow-opts\npass proto udp to port 53 keep state");
    // The state of the port-53 rule, which allows no options.
    REQUIRE(fw.out(udp_out(2000, false)).action == Verdict::Action::Accept);
    const Verdict reply = fw.in(udp_back(2000, true));
    CHECK(reason_name(reply.reason) == "ip_options");
    CHECK(reply.log);
    CHECK(fw.in(udp_back(2000, false)).reason == Reason::State);
    // One made by a rule that allows them passes them both ways.
    Firewall open("pass all allow-opts");
    REQUIRE(open.out(udp_out(2000, false)).action == Verdict::Action::Accept);
    CHECK(open.in(udp_back(2000, true)).reason == Reason::State);
    CHECK(open.out(udp_out(2000, true)).reason == Reason::State);
    // A translated connection has a state though its rule keeps none: the rule's allow-opts holds.
    Firewall nat("nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\npass all no state allow-opts");
    REQUIRE(nat.out(udp_out(2000, false)).action == Verdict::Action::Accept);
    const uint16_t port = static_cast<uint16_t>(nat.last_packet[20] << 8 | nat.last_packet[21]);
    const Bytes back = PacketBuilder()
                           .ipv4(kServer, "203.0.113.1")
                           .ip_options(record_route)
                           .udp(53, port)
                           .payload(8)
                           .build();
    // Addressed to the nat address, the reply is translated before routing.
    CHECK(nat.run(back, PacketMeta{Hook::Prerouting, nat.wan, kNoIface, false}).reason == Reason::State);
  }
}

TEST_CASE("no scrub exempts what it matches first from the scrub rules after it, as pf's",
          "[engine][scrub]") {
  Firewall fw("no scrub in from 10.1.0.9 to any\nscrub in all max-mss 1400 min-ttl 5\npass all");
  const auto syn = [](const std::string& src, uint16_t mss, uint8_t ttl) {
    return tcp4(src, 1, kServer, 2).flags(tcpflag::kSyn).mss(mss).ttl(ttl).build();
  };
  const Verdict exempt = fw.out(syn("10.1.0.9", 1460, 3));
  CHECK(exempt.action == Verdict::Action::Accept);
  CHECK_FALSE(exempt.rewritten);
  CHECK(fw.last_packet == syn("10.1.0.9", 1460, 3));
  // Not even the normalization every scrub rule does (the reserved bits).
  const Bytes reserved = tcp4("10.1.0.9", 3, kServer, 2).flags(tcpflag::kAck).tcp_reserved(0x0e).build();
  CHECK_FALSE(fw.out(reserved).rewritten);
  CHECK(fw.last_packet == reserved);
  // Anyone else meets the scrub rule.
  CHECK(fw.out(syn(kClient, 1460, 3)).rewritten);
  CHECK(fw.last_packet == syn(kClient, 1400, 5));
  // First match: a `no scrub` after the rule that matches changes nothing.
  Firewall late("scrub in all max-mss 1400\nno scrub in from 10.1.0.9 to any\npass all");
  CHECK(late.out(syn("10.1.0.9", 1460, 64)).rewritten);
  CHECK(late.last_packet == syn("10.1.0.9", 1400, 64));
}

TEST_CASE("scrub rules count the packets they match first on each pass, state hits and no scrub included",
          "[engine][scrub][counters]") {
  Firewall fw(R"(
no scrub in on lan0 from 10.1.0.9 to any
scrub in on lan0 all max-mss 1400
scrub out on wan0 all
scrub all
pass all
)");
  const auto scrub_counts = [&](std::size_t rule) {
    const auto& stats = *fw.engine.rules()->scrub_listing().at(rule).stats;
    CHECK(stats.evaluations.load() == stats.packets.load());
    CHECK(stats.states_current.load() == 0);
    return std::pair{stats.packets.load(), stats.bytes.load()};
  };
  using Counts = std::pair<uint64_t, uint64_t>;
  const Bytes syn = tcp4(kClient, kClientPort, kServer, 80).flags(tcpflag::kSyn).seq(1000).build();
  const Bytes syn_ack = tcp4(kServer, 80, kClient, kClientPort)
                            .flags(tcpflag::kSyn | tcpflag::kAck)
                            .seq(9000)
                            .ack(1001)
                            .build();
  const Bytes ack =
      tcp4(kClient, kClientPort, kServer, 80).flags(tcpflag::kAck).seq(1001).ack(9001).payload(100).build();
  const Bytes exempt = tcp4("10.1.0.9", kClientPort, kServer, 80).flags(tcpflag::kSyn).seq(5).build();
  REQUIRE(fw.out(syn).reason == Reason::Match);
  // Each pass counts its first match: in on lan0 @1, out on wan0 @2.
  CHECK(scrub_counts(1) == Counts{1, syn.size()});
  CHECK(scrub_counts(2) == Counts{1, syn.size()});
  // The reply meets `scrub all` on both its passes, in on wan0 and out on lan0.
  REQUIRE(fw.in(syn_ack).reason == Reason::State);
  CHECK(scrub_counts(3) == Counts{2, 2 * syn_ack.size()});
  // A state hit is scrubbed, and counted, like a first packet.
  REQUIRE(fw.out(ack).reason == Reason::State);
  CHECK(scrub_counts(1) == Counts{2, syn.size() + ack.size()});
  CHECK(scrub_counts(2) == Counts{2, syn.size() + ack.size()});
  // `no scrub` counts what it exempts; the out pass still meets @2.
  REQUIRE(fw.out(exempt).reason == Reason::Match);
  CHECK(scrub_counts(0) == Counts{1, exempt.size()});
  CHECK(scrub_counts(1) == Counts{2, syn.size() + ack.size()});
  CHECK(scrub_counts(2) == Counts{3, syn.size() + ack.size() + exempt.size()});
  CHECK(scrub_counts(3) == Counts{2, 2 * syn_ack.size()});
}

TEST_CASE("process_batch counts scrub rules as process() does, more rules in a batch than it sums at once",
          "[engine][batch][scrub][counters]") {
  // Six rules on the in pass and one on the out pass: a batch meets more rules than the worker
  // sums at a time, and must add the overflow as it goes.
  std::string rules;
  for (int host = 1; host <= 6; ++host)
    rules += "scrub in on lan0 from 10.1.0." + std::to_string(host) + "\n";
  rules += "scrub out all\npass all\n";
  std::vector<Sent> traffic;
  for (uint16_t i = 0; i < 35; ++i) {
    const std::string client = "10.1.0." + std::to_string(1 + i % 7);  // .7 meets no in rule
    const auto port = static_cast<uint16_t>(kClientPort + i);
    traffic.push_back({PacketBuilder().ipv4(client, kServer).udp(port, 53).payload(10 + i).build()});
    traffic.push_back(
        {PacketBuilder().ipv4(kServer, client).udp(53, port).payload(40 + i).build(), Hook::Forward, false});
  }
  check_batched_like_single(rules, traffic);
  // And the counts are what the traffic holds, not only alike: each in rule saw its host's queries.
  Firewall fw(rules);
  for (const Sent& sent : traffic) {
    Bytes copy = sent.bytes;
    fw.engine.process(fw.worker, copy, meta_of(sent, fw), fw.now);
  }
  const auto& listing = fw.engine.rules()->scrub_listing();
  for (std::size_t host = 1; host <= 6; ++host) CHECK(listing[host - 1].stats->packets.load() == 5);
  CHECK(listing[6].stats->packets.load() == traffic.size());
}

TEST_CASE("scrub set-tos sets the DSCP and keeps the ECN bits, as pf's; IPv4's checksum follows",
          "[engine][scrub]") {
  const auto v4 = [](uint8_t tos) {
    return PacketBuilder().ipv4(kClient, kServer).tos(tos).udp(7, 53).payload(4).build();
  };
  const auto v6 = [](uint8_t traffic_class) {
    return PacketBuilder().ipv6(kClient6, kServer6).tos(traffic_class).udp(7, 53).payload(4).build();
  };
  Firewall fw("scrub out on wan0 all set-tos ef\npass all");
  // The builder sums the expected header afresh: the incremental update must agree with it.
  for (const uint8_t ecn : {0, 1, 2, 3}) {
    INFO(int{ecn});
    CHECK(fw.out(v4(static_cast<uint8_t>(0x20 | ecn))).rewritten);
    CHECK(fw.last_packet == v4(static_cast<uint8_t>(0xb8 | ecn)));
    CHECK(fw.out(v6(static_cast<uint8_t>(0x20 | ecn))).rewritten);
    CHECK(fw.last_packet == v6(static_cast<uint8_t>(0xb8 | ecn)));
  }
  CHECK_FALSE(fw.out(v4(0xb9)).rewritten);
  CHECK_FALSE(fw.out(v6(0xba)).rewritten);
  // The other way the packet leaves by lan0, where no rule sets a TOS.
  const Bytes back = PacketBuilder().ipv4(kServer, kClient).tos(0x20).udp(53, 7).payload(4).build();
  CHECK_FALSE(fw.in(back).rewritten);
  CHECK(fw.last_packet == back);
  // Both passes set one: the out pass's holds, as pf applies it last.
  Firewall both("scrub in on lan0 all set-tos lowdelay\nscrub out on wan0 all set-tos cs1\npass all");
  CHECK(both.out(v4(0x03)).rewritten);
  CHECK(both.last_packet == v4(0x23));
}

TEST_CASE("scrub out applies on the departure interface of a forwarded packet", "[engine][scrub]") {
  Firewall fw("scrub out on wan0 all max-mss 1300\nscrub in on lan0 all max-mss 1400\npass all");
  const Verdict v = fw.out(tcp4(kClient, 1, kServer, 2).flags(tcpflag::kSyn).mss(1460).build());
  CHECK(v.rewritten);
  CHECK(fw.last_packet == tcp4(kClient, 1, kServer, 2).flags(tcpflag::kSyn).mss(1300).build());
  // The other direction departs on lan0, where no `scrub out` applies.
  const Verdict back =
      fw.in(tcp4(kServer, 2, kClient, 1).flags(tcpflag::kSyn | tcpflag::kAck).mss(1460).build());
  CHECK_FALSE(back.rewritten);
}

TEST_CASE("scrub no-df clears DF and random-id replaces the IPv4 ID, checksums kept valid",
          "[engine][scrub]") {
  Firewall fw("scrub in all no-df random-id\npass all");
  std::set<uint16_t> ids;
  for (uint16_t port = 1; port <= 20; ++port) {
    const Verdict v = fw.out(tcp4(kClient, port, kServer, 80).flags(tcpflag::kSyn).df().ip_id(7).build());
    CHECK(v.rewritten);
    const Bytes& p = fw.last_packet;
    CHECK((p[6] & 0x40) == 0);
    CHECK(pairwall::test::internet_checksum(p.data(), 20) == 0);
    ids.insert(pairwall::test::get16(p, 4));
  }
  CHECK(ids.size() > 15);  // 20 draws of 16 bits: collisions are rare, a constant would fail
}

TEST_CASE("scrub: the IPv4 reserved flag is cleared, as pf_normalize_ip leaves only DF, checksum kept",
          "[engine][scrub]") {
  const auto datagram = [](bool reserved, bool df) {
    return PacketBuilder()
        .ipv4(kClient, kServer)
        .reserved_flag(reserved)
        .df(df)
        .udp(7, 53)
        .payload(4)
        .build();
  };
  Firewall fw("scrub in all\npass all");
  const Verdict v = fw.out(datagram(true, true));
  CHECK(v.action == Verdict::Action::Accept);
  CHECK(v.rewritten);
  // The builder sums the expected header afresh: the incremental update must agree with it.
  CHECK(fw.last_packet == datagram(false, true));
  CHECK_FALSE(fw.out(datagram(false, true)).rewritten);
  // With no-df both flags go, in one update of the checksum.
  Firewall no_df("scrub in all no-df\npass all");
  CHECK(no_df.out(datagram(true, true)).rewritten);
  CHECK(no_df.last_packet == datagram(false, false));
  // Only where a scrub rule applies, as pf's.
  Firewall plain("pass all");
  CHECK_FALSE(plain.out(datagram(true, true)).rewritten);
  CHECK(plain.last_packet == datagram(true, true));
}

TEST_CASE("a reload keeps existing states and changes decisions for new flows", "[engine][reload]") {
  Firewall fw(kWebOnly);
  REQUIRE(fw.out(syn(80)).action == Action::Accept);
  fw.load("block all");
  CHECK(fw.in(synack(80)).reason == Reason::State);
  CHECK(fw.out(syn(443)).reason == Reason::RuleBlock);
}

// pf's states follow `set timeout` across a reload, except where their rule sets its own: a state
// stores its rule, and the rule only the timeouts it names.
TEST_CASE("a reload's global timeouts apply to existing idle states, a rule's own stay", "[engine][reload]") {
  struct Case {
    const char* name;
    const char* before;
    const char* after;
    Millis alive_at;    // after the packet: still there
    Millis expired_at;  // and gone (time-left filing may be up to an eighth late)
  };
  const Case cases[] = {
      {"shortened", "set timeout udp.first 60\npass all", "set timeout udp.first 5\npass all", Millis{4'000},
       Millis{6'000}},
      {"lengthened", "set timeout udp.first 5\npass all", "set timeout udp.first 60\npass all",
       Millis{50'000}, Millis{68'000}},
      {"the rule's own kept", "set timeout udp.first 60\npass all keep state (udp.first 30)",
       "set timeout udp.first 5\npass all keep state (udp.first 30)", Millis{25'000}, Millis{34'000}},
      {"another class's change leaves it", "set timeout udp.first 20\npass all",
       "set timeout { udp.first 20, udp.multiple 5 }\npass all", Millis{15'000}, Millis{23'000}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    Firewall fw(c.before);
    const Millis sent = fw.now;
    REQUIRE(fw.out(PacketBuilder().ipv4(kClient, kServer).udp(5353, 53).build()).reason == Reason::Match);
    CHECK(fw.engine.expire(sent + Millis{1'000}) == 0);
    fw.load(c.after);
    CHECK(fw.engine.expire(sent + c.alive_at) == 0);
    CHECK(fw.engine.states().size() == 1);
    CHECK(fw.engine.expire(sent + c.expired_at) == 1);
  }
  // The first expiry pass after the reload comes when the state is past its new lifetime already:
  // it goes in that pass.
  Firewall fw("set timeout udp.first 60\npass all");
  REQUIRE(fw.out(PacketBuilder().ipv4(kClient, kServer).udp(5353, 53).build()).reason == Reason::Match);
  fw.load("set timeout udp.first 5\npass all");
  CHECK(fw.engine.expire(fw.now + Millis{24 * 3600 * 1000}) == 1);
}

TEST_CASE("state changes are reported for sync", "[engine][sync]") {
  Firewall fw(kWebOnly);
  fw.out(syn(80));
  auto records = fw.drain();
  REQUIRE(records.size() == 1);
  CHECK(records[0].kind == StateRecord::Kind::Insert);
  CHECK(records[0].src.state == static_cast<uint8_t>(TcpState::SynSent));
  CHECK(records[0].stack_key.port[1] == 80);
  const StateId id = records[0].id;

  fw.in(synack(80));
  records = fw.drain();
  REQUIRE(records.size() == 1);
  CHECK(records[0].kind == StateRecord::Kind::Update);
  CHECK(records[0].id == id);
  CHECK(records[0].dst.state == static_cast<uint8_t>(TcpState::SynSent));

  // Plain data within one refresh interval produces no record.
  fw.out(ack_from_client(80, 1001, 9001));
  fw.drain();
  fw.out(ack_from_client(80, 1001, 9001, 100));
  CHECK(fw.drain().empty());

  fw.engine.expire(fw.now + Millis{100'000'000});
  StateRecord gone;
  REQUIRE(fw.engine.control_events().pop(gone));
  CHECK(gone.kind == StateRecord::Kind::Delete);
  CHECK(gone.id == id);
}

TEST_CASE("the states of a (no-sync) rule stay on this node", "[engine][sync]") {
  Firewall fw(
      "block all\n"
      "pass in on lan0 proto tcp to port 80 keep state (no-sync)\n"
      "pass in on lan0 proto tcp to port 443\n"
      "pass out on wan0 proto tcp\n");
  REQUIRE(fw.out(syn(80)).reason == Reason::Match);
  CHECK(fw.in(synack(80)).reason == Reason::State);
  CHECK(fw.out(ack_from_client(80, 1001, 9001)).reason == Reason::State);
  CHECK(fw.drain().empty());
  // A state of a rule without the option is reported as ever.
  REQUIRE(fw.out(syn(443)).reason == Reason::Match);
  const auto records = fw.drain();
  REQUIRE(records.size() == 1);
  CHECK(records[0].stack_key.port[1] == 443);
  // Nor does a bulk carry it, or a kill or an expiry announce its end.
  std::vector<uint16_t> bulk;
  fw.engine.snapshot(fw.now, [&](const StateRecord& r) { bulk.push_back(r.stack_key.port[1]); });
  CHECK(bulk == std::vector<uint16_t>{443});
  CHECK(fw.engine.kill_states([](const StateEntry& e) { return e.key(0).port[1] == 80; }) == 1);
  CHECK(fw.engine.expire(fw.now + Millis{100'000'000}) == 1);
  std::vector<StateId> gone;
  StateRecord r;
  while (fw.engine.control_events().pop(r)) gone.push_back(r.id);
  CHECK(gone == std::vector<StateId>{records[0].id});
}

TEST_CASE("killing states removes those the filter picks, tells the peer, and their traffic meets the rules",
          "[engine][sync]") {
  Firewall fw(kWebOnly);
  for (const uint16_t port : {80, 443}) {
    REQUIRE(fw.out(syn(port)).action == Action::Accept);
    REQUIRE(fw.in(synack(port)).reason == Reason::State);
    REQUIRE(fw.out(ack_from_client(port, 1001, 9001)).reason == Reason::State);
  }
  std::vector<StateId> ids;
  for (const auto& r : fw.drain()) {
    if (r.kind == StateRecord::Kind::Insert) ids.push_back(r.id);
  }
  REQUIRE(ids.size() == 2);

  const std::size_t killed =
      fw.engine.kill_states([](const StateEntry& e) { return e.key(0).port[1] == 443; });
  CHECK(killed == 1);
  CHECK(fw.engine.states().size() == 1);
  StateRecord gone;
  REQUIRE(fw.engine.control_events().pop(gone));
  CHECK(gone.kind == StateRecord::Kind::Delete);
  CHECK(gone.id == ids[1]);
  CHECK_FALSE(fw.engine.control_events().pop(gone));

  // The killed connection's next segment has no state and is no SYN: the rules block it.
  CHECK(fw.out(ack_from_client(443, 1001, 9001, 100)).reason == Reason::RuleBlock);
  CHECK(fw.out(ack_from_client(80, 1001, 9001, 100)).reason == Reason::State);
  CHECK(fw.engine.kill_states([](const StateEntry&) { return false; }) == 0);
}

// A peer's insert meets this node's own state of the connection, which a worker removes at that
// moment (a port used again, a source limit): the table answers Exists, and then finds nothing.
// The key is free again and the insert takes it; the empty handle was read, and the daemon died.
TEST_CASE("a peer's insert for a connection whose local state goes at that moment does not crash",
          "[engine][sync][workers]") {
  Firewall fw("pass all\n");
  StateKey key;
  key.family = Family::V4;
  key.proto = ipproto::kUdp;
  key.addr[0] = IpAddress::v4(0x0a01000a);
  key.addr[1] = IpAddress::v4(0xc0000250);
  key.port[0] = 5353;
  key.port[1] = 53;
  StateRecord insert;
  insert.kind = StateRecord::Kind::Insert;
  insert.stack_key = insert.wire_key = key;
  insert.src.state = static_cast<uint8_t>(FlowState::Single);
  insert.timeout = TimeoutClass::UdpFirst;
  insert.expires_in = Millis{60'000};
  StateTable& table = fw.engine.states();
  std::atomic<bool> stop{false};
  // The worker's side: the connection's state made, let go, then removed under the lock again.
  std::thread worker([&] {
    for (uint64_t counter = 1; !stop.load(std::memory_order_relaxed); ++counter) {
      StateTable::CreateStatus status;
      auto made =
          table.create(key, key, StateId{1, counter}, TimeoutClass::UdpFirst, Millis{60'000}, fw.now, status);
      const bool own = status == StateTable::CreateStatus::Created;
      made.release();
      if (!own) continue;
      auto again = table.find(key, table.hash(key));
      if (again && again->id.creator == 1) table.erase(again);
    }
  });
  uint32_t applied = 0;
  for (uint64_t counter = 1; counter <= 300'000; ++counter) {
    insert.id = StateId{2, counter};
    if (!fw.engine.apply(insert, fw.now)) continue;
    ++applied;
    StateRecord gone;
    gone.kind = StateRecord::Kind::Delete;
    gone.id = insert.id;
    fw.engine.apply(gone, fw.now);
  }
  stop = true;
  worker.join();
  INFO("inserts applied: " << applied);
  CHECK(table.size() <= 1);
}

TEST_CASE("records from the peer create states that pass mid-stream traffic", "[engine][sync]") {
  Firewall a(kWebOnly, 1);
  Firewall b(kWebOnly, 2);
  a.out(syn(80));
  a.in(synack(80));
  a.out(ack_from_client(80, 1001, 9001));
  for (const auto& r : a.drain()) b.engine.apply(r, b.now);
  StateRecord snapshot_record;
  a.engine.snapshot(a.now, [&](const StateRecord& r) { snapshot_record = r; });
  // Nothing the records before it did not bring: stale.
  CHECK_FALSE(b.engine.apply(snapshot_record, b.now));
  REQUIRE(b.engine.states().size() == 1);

  // The connection moved on by 3 MB since the last record; b takes over.
  const uint32_t far = 1001 + 3'000'000;
  CHECK(b.out(ack_from_client(80, far, 9001, 1000)).reason == Reason::State);
  CHECK(b.in(ack_from_server(80, 9001, far + 1000, 100)).reason == Reason::State);
  // Strict again after adoption.
  CHECK(b.in(ack_from_server(80, 9001 + 90'000'000, far + 1000, 100)).reason == Reason::BadSeq);

  SECTION("an older update never moves windows backwards") {
    StateRecord old = snapshot_record;
    old.kind = StateRecord::Kind::Update;
    old.src.seqlo = 1;
    b.engine.apply(old, b.now);
    auto h = b.engine.states().find_by_id(old.id);
    REQUIRE(h);
    CHECK(h->peer[0].seqlo != 1);
  }
  SECTION("a delete removes it") {
    StateRecord del;
    del.kind = StateRecord::Kind::Delete;
    del.id = snapshot_record.id;
    CHECK(b.engine.apply(del, b.now));
    CHECK(b.engine.states().size() == 0);
  }
}

TEST_CASE("a peer's state lives by its rule's own timeouts, on the node that takes it over too",
          "[engine][sync]") {
  // udp.multiple is 60 s by default; this rule keeps its flows for 600 s of silence.
  const std::string rules =
      "block all\n"
      "pass in on lan0 proto udp to port 53 keep state (udp.multiple 600)\n"
      "pass out on wan0 proto udp to port 53\n";
  Firewall a(rules, 1);
  Firewall b(rules, 2);
  const Bytes query = PacketBuilder().ipv4(kClient, kServer).udp(5353, 53).payload(40).build();
  const Bytes answer = PacketBuilder().ipv4(kServer, kClient).udp(53, 5353).payload(120).build();
  REQUIRE(a.out(query).reason == Reason::Match);
  REQUIRE(a.in(answer).reason == Reason::State);
  REQUIRE(a.out(query).reason == Reason::State);  // the asker again after the answer: udp.multiple
  b.learn_from(a);

  // Two minutes of silence: the flow is alive on a, and on b, which takes it over.
  a.now += Millis{120'000};
  b.now += Millis{120'000};
  CHECK(a.engine.expire(a.now) == 0);
  CHECK(b.engine.expire(b.now) == 0);
  CHECK(b.in(answer).reason == Reason::State);
  // b forwards it now, by the same rule's timeouts.
  b.now += Millis{120'000};
  CHECK(b.engine.expire(b.now) == 0);
  CHECK(b.out(query).reason == Reason::State);

  // A node running other rules cannot tell which of its own is the creator's: the global timeouts.
  Firewall other(rules + "pass in on lan0 proto udp to port 123\n", 3);
  StateRecord insert;
  a.engine.snapshot(a.now, [&](const StateRecord& r) { insert = r; });
  REQUIRE(other.engine.apply(insert, other.now));
  CHECK(other.engine.expire(other.now + Millis{59'000}) == 0);
  CHECK(other.engine.expire(other.now + Millis{61'000}) == 1);
}

TEST_CASE("a state this node removed is not brought back by the peer's copy that crossed the delete",
          "[engine][sync]") {
  Firewall a(kWebOnly, 1);
  Firewall b(kWebOnly, 2);
  // b carries a connection; a has it.
  b.out(syn(80));
  b.in(synack(80));
  b.out(ack_from_client(80, 1001, 9001));
  a.learn_from(b);
  REQUIRE(a.engine.states().size() == 1);

  // a sends its table (a bulk, a full or an incremental resync) as b kills the connection: a's copy
  // was made before a heard of the delete, and reaches b after it.
  StateRecord copy;
  a.engine.snapshot(a.now, [&](const StateRecord& r) { copy = r; });
  REQUIRE(b.engine.kill_states([](const StateEntry&) { return true; }) == 1);
  StateRecord gone;
  REQUIRE(b.engine.control_events().pop(gone));
  CHECK_FALSE(b.engine.apply(copy, b.now));
  CHECK(b.engine.states().size() == 0);
  CHECK(b.out(ack_from_client(80, 1001, 9001, 100)).reason == Reason::RuleBlock);
  REQUIRE(a.engine.apply(gone, a.now));
  CHECK(a.engine.states().size() == 0);

  // A state of b's earlier start, which a kept across b's restart, is b's again.
  EngineConfig restarted = pairwall::test::test_config(2);
  restarted.first_state_counter = uint64_t{1} << 40;
  Firewall b2(kWebOnly, restarted);
  CHECK(b2.engine.apply(copy, b2.now));
  CHECK(b2.engine.states().size() == 1);
}

TEST_CASE("the peer's newer state on a key takes the place of its older one whose delete is behind it",
          "[engine][sync]") {
  const std::string rules = "pass out on wan0 proto udp\n";
  Firewall a(rules, 1);
  Firewall b(rules, 2);
  const Bytes query = PacketBuilder().ipv4(kClient, kServer).udp(5353, 53).build();
  const Bytes answer = PacketBuilder().ipv4(kServer, kClient).udp(53, 5353).build();
  REQUIRE(a.out(query).reason == Reason::Match);
  b.learn_from(a);
  // a ends the flow, and the same ports start another at once; its insert overtakes the delete.
  REQUIRE(a.engine.kill_states([](const StateEntry&) { return true; }) == 1);
  StateRecord gone;
  REQUIRE(a.engine.control_events().pop(gone));
  REQUIRE(a.out(query).reason == Reason::Match);
  const auto made = a.drain();
  REQUIRE(made.size() == 1);
  REQUIRE(made[0].id.counter > gone.id.counter);
  CHECK(b.engine.apply(made[0], b.now));
  CHECK_FALSE(b.engine.apply(gone, b.now));
  REQUIRE(b.engine.states().size() == 1);
  CHECK(b.engine.states().find_by_id(made[0].id));
  CHECK(b.in(answer).reason == Reason::State);

  // An older state of the creator's does not replace its newer one.
  StateRecord older = made[0];
  older.id.counter = gone.id.counter;
  older.kind = StateRecord::Kind::Insert;
  CHECK_FALSE(b.engine.apply(older, b.now));
  CHECK(b.engine.states().find_by_id(made[0].id));
}

TEST_CASE("a late update from the peer does not take an established state back to the handshake's timeout",
          "[engine][sync]") {
  Firewall a(kWebOnly, 1);
  Firewall b(kWebOnly, 2);
  a.out(syn(80));
  auto records = a.drain();
  REQUIRE(records.size() == 1);
  // What the wire brings of an update: no key (decode_update), the class the sender had then.
  StateRecord late = records.front();
  late.kind = StateRecord::Kind::Update;
  late.stack_key = StateKey{};
  late.wire_key = StateKey{};
  REQUIRE(late.timeout == TimeoutClass::TcpFirst);
  REQUIRE(b.engine.apply(records.front(), b.now));
  a.in(synack(80));
  a.out(ack_from_client(80, 1001, 9001));
  b.learn_from(a);
  // Resent after the handshake's end, or overtaken by it: stale, and it changes nothing.
  CHECK_FALSE(b.engine.apply(late, b.now));
  CHECK(b.engine.expire(b.now + Millis{120'000}) == 0);
  CHECK(b.out(ack_from_client(80, 1001, 9001, 100)).reason == Reason::State);
}

TEST_CASE("a peer's state of a connection's first packet alone lives tcp.first, as on its creator",
          "[engine][sync]") {
  // pfsync_state_import takes the state's timeout class as sent. Taken from the TCP states alone
  // (the initiator's SYN_SENT, the responder's CLOSED), it was tcp.opening: a quarter of the
  // default tcp.first, and whatever `set timeout tcp.opening` says rather than tcp.first.
  Firewall a(kWebOnly, 1);
  Firewall b(kWebOnly, 2);
  REQUIRE(a.out(syn(80)).reason == Reason::Match);
  const auto records = a.drain();
  REQUIRE(records.size() == 1);
  REQUIRE(records.front().timeout == TimeoutClass::TcpFirst);
  REQUIRE(b.engine.apply(records.front(), b.now));
  CHECK(b.engine.expire(b.now + Millis{119'000}) == 0);
  CHECK(a.engine.expire(a.now + Millis{119'000}) == 0);
  CHECK(b.engine.expire(b.now + Millis{120'000}) == 1);
  CHECK(a.engine.expire(a.now + Millis{120'000}) == 1);
}

TEST_CASE("a peer's states expire by the time they have left, whatever order their records come in",
          "[engine][sync]") {
  const std::string rules = "pass out on wan0 proto udp\n";
  Firewall a(rules, 1);
  Firewall b(rules, 2);
  REQUIRE(a.out(PacketBuilder().ipv4(kClient, kServer).udp(5353, 53).build()).reason == Reason::Match);
  const auto made = a.drain();
  REQUIRE(made.size() == 1);
  // A bulk lists states in no order of their lifetimes: one just active, then 32 with 2 s left.
  REQUIRE(b.engine.apply(made[0], b.now));
  for (uint16_t i = 1; i <= 32; ++i) {
    StateRecord r = made[0];
    r.id.counter += i;
    r.stack_key.port[0] = static_cast<uint16_t>(r.stack_key.port[0] + i);
    r.wire_key = r.stack_key;
    r.expires_in = Millis{2'000};
    REQUIRE(b.engine.apply(r, b.now));
  }
  REQUIRE(b.engine.states().size() == 33);
  CHECK(b.engine.expire(b.now + Millis{1'999}) == 0);
  // On time, but for an eighth of their time left; not behind the state that has longer.
  CHECK(b.engine.expire(b.now + Millis{2'250}) == 32);
  CHECK(b.engine.states().size() == 1);
}

TEST_CASE("a peer that has only the SYN's insert carries the handshake on, whatever it missed",
          "[engine][sync]") {
  Firewall a(kWebOnly, 1);
  a.out(syn(80));
  const auto records = a.drain();
  REQUIRE(records.size() == 1);
  Firewall b(kWebOnly, 2);
  REQUIRE(b.engine.apply(records.front(), b.now));
  SECTION("the client's retransmitted SYN, the SYN-ACK, then both sides' data") {
    CHECK(b.out(syn(80)).reason == Reason::State);
    CHECK(b.in(synack(80)).reason == Reason::State);
    CHECK(b.out(ack_from_client(80, 1001, 9001)).reason == Reason::State);
    CHECK(b.out(ack_from_client(80, 1001, 9001, 200)).reason == Reason::State);
    CHECK(b.in(ack_from_server(80, 9001, 1201, 200)).reason == Reason::State);
  }
  SECTION("the server's data, acknowledging client data that went by the old master") {
    CHECK(b.in(ack_from_server(80, 9001, 1201, 200)).reason == Reason::State);
    CHECK(b.out(ack_from_client(80, 1201, 9201)).reason == Reason::State);
    auto state = b.engine.states().find_by_id(records.front().id);
    REQUIRE(state);
    CHECK(state->peer[1].state == static_cast<uint8_t>(TcpState::Established));
    CHECK(state->timeout == TimeoutClass::TcpEstablished);
  }
  SECTION("the SYN-ACK first: its window scale holds, and the connection is established") {
    CHECK(b.in(synack(80)).reason == Reason::State);
    CHECK(b.out(ack_from_client(80, 1001, 9001)).reason == Reason::State);
    // The client's window of 512 is 64 kB at scale 7: the server may fill it.
    CHECK(b.in(ack_from_server(80, 9001, 1001, 1400)).reason == Reason::State);
    CHECK(b.in(ack_from_server(80, 9001 + 1400, 1001, 1400)).reason == Reason::State);
    CHECK(b.out(ack_from_client(80, 1001, 9001 + 2800)).reason == Reason::State);
    auto state = b.engine.states().find_by_id(records.front().id);
    REQUIRE(state);
    CHECK(state->peer[1].state == static_cast<uint8_t>(TcpState::Established));
    CHECK(state->timeout == TimeoutClass::TcpEstablished);
  }
}

TEST_CASE("a peer that missed the handshake's last ACK establishes on the client's first packet",
          "[engine][sync]") {
  Firewall a(kWebOnly, 1);
  a.out(syn(80));
  a.in(synack(80));
  const auto records = a.drain();  // the SYN's insert and the SYN-ACK's update, not the ACK's
  REQUIRE(records.size() == 2);
  Firewall b(kWebOnly, 2);
  for (const auto& r : records) REQUIRE(b.engine.apply(r, b.now));
  // The request, then nothing while the server thinks (a long poll), longer than tcp.opening.
  REQUIRE(b.out(ack_from_client(80, 1001, 9001, 300)).reason == Reason::State);
  auto state = b.engine.states().find_by_id(records.front().id);
  REQUIRE(state);
  CHECK(state->peer[1].state == static_cast<uint8_t>(TcpState::Established));
  CHECK(state->timeout == TimeoutClass::TcpEstablished);
  state.release();
  CHECK(b.engine.expire(b.now + Millis{60'000}) == 0);
  CHECK(b.in(ack_from_server(80, 9001, 1301, 200)).reason == Reason::State);
}

TEST_CASE("a node that takes a connection back follows it from where the peer's updates left it",
          "[engine][sync]") {
  // a carries a connection, fails over to b, and takes it back. What b reports of it lags the
  // connection by up to a second of data, as it did for b when b took over from a; a, which had
  // tracked the connection itself before, judged the first segments after the failback against
  // those windows and dropped them, a megabyte past them, until the state expired.
  Firewall a(kWebOnly, 1);
  Firewall b(kWebOnly, 2);
  REQUIRE(a.out(syn(80)).reason == Reason::Match);
  REQUIRE(a.in(synack(80)).reason == Reason::State);
  REQUIRE(a.out(ack_from_client(80, 1001, 9001)).reason == Reason::State);
  b.learn_from(a);
  uint32_t seq = 1001;
  for (int i = 0; i < 2'000; ++i) {
    REQUIRE(b.out(ack_from_client(80, seq, 9001, 1000)).reason == Reason::State);
    seq += 1000;
    REQUIRE(b.in(ack_from_server(80, 9001, seq)).reason == Reason::State);
    b.now += Millis{1};
  }
  const auto updates = b.drain();
  REQUIRE_FALSE(updates.empty());
  for (const auto& r : updates) a.engine.apply(r, a.now);
  CHECK(a.out(ack_from_client(80, seq, 9001, 1000)).reason == Reason::State);
  CHECK(a.in(ack_from_server(80, 9001, seq + 1000)).reason == Reason::State);
  // Strict again from there.
  CHECK(a.in(ack_from_server(80, 9001 + 90'000'000, seq + 1000, 100)).reason == Reason::BadSeq);
}

TEST_CASE("state ids count from the configured start, above every id of an earlier start", "[engine][sync]") {
  EngineConfig config = pairwall::test::test_config(1);
  config.first_state_counter = uint64_t{1} << 40;
  Firewall fw(kWebOnly, config);
  fw.out(syn(80));
  fw.out(syn(443));
  const auto made = fw.drain();
  REQUIRE(made.size() == 2);
  CHECK(made[0].id == StateId{1, uint64_t{1} << 40});
  CHECK(made[1].id == StateId{1, (uint64_t{1} << 40) + 1});
}

TEST_CASE("the end of a peer's full transfer removes its states the transfer did not name",
          "[engine][sync]") {
  Firewall a(kWebOnly, 1);
  Firewall b(kWebOnly, 2);
  // Three connections from a (ports 80 and 443 to the server, and 80 from another client port)
  // and one b made itself.
  a.out(syn(80));
  a.out(syn(443));
  a.out(tcp4(kClient, kClientPort + 1, kServer, 80).flags(tcpflag::kSyn).seq(1).build());
  const auto made = a.drain();
  REQUIRE(made.size() == 3);
  b.engine.set_peer_sequence(10);
  for (const auto& r : made) REQUIRE(b.engine.apply(r, b.now));
  REQUIRE(b.out(tcp4(kClient, kClientPort + 2, kServer, 443).flags(tcpflag::kSyn).seq(1).build()).reason ==
          Reason::Match);
  REQUIRE(b.engine.states().size() == 4);

  // A transfer from a's snapshot at sequence 20 names the first connection only (in sequence 25);
  // b's packets meet the third meanwhile.
  b.engine.set_peer_sequence(25);
  b.engine.apply(made[0], b.now);  // nothing new in it, but it names the state
  REQUIRE(b.out(tcp4(kClient, kClientPort + 1, kServer, 80).flags(tcpflag::kSyn).seq(1).build()).reason ==
          Reason::State);

  CHECK(b.engine.remove_peer_states_unnamed_since(1, 20) == 1);
  CHECK(b.engine.states().size() == 3);
  CHECK(b.engine.states().find_by_id(made[0].id));
  CHECK_FALSE(b.engine.states().find_by_id(made[1].id));  // gone on a, its delete lost
  CHECK(b.engine.states().find_by_id(made[2].id));        // b's own traffic now
  // Nothing to tell the peer: the states were its own.
  StateRecord event;
  CHECK_FALSE(b.engine.control_events().pop(event));
  // Another transfer that names nothing removes the rest of a's that b has not taken over; b's own
  // states are never the peer's to remove.
  CHECK(b.engine.remove_peer_states_unnamed_since(1, 30) == 1);
  CHECK(b.engine.remove_peer_states_unnamed_since(2, 30) == 0);
  CHECK(b.engine.states().size() == 2);
}

TEST_CASE(
    "a link-local flow's state belongs to its link: the same addresses on another link are another flow",
    "[engine][state][ipv6]") {
  Firewall fw("block all\npass out inet6 proto udp\n");
  const auto on = [&](Hook hook, IfaceId link) {
    return hook == Hook::Output ? PacketMeta{Hook::Output, kNoIface, link, false}
                                : PacketMeta{Hook::Input, link, kNoIface, false};
  };
  const auto udp6 = [](const std::string& src, uint16_t sport, const std::string& dst, uint16_t dport) {
    return PacketBuilder().ipv6(src, dst).udp(sport, dport).payload(8).build();
  };
  // This node asks a neighbour on lan0 by its link-local address.
  REQUIRE(fw.run(udp6("fe80::1", 5000, "fe80::2", 53), on(Hook::Output, fw.lan)).action == Action::Accept);
  CHECK(fw.run(udp6("fe80::2", 53, "fe80::1", 5000), on(Hook::Input, fw.lan)).reason == Reason::State);
  // fe80::2 on wan0 is another host: its datagram meets the rules.
  CHECK(fw.run(udp6("fe80::2", 53, "fe80::1", 5000), on(Hook::Input, fw.wan)).reason == Reason::RuleBlock);
  // A group of the link's scope binds a flow to its link too.
  REQUIRE(fw.run(udp6("2001:db8::1", 5001, "ff02::1:2", 547), on(Hook::Output, fw.lan)).action ==
          Action::Accept);
  CHECK(fw.run(udp6("2001:db8::1", 5001, "ff02::1:2", 547), on(Hook::Output, fw.wan)).reason ==
        Reason::Match);
  CHECK(fw.engine.states().size() == 3);
  // Global addresses are the same hosts on any link: their states float, as pf's.
  REQUIRE(fw.run(udp6("2001:db8::1", 5002, "2001:db8:2::2", 53), on(Hook::Output, fw.lan)).action ==
          Action::Accept);
  CHECK(fw.run(udp6("2001:db8:2::2", 53, "2001:db8::1", 5002), on(Hook::Input, fw.wan)).reason ==
        Reason::State);
  // The peer has link-local addresses of its own: only the global flow's state is sent.
  const std::vector<StateRecord> sent = fw.drain();
  REQUIRE_FALSE(sent.empty());
  CHECK(sent[0].kind == StateRecord::Kind::Insert);
  CHECK(sent[0].stack_key.addr[1] == parse_address("2001:db8:2::2", nullptr).value());
  for (const StateRecord& r : sent) CHECK(r.id == sent[0].id);
}

// A forwarded SYN to each case's port through its rules, lan0 to wan0: the verdict it expects.
struct TagCase {
  const char* rules;
  uint16_t port;
  Action action;
  const char* why;
};

void check_forwarded_syns(std::initializer_list<TagCase> cases) {
  for (const TagCase& c : cases) {
    INFO(c.why << ", port " << c.port);
    Firewall fw(c.rules);
    const Verdict v = fw.out(syn(c.port));
    CHECK(v.action == c.action);
    if (c.action == Action::Drop) CHECK(v.reason == Reason::RuleBlock);
  }
}

TEST_CASE("tag and tagged: a forwarded packet's out pass sees the tag its in pass left, as pf's",
          "[engine][tag]") {
  const char* const kTrust =
      "block all\n"
      "pass in on lan0 proto tcp to port 80 tag WEB\n"
      "pass in on lan0 proto tcp to port 22\n"
      "pass out on wan0 proto tcp tagged WEB\n";
  const char* const kSticky =
      "block all\n"
      "pass in on lan0 proto tcp tag WEB\n"
      "pass in on lan0 proto tcp to port 22\n"
      "pass in on lan0 proto tcp to port 25 tag MAIL\n"
      "pass out on wan0 proto tcp tagged WEB\n";
  const char* const kQuick =
      "block all\n"
      "pass in quick on lan0 proto tcp to port 443\n"
      "pass in on lan0 proto tcp tag WEB\n"
      "pass out on wan0 proto tcp tagged WEB\n";
  const char* const kNegated =
      "block all\n"
      "pass in on lan0 proto tcp to port 25 tag MAIL\n"
      "pass in on lan0 proto tcp\n"
      "pass out on wan0 proto tcp ! tagged MAIL\n";
  const char* const kNoTagRule =
      "block all\n"
      "pass in on lan0 proto tcp\n"
      "pass out on wan0 proto tcp ! tagged X\n";
  check_forwarded_syns({
      TagCase{kNoTagRule, 80, Action::Accept, "tested, never set"},
      TagCase{kTrust, 80, Action::Accept, "tagged by the in rule that decided"},
      TagCase{kTrust, 22, Action::Drop, "no tag: the out pass has only block all"},
      TagCase{kSticky, 22, Action::Accept, "sticky: a later rule without a tag keeps it"},
      TagCase{kSticky, 25, Action::Drop, "a later rule's tag replaces it"},
      TagCase{kQuick, 443, Action::Drop, "the tag rule after a deciding quick rule is not evaluated"},
      TagCase{kQuick, 80, Action::Accept, "no quick rule matched: the tag rule did"},
      TagCase{kNegated, 25, Action::Drop, "! tagged: not with it"},
      TagCase{kNegated, 80, Action::Accept, "! tagged: without it"},
  });
  // The tag goes with the packet, not the interface: the other direction never carries it.
  Firewall fw(kTrust);
  CHECK(fw.in(tcp4(kServer, 80, kClient, kClientPort).flags(tcpflag::kSyn).build()).action == Action::Drop);
}

TEST_CASE("address ranges match from their first address to their last, in their own family",
          "[engine][rules]") {
  const auto from = [](const std::string& src) {
    return tcp4(src, kClientPort, kServer, 80).flags(tcpflag::kSyn).build();
  };
  Firewall fw("block all\npass in on lan0 from 10.1.0.5 - 10.1.0.20\npass out on wan0\n");
  CHECK(fw.out(from("10.1.0.4")).reason == Reason::RuleBlock);
  CHECK(fw.out(from("10.1.0.5")).action == Action::Accept);
  CHECK(fw.out(from("10.1.0.20")).action == Action::Accept);
  CHECK(fw.out(from("10.1.0.21")).reason == Reason::RuleBlock);
  CHECK(fw.engine.rules()->rule(1).text == "pass in on lan0 from 10.1.0.5 - 10.1.0.20 to any keep state");

  Firewall negated("block all\npass in on lan0 from ! 10.1.0.5 - 10.1.0.20\npass out on wan0\n");
  CHECK(negated.out(from("10.1.0.4")).action == Action::Accept);
  CHECK(negated.out(from("10.1.0.12")).reason == Reason::RuleBlock);
  // An IPv4 range, negated or not, says nothing of IPv6 packets, as an IPv4 prefix does not.
  CHECK(
      negated.out(PacketBuilder().ipv6(kClient6, kServer6).tcp(kClientPort, 80).flags(tcpflag::kSyn).build())
          .reason == Reason::RuleBlock);
}

TEST_CASE("match rules tag what they match and decide nothing; pf evaluates them up to where it stops",
          "[engine][tag]") {
  const char* const kBefore =
      "block all\n"
      "match in on lan0 proto tcp to port 80 tag WEB\n"
      "pass in on lan0 proto tcp\n"
      "pass out on wan0 proto tcp tagged WEB\n";
  const char* const kAfter =
      "block all\n"
      "pass in on lan0 proto tcp\n"
      "pass out on wan0 proto tcp tagged WEB\n"
      "match in on lan0 proto tcp to port 80 tag WEB\n";
  const char* const kQuick =
      "block all\n"
      "pass in quick on lan0 proto tcp to port 22\n"
      "pass in on lan0 proto tcp\n"
      "match in on lan0 tag WEB\n"
      "pass out on wan0 proto tcp tagged WEB\n";
  const char* const kQuickAnchor =
      "block all\n"
      "pass in on lan0 proto tcp\n"
      "anchor \"ssh\" in quick on lan0 {\n"
      "  pass in proto tcp to port 22\n"
      "}\n"
      "match in on lan0 tag WEB\n"
      "pass out on wan0 proto tcp tagged WEB\n";
  const char* const kAlone =
      "block out on wan0\n"
      "match in on lan0 tag WEB\n"
      "pass out on wan0 proto tcp tagged WEB\n";
  check_forwarded_syns({
      TagCase{kBefore, 80, Action::Accept, "a match rule before the deciding one tags"},
      TagCase{kBefore, 81, Action::Drop, "it matched nothing: no tag"},
      TagCase{kAfter, 80, Action::Accept, "after the deciding one too: pf evaluates every rule"},
      TagCase{kQuick, 22, Action::Drop, "after a deciding quick rule it is not evaluated"},
      TagCase{kQuick, 80, Action::Accept, "no quick rule matched"},
      TagCase{kQuickAnchor, 22, Action::Drop, "the quick anchor that decided ends the evaluation"},
      TagCase{kQuickAnchor, 80, Action::Accept, "the quick anchor matched nothing"},
      TagCase{kAlone, 80, Action::Accept, "no in rule decides, the match rule tags all the same"},
  });
  // A match rule never decides: the last pass or block rule that matched does, ...
  Firewall blocked("block in on lan0\nmatch in on lan0 tag WEB\n");
  CHECK(blocked.out(syn(80)).reason == Reason::RuleBlock);
  Firewall kept("pass in on lan0 proto tcp\nmatch in on lan0 tag WEB\n");
  CHECK(kept.out(syn(80)).action == Action::Accept);
  CHECK(kept.engine.states().size() == 1);
  // ... and alone, the packet passes by the implicit pass, with no state.
  Firewall alone("match in on lan0 tag WEB\n");
  const Verdict v = alone.out(syn(80));
  CHECK(v.action == Action::Accept);
  CHECK(alone.engine.states().size() == 0);
  CHECK(alone.engine.rules()->rule(0).text == "match in on lan0 all tag WEB");
}

TEST_CASE("a tag set in a pass is what the rules after it in that pass see, as in pf", "[engine][tag]") {
  // pf's idiom since match rules: classify once, then decide by the tags.
  const char* const kRules =
      "block all\n"
      "match in on lan0 proto tcp to port 80 tag WEB\n"
      "match in on lan0 proto tcp to port 25 tag MAIL\n"
      "pass in on lan0 tagged WEB\n"
      "pass in on lan0 tagged MAIL\n"
      "block in on lan0 proto tcp to port 25 tagged MAIL\n"
      "pass out on wan0 tagged WEB\n";
  Firewall fw(kRules);
  CHECK(fw.out(syn(80)).action == Action::Accept);
  CHECK(fw.out(syn(22)).reason == Reason::RuleBlock);
  // Tagged MAIL and passed in, then blocked by the rule after it that tests the same tag.
  const Verdict mail = fw.out(syn(25));
  CHECK(mail.reason == Reason::RuleBlock);
  CHECK(mail.rule == 5);
}

TEST_CASE("process_batch follows tags set and tested in one pass as process() does", "[engine][batch][tag]") {
  const std::string rules = R"(
block all
match in on lan0 proto tcp to port 80 tag WEB
match in on lan0 proto tcp to port { 25, 8080 } tag MAIL
pass in on lan0 proto tcp tagged WEB
pass in on lan0 proto tcp tagged MAIL
pass in quick on lan0 proto tcp to port 443
pass in on wan0 proto tcp from port 80
pass out on wan0 proto tcp tagged WEB
match out on wan0 proto tcp to port 8080 tag WEB
pass out on wan0 proto tcp tagged WEB
)";
  std::vector<Sent> traffic;
  const uint16_t ports[] = {80, 22, 25, 443, 8080, 53};
  for (uint16_t i = 0; i < 36; ++i) {
    const auto port = static_cast<uint16_t>(kClientPort + i);
    traffic.push_back(
        {tcp4(kClient, port, kServer, ports[i % 6]).flags(tcpflag::kSyn).seq(1000 + i).build()});
  }
  check_batched_like_single(rules, traffic);
}

TEST_CASE("process_batch follows tags as process() does", "[engine][batch][tag]") {
  const std::string rules = R"(
block all
pass in on lan0 proto tcp tag WEB
pass in on lan0 proto tcp to port 22
pass in on lan0 proto tcp to port 25 tag MAIL
pass in quick on lan0 proto tcp to port 443
pass in on wan0 proto tcp from port 80
pass out on wan0 proto tcp tagged WEB
block out on wan0 proto tcp to port 8080 tagged WEB
pass out on lan0 proto tcp ! tagged MAIL
)";
  std::vector<Sent> traffic;
  const uint16_t ports[] = {80, 22, 25, 443, 8080, 53};
  for (uint16_t i = 0; i < 36; ++i) {
    const auto port = static_cast<uint16_t>(kClientPort + i);
    const uint16_t dport = ports[i % 6];
    traffic.push_back({tcp4(kClient, port, kServer, dport).flags(tcpflag::kSyn).seq(1000 + i).build()});
    if (i % 3 == 0)
      traffic.push_back(
          {tcp4(kServer, 80, kClient, port).flags(tcpflag::kSyn).seq(7).build(), Hook::Forward, false});
  }
  check_batched_like_single(rules, traffic);
}

namespace {

// The routes back to sources: the inside network by lan0, the documentation ranges' 192.0.2/24 by
// wan0, 10.9/16 by both (a multipath route: by lan0 alone to a question for one path), nothing
// else (kNoIface, as for a source of the node's own). The firewall's worker asks it; it counts the
// questions.
struct SourceRoutes : Router {
  explicit SourceRoutes(Firewall& fw) : lan(fw.lan), wan(fw.wan) { fw.worker.set_router(this); }
  IfaceId lan;
  IfaceId wan;
  std::vector<RouteQuery> asked;
  Route route(const RouteQuery& query, Millis) noexcept override {
    asked.push_back(query);
    const uint32_t a = query.dst.v4_value();
    if (query.family == Family::V4 && (a >> 16) == 0x0a09) {  // 10.9/16
      Route both{lan, true};
      if (query.every_path) both.other_paths[0] = wan;
      return both;
    }
    if (query.family == Family::V4 && (a >> 16) == 0x0a01) return {lan, true};               // 10.1/16
    if (query.family == Family::V4 && (a >> 8) == 0xc00002) return {wan, true};              // 192.0.2/24
    if (query.family == Family::V6 && query.dst.hi >> 32 == 0x20010db8) return {wan, true};  // 2001:db8::/32
    return {};
  }
};

}  // namespace

// pf's `from urpf-failed`: a source whose route back leaves by another interface than the one the
// packet came in on (or by none) fails the unicast reverse path check.
TEST_CASE("from urpf-failed: sources the routes would not send back where they came from", "[engine][urpf]") {
  Firewall fw("block in quick log from urpf-failed\npass all\n");
  SourceRoutes routes(fw);
  CHECK(fw.engine.rules()->rule(0).text == "block in log quick from urpf-failed to any");
  const auto udp4 = [](const std::string& src, const std::string& dst, uint16_t sport) {
    return PacketBuilder().ipv4(src, dst).udp(sport, 53).payload(8).build();
  };
  struct Case {
    const char* name;
    bool from_lan;  // arrives on lan0 (else wan0)
    std::string src;
    Reason reason;
  };
  const Case cases[] = {
      {"an inside host, arriving inside", true, kClient, Reason::Match},
      {"a server, arriving outside", false, kServer, Reason::Match},
      {"an inside address arriving outside (forged)", false, "10.1.0.99", Reason::RuleBlock},
      {"an outside address arriving inside (forged)", true, "192.0.2.99", Reason::RuleBlock},
      {"a source with no route back", false, "203.0.113.9", Reason::RuleBlock},
      {"a link-local source: its route is its link's", false, "169.254.7.7", Reason::Match},
      {"a multipath route's source, arriving by its one path", true, "10.9.0.5", Reason::Match},
      {"a multipath route's source, arriving by its other path", false, "10.9.0.6", Reason::Match},
  };
  uint16_t port = 1000;
  for (const Case& c : cases) {
    INFO(c.name);
    const Bytes p = udp4(c.src, c.from_lan ? kServer : kClient, ++port);
    const std::size_t asked = routes.asked.size();
    const Verdict v = c.from_lan ? fw.out(p) : fw.in(p);
    CHECK(v.reason == c.reason);
    if (c.reason == Reason::RuleBlock) CHECK(v.rule == 0);
    if (c.src.starts_with("169.254.")) {
      CHECK(routes.asked.size() == asked);
      continue;
    }
    // Asked once, of the route to the source, as the node itself would send there.
    REQUIRE(routes.asked.size() == asked + 1);
    const RouteQuery& q = routes.asked.back();
    CHECK(to_string(q.family, q.dst) == c.src);
    CHECK(q.in_link == 0);
    CHECK(q.every_path);
  }
  // IPv6 alike.
  const Bytes forged6 = PacketBuilder().ipv6("2001:db8:7::1", "2001:db8:2::80").udp(7, 53).build();
  CHECK(fw.out(forged6).reason == Reason::RuleBlock);
  const Bytes honest6 = PacketBuilder().ipv6("2001:db8:7::1", "2001:db8:1::10").udp(7, 53).build();
  CHECK(fw.in(honest6).reason == Reason::Match);

  // A state's packets meet no rule: the reply of a passed flow asks nothing.
  const std::size_t asked = routes.asked.size();
  CHECK(fw.in(PacketBuilder().ipv4(kServer, kClient).udp(53, 1001).payload(8).build()).reason ==
        Reason::State);
  CHECK(routes.asked.size() == asked);
}

TEST_CASE("urpf-failed: asked only where a rule names it, and on in passes alone", "[engine][urpf]") {
  const Bytes forged = PacketBuilder().ipv4("10.1.0.99", kClient).udp(1, 53).build();
  SECTION("a rule set without it asks no route") {
    Firewall fw("block in quick from 10.9.0.0/16\npass all\n");
    SourceRoutes routes(fw);
    CHECK(fw.in(forged).reason == Reason::Match);
    CHECK(routes.asked.empty());
  }
  SECTION("an out pass's rules see no source failing it") {
    // A rule of no direction meets both passes; on the out pass (lan0 here) no source fails.
    Firewall fw("pass all\nblock quick on lan0 from urpf-failed\n");
    SourceRoutes routes(fw);
    CHECK(fw.in(forged).reason == Reason::Match);  // in on wan0, out on lan0
    CHECK(fw.out(PacketBuilder().ipv4(kServer, kClient).udp(2, 53).build()).reason == Reason::RuleBlock);
  }
  SECTION("without a Router (offline replays) no source fails it") {
    Firewall fw("block in quick from urpf-failed\npass all\n");
    CHECK(fw.in(forged).reason == Reason::Match);
  }
  SECTION("a match rule tags what fails it, for a later rule") {
    Firewall fw("match in from urpf-failed tag SPOOFED\npass all\nblock in quick tagged SPOOFED\n");
    SourceRoutes routes(fw);
    CHECK(fw.in(forged).reason == Reason::RuleBlock);
    CHECK(fw.in(PacketBuilder().ipv4(kServer, kClient).udp(3, 53).build()).reason == Reason::Match);
  }
}

// pf's `no-route`: an address the routing tables have no route for (SourceRoutes routes 10.1/16,
// 192.0.2/24 and 2001:db8::/32 only), asked of the packet as each pass sees it.
TEST_CASE("from no-route, to no-route: addresses without a route, asked as each pass sees them",
          "[engine][no-route]") {
  const auto udp4 = [](const std::string& src, const std::string& dst, uint16_t sport) {
    return PacketBuilder().ipv4(src, dst).udp(sport, 53).payload(8).build();
  };
  SECTION("either address, either family, a link-local one routed by its link") {
    Firewall fw("block in quick log from no-route\nblock out quick to no-route\npass all\n");
    SourceRoutes routes(fw);
    CHECK(fw.engine.rules()->rule(0).text == "block in log quick from no-route to any");
    CHECK(fw.engine.rules()->rule(1).text == "block out quick from any to no-route");
    CHECK(fw.in(udp4(kServer, kClient, 1)).reason == Reason::Match);
    const Verdict unrouted_source = fw.in(udp4("203.0.113.9", kClient, 2));
    CHECK(unrouted_source.reason == Reason::RuleBlock);
    CHECK(unrouted_source.rule == 0);
    // Out: lan0 in, wan0 out; the in pass's rule asks of the source only.
    const Verdict unrouted_destination = fw.out(udp4(kClient, "203.0.113.9", 3));
    CHECK(unrouted_destination.reason == Reason::RuleBlock);
    CHECK(unrouted_destination.rule == 1);
    const std::size_t asked = routes.asked.size();
    CHECK(fw.in(udp4("169.254.7.7", kClient, 4)).reason == Reason::Match);
    CHECK(routes.asked.size() == asked + 1);  // the destination only, once for both passes
    CHECK(fw.in(PacketBuilder().ipv6("2001:db8:7::1", "2001:db8:1::10").udp(5, 53).build()).reason ==
          Reason::Match);
    CHECK(fw.in(PacketBuilder().ipv6("3fff::1", "2001:db8:1::10").udp(6, 53).build()).reason ==
          Reason::RuleBlock);
    // Asked of the address as the node itself would send there.
    const RouteQuery& q = routes.asked.back();
    CHECK(to_string(q.family, q.dst) == "2001:db8:1::10");
    CHECK(q.in_link == 0);
  }
  SECTION("negated: only addresses with a route") {
    Firewall fw("block all\npass from ! no-route to ! no-route\n");
    SourceRoutes routes(fw);
    CHECK(fw.engine.rules()->rule(1).text == "pass from ! no-route to ! no-route keep state");
    CHECK(fw.in(udp4(kServer, kClient, 1)).reason == Reason::Match);
    CHECK(fw.in(udp4("203.0.113.9", kClient, 2)).reason == Reason::RuleBlock);
    CHECK(fw.out(udp4(kClient, "203.0.113.9", 3)).reason == Reason::RuleBlock);
  }
  SECTION("the in pass sees rdr's destination, the out pass nat's source") {
    Firewall fw(
        "nat on wan0 from 10.1.0.0/16 to 192.0.2.0/25 -> 203.0.113.1\n"
        "rdr on wan0 proto udp to 203.0.113.1 port 53 -> 10.1.0.53\n"
        "block in quick to no-route\nblock out quick from no-route\npass all\n");
    SourceRoutes routes(fw);
    // 203.0.113.1 has no route here; rdr sends the first to 10.1.0.53, which has. Each address of
    // the settled view is asked once, for both passes.
    const std::size_t asked = routes.asked.size();
    CHECK(fw.in(udp4(kServer, "203.0.113.1", 1)).reason == Reason::Match);
    CHECK(routes.asked.size() == asked + 2);
    CHECK(fw.in(udp4(kServer, "203.0.113.2", 2)).reason == Reason::RuleBlock);
    // nat gives the first the source 203.0.113.1, which its out pass finds no route for.
    const Verdict translated = fw.out(udp4(kClient, "192.0.2.7", 3));
    CHECK(translated.reason == Reason::RuleBlock);
    CHECK(translated.rule == 1);
    CHECK(fw.out(udp4(kClient, "192.0.2.200", 4)).reason == Reason::Match);
  }
  SECTION("asked only where a rule names it; without a Router, every address has a route") {
    Firewall fw("block in quick from 10.9.0.0/16\npass all\n");
    SourceRoutes routes(fw);
    CHECK(fw.in(udp4("203.0.113.9", kClient, 1)).reason == Reason::Match);
    CHECK(routes.asked.empty());
    Firewall offline("block quick from no-route\nblock quick to no-route\npass all\n");
    CHECK(offline.in(udp4("203.0.113.9", "203.0.113.10", 2)).reason == Reason::Match);
  }
}
