// Batching policy: coalescing of pending records per state, and what is urgent.
#include "daemon/sync/pending.h"

#include <catch2/catch.hpp>

#include "harness.h"

using namespace pairwall::sync;
using pairwall::engine::StateRecord;
using pairwall::engine::TcpState;
using Kind = StateRecord::Kind;

namespace {

StateRecord update_of(StateRecord r, uint32_t seqlo, TcpState src_state, TcpState dst_state) {
  r.kind = Kind::Update;
  r.src.seqlo = seqlo;
  r.src.state = static_cast<uint8_t>(src_state);
  r.dst.state = static_cast<uint8_t>(dst_state);
  return r;
}

StateRecord delete_of(const StateRecord& r) {
  StateRecord d;
  d.kind = Kind::Delete;
  d.id = r.id;
  return d;
}

}  // namespace

TEST_CASE("an insert is urgent, and updates fold into it", "[sync][pending]") {
  PendingRecords p;
  const auto ins = test::make_insert(1, 1);
  CHECK(p.add(ins, Micros{10}));
  CHECK(p.urgent());
  p.add(update_of(ins, 5000, TcpState::SynSent, TcpState::Listen), Micros{20});
  CHECK(p.size() == 1);
  CHECK(p.coalesced() == 1);
  CHECK(p.front().kind == Kind::Insert);
  CHECK(p.front().src.seqlo == 5000);  // newest tracking, still a whole state
  CHECK(p.front().stack_key == ins.stack_key);
  CHECK(p.oldest() == Micros{10});

  // An update also carries what a modulated, synproxy or scrubbed state learned since its insert:
  // offsets, how far the handshakes are, the highest TTLs.
  auto spliced = update_of(ins, 6000, TcpState::Established, TcpState::Established);
  spliced.seqdiff = {0x11111111, 0x22222222};
  spliced.proxy = pairwall::engine::Proxy::Spliced;
  spliced.proxy_isn = {0x33333333, 0x44444444};
  spliced.scrub = {pairwall::engine::TcpScrub{0x55555555, 64}, pairwall::engine::TcpScrub{0x66666666, 57}};
  p.add(spliced, Micros{30});
  CHECK(p.size() == 1);
  CHECK(p.front().kind == Kind::Insert);
  CHECK(p.front().seqdiff == spliced.seqdiff);
  CHECK(p.front().proxy == pairwall::engine::Proxy::Spliced);
  CHECK(p.front().proxy_isn == spliced.proxy_isn);
  CHECK(p.front().scrub == spliced.scrub);
}

TEST_CASE("updates of one state coalesce into the newest", "[sync][pending]") {
  PendingRecords p;
  auto base = test::make_insert(1, 7);
  base.src.state = base.dst.state = static_cast<uint8_t>(TcpState::Established);
  // The first update of an established state with no cached TCP states is treated as a change.
  p.add(update_of(base, 100, TcpState::Established, TcpState::Established), Micros{1});
  p.pop_front();
  CHECK(p.empty());
  CHECK_FALSE(p.add(update_of(base, 200, TcpState::Established, TcpState::Established), Micros{2}));
  CHECK_FALSE(p.add(update_of(base, 300, TcpState::Established, TcpState::Established), Micros{3}));
  CHECK_FALSE(p.urgent());
  CHECK(p.size() == 1);
  CHECK(p.front().src.seqlo == 300);
  CHECK(p.oldest() == Micros{2});
}

TEST_CASE("a TCP state change is urgent, a window move is not", "[sync][pending]") {
  PendingRecords p;
  const auto ins = test::make_insert(2, 9);
  p.add(ins, Micros{0});
  p.pop_front();
  CHECK_FALSE(p.add(update_of(ins, 10, TcpState::SynSent, TcpState::Listen), Micros{1}));
  CHECK(p.add(update_of(ins, 11, TcpState::Established, TcpState::SynReceived), Micros{2}));
  p.pop_front();
  CHECK_FALSE(p.add(update_of(ins, 12, TcpState::Established, TcpState::SynReceived), Micros{3}));
  CHECK(p.add(update_of(ins, 13, TcpState::Established, TcpState::Established), Micros{4}));
  p.pop_front();
  CHECK(p.add(update_of(ins, 14, TcpState::FinWait1, TcpState::Established), Micros{5}));
}

TEST_CASE("a synproxy state's step is urgent like a TCP state change", "[sync][pending]") {
  PendingRecords p;
  auto ins = test::make_insert(2, 19);
  ins.proxy = pairwall::engine::Proxy::Initiator;
  p.add(ins, Micros{0});
  p.pop_front();
  // The client completed the handshake: the node sent the server its SYN. The TCP states stay.
  auto opened = update_of(ins, 20, TcpState::SynSent, TcpState::Listen);
  CHECK_FALSE(p.add(opened, Micros{1}));  // the states as the insert said
  p.pop_front();
  opened.proxy = pairwall::engine::Proxy::Responder;
  CHECK(p.add(opened, Micros{2}));
}

TEST_CASE("a delete replaces whatever is pending for the state", "[sync][pending]") {
  PendingRecords p;
  const auto a = test::make_insert(1, 1);
  const auto b = test::make_insert(1, 2);
  p.add(a, Micros{0});
  p.add(b, Micros{0});
  p.add(update_of(a, 1, TcpState::SynSent, TcpState::Listen), Micros{1});
  p.add(delete_of(a), Micros{2});
  REQUIRE(p.size() == 2);
  CHECK(p.front().kind == Kind::Delete);
  CHECK(p.front().id == a.id);
  // A late update after the delete does not bring the state back.
  p.add(update_of(a, 2, TcpState::SynSent, TcpState::Listen), Micros{3});
  CHECK(p.front().kind == Kind::Delete);
  p.pop_front();
  CHECK(p.front().id == b.id);
  p.pop_front();
  CHECK(p.empty());
  CHECK(p.estimated_bytes() == 0);
}

TEST_CASE("a clear drops everything pending before it", "[sync][pending]") {
  PendingRecords p;
  for (uint64_t i = 1; i <= 5; ++i) p.add(test::make_insert(1, i), Micros{0});
  StateRecord clear;
  clear.kind = Kind::Clear;
  clear.id.creator = 1;
  CHECK(p.add(clear, Micros{1}));
  CHECK(p.size() == 1);
  CHECK(p.front().kind == Kind::Clear);
  // After the clear, records queue normally again.
  p.add(test::make_insert(1, 6), Micros{2});
  CHECK(p.size() == 2);
  p.pop_front();
  CHECK(p.front().id.counter == 6);
}

TEST_CASE("a clear keeps what is pending for the states other nodes created", "[sync][pending]") {
  PendingRecords p;
  // This node killed a state its peer created, and changed another, then flushed its table: the
  // peer's clear removes this node's states only, so the delete and the update must still go.
  const auto theirs = test::make_insert(2, 7);
  const auto other = test::make_insert(2, 8);
  p.add(test::make_insert(1, 1), Micros{0});
  p.add(delete_of(theirs), Micros{1});
  p.add(update_of(other, 500, TcpState::Established, TcpState::Established), Micros{2});
  p.add(update_of(test::make_insert(1, 2), 9, TcpState::Established, TcpState::Established), Micros{3});
  StateRecord clear;
  clear.kind = Kind::Clear;
  clear.id.creator = 1;
  CHECK(p.add(clear, Micros{4}));
  REQUIRE(p.size() == 3);
  CHECK(p.front().kind == Kind::Delete);
  CHECK(p.front().id == theirs.id);
  p.pop_front();
  CHECK(p.front().kind == Kind::Update);
  CHECK(p.front().id == other.id);
  p.pop_front();
  CHECK(p.front().kind == Kind::Clear);
  p.pop_front();
  CHECK(p.empty());
  CHECK(p.estimated_bytes() == 0);
  // They still coalesce as before.
  p.add(delete_of(theirs), Micros{5});
  p.add(update_of(theirs, 1, TcpState::Established, TcpState::Established), Micros{6});
  CHECK(p.size() == 1);
  CHECK(p.front().kind == Kind::Delete);
}

TEST_CASE("estimated bytes grow with the pending records", "[sync][pending]") {
  PendingRecords p;
  std::size_t last = 0;
  for (uint64_t i = 1; i <= 20; ++i) {
    p.add(test::make_insert(1, i), Micros{0});
    CHECK(p.estimated_bytes() > last);
    last = p.estimated_bytes();
  }
  CHECK(last >= 20 * 60);
  p.clear();
  CHECK(p.empty());
  CHECK(p.estimated_bytes() == 0);
}
