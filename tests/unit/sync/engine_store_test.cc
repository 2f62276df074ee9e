// EngineStore: the protocol's seam onto the real engine. What applying a peer's records does to
// the engine's table, and what the protocol reads back for bulks and resyncs.
#include "daemon/sync/engine_store.h"

#include <catch2/catch.hpp>
#include <chrono>

using namespace pairwall;
using namespace pairwall::sync;
using engine::StateRecord;
using engine::TcpState;

namespace {

StateRecord syn_state(uint64_t counter) {
  StateRecord r;
  r.kind = StateRecord::Kind::Insert;
  r.id = {1, counter};
  r.stack_key.family = engine::Family::V4;
  r.stack_key.proto = 6;
  r.stack_key.addr[0] = engine::IpAddress::v4(0x0a580102);
  r.stack_key.addr[1] = engine::IpAddress::v4(0x0a580202);
  r.stack_key.port[0] = static_cast<uint16_t>(40000 + counter);
  r.stack_key.port[1] = 9000;
  r.wire_key = r.stack_key;
  // As pf leaves a state after the SYN: the responder has sent nothing, its seqhi a placeholder.
  r.src = {1001, 1002, 64240, 0x87, static_cast<uint8_t>(TcpState::SynSent), 1460};
  r.dst = {0, 1, 0, 0, static_cast<uint8_t>(TcpState::Closed), 0};
  r.timeout = engine::TimeoutClass::TcpFirst;
  r.expires_in = engine::Millis{30'000};
  return r;
}

const Micros kNow{std::chrono::duration_cast<Micros>(std::chrono::hours(1))};

}  // namespace

TEST_CASE("a peer's insert, update and delete reach the engine's table", "[sync][engine_store]") {
  engine::Engine e;
  EngineStore store(e);
  const auto ins = syn_state(1);
  CHECK(store.apply(ins, kNow) == ApplyResult::Applied);
  {
    auto h = e.states().find_by_id(ins.id);
    REQUIRE(h);
    CHECK(h->peer[0] == ins.src);
    CHECK((h->flags & engine::stateflag::kFromPeer) != 0);
  }

  // The handshake completes: the responder's ISN is more than 2^31 from the placeholder.
  auto upd = ins;
  upd.kind = StateRecord::Kind::Update;
  upd.src = {1001, 0xf0010000, 64240, 0x87, static_cast<uint8_t>(TcpState::Established), 1460};
  upd.dst = {0xf0000001, 1001 + 65535, 65160, 0x87, static_cast<uint8_t>(TcpState::Established), 1460};
  CHECK(store.apply(upd, kNow) == ApplyResult::Applied);
  {
    auto h = e.states().find_by_id(ins.id);
    REQUIRE(h);
    CHECK(h->peer[0] == upd.src);
    CHECK(h->peer[1] == upd.dst);
  }

  // An older update does not move anything back.
  auto old = upd;
  old.src.seqlo = 900;
  old.dst.seqlo = 0xf0000000;
  store.apply(old, kNow);
  {
    auto h = e.states().find_by_id(ins.id);
    CHECK(h->peer[0].seqlo == 1001);
    CHECK(h->peer[1].seqlo == 0xf0000001);
  }

  // What a bulk or a resync sends of it.
  StateRecord cur;
  REQUIRE(store.current(ins.id, kNow, cur));
  CHECK(cur.kind == StateRecord::Kind::Insert);
  CHECK(cur.stack_key == ins.stack_key);
  CHECK(cur.dst == upd.dst);
  std::vector<engine::StateId> ids;
  store.collect_ids(ids);
  CHECK(ids == std::vector<engine::StateId>{ins.id});

  StateRecord del;
  del.kind = StateRecord::Kind::Delete;
  del.id = ins.id;
  CHECK(store.apply(del, kNow) == ApplyResult::Applied);
  CHECK_FALSE(store.current(ins.id, kNow, cur));
  CHECK(store.apply(del, kNow) == ApplyResult::Unknown);
  CHECK(store.apply(upd, kNow) == ApplyResult::Unknown);
}

TEST_CASE("an update older than what the table holds is stale, and shortens nothing",
          "[sync][engine_store]") {
  engine::Engine e;
  EngineStore store(e);
  // A UDP flow both ends have sent on: udp.multiple (60 s).
  auto ins = syn_state(1);
  ins.stack_key.proto = 17;
  ins.wire_key = ins.stack_key;
  ins.src = {0, 0, 0, 0, static_cast<uint8_t>(engine::FlowState::Multiple), 0};
  ins.dst = ins.src;
  ins.timeout = engine::TimeoutClass::UdpMultiple;
  ins.expires_in = engine::Millis{60'000};
  REQUIRE(store.apply(ins, kNow) == ApplyResult::Applied);

  // The creator's update from before the reply, held up behind it: one end, udp.single, 10 s left.
  auto old = ins;
  old.kind = StateRecord::Kind::Update;
  old.dst.state = static_cast<uint8_t>(engine::FlowState::NoTraffic);
  old.src.state = static_cast<uint8_t>(engine::FlowState::Single);
  old.timeout = engine::TimeoutClass::UdpSingle;
  old.expires_in = engine::Millis{10'000};
  CHECK(store.apply(old, kNow) == ApplyResult::Stale);
  {
    auto h = e.states().find_by_id(ins.id);
    REQUIRE(h);
    CHECK(h->timeout == engine::TimeoutClass::UdpMultiple);
    CHECK(h->peer[1].state == static_cast<uint8_t>(engine::FlowState::Multiple));
  }
  // Still there when udp.single (30 s) would have ended it.
  e.expire(engine_time(kNow) + engine::Millis{40'000});
  CHECK(e.states().find_by_id(ins.id));

  // The same update later says the flow lives on: that is news, not stale.
  auto fresh = ins;
  fresh.kind = StateRecord::Kind::Update;
  CHECK(store.apply(fresh, kNow + Micros{5'000'000}) == ApplyResult::Applied);
}

TEST_CASE("the same connection under another id is not a failure", "[sync][engine_store]") {
  engine::Engine e;
  EngineStore store(e);
  CHECK(store.apply(syn_state(1), kNow) == ApplyResult::Applied);
  auto twin = syn_state(1);
  twin.id = {2, 77};  // both nodes saw the first packet
  CHECK(store.apply(twin, kNow) == ApplyResult::Stale);
  CHECK(e.states().size() == 1);
}

// A full table fails only what it has no room for: a state it holds already, sent again by a bulk
// or a resync, or held under the other node's id, is stale there as it is in a table with room.
TEST_CASE("a full table fails the states it has no room for, not those it holds", "[sync][engine_store]") {
  engine::Engine e;
  e.states().set_limit(1);
  EngineStore store(e);
  CHECK(store.apply(syn_state(1), kNow) == ApplyResult::Applied);
  REQUIRE(e.states().size() == e.states().limit());
  CHECK(store.apply(syn_state(1), kNow) == ApplyResult::Stale);
  auto twin = syn_state(1);
  twin.id = {2, 77};  // both nodes saw the first packet
  CHECK(store.apply(twin, kNow) == ApplyResult::Stale);
  auto reply_side = twin;  // the same connection, named from its other end
  reply_side.stack_key = twin.stack_key.reversed();
  reply_side.wire_key = reply_side.stack_key;
  std::swap(reply_side.src, reply_side.dst);
  CHECK(store.apply(reply_side, kNow) == ApplyResult::Stale);
  CHECK(store.apply(syn_state(2), kNow) == ApplyResult::Failed);
  CHECK(e.states().size() == 1);
}

TEST_CASE("every state stays findable by id as the table grows past its initial size",
          "[sync][engine_store]") {
  engine::Engine e;
  e.states().set_limit(1'000'000);  // as a rule set with `set limit states` does after construction
  EngineStore store(e);
  constexpr uint64_t kStates = 60'000;
  for (uint64_t i = 1; i <= kStates; ++i) {
    auto r = syn_state(i);
    r.stack_key.addr[0] = engine::IpAddress::v4(0x0a000000u + static_cast<uint32_t>(i));
    r.wire_key = r.stack_key;
    REQUIRE(store.apply(r, kNow) == ApplyResult::Applied);
  }
  StateRecord cur;
  uint64_t found = 0;
  for (uint64_t i = 1; i <= kStates; ++i) found += store.current({1, i}, kNow, cur) ? 1 : 0;
  CHECK(found == kStates);
  std::vector<engine::StateId> ids;
  store.collect_ids(ids);
  CHECK(ids.size() == kStates);
}

TEST_CASE("an update that no state of its entry's protocol can hold leaves the entry alone",
          "[sync][engine_store]") {
  engine::Engine e;
  EngineStore store(e);
  auto udp = syn_state(1);
  udp.stack_key.proto = udp.wire_key.proto = 17;
  udp.src = {0, 0, 0, 0, static_cast<uint8_t>(engine::FlowState::Single), 0};
  udp.dst = {0, 0, 0, 0, static_cast<uint8_t>(engine::FlowState::NoTraffic), 0};
  udp.timeout = engine::TimeoutClass::UdpFirst;
  REQUIRE(store.apply(udp, kNow) == ApplyResult::Applied);

  auto answered = udp;
  answered.kind = StateRecord::Kind::Update;
  answered.src.state = answered.dst.state = static_cast<uint8_t>(engine::FlowState::Multiple);
  answered.timeout = engine::TimeoutClass::UdpMultiple;
  CHECK(store.apply(answered, kNow) == ApplyResult::Applied);

  // What an update says of a TCP state, sent for the UDP state's id.
  auto tcp_like = answered;
  tcp_like.src.state = tcp_like.dst.state = static_cast<uint8_t>(TcpState::TimeWait);
  tcp_like.timeout = engine::TimeoutClass::TcpEstablished;
  CHECK(store.apply(tcp_like, kNow) == ApplyResult::Invalid);
  auto h = e.states().find_by_id(udp.id);
  REQUIRE(h);
  CHECK(h->peer[0].state == static_cast<uint8_t>(engine::FlowState::Multiple));
  CHECK(h->peer[1].state == static_cast<uint8_t>(engine::FlowState::Multiple));
  CHECK(h->timeout == engine::TimeoutClass::UdpMultiple);
}

TEST_CASE("an insert of an id the table holds under other keys is another connection: not merged",
          "[sync][engine_store]") {
  engine::Engine e;
  EngineStore store(e);
  const auto first = syn_state(1);
  REQUIRE(store.apply(first, kNow) == ApplyResult::Applied);
  // The same id again, as a resent insert or a bulk's: merged as ever.
  CHECK(store.apply(first, kNow) != ApplyResult::Invalid);

  auto other = syn_state(1);
  other.stack_key.port[0] = 50123;
  other.wire_key = other.stack_key;
  other.src = {0x70000000, 0x70010000, 65535, 0x87, static_cast<uint8_t>(TcpState::Established), 1460};
  other.dst = {0x80000000, 0x80010000, 65535, 0x87, static_cast<uint8_t>(TcpState::Established), 1460};
  other.timeout = engine::TimeoutClass::TcpEstablished;
  CHECK(store.apply(other, kNow) == ApplyResult::Invalid);
  auto h = e.states().find_by_id(first.id);
  REQUIRE(h);
  CHECK(h->key(0) == first.stack_key);
  CHECK(h->peer[0] == first.src);
  CHECK(h->peer[1] == first.dst);
}

TEST_CASE("a peer's clear removes the states that peer created, not this node's",
          "[sync][engine_store][clear]") {
  engine::EngineConfig config;
  config.node_id = 2;
  engine::Engine e(config);
  EngineStore store(e);
  // This node's own connection (as a bulk from the peer would give its copy back) and two of the peer's.
  auto own = syn_state(1);
  own.id = {2, 5};
  REQUIRE(store.apply(own, kNow) == ApplyResult::Applied);
  REQUIRE(store.apply(syn_state(2), kNow) == ApplyResult::Applied);
  REQUIRE(store.apply(syn_state(3), kNow) == ApplyResult::Applied);

  StateRecord clear;
  clear.kind = StateRecord::Kind::Clear;
  clear.id.creator = 1;
  CHECK(store.apply(clear, kNow) == ApplyResult::Applied);
  CHECK(e.states().size() == 1);
  CHECK(e.states().find_by_id(own.id));

  // A clear that names no node is a whole table's.
  REQUIRE(store.apply(syn_state(4), kNow) == ApplyResult::Applied);
  clear.id.creator = 0;
  CHECK(store.apply(clear, kNow) == ApplyResult::Applied);
  CHECK(e.states().size() == 0);
}

TEST_CASE("a flush tells the peer which node's states to remove", "[sync][engine_store][clear]") {
  engine::EngineConfig config;
  config.node_id = 2;
  engine::Engine e(config);
  e.flush_states();
  StateRecord sent;
  REQUIRE(e.control_events().pop(sent));
  CHECK(sent.kind == StateRecord::Kind::Clear);
  CHECK(sent.id.creator == 2);
}
