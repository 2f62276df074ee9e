// NAT end to end through Engine::process with crafted packets: nat, rdr and binat on the passes
// they belong to, filter rules seeing the translated packet, replies and ICMP errors translated
// back by the state, and every rewritten packet compared byte for byte with the one the builder
// makes from the translated addresses (so every checksum is checked against a full recompute).
#include <array>
#include <catch2/catch.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/engine/engine.h"
#include "daemon/engine/rules/interface_addresses.h"
#include "tests/unit/engine/firewall.h"
#include "tests/unit/support/packet_builder.h"

using namespace pairwall::engine;
using pairwall::test::Bytes;
using pairwall::test::checksum_add;
using pairwall::test::Firewall;
using pairwall::test::get16;
using pairwall::test::get32;
using pairwall::test::PacketBuilder;
using pairwall::test::put16;
using Action = Verdict::Action;

namespace {

// A packet from `src` to `dst`, IPv6 or IPv4.
PacketBuilder ip(bool v6, const std::string& src, const std::string& dst) {
  PacketBuilder b;
  if (v6) {
    b.ipv6(src, dst);
  } else {
    b.ipv4(src, dst);
  }
  return b;
}

// One packet of a flow: family by the addresses' form, protocol by name.
struct Flow {
  std::string proto;  // "tcp", "udp", "icmp"
  bool v6 = false;

  Bytes packet(const std::string& src, uint16_t sport, const std::string& dst, uint16_t dport,
               bool reply = false) const {
    PacketBuilder b = ip(v6, src, dst);
    if (proto == "tcp") {
      b.tcp(sport, dport).flags(reply ? tcpflag::kSyn | tcpflag::kAck : tcpflag::kSyn);
      b.seq(reply ? 9000 : 1000).ack(reply ? 1001 : 0);
    } else if (proto == "udp") {
      b.udp(sport, dport).payload(12);
    } else {
      b.icmp_echo(sport, 1, reply);  // the id; ICMP has no destination port
    }
    return b.build();
  }
};

// The source port (ICMP: the query id) of a built packet.
uint16_t source_port(const Bytes& p, const Flow& f) {
  const std::size_t l4 = f.v6 ? 40 : 20;
  return get16(p, l4 + (f.proto == "icmp" ? 4 : 0));
}

// An ICMP error's type and code, as ICMP and as ICMPv6.
struct ErrorKind {
  uint8_t type4, code4, type6, code6;
};
constexpr ErrorKind kPortUnreachable{3, 3, 1, 4};
constexpr ErrorKind kHostUnreachable{3, 1, 1, 3};
constexpr ErrorKind kTimeExceeded{11, 0, 3, 0};

// An ICMP or ICMPv6 error from `from` to `to` quoting `quote`, with `padding` bytes of link
// padding after the datagram.
Bytes icmp_error(bool v6, ErrorKind kind, const std::string& from, const std::string& to, const Bytes& quote,
                 std::size_t padding = 0) {
  PacketBuilder b = ip(v6, from, to);
  b.icmp_error(v6 ? kind.type6 : kind.type4, v6 ? kind.code6 : kind.code4, quote);
  if (padding != 0) b.trailing(padding, 0xee);
  return b.build();
}

Bytes unreachable(bool v6, const std::string& from, const std::string& to, const Bytes& quote,
                  std::size_t padding = 0) {
  return icmp_error(v6, kPortUnreachable, from, to, quote, padding);
}

// A TCP segment with a window of 512.
Bytes segment(bool v6, const std::string& src, uint16_t sport, const std::string& dst, uint16_t dport,
              uint8_t flags, uint32_t seq, uint32_t ack, std::size_t payload = 0) {
  return ip(v6, src, dst)
      .tcp(sport, dport)
      .flags(flags)
      .seq(seq)
      .ack(ack)
      .window(512)
      .payload(payload)
      .build();
}

constexpr const char* kNat = R"(
nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1
nat on wan0 inet6 from 2001:db8:1::/48 to any -> 2001:db8:ff::1
block all
pass in on lan0 all
pass out on wan0 from 203.0.113.1 to any
pass out on wan0 from 2001:db8:ff::1 to any
)";

}  // namespace

TEST_CASE("nat rewrites the source on the way out and the reply back to the inside host", "[engine][nat]") {
  for (const Flow& f : {Flow{"tcp", false}, Flow{"udp", false}, Flow{"icmp", false}, Flow{"tcp", true},
                        Flow{"udp", true}, Flow{"icmp", true}}) {
    INFO(f.proto << (f.v6 ? " v6" : " v4"));
    Firewall fw(kNat);
    const std::string client = f.v6 ? "2001:db8:1::10" : "10.1.0.10";
    const std::string server = f.v6 ? "2001:db8:2::80" : "192.0.2.80";
    const std::string outside = f.v6 ? "2001:db8:ff::1" : "203.0.113.1";
    const uint16_t id = f.proto == "icmp" ? 77 : 40000;
    const uint16_t dport = f.proto == "icmp" ? 77 : 53;

    // The out pass's filter rule only passes the translated source: it saw the packet after nat.
    const Verdict first = fw.out(f.packet(client, id, server, dport));
    REQUIRE(first.action == Action::Accept);
    CHECK(first.rewritten);
    const uint16_t port = source_port(fw.last_packet, f);
    if (f.proto == "icmp") {
      CHECK(port == id);  // a free query id is kept
    } else {
      CHECK(port >= 50001);  // pf's proxy port range
    }
    CHECK(fw.last_packet == f.packet(outside, port, server, f.proto == "icmp" ? port : dport));
    REQUIRE(fw.engine.states().size() == 1);

    const Verdict reply = fw.in(f.packet(server, f.proto == "icmp" ? port : dport, outside, port, true));
    CHECK(reply.reason == Reason::State);
    CHECK(reply.rewritten);
    CHECK(fw.last_packet == f.packet(server, f.proto == "icmp" ? id : dport, client, id, true));

    // To a port (id) of the outside address that no state translates: the rules, which block.
    const auto other = static_cast<uint16_t>(port == 65535 ? 50001 : port + 1);
    CHECK(fw.in(f.packet(server, f.proto == "icmp" ? other : dport, outside, other, true)).reason ==
          Reason::RuleBlock);
  }
}

TEST_CASE("before routing: replies to a nat address and rdr are translated and claimed, the rest left",
          "[engine][nat][prerouting]") {
  Firewall fw(std::string(kNat) +
              "rdr on wan0 proto tcp to 203.0.113.1 port 80 -> 10.2.0.10 port 8080\n"
              "pass in on wan0 proto tcp to 10.2.0.10 port 8080\n");
  const Flow tcp{"tcp", false};
  // Arriving on wan0, addressed to this node, not yet routed.
  const auto before_routing = [](Firewall& f, Bytes p) {
    return f.run(std::move(p), PacketMeta{Hook::Prerouting, f.wan, kNoIface, false});
  };
  // The inside host's connection, translated on its way out (after routing, as forwarded).
  REQUIRE(fw.out(tcp.packet("10.1.0.10", 40000, "192.0.2.80", 80)).action == Action::Accept);
  const uint16_t port = source_port(fw.last_packet, tcp);

  // Its reply, addressed to the nat address (this node's), before routing: back to the inside host.
  const Verdict reply = before_routing(fw, tcp.packet("192.0.2.80", 80, "203.0.113.1", port, true));
  CHECK(reply.reason == Reason::State);
  CHECK(reply.claimed);
  CHECK(fw.last_packet == tcp.packet("192.0.2.80", 80, "10.1.0.10", 40000, true));

  // A new connection to an rdr'd port: its in pass decides, its state is made, it is claimed.
  const Verdict redirected = before_routing(fw, tcp.packet("198.51.100.7", 4000, "203.0.113.1", 80));
  CHECK(redirected.reason == Reason::Match);
  CHECK(redirected.claimed);
  CHECK(fw.last_packet == tcp.packet("198.51.100.7", 4000, "10.2.0.10", 8080));
  // ... whose in pass filter rules apply as they would after routing.
  Firewall closed(std::string(kNat) +
                  "rdr on wan0 proto tcp to 203.0.113.1 port 80 -> 10.2.0.10 port 8080\n");
  const Verdict blocked = before_routing(closed, tcp.packet("198.51.100.7", 4000, "203.0.113.1", 80));
  CHECK(blocked.reason == Reason::RuleBlock);
  CHECK_FALSE(blocked.claimed);

  // Anything else for this node (no state, no rdr) is left for the hooks after routing, untouched.
  const Bytes ssh = tcp.packet("198.51.100.7", 4001, "203.0.113.1", 22);
  const Verdict left = before_routing(fw, ssh);
  CHECK(left.action == Action::Accept);
  CHECK(left.reason == Reason::AfterRouting);
  CHECK_FALSE(left.claimed);
  CHECK_FALSE(left.rewritten);
  CHECK(fw.last_packet == ssh);
  CHECK(fw.engine.states().size() == 2);
}

namespace {

// Answers where a packet leaves as the test says, and remembers what it was asked.
struct FakeRouter : Router {
  IfaceId answer = kNoIface;
  std::vector<RouteQuery> asked;
  Route route(const RouteQuery& query, Millis) noexcept override {
    asked.push_back(query);
    return {answer, answer != kNoIface};
  }
};

}  // namespace

// pf decides a redirected connection by its out pass too: before routing, the Router says which
// interface that is. Only its filter rules apply there, not its nat (see Engine::translate()).
TEST_CASE("before routing: an rdr'd connection meets the out rules of the interface it will leave by",
          "[engine][nat][prerouting]") {
  const std::string rules =
      "rdr on wan0 proto tcp to 203.0.113.1 port 80 -> 10.2.0.10 port 8080\n"
      "nat on lan0 from any to 10.2.0.10 -> 10.2.0.1\n"
      "pass in on wan0 proto tcp to 10.2.0.10 port 8080\n"
      "block out log on lan0 proto tcp to 10.2.0.10 port 8080\n";
  const Flow tcp{"tcp", false};
  const Bytes syn = tcp.packet("198.51.100.7", 4000, "203.0.113.1", 80);
  const Bytes redirected = tcp.packet("198.51.100.7", 4000, "10.2.0.10", 8080);
  const auto before_routing = [](Firewall& f, const Bytes& p) {
    PacketMeta meta{Hook::Prerouting, f.wan, kNoIface, false};
    meta.in_link = 7;
    meta.mark = 0x40;
    return f.run(p, meta);
  };

  SECTION("leaving by lan0: its block out rule refuses the connection, logged on the out pass") {
    Firewall fw(rules);
    FakeRouter router;
    router.answer = fw.lan;
    fw.worker.set_router(&router);
    const Verdict v = before_routing(fw, syn);
    CHECK(v.reason == Reason::RuleBlock);
    CHECK(v.log == logpass::kOut);
    CHECK(v.routed_out == fw.lan);  // its log record's interface
    CHECK_FALSE(v.claimed);
    CHECK(fw.engine.states().size() == 0);
    // Asked with the destination the rdr made, as the kernel will route the packet.
    REQUIRE(router.asked.size() == 1);
    CHECK(router.asked[0].family == Family::V4);
    CHECK(to_string(Family::V4, router.asked[0].src) == "198.51.100.7");
    CHECK(to_string(Family::V4, router.asked[0].dst) == "10.2.0.10");
    CHECK(router.asked[0].in_link == 7);
    CHECK(router.asked[0].mark == 0x40);
  }
  SECTION("in a batch alike") {
    Firewall fw(rules);
    FakeRouter router;
    router.answer = fw.lan;
    fw.worker.set_router(&router);
    std::vector<Bytes> copies(3, syn);
    std::vector<BatchPacket> batch;
    for (Bytes& p : copies) batch.push_back({p, PacketMeta{Hook::Prerouting, fw.wan, kNoIface, false}, {}});
    fw.engine.process_batch(fw.worker, batch, fw.now);
    for (const BatchPacket& b : batch) CHECK(b.verdict.reason == Reason::RuleBlock);
    CHECK(fw.engine.states().size() == 0);
  }
  SECTION("leaving by an interface without out rules: passed and claimed, its source untranslated") {
    Firewall fw(rules);
    FakeRouter router;
    router.answer = fw.engine.interfaces().intern("dmz0");
    fw.worker.set_router(&router);
    const Verdict v = before_routing(fw, syn);
    CHECK(v.reason == Reason::Match);
    CHECK(v.routed_out == router.answer);
    CHECK(v.claimed);
    CHECK(fw.last_packet == redirected);
  }
  SECTION("on a skipped interface, or delivered to this node: the in pass alone decides") {
    Firewall fw("set skip on lan0\n" + rules);
    FakeRouter router;
    router.answer = fw.lan;
    fw.worker.set_router(&router);
    CHECK(before_routing(fw, syn).reason == Reason::Match);
    Firewall local(rules);
    FakeRouter nowhere;
    local.worker.set_router(&nowhere);
    CHECK(before_routing(local, syn).reason == Reason::Match);
    CHECK(nowhere.asked.size() == 1);
  }
  SECTION("a connection that nothing translates is left to the hooks after routing, unasked") {
    Firewall fw(rules);
    FakeRouter router;
    router.answer = fw.lan;
    fw.worker.set_router(&router);
    CHECK(before_routing(fw, tcp.packet("198.51.100.7", 4000, "203.0.113.1", 22)).reason ==
          Reason::AfterRouting);
    CHECK(router.asked.empty());
  }
}

// pf's scrub out applies on the out pass of every packet: before routing, that of a redirected
// connection's is on the interface the Router names, matched as the packet will leave.
// The pre-routing chain also queues packets not addressed to this node that a translation rule
// may rewrite (a transparent rdr), as a superset of what the rule matches: the engine claims only
// the packets whose destination a translation rewrites, and leaves every other to the hooks after
// routing, a nat'd connection's own packets among them (their source, rewritten before routing,
// would be a martian to the kernel).
TEST_CASE("before routing: a transparent rdr is claimed, other connections are left for after routing",
          "[engine][nat][prerouting]") {
  Firewall fw(
      "nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\n"
      "rdr on lan0 proto tcp from 10.1.0.0/24 to any port 80 -> 10.2.0.10 port 3128\n"
      "block all\n"
      "pass in on lan0 all\n"
      "pass out on dmz0 proto tcp to 10.2.0.10 port 3128\n"
      "pass out on dmz0 proto tcp to 10.2.0.20 port 22\n"
      "pass out on wan0 from 203.0.113.1 to any\n");
  const IfaceId dmz = fw.engine.interfaces().intern("dmz0");
  FakeRouter router;
  router.answer = dmz;
  fw.worker.set_router(&router);
  const Flow tcp{"tcp", false};
  const auto before_routing = [&fw](const Bytes& p) {
    return fw.run(p, PacketMeta{Hook::Prerouting, fw.lan, kNoIface, false});
  };

  // A web request to a server beyond the node: redirected to the proxy before routing, so that the
  // kernel routes it to the proxy; its next packet too.
  const Bytes web = tcp.packet("10.1.0.10", 40000, "192.0.2.80", 80);
  const Bytes to_proxy = tcp.packet("10.1.0.10", 40000, "10.2.0.10", 3128);
  for (const Reason expected : {Reason::Match, Reason::State}) {
    const Verdict v = before_routing(web);
    CHECK(v.reason == expected);
    CHECK(v.claimed);
    CHECK(fw.last_packet == to_proxy);
  }
  // The proxy's answer, forwarded back to the client, comes from the server it dialled.
  CHECK(fw.run(tcp.packet("10.2.0.10", 3128, "10.1.0.10", 40000, true),
               PacketMeta{Hook::Forward, dmz, fw.lan, false})
            .reason == Reason::State);
  CHECK(fw.last_packet == tcp.packet("192.0.2.80", 80, "10.1.0.10", 40000, true));

  // A host the rdr does not name: not claimed before routing, nat'd after it.
  const Bytes other = tcp.packet("10.1.5.10", 40001, "192.0.2.80", 80);
  Verdict v = before_routing(other);
  CHECK(v.reason == Reason::AfterRouting);
  CHECK_FALSE(v.claimed);
  REQUIRE(fw.out(other).reason == Reason::Match);
  const uint16_t port = source_port(fw.last_packet, tcp);
  // Its next packet, met before routing again, keeps its own source there: nat is the out pass's.
  v = before_routing(other);
  CHECK(v.reason == Reason::AfterRouting);
  CHECK_FALSE(v.claimed);
  CHECK_FALSE(v.rewritten);
  CHECK(fw.last_packet == other);
  CHECK(fw.out(other).reason == Reason::State);
  CHECK(source_port(fw.last_packet, tcp) == port);

  // An untranslated connection's packet alike.
  const Bytes ssh = tcp.packet("10.1.0.10", 40002, "10.2.0.20", 22);
  REQUIRE(fw.run(ssh, PacketMeta{Hook::Forward, fw.lan, dmz, false}).reason == Reason::Match);
  v = before_routing(ssh);
  CHECK(v.reason == Reason::AfterRouting);
  CHECK_FALSE(v.claimed);
  CHECK(fw.engine.states().size() == 3);
}

TEST_CASE("before routing: an rdr'd connection's packets meet the scrub out of their way out",
          "[engine][nat][prerouting][scrub]") {
  const std::string rules =
      "scrub out on lan0 to 10.2.0.10 max-mss 1200 min-ttl 40\n"
      "rdr on wan0 proto tcp to 203.0.113.1 port 80 -> 10.2.0.10 port 8080\n"
      "pass in on wan0 proto tcp to 10.2.0.10 port 8080\n";
  const auto syn = [](const char* dst, uint16_t port, uint16_t mss, uint8_t ttl) {
    return PacketBuilder()
        .ipv4("198.51.100.7", dst)
        .ttl(ttl)
        .tcp(4000, port)
        .flags(tcpflag::kSyn)
        .seq(1000)
        .mss(mss)
        .build();
  };
  const auto before_routing = [](Firewall& f, const Bytes& p) {
    return f.run(p, PacketMeta{Hook::Prerouting, f.wan, kNoIface, false});
  };
  Firewall fw(rules);
  FakeRouter router;
  router.answer = fw.lan;
  fw.worker.set_router(&router);

  // The first SYN, which makes the state, and its retransmission, which the state passes.
  for (int attempt = 0; attempt < 2; ++attempt) {
    INFO(attempt);
    const Verdict v = before_routing(fw, syn("203.0.113.1", 80, 1460, 20));
    CHECK(v.reason == (attempt == 0 ? Reason::Match : Reason::State));
    CHECK(fw.last_packet == syn("10.2.0.10", 8080, 1200, 40));
  }
  // And counted there, as the scrub rule's out pass: both packets, at the size they arrived with.
  const auto& scrubbed = *fw.engine.rules()->scrub_listing().at(0).stats;
  CHECK(scrubbed.packets.load() == 2);
  CHECK(scrubbed.bytes.load() == 2 * syn("203.0.113.1", 80, 1460, 20).size());
  // Leaving by another interface, scrub out on lan0 does not apply.
  router.answer = fw.engine.interfaces().intern("dmz0");
  const Bytes other = PacketBuilder()
                          .ipv4("198.51.100.7", "203.0.113.1")
                          .ttl(20)
                          .tcp(4001, 80)
                          .flags(tcpflag::kSyn)
                          .seq(1000)
                          .mss(1460)
                          .build();
  CHECK(before_routing(fw, other).reason == Reason::Match);
  CHECK(get16(fw.last_packet, 20 + 22) == 1460);
  CHECK(fw.last_packet[8] == 20);
  CHECK(scrubbed.packets.load() == 2);
}

// Replies to a nat address are decided before routing too: they leave by the interface their
// connection arrived on, which the state remembers; a state learned from the peer asks once.
TEST_CASE("before routing: replies to a nat address meet the scrub out of the inside interface",
          "[engine][nat][prerouting][scrub]") {
  const std::string rules = std::string("scrub out on lan0 min-ttl 50\n") + kNat;
  const Flow udp{"udp", false};
  const auto reply = [](const char* dst, uint16_t port, uint8_t ttl) {
    return PacketBuilder().ipv4("192.0.2.80", dst).ttl(ttl).udp(53, port).payload(12).build();
  };
  Firewall master(rules, 1);
  Firewall standby(rules, 2);
  FakeRouter master_router;
  FakeRouter standby_router;
  standby_router.answer = standby.lan;
  master.worker.set_router(&master_router);
  standby.worker.set_router(&standby_router);
  REQUIRE(master.out(udp.packet("10.1.0.10", 40000, "192.0.2.80", 53)).action == Action::Accept);
  const uint16_t port = source_port(master.last_packet, udp);
  StateRecord insert;
  REQUIRE(master.worker.events().pop(insert));
  REQUIRE(standby.engine.apply(insert, standby.now));

  for (Firewall* fw : {&master, &standby}) {
    for (int i = 0; i < 2; ++i) {
      const Verdict v =
          fw->run(reply("203.0.113.1", port, 20), PacketMeta{Hook::Prerouting, fw->wan, kNoIface, false});
      CHECK(v.reason == Reason::State);
      CHECK(fw->last_packet == reply("10.1.0.10", 40000, 50));
    }
  }
  CHECK(master_router.asked.empty());  // its state knew
  CHECK(standby_router.asked.size() == 1);
}

TEST_CASE("rdr rewrites the destination on the way in, before the in pass's filter rules", "[engine][nat]") {
  struct Case {
    const char* name;
    const char* filter;
    uint16_t dialled;
    uint16_t reached;  // 0: dropped
  };
  const Case cases[] = {
      {"the filter passes the redirected port", "pass in on wan0 proto tcp to 10.2.0.10 port 8080", 80, 8080},
      {"the filter passes only the dialled port", "pass in on wan0 proto tcp to 203.0.113.1 port 80", 80, 0},
      {"a port range onto P:* maps one to one", "pass in on wan0 proto tcp to 10.2.0.10", 5003, 6003},
      {"a port range onto one port: all to it, as pf's", "pass in on wan0 proto tcp to 10.2.0.10", 8005,
       9500},
      {"a port range onto a range: the n-th port to the n-th", "pass in on wan0 proto tcp to 10.2.0.10", 7004,
       9004},
      {"a port range onto a shorter range wraps round, as pf's", "pass in on wan0 proto tcp to 10.2.0.10",
       7012, 9002},
      {"'port > N' onto a range: the distance from N, as pf's", "pass in on wan0 proto tcp to 10.2.0.10",
       4003, 9103},
      {"'port P >< Q' onto a range: the distance from P", "pass in on wan0 proto tcp to 10.2.0.10", 3015,
       9205},
      {"a list of ranges: the distance from the port's own range", "pass in on wan0 proto tcp to 10.2.0.10",
       2004, 9304},
      {"a list onto P:*: each range one to one", "pass in on wan0 proto tcp to 10.2.0.10", 2503, 9603},
      {"'port < N' counts back from the range's end", "pass in on wan0 proto tcp to 10.2.0.10", 97, 9407},
      {"no port named: port n onto P + n modulo the width, as pf's", "pass in on wan0 proto tcp to 10.2.0.10",
       153, 9503},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    Firewall fw(
        std::string(
            "rdr on wan0 proto tcp to 203.0.113.1 port 80 -> 10.2.0.10 port 8080\n"
            "rdr on wan0 proto tcp to 203.0.113.1 port 5000:5010 -> 10.2.0.10 port 6000:*\n"
            "rdr on wan0 proto tcp to 203.0.113.1 port 8000:8010 -> 10.2.0.10 port 9500\n"
            "rdr on wan0 proto tcp to 203.0.113.1 port 7000:7019 -> 10.2.0.10 port 9000:9009\n"
            "rdr on wan0 proto tcp to 203.0.113.1 port { 1000:1009, 2000:2009 } -> 10.2.0.10 "
            "port 9300:9309\n"
            "rdr on wan0 proto tcp to 203.0.113.1 port { 1500:1504, 2500:2509 } -> 10.2.0.10 port 9600:*\n"
            "rdr on wan0 proto tcp to 203.0.113.1 port 3000 >< 3100 -> 10.2.0.10 port 9200:9209\n"
            "rdr on wan0 proto tcp to 203.0.113.1 port > 4000 -> 10.2.0.10 port 9100:9109\n"
            "rdr on wan0 proto tcp to 203.0.113.1 port < 100 -> 10.2.0.10 port 9400:9409\n"
            "rdr on wan0 proto tcp to 203.0.113.1 -> 10.2.0.10 port 9500:9509\n"
            "block all\npass out on lan0 all\n") +
        c.filter);
    const Flow tcp{"tcp", false};
    const Verdict v = fw.in(tcp.packet("198.51.100.7", 4000, "203.0.113.1", c.dialled));
    if (c.reached == 0) {
      CHECK(v.reason == Reason::RuleBlock);
      CHECK_FALSE(v.rewritten);
      CHECK(fw.engine.states().size() == 0);
      continue;
    }
    REQUIRE(v.action == Action::Accept);
    CHECK(fw.last_packet == tcp.packet("198.51.100.7", 4000, "10.2.0.10", c.reached));
    // The server's answer leaves from the address and port the client dialled.
    const Verdict back = fw.out(tcp.packet("10.2.0.10", c.reached, "198.51.100.7", 4000, true));
    CHECK(back.reason == Reason::State);
    CHECK(fw.last_packet == tcp.packet("203.0.113.1", c.dialled, "198.51.100.7", 4000, true));
  }
}

// pfctl gives a translation rule that names no family its target's: an IPv4 target never
// rewrites an IPv6 packet (which would come out with ::203.0.113.1 in its header).
TEST_CASE("a nat rule without a family translates its target's family only", "[engine][nat]") {
  Firewall fw("nat on wan0 from any to any -> 203.0.113.1\npass all\n");
  const Flow udp4{"udp", false};
  const Flow udp6{"udp", true};
  REQUIRE(fw.out(udp4.packet("10.1.0.10", 5000, "192.0.2.80", 53)).rewritten);
  const Bytes v6 = udp6.packet("2001:db8:1::10", 5000, "2001:db8:2::80", 53);
  const Verdict out6 = fw.out(v6);
  REQUIRE(out6.action == Action::Accept);
  CHECK_FALSE(out6.rewritten);
  CHECK(fw.last_packet == v6);
  CHECK(fw.in(udp6.packet("2001:db8:2::80", 53, "2001:db8:1::10", 5000, true)).reason == Reason::State);
}

TEST_CASE("nat to (wan0) before wan0 has an address drops its packets, and translates once it has one",
          "[engine][nat][interfaces]") {
  const std::string text =
      "nat on wan0 from 10.1.0.0/16 to any -> (wan0)\n"
      "rdr on wan0 proto tcp to 192.0.2.1 port 80 -> (wan0) port 8080\n"
      "pass all\n";
  Firewall fw("pass all");
  auto load = [&](const rules::InterfaceAddresses& host) {
    auto parsed = rules::parse_rules(text, "test.conf");
    REQUIRE(std::holds_alternative<rules::RuleFile>(parsed));
    rules::RuleFile file = std::get<rules::RuleFile>(std::move(parsed));
    const auto unresolved = rules::resolve_interfaces(file, host);
    REQUIRE_FALSE(unresolved);
    auto compiled = rules::compile(file, fw.engine.interfaces());
    if (auto* e = std::get_if<rules::RuleError>(&compiled)) FAIL(e->to_string());
    fw.engine.load_rules(std::get<std::shared_ptr<const rules::RuleSet>>(compiled));
    return file;
  };
  rules::InterfaceAddresses host{{"lan0", {}}, {"wan0", {}}};
  const rules::RuleFile waiting = load(host);
  CHECK(waiting.translation_rules[0].target_pending);
  CHECK(fw.engine.rules()->translation_rules()[0].text ==
        "nat on wan0 inet from 10.1.0.0/16 to any -> (wan0)");
  const Flow udp{"udp", false};
  const Verdict out = fw.out(udp.packet("10.1.0.10", 5000, "192.0.2.80", 53));
  CHECK(out.action == Action::Drop);
  CHECK(out.reason == Reason::TranslationFailed);
  const Flow tcp{"tcp", false};
  CHECK(fw.in(tcp.packet("198.51.100.9", 40000, "192.0.2.1", 80)).reason == Reason::TranslationFailed);
  // Packets no rule translates pass as before; nothing was held.
  CHECK(fw.out(udp.packet("10.2.0.10", 5000, "192.0.2.80", 53)).action == Action::Accept);
  CHECK(fw.engine.states().size() == 1);

  rules::InterfaceAddress leased;
  leased.address = *parse_address("203.0.113.7", &leased.family);
  leased.prefix_length = 24;
  host["wan0"] = {leased};
  load(host);
  REQUIRE(fw.out(udp.packet("10.1.0.10", 5000, "192.0.2.80", 53)).action == Action::Accept);
  CHECK(get32(fw.last_packet, 12) == 0xcb007107);  // 203.0.113.7
  REQUIRE(fw.in(tcp.packet("198.51.100.9", 40000, "192.0.2.1", 80)).action == Action::Accept);
  CHECK(get32(fw.last_packet, 16) == 0xcb007107);
  CHECK(get16(fw.last_packet, 22) == 8080);
}

TEST_CASE("binat maps an inside prefix onto an outside one, both ways, ports kept", "[engine][nat]") {
  Firewall fw("binat on wan0 from 10.1.0.0/24 to any -> 203.0.113.0/24\npass all");
  const Flow udp{"udp", false};
  REQUIRE(fw.out(udp.packet("10.1.0.25", 5000, "192.0.2.80", 53)).action == Action::Accept);
  CHECK(fw.last_packet == udp.packet("203.0.113.25", 5000, "192.0.2.80", 53));
  REQUIRE(fw.in(udp.packet("192.0.2.80", 53, "203.0.113.25", 5000, true)).reason == Reason::State);
  CHECK(fw.last_packet == udp.packet("192.0.2.80", 53, "10.1.0.25", 5000, true));
  // Inbound to the outside prefix: the destination maps to the inside host.
  REQUIRE(fw.in(udp.packet("192.0.2.99", 7000, "203.0.113.40", 123)).action == Action::Accept);
  CHECK(fw.last_packet == udp.packet("192.0.2.99", 7000, "10.1.0.40", 123));
}

// pf keeps nat, rdr and binat rules in rulesets of their own and asks them in a fixed order,
// whatever the order of the file: binat before nat on the way out, rdr before binat on the way in
// (pf_get_translation). A server's binat beside the LAN's nat, and an rdr of one of its ports, are
// the usual way to write them, in either order.
TEST_CASE("binat is asked before nat on the way out, rdr before binat on the way in", "[engine][nat]") {
  const Flow tcp{"tcp", false};
  for (const bool binat_first : {false, true}) {
    INFO((binat_first ? "binat first in the file" : "binat last in the file"));
    const std::string binat = "binat on wan0 from 10.1.0.5 to any -> 203.0.113.5\n";
    const std::string others =
        "nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\n"
        "rdr on wan0 proto tcp to 203.0.113.5 port 80 -> 10.2.0.10\n";
    Firewall fw((binat_first ? binat + others : others + binat) + "pass all\n");
    // The server's own connections leave from its binat address, the LAN's from the nat address.
    REQUIRE(fw.out(tcp.packet("10.1.0.5", 40000, "192.0.2.80", 80)).action == Action::Accept);
    CHECK(fw.last_packet == tcp.packet("203.0.113.5", 40000, "192.0.2.80", 80));
    REQUIRE(fw.out(tcp.packet("10.1.0.6", 40000, "192.0.2.80", 80)).action == Action::Accept);
    CHECK(fw.last_packet == tcp.packet("203.0.113.1", source_port(fw.last_packet, tcp), "192.0.2.80", 80));
    // Port 80 of the binat address goes where the rdr sends it; the other ports to the server.
    REQUIRE(fw.in(tcp.packet("198.51.100.7", 4000, "203.0.113.5", 80)).action == Action::Accept);
    CHECK(fw.last_packet == tcp.packet("198.51.100.7", 4000, "10.2.0.10", 80));
    REQUIRE(fw.in(tcp.packet("198.51.100.7", 4001, "203.0.113.5", 22)).action == Action::Accept);
    CHECK(fw.last_packet == tcp.packet("198.51.100.7", 4001, "10.1.0.5", 22));
  }
}

TEST_CASE("no nat exempts; nat pass skips the filter rules of its pass", "[engine][nat]") {
  const Flow tcp{"tcp", false};
  SECTION("no nat") {
    Firewall fw(
        "no nat on wan0 from 10.1.0.0/16 to 192.0.2.0/24\nnat on wan0 from 10.1.0.0/16 to any -> "
        "203.0.113.1\npass all");
    const Bytes syn = tcp.packet("10.1.0.10", 40000, "192.0.2.80", 80);
    CHECK_FALSE(fw.out(syn).rewritten);
    CHECK(fw.last_packet == syn);
    CHECK(fw.out(tcp.packet("10.1.0.10", 40000, "198.51.100.80", 80)).rewritten);
  }
  SECTION("nat pass: the out pass it translates meets no filter rule, the in pass its own") {
    Firewall fw(
        "nat pass on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\nblock all\npass in on lan0 all no state");
    const Verdict v = fw.out(tcp.packet("10.1.0.10", 40000, "192.0.2.80", 80));
    CHECK(v.action == Action::Accept);
    CHECK(v.reason == Reason::Match);
    CHECK(v.rewritten);
    CHECK(fw.engine.states().size() == 1);
    CHECK(fw.out(tcp.packet("10.1.0.11", 40000, "192.0.2.0", 80)).action == Action::Accept);
    CHECK(fw.in(tcp.packet("192.0.2.81", 80, "10.1.0.10", 40000)).reason == Reason::RuleBlock);
  }
}

TEST_CASE("tag and tagged on translation rules: rdr tags for the filter, nat sees the in pass's tags",
          "[engine][nat][tag]") {
  const Flow tcp{"tcp", false};
  SECTION("rdr's tag: the filter rules of both passes see it, where they tag nothing else") {
    Firewall fw(
        "rdr on wan0 proto tcp to 203.0.113.1 port 80 tag WEB -> 10.2.0.10 port 8080\n"
        "block all\n"
        "pass in on wan0 proto tcp tagged WEB\n"
        "pass in on wan0 proto tcp to port 22\n"
        "pass out on lan0 proto tcp tagged WEB\n");
    REQUIRE(fw.in(tcp.packet("198.51.100.7", 4000, "203.0.113.1", 80)).action == Action::Accept);
    CHECK(fw.last_packet == tcp.packet("198.51.100.7", 4000, "10.2.0.10", 8080));
    // Not redirected, so not tagged: no in rule passes it.
    CHECK(fw.in(tcp.packet("198.51.100.7", 4001, "203.0.113.1", 81)).reason == Reason::RuleBlock);
    // Passed in without the tag: the out pass has only block all.
    CHECK(fw.in(tcp.packet("198.51.100.7", 4002, "10.2.0.10", 22)).reason == Reason::RuleBlock);
  }
  SECTION("rdr pass: the in pass meets no filter rule, the out pass carries the rdr's tag") {
    Firewall fw(
        "rdr pass on wan0 proto tcp to 203.0.113.1 port 80 tag WEB -> 10.2.0.10\n"
        "block all\n"
        "pass out on lan0 proto tcp tagged WEB\n");
    CHECK(fw.in(tcp.packet("198.51.100.7", 4000, "203.0.113.1", 80)).action == Action::Accept);
    Firewall untagged(
        "rdr pass on wan0 proto tcp to 203.0.113.1 port 80 -> 10.2.0.10\n"
        "block all\n"
        "pass out on lan0 proto tcp tagged WEB\n");
    CHECK(untagged.in(tcp.packet("198.51.100.7", 4000, "203.0.113.1", 80)).reason == Reason::RuleBlock);
  }
  SECTION("nat tagged: the tag the in pass's filter rules left chooses the translation") {
    Firewall fw(
        "nat on wan0 tagged LAN -> 203.0.113.1\n"
        "nat on wan0 ! tagged LAN -> 203.0.113.2\n"
        "pass all\n"
        "pass in quick on lan0 from 10.1.9.0/24\n"
        "pass in on lan0 from 10.1.0.0/16 tag LAN\n");
    REQUIRE(fw.out(tcp.packet("10.1.0.10", 40000, "192.0.2.80", 80)).action == Action::Accept);
    CHECK(fw.last_packet == tcp.packet("203.0.113.1", source_port(fw.last_packet, tcp), "192.0.2.80", 80));
    // Decided by a quick rule above the tag rule: untagged.
    REQUIRE(fw.out(tcp.packet("10.1.9.10", 40000, "192.0.2.80", 80)).action == Action::Accept);
    CHECK(fw.last_packet == tcp.packet("203.0.113.2", source_port(fw.last_packet, tcp), "192.0.2.80", 80));
    REQUIRE(fw.out(tcp.packet("10.7.0.10", 40000, "192.0.2.80", 80)).action == Action::Accept);
    CHECK(fw.last_packet == tcp.packet("203.0.113.2", source_port(fw.last_packet, tcp), "192.0.2.80", 80));
  }
  SECTION("nat's tag replaces the in pass's for the out pass's filter rules; an exemption's tags too") {
    Firewall fw(
        "no nat on wan0 to 192.0.2.0/24 tag DIRECT\n"
        "nat on wan0 from 10.1.0.0/16 tag NATTED -> 203.0.113.1\n"
        "block all\n"
        "pass in on lan0 tag LAN\n"
        "pass out on wan0 tagged NATTED\n"
        "pass out on wan0 tagged DIRECT\n");
    const Verdict natted = fw.out(tcp.packet("10.1.0.10", 40000, "198.51.100.80", 80));
    CHECK(natted.action == Action::Accept);
    CHECK(natted.rewritten);
    const Verdict direct = fw.out(tcp.packet("10.1.0.10", 40001, "192.0.2.80", 80));
    CHECK(direct.action == Action::Accept);
    CHECK_FALSE(direct.rewritten);
    // Neither rule matches: the out pass carries the in pass's LAN, which no out rule passes.
    CHECK(fw.out(tcp.packet("10.9.0.10", 40000, "198.51.100.80", 80)).reason == Reason::RuleBlock);
  }
  SECTION("process_batch follows translation tags as process() does") {
    const std::string rules =
        "rdr on wan0 proto tcp to 203.0.113.1 port 80 tag WEB -> 10.2.0.10\n"
        "nat on wan0 tagged LAN tag NATTED -> 203.0.113.1\n"
        "block all\n"
        "pass in on wan0 proto tcp tagged WEB\n"
        "pass out on lan0 proto tcp tagged WEB\n"
        "pass in on lan0 proto tcp to port 80 tag LAN\n"
        "pass in on lan0 proto tcp to port 22\n"
        "pass out on wan0 proto tcp tagged NATTED\n"
        "pass out on wan0 proto tcp to port 22\n";
    std::vector<std::pair<Bytes, bool>> packets;  // the packet, and whether it leaves by wan0
    for (uint16_t i = 0; i < 24; ++i) {
      const auto port = static_cast<uint16_t>(40000 + i);
      const uint16_t dport = i % 3 == 0 ? 80 : i % 3 == 1 ? 22 : 25;
      packets.emplace_back(tcp.packet("10.1.0.10", port, "192.0.2.80", dport), true);
      if (i % 2 == 0)
        packets.emplace_back(tcp.packet("198.51.100.7", port, "203.0.113.1", i % 4 == 0 ? 80 : 81), false);
    }
    Firewall one(rules);
    Firewall batched(rules);
    std::vector<Verdict> single;
    for (const auto& [p, outbound] : packets) single.push_back(outbound ? one.out(p) : one.in(p));
    std::vector<Bytes> copies;
    for (const auto& [p, outbound] : packets) copies.push_back(p);
    std::vector<BatchPacket> batch;
    for (std::size_t i = 0; i < packets.size(); ++i) {
      const bool outbound = packets[i].second;
      batch.push_back({copies[i],
                       PacketMeta{Hook::Forward, outbound ? batched.lan : batched.wan,
                                  outbound ? batched.wan : batched.lan, false},
                       {}});
    }
    batched.engine.process_batch(batched.worker, batch, batched.now);
    std::size_t accepted = 0;
    for (std::size_t i = 0; i < packets.size(); ++i) {
      INFO(i);
      CHECK(batch[i].verdict.action == single[i].action);
      CHECK(batch[i].verdict.reason == single[i].reason);
      CHECK(batch[i].verdict.rewritten == single[i].rewritten);
      if (single[i].action == Action::Accept) ++accepted;
    }
    // Both outcomes occur: port 80 out (LAN, then NATTED), 22 out untranslated, 25 blocked; rdr'd
    // 80 in, 81 blocked.
    CHECK(accepted == 8 + 8 + 6);
    CHECK(batched.engine.states().size() == one.engine.states().size());
  }
}

TEST_CASE("packets that bypassed a translation do not pass by its state", "[engine][nat]") {
  Firewall fw("nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\npass all");
  const Flow tcp{"tcp", false};
  REQUIRE(fw.out(tcp.packet("10.1.0.10", 40000, "192.0.2.80", 80)).action == Action::Accept);
  const Bytes translated = fw.last_packet;
  const uint16_t port = source_port(translated, tcp);
  // The reply addressed to the inside host itself, not to the address it was translated to.
  const Verdict direct = fw.in(tcp.packet("192.0.2.80", 80, "10.1.0.10", 40000, true));
  CHECK(direct.reason == Reason::StateMismatch);
  CHECK_FALSE(direct.rewritten);
  // The translated packet coming round again.
  CHECK(fw.out(translated).reason == Reason::StateMismatch);
  // An ICMP error quoting the inside host's packet as it was before translation.
  const Bytes quote = tcp.packet("10.1.0.10", 40000, "192.0.2.80", 80);
  CHECK(fw.in(PacketBuilder().ipv4("198.51.100.1", "10.1.0.10").icmp_error(3, 4, quote).build()).reason ==
        Reason::StateMismatch);
  CHECK(fw.worker.counters().get(Reason::StateMismatch) == 3);
  // The proper reply still passes.
  CHECK(fw.in(tcp.packet("192.0.2.80", 80, "203.0.113.1", port, true)).reason == Reason::State);
}

TEST_CASE("a translated connection gets a state even under a no state rule", "[engine][nat]") {
  Firewall fw(
      "nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\nblock all\npass out on wan0 no state\n"
      "pass in on lan0 no state");
  const Flow udp{"udp", false};
  REQUIRE(fw.out(udp.packet("10.1.0.10", 5000, "192.0.2.80", 53)).action == Action::Accept);
  CHECK(fw.engine.states().size() == 1);
  const uint16_t port = source_port(fw.last_packet, udp);
  CHECK(fw.in(udp.packet("192.0.2.80", 53, "203.0.113.1", port, true)).reason == Reason::State);
}

TEST_CASE("nat chooses a free source port per connection and refuses when none is left", "[engine][nat]") {
  Firewall fw("nat on wan0 proto tcp from 10.1.0.0/16 to any -> 203.0.113.1 port 50001:50002\npass all");
  const Flow tcp{"tcp", false};
  REQUIRE(fw.out(tcp.packet("10.1.0.10", 40000, "192.0.2.80", 80)).action == Action::Accept);
  const uint16_t first = source_port(fw.last_packet, tcp);
  REQUIRE(fw.out(tcp.packet("10.1.0.11", 40000, "192.0.2.80", 80)).action == Action::Accept);
  const uint16_t second = source_port(fw.last_packet, tcp);
  CHECK(first != second);
  CHECK(std::min(first, second) == 50001);
  CHECK(std::max(first, second) == 50002);
  const Verdict third = fw.out(tcp.packet("10.1.0.12", 40000, "192.0.2.80", 80));
  CHECK(third.action == Action::Drop);
  CHECK(third.reason == Reason::TranslationFailed);
  CHECK(fw.worker.counters().get(Reason::TranslationFailed) == 1);
  // Another destination frees the pair of ports again: the wire key differs.
  CHECK(fw.out(tcp.packet("10.1.0.12", 40000, "192.0.2.81", 80)).action == Action::Accept);
  // The first connection's next packet keeps its port.
  const Bytes again =
      PacketBuilder().ipv4("10.1.0.10", "192.0.2.80").tcp(40000, 80).flags(tcpflag::kAck).seq(1001).build();
  CHECK(fw.out(again).reason == Reason::State);
  CHECK(source_port(fw.last_packet, tcp) == first);
}

// Wherever the taken ports of a range lie (in one run here; static-port connections, or ports
// chosen earlier), a new connection still finds the free ones, as pf_get_sport's walk of the whole
// range does; and a range filled by connections to one server is used nearly to its end.
TEST_CASE("nat finds the free ports of a range wherever the taken ones lie", "[engine][nat]") {
  Firewall fw(
      "nat on wan0 proto udp from 10.9.0.0/16 to any -> 203.0.113.1 static-port\n"
      "nat on wan0 proto udp from 10.1.0.0/16 to any -> 203.0.113.1 port 50001:51000\n"
      "pass all\n");
  const auto datagram = [](const std::string& client, uint16_t sport) {
    return PacketBuilder().ipv4(client, "192.0.2.80").udp(sport, 53).payload(4).build();
  };
  // 50001-50900 taken by static-port connections, 50901-51000 free.
  for (uint16_t port = 50001; port <= 50900; ++port)
    REQUIRE(fw.out(datagram("10.9.0.1", port)).action == Action::Accept);
  std::set<uint16_t> chosen;
  for (int i = 1; i <= 50; ++i) {
    INFO("connection " << i);
    REQUIRE(fw.out(datagram("10.1.0." + std::to_string(i), 5353)).action == Action::Accept);
    chosen.insert(get16(fw.last_packet, 20));
  }
  CHECK(chosen.size() == 50);
  CHECK(*chosen.begin() >= 50901);
  CHECK(*chosen.rbegin() <= 51000);

  // The default range, 96 % filled by connections to one server.
  Firewall busy("nat on wan0 proto udp from 10.0.0.0/8 to any -> 203.0.113.1\npass all\n");
  int accepted = 0;
  for (int i = 0; i < 15000; ++i) {
    const std::string client = "10.1." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1);
    if (busy.out(datagram(client, 5353)).action != Action::Accept) break;
    ++accepted;
  }
  CHECK(accepted == 15000);
}

namespace {

// The source (or destination) address of a built or rewritten packet, as text.
std::string address_of(const Bytes& p, bool destination) {
  const bool v6 = (p[0] >> 4) == 6;
  const std::size_t at = v6 ? (destination ? 24 : 8) : (destination ? 16 : 12);
  return to_string(v6 ? Family::V6 : Family::V4,
                   v6 ? IpAddress::from_v6_bytes(p.data() + at) : IpAddress::from_v4_bytes(p.data() + at));
}

bool in_prefix(const std::string& address, const std::string& prefix) {
  Family f = Family::V4;
  const std::optional<IpAddress> a = parse_address(address, &f);
  const std::optional<IpPrefix> p = parse_prefix(prefix);
  return a && p && p->contains(f, *a);
}

// Connections from 198.51.100.7 (ports 4000 and up) to 203.0.113.1 port 80 go to `servers`, in
// this order, on port 8080; each server's answer leaves as the address the client dialled.
void check_rdr_turns(Firewall& fw, const std::vector<std::string>& servers) {
  const Flow tcp{"tcp", false};
  for (std::size_t i = 0; i < servers.size(); ++i) {
    INFO("connection " << i);
    const auto client_port = static_cast<uint16_t>(4000 + i);
    REQUIRE(fw.in(tcp.packet("198.51.100.7", client_port, "203.0.113.1", 80)).action == Action::Accept);
    CHECK(fw.last_packet == tcp.packet("198.51.100.7", client_port, servers[i], 8080));
    CHECK(fw.out(tcp.packet(servers[i], 8080, "198.51.100.7", client_port, true)).reason == Reason::State);
    CHECK(fw.last_packet == tcp.packet("203.0.113.1", 80, "198.51.100.7", client_port, true));
  }
}

}  // namespace

TEST_CASE("rdr round-robin: a list's addresses in turn, prefixes address by address", "[engine][nat][pool]") {
  Firewall fw(
      "rdr on wan0 proto tcp to 203.0.113.1 port 80 -> { 10.2.0.10, 10.2.0.20/31 } port 8080\npass all");
  check_rdr_turns(fw, {"10.2.0.10", "10.2.0.20", "10.2.0.21", "10.2.0.10", "10.2.0.20"});
}

TEST_CASE("rdr to a table: the addresses it holds of the rule's family, in turn; an empty one drops",
          "[engine][nat][pool]") {
  const std::string tables =
      "table <web> { 10.2.0.20/31, !10.2.0.21, 10.2.0.10, 2001:db8:2::10 }\n"
      "table <none> persist\n";
  Firewall fw(tables +
              "rdr on wan0 proto tcp to 203.0.113.1 port 80 -> <web> port 8080\n"
              "rdr on wan0 inet6 proto tcp to 2001:db8:ff::1 port 80 -> <web> port 8080\n"
              "rdr on wan0 proto tcp to 203.0.113.1 port 81 -> <none> port 8080\n"
              "pass all");
  const Flow tcp{"tcp", false};
  const Flow tcp6{"tcp", true};
  // In address order, as pf walks a table pool; the exception and the IPv6 entry are not the IPv4
  // rule's.
  check_rdr_turns(fw, {"10.2.0.10", "10.2.0.20", "10.2.0.10", "10.2.0.20"});
  REQUIRE(fw.in(tcp6.packet("2001:db8:9::7", 4000, "2001:db8:ff::1", 80)).action == Action::Accept);
  CHECK(fw.last_packet == tcp6.packet("2001:db8:9::7", 4000, "2001:db8:2::10", 8080));

  const Verdict empty = fw.in(tcp.packet("198.51.100.7", 5000, "203.0.113.1", 81));
  CHECK(empty.action == Action::Drop);
  CHECK(empty.reason == Reason::TranslationFailed);

  SECTION("a change of the table recompiles the rules: the pool takes it, from the turn it reached") {
    // As the control service recompiles on `tables add`: the running set's counters kept.
    auto parsed = rules::parse_rules(
        "table <web> { 10.2.0.10, 10.2.0.20, 10.2.0.30 }\n"
        "rdr on wan0 proto tcp to 203.0.113.1 port 80 -> <web> port 8080\npass all",
        "test.conf");
    REQUIRE(std::holds_alternative<rules::RuleFile>(parsed));
    auto compiled =
        rules::compile(std::get<rules::RuleFile>(parsed), fw.engine.interfaces(), fw.engine.rules().get());
    REQUIRE(std::holds_alternative<std::shared_ptr<const rules::RuleSet>>(compiled));
    fw.engine.load_rules(std::get<std::shared_ptr<const rules::RuleSet>>(compiled));
    // Four turns taken: the fifth (turn 4 of three addresses) is the second, then the third.
    for (const auto& [port, server] : {std::pair<uint16_t, const char*>{6000, "10.2.0.20"},
                                       std::pair<uint16_t, const char*>{6001, "10.2.0.30"},
                                       std::pair<uint16_t, const char*>{6002, "10.2.0.10"}}) {
      INFO(server);
      REQUIRE(fw.in(tcp.packet("198.51.100.7", port, "203.0.113.1", 80)).action == Action::Accept);
      CHECK(fw.last_packet == tcp.packet("198.51.100.7", port, server, 8080));
    }
  }
}

TEST_CASE(
    "random and source-hash over a list or a table pick among its addresses, source-hash alike on both nodes",
    "[engine][nat][pool]") {
  const std::string rules =
      "rdr on wan0 proto tcp to 203.0.113.1 port 80 -> <servers> port 8080 source-hash\n"
      "rdr on wan0 proto tcp to 203.0.113.1 port 81 -> { 10.2.0.10, 10.2.0.20/31 } port 8080 random\n"
      "nat on wan0 from 10.1.0.0/16 to any -> { 203.0.113.10, 203.0.113.20 } source-hash\n"
      "pass all\n";
  Firewall fw("table <servers> { 10.2.0.30, 10.2.0.10, 10.2.0.20 }\n" + rules);
  // The peer's table was filled in another order: a table pool is in address order either way.
  Firewall peer("table <servers> { 10.2.0.20, 10.2.0.30, 10.2.0.10 }\n" + rules, 2);
  const Flow tcp{"tcp", false};
  const auto rdr = [&](Firewall& f, const std::string& client, uint16_t client_port, uint16_t dialled) {
    const Verdict v = f.in(tcp.packet(client, client_port, "203.0.113.1", dialled));
    REQUIRE(v.action == Action::Accept);
    return address_of(f.last_packet, true);
  };
  const auto nat = [&](Firewall& f, const std::string& host, uint16_t port) {
    REQUIRE(f.out(tcp.packet(host, port, "192.0.2.80", 443)).action == Action::Accept);
    return address_of(f.last_packet, false);
  };
  std::set<std::string> hashed;
  std::set<std::string> drawn;
  std::set<std::string> mapped;
  for (int host = 1; host <= 48; ++host) {
    INFO("host " << host);
    const std::string client = "198.51.100." + std::to_string(host);
    const std::string server = rdr(fw, client, 1000, 80);
    CHECK(rdr(fw, client, 1001, 80) == server);
    CHECK(rdr(peer, client, 1002, 80) == server);
    hashed.insert(server);
    drawn.insert(rdr(fw, client, 1003, 81));

    const std::string inside = "10.1.0." + std::to_string(host);
    const std::string outside = nat(fw, inside, 2000);
    CHECK(nat(fw, inside, 2001) == outside);
    CHECK(nat(peer, inside, 2002) == outside);
    mapped.insert(outside);
  }
  // Every address of each pool, and none besides (48 sources or draws over 2 or 3 addresses: one
  // left out would take a broken spread).
  CHECK(hashed == std::set<std::string>{"10.2.0.10", "10.2.0.20", "10.2.0.30"});
  CHECK(drawn == std::set<std::string>{"10.2.0.10", "10.2.0.20", "10.2.0.21"});
  CHECK(mapped == std::set<std::string>{"203.0.113.10", "203.0.113.20"});
}

TEST_CASE("a table pool covers each range it holds with the fewest prefixes, whatever its alignment",
          "[engine][nat][pool]") {
  // 10.3.0.5 - 10.3.0.18 (a /32, /31, /29, /31 and /32 when cut up) and the IPv4 space's
  // last address: the turns walk every address once, in order, and wrap round.
  Firewall fw(
      "table <range> { 10.3.0.4/30, !10.3.0.4, 10.3.0.8/30, 10.3.0.12/30, 10.3.0.16/31, 10.3.0.18, "
      "255.255.255.255 }\n"
      "rdr on wan0 proto udp to 203.0.113.1 port 53 -> <range>\npass all");
  const Flow udp{"udp", false};
  std::vector<std::string> given;
  for (uint16_t i = 0; i < 16; ++i) {
    REQUIRE(fw.in(udp.packet("198.51.100.7", static_cast<uint16_t>(7000 + i), "203.0.113.1", 53)).action ==
            Action::Accept);
    given.push_back(address_of(fw.last_packet, true));
  }
  std::vector<std::string> expected;
  for (int host = 5; host <= 18; ++host) expected.push_back("10.3.0." + std::to_string(host));
  expected.push_back("255.255.255.255");
  expected.push_back("10.3.0.5");
  CHECK(given == expected);
}

TEST_CASE("nat pools: bitmask grafts, random draws, source-hash is the same on both nodes",
          "[engine][nat][pool]") {
  const std::string rules =
      "nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.16/28\n"
      "nat on wan0 from 10.2.0.0/16 to any -> 203.0.113.32/28 random\n"
      "nat on wan0 from 10.3.0.0/16 to any -> 203.0.113.48/28 source-hash\n"
      "nat on wan0 inet6 from 2001:db8:1::/48 to any -> 2001:db8:ff::/64 source-hash key \"v6\"\n"
      "pass all\n";
  Firewall fw(rules);
  Firewall peer(rules, 2);
  const Flow udp{"udp", false};
  const Flow udp6{"udp", true};
  auto outside = [&](Firewall& f, const Flow& flow, const std::string& host, uint16_t port) {
    const Verdict v = f.out(flow.packet(host, port, flow.v6 ? "2001:db8:2::53" : "192.0.2.53", 53));
    REQUIRE(v.action == Action::Accept);
    REQUIRE(v.rewritten);
    return address_of(f.last_packet, false);
  };

  // bitmask (one prefix, no type): the host's own low bits on the pool's network.
  CHECK(outside(fw, udp, "10.1.7.37", 1000) == "203.0.113.21");  // 37 = 0x25: host bits 0x5

  std::set<std::string> drawn;
  std::set<std::string> hashed;
  std::set<std::string> hashed6;
  for (int host = 1; host <= 48; ++host) {
    const std::string inside = "10.2.0." + std::to_string(host);
    const std::string random = outside(fw, udp, inside, 2000);
    CHECK(in_prefix(random, "203.0.113.32/28"));
    drawn.insert(random);

    // source-hash: every connection of one inside host leaves from one address, on either node.
    const std::string source = "10.3.0." + std::to_string(host);
    const std::string mapped = outside(fw, udp, source, 3000);
    CHECK(in_prefix(mapped, "203.0.113.48/28"));
    CHECK(outside(fw, udp, source, 3001) == mapped);
    CHECK(outside(peer, udp, source, 3002) == mapped);
    hashed.insert(mapped);

    const std::string source6 = "2001:db8:1::" + std::to_string(host);
    const std::string mapped6 = outside(fw, udp6, source6, 3000);
    CHECK(in_prefix(mapped6, "2001:db8:ff::/64"));
    CHECK(outside(peer, udp6, source6, 3001) == mapped6);
    hashed6.insert(mapped6);
  }
  // Spread over the pool (48 draws into 16 addresses: all in one would take a broken draw).
  CHECK(drawn.size() > 4);
  CHECK(hashed.size() > 4);
  CHECK(hashed6.size() == 48);  // 2^64 addresses: distinct sources do not meet
}

TEST_CASE("nat: a random or round-robin pool whose address has no port left gives the next one",
          "[engine][nat][pool]") {
  // One port an address: an address serves one connection to a server. As pf_get_sport, the
  // pool's other addresses are offered before the connection is refused; a bitmask pool maps a
  // host to one address and has no other to offer.
  const Flow udp{"udp", false};
  const auto open = [&](Firewall& fw, const std::string& host, const std::string& server) {
    const Verdict v = fw.out(udp.packet(host, 1000, server, 53));
    return v.action == Action::Accept ? address_of(fw.last_packet, false)
                                      : std::string(reason_name(v.reason));
  };
  SECTION("round-robin") {
    Firewall fw(
        "nat on wan0 proto udp from 10.1.0.0/16 to any -> { 203.0.113.1, 203.0.113.2 } port 50000 "
        "round-robin\n"
        "pass all");
    CHECK(open(fw, "10.1.0.1", "192.0.2.53") == "203.0.113.1");  // turn 0
    CHECK(open(fw, "10.1.0.2", "192.0.2.54") == "203.0.113.2");  // turn 1, another server
    // Turn 2 is .1, whose one port to 192.0.2.53 is taken: turn 3 gives .2.
    CHECK(open(fw, "10.1.0.3", "192.0.2.53") == "203.0.113.2");
    // Both taken now: refused once each address has been offered.
    CHECK(open(fw, "10.1.0.4", "192.0.2.53") == std::string(reason_name(Reason::TranslationFailed)));
    CHECK(open(fw, "10.1.0.5", "192.0.2.54") == "203.0.113.1");
  }
  SECTION("random") {
    Firewall fw(
        "nat on wan0 proto udp from 10.1.0.0/16 to any -> 203.0.113.4/30 port 50000 random\npass all");
    std::set<std::string> given;
    for (int host = 1; host <= 4; ++host) {
      const std::string outside = open(fw, "10.1.0." + std::to_string(host), "192.0.2.53");
      CHECK(in_prefix(outside, "203.0.113.4/30"));
      given.insert(outside);
    }
    CHECK(given.size() == 4);  // the /30's four addresses, one a connection
    CHECK(open(fw, "10.1.0.5", "192.0.2.53") == std::string(reason_name(Reason::TranslationFailed)));
  }
  SECTION("random over a list") {
    Firewall fw(
        "nat on wan0 proto udp from 10.1.0.0/16 to any -> { 203.0.113.1, 203.0.113.9 } port 50000 random\n"
        "pass all");
    // Two hosts to each of 16 servers: where the second host's draw meets the first's address, the
    // other is offered (without, some of the 16 would refuse it).
    for (int server = 1; server <= 16; ++server) {
      const std::string address = "192.0.2." + std::to_string(server);
      INFO(address);
      std::set<std::string> given;
      for (int host = 1; host <= 2; ++host) given.insert(open(fw, "10.1.0." + std::to_string(host), address));
      CHECK(given == std::set<std::string>{"203.0.113.1", "203.0.113.9"});
      CHECK(open(fw, "10.1.0.3", address) == std::string(reason_name(Reason::TranslationFailed)));
    }
  }
  SECTION("bitmask") {
    Firewall fw("nat on wan0 proto udp from 10.1.0.0/16 to any -> 203.0.113.4/30 port 50000\npass all");
    CHECK(open(fw, "10.1.0.1", "192.0.2.53") == "203.0.113.5");
    CHECK(open(fw, "10.1.1.1", "192.0.2.53") == std::string(reason_name(Reason::TranslationFailed)));
  }
  SECTION("a protocol without ports: its address is all a connection has") {
    // Tunnels (GRE here, ESP alike) from several inside hosts to one peer: pf_get_sport finds the
    // address taken for that peer and offers the pool's next one.
    Firewall fw(
        "nat on wan0 proto gre from 10.1.0.0/16 to any -> { 203.0.113.1, 203.0.113.2 } round-robin\n"
        "pass all");
    const auto gre = [&](const std::string& host, const std::string& peer) {
      const Verdict v = fw.out(PacketBuilder().ipv4(host, peer).raw_l4(47, Bytes(8, 0)).build());
      return v.action == Action::Accept ? address_of(fw.last_packet, false)
                                        : std::string(reason_name(v.reason));
    };
    CHECK(gre("10.1.0.1", "192.0.2.53") == "203.0.113.1");  // turn 0
    CHECK(gre("10.1.0.2", "192.0.2.54") == "203.0.113.2");  // turn 1, another peer
    // Turn 2 is .1, which 192.0.2.53 knows as 10.1.0.1's already: turn 3 gives .2.
    CHECK(gre("10.1.0.3", "192.0.2.53") == "203.0.113.2");
    CHECK(gre("10.1.0.4", "192.0.2.53") == std::string(reason_name(Reason::TranslationFailed)));
    CHECK(fw.engine.states().size() == 3);
  }
}

TEST_CASE("nat static-port keeps the source port and refuses a connection whose port is taken",
          "[engine][nat][pool]") {
  Firewall fw("nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1 static-port\npass all");
  for (const Flow& f : {Flow{"tcp", false}, Flow{"udp", false}, Flow{"icmp", false}}) {
    INFO(f.proto);
    const uint16_t dport = f.proto == "icmp" ? 40000 : 53;
    REQUIRE(fw.out(f.packet("10.1.0.10", 40000, "192.0.2.80", dport)).action == Action::Accept);
    CHECK(fw.last_packet == f.packet("203.0.113.1", 40000, "192.0.2.80", dport));
    // Another inside host on the same port to the same server would share the outside key.
    const Verdict taken = fw.out(f.packet("10.1.0.11", 40000, "192.0.2.80", dport));
    CHECK(taken.action == Action::Drop);
    CHECK(taken.reason == Reason::TranslationFailed);
    // To another server the key differs, and the port stays.
    REQUIRE(fw.out(f.packet("10.1.0.11", 40000, "192.0.2.81", dport)).action == Action::Accept);
    CHECK(fw.last_packet == f.packet("203.0.113.1", 40000, "192.0.2.81", dport));
  }
}

TEST_CASE("ICMP errors about a translated packet are translated back, quote and all", "[engine][nat][icmp]") {
  for (const bool v6 : {false, true}) {
    INFO((v6 ? "v6" : "v4"));
    Firewall fw(kNat);
    const Flow tcp{"tcp", v6};
    const std::string client = v6 ? "2001:db8:1::10" : "10.1.0.10";
    const std::string server = v6 ? "2001:db8:2::80" : "192.0.2.80";
    const std::string outside = v6 ? "2001:db8:ff::1" : "203.0.113.1";
    const std::string router = v6 ? "2001:db8:9::1" : "198.51.100.1";
    const Bytes syn = tcp.packet(client, 40000, server, 80);
    REQUIRE(fw.out(syn).action == Action::Accept);
    const Bytes translated = fw.last_packet;
    const uint16_t port = source_port(translated, tcp);

    const auto error = [&](const std::string& to, const Bytes& quote, std::size_t padding = 0) {
      return unreachable(v6, router, to, quote, padding);
    };
    // A router past the firewall answers the translated packet; the inside host must get an error
    // about its own packet, addressed to itself.
    const Verdict v = fw.in(error(outside, translated));
    CHECK(v.reason == Reason::State);
    CHECK(v.rewritten);
    CHECK(fw.last_packet == error(client, syn));
    CHECK(port >= 50001);
    // Link padding after the datagram is not part of the quote: it is left alone, and no checksum
    // counts it.
    REQUIRE(fw.in(error(outside, translated, 6)).reason == Reason::State);
    CHECK(fw.last_packet == error(client, syn, 6));
  }
}

// An inside host's error about a translated connection (a port unreachable for a late reply)
// leaves as pf_change_icmp makes it: quote and source both on the outside address, so that the
// inside address does not leak and anti-spoofing filters upstream let it by.
TEST_CASE("ICMP errors an inside host sends about a translated connection leave from the outside address",
          "[engine][nat][icmp]") {
  for (const bool v6 : {false, true}) {
    INFO((v6 ? "v6" : "v4"));
    Firewall fw(kNat);
    const Flow udp{"udp", v6};
    const std::string client = v6 ? "2001:db8:1::10" : "10.1.0.10";
    const std::string server = v6 ? "2001:db8:2::80" : "192.0.2.80";
    const std::string outside = v6 ? "2001:db8:ff::1" : "203.0.113.1";
    REQUIRE(fw.out(udp.packet(client, 5353, server, 53)).rewritten);
    const uint16_t port = source_port(fw.last_packet, udp);
    const Bytes reply = udp.packet(server, 53, outside, port, true);
    REQUIRE(fw.in(reply).reason == Reason::State);
    const Bytes delivered = fw.last_packet;  // server:53 -> client:5353

    const Verdict v = fw.out(unreachable(v6, client, server, delivered));
    CHECK(v.reason == Reason::State);
    CHECK(fw.last_packet == unreachable(v6, outside, server, reply));
  }
}

// `p` as the kernel queues it with the transport checksum left to finish (CHECKSUM_PARTIAL): the
// field holds the folded pseudo-header sum, uncomplemented.
Bytes partial(Bytes p, std::size_t l4, std::size_t field, uint8_t proto) {
  uint32_t sum = checksum_add(0, p.data() + (l4 == 20 ? 12 : 8), l4 == 20 ? 8 : 32);
  sum += proto;
  sum += static_cast<uint32_t>(p.size() - l4);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  put16(p, l4 + field, static_cast<uint16_t>(sum));
  return p;
}

TEST_CASE("a rewritten packet whose checksum the kernel left to finish leaves with a whole one",
          "[engine][nat][scrub]") {
  // Returning new bytes makes the kernel take the field as final, so the engine must finish it.
  for (const Flow& f : {Flow{"tcp", false}, Flow{"udp", false}, Flow{"tcp", true}, Flow{"udp", true}}) {
    INFO(f.proto << (f.v6 ? " v6" : " v4"));
    Firewall fw(kNat);
    const std::string client = f.v6 ? "2001:db8:1::10" : "10.1.0.10";
    const std::string server = f.v6 ? "2001:db8:2::80" : "192.0.2.80";
    const std::size_t l4 = f.v6 ? 40 : 20;
    const std::size_t field = f.proto == "tcp" ? 16 : 6;
    const uint8_t proto = f.proto == "tcp" ? ipproto::kTcp : ipproto::kUdp;
    REQUIRE(fw.out(partial(f.packet(client, 40000, server, 53), l4, field, proto), true).rewritten);
    const uint16_t port = source_port(fw.last_packet, f);
    CHECK(fw.last_packet == f.packet(f.v6 ? "2001:db8:ff::1" : "203.0.113.1", port, server, 53));
    // A packet the engine passes unchanged keeps its partial sum: the kernel still finishes it.
    Firewall plain("pass all");
    const Bytes untouched = partial(f.packet(client, 40000, server, 53), l4, field, proto);
    CHECK_FALSE(plain.out(untouched, true).rewritten);
    CHECK(plain.last_packet == untouched);
  }
  SECTION("max-mss") {
    Firewall fw("scrub in all max-mss 1400\npass all");
    const auto syn = [](uint16_t mss) {
      return PacketBuilder().ipv4("10.1.0.10", "192.0.2.80").tcp(1, 2).flags(tcpflag::kSyn).mss(mss).build();
    };
    REQUIRE(fw.out(partial(syn(1460), 20, 16, ipproto::kTcp), true).rewritten);
    CHECK(fw.last_packet == syn(1400));
  }
}

TEST_CASE("a rewritten GSO packet keeps the partial sum its segments' checksums start from",
          "[engine][nat][scrub]") {
  // The kernel cuts a GSO packet into segments after the verdict. A UDP one's segments (UDP_SEGMENT
  // senders: QUIC) take their checksums from the packet's field as the pseudo-header sum
  // (__udp_gso_segment), so a finished checksum there would make every segment's wrong; TCP's sets
  // the field up again itself.
  for (const Flow& f : {Flow{"tcp", false}, Flow{"udp", false}, Flow{"tcp", true}, Flow{"udp", true}}) {
    INFO(f.proto << (f.v6 ? " v6" : " v4"));
    const std::string client = f.v6 ? "2001:db8:1::10" : "10.1.0.10";
    const std::string server = f.v6 ? "2001:db8:2::80" : "192.0.2.80";
    const std::size_t l4 = f.v6 ? 40 : 20;
    const std::size_t field = f.proto == "tcp" ? 16 : 6;
    const uint8_t proto = f.proto == "tcp" ? ipproto::kTcp : ipproto::kUdp;
    Firewall fw(kNat);
    const PacketMeta gso{Hook::Forward, fw.lan, fw.wan, true, true};
    REQUIRE(fw.run(partial(f.packet(client, 40000, server, 53), l4, field, proto), gso).rewritten);
    const uint16_t port = source_port(fw.last_packet, f);
    CHECK(fw.last_packet ==
          partial(f.packet(f.v6 ? "2001:db8:ff::1" : "203.0.113.1", port, server, 53), l4, field, proto));
  }
  SECTION("scrub rewrites the IP header only: the partial sum stays as it came") {
    Firewall fw("scrub in all min-ttl 100\npass all");
    const Bytes p =
        partial(Flow{"udp", false}.packet("10.1.0.10", 40000, "192.0.2.80", 53), 20, 6, ipproto::kUdp);
    REQUIRE(fw.run(p, PacketMeta{Hook::Forward, fw.lan, fw.wan, true, true}).rewritten);
    CHECK(get16(fw.last_packet, 26) == get16(p, 26));
  }
}

TEST_CASE("a peer's copy of a translated state translates after failover", "[engine][nat][sync]") {
  Firewall master(kNat, 1);
  Firewall standby(kNat, 2);
  const Flow tcp{"tcp", false};
  REQUIRE(master.out(tcp.packet("10.1.0.10", 40000, "192.0.2.80", 80)).action == Action::Accept);
  const uint16_t port = source_port(master.last_packet, tcp);
  StateRecord insert;
  REQUIRE(master.worker.events().pop(insert));
  CHECK((insert.flags & stateflag::kTranslated) != 0);
  REQUIRE(standby.engine.apply(insert, standby.now));

  // The reply reaches the standby, now master: translated back to the inside host.
  const Verdict reply = standby.in(tcp.packet("192.0.2.80", 80, "203.0.113.1", port, true));
  CHECK(reply.reason == Reason::State);
  CHECK(standby.last_packet == tcp.packet("192.0.2.80", 80, "10.1.0.10", 40000, true));
  // And the inside host's next packet leaves with the same source port.
  const Bytes ack = PacketBuilder()
                        .ipv4("10.1.0.10", "192.0.2.80")
                        .tcp(40000, 80)
                        .flags(tcpflag::kAck)
                        .seq(1001)
                        .ack(9001)
                        .build();
  CHECK(standby.out(ack).reason == Reason::State);
  CHECK(standby.last_packet == PacketBuilder()
                                   .ipv4("203.0.113.1", "192.0.2.80")
                                   .tcp(port, 80)
                                   .flags(tcpflag::kAck)
                                   .seq(1001)
                                   .ack(9001)
                                   .build());
}

TEST_CASE("process_batch translates as process() does", "[engine][nat][batch]") {
  const Flow udp{"udp", false};
  std::vector<Bytes> packets;
  for (uint16_t i = 0; i < 20; ++i)
    packets.push_back(udp.packet("10.1.0." + std::to_string(10 + i % 5), 5000 + i, "192.0.2.80", 53));
  Firewall one(kNat);
  Firewall batched(kNat);
  std::vector<Bytes> single_out;
  std::vector<Verdict> single;
  for (const Bytes& p : packets) {
    single.push_back(one.out(p));
    single_out.push_back(one.last_packet);
  }
  std::vector<Bytes> copies = packets;
  std::vector<BatchPacket> batch;
  for (Bytes& p : copies)
    batch.push_back({p, PacketMeta{Hook::Forward, batched.lan, batched.wan, false}, {}});
  batched.engine.process_batch(batched.worker, batch, batched.now);
  for (std::size_t i = 0; i < packets.size(); ++i) {
    INFO(i);
    CHECK(batch[i].verdict.action == single[i].action);
    CHECK(batch[i].verdict.rewritten == single[i].rewritten);
    // Ports are drawn at random: everything but the source port and the UDP checksum must agree.
    Bytes a = copies[i];
    Bytes b = single_out[i];
    for (Bytes* x : {&a, &b}) {
      put16(*x, 20, 0);
      put16(*x, 26, 0);
    }
    CHECK(a == b);
    CHECK(get16(copies[i], 20) >= 50001);
  }
  CHECK(batched.engine.states().size() == one.engine.states().size());
}

// The kernel checks a forwarded packet's TTL and path MTU before the forward hook, so the node's
// own errors (through OUTPUT with local hooks) quote what it had not translated yet: an inside
// host's packet as the host sent it, or a reply already translated back before routing. Path MTU
// discovery through the nat depends on both reaching their sender in the form it knows.
TEST_CASE("the node's own ICMP errors about a translated connection reach either end",
          "[engine][nat][icmp]") {
  for (const bool v6 : {false, true}) {
    INFO((v6 ? "v6" : "v4"));
    Firewall fw(std::string(kNat) + "pass out all\n");
    const Flow udp{"udp", v6};
    const std::string client = v6 ? "2001:db8:1::10" : "10.1.0.10";
    const std::string server = v6 ? "2001:db8:2::80" : "192.0.2.80";
    const std::string outside = v6 ? "2001:db8:ff::1" : "203.0.113.1";
    const std::string node_inside = v6 ? "2001:db8:1::1" : "10.1.0.1";
    const Bytes query = udp.packet(client, 5353, server, 53);
    REQUIRE(fw.out(query).rewritten);
    const uint16_t port = source_port(fw.last_packet, udp);

    // About the host's own packet, back to it as it is.
    const Bytes to_client = unreachable(v6, node_inside, client, query);
    const Verdict back = fw.run(to_client, PacketMeta{Hook::Output, kNoIface, fw.lan, false});
    CHECK(back.reason == Reason::State);
    CHECK_FALSE(back.rewritten);
    CHECK(fw.last_packet == to_client);

    // About a reply translated back before routing: to the server, about the reply as it sent it.
    const Bytes reply = udp.packet(server, 53, outside, port, true);
    REQUIRE(fw.run(reply, PacketMeta{Hook::Prerouting, fw.wan, kNoIface, false}).reason == Reason::State);
    const Bytes delivered = fw.last_packet;
    const Verdict to_server = fw.run(unreachable(v6, outside, server, delivered),
                                     PacketMeta{Hook::Output, kNoIface, fw.wan, false});
    CHECK(to_server.reason == Reason::State);
    CHECK(fw.last_packet == unreachable(v6, outside, server, reply));

    // The same quote of the host's packet from anywhere but this node has bypassed the
    // translation.
    const Verdict forged = fw.in(unreachable(v6, server, client, query));
    CHECK(forged.action == Action::Drop);
    CHECK(forged.reason == Reason::StateMismatch);
  }
}

// The node's own "fragmentation needed" (hooks = forward+local) quotes the client's segment as
// the kernel received it, before the forward hook modulated it: in the client's own numbers.
TEST_CASE("the node's own ICMP error about a modulated segment reaches the client in its own numbers",
          "[engine][modulate][icmp]") {
  using namespace tcpflag;
  for (const bool with_nat : {false, true}) {
    INFO((with_nat ? "nat + modulate" : "modulate"));
    Firewall fw(std::string(with_nat ? "nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\n" : "") +
                "pass out all\n"
                "pass in on lan0 proto tcp to port 80 modulate state\n");
    REQUIRE(fw.out(segment(false, "10.1.0.10", 40000, "192.0.2.80", 80, kSyn, 1000, 0)).action ==
            Action::Accept);
    const uint16_t port = get16(fw.last_packet, 20);
    const uint32_t cdiff = get32(fw.last_packet, 24) - 1000;
    REQUIRE(cdiff != 0);
    const std::string outside = with_nat ? "203.0.113.1" : "10.1.0.10";
    REQUIRE(
        fw.in(segment(false, "192.0.2.80", 80, outside, port, kSyn | kAck, 9000, 1000 + cdiff + 1)).reason ==
        Reason::State);
    const uint32_t sdiff = get32(fw.last_packet, 24) - 9000;
    REQUIRE(
        fw.out(segment(false, "10.1.0.10", 40000, "192.0.2.80", 80, kAck, 1001, 9000 + sdiff + 1)).reason ==
        Reason::State);

    // A 1400-byte segment the node cannot forward: its error, about the segment as the client
    // sent it, from the node's inside address, through OUTPUT.
    const Bytes big =
        segment(false, "10.1.0.10", 40000, "192.0.2.80", 80, kAck, 1001, 9000 + sdiff + 1, 1400);
    const Bytes error = PacketBuilder().ipv4("10.1.0.1", "10.1.0.10").icmp_error(3, 4, big, 1280).build();
    const Verdict v = fw.run(error, PacketMeta{Hook::Output, kNoIface, fw.lan, false});
    CHECK(v.action == Action::Accept);
    CHECK(v.reason == Reason::State);
    CHECK(fw.last_packet == error);  // the client must find its own sequence number in the quote
  }
}

constexpr const char* kNatAll = R"(
nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1
nat on wan0 inet6 from 2001:db8:1::/48 to any -> 2001:db8:ff::1
pass all
)";

TEST_CASE("errors quoting an echo request whose id nat changed", "[engine][nat][icmp]") {
  for (const bool v6 : {false, true}) {
    INFO((v6 ? "v6" : "v4"));
    Firewall fw(kNatAll);
    const std::string a = v6 ? "2001:db8:1::10" : "10.1.0.10";
    const std::string b = v6 ? "2001:db8:1::11" : "10.1.0.11";
    const std::string server = v6 ? "2001:db8:2::80" : "192.0.2.80";
    const std::string outside = v6 ? "2001:db8:ff::1" : "203.0.113.1";
    const std::string router = v6 ? "2001:db8:9::1" : "198.51.100.1";
    const std::size_t l4 = v6 ? 40 : 20;
    const Flow echo{"icmp", v6};
    REQUIRE(fw.out(echo.packet(a, 77, server, 0)).action == Action::Accept);
    const Bytes from_b = echo.packet(b, 77, server, 0);
    REQUIRE(fw.out(from_b).action == Action::Accept);
    const uint16_t id = get16(fw.last_packet, l4 + 4);
    REQUIRE(id != 77);
    const Bytes translated = fw.last_packet;
    CHECK(translated == echo.packet(outside, id, server, 0));
    const Verdict e = fw.in(icmp_error(v6, kTimeExceeded, router, outside, translated));
    CHECK(e.reason == Reason::State);
    CHECK(fw.last_packet == icmp_error(v6, kTimeExceeded, router, b, from_b));
    CHECK(fw.in(echo.packet(server, id, outside, 0, true)).reason == Reason::State);
    CHECK(fw.last_packet == echo.packet(server, 77, b, 0, true));
  }
}

TEST_CASE("IPv4 UDP without a checksum under nat, and in a quote", "[engine][nat][udp]") {
  Firewall fw(kNatAll);
  const auto udp0 = [](const std::string& s, uint16_t sp, const std::string& d, uint16_t dp) {
    return PacketBuilder().ipv4(s, d).udp(sp, dp).payload(10).l4_checksum(0).build();
  };
  const Bytes q = udp0("10.1.0.10", 5353, "192.0.2.80", 53);
  REQUIRE(fw.out(q).action == Action::Accept);
  const uint16_t port = get16(fw.last_packet, 20);
  CHECK(fw.last_packet == udp0("203.0.113.1", port, "192.0.2.80", 53));
  const Bytes tr = fw.last_packet;
  CHECK(fw.in(PacketBuilder().ipv4("192.0.2.80", "203.0.113.1").icmp_error(3, 3, tr).build()).reason ==
        Reason::State);
  CHECK(fw.last_packet == PacketBuilder().ipv4("192.0.2.80", "10.1.0.10").icmp_error(3, 3, q).build());
}

// A UDP checksum that comes to zero is sent as 0xffff (RFC 768), over IPv6 as well, where a
// receiver drops a datagram whose checksum field is zero (RFC 8200 8.1).
TEST_CASE("UDP whose rewritten checksum comes to zero leaves with 0xffff", "[engine][nat][udp]") {
  for (const bool v6 : {false, true}) {
    INFO((v6 ? "v6" : "v4"));
    Firewall fw(
        "nat on wan0 proto udp from 10.1.0.0/16 to any -> 203.0.113.1 static-port\n"
        "nat on wan0 inet6 proto udp from 2001:db8:1::/48 to any -> 2001:db8:ff::1 static-port\n"
        "pass all\n");
    const std::string client = v6 ? "2001:db8:1::10" : "10.1.0.10";
    const std::string server = v6 ? "2001:db8:2::80" : "192.0.2.80";
    const std::string outside = v6 ? "2001:db8:ff::1" : "203.0.113.1";
    const std::size_t l4 = v6 ? 40 : 20;
    // Two bytes of payload chosen so that the datagram sums to zero: the checksum of the same
    // datagram with a zero payload word is the word that cancels the rest.
    const auto datagram = [&](const std::string& s, uint16_t sp, const std::string& d, uint16_t dp,
                              uint16_t word) {
      return ip(v6, s, d)
          .udp(sp, dp)
          .payload(Bytes{static_cast<uint8_t>(word >> 8), static_cast<uint8_t>(word)})
          .build();
    };
    const auto zeroing = [&](const std::string& s, uint16_t sp, const std::string& d, uint16_t dp) {
      return get16(datagram(s, sp, d, dp, 0), l4 + 6);
    };

    const uint16_t out_word = zeroing(outside, 5353, server, 53);
    REQUIRE(get16(datagram(outside, 5353, server, 53, out_word), l4 + 6) == 0xffff);
    REQUIRE(fw.out(datagram(client, 5353, server, 53, out_word)).action == Action::Accept);
    CHECK(get16(fw.last_packet, l4 + 6) == 0xffff);
    CHECK(fw.last_packet == datagram(outside, 5353, server, 53, out_word));

    const uint16_t back_word = zeroing(server, 53, client, 5353);
    REQUIRE(fw.in(datagram(server, 53, outside, 5353, back_word)).reason == Reason::State);
    CHECK(get16(fw.last_packet, l4 + 6) == 0xffff);
    CHECK(fw.last_packet == datagram(server, 53, client, 5353, back_word));
  }
}

TEST_CASE("ICMP errors about an rdr'd connection, both ways", "[engine][nat][icmp]") {
  using namespace tcpflag;
  for (const bool v6 : {false, true}) {
    INFO((v6 ? "v6" : "v4"));
    const std::string vip = v6 ? "2001:db8:ff::1" : "203.0.113.1";
    const std::string srv = v6 ? "2001:db8:2::10" : "10.2.0.10";
    const std::string x = v6 ? "2001:db8:7::7" : "198.51.100.7";
    const std::string inner_router = v6 ? "2001:db8:2::fe" : "10.2.0.254";
    const std::string outer_router = v6 ? "2001:db8:9::1" : "198.51.100.1";
    Firewall fw("rdr on wan0 proto tcp to " + vip + " port 80 -> " + srv + " port 8080\npass all\n");
    const auto s = [&](const std::string& a, uint16_t ap, const std::string& b, uint16_t bp, uint8_t f,
                       uint32_t seq, uint32_t ack) { return segment(v6, a, ap, b, bp, f, seq, ack); };
    const auto err = [&](const std::string& a, const std::string& b, const Bytes& q) {
      return icmp_error(v6, kHostUnreachable, a, b, q);
    };
    const PacketMeta pre{Hook::Prerouting, fw.wan, kNoIface, false};
    const Bytes syn = s(x, 4000, vip, 80, kSyn, 1000, 0);
    REQUIRE(fw.run(syn, pre).claimed);
    const Bytes delivered = fw.last_packet;
    CHECK(delivered == s(x, 4000, srv, 8080, kSyn, 1000, 0));
    // An inside router cannot reach the server: the client hears it from the rdr address.
    const Verdict a = fw.out(err(inner_router, x, delivered));
    CHECK(a.reason == Reason::State);
    CHECK(fw.last_packet == err(vip, x, syn));
    // The server's SYN-ACK, and an outside router's error about it, addressed to the rdr address.
    const Bytes synack = s(srv, 8080, x, 4000, kSyn | kAck, 5000, 1001);
    REQUIRE(fw.out(synack).reason == Reason::State);
    const Bytes left = fw.last_packet;
    CHECK(left == s(vip, 80, x, 4000, kSyn | kAck, 5000, 1001));
    const Verdict b = fw.run(err(outer_router, vip, left), pre);
    CHECK(b.reason == Reason::State);
    CHECK(b.claimed);
    CHECK(fw.last_packet == err(outer_router, srv, synack));
  }
}

// pf: `nat pass` / `rdr pass` skip the filter rules of the pass they translate on; the packet's
// other pass (pf_test on the other interface) still meets its filter rules.
TEST_CASE("nat pass and rdr pass skip their own pass's filter rules only", "[engine][nat]") {
  Firewall fw(
      "nat pass on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\n"
      "rdr pass on wan0 proto tcp to 203.0.113.1 port 22 -> 10.2.0.22\n"
      "pass all\n"
      "block in quick on lan0 from 10.1.0.66\n"
      "block out quick on lan0 to 10.2.0.22\n");
  const Verdict quarantined =
      fw.out(segment(false, "10.1.0.66", 40000, "192.0.2.80", 80, tcpflag::kSyn, 1000, 0));
  CHECK(quarantined.action == Action::Drop);
  const Verdict inbound =
      fw.in(segment(false, "198.51.100.7", 4000, "203.0.113.1", 22, tcpflag::kSyn, 1000, 0));
  CHECK(inbound.action == Action::Drop);
}

// pf_get_sport changes the identifier of an echo request only ("Don't try to modify non-echo
// ICMP"): a timestamp, information or address mask request leaves with its own, as under
// static-port, and one whose identifier the outside address already has to that peer is refused.
TEST_CASE("nat keeps the identifier of ICMP queries other than echo", "[engine][nat][icmp]") {
  for (const uint8_t type : {13, 15, 17}) {
    INFO("type " << int{type});
    Firewall fw(kNatAll);
    const auto query = [type](const std::string& src, const std::string& dst) {
      return PacketBuilder().ipv4(src, dst).icmp(type, 0, 77u << 16 | 1).payload(12).build();
    };
    REQUIRE(fw.out(query("10.1.0.10", "192.0.2.80")).action == Action::Accept);
    CHECK(fw.last_packet == query("203.0.113.1", "192.0.2.80"));
    const Verdict taken = fw.out(query("10.1.0.11", "192.0.2.80"));
    CHECK(taken.action == Action::Drop);
    CHECK(taken.reason == Reason::TranslationFailed);
    REQUIRE(fw.out(query("10.1.0.11", "192.0.2.81")).action == Action::Accept);
    CHECK(fw.last_packet == query("203.0.113.1", "192.0.2.81"));
  }
}

namespace {

// An IPv6 TCP SYN still on its way along a route: its routing header has a segment left, so the
// header's destination is `hop`, the route's next stop, and the checksum's pseudo-header sums
// `final`, where the route ends (RFC 8200 8.1): the mobile node's home address of a type 2 header
// (RFC 6275 6.4), segment 0 of a segment routing header (type 4, RFC 8754 2), whose segment 1
// is `listed`, the hop the sender addressed.
Bytes routed_syn(uint8_t routing_type, const std::string& src, uint16_t sport, const std::string& hop,
                 const std::string& final, const std::string& listed = "") {
  const Bytes ends = PacketBuilder().ipv6(listed.empty() ? hop : listed, final).udp(1, 1).build();
  Bytes header;
  if (routing_type == 2) {
    header = {0, 2, 2, 1, 0, 0, 0, 0};
  } else {
    header = {0, 4, 4, 1, 1, 0, 0, 0};  // last entry 1: segment 1 is the hop
  }
  header.insert(header.end(), ends.begin() + 24, ends.begin() + 40);
  if (routing_type == 4) header.insert(header.end(), ends.begin() + 8, ends.begin() + 24);
  Bytes p = PacketBuilder()
                .ipv6(src, final)
                .ipv6_ext_raw(43, header)
                .tcp(sport, 443)
                .flags(tcpflag::kSyn)
                .seq(1000)
                .window(512)
                .build();
  const Bytes next = PacketBuilder().ipv6(hop, hop).udp(1, 1).build();
  std::copy(next.begin() + 8, next.begin() + 24, p.begin() + 24);
  return p;
}

}  // namespace

// Rewriting the header's destination of such a packet leaves its pseudo-header, and so the
// transport checksum, as it was; a checksum finished here sums the route's end. (pf, which
// adjusts the checksum for the header's destination, breaks it.)
TEST_CASE("translation of an IPv6 packet whose routing header has segments left", "[engine][nat]") {
  const std::string client = "2001:db8:1::10";
  const std::string outside = "2001:db8:ff::1";
  const std::string hop = "2001:db8:7::1";
  const std::string final = "2001:db8:8::1";
  for (const uint8_t type : {2, 4}) {
    INFO("routing type " << int{type});
    Firewall fw(
        "rdr on wan0 inet6 proto tcp to 2001:db8:ff::1 -> 2001:db8:2::10\n"
        "nat on wan0 inet6 from 2001:db8:1::/48 to any -> 2001:db8:ff::1 static-port\n"
        "pass all allow-opts\n");
    // rdr: the destination changes, the checksum stays.
    REQUIRE(fw.in(routed_syn(type, "2001:db8:7::7", 4000, outside, final)).action == Action::Accept);
    CHECK(fw.last_packet == routed_syn(type, "2001:db8:7::7", 4000, "2001:db8:2::10", final, outside));
    // An inside router's error about it: the quote's destination changes back, its checksum stays.
    const Bytes delivered = routed_syn(type, "2001:db8:7::7", 4000, "2001:db8:2::10", final, outside);
    REQUIRE(fw.out(unreachable(true, "2001:db8:2::fe", "2001:db8:7::7", delivered)).reason == Reason::State);
    CHECK(fw.last_packet == unreachable(true, outside, "2001:db8:7::7",
                                        routed_syn(type, "2001:db8:7::7", 4000, outside, final)));
    // nat: the source changes, and the checksum with it.
    REQUIRE(fw.out(routed_syn(type, client, 40000, hop, final)).action == Action::Accept);
    CHECK(fw.last_packet == routed_syn(type, outside, 40000, hop, final));
    // nat of a packet whose checksum the kernel left to finish.
    Bytes partial = routed_syn(type, client, 40001, hop, final);
    put16(partial, partial.size() - 4, 0x1234);
    REQUIRE(fw.out(partial, true).action == Action::Accept);
    CHECK(fw.last_packet == routed_syn(type, outside, 40001, hop, final));
  }
}

// pf_get_translation returns a translation only where it changes the packet's key ("Return
// success only if translation really happened"): a rule that maps a packet onto itself (this
// node's own traffic from the nat address, kept by static-port or without ports to change) leaves
// it to the filter rules, which a `nat pass` skips only for a packet it translates, and forces no
// state on it.
TEST_CASE("a translation that leaves the packet as it was is none", "[engine][nat]") {
  Firewall fw(
      "nat pass on wan0 from any to any -> 203.0.113.1 static-port\n"
      "block out on wan0 proto { udp, gre }\n"
      "pass out on wan0 proto tcp no state\n"
      "pass in all\n");
  const PacketMeta own{Hook::Output, kNoIface, fw.wan, false};
  const Flow udp{"udp", false};
  const Verdict v = fw.run(udp.packet("203.0.113.1", 5000, "192.0.2.80", 53), own);
  CHECK(v.action == Action::Drop);
  CHECK(v.reason == Reason::RuleBlock);
  const Verdict g =
      fw.run(PacketBuilder().ipv4("203.0.113.1", "192.0.2.80").raw_l4(47, Bytes(8, 0)).build(), own);
  CHECK(g.reason == Reason::RuleBlock);
  const Verdict t = fw.run(Flow{"tcp", false}.packet("203.0.113.1", 5000, "192.0.2.80", 80), own);
  CHECK(t.action == Action::Accept);
  CHECK_FALSE(t.rewritten);
  CHECK(fw.engine.states().size() == 0);
  // A packet it translates passes by it.
  const Verdict lan = fw.out(udp.packet("10.1.0.10", 5000, "192.0.2.80", 53));
  CHECK(lan.action == Action::Accept);
  CHECK(fw.last_packet == udp.packet("203.0.113.1", 5000, "192.0.2.80", 53));
}

// What never leaves its link is not translated, however broad the rule: this node's neighbor
// solicitations and its advertisements to link-local groups keep their own source, where the nat
// address would break address resolution and the peer's election on the link.
TEST_CASE("translation rules pass link-scoped traffic by: link-local addresses, link groups, ND",
          "[engine][nat]") {
  Firewall fw(
      "nat on wan0 from any to any -> 203.0.113.1\n"
      "nat on wan0 inet6 from any to any -> 2001:db8:ff::1\n"
      "pass all\n");
  const auto from_node = [&](Bytes p) {
    return fw.run(std::move(p), PacketMeta{Hook::Output, kNoIface, fw.wan});
  };
  const Bytes target = {0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0x80};
  const std::vector<Bytes> link_scoped = {
      // Address resolution from the link-local address and from a global one, and the answer to
      // a neighbor's solicitation.
      PacketBuilder().ipv6("fe80::1", "ff02::1:ff34:80").ttl(255).icmp(135, 0).payload(target).build(),
      PacketBuilder()
          .ipv6("2001:db8:2::1", "2001:db8:2::1234:80")
          .ttl(255)
          .icmp(135, 0)
          .payload(target)
          .build(),
      PacketBuilder()
          .ipv6("2001:db8:2::1", "2001:db8:2::9")
          .ttl(255)
          .icmp(136, 0, 0x60000000)
          .payload(target)
          .build(),
      // DHCPv6 to the link's servers, VRRP to its group, a link-local echo.
      PacketBuilder().ipv6("fe80::1", "ff02::1:2").udp(546, 547).payload(8).build(),
      PacketBuilder().ipv4("192.0.2.1", "224.0.0.18").ttl(255).raw_l4(112, Bytes(36, 0)).build(),
      PacketBuilder().ipv4("169.254.7.1", "169.254.7.2").icmp_echo(7, 1).build(),
  };
  for (std::size_t i = 0; i < link_scoped.size(); ++i) {
    INFO("packet " << i);
    const Verdict v = from_node(link_scoped[i]);
    CHECK(v.action == Action::Accept);
    CHECK_FALSE(v.rewritten);
    CHECK(fw.last_packet == link_scoped[i]);
  }
  // Routed traffic from the same node is translated.
  const Bytes routed =
      PacketBuilder().ipv6("2001:db8:2::1", "2001:db8:9::1").udp(4000, 53).payload(8).build();
  const Verdict v = from_node(routed);
  REQUIRE(v.action == Action::Accept);
  CHECK(v.rewritten);
  CHECK(fw.last_packet != routed);
}

// pfctl -vs nat: a translation rule's evaluations are the packets it matched first (an exemption's
// too); its packets, bytes and states those of the connections it translated, later packets folded
// in as a filter rule's are (within a second, and at the state's end).
TEST_CASE("translation rules count what they match and the connections they translate",
          "[engine][nat][counters]") {
  Firewall fw(
      "no nat on wan0 from 10.1.0.0/16 to 192.0.2.0/24\n"
      "nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\n"
      "rdr on wan0 proto tcp to 203.0.113.1 port 80 -> 10.2.0.10 port 8080\n"
      "block in quick on wan0 proto tcp from 198.51.100.66 to 10.2.0.10 port 8080\n"
      "pass all\n");
  const auto& listed = fw.engine.rules()->translation_rules();
  REQUIRE(listed.size() == 3);
  const pairwall::engine::rules::RuleStats& no_nat = *listed[0].stats;
  const pairwall::engine::rules::RuleStats& nat = *listed[1].stats;
  const pairwall::engine::rules::RuleStats& rdr = *listed[2].stats;
  const Flow udp{"udp", false};
  const Flow tcp{"tcp", false};

  const Bytes query = udp.packet("10.1.0.10", 5000, "198.51.100.80", 53);
  REQUIRE(fw.out(query).rewritten);
  const uint16_t port = source_port(fw.last_packet, udp);
  CHECK(nat.evaluations == 1);
  CHECK(nat.packets == 1);
  CHECK(nat.bytes == query.size());
  CHECK(nat.states_current == 1);
  CHECK(nat.states_created == 1);
  const Bytes answer = udp.packet("198.51.100.80", 53, "203.0.113.1", port, true);
  REQUIRE(fw.in(answer).reason == Reason::State);
  CHECK(nat.evaluations == 1);  // a state's packets meet no rule

  // Exempted: the exemption counts its evaluation, and nothing more; the nat rule nothing.
  REQUIRE(fw.out(udp.packet("10.1.0.10", 5001, "192.0.2.80", 53)).action == Action::Accept);
  CHECK(fw.last_packet == udp.packet("10.1.0.10", 5001, "192.0.2.80", 53));
  CHECK(no_nat.evaluations == 1);
  CHECK(no_nat.packets == 0);
  CHECK(no_nat.states_created == 0);
  CHECK(nat.evaluations == 1);

  // Matched, then blocked by the filter: evaluated, but it translated nothing.
  REQUIRE(fw.in(tcp.packet("198.51.100.66", 4000, "203.0.113.1", 80)).reason == Reason::RuleBlock);
  CHECK(rdr.evaluations == 1);
  CHECK(rdr.packets == 0);
  CHECK(rdr.states_current == 0);
  const Bytes syn = tcp.packet("198.51.100.7", 4000, "203.0.113.1", 80);
  REQUIRE(fw.in(syn).action == Action::Accept);
  CHECK(rdr.evaluations == 2);
  CHECK(rdr.packets == 1);
  CHECK(rdr.bytes == syn.size());
  CHECK(rdr.states_current == 1);
  CHECK(rdr.states_created == 1);
  CHECK(nat.states_current == 1);

  // Their ends: the states given back, the nat'd connection's answer folded in.
  CHECK(fw.engine.expire(fw.now + Millis{100'000'000}) == 3);
  CHECK(nat.packets == 2);
  CHECK(nat.bytes == query.size() + answer.size());
  CHECK(nat.states_current == 0);
  CHECK(nat.states_created == 1);
  CHECK(rdr.states_current == 0);
  CHECK(rdr.packets == 1);
}

// As pfsync takes a state's nat rule by number where the ruleset checksums agree: the standby's
// translation rules count the connections the master's translated, those it carries after a
// failover included; with other rules, the state names none there.
TEST_CASE("a state learned from a peer of the same rules counts to its translation rules there",
          "[engine][nat][counters][sync]") {
  const Flow udp{"udp", false};
  Firewall master(kNat, 1);
  const Bytes query = udp.packet("10.1.0.10", 40000, "192.0.2.80", 53);
  REQUIRE(master.out(query).rewritten);
  const uint16_t port = source_port(master.last_packet, udp);
  StateRecord insert;
  REQUIRE(master.worker.events().pop(insert));
  CHECK(insert.translation_index == std::array<uint32_t, 2>{StateRecord::kNoTranslation, 0});

  SECTION("the same rules") {
    Firewall standby(kNat, 2);
    const auto& nat = *standby.engine.rules()->translation_rules().at(0).stats;
    REQUIRE(standby.engine.apply(insert, standby.now));
    CHECK(nat.states_current == 1);
    CHECK(nat.states_created == 0);  // the master made it
    const Bytes answer = udp.packet("192.0.2.80", 53, "203.0.113.1", port, true);
    REQUIRE(standby.in(answer).reason == Reason::State);
    CHECK(standby.engine.expire(standby.now + Millis{100'000'000}) == 1);
    CHECK(nat.packets == 1);
    CHECK(nat.bytes == answer.size());
    CHECK(nat.states_current == 0);
  }
  SECTION("other rules") {
    Firewall standby(std::string(kNat) + "pass out on wan0 proto tcp\n", 2);
    const auto& nat = *standby.engine.rules()->translation_rules().at(0).stats;
    REQUIRE(standby.engine.apply(insert, standby.now));
    CHECK(nat.states_current == 0);
    REQUIRE(standby.in(udp.packet("192.0.2.80", 53, "203.0.113.1", port, true)).reason == Reason::State);
    CHECK(standby.engine.expire(standby.now + Millis{100'000'000}) == 1);
    CHECK(nat.packets == 0);
  }
}

TEST_CASE("a connection translated on both passes counts in both rules, or once in a rule that did both",
          "[engine][nat][counters]") {
  const Flow udp{"udp", false};
  SECTION("rdr in, nat out: two rules") {
    Firewall fw(
        "rdr on wan0 proto udp to 203.0.113.1 port 53 -> 10.2.0.53\n"
        "nat on lan0 from any to 10.2.0.53 -> 10.2.0.1\n"
        "pass all\n");
    const auto& listed = fw.engine.rules()->translation_rules();
    const Bytes query = udp.packet("198.51.100.7", 4000, "203.0.113.1", 53);
    REQUIRE(fw.in(query).rewritten);
    CHECK(fw.last_packet == udp.packet("10.2.0.1", source_port(fw.last_packet, udp), "10.2.0.53", 53));
    for (const auto& rule : listed) {
      INFO(rule.text);
      CHECK(rule.stats->evaluations == 1);
      CHECK(rule.stats->packets == 1);
      CHECK(rule.stats->bytes == query.size());
      CHECK(rule.stats->states_current == 1);
      CHECK(rule.stats->states_created == 1);
    }
    CHECK(fw.engine.expire(fw.now + Millis{100'000'000}) == 1);
    for (const auto& rule : listed) CHECK(rule.stats->states_current == 0);
  }
  SECTION("binat both ways on one interface (a hairpin): one rule, counted once") {
    Firewall fw("binat on wan0 from 10.1.0.0/24 to any -> 203.0.113.0/24\npass all\n");
    const auto& stats = *fw.engine.rules()->translation_rules().at(0).stats;
    const Bytes query = udp.packet("10.1.0.5", 4000, "203.0.113.25", 53);
    const pairwall::engine::PacketMeta hairpin{pairwall::engine::Hook::Forward, fw.wan, fw.wan, false};
    REQUIRE(fw.run(query, hairpin).rewritten);
    CHECK(fw.last_packet == udp.packet("203.0.113.5", 4000, "10.1.0.25", 53));
    CHECK(stats.evaluations == 2);  // each pass matched it
    CHECK(stats.packets == 1);
    CHECK(stats.bytes == query.size());
    CHECK(stats.states_current == 1);
    CHECK(stats.states_created == 1);
    CHECK(fw.engine.expire(fw.now + Millis{100'000'000}) == 1);
    CHECK(stats.states_current == 0);
    CHECK(stats.packets == 1);
  }
}
