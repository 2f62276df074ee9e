// The resend window: acks, loss detection, the resend timer, eviction into the evicted store,
// and the congestion window that paces bulk transfers.
#include "daemon/sync/send_window.h"

#include <catch2/catch.hpp>

using namespace pairwall::sync;
using pairwall::engine::StateId;

namespace {

SendWindowConfig small_config() {
  SendWindowConfig c;
  c.capacity = 8;
  c.evicted_id_budget = 6;
  c.rto_initial = Micros{100'000};
  c.rto_min = Micros{10'000};
  c.cwnd_initial = 4;
  c.cwnd_min = 2;
  c.cwnd_max = 64;
  return c;
}

uint64_t push(SendWindow& w, uint64_t id, Micros now) {
  return w.push(std::vector<uint8_t>{static_cast<uint8_t>(id)}, {StateId{1, id}}, {}, now);
}

}  // namespace

TEST_CASE("cumulative and selective acks free datagrams", "[sync][swin]") {
  SendWindow w(small_config());
  for (uint64_t i = 1; i <= 6; ++i) CHECK(push(w, i, Micros{1000}) == i);
  CHECK(w.outstanding() == 6);
  CHECK(w.send_base() == 1);
  // cum 2, and 4 and 6 selectively (bits for 2+2+0 = 4 and 2+2+2 = 6).
  CHECK(w.on_ack(2, 0b101, Micros{1500}) == 4);
  CHECK(w.outstanding() == 2);
  CHECK(w.send_base() == 3);
  CHECK(w.on_ack(6, 0, Micros{1600}) == 2);
  CHECK(w.outstanding() == 0);
  CHECK(w.send_base() == 7);
  CHECK(w.next_seq() == 7);
  CHECK(w.timer_deadline() == Micros::max());
  // A stale ack is harmless.
  CHECK(w.on_ack(1, 0, Micros{1700}) == 0);
}

TEST_CASE("a datagram sent before one that got through is lost (RACK)", "[sync][swin]") {
  SendWindow w(small_config());
  push(w, 1, Micros{1000});
  push(w, 2, Micros{5000});
  push(w, 3, Micros{5000});
  // 2 arrives, 1 does not: 1 was sent 4 ms earlier, beyond the reordering window.
  w.on_ack(0, 0b1, Micros{6000});
  REQUIRE(w.has_lost());
  CHECK(w.next_lost() == 1);
  CHECK_FALSE(w.has_lost());
  w.resent(1, Micros{6100});
  CHECK(w.slot(1).transmissions == 2);
  // 3 was sent with 2: not lost.
  w.on_ack(0, 0b11, Micros{6200});
  CHECK_FALSE(w.has_lost());
  w.on_ack(3, 0, Micros{7000});
  CHECK(w.outstanding() == 0);
}

TEST_CASE("datagrams sent together are not lost for each other's ack", "[sync][swin]") {
  SendWindow w(small_config());
  push(w, 1, Micros{1000});
  push(w, 2, Micros{1000});
  w.on_ack(0, 0b1, Micros{1400});  // 2 before 1: reordering, not loss
  CHECK_FALSE(w.has_lost());
}

TEST_CASE("the resend timer fires, backs off, and resets on progress", "[sync][swin]") {
  SendWindow w(small_config());
  push(w, 1, Micros{0});
  push(w, 2, Micros{0});
  const Micros first = w.timer_deadline();
  CHECK(first == Micros{100'000});  // no RTT yet: the initial timeout
  w.check_timer(first - Micros{1});
  CHECK_FALSE(w.has_lost());
  w.check_timer(first);
  CHECK(w.rto_expirations() == 1);
  // Everything sent a timeout ago is lost; only the collapsed window may go out again.
  CHECK(w.next_lost() == 1);
  CHECK(w.next_lost() == 2);
  CHECK(w.cwnd() == 2);
  w.resent(1, first);
  w.resent(2, first);
  const Micros second = w.timer_deadline();
  CHECK(second - first == Micros{200'000});  // backed off
  w.on_ack(2, 0, first + Micros{500});
  push(w, 3, first + Micros{600});
  CHECK(w.timer_deadline() - (first + Micros{600}) == Micros{100'000});  // backoff reset
}

TEST_CASE("a lossy but answering peer keeps the timer short", "[sync][swin]") {
  SendWindow w(small_config());
  push(w, 1, Micros{0});
  push(w, 2, Micros{0});
  w.on_ack(1, 0, Micros{1000});  // the peer is there
  const Micros t = w.timer_deadline();
  w.check_timer(t);
  CHECK(w.next_lost() == 2);
  w.resent(2, t);
  CHECK(w.timer_deadline() - t == w.rto());
  CHECK(w.rto() < Micros{100'000});  // not backed off
  CHECK(w.cwnd() >= 2.5);            // halved, not collapsed
  // Now nothing comes back: the next expiry backs off.
  w.check_timer(w.timer_deadline());
  w.resent(w.next_lost(), w.timer_deadline());
  CHECK(w.cwnd() == 2);
}

TEST_CASE("RTT samples set the timeout (RFC 6298) and Karn skips resends", "[sync][swin]") {
  SendWindow w(small_config());
  for (int i = 0; i < 20; ++i) {
    const Micros t{static_cast<int64_t>(i) * 100'000};
    const uint64_t seq = push(w, static_cast<uint64_t>(i), t);
    w.on_ack(seq, 0, t + Micros{20'000});
  }
  CHECK(w.srtt() > Micros{19'000});
  CHECK(w.srtt() < Micros{21'000});
  CHECK(w.rto() >= Micros{20'000});
  CHECK(w.rto() < Micros{40'000});
}

TEST_CASE("a full window evicts the oldest and keeps its ids for a resync", "[sync][swin]") {
  SendWindow w(small_config());
  for (uint64_t i = 1; i <= 10; ++i) push(w, i, Micros{1000});
  CHECK(w.evictions() == 2);
  CHECK(w.send_base() == 3);
  CHECK(w.outstanding() == 8);
  CHECK(w.evicted_ids() == 2);

  std::vector<StateId> ids;
  std::string controls;
  CHECK(w.take_for_resync(1, ids, controls) == SendWindow::Lookup::Found);
  CHECK(ids == std::vector<StateId>{{1, 1}});
  CHECK(w.take_for_resync(1, ids, controls) == SendWindow::Lookup::Forgotten);  // taken already
  // Still in the window (the peer gave it up for its own reasons): found, and no longer resent.
  CHECK(w.take_for_resync(3, ids, controls) == SendWindow::Lookup::Found);
  CHECK(w.outstanding() == 7);
  CHECK(w.send_base() == 4);
}

// [sync] resend_window from a reload.
TEST_CASE("a smaller capacity evicts the oldest at once; a larger one holds more", "[sync][swin]") {
  SendWindow w(small_config());
  for (uint64_t i = 1; i <= 8; ++i) push(w, i, Micros{1000});
  w.set_capacity(3);
  CHECK(w.capacity() == 3);
  CHECK(w.evictions() == 5);
  CHECK(w.outstanding() == 3);
  CHECK(w.in_flight() == 3);
  CHECK(w.send_base() == 6);
  std::vector<StateId> ids;
  std::string controls;
  CHECK(w.take_for_resync(2, ids, controls) == SendWindow::Lookup::Found);  // kept for a resync
  CHECK(ids == std::vector<StateId>{{1, 2}});

  w.set_capacity(20);
  for (uint64_t i = 9; i <= 20; ++i) push(w, i, Micros{2000});
  CHECK(w.evictions() == 5);
  CHECK(w.outstanding() == 15);
  CHECK(w.send_base() == 6);
}

TEST_CASE("the evicted store drops the oldest over budget, counted", "[sync][swin]") {
  SendWindow w(small_config());  // capacity 8, budget 6 ids
  for (uint64_t i = 1; i <= 16; ++i) push(w, i, Micros{1000});
  CHECK(w.evictions() == 8);
  CHECK(w.evicted_ids() == 6);
  CHECK(w.evicted_ids_dropped() == 2);
  std::vector<StateId> ids;
  std::string controls;
  CHECK(w.take_for_resync(1, ids, controls) == SendWindow::Lookup::Forgotten);
  CHECK(w.take_for_resync(2, ids, controls) == SendWindow::Lookup::Forgotten);
  CHECK(w.take_for_resync(3, ids, controls) == SendWindow::Lookup::Found);
}

TEST_CASE("the evicted store keeps control messages over budget, and asks a full resync for the ids",
          "[sync][swin]") {
  SendWindow w(small_config());  // capacity 8, budget 6 ids
  // Datagram 1 carries a control message (a resync request of this node's own) and a state.
  w.push(std::vector<uint8_t>{1}, {StateId{1, 1}}, "resync-request", Micros{1000});
  for (uint64_t i = 2; i <= 16; ++i) push(w, i, Micros{1000});
  CHECK(w.evicted_ids_dropped() == 3);  // datagram 1's id, whose marker takes its place, and 2's and 3's
  std::vector<StateId> ids;
  std::string controls;
  CHECK(w.take_for_resync(1, ids, controls) == SendWindow::Lookup::Found);
  CHECK(controls == "resync-request");
  CHECK(ids == std::vector<StateId>{SendWindow::kDroppedIds});
  CHECK(w.take_for_resync(3, ids, controls) == SendWindow::Lookup::Forgotten);
  CHECK(w.take_for_resync(4, ids, controls) == SendWindow::Lookup::Found);
}

TEST_CASE("acks never trim the evicted store; serving a resync does", "[sync][swin]") {
  SendWindow w(small_config());
  for (uint64_t i = 1; i <= 10; ++i) push(w, i, Micros{1000});
  REQUIRE(w.evicted_entries() == 2);
  w.on_ack(10, 0, Micros{2000});  // may cover 1..2 given up: their request can still come
  CHECK(w.evicted_entries() == 2);
  std::vector<StateId> ids;
  std::string controls;
  CHECK(w.take_for_resync(1, ids, controls) == SendWindow::Lookup::Found);
  CHECK(w.take_for_resync(2, ids, controls) == SendWindow::Lookup::Found);
  CHECK(w.evicted_entries() == 0);
}

TEST_CASE("congestion window grows on acks and halves on loss", "[sync][swin]") {
  SendWindow w(small_config());
  CHECK(w.cwnd() == 4);
  uint64_t seq = 0;
  for (int i = 0; i < 4; ++i) seq = push(w, 1, Micros{1000});
  CHECK_FALSE(w.cwnd_open());
  w.on_ack(seq, 0, Micros{2000});
  CHECK(w.cwnd() == 8);  // slow start: one per acked datagram
  CHECK(w.cwnd_open());
  const uint64_t lost = push(w, 1, Micros{3000});
  push(w, 1, Micros{9000});
  w.on_ack(lost - 1, 0b1, Micros{10'000});  // the second acked, the first not
  CHECK(w.has_lost());
  CHECK(w.cwnd() == Approx(4.5));  // (8 + 1) / 2
}

TEST_CASE("selective-ack runs from an ack past what was sent free nothing", "[sync][swin]") {
  SendWindow w(small_config());
  for (uint64_t i = 1; i <= 6; ++i) push(w, i, Micros{1000});
  // An authenticated peer's broken code: a cumulative ack near 2^64, whose runs would wrap around
  // to sequences that were sent and never received.
  const uint64_t runs[] = {6, 3};
  CHECK(w.on_sack_runs(~uint64_t{0} - 5, runs, Micros{1500}) == 0);
  CHECK(w.outstanding() == 6);
  CHECK(w.on_sack_runs(6, runs, Micros{1500}) == 0);
  CHECK(w.outstanding() == 6);
}
