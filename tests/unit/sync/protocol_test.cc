// Two protocol cores joined by a simulated link, time driven by hand: delivery, batching,
// reliability under loss, reordering and duplication, resyncs, bulk transfers, liveness, and
// every datagram a node must refuse.
#include <catch2/catch.hpp>
#include <limits>
#include <optional>
#include <random>
#include <set>

#include "daemon/sync/records.h"
#include "harness.h"

using namespace pairwall::sync;
using namespace pairwall::sync::test;
using pairwall::engine::StateRecord;
using pairwall::engine::TcpState;
using Kind = StateRecord::Kind;

namespace {

constexpr Micros ms(int64_t n) {
  return Micros{n * 1000};
}

uint64_t drops(const SyncProtocol& p, DropReason r) {
  return p.counters().drops[static_cast<std::size_t>(r)];
}

StateRecord update_of(StateRecord r, uint32_t advance, TcpState s = TcpState::Established) {
  r.kind = Kind::Update;
  r.src.seqlo += advance;
  r.src.seqhi += advance;
  r.src.state = static_cast<uint8_t>(s);
  r.dst.state = static_cast<uint8_t>(s);
  return r;
}

StateRecord delete_of(const StateRecord& r) {
  StateRecord d;
  d.kind = Kind::Delete;
  d.id = r.id;
  return d;
}

// A pair that has exchanged its (empty) bulks and is idle.
void settle(Pair& p) {
  p.start();
  p.run(ms(300));
  REQUIRE(p.a->bulk_done());
  REQUIRE(p.b->bulk_done());
  REQUIRE(p.a->peer_state(p.now) == PeerState::Up);
  REQUIRE(p.b->peer_state(p.now) == PeerState::Up);
}

// Random churn on one node: creates, TCP state changes, window moves, deletes; only of states the
// node created (a connection passes through one firewall at a time).
struct Churn {
  uint32_t node;
  std::mt19937_64 rng;
  uint64_t next = 1;
  std::vector<StateRecord> live;
  uint64_t created = 0;

  Churn(uint32_t n, uint64_t seed) : node(n), rng(seed) {}

  void step(Pair& p) {
    const int op = std::uniform_int_distribution<int>(0, 9)(rng);
    const bool on_a = node == 1;
    if (op < 4 || live.size() < 10) {
      auto r = make_insert(node, next++);
      p.change(on_a, r);
      live.push_back(r);
      ++created;
    } else if (op < 9) {
      auto& r = live[std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng)];
      // TCP states only move forward, as on a real connection.
      const bool closing = op == 8 || r.src.state == static_cast<uint8_t>(TcpState::FinWait1);
      r = update_of(r, 1000, closing ? TcpState::FinWait1 : TcpState::Established);
      p.change(on_a, r);
      r.kind = Kind::Insert;
    } else {
      const std::size_t i = std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng);
      p.change(on_a, delete_of(live[i]));
      live[i] = live.back();
      live.pop_back();
    }
  }
};

// Runs churn on both nodes for `duration` (`per_ms` changes per node per millisecond), then lets
// the pair settle.
void churn(Pair& p, Churn& ca, Churn& cb, Micros duration, int per_ms, Micros settle_for = ms(5000)) {
  const Micros end = p.now + duration;
  while (p.now < end) {
    for (int i = 0; i < per_ms; ++i) {
      ca.step(p);
      cb.step(p);
    }
    p.run(ms(1));
  }
  p.run(settle_for);
}

std::vector<uint8_t> craft(const Header& h, const wire::Batch& batch, uint8_t key_fill = 0x5a) {
  Authenticator auth(test_key(key_fill));
  const std::string payload = batch.SerializeAsString();
  std::vector<uint8_t> out(kOverhead + payload.size());
  REQUIRE(seal(h, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()),
               auth, out) == out.size());
  return out;
}

// What `node` challenges its peer's new incarnation with: read from the keepalive it sends next.
uint64_t challenge_of(SyncProtocol& node, Micros now) {
  uint64_t challenge = 0;
  node.poll(now, [&](std::span<const uint8_t> d) {
    Authenticator auth(test_key());
    Header h;
    std::span<const uint8_t> payload;
    DropReason why{};
    wire::Batch batch;
    if (open(d, auth, h, payload, why) &&
        batch.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
      for (const auto& m : batch.messages())
        if (m.has_keepalive() && m.keepalive().challenge() != 0) challenge = m.keepalive().challenge();
    }
    return true;
  });
  return challenge;
}

// Makes `node` take node `h.node_id`'s epoch `h.epoch` as its peer's, as a live peer would: a first
// datagram draws the challenge, a keepalive answers it. Both use xmit 1, send base 1.
void prove_peer(SyncProtocol& node, Header h, Micros now) {
  h.flags = 0;
  h.seq = 0;
  h.xmit = 1;
  h.send_base = 1;
  node.receive(craft(h, wire::Batch{}), kLinkTtl, now);
  const uint64_t challenge = challenge_of(node, now);
  REQUIRE(challenge != 0);
  wire::Batch answer;
  answer.add_messages()->mutable_keepalive()->set_answer(challenge);
  const uint64_t before = node.counters().epochs_proven;
  node.receive(craft(h, answer), kLinkTtl, now);
  REQUIRE(node.counters().epochs_proven == before + 1);
}

bool carries_resync_request(std::span<const uint8_t> d) {
  return carries(d, [](const wire::Message& m) { return m.has_resync_request(); });
}

// Polls `node` and returns the sequence of the datagram in which it asks for a resync, or 0.
uint64_t resync_request_seq(SyncProtocol& node, Micros now) {
  uint64_t seq = 0;
  node.poll(now, [&](std::span<const uint8_t> d) {
    Authenticator auth(test_key());
    Header h;
    std::span<const uint8_t> payload;
    DropReason why{};
    if (carries_resync_request(d) && open(d, auth, h, payload, why)) seq = h.seq;
    return true;
  });
  return seq;
}

wire::Batch one_insert(const StateRecord& r) {
  wire::Batch b;
  encode_insert(r, 0, b.add_messages()->mutable_insert());
  return b;
}

}  // namespace

TEST_CASE("an insert reaches the peer at once, with its windows", "[sync][protocol]") {
  Pair p;
  settle(p);
  auto r = make_insert(1, 1);
  r.src.wscale = pairwall::engine::PeerTracking::kScaleOffered | 7;
  const Micros t0 = p.now;
  p.change(true, r);
  while (p.store_b.states.count(r.id) == 0 && p.now - t0 < ms(100)) p.run(Micros{50}, Micros{50});
  REQUIRE(p.store_b.states.count(r.id) == 1);
  CHECK(p.now - t0 < ms(1));  // not held for the flush interval
  const auto& got = p.store_b.states.at(r.id);
  CHECK(got.src == r.src);
  CHECK(got.dst == r.dst);
  CHECK(got.stack_key == r.stack_key);
  CHECK(p.b->counters().applied >= 1);
}

TEST_CASE("window moves wait for the flush interval, then go out together", "[sync][protocol]") {
  Pair p;
  p.config_a.flush_interval = ms(10);
  settle(p);
  std::vector<StateRecord> states;
  for (uint64_t i = 1; i <= 5; ++i) {
    auto r = make_insert(1, i);
    r.src.state = r.dst.state = static_cast<uint8_t>(TcpState::Established);
    p.change(true, r);
    states.push_back(r);
  }
  p.run(ms(50));
  const uint64_t sent_before = p.a->counters().datagrams_sent;
  const uint64_t keepalives_before = p.a->counters().keepalives_sent + p.a->counters().acks_sent;
  for (auto& r : states) p.change(true, update_of(r, 500));
  p.run(ms(5));
  CHECK(p.store_b.states.at(states[0].id).src.seqlo == states[0].src.seqlo);  // not yet
  p.run(ms(7));
  CHECK(p.store_b.states.at(states[0].id).src.seqlo == states[0].src.seqlo + 500);
  const uint64_t data = p.a->counters().datagrams_sent - sent_before -
                        (p.a->counters().keepalives_sent + p.a->counters().acks_sent - keepalives_before);
  CHECK(data == 1);  // five updates, one datagram
}

// A reload's [sync] flush_interval_ms, pending_limit and peer_node_id, taken by a running protocol.
TEST_CASE("a retune holds from the next flush, the next change queued and the next datagram heard",
          "[sync][protocol][reload]") {
  Pair p;
  p.config_a.flush_interval = ms(1000);
  settle(p);
  auto r = make_insert(1, 1);
  r.src.state = r.dst.state = static_cast<uint8_t>(TcpState::Established);
  p.change(true, r);
  p.run(ms(50));
  REQUIRE(p.store_b.states.count(r.id) == 1);
  const auto tuned = [&](Micros flush, std::size_t pending, uint32_t peer) {
    return SyncProtocol::Tuning{flush, p.config_a.bulk_timeout_min, pending,
                                peer,  p.config_a.send.capacity,    p.config_a.receive_window};
  };

  p.change(true, update_of(r, 500));
  p.run(ms(100));
  CHECK(p.store_b.states.at(r.id).src.seqlo == r.src.seqlo);  // waits for its second
  p.a->retune(tuned(ms(10), p.config_a.pending_limit, 0));
  p.run(ms(15));
  CHECK(p.store_b.states.at(r.id).src.seqlo == r.src.seqlo + 500);

  // A pending limit lowered: past it, changes for a peer that does not answer are let go.
  p.a_to_b.up = false;
  p.b_to_a.up = false;
  p.run(ms(1000));
  p.a->retune(tuned(ms(10), 5, 0));
  for (uint64_t i = 2; i <= 20; ++i) p.change(true, make_insert(1, i));
  CHECK(p.a->counters().pending_overflows > 0);
  p.a_to_b.up = true;
  p.b_to_a.up = true;
  p.run(ms(5000));
  CHECK(p.tables_agree());

  // B told to hear node 9 alone: node 1's datagrams are refused.
  const uint64_t refused = drops(*p.b, DropReason::UnknownSender);
  p.b->retune(SyncProtocol::Tuning{p.config_b.flush_interval, p.config_b.bulk_timeout_min,
                                   p.config_b.pending_limit, 9, p.config_b.send.capacity,
                                   p.config_b.receive_window});
  p.run(ms(500));
  CHECK(drops(*p.b, DropReason::UnknownSender) > refused);
}

// A reload's [sync] resend_window: what the smaller window cannot hold is evicted at once, and
// what the peer then misses comes by a resync, as after any eviction.
TEST_CASE("a retuned resend window evicts past its new size, and the peer still gets every state",
          "[sync][protocol][reload]") {
  Pair p;
  settle(p);
  p.a_to_b.up = false;
  for (uint64_t i = 1; i <= 400; ++i) p.change(true, make_insert(1, i));
  p.run(ms(50));
  const std::size_t outstanding = p.a->status(p.now).outstanding;
  REQUIRE(outstanding > 8);
  p.a->retune(SyncProtocol::Tuning{p.config_a.flush_interval, p.config_a.bulk_timeout_min,
                                   p.config_a.pending_limit, 0, 8, p.config_a.receive_window});
  CHECK(p.a->status(p.now).outstanding == 8);
  p.run(ms(1));  // the counters are read from the window as the protocol polls
  CHECK(p.a->status(p.now).outstanding <= 8);
  CHECK(p.a->status(p.now).counters.window_evictions >= outstanding - 8);
  p.a_to_b.up = true;
  p.run(ms(5000));
  CHECK(p.store_b.states.size() == 400);
  CHECK(p.tables_agree());
}

TEST_CASE("a datagram's worth of records goes out without waiting, filled to the MTU", "[sync][protocol]") {
  Pair p;
  p.config_a.flush_interval = ms(1000);
  settle(p);
  std::vector<StateRecord> states;
  for (uint64_t i = 1; i <= 2000; ++i) {
    auto r = make_insert(1, i);
    r.src.state = r.dst.state = static_cast<uint8_t>(TcpState::Established);
    p.store_a.local(r);
    p.store_b.local(r);
    states.push_back(r);
  }
  // Prime the TCP state cache so that the updates below are window moves, not state changes.
  for (auto& r : states) p.a->enqueue(update_of(r, 0), p.now);
  p.run(ms(1100));
  p.a_to_b.capture = true;
  for (auto& r : states) p.change(true, update_of(r, 100));
  p.run(ms(5));
  std::size_t data = 0;
  std::size_t full = 0;
  for (const auto& d : p.a_to_b.captured) {
    const Header h = read_header(d.data());
    if ((h.flags & frameflag::kSequenced) == 0) continue;
    ++data;
    if (d.size() > 1452 - 100) ++full;
  }
  CHECK(data >= 60);  // 2000 updates of ~45 bytes in 1368-byte payloads: ~66 datagrams...
  CHECK(data <= 80);
  CHECK(full >= data - 2);  // ...each filled up, within one record of the MTU
  for (const auto& d : p.a_to_b.captured) CHECK(d.size() <= 1452);
  p.run(ms(5));
  CHECK(p.store_b.states.at(states[1999].id).src.seqlo == states[1999].src.seqlo + 100);
}

// A reload's [sync] mtu, or a move to the other address family: the size a running protocol fills
// its datagrams to.
TEST_CASE("a new datagram size holds from the next datagram; one kept for resending goes again whole",
          "[sync][protocol][reload]") {
  Pair p;
  settle(p);
  CHECK(p.a->status(p.now).max_datagram == 1452);
  // Full datagrams that B never gets: A keeps them for resending.
  p.a_to_b.up = false;
  p.a_to_b.capture = true;
  for (uint64_t i = 1; i <= 60; ++i) p.change(true, make_insert(1, i));
  p.run(ms(20));
  uint64_t last_before = 0;
  std::size_t largest_before = 0;
  for (const auto& d : p.a_to_b.captured) {
    const Header h = read_header(d.data());
    last_before = std::max(last_before, h.seq);
    largest_before = std::max(largest_before, d.size());
  }
  REQUIRE(last_before > 0);
  REQUIRE(largest_before > 600);

  p.a->set_max_datagram(600);
  CHECK(p.a->max_datagram() == 600);
  CHECK(p.a->status(p.now).max_datagram == 600);
  p.a_to_b.captured.clear();
  p.a_to_b.up = true;
  for (uint64_t i = 61; i <= 120; ++i) p.change(true, make_insert(1, i));
  p.run(ms(3000));
  std::size_t resent_whole = 0;
  std::size_t largest_new = 0;
  for (const auto& d : p.a_to_b.captured) {
    const Header h = read_header(d.data());
    if (h.seq != 0 && h.seq <= last_before) {
      resent_whole += d.size() > 600;
    } else {
      CHECK(d.size() <= 600);
      largest_new = std::max(largest_new, d.size());
    }
  }
  CHECK(resent_whole > 0);
  CHECK(largest_new > 600 - 150);  // filled up to the new size, within a record or so
  CHECK(p.store_b.states.size() == 120);
  CHECK(p.tables_agree());
  // Clamped as at the start: never below what one record and the headers need.
  p.a->set_max_datagram(10);
  CHECK(p.a->max_datagram() == 256);
}

TEST_CASE("pending updates of one state coalesce into one message", "[sync][protocol]") {
  Pair p;
  settle(p);
  auto r = make_insert(1, 1);
  r.src.state = r.dst.state = static_cast<uint8_t>(TcpState::Established);
  p.change(true, r);
  p.run(ms(20));
  const uint64_t msgs = p.a->counters().messages_sent;
  for (int i = 1; i <= 100; ++i) p.change(true, update_of(r, static_cast<uint32_t>(i) * 10));
  p.run(ms(20));
  CHECK(p.a->counters().records_coalesced >= 99);
  CHECK(p.a->counters().messages_sent - msgs <= 3);  // the update, plus a keepalive or so
  CHECK(p.store_b.states.at(r.id).src.seqlo == r.src.seqlo + 1000);
}

TEST_CASE("both tables agree after churn over a lossy, reordering, duplicating link",
          "[sync][protocol][loss]") {
  const double loss = GENERATE(0.0, 0.1, 0.5);
  const bool reorder = GENERATE(false, true);
  INFO("loss " << loss << " reorder " << reorder);
  Pair p;
  settle(p);
  for (Link* l : {&p.a_to_b, &p.b_to_a}) {
    l->loss = loss;
    l->duplicate = 0.05;
    if (reorder) l->jitter = ms(3);
  }
  Churn ca(1, 101);
  Churn cb(2, 202);
  churn(p, ca, cb, ms(2000), 2, ms(20'000));
  CHECK(p.tables_agree());
  CHECK(p.store_a.states.size() == ca.live.size() + cb.live.size());
  CHECK(p.store_a.states.size() > 1000);
  if (loss > 0) {
    CHECK(p.a->counters().resends > 0);
    CHECK(p.b->counters().resends > 0);
    CHECK(p.b->counters().holes > 0);  // the losses were seen as gaps, and filled by resends
  }
  // Copies made by the link carry a transmission counter already seen.
  CHECK(drops(*p.b, DropReason::Replay) > 0);
  // Nothing was given up: the resend window covered every loss.
  CHECK(p.a->counters().gaps == 0);
  CHECK(p.a->counters().full_resyncs_started == 0);
  CHECK(p.a->counters().drops[static_cast<std::size_t>(DropReason::MalformedPayload)] == 0);
}

TEST_CASE("a link down for seconds: changes wait and coalesce, the hole is reported, nothing is lost",
          "[sync][protocol][gap]") {
  Pair p;
  settle(p);
  Churn ca(1, 7);
  Churn cb(2, 8);
  churn(p, ca, cb, ms(200), 2, ms(200));
  REQUIRE(p.tables_agree());
  p.a_to_b.up = false;
  p.b_to_a.up = false;
  churn(p, ca, cb, ms(5000), 1, ms(0));
  CHECK(p.a->peer_state(p.now) == PeerState::Down);
  // The window closed: the changes wait, one per state, instead of flooding a dead link.
  const auto waiting = p.a->status(p.now);
  CHECK(waiting.pending_records > 0);
  CHECK(waiting.pending_records <= ca.next);
  CHECK(p.a->counters().records_coalesced > 0);
  CHECK(p.a_to_b.sent < 500);
  p.a_to_b.up = true;
  p.b_to_a.up = true;
  churn(p, ca, cb, ms(1000), 1, ms(10'000));
  CHECK(p.tables_agree());
  CHECK(p.store_b.states.size() == ca.live.size() + cb.live.size());
  for (auto* n : {p.a.get(), p.b.get()}) {
    CHECK(n->counters().holes > 0);  // reported; filled by resends
    CHECK(n->counters().window_evictions == 0);
    CHECK(n->counters().full_resyncs_started == 0);
  }
}

TEST_CASE("losses past a small resend window: gap given up, reported, incremental resync",
          "[sync][protocol][gap]") {
  Pair p;
  // A resend window smaller than what is in flight: lost datagrams fall out of it before resent.
  p.config_a.send.capacity = 16;
  p.config_b.send.capacity = 16;
  settle(p);
  Churn ca(1, 17);
  Churn cb(2, 18);
  p.a_to_b.loss = p.b_to_a.loss = 0.5;
  churn(p, ca, cb, ms(2000), 4, ms(0));
  p.a_to_b.loss = p.b_to_a.loss = 0;
  churn(p, ca, cb, ms(500), 1, ms(10'000));
  CHECK(p.tables_agree());
  CHECK(p.store_b.states.size() == ca.live.size() + cb.live.size());
  for (auto* n : {p.a.get(), p.b.get()}) {
    CHECK(n->counters().window_evictions > 0);
    CHECK(n->counters().gaps > 0);
    CHECK(n->counters().resync_requests_sent > 0);
    CHECK(n->counters().resync_requests_served > 0);
    CHECK(n->counters().resync_states_sent > 0);
    CHECK(n->counters().full_resyncs_started == 0);
  }
}

TEST_CASE("a peer with a larger resend window than this node's receive window: resends, no gaps",
          "[sync][protocol][gap]") {
  Pair p;
  // A holds up to 1024 datagrams for resending; B's window holds 64 past its last in-order one.
  p.config_a.send.capacity = 1024;
  p.config_b.receive_window = 64;
  settle(p);
  // The first transmissions of one datagram of a burst are lost: many more get through before it.
  int lost = 0;
  p.a_to_b.drop_if = [&](std::span<const uint8_t> d) {
    Authenticator auth(test_key());
    Header h;
    std::span<const uint8_t> payload;
    DropReason why{};
    return open(d, auth, h, payload, why) && h.seq == 100 && ++lost <= 3;
  };
  constexpr uint64_t kStates = 10'000;
  for (uint64_t i = 1; i <= kStates; ++i) p.change(true, make_insert(1, i));
  p.run(ms(5000));
  REQUIRE(lost >= 1);
  CHECK(p.store_b.states.size() == kStates);
  CHECK(p.tables_agree());
  CHECK(p.a->counters().window_evictions == 0);
  // Whatever A can still resend is not given up for a resync, let alone a full one.
  CHECK(p.b->counters().gaps == 0);
  CHECK(p.a->counters().full_resyncs_started == 0);
  CHECK(p.b->counters().beyond_window > 0);
}

TEST_CASE("a gap nothing can fill any more starts a full resync, reported", "[sync][protocol][gap]") {
  Pair p;
  p.config_a.send.capacity = 16;
  p.config_a.send.evicted_id_budget = 20;
  settle(p);
  p.a_to_b.loss = 0.7;
  std::vector<StateRecord> made;
  for (uint64_t i = 1; i <= 3000; ++i) {
    made.push_back(make_insert(1, i));
    p.change(true, made.back());
    if (i % 10 == 0) p.run(ms(1));
  }
  CHECK(p.a->counters().evicted_ids_dropped > 0);
  p.a_to_b.loss = 0;
  p.run(ms(10'000));
  CHECK(p.a->counters().full_resyncs_started >= 1);
  CHECK(p.b->counters().full_resyncs_received >= 1);
  CHECK(p.b->counters().gaps >= 1);
  CHECK(p.store_b.states.size() == 3000);
  CHECK(p.tables_agree());
}

TEST_CASE("changes the engine dropped before sync saw them: a full resync", "[sync][protocol][gap]") {
  Pair p;
  settle(p);
  for (uint64_t i = 1; i <= 200; ++i) p.change(true, make_insert(1, i));
  // Fifty more states exist on A whose inserts never reached the protocol (a full ring).
  for (uint64_t i = 201; i <= 250; ++i) p.store_a.local(make_insert(1, i));
  p.run(ms(1000));
  CHECK(p.store_b.states.size() == 200);
  CHECK_FALSE(p.tables_agree());
  p.a->local_changes_lost();
  p.run(ms(5000));
  CHECK(p.a->counters().changes_lost == 1);
  CHECK(p.a->counters().full_resyncs_started == 1);
  CHECK(p.b->counters().full_resyncs_received == 1);
  CHECK(p.store_b.states.size() == 250);
  CHECK(p.tables_agree());
}

TEST_CASE("too many changes waiting for a dead peer: dropped, then a full resync", "[sync][protocol][gap]") {
  Pair p;
  p.config_a.pending_limit = 100;
  settle(p);
  p.a_to_b.up = false;
  p.b_to_a.up = false;
  p.run(ms(1000));
  for (uint64_t i = 1; i <= 1000; ++i) p.change(true, make_insert(1, i));
  p.run(ms(100));
  CHECK(p.a->counters().pending_overflows > 0);
  CHECK(p.a->counters().full_resyncs_started == 0);  // not while nobody answers
  p.a_to_b.up = true;
  p.b_to_a.up = true;
  p.run(ms(5000));
  CHECK(p.a->counters().full_resyncs_started == 1);
  CHECK(p.b->counters().full_resyncs_received == 1);
  CHECK(p.store_b.states.size() == 1000);
  CHECK(p.tables_agree());
}

TEST_CASE("deletes lost with the stream: the full resync removes the states the peer no longer has",
          "[sync][protocol][gap]") {
  Pair p;
  p.config_a.pending_limit = 50;
  settle(p);
  for (uint64_t i = 1; i <= 300; ++i) p.change(true, make_insert(1, i));
  p.run(ms(1000));
  REQUIRE(p.store_b.states.size() == 300);
  // B's own packets meet one of A's connections (it forwards it too: split brain).
  StateRecord met = make_insert(1, 7);
  met.kind = StateRecord::Kind::Update;
  p.store_b.local(met);

  p.a_to_b.up = false;
  p.b_to_a.up = false;
  p.run(ms(1000));
  // A's connections 1..100 close while nobody hears it: more deletes than may wait.
  for (uint64_t i = 1; i <= 100; ++i) {
    StateRecord gone;
    gone.kind = StateRecord::Kind::Delete;
    gone.id = {1, i};
    p.change(true, gone);
  }
  CHECK(p.a->counters().pending_overflows > 0);
  p.a_to_b.up = true;
  p.b_to_a.up = true;
  p.run(ms(5000));
  CHECK(p.a->counters().full_resyncs_started >= 1);
  CHECK(p.b->counters().full_resyncs_received >= 1);
  CHECK(p.b->counters().peer_states_removed > 0);
  CHECK(p.store_b.states.size() == 201);
  CHECK(p.store_b.states.count({1, 7}) == 1);
  p.store_b.states.erase({1, 7});
  CHECK(p.tables_agree());
}

TEST_CASE("a full resync sent while one from the peer is under way still removes what the peer no longer has",
          "[sync][protocol][gap]") {
  Pair p;
  settle(p);
  for (uint64_t i = 1; i <= 300; ++i) p.change(true, make_insert(1, i));
  p.run(ms(1000));
  REQUIRE(p.store_b.states.size() == 300);
  // B's table is large and its link to A slow: its full resync takes a while.
  constexpr uint64_t kTheirs = 20'000;
  for (uint64_t i = 1; i <= kTheirs; ++i) {
    p.store_b.local(make_insert(2, i));
    p.store_a.local(make_insert(2, i));
  }
  p.b_to_a.bytes_per_us = 1.25;
  p.b->local_changes_lost();
  const Micros t0 = p.now;
  while (p.a->bulk_state() != BulkState::Receiving && p.now - t0 < ms(1000)) p.run(Micros{200});
  REQUIRE(p.a->bulk_state() == BulkState::Receiving);
  // Meanwhile A's rings drop the deletes of connections 1..100: A owes B its whole table.
  for (uint64_t i = 1; i <= 100; ++i) p.store_a.states.erase({1, i});
  p.a->local_changes_lost();
  p.run(ms(10'000));
  CHECK(p.a->bulk_state() == BulkState::Done);
  CHECK(p.b->counters().full_resyncs_received == 1);
  CHECK(p.b->counters().peer_states_removed == 100);
  CHECK(p.store_b.states.size() == kTheirs + 200);
  CHECK(p.store_b.states.count({1, 50}) == 0);
  CHECK(p.store_b.states.count({1, 150}) == 1);
}

TEST_CASE("a starting node is demoted until its bulk ends, and gets every state", "[sync][protocol][bulk]") {
  Pair p;
  p.config_a.request_bulk_at_start = false;
  // A 100 Mbit/s link with room for 100 datagrams in its queue.
  p.a_to_b.bytes_per_us = 12.5;
  p.a_to_b.queue_limit = 100;
  p.start();
  constexpr uint64_t kStates = 20'000;
  for (uint64_t i = 1; i <= kStates; ++i) p.store_a.local(make_insert(1, i));
  p.restart_b(5000);
  CHECK_FALSE(p.b->bulk_done());
  CHECK(p.b->bulk_state() == BulkState::Requested);

  std::size_t max_in_flight = 0;
  double max_cwnd = 0;
  bool saw_receiving = false;
  bool live_seen_during_bulk = false;
  const Micros t0 = p.now;
  uint64_t live = kStates;
  while (p.b->bulk_state() != BulkState::Done && p.now - t0 < ms(30'000)) {
    p.run(ms(1));
    const auto st = p.a->status(p.now);
    max_in_flight = std::max(max_in_flight, st.in_flight);
    max_cwnd = std::max(max_cwnd, st.cwnd);
    if (p.b->bulk_state() == BulkState::Receiving) {
      saw_receiving = true;
      CHECK_FALSE(p.b->bulk_done());
      // A live insert during the bulk gets through long before the bulk ends.
      if (!live_seen_during_bulk && p.store_b.states.size() > 1000) {
        const auto r = make_insert(1, ++live);
        p.change(true, r);
        p.run(ms(20));
        live_seen_during_bulk =
            p.store_b.states.count(r.id) == 1 && p.b->bulk_state() == BulkState::Receiving;
      }
    }
  }
  REQUIRE(p.b->bulk_state() == BulkState::Done);
  CHECK(p.b->bulk_done());
  CHECK(saw_receiving);
  CHECK(live_seen_during_bulk);
  CHECK(p.store_b.states.size() == live);
  CHECK(p.b->status(p.now).bulk_expected == kStates);
  CHECK(p.b->status(p.now).bulk_received == kStates);
  CHECK(p.a->counters().bulks_served == 1);
  // Paced by the acks: never more in flight than the congestion window allowed, and the
  // bottleneck's queue overflowed rarely if ever.
  CHECK(max_in_flight <= static_cast<std::size_t>(max_cwnd) + 1);
  CHECK(max_cwnd <= p.config_a.send.cwnd_max);
  CHECK(p.a_to_b.queue_drops < p.a_to_b.sent / 20);
  CHECK(p.tables_agree());
  // 20,000 states (~1,500 datagrams) over 100 Mbit/s take ~0.2 s; a fixed 20 ms gap would take 30 s.
  CHECK(p.now - t0 < ms(1000));
}

TEST_CASE("bulk pacing adapts to a lossy link and still delivers everything", "[sync][protocol][bulk]") {
  Pair p;
  p.config_a.request_bulk_at_start = false;
  p.start();
  for (uint64_t i = 1; i <= 5000; ++i) p.store_a.local(make_insert(1, i));
  p.a_to_b.loss = 0.2;
  p.restart_b(5000);
  p.run(ms(20'000));
  CHECK(p.b->bulk_state() == BulkState::Done);
  CHECK(p.store_b.states.size() == 5000);
  CHECK(p.a->counters().resends > 0);
  CHECK(p.a->status(p.now).cwnd < p.config_a.send.cwnd_max);  // losses kept the window down
}

TEST_CASE("a bulk with no answer times out after the minimum", "[sync][protocol][bulk]") {
  Pair p;
  p.config_b.bulk_timeout_min = ms(5000);
  p.start();
  p.a_to_b.up = false;
  p.b_to_a.up = false;
  p.restart_b(5000);
  p.run(ms(4900));
  CHECK(p.b->bulk_state() == BulkState::Requested);
  CHECK_FALSE(p.b->bulk_done());
  p.run(ms(200));
  CHECK(p.b->bulk_state() == BulkState::TimedOut);
  CHECK(p.b->bulk_done());  // never demoted for ever
  CHECK(p.b->counters().bulk_timeouts == 1);
}

TEST_CASE("a bulk's timeout grows with the count it announced", "[sync][protocol][bulk]") {
  Pair p;
  p.config_a.request_bulk_at_start = false;
  p.config_b.bulk_timeout_min = ms(1000);
  p.config_b.bulk_min_rate = 10'000;
  p.start();
  for (uint64_t i = 1; i <= 30'000; ++i) p.store_a.local(make_insert(1, i));
  p.restart_b(5000);
  const Micros restarted = p.now;
  while (p.b->bulk_state() != BulkState::Receiving && p.now - restarted < ms(1000)) p.run(Micros{200});
  REQUIRE(p.b->bulk_state() == BulkState::Receiving);
  const Micros started = p.now;
  p.a_to_b.up = false;  // the transfer stalls
  // 30,000 states at 10,000/s: 3 s on top of the 1 s minimum.
  while (p.b->bulk_state() == BulkState::Receiving && p.now - started < ms(10'000)) p.run(ms(10));
  CHECK(p.b->bulk_state() == BulkState::TimedOut);
  CHECK(p.now - started >= ms(4000));
  CHECK(p.now - started < ms(4100));
}

// Node 2 just started: node 1 (epoch 77) proven, the bulk asked of it. `peer` heads the datagrams
// a test crafts in node 1's name.
struct AwaitingBulk {
  FakeStore store;
  SyncProtocol node;
  Header peer;

  AwaitingBulk() : node(config(), test_key(), store, ms(1000)) {
    peer.node_id = 1;
    peer.epoch = 77;
    prove_peer(node, peer, ms(1000));
    REQUIRE(node.bulk_state() == BulkState::Requested);
  }
  static ProtocolConfig config() {
    ProtocolConfig c = Pair::base_config(2);
    c.bulk_timeout_min = ms(1000);
    return c;
  }
};

TEST_CASE("a bulk announcing more states than any table holds still waits for its end",
          "[sync][protocol][bulk][reject]") {
  AwaitingBulk awaiting;
  SyncProtocol& b = awaiting.node;
  Header h = awaiting.peer;
  h.flags = frameflag::kSequenced;
  h.xmit = 2;
  h.seq = 1;
  h.send_base = 1;
  wire::Batch batch;
  auto* start = batch.add_messages()->mutable_bulk_start();
  start->set_request(b.status(ms(1000)).bulk_request);
  // A peer's broken code: count / bulk_min_rate in microseconds is past what 64 bits hold.
  start->set_count(std::numeric_limits<uint64_t>::max());
  b.receive(craft(h, batch), kLinkTtl, ms(1000));
  REQUIRE(b.bulk_state() == BulkState::Receiving);
  b.poll(ms(1001), [](std::span<const uint8_t>) { return true; });
  CHECK(b.bulk_state() == BulkState::Receiving);
  CHECK_FALSE(b.bulk_done());
}

// The sequence of a sequenced datagram that carries a BulkStart, or 0.
uint64_t bulk_start_seq(std::span<const uint8_t> d) {
  Authenticator auth(test_key());
  Header h;
  std::span<const uint8_t> payload;
  DropReason why{};
  wire::Batch batch;
  if (!open(d, auth, h, payload, why) || (h.flags & frameflag::kSequenced) == 0 ||
      !batch.ParseFromArray(payload.data(), static_cast<int>(payload.size())))
    return 0;
  const bool start = std::any_of(batch.messages().begin(), batch.messages().end(),
                                 [](const wire::Message& m) { return m.has_bulk_start(); });
  return start ? h.seq : 0;
}

TEST_CASE("a bulk whose start arrives after its end, through a resync, ends with the resync",
          "[sync][protocol][bulk][gap]") {
  AwaitingBulk awaiting;
  FakeStore& store = awaiting.store;
  SyncProtocol& b = awaiting.node;
  Header h = awaiting.peer;
  const uint32_t request = b.status(ms(1000)).bulk_request;
  // A state of the peer's that no record of this transfer names: not removed, since the transfer
  // did not arrive whole.
  store.states[{1, 99}] = make_insert(1, 99);

  // Sequence 1 (the BulkStart) fell out of the peer's resend window: its send base is past it.
  h.flags = frameflag::kSequenced;
  h.xmit = 2;
  h.seq = 2;
  h.send_base = 2;
  wire::Batch end;
  end.add_messages()->mutable_bulk_end()->set_request(request);
  end.mutable_messages(0)->mutable_bulk_end()->set_count(1);
  b.receive(craft(h, end), kLinkTtl, ms(1001));
  CHECK(b.counters().gaps == 1);
  CHECK(b.bulk_state() == BulkState::Receiving);
  CHECK_FALSE(b.bulk_done());
  const uint64_t asked = resync_request_seq(b, ms(1001));
  REQUIRE(asked != 0);

  // The resync of sequence 1 brings its BulkStart and state after the end, then says it is
  // complete: the transfer is done, and a BulkStart that late opens nothing.
  h.xmit = 3;
  h.seq = 3;
  h.send_base = 3;
  wire::Batch resent;
  auto* start = resent.add_messages()->mutable_bulk_start();
  start->set_request(request);
  start->set_count(1);
  start->set_snapshot_seq(1);
  encode_insert(make_insert(1, 1), 0, resent.add_messages()->mutable_insert());
  auto* answered = resent.add_messages()->mutable_resync_end();
  answered->set_through(asked);
  answered->set_epoch(AwaitingBulk::config().epoch);
  b.receive(craft(h, resent), kLinkTtl, ms(1002));
  CHECK(store.states.count({1, 1}) == 1);
  CHECK(b.bulk_state() == BulkState::Done);
  CHECK(b.bulk_done());
  b.poll(ms(10'000), [](std::span<const uint8_t>) { return true; });
  CHECK(b.bulk_state() == BulkState::Done);
  CHECK(b.counters().bulk_timeouts == 0);
  CHECK(b.counters().peer_states_removed == 0);
  CHECK(store.states.count({1, 99}) == 1);
}

TEST_CASE("a bulk is not done while the states of a datagram given up during it are owed",
          "[sync][protocol][bulk][gap]") {
  AwaitingBulk awaiting;
  FakeStore& store = awaiting.store;
  SyncProtocol& b = awaiting.node;
  Header h = awaiting.peer;
  const uint32_t request = b.status(ms(1000)).bulk_request;
  const uint64_t epoch = AwaitingBulk::config().epoch;
  h.flags = frameflag::kSequenced;
  auto from_peer = [&](uint64_t seq, const wire::Batch& batch, Micros now) {
    h.xmit = seq + 1;
    h.seq = seq;
    h.send_base = seq;
    b.receive(craft(h, batch), kLinkTtl, now);
  };

  wire::Batch first;
  auto* start = first.add_messages()->mutable_bulk_start();
  start->set_request(request);
  start->set_count(2);
  start->set_snapshot_seq(1);
  encode_insert(make_insert(1, 1), request, first.add_messages()->mutable_insert());
  from_peer(1, first, ms(1001));
  REQUIRE(b.bulk_state() == BulkState::Receiving);
  // Sequence 2, the transfer's other state, fell out of the peer's resend window; 3 ends it.
  wire::Batch end;
  end.add_messages()->mutable_bulk_end()->set_request(request);
  end.mutable_messages(0)->mutable_bulk_end()->set_count(2);
  from_peer(3, end, ms(1002));
  CHECK(b.counters().gaps == 1);
  CHECK(store.states.count({1, 2}) == 0);
  CHECK(b.bulk_state() == BulkState::Receiving);
  CHECK_FALSE(b.bulk_done());
  const uint64_t asked = resync_request_seq(b, ms(1002));
  REQUIRE(asked != 0);

  // An answer to the requests of this node's earlier boot ends nothing.
  wire::Batch earlier;
  earlier.add_messages()->mutable_resync_end()->set_through(asked);
  earlier.mutable_messages(0)->mutable_resync_end()->set_epoch(epoch - 1);
  from_peer(4, earlier, ms(1003));
  CHECK_FALSE(b.bulk_done());

  // The resync brings the state, then says it is complete.
  wire::Batch resync = one_insert(make_insert(1, 2));
  resync.add_messages()->mutable_resync_end()->set_through(asked);
  resync.mutable_messages(1)->mutable_resync_end()->set_epoch(epoch);
  from_peer(5, resync, ms(1004));
  CHECK(store.states.count({1, 2}) == 1);
  CHECK(b.bulk_state() == BulkState::Done);
  CHECK(b.bulk_done());
  CHECK(b.counters().bulk_timeouts == 0);
}

TEST_CASE("a transfer with gaps removes what the peer no longer has once their resyncs are in",
          "[sync][protocol][bulk][gap]") {
  AwaitingBulk awaiting;
  FakeStore& store = awaiting.store;
  SyncProtocol& b = awaiting.node;
  Header h = awaiting.peer;
  const uint32_t request = b.status(ms(1000)).bulk_request;
  h.flags = frameflag::kSequenced;
  auto from_peer = [&](uint64_t seq, const wire::Batch& batch, Micros now) {
    h.xmit = seq + 1;
    h.seq = seq;
    h.send_base = seq;
    b.receive(craft(h, batch), kLinkTtl, now);
  };
  // A state of the peer's whose delete this node missed: no record of the transfer names it.
  store.states[{1, 99}] = make_insert(1, 99);

  wire::Batch first;
  auto* start = first.add_messages()->mutable_bulk_start();
  start->set_request(request);
  start->set_count(2);
  start->set_snapshot_seq(1);
  encode_insert(make_insert(1, 1), request, first.add_messages()->mutable_insert());
  from_peer(1, first, ms(1001));
  // Sequence 2, with the transfer's other state, is given up; 3 ends the transfer.
  wire::Batch end;
  end.add_messages()->mutable_bulk_end()->set_request(request);
  end.mutable_messages(0)->mutable_bulk_end()->set_count(2);
  from_peer(3, end, ms(1002));
  const uint64_t asked = resync_request_seq(b, ms(1002));
  REQUIRE(asked != 0);
  wire::Batch resync = one_insert(make_insert(1, 2));
  resync.add_messages()->mutable_resync_end()->set_through(asked);
  resync.mutable_messages(1)->mutable_resync_end()->set_epoch(AwaitingBulk::config().epoch);
  from_peer(4, resync, ms(1003));
  REQUIRE(b.bulk_state() == BulkState::Done);
  CHECK(b.status(ms(1003)).bulk_received == 1);
  CHECK(b.counters().peer_states_removed == 1);
  CHECK(store.states.count({1, 99}) == 0);
  CHECK(store.states.count({1, 1}) == 1);
  CHECK(store.states.count({1, 2}) == 1);
}

// Whether a datagram carries the insert of state `id` for a bulk transfer.
bool carries_bulk_insert(std::span<const uint8_t> d, const StateId& id) {
  return carries(d, [&](const wire::Message& m) {
    return m.has_insert() && m.insert().bulk() != 0 && m.insert().creator() == id.creator &&
           m.insert().counter() == id.counter;
  });
}

TEST_CASE("a bulk datagram lost beyond resending near the end: the bulk is done only once its states are in",
          "[sync][protocol][bulk][gap]") {
  Pair p;
  p.config_a.request_bulk_at_start = false;
  p.config_a.send.capacity = 16;  // the lost datagram falls out of A's resend window soon
  p.start();
  constexpr uint64_t kStates = 2'000;
  for (uint64_t i = 1; i <= kStates; ++i) p.store_a.local(make_insert(1, i));
  // Every bulk transmission of a state among the last sent is lost: B gives its datagram up as
  // A's live changes push it out of the window, after the BulkEnd has come.
  const StateId lost{1, kStates - 20};
  p.a_to_b.drop_if = [&](std::span<const uint8_t> d) { return carries_bulk_insert(d, lost); };
  p.restart_b(5000);
  uint64_t live = kStates;
  const Micros t0 = p.now;
  while (!p.b->bulk_done() && p.now - t0 < ms(10'000)) {
    p.change(true, make_insert(1, ++live));
    p.run(Micros{200});
  }
  const bool whole_when_done = p.store_b.states.count(lost) == 1;
  p.run(ms(1000));
  CHECK(p.b->counters().gaps > 0);
  CHECK(p.b->bulk_done());
  CHECK(p.b->bulk_state() == BulkState::Done);
  CHECK(p.b->counters().bulk_timeouts == 0);
  CHECK(whole_when_done);
  CHECK(p.store_b.states.size() == live);
}

TEST_CASE("a bulk whose start is lost beyond resending still ends, and brings every state",
          "[sync][protocol][bulk][gap]") {
  Pair p;
  p.config_a.request_bulk_at_start = false;
  p.config_a.send.capacity = 16;  // the lost BulkStart falls out of A's resend window soon
  p.start();
  constexpr uint64_t kStates = 2'000;
  for (uint64_t i = 1; i <= kStates; ++i) p.store_a.local(make_insert(1, i));
  // Every transmission of the datagram that carries A's BulkStart is lost: it falls out of A's
  // resend window, B gives it up, and the transfer's end comes before its start, if that comes.
  uint64_t lost_seq = 0;
  p.a_to_b.drop_if = [&](std::span<const uint8_t> d) {
    const uint64_t seq = bulk_start_seq(d);
    if (lost_seq == 0) lost_seq = seq;
    return seq != 0 && seq == lost_seq;
  };
  p.restart_b(5000);
  p.run(ms(3000));
  CHECK(lost_seq != 0);
  CHECK(p.b->counters().gaps > 0);
  CHECK(p.b->bulk_state() == BulkState::Done);
  p.run(ms(30'000));
  CHECK(p.b->bulk_state() == BulkState::Done);
  CHECK(p.b->counters().bulk_timeouts == 0);
  CHECK(p.b->bulk_done());
  CHECK(p.store_b.states.size() == kStates);
}

TEST_CASE("a bulk replaced by a full resync, both starts lost beyond resending, still ends",
          "[sync][protocol][bulk][gap]") {
  Pair p;
  p.config_a.request_bulk_at_start = false;
  p.config_a.send.capacity = 16;
  p.start();
  constexpr uint64_t kStates = 2'000;
  for (uint64_t i = 1; i <= kStates; ++i) p.store_a.local(make_insert(1, i));
  // As A starts B's transfer it owes B a full resync (its rings lost changes), which takes the
  // transfer's place. Every transmission of the datagrams that carry either BulkStart is lost.
  std::set<uint64_t> lost;
  p.a_to_b.drop_if = [&](std::span<const uint8_t> d) {
    const uint64_t seq = bulk_start_seq(d);
    if (seq == 0) return false;
    if (lost.empty()) p.a->local_changes_lost();
    if (lost.size() < 2) lost.insert(seq);
    return lost.count(seq) != 0;
  };
  p.restart_b(5000);
  p.run(ms(30'000));
  CHECK(lost.size() == 2);
  CHECK(p.a->counters().full_resyncs_started == 1);
  CHECK(p.b->counters().gaps > 0);
  CHECK(p.b->bulk_state() == BulkState::Done);
  CHECK(p.b->counters().bulk_timeouts == 0);
  CHECK(p.store_b.states.size() == kStates);
}

TEST_CASE("keepalives tell up, one-way and down within a second", "[sync][protocol][liveness]") {
  Pair p;
  settle(p);
  p.a_to_b.up = false;  // B no longer hears A
  const Micros cut = p.now;
  Micros b_down{0}, a_one_way{0};
  while (p.now - cut < ms(1500)) {
    p.run(ms(10));
    if (b_down.count() == 0 && p.b->peer_state(p.now) == PeerState::Down) b_down = p.now - cut;
    if (a_one_way.count() == 0 && p.a->peer_state(p.now) == PeerState::OneWay) a_one_way = p.now - cut;
  }
  CHECK(b_down.count() > 0);
  CHECK(b_down < ms(1000));
  CHECK(a_one_way.count() > 0);
  CHECK(a_one_way < ms(1000));
  CHECK(p.a->peer_state(p.now) == PeerState::OneWay);
  p.a_to_b.up = true;
  p.run(ms(500));
  CHECK(p.a->peer_state(p.now) == PeerState::Up);
  CHECK(p.b->peer_state(p.now) == PeerState::Up);
  p.a_to_b.up = false;
  p.b_to_a.up = false;
  p.run(ms(1000));
  CHECK(p.a->peer_state(p.now) == PeerState::Down);
  CHECK(p.b->peer_state(p.now) == PeerState::Down);
}

TEST_CASE("keepalives carry each node's rule set digest; a reload shows within an interval",
          "[sync][protocol][liveness]") {
  Pair p;
  p.store_a.digest = 0x1111;
  p.store_b.digest = 0x1111;
  settle(p);
  p.run(ms(250));
  CHECK(p.a->status(p.now).rules_digest == 0x1111);
  CHECK(p.a->status(p.now).peer_rules_digest == 0x1111);
  CHECK(p.b->status(p.now).peer_rules_digest == 0x1111);

  p.store_b.digest = 0x2222;  // B loads other rules
  p.run(ms(250));
  CHECK(p.a->status(p.now).peer_rules_digest == 0x2222);
  CHECK(p.b->status(p.now).rules_digest == 0x2222);
  CHECK(p.b->status(p.now).peer_rules_digest == 0x1111);
}

// A data datagram's header as node A's current boot would write it, far ahead of what B has
// received: a datagram crafted with it is new to B.
Header ahead_from_a(const Pair& p) {
  Header h;
  h.flags = frameflag::kSequenced;
  h.node_id = 1;
  h.epoch = p.config_a.epoch;
  h.xmit = 1'000'000;
  h.seq = 1'000'000;
  h.send_base = 1'000'000;
  return h;
}

TEST_CASE("datagrams a node must refuse are dropped and counted by reason", "[sync][protocol][reject]") {
  Pair p;
  settle(p);
  const auto before = p.store_b.states.size();
  Header h = ahead_from_a(p);

  SECTION("unknown sender") {
    Header x = h;
    x.node_id = 3;
    p.b->receive(craft(x, one_insert(make_insert(3, 1))), kLinkTtl, p.now);
    CHECK(drops(*p.b, DropReason::UnknownSender) == 1);
  }
  SECTION("our own datagram looped back") {
    Header x = h;
    x.node_id = 2;
    p.b->receive(craft(x, one_insert(make_insert(2, 1))), kLinkTtl, p.now);
    CHECK(drops(*p.b, DropReason::UnknownSender) == 1);
  }
  SECTION("wrong key") {
    p.b->receive(craft(h, one_insert(make_insert(1, 99)), 0x77), kLinkTtl, p.now);
    CHECK(drops(*p.b, DropReason::BadTag) == 1);
  }
  SECTION("stale epoch") {
    Header x = h;
    x.epoch = p.config_a.epoch - 1;
    p.b->receive(craft(x, one_insert(make_insert(1, 99))), kLinkTtl, p.now);
    CHECK(drops(*p.b, DropReason::StaleEpoch) == 1);
  }
  SECTION("malformed payload under a good tag") {
    Authenticator auth(test_key());
    const std::vector<uint8_t> junk = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01};
    std::vector<uint8_t> d(kOverhead + junk.size());
    REQUIRE(seal(h, junk, auth, d) == d.size());
    p.b->receive(d, kLinkTtl, p.now);
    CHECK(drops(*p.b, DropReason::MalformedPayload) == 1);
  }
  SECTION("a sequenced datagram without a sequence") {
    Header x = h;
    x.seq = 0;
    p.b->receive(craft(x, one_insert(make_insert(1, 99))), kLinkTtl, p.now);
    CHECK(drops(*p.b, DropReason::MalformedPayload) == 1);
  }
  SECTION("garbage and truncation") {
    p.b->receive(std::vector<uint8_t>(64, 0), kLinkTtl, p.now);
    p.b->receive(std::vector<uint8_t>{0x50, 0x57, kVersion, 0}, kLinkTtl, p.now);
    CHECK(drops(*p.b, DropReason::BadMagic) == 1);
    CHECK(drops(*p.b, DropReason::Truncated) == 1);
  }
  CHECK(p.store_b.states.size() == before);
  CHECK(p.store_b.states.count({1, 99}) == 0);
  // The node keeps working.
  const auto r = make_insert(1, 500);
  p.change(true, r);
  p.run(ms(5));
  CHECK(p.store_b.states.count(r.id) == 1);
}

// RFC 5082: only the sync link delivers a datagram with TTL 255; a router on the way takes one off.
TEST_CASE("a datagram not sent on the sync link is dropped before its tag is checked",
          "[sync][protocol][reject]") {
  Pair p;
  settle(p);
  const Header h = ahead_from_a(p);
  const auto authentic = craft(h, one_insert(make_insert(1, 99)));
  const uint64_t received = p.b->counters().datagrams_received;
  const int not_on_the_link[] = {254, 128, 64, 1, 0, -1};  // -1: the socket did not say
  for (int ttl : not_on_the_link) {
    INFO("ttl " << ttl);
    const uint64_t before = drops(*p.b, DropReason::BadTtl);
    p.b->receive(authentic, ttl, p.now);
    CHECK(drops(*p.b, DropReason::BadTtl) == before + 1);
  }
  CHECK(p.b->counters().datagrams_received == received);
  CHECK(p.store_b.states.count({1, 99}) == 0);

  // A forger beyond the link costs no HMAC: its datagram never reaches the tag check.
  p.b->receive(craft(h, one_insert(make_insert(1, 99)), 0x77), 64, p.now);
  CHECK(drops(*p.b, DropReason::BadTtl) == std::size(not_on_the_link) + 1);
  CHECK(drops(*p.b, DropReason::BadTag) == 0);

  // The same datagram from the link is taken.
  p.b->receive(authentic, kLinkTtl, p.now);
  CHECK(p.b->counters().datagrams_received == received + 1);
  CHECK(drops(*p.b, DropReason::BadTtl) == std::size(not_on_the_link) + 1);
}

TEST_CASE("without ttl_security a datagram is taken whatever its TTL", "[sync][protocol][reject]") {
  Pair p;
  p.config_b.ttl_security = false;  // a routed sync path
  settle(p);
  Header h = ahead_from_a(p);
  const uint64_t received = p.b->counters().datagrams_received;
  p.b->receive(craft(h, one_insert(make_insert(1, 99))), 62, p.now);
  h.xmit = 1'000'001;
  p.b->receive(craft(h, one_insert(make_insert(1, 99))), -1, p.now);
  CHECK(p.b->counters().datagrams_received == received + 2);
  CHECK(drops(*p.b, DropReason::BadTtl) == 0);
}

TEST_CASE("an authenticated state with out-of-range fields is dropped, the rest applied",
          "[sync][protocol][reject]") {
  FakeStore store;
  SyncProtocol b(Pair::base_config(2), test_key(), store, ms(1000));
  Header h;
  h.node_id = 1;
  h.epoch = 77;
  prove_peer(b, h, ms(1000));
  h.flags = frameflag::kSequenced;
  h.xmit = 2;
  h.seq = 1;
  h.send_base = 1;
  wire::Batch batch = one_insert(make_insert(1, 1));
  encode_insert(make_insert(1, 2), 0, batch.add_messages()->mutable_insert());
  batch.mutable_messages(0)->mutable_insert()->mutable_src()->set_state(200);
  b.receive(craft(h, batch), kLinkTtl, ms(1000));
  CHECK(drops(b, DropReason::MalformedPayload) == 1);
  CHECK(store.states.count({1, 1}) == 0);
  CHECK(store.states.count({1, 2}) == 1);
  CHECK(b.counters().datagrams_received == 2);  // the proof, then this one
}

TEST_CASE("a datagram whose send base lies past its own sequence is dropped, the stream goes on",
          "[sync][protocol][reject]") {
  FakeStore store;
  SyncProtocol b(Pair::base_config(2), test_key(), store, ms(1000));
  Header h;
  h.node_id = 1;
  h.epoch = 77;
  prove_peer(b, h, ms(1000));
  h.flags = frameflag::kSequenced;
  h.xmit = 2;
  h.seq = 1;
  // A sender still holds the sequence it sends, so its send base is at most that: 2^62 on
  // sequence 1 is broken code, which would have every sequence below it given up.
  h.send_base = uint64_t{1} << 62;
  b.receive(craft(h, one_insert(make_insert(1, 1))), kLinkTtl, ms(1000));
  CHECK(drops(b, DropReason::MalformedPayload) == 1);
  CHECK(store.states.count({1, 1}) == 0);
  h.xmit = 3;
  h.send_base = 1;
  b.receive(craft(h, one_insert(make_insert(1, 1))), kLinkTtl, ms(1001));
  CHECK(store.states.count({1, 1}) == 1);
  CHECK(b.counters().gaps == 0);
}

TEST_CASE("a captured datagram played again is dropped as a replay", "[sync][protocol][reject]") {
  Pair p;
  settle(p);
  p.a_to_b.capture = true;
  const auto r = make_insert(1, 1);
  p.change(true, r);
  p.run(ms(5));
  REQUIRE(p.store_b.states.count(r.id) == 1);
  p.change(true, delete_of(r));
  p.run(ms(20));
  REQUIRE(p.store_b.states.count(r.id) == 0);
  // Playing the insert again must not bring the state back.
  for (const auto& d : p.a_to_b.captured) p.b->receive(d, kLinkTtl, p.now);
  CHECK(drops(*p.b, DropReason::Replay) == p.a_to_b.captured.size());
  CHECK(p.store_b.states.count(r.id) == 0);
  // Nor after the peer restarts: the old epoch is stale then.
  const auto captured = p.a_to_b.captured;
  p.config_a.epoch += 10;
  p.a = std::make_unique<SyncProtocol>(p.config_a, test_key(), p.store_a, p.now);
  p.run(ms(100));
  for (const auto& d : captured) p.b->receive(d, kLinkTtl, p.now);
  CHECK(drops(*p.b, DropReason::StaleEpoch) == captured.size());
  CHECK(p.store_b.states.count(r.id) == 0);
}

// An authenticated datagram proves who made it, not when: a new incarnation of the peer is taken
// only once it answers this node's challenge, so that one replayed from an earlier boot is never
// applied, whenever it comes.
TEST_CASE("datagrams replayed from a peer's earlier boot are never applied, even once it fell silent",
          "[sync][protocol][reject][epoch]") {
  Pair p;
  settle(p);
  // B's first boot clears its table: the capture an attacker keeps.
  p.b_to_a.capture = true;
  StateRecord clear;
  clear.kind = Kind::Clear;
  clear.id.creator = 2;
  p.change(false, clear);
  p.run(ms(20));
  p.b_to_a.capture = false;
  const auto captured = p.b_to_a.captured;
  REQUIRE_FALSE(captured.empty());
  // B boots again; A carries traffic, and B goes away for longer than the relearn interval.
  p.restart_b(p.config_b.epoch + 10);
  p.run(ms(500));
  REQUIRE(p.a->peer_state(p.now) == PeerState::Up);
  for (uint64_t i = 1; i <= 20; ++i) p.change(true, make_insert(1, i));
  p.run(ms(50));
  p.a_to_b.up = p.b_to_a.up = false;
  p.run(p.config_a.peer_relearn + ms(1000));
  REQUIRE(p.a->peer_state(p.now) == PeerState::Down);

  for (const auto& d : captured) p.a->receive(d, kLinkTtl, p.now);
  p.run(ms(50));
  CHECK(drops(*p.a, DropReason::Unproven) > 0);
  CHECK(p.store_a.states.size() == 20);  // the ClearStates was not applied
  CHECK(p.a->peer_state(p.now) == PeerState::Down);

  // B comes back: its incarnation proves itself, and the pair syncs again.
  p.a_to_b.up = p.b_to_a.up = true;
  p.run(ms(1000));
  CHECK(p.a->peer_state(p.now) == PeerState::Up);
  CHECK(p.store_b.states.size() == 20);
}

TEST_CASE("a booting node takes no replayed datagram for its peer's first, nor its bulk as done",
          "[sync][protocol][reject][epoch]") {
  Pair p;
  // A's answer to B's first bulk request, BulkStart and BulkEnd, is captured.
  p.a_to_b.capture = true;
  settle(p);
  p.a_to_b.capture = false;
  REQUIRE(p.b->bulk_state() == BulkState::Done);
  const auto captured = p.a_to_b.captured;
  // B reboots while A is away; the capture is played to it.
  p.a_to_b.up = p.b_to_a.up = false;
  p.restart_b(p.config_b.epoch + 10);
  for (const auto& d : captured) p.b->receive(d, kLinkTtl, p.now);
  p.run(ms(200));
  CHECK(drops(*p.b, DropReason::Unproven) > 0);
  CHECK(p.b->counters().datagrams_received == 0);
  CHECK_FALSE(p.b->bulk_done());
  CHECK(p.b->bulk_state() == BulkState::Requested);
}

TEST_CASE("a peer restarted with its clock behind is taken back once its old epoch fell silent",
          "[sync][protocol][epoch]") {
  Pair p;
  p.config_b.epoch = 50'000;
  settle(p);
  p.restart_b(40'000);  // the clock went back across the restart
  p.run(ms(2000));
  CHECK(drops(*p.a, DropReason::StaleEpoch) > 0);
  CHECK(p.a->counters().epoch_regressions == 0);
  CHECK(p.a->peer_state(p.now) == PeerState::Down);

  p.run(p.config_a.peer_relearn);
  CHECK(p.a->counters().epoch_regressions == 1);
  CHECK(p.a->peer_state(p.now) == PeerState::Up);
  const StateRecord r = make_insert(2, 7);
  p.change(false, r);
  p.run(ms(100));
  CHECK(p.store_a.states.count(r.id) == 1);
  CHECK(p.b->bulk_done());
}

TEST_CASE("a peer restart is noticed and both sides resync", "[sync][protocol][bulk]") {
  Pair p;
  settle(p);
  for (uint64_t i = 1; i <= 300; ++i) p.change(true, make_insert(1, i));
  p.run(ms(100));
  REQUIRE(p.store_b.states.size() == 300);
  p.restart_b(p.config_b.epoch + 1);
  CHECK_FALSE(p.b->bulk_done());
  p.run(ms(1000));
  CHECK(p.b->bulk_done());
  CHECK(p.store_b.states.size() == 300);
  CHECK(p.a->counters().peer_restarts == 1);
  CHECK(p.a->counters().bulks_served == 2);  // B's first boot and its restart
  CHECK(p.a->bulk_done());                   // A's own demotion is not affected
}

bool carries_bulk_end(std::span<const uint8_t> d) {
  return carries(d, [](const wire::Message& m) { return m.has_bulk_end(); });
}

TEST_CASE("the end of a full resync sent to the peer's earlier boot does not end its next boot's bulk",
          "[sync][protocol][bulk]") {
  Pair p;
  settle(p);
  constexpr uint64_t kStates = 3'000;
  for (uint64_t i = 1; i <= kStates; ++i) p.store_a.local(make_insert(1, i));
  // A sends B its whole table; B dies before the datagram with the end reaches it.
  bool dropping = true;
  p.a_to_b.drop_if = [&](std::span<const uint8_t> d) { return dropping && carries_bulk_end(d); };
  p.a->local_changes_lost();
  const Micros t0 = p.now;
  while (p.a->status(p.now).bulk_sending || p.a->counters().full_resyncs_started == 0) {
    REQUIRE(p.now - t0 < ms(5000));
    p.run(Micros{200});
  }
  REQUIRE(p.a_to_b.dropped > 0);
  dropping = false;
  p.restart_b(p.config_b.epoch + 1);
  const Micros t1 = p.now;
  while (!p.b->bulk_done() && p.now - t1 < ms(10'000)) p.run(Micros{100});
  CHECK(p.b->bulk_done());
  CHECK(p.b->counters().bulk_timeouts == 0);
  CHECK(p.store_b.states.size() == kStates);
}

TEST_CASE("a peer that has not yet heard of this node's restart ends no bulk of this boot",
          "[sync][protocol][bulk][epoch]") {
  AwaitingBulk awaiting;
  SyncProtocol& b = awaiting.node;
  Header h = awaiting.peer;
  // What the peer sent this node's earlier boot, sent again before it proved this one: it acks
  // the earlier epoch. A full resync, whole in one datagram.
  h.flags = frameflag::kSequenced | frameflag::kAck;
  h.ack_epoch = AwaitingBulk::config().epoch - 1;
  h.xmit = 2;
  h.seq = 1;
  h.send_base = 1;
  wire::Batch resync;
  resync.add_messages()->mutable_bulk_start()->set_request(0x80000001);
  resync.add_messages()->mutable_bulk_end()->set_request(0x80000001);
  b.receive(craft(h, resync), kLinkTtl, ms(1001));
  CHECK(drops(b, DropReason::EarlierBoot) == 1);
  CHECK(b.bulk_state() == BulkState::Requested);
  CHECK_FALSE(b.bulk_done());
  // Once it knows this boot, it sends the datagram again, emptied.
  h.ack_epoch = AwaitingBulk::config().epoch;
  h.xmit = 3;
  b.receive(craft(h, wire::Batch{}), kLinkTtl, ms(1002));
  CHECK(b.status(ms(1002)).held == 0);
  CHECK_FALSE(b.bulk_done());
}

TEST_CASE("a resync request meant for the peer's earlier boot is not served by its next",
          "[sync][protocol][gap][epoch]") {
  Pair p;
  p.config_b.send.capacity = 16;
  settle(p);
  // B's datagrams fall out of its small resend window on a lossy link; A's requests for the ranges
  // it gives up never reach B, and stay in A's resend window.
  p.a_to_b.drop_if = carries_resync_request;
  p.b_to_a.loss = 0.5;
  for (uint64_t i = 1; i <= 400; ++i) {
    p.change(false, make_insert(2, i));
    if (i % 4 == 0) p.run(ms(1));
  }
  p.run(ms(200));
  REQUIRE(p.b->counters().window_evictions > 0);
  REQUIRE(p.a->counters().resync_requests_sent >= 1);
  REQUIRE(p.b->counters().resync_requests_served == 0);
  // B restarts; its new incarnation numbers its own sequences from 1 again, and A's old requests
  // now reach it.
  p.b_to_a.loss = 0;
  p.restart_b(p.config_b.epoch + 1);
  p.a_to_b.drop_if = nullptr;
  p.run(ms(2000));
  // A empties them once it knows of the restart; any it sent before are for the earlier boot.
  CHECK(p.b->counters().resync_requests_served == 0);
  CHECK(p.b->counters().full_resyncs_started == 0);
  CHECK(p.b->bulk_done());
  CHECK(p.tables_agree());
}

TEST_CASE("a restarted peer's transfer removes nothing before its own bulk has ended",
          "[sync][protocol][bulk]") {
  Pair p;
  settle(p);
  // B's connections, which A holds and B will lose by restarting.
  for (uint64_t i = 1; i <= 200; ++i) p.change(false, make_insert(2, i));
  p.run(ms(100));
  REQUIRE(p.store_a.states.size() == 200);
  p.restart_b(p.config_b.epoch + 1);
  p.run(ms(1000));
  // A asked the new B for its table while B still waited for A's: B's empty snapshot named none of
  // them, and A kept them all (B gets them back from A's bulk).
  CHECK(p.a->counters().bulk_states_received == 0);
  CHECK(p.a->counters().peer_states_removed == 0);
  CHECK(p.store_a.states.size() == 200);
  CHECK(p.tables_agree());
}

TEST_CASE("an update for a state the peer lacks brings the whole state", "[sync][protocol]") {
  Pair p;
  settle(p);
  auto r = make_insert(1, 42);
  p.change(true, r);
  p.run(ms(10));
  REQUIRE(p.store_b.states.count(r.id) == 1);
  p.store_b.states.erase(r.id);  // lost on B for whatever reason
  p.change(true, update_of(r, 100));
  p.run(ms(50));
  CHECK(p.b->counters().apply_unknown == 1);
  CHECK(p.b->counters().state_requests_sent == 1);
  REQUIRE(p.store_b.states.count(r.id) == 1);
  CHECK(p.store_b.states.at(r.id).src.seqlo == r.src.seqlo + 100);
}

TEST_CASE("a clear empties the peer's table", "[sync][protocol]") {
  Pair p;
  settle(p);
  for (uint64_t i = 1; i <= 50; ++i) p.change(true, make_insert(1, i));
  p.run(ms(20));
  REQUIRE(p.store_b.states.size() == 50);
  StateRecord clear;
  clear.kind = Kind::Clear;
  clear.id.creator = 1;
  p.change(true, clear);
  p.run(ms(5));
  CHECK(p.store_b.states.empty());
}

// The selective-ack runs of an unsequenced ack or keepalive must fit the datagram whatever the
// holes: one that did not fit was never sent, and the ack it owed kept poll() spinning.
TEST_CASE("acks of many holes fit the smallest datagram", "[sync][protocol][loss]") {
  FakeStore store;
  ProtocolConfig config = Pair::base_config(2);
  config.max_datagram = 548;  // mtu 576
  const Micros now = ms(1000);
  SyncProtocol b(config, test_key(), store, now);
  Header h;
  h.node_id = 1;
  h.epoch = 77;
  prove_peer(b, h, now);
  // Every other sequence lost: 600 holes, each between two held datagrams.
  h.flags = frameflag::kSequenced;
  h.send_base = 1;
  for (uint64_t k = 0; k < 600; ++k) {
    h.xmit = 2 + k;
    h.seq = 2 + 2 * k;
    b.receive(craft(h, one_insert(make_insert(1, k + 1))), kLinkTtl, now);
  }
  std::size_t sent = 0;
  std::size_t largest = 0;
  const auto send = [&](std::span<const uint8_t> d) {
    ++sent;
    largest = std::max(largest, d.size());
    return true;
  };
  b.poll(now, send);
  b.poll(now + Micros{1}, send);
  CHECK(sent >= 1);
  CHECK(largest <= 548);
  CHECK(b.counters().send_errors == 0);
  CHECK(b.next_deadline(now + Micros{1}) > now + Micros{1});  // nothing owed: poll() rests
}

TEST_CASE("mutated authenticated datagrams never break a node", "[sync][protocol][reject]") {
  // A peer with the key but broken code: every header field and payload byte may be anything.
  Pair p;
  settle(p);
  p.a_to_b.capture = true;
  for (uint64_t i = 1; i <= 200; ++i) p.change(true, make_insert(1, i));
  p.run(ms(50));
  REQUIRE(p.a_to_b.captured.size() > 5);
  Authenticator auth(test_key());
  std::mt19937_64 rng(99);
  FakeStore store;
  SyncProtocol victim(Pair::base_config(2), test_key(), store, p.now);
  // The victim has taken the sender's epoch, so that mutations reach past the epoch check.
  prove_peer(victim, read_header(p.a_to_b.captured.front().data()), p.now);
  uint64_t accepted = 0;
  for (int i = 0; i < 20'000; ++i) {
    std::vector<uint8_t> d = p.a_to_b.captured[rng() % p.a_to_b.captured.size()];
    const std::size_t flips = 1 + rng() % 4;
    for (std::size_t f = 0; f < flips; ++f)
      d[rng() % (d.size() - kTagSize)] ^= static_cast<uint8_t>(1 + rng() % 255);
    // Sealed again with the key: the tag holds, and what follows it is exercised.
    const Header h = read_header(d.data());
    std::span<const uint8_t> payload(d.data() + kHeaderSize, d.size() - kOverhead);
    std::vector<uint8_t> out(d.size());
    REQUIRE(seal(h, payload, auth, out) == out.size());
    d = out;
    victim.receive(d, kLinkTtl, p.now + Micros{i});
    victim.poll(p.now + Micros{i}, [](std::span<const uint8_t>) { return true; });
    accepted = victim.counters().datagrams_received;
  }
  uint64_t dropped = 0;
  for (auto n : victim.counters().drops) dropped += n;
  CHECK(accepted + dropped >= 20'000);
  // The mutations reached every layer past the tag: sender and epoch checks, the replay window,
  // the protobuf parser, the field checks and the table.
  CHECK(drops(victim, DropReason::UnknownSender) > 0);
  CHECK(drops(victim, DropReason::Replay) + drops(victim, DropReason::StaleEpoch) > 0);
  CHECK(drops(victim, DropReason::MalformedPayload) > 0);
  CHECK(victim.counters().messages_received > 0);
  // The real pair is untouched and still syncs.
  const auto r = make_insert(1, 5000);
  p.change(true, r);
  p.run(ms(10));
  CHECK(p.store_b.states.count(r.id) == 1);
}

TEST_CASE("synced() counts the local changes the peer has acknowledged, and no more",
          "[sync][protocol][defer]") {
  Pair p;
  settle(p);
  const uint64_t before = p.a->enqueued();
  CHECK(p.a->synced() == before);
  p.a_to_b.up = false;
  p.change(true, make_insert(1, 1));
  p.change(true, make_insert(1, 2));
  CHECK(p.a->enqueued() == before + 2);
  p.run(ms(50));
  CHECK(p.a->synced() == before);  // sent, never acked
  p.a_to_b.up = true;
  p.run(ms(400));  // the resend timer brings them over
  CHECK(p.a->synced() == before + 2);
  CHECK(p.store_b.states.size() == 2);
}

TEST_CASE("inserts a node holds packets for are acked at once, others after the ack delay",
          "[sync][protocol][defer]") {
  // As configured at start, or as a reload that turns defer on or off sets it later.
  struct Case {
    bool configured;
    std::optional<bool> set_later;
  };
  for (const Case c : {Case{true, {}}, Case{false, {}}, Case{false, true}, Case{true, false}}) {
    const bool at_once = c.set_later.value_or(c.configured);
    CAPTURE(c.configured, c.set_later.has_value(), at_once);
    Pair p;
    p.config_a.ack_inserts_at_once = c.configured;
    p.config_b.ack_delay = ms(5);  // below the sender's shortest resend timeout (10 ms)
    p.config_b.ack_every = 100;
    settle(p);
    if (c.set_later) p.a->set_ack_inserts_at_once(*c.set_later);
    const Micros t0 = p.now;
    p.change(true, make_insert(1, 7));
    const uint64_t want = p.a->enqueued();
    while (p.a->synced() < want && p.now - t0 < ms(100)) p.run(Micros{50}, Micros{50});
    REQUIRE(p.a->synced() == want);
    if (at_once) {
      CHECK(p.now - t0 < ms(1));  // two link delays of 100 us, and polls
    } else {
      CHECK(p.now - t0 >= ms(5));
    }
  }
}

TEST_CASE("the key changes without a gap while each node accepts both keys", "[sync][protocol][keys]") {
  Pair p;
  settle(p);
  const auto old_key = test_key();
  const auto new_key = test_key(0x3c);
  uint64_t counter = 1;
  const auto insert_on_a = [&] {
    p.change(true, make_insert(1, counter++));
    p.run(ms(50));
  };

  SECTION("accept the new key on both, sign with it on each in turn, then forget the old one") {
    p.b->set_keys(old_key, new_key);
    p.a->set_keys(old_key, new_key);
    insert_on_a();
    CHECK(p.b->counters().datagrams_on_accept_key == 0);
    p.a->set_keys(new_key, old_key);  // A moved first: B accepts what A signs under its second key
    insert_on_a();
    CHECK(p.b->counters().datagrams_on_accept_key > 0);
    CHECK(p.a->counters().datagrams_on_accept_key > 0);  // B still signs with the old key
    p.b->set_keys(new_key, old_key);
    const uint64_t a_on_accept = p.a->counters().datagrams_on_accept_key;
    const uint64_t b_on_accept = p.b->counters().datagrams_on_accept_key;
    insert_on_a();
    CHECK(p.a->counters().datagrams_on_accept_key == a_on_accept);
    CHECK(p.b->counters().datagrams_on_accept_key == b_on_accept);
    p.a->set_keys(new_key, {});
    p.b->set_keys(new_key, {});
    insert_on_a();
    CHECK(drops(*p.a, DropReason::BadTag) == 0);
    CHECK(drops(*p.b, DropReason::BadTag) == 0);
    CHECK(p.store_b.states.size() == 4);
    CHECK(p.tables_agree());
    CHECK(p.b->peer_state(p.now) == PeerState::Up);
  }
  SECTION("a node that signs with a key its peer does not accept is not heard") {
    p.a->set_keys(new_key, old_key);
    insert_on_a();
    CHECK(drops(*p.b, DropReason::BadTag) > 0);
    CHECK(p.store_b.states.empty());
  }
}

TEST_CASE("an if-bound state reaches the peer bound to its interfaces of the same names, live and in a bulk",
          "[sync][protocol]") {
  pairwall::engine::InterfaceRegistry names_a;
  pairwall::engine::InterfaceRegistry names_b;
  const auto a_lan = names_a.intern("lan0");
  const auto a_wan = names_a.intern("wan0");
  names_b.intern("sync0");  // B numbers its interfaces otherwise
  Pair p;
  p.store_a.registry = &names_a;
  p.store_b.registry = &names_b;
  p.start();
  p.run(ms(500));
  auto r = make_insert(1, 1);
  r.bound = {a_lan, a_wan};
  p.change(true, r);
  p.run(ms(200));
  REQUIRE(p.store_b.states.count(r.id) == 1);
  CHECK(p.store_b.states[r.id].bound[0] == names_b.find("lan0"));
  CHECK(p.store_b.states[r.id].bound[1] == names_b.find("wan0"));
  CHECK(p.store_b.states[r.id].bound[0] != a_lan);

  // B starts again, numbering its interfaces anew, and takes A's table by a bulk.
  pairwall::engine::InterfaceRegistry names_b_again;
  names_b_again.intern("mgmt0");
  names_b_again.intern("sync0");
  p.store_b.registry = &names_b_again;
  p.restart_b(5000);
  p.run(ms(2000));
  REQUIRE(p.b->bulk_done());
  REQUIRE(p.store_b.states.count(r.id) == 1);
  CHECK(p.store_b.states[r.id].bound[0] == names_b_again.find("lan0"));
  CHECK(p.store_b.states[r.id].bound[1] == names_b_again.find("wan0"));
  CHECK(p.store_b.states[r.id].bound[1] != names_b.find("wan0"));
}
