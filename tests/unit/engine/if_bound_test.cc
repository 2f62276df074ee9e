// `if-bound` states (`set state-policy if-bound`, `keep state (if-bound)`): a state bound to the
// interface of a pass knows only the packets of its connection that cross it, as pf's
// per-interface states do; the others are dropped with their own reason. Crafted packets through
// the engine, and the binding carried to a sync peer.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "daemon/engine/engine.h"
#include "tests/unit/engine/firewall.h"
#include "tests/unit/support/packet_builder.h"

using namespace pairwall::engine;
using pairwall::test::Bytes;
using pairwall::test::Firewall;
using pairwall::test::PacketBuilder;

namespace {

const std::string kClient = "10.1.0.10";
const std::string kServer = "192.0.2.80";

Bytes client_udp() {
  return PacketBuilder().ipv4(kClient, kServer).udp(40000, 53).payload(20).build();
}
Bytes server_udp() {
  return PacketBuilder().ipv4(kServer, kClient).udp(53, 40000).payload(20).build();
}

// A firewall with a second interface on each side: lan1 beside lan0, wan1 beside wan0.
struct FourPorts : Firewall {
  explicit FourPorts(const std::string& rules, uint32_t node = 1) : Firewall(rules, node) {
    lan1 = engine.interfaces().intern("lan1");
    wan1 = engine.interfaces().intern("wan1");
  }
  Verdict forward(Bytes p, IfaceId in, IfaceId out) {
    return run(std::move(p), PacketMeta{Hook::Forward, in, out});
  }
  IfaceId lan1 = 0;
  IfaceId wan1 = 0;
};

}  // namespace

TEST_CASE("if-bound: a state knows its connection's packets on the interfaces it is bound to alone",
          "[engine][if-bound]") {
  enum Way { Client, Server };
  struct Move {
    Way from;
    const char* in;   // arrival interface
    const char* out;  // departure interface
  };
  struct Case {
    const char* rules;
    std::vector<std::pair<Move, Reason>> moves;  // after the client's first datagram, lan0 -> wan0
  };
  const Case cases[] = {
      // pf's default: the state floats, whatever interfaces its packets cross.
      {"pass all",
       {{{Client, "lan0", "wan0"}, Reason::State},
        {{Server, "wan0", "lan0"}, Reason::State},
        {{Client, "lan1", "wan0"}, Reason::State},
        {{Client, "lan0", "wan1"}, Reason::State},
        {{Server, "wan1", "lan1"}, Reason::State}}},
      {"set state-policy floating\npass all",
       {{{Client, "lan1", "wan1"}, Reason::State}, {{Server, "wan1", "lan1"}, Reason::State}}},
      // Both passes bound: in on lan0 and out on wan0, replies the other way round.
      {"set state-policy if-bound\npass all",
       {{{Client, "lan0", "wan0"}, Reason::State},
        {{Server, "wan0", "lan0"}, Reason::State},
        {{Client, "lan1", "wan0"}, Reason::StateInterface},
        {{Client, "lan0", "wan1"}, Reason::StateInterface},
        {{Server, "wan1", "lan0"}, Reason::StateInterface},
        {{Server, "wan0", "lan1"}, Reason::StateInterface},
        // The other side's interfaces, the wrong way round.
        {{Client, "wan0", "lan0"}, Reason::StateInterface},
        {{Server, "lan0", "wan0"}, Reason::StateInterface}}},
      {"pass all keep state (if-bound)",
       {{{Server, "wan0", "lan0"}, Reason::State}, {{Client, "lan1", "wan0"}, Reason::StateInterface}}},
      // A rule's own word outweighs the policy.
      {"set state-policy if-bound\npass all keep state (floating)",
       {{{Client, "lan1", "wan1"}, Reason::State}, {{Server, "wan1", "lan1"}, Reason::State}}},
      // Only the in pass's rule binds: the out pass floats.
      {"pass in all keep state (if-bound)\npass out all",
       {{{Client, "lan0", "wan1"}, Reason::State},
        {{Server, "wan1", "lan0"}, Reason::State},
        {{Client, "lan1", "wan0"}, Reason::StateInterface},
        {{Server, "wan0", "lan1"}, Reason::StateInterface}}},
      // Only the out pass's.
      {"set state-policy if-bound\npass in all keep state (floating)\npass out all",
       {{{Client, "lan1", "wan0"}, Reason::State},
        {{Server, "wan0", "lan1"}, Reason::State},
        {{Client, "lan0", "wan1"}, Reason::StateInterface},
        {{Server, "wan1", "lan0"}, Reason::StateInterface}}},
      // A pass whose rule keeps no state binds nothing.
      {"set state-policy if-bound\npass in all\npass out all no state",
       {{{Client, "lan0", "wan1"}, Reason::State}, {{Client, "lan1", "wan0"}, Reason::StateInterface}}},
  };
  for (const Case& c : cases) {
    INFO(c.rules);
    FourPorts fw(c.rules);
    const auto iface = [&](const char* name) { return *fw.engine.interfaces().find(name); };
    REQUIRE(fw.forward(client_udp(), fw.lan, fw.wan).reason == Reason::Match);
    uint64_t refused = 0;
    for (const auto& [move, reason] : c.moves) {
      INFO((move.from == Client ? "client's, in on " : "server's, in on ")
           << move.in << ", out on " << move.out);
      const Verdict v =
          fw.forward(move.from == Client ? client_udp() : server_udp(), iface(move.in), iface(move.out));
      CHECK(v.reason == reason);
      CHECK(v.action == (reason == Reason::State ? Verdict::Action::Accept : Verdict::Action::Drop));
      if (reason == Reason::StateInterface) ++refused;
    }
    CHECK(fw.worker.counters().get(Reason::StateInterface) == refused);
  }
}

TEST_CASE("if-bound: a local connection's state is bound to the one interface it crosses",
          "[engine][if-bound]") {
  FourPorts fw("set state-policy if-bound\npass all");
  const Bytes to_node = PacketBuilder().ipv4(kClient, "10.1.0.1").udp(40000, 53).payload(8).build();
  const Bytes from_node = PacketBuilder().ipv4("10.1.0.1", kClient).udp(53, 40000).payload(8).build();
  REQUIRE(fw.run(to_node, PacketMeta{Hook::Input, fw.lan, kNoIface}).reason == Reason::Match);
  CHECK(fw.run(from_node, PacketMeta{Hook::Output, kNoIface, fw.lan}).reason == Reason::State);
  CHECK(fw.run(to_node, PacketMeta{Hook::Input, fw.lan, kNoIface}).reason == Reason::State);
  CHECK(fw.run(from_node, PacketMeta{Hook::Output, kNoIface, fw.lan1}).reason == Reason::StateInterface);
  CHECK(fw.run(to_node, PacketMeta{Hook::Input, fw.lan1, kNoIface}).reason == Reason::StateInterface);

  // Opened by the node itself: bound to the interface it leaves by.
  const Bytes out_first = PacketBuilder().ipv4("10.1.0.1", kServer).udp(41000, 123).payload(8).build();
  const Bytes answer = PacketBuilder().ipv4(kServer, "10.1.0.1").udp(123, 41000).payload(8).build();
  REQUIRE(fw.run(out_first, PacketMeta{Hook::Output, kNoIface, fw.wan}).reason == Reason::Match);
  CHECK(fw.run(answer, PacketMeta{Hook::Input, fw.wan, kNoIface}).reason == Reason::State);
  CHECK(fw.run(answer, PacketMeta{Hook::Input, fw.wan1, kNoIface}).reason == Reason::StateInterface);
}

TEST_CASE("if-bound: an ICMP error belongs to its state on the interfaces the state is bound to",
          "[engine][if-bound][icmp]") {
  FourPorts fw("set state-policy if-bound\npass all");
  const Bytes first = client_udp();
  REQUIRE(fw.forward(first, fw.lan, fw.wan).reason == Reason::Match);
  // From beyond the server's side, back toward the client: in on wan0, out on lan0.
  const auto unreachable = [&] {
    return PacketBuilder().ipv4("198.51.100.1", kClient).icmp_error(3, 3, first).build();
  };
  CHECK(fw.forward(unreachable(), fw.wan, fw.lan).reason == Reason::State);
  CHECK(fw.forward(unreachable(), fw.wan1, fw.lan).reason == Reason::StateInterface);
  CHECK(fw.forward(unreachable(), fw.wan, fw.lan1).reason == Reason::StateInterface);
}

TEST_CASE("if-bound: the binding travels in the state's records and holds on the peer",
          "[engine][if-bound][sync]") {
  FourPorts a("set state-policy if-bound\npass in all\npass out all keep state (floating)", 1);
  FourPorts b("pass all", 2);
  REQUIRE(a.forward(client_udp(), a.lan, a.wan).reason == Reason::Match);
  const std::vector<StateRecord> records = a.drain();
  REQUIRE(records.size() == 1);
  CHECK(records[0].bound[0] == a.lan);
  CHECK(records[0].bound[1] == kNoIface);
  for (const StateRecord& r : records) REQUIRE(b.engine.apply(r, b.now));
  // Bound by a's rules, not b's: the in pass on lan0 alone.
  CHECK(b.forward(server_udp(), b.wan1, b.lan).reason == Reason::State);
  CHECK(b.forward(client_udp(), b.lan1, b.wan).reason == Reason::StateInterface);
  // And sent on as bound in b's own records (a bulk to a third node).
  std::vector<StateRecord> snapshot;
  b.engine.snapshot(b.now, [&](const StateRecord& r) { snapshot.push_back(r); });
  REQUIRE(snapshot.size() == 1);
  CHECK(snapshot[0].bound[0] == b.lan);
  CHECK(snapshot[0].bound[1] == kNoIface);
}

TEST_CASE("if-bound: a nat'd connection's replies, met before routing, arrive by the out pass's interface",
          "[engine][if-bound][nat]") {
  FourPorts fw(
      "set state-policy if-bound\n"
      "nat on wan0 inet from 10.1.0.0/16 to any -> 203.0.113.1\n"
      "pass all\n");
  REQUIRE(fw.forward(client_udp(), fw.lan, fw.wan).rewritten);
  const uint16_t port = pairwall::test::get16(fw.last_packet, 20);  // the nat source port
  const auto reply = [&] {
    return PacketBuilder().ipv4(kServer, "203.0.113.1").udp(53, port).payload(20).build();
  };
  CHECK(fw.run(reply(), PacketMeta{Hook::Prerouting, fw.wan, kNoIface}).reason == Reason::State);
  CHECK(fw.run(reply(), PacketMeta{Hook::Prerouting, fw.wan1, kNoIface}).reason == Reason::StateInterface);
  // The client's next datagram: in on lan0 still.
  CHECK(fw.forward(client_udp(), fw.lan, fw.wan).reason == Reason::State);
  CHECK(fw.forward(client_udp(), fw.lan1, fw.wan).reason == Reason::StateInterface);
}
