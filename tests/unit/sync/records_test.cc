// StateRecord <-> wire messages: round trips (IPv4, IPv6, NAT, UDP) and the validation that keeps
// out-of-range values from a peer out of the state table.
#include "daemon/sync/records.h"

#include <catch2/catch.hpp>

#include "harness.h"

using namespace pairwall::sync;
using pairwall::engine::StateRecord;

namespace {

void check_same(const StateRecord& a, const StateRecord& b) {
  CHECK(a.id == b.id);
  CHECK(a.stack_key == b.stack_key);
  CHECK(a.wire_key == b.wire_key);
  CHECK(a.src == b.src);
  CHECK(a.dst == b.dst);
  CHECK(a.timeout == b.timeout);
  CHECK(a.expires_in == b.expires_in);
  CHECK(a.age == b.age);
  CHECK(a.rule == b.rule);
  CHECK(a.flags == b.flags);
  CHECK(a.seqdiff == b.seqdiff);
  CHECK(a.proxy == b.proxy);
  CHECK(a.proxy_isn == b.proxy_isn);
  CHECK(a.scrub_tcp == b.scrub_tcp);
  CHECK(a.scrub == b.scrub);
  CHECK(a.rules_digest == b.rules_digest);
  CHECK(a.rule_index == b.rule_index);
  CHECK(a.translation_index == b.translation_index);
}

StateRecord round_trip_insert(const StateRecord& r) {
  wire::Insert m;
  encode_insert(r, 0, &m);
  wire::Insert parsed;
  REQUIRE(parsed.ParseFromString(m.SerializeAsString()));
  StateRecord out;
  REQUIRE(decode_insert(parsed, out));
  return out;
}

}  // namespace

TEST_CASE("inserts round trip", "[sync][records]") {
  SECTION("IPv4 TCP") {
    const auto r = test::make_insert(3, 123456789);
    const auto out = round_trip_insert(r);
    check_same(out, r);
    CHECK(out.kind == StateRecord::Kind::Insert);
  }
  SECTION("IPv6 TCP with window scale") {
    auto r = test::make_insert(4, 77, true);
    r.src.wscale = pairwall::engine::PeerTracking::kScaleOffered | 7;
    r.dst.wscale = pairwall::engine::PeerTracking::kScaleOffered | 14;
    check_same(round_trip_insert(r), r);
  }
  SECTION("NAT: both keys") {
    auto r = test::make_insert(1, 5);
    r.wire_key.addr[0] = pairwall::engine::IpAddress::v4(0xcb007101);
    r.wire_key.port[0] = 40000;
    r.flags = pairwall::engine::stateflag::kTranslated;
    check_same(round_trip_insert(r), r);
  }
  SECTION("modulate state: each end's offset") {
    auto r = test::make_insert(1, 7);
    r.flags = pairwall::engine::stateflag::kModulated;
    r.seqdiff = {0x9e3779b9, 0xfffffffe};
    check_same(round_trip_insert(r), r);
  }
  SECTION("synproxy state: the handshakes' progress and the node's initial sequence numbers") {
    auto r = test::make_insert(1, 8);
    r.flags = pairwall::engine::stateflag::kModulated;
    r.proxy = pairwall::engine::Proxy::Responder;
    r.proxy_isn = {0xdeadbeef, 0x00000001};
    check_same(round_trip_insert(r), r);
  }
  SECTION("scrub reassemble tcp: each end's timestamp offset and highest TTL") {
    auto r = test::make_insert(1, 10, true);
    r.scrub_tcp = true;
    r.scrub = {pairwall::engine::TcpScrub{0x9e3779b9, 255}, pairwall::engine::TcpScrub{0xfffffffe, 1}};
    check_same(round_trip_insert(r), r);
  }
  SECTION("the creating rule, by its place in a rule set of that digest") {
    auto r = test::make_insert(1, 9);
    r.rules_digest = 0x8000000000000001;
    r.rule_index = 12;
    check_same(round_trip_insert(r), r);
    // and its translation rules, on one pass or both (entry 0 included).
    r.translation_index = {StateRecord::kNoTranslation, 0};
    check_same(round_trip_insert(r), r);
    r.translation_index = {4, 7};
    check_same(round_trip_insert(r), r);
  }
  SECTION("the state's age, from a day to the largest taken") {
    auto r = test::make_insert(1, 11);
    r.age = pairwall::engine::Millis{86'400'000};
    check_same(round_trip_insert(r), r);
    r.age = pairwall::engine::Millis{int64_t{1} << 40};
    check_same(round_trip_insert(r), r);
  }
  SECTION("UDP with flow states") {
    auto r = test::make_insert(1, 6);
    r.stack_key.proto = r.wire_key.proto = 17;
    r.src = {0, 0, 0, 0, static_cast<uint8_t>(pairwall::engine::FlowState::Multiple), 0};
    r.dst = {0, 0, 0, 0, static_cast<uint8_t>(pairwall::engine::FlowState::Single), 0};
    r.timeout = pairwall::engine::TimeoutClass::UdpMultiple;
    check_same(round_trip_insert(r), r);
  }
}

TEST_CASE("an insert without translation sends one key", "[sync][records]") {
  const auto r = test::make_insert(1, 1);
  wire::Insert m;
  encode_insert(r, 0, &m);
  CHECK_FALSE(m.has_wire_key());
  CHECK(m.ByteSizeLong() < 90);  // a full IPv4 TCP state in under 90 bytes
}

TEST_CASE("updates and deletes round trip", "[sync][records]") {
  auto r = test::make_insert(2, 99);
  r.kind = StateRecord::Kind::Update;
  r.src.seqlo = 0xfffffff0;
  r.dst.state = static_cast<uint8_t>(pairwall::engine::TcpState::Established);
  r.seqdiff = {0x12345678, 0x87654321};  // a synproxy state's are first known in an update
  r.proxy = pairwall::engine::Proxy::Spliced;
  r.proxy_isn = {0x0badf00d, 0xfeedface};
  r.scrub = {pairwall::engine::TcpScrub{0x01020304, 64}, pairwall::engine::TcpScrub{0, 128}};
  wire::Update u;
  encode_update(r, &u);
  StateRecord out;
  REQUIRE(decode_update(u, out));
  CHECK(out.kind == StateRecord::Kind::Update);
  CHECK(out.id == r.id);
  CHECK(out.src == r.src);
  CHECK(out.dst == r.dst);
  CHECK(out.seqdiff == r.seqdiff);
  CHECK(out.proxy == r.proxy);
  CHECK(out.proxy_isn == r.proxy_isn);
  CHECK(out.scrub == r.scrub);
  CHECK(out.timeout == r.timeout);

  wire::Delete d;
  encode_delete(r.id, &d);
  REQUIRE(decode_delete(d, out));
  CHECK(out.kind == StateRecord::Kind::Delete);
  CHECK(out.id == r.id);
}

TEST_CASE("decoding rejects out-of-range fields", "[sync][records]") {
  const auto r = test::make_insert(1, 1);
  wire::Insert good;
  encode_insert(r, 0, &good);
  StateRecord out;
  REQUIRE(decode_insert(good, out));

  struct Case {
    const char* name;
    std::function<void(wire::Insert&)> spoil;
  };
  const std::vector<Case> cases = {
      {"family 5", [](wire::Insert& m) { m.mutable_stack_key()->set_family(5); }},
      {"IPv4 address of 5 bytes", [](wire::Insert& m) { m.mutable_stack_key()->set_addr0("12345"); }},
      {"IPv6 family with IPv4 addresses", [](wire::Insert& m) { m.mutable_stack_key()->set_family(6); }},
      {"port 65536", [](wire::Insert& m) { m.mutable_stack_key()->set_port1(65536); }},
      {"protocol 256", [](wire::Insert& m) { m.mutable_stack_key()->set_proto(256); }},
      {"TCP state 11", [](wire::Insert& m) { m.mutable_src()->set_state(11); }},
      {"window scale 15", [](wire::Insert& m) { m.mutable_dst()->set_wscale(0x80 | 15); }},
      {"stray scale bits", [](wire::Insert& m) { m.mutable_dst()->set_wscale(0x40); }},
      {"mss 70000", [](wire::Insert& m) { m.mutable_src()->set_mss(70000); }},
      {"timeout class past the end", [](wire::Insert& m) { m.set_timeout(99); }},
      {"flags past 8 bits", [](wire::Insert& m) { m.set_flags(0x100); }},
      {"synproxy phase past the splice", [](wire::Insert& m) { m.set_proxy(4); }},
      {"an age past 2^40 ms", [](wire::Insert& m) { m.set_age_ms((uint64_t{1} << 40) + 1); }},
      {"an age of 2^64 - 1 ms", [](wire::Insert& m) { m.set_age_ms(UINT64_MAX); }},
      {"scrub TTL 256", [](wire::Insert& m) { m.mutable_dst()->set_scrub_ttl(256); }},
      {"state counter 0", [](wire::Insert& m) { m.set_counter(0); }},
      // Node ids start at 1: a state of creator 0 would be no node's, left behind by the peer's
      // ClearStates and by the end of its full transfer, which remove the states the peer created.
      {"creator 0", [](wire::Insert& m) { m.set_creator(0); }},
      {"no key", [](wire::Insert& m) { m.clear_stack_key(); }},
      {"wire key of another family",
       [](wire::Insert& m) {
         auto* k = m.mutable_wire_key();
         *k = m.stack_key();
         k->set_family(6);
         k->set_addr0(std::string(16, 'a'));
         k->set_addr1(std::string(16, 'b'));
       }},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    wire::Insert m = good;
    c.spoil(m);
    CHECK_FALSE(decode_insert(m, out));
  }

  wire::Update u;
  encode_update(r, &u);
  u.set_timeout(1000);
  CHECK_FALSE(decode_update(u, out));
  encode_update(r, &u);
  u.set_proxy(4);
  CHECK_FALSE(decode_update(u, out));
  encode_update(r, &u);
  u.mutable_src()->set_scrub_ttl(300);
  CHECK_FALSE(decode_update(u, out));
  encode_update(r, &u);
  u.set_creator(0);
  CHECK_FALSE(decode_update(u, out));
  wire::Delete d;
  CHECK_FALSE(decode_delete(d, out));  // counter 0
  encode_delete(r.id, &d);
  d.set_creator(0);
  CHECK_FALSE(decode_delete(d, out));
}

TEST_CASE("decoding rejects what no state of the record's protocol can hold", "[sync][records]") {
  auto udp = test::make_insert(1, 2);
  udp.stack_key.proto = udp.wire_key.proto = 17;
  udp.src = {0, 0, 0, 0, static_cast<uint8_t>(pairwall::engine::FlowState::Single), 0};
  udp.dst = {0, 0, 0, 0, static_cast<uint8_t>(pairwall::engine::FlowState::NoTraffic), 0};
  udp.timeout = pairwall::engine::TimeoutClass::UdpFirst;
  auto icmp6 = test::make_insert(1, 3, true);
  icmp6.stack_key.proto = icmp6.wire_key.proto = 58;
  icmp6.stack_key.port[0] = icmp6.wire_key.port[0] = 0x1234;  // echo identifier and type
  icmp6.stack_key.port[1] = icmp6.wire_key.port[1] = 128;
  icmp6.src = udp.src;
  icmp6.dst = udp.dst;
  icmp6.timeout = pairwall::engine::TimeoutClass::IcmpFirst;
  StateRecord out;
  for (const auto* r : {&udp, &icmp6}) {
    wire::Insert m;
    encode_insert(*r, 0, &m);
    REQUIRE(decode_insert(m, out));
  }

  struct Case {
    const char* name;
    const StateRecord* base;
    std::function<void(StateRecord&)> spoil;
  };
  using pairwall::engine::TimeoutClass;
  const std::vector<Case> cases = {
      {"ICMPv6 over IPv4", &udp,
       [](StateRecord& r) {
         r.stack_key.proto = r.wire_key.proto = 58;
         r.timeout = TimeoutClass::IcmpFirst;
       }},
      {"ICMP over IPv6", &icmp6, [](StateRecord& r) { r.stack_key.proto = r.wire_key.proto = 1; }},
      {"UDP state with TCP's timeout", &udp,
       [](StateRecord& r) { r.timeout = TimeoutClass::TcpEstablished; }},
      {"ICMPv6 state with UDP's timeout", &icmp6,
       [](StateRecord& r) { r.timeout = TimeoutClass::UdpMultiple; }},
      {"TCP state with another protocol's timeout", nullptr,
       [](StateRecord& r) { r.timeout = TimeoutClass::OtherMultiple; }},
      {"UDP state in a synproxy handshake", &udp,
       [](StateRecord& r) { r.proxy = pairwall::engine::Proxy::Spliced; }},
      {"UDP state with scrub reassemble tcp", &udp, [](StateRecord& r) { r.scrub_tcp = true; }},
  };
  const auto tcp = test::make_insert(1, 4);
  for (const auto& c : cases) {
    INFO(c.name);
    StateRecord r = c.base != nullptr ? *c.base : tcp;
    c.spoil(r);
    wire::Insert m;
    encode_insert(r, 0, &m);
    CHECK_FALSE(decode_insert(m, out));
  }
}

TEST_CASE("an update fits a state of its protocol or not", "[sync][records]") {
  auto r = test::make_insert(1, 5);
  r.kind = StateRecord::Kind::Update;
  r.src.state = static_cast<uint8_t>(pairwall::engine::TcpState::Established);
  r.dst.state = static_cast<uint8_t>(pairwall::engine::TcpState::Established);
  r.timeout = pairwall::engine::TimeoutClass::TcpEstablished;
  CHECK(fits_protocol(6, r));
  CHECK_FALSE(fits_protocol(17, r));
  r.src.state = r.dst.state = static_cast<uint8_t>(pairwall::engine::FlowState::Multiple);
  r.timeout = pairwall::engine::TimeoutClass::UdpMultiple;
  CHECK(fits_protocol(17, r));
  CHECK_FALSE(fits_protocol(1, r));
  r.timeout = pairwall::engine::TimeoutClass::OtherMultiple;
  CHECK(fits_protocol(47, r));
}

TEST_CASE("an if-bound state's interfaces travel by name, and are numbered by the receiver's own",
          "[sync][records]") {
  pairwall::engine::InterfaceRegistry sender;
  pairwall::engine::InterfaceRegistry receiver;
  const auto sent_in = sender.intern("lan0");
  const auto sent_out = sender.intern("wan0");
  // The receiver numbers its interfaces otherwise, and has not met lan0 yet.
  receiver.intern("sync0");
  receiver.intern("mgmt0");
  const auto receiver_wan = receiver.intern("wan0");
  REQUIRE(receiver_wan != sent_out);

  auto r = test::make_insert(2, 9);
  r.bound = {sent_in, sent_out};
  wire::Insert m;
  encode_insert(r, 0, &m, &sender);
  CHECK(m.bound_in() == "lan0");
  CHECK(m.bound_out() == "wan0");
  StateRecord out;
  REQUIRE(decode_insert(m, out, &receiver));
  CHECK(out.bound[0] == receiver.find("lan0"));
  CHECK(out.bound[1] == receiver_wan);
  CHECK(out.bound[0] != sent_in);

  SECTION("a pass that floats names nothing") {
    r.bound = {pairwall::engine::kNoIface, sent_out};
    m.Clear();
    encode_insert(r, 0, &m, &sender);
    CHECK(m.bound_in().empty());
    REQUIRE(decode_insert(m, out, &receiver));
    CHECK(out.bound[0] == pairwall::engine::kNoIface);
    CHECK(out.bound[1] == receiver_wan);
  }
  SECTION("a name that is not UTF-8, as Linux allows, goes through the wire and back") {
    const std::string latin1 = "lan\xe9";  // "lané" in ISO 8859-1
    r.bound = {sender.intern(latin1), sent_out};
    m.Clear();
    encode_insert(r, 0, &m, &sender);
    wire::Batch batch;
    *batch.add_messages()->mutable_insert() = m;
    wire::Batch parsed;
    REQUIRE(parsed.ParseFromString(batch.SerializeAsString()));
    REQUIRE(decode_insert(parsed.messages(0).insert(), out, &receiver));
    CHECK(out.bound[0] == receiver.find(latin1));
  }
  SECTION("refused: a name no interface can have, a store that keeps no bound states, no room for the name") {
    wire::Insert bad = m;
    bad.set_bound_in("no/such");
    CHECK_FALSE(decode_insert(bad, out, &receiver));
    bad.set_bound_in(std::string(16, 'x'));
    CHECK_FALSE(decode_insert(bad, out, &receiver));
    CHECK_FALSE(decode_insert(m, out, nullptr));
    pairwall::engine::InterfaceRegistry full;
    for (std::size_t i = 1; i < kMaxInterfaceNames; ++i) full.intern("if" + std::to_string(i));
    CHECK_FALSE(decode_insert(m, out, &full));
    full.intern("lan0");  // beyond the limit by hand: a name the node knows is taken still
    CHECK(full.find("wan0") == std::nullopt);
    bad = m;
    bad.clear_bound_out();
    REQUIRE(decode_insert(bad, out, &full));
    CHECK(out.bound[0] == full.find("lan0"));
  }
}
