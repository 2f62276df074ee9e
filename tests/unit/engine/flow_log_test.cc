// pflow's flows: what a state whose rule says (pflow) leaves in the engine's FlowLog as it goes,
// whichever way it goes, and what other states leave (nothing).
#include "daemon/engine/flow_log.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/engine/engine.h"
#include "tests/unit/engine/firewall.h"
#include "tests/unit/support/packet_builder.h"

using namespace pairwall::engine;
using pairwall::test::Bytes;
using pairwall::test::Firewall;
using pairwall::test::PacketBuilder;

namespace {

constexpr const char* kClient = "10.1.0.10";
constexpr const char* kServer = "192.0.2.80";

Bytes udp(const char* src, uint16_t sport, const char* dst, uint16_t dport, std::size_t payload) {
  return PacketBuilder().ipv4(src, dst).udp(sport, dport).payload(payload).build();
}

Bytes tcp(const char* src, uint16_t sport, const char* dst, uint16_t dport, uint8_t flags, uint32_t seq,
          uint32_t ack) {
  return PacketBuilder().ipv4(src, dst).tcp(sport, dport).flags(flags).seq(seq).ack(ack).window(512).build();
}

IpAddress address(const char* text) {
  const std::optional<IpAddress> a = parse_address(text, nullptr);
  REQUIRE(a);
  return *a;
}

std::vector<FlowRecord> taken(Firewall& fw) {
  std::vector<FlowRecord> out;
  fw.engine.flows().take(out);
  return out;
}

// A UDP exchange through fw: two datagrams out (28 + 100 and 28 + 10 bytes), one back (28 + 50),
// a second apart each.
void udp_exchange(Firewall& fw) {
  REQUIRE(fw.out(udp(kClient, 40000, kServer, 53, 100)).action == Verdict::Action::Accept);
  fw.now += Millis{1'000};
  REQUIRE(fw.out(udp(kClient, 40000, kServer, 53, 10)).reason == Reason::State);
  fw.now += Millis{1'000};
  REQUIRE(fw.in(udp(kServer, 53, kClient, 40000, 50)).reason == Reason::State);
}

constexpr const char* kPflowRules = R"(
set timeout { udp.first 60, udp.single 60, udp.multiple 60, tcp.closed 10, tcp.finwait 10, tcp.closing 10 }
block all
pass in on lan0 proto { tcp udp } keep state (pflow)
pass out on wan0 all
)";

}  // namespace

TEST_CASE("a (pflow) state leaves its flow when it expires: both directions' counts and times",
          "[engine][pflow]") {
  Firewall fw(kPflowRules);
  const Millis start = fw.now;
  udp_exchange(fw);
  const Millis last = fw.now;
  CHECK(taken(fw).empty());  // nothing while the state lives
  REQUIRE(fw.engine.expire(last + Millis{60'000}) == 1);
  const std::vector<FlowRecord> flows = taken(fw);
  REQUIRE(flows.size() == 1);
  const FlowRecord& f = flows[0];
  CHECK(f.stack.proto == 17);
  CHECK(f.stack.addr[0] == address(kClient));
  CHECK(f.stack.addr[1] == address(kServer));
  CHECK(f.stack.port[0] == 40000);
  CHECK(f.stack.port[1] == 53);
  CHECK(f.wire == f.stack);
  CHECK(f.packets[0] == 2);
  CHECK(f.packets[1] == 1);
  CHECK(f.bytes[0] == 28 + 100 + 28 + 10);
  CHECK(f.bytes[1] == 28 + 50);
  CHECK(f.created == start);
  CHECK(f.last_seen == last);
  CHECK(f.end == FlowEnd::IdleTimeout);
  CHECK(fw.engine.flows().recorded() == 1);
}

TEST_CASE("a closed TCP connection's flow ends as closed, a killed one's as forced", "[engine][pflow]") {
  Firewall fw(kPflowRules);
  const auto open = [&](uint16_t port) {
    REQUIRE(fw.out(tcp(kClient, port, kServer, 80, tcpflag::kSyn, 1000, 0)).action ==
            Verdict::Action::Accept);
    REQUIRE(fw.in(tcp(kServer, 80, kClient, port, tcpflag::kSyn | tcpflag::kAck, 9000, 1001)).reason ==
            Reason::State);
    REQUIRE(fw.out(tcp(kClient, port, kServer, 80, tcpflag::kAck, 1001, 9001)).reason == Reason::State);
  };
  open(41000);
  REQUIRE(fw.out(tcp(kClient, 41000, kServer, 80, tcpflag::kFin | tcpflag::kAck, 1001, 9001)).reason ==
          Reason::State);
  REQUIRE(fw.in(tcp(kServer, 80, kClient, 41000, tcpflag::kFin | tcpflag::kAck, 9001, 1002)).reason ==
          Reason::State);
  REQUIRE(fw.out(tcp(kClient, 41000, kServer, 80, tcpflag::kAck, 1002, 9002)).reason == Reason::State);
  open(41001);
  REQUIRE(fw.engine.expire(fw.now + Millis{10'000}) == 1);  // the closed one
  std::vector<FlowRecord> flows = taken(fw);
  REQUIRE(flows.size() == 1);
  CHECK(flows[0].stack.port[0] == 41000);
  CHECK(flows[0].end == FlowEnd::EndOfFlow);
  CHECK(flows[0].packets[0] == 4);
  CHECK(flows[0].packets[1] == 2);

  REQUIRE(fw.engine.kill_states([](const StateEntry&) { return true; }) == 1);
  flows = taken(fw);
  REQUIRE(flows.size() == 1);
  CHECK(flows[0].stack.port[0] == 41001);
  CHECK(flows[0].end == FlowEnd::ForcedEnd);
}

TEST_CASE("only states whose rule says pflow leave flows; set state-defaults pflow says it for all",
          "[engine][pflow]") {
  SECTION("a rule without it") {
    Firewall fw("block all\npass in on lan0 proto udp keep state\npass out on wan0 all\n");
    udp_exchange(fw);
    REQUIRE(fw.engine.flush_states() == 1);
    CHECK(taken(fw).empty());
    CHECK(fw.engine.flows().recorded() == 0);
  }
  SECTION("state-defaults") {
    Firewall fw("set state-defaults pflow\nblock all\npass in on lan0 proto udp\npass out on wan0 all\n");
    CHECK(fw.engine.rules()->rule(fw.engine.rules()->size() - 1).pflow);
    udp_exchange(fw);
    REQUIRE(fw.engine.flush_states() == 1);
    const std::vector<FlowRecord> flows = taken(fw);
    REQUIRE(flows.size() == 1);
    CHECK(flows[0].end == FlowEnd::ForcedEnd);
  }
}

TEST_CASE("a translated flow carries the addresses it arrived with and those it left with",
          "[engine][pflow]") {
  Firewall fw(R"(
nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1
block all
pass in on lan0 proto udp keep state (pflow)
pass out on wan0 from 203.0.113.1 to any
)");
  REQUIRE(fw.out(udp(kClient, 40000, kServer, 53, 20)).action == Verdict::Action::Accept);
  REQUIRE(fw.engine.flush_states() == 1);
  const std::vector<FlowRecord> flows = taken(fw);
  REQUIRE(flows.size() == 1);
  CHECK(flows[0].stack.addr[0] == address(kClient));
  CHECK(flows[0].wire.addr[0] == address("203.0.113.1"));
  CHECK(flows[0].wire.addr[1] == address(kServer));
  CHECK(flows[0].wire.port[0] != 40000);
  CHECK(flows[0].packets[0] == 1);
  CHECK(flows[0].packets[1] == 0);
}

// Both nodes of a pair would report every connection: the one that never forwarded it leaves it out.
TEST_CASE("a state learned from the peer leaves a flow only once it passed packets here", "[engine][pflow]") {
  Firewall a(kPflowRules, 1);
  Firewall b(kPflowRules, 2);
  REQUIRE(a.out(udp(kClient, 40000, kServer, 53, 10)).action == Verdict::Action::Accept);
  REQUIRE(a.out(udp(kClient, 40001, kServer, 53, 10)).action == Verdict::Action::Accept);
  b.learn_from(a);
  REQUIRE(b.engine.states().size() == 2);
  // B takes one of them over: its packets now pass B.
  REQUIRE(b.in(udp(kServer, 53, kClient, 40001, 30)).reason == Reason::State);
  REQUIRE(b.engine.flush_states() == 2);
  const std::vector<FlowRecord> flows = taken(b);
  REQUIRE(flows.size() == 1);
  CHECK(flows[0].stack.port[0] == 40001);
  CHECK(flows[0].packets[0] == 0);
  CHECK(flows[0].packets[1] == 1);
}

// As pfsync carries a state's creation: a node that learns a state by a bulk transfer (after a
// restart), on a clock of its own, dates it from when the creator made it.
TEST_CASE("a state learned from the peer dates its flow from when the creator made it", "[engine][pflow]") {
  Firewall a(kPflowRules, 1);
  Firewall b(kPflowRules, 2);
  const Millis created_on_a = a.now;
  REQUIRE(a.out(udp(kClient, 40000, kServer, 53, 10)).action == Verdict::Action::Accept);
  a.now += Millis{45'000};
  REQUIRE(a.out(udp(kClient, 40000, kServer, 53, 10)).reason == Reason::State);
  a.now += Millis{5'000};
  std::vector<StateRecord> transfer;
  a.engine.snapshot(a.now, [&](const StateRecord& r) { transfer.push_back(r); });
  REQUIRE(transfer.size() == 1);
  CHECK(transfer[0].age == a.now - created_on_a);

  b.now = Millis{7'200'000};  // b has run two hours
  REQUIRE(b.engine.apply(transfer[0], b.now));
  b.now += Millis{1'000};
  REQUIRE(b.in(udp(kServer, 53, kClient, 40000, 30)).reason == Reason::State);
  REQUIRE(b.engine.flush_states() == 1);
  const std::vector<FlowRecord> flows = taken(b);
  REQUIRE(flows.size() == 1);
  CHECK(flows[0].created == Millis{7'200'000 - 50'000});
  CHECK(flows[0].last_seen == b.now);
}

TEST_CASE("a full flow log drops and counts what does not fit, and takes again once emptied",
          "[engine][pflow]") {
  EngineConfig config = pairwall::test::test_config();
  config.flow_log_capacity = 2;
  Firewall fw(kPflowRules, config);
  for (uint16_t port = 40000; port < 40003; ++port)
    REQUIRE(fw.out(udp(kClient, port, kServer, 53, 10)).action == Verdict::Action::Accept);
  REQUIRE(fw.engine.flush_states() == 3);
  CHECK(taken(fw).size() == 2);
  CHECK(fw.engine.flows().recorded() == 2);
  CHECK(fw.engine.flows().dropped() == 1);
  REQUIRE(fw.out(udp(kClient, 40010, kServer, 53, 10)).action == Verdict::Action::Accept);
  REQUIRE(fw.engine.flush_states() == 1);
  CHECK(taken(fw).size() == 1);
}

// Workers, the control thread and the sync thread remove states at once: every flow pushed is
// taken once or counted as dropped. (Run under the thread sanitizer by the test script.)
TEST_CASE("flows pushed from several threads while another takes them are each taken or counted once",
          "[engine][pflow]") {
  FlowLog log(64);
  constexpr int kThreads = 3;
  constexpr uint16_t kEach = 20'000;
  std::atomic<int> done{0};
  std::vector<std::thread> pushers;
  for (int t = 0; t < kThreads; ++t) {
    pushers.emplace_back([&, t] {
      FlowRecord r;
      r.stack.port[0] = static_cast<uint16_t>(t);
      for (uint16_t i = 0; i < kEach; ++i) {
        r.stack.port[1] = i;
        log.push(r);
      }
      done.fetch_add(1);
    });
  }
  std::vector<FlowRecord> batch;
  std::vector<uint16_t> last(kThreads, 0);
  bool ordered = true;
  uint64_t taken = 0;
  const auto take = [&] {
    log.take(batch);
    for (const FlowRecord& r : batch) {
      // One thread's flows come out in the order it pushed them.
      const uint16_t t = r.stack.port[0];
      ordered = ordered && (r.stack.port[1] >= last[t]);
      last[t] = r.stack.port[1];
    }
    taken += batch.size();
  };
  while (done.load() < kThreads) take();
  for (std::thread& p : pushers) p.join();
  take();
  CHECK(ordered);
  CHECK(taken == log.recorded());
  CHECK(log.recorded() + log.dropped() == uint64_t{kThreads} * kEach);
}
