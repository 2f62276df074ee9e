// The hold queue of defer: what goes when, in which order, with which bytes.
#include "daemon/io/defer_queue.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <set>
#include <vector>

namespace pairwall::io {
namespace {

using Clock = DeferQueue::Clock;
using std::chrono::milliseconds;

const Clock::time_point t0{milliseconds(1'000'000)};

struct Released {
  uint32_t id;
  Decision decision;
  std::vector<uint8_t> bytes;
  ReleaseCause cause;
  uint32_t mark;
};

struct Recorder {
  std::vector<Released> out;
  void operator()(const DeferQueue::Release& r) {
    out.push_back({r.id, r.decision, std::vector<uint8_t>(r.bytes.begin(), r.bytes.end()), r.cause, r.mark});
  }
  std::vector<uint32_t> ids() const {
    std::vector<uint32_t> v;
    for (const auto& r : out) v.push_back(r.id);
    return v;
  }
};

engine::StateId state(uint64_t n) {
  return {1, n};
}

std::vector<uint8_t> bytes_of(std::size_t n, uint8_t first) {
  std::vector<uint8_t> b(n);
  std::iota(b.begin(), b.end(), first);
  return b;
}

TEST_CASE("held packets go when the peer has their batch's records, in order", "[defer]") {
  DeferQueue q(8, 4096);
  Recorder rec;
  // Tickets: the worker's record count after each packet's batch.
  REQUIRE(q.hold(10, Decision::Accept, {}, state(1), 5, t0 + milliseconds(10), rec));
  REQUIRE(q.hold(11, Decision::Accept, {}, state(2), 5, t0 + milliseconds(10), rec));
  REQUIRE(q.hold(20, Decision::Accept, {}, state(3), 9, t0 + milliseconds(12), rec));
  CHECK(q.size() == 3);
  CHECK(q.holds_state(state(2)));
  CHECK_FALSE(q.holds_state(state(4)));

  q.release(4, t0, rec);
  CHECK(rec.out.empty());
  q.release(8, t0 + milliseconds(1), rec);
  CHECK(rec.ids() == std::vector<uint32_t>{10, 11});
  CHECK(rec.out[0].cause == ReleaseCause::Synced);
  CHECK(q.size() == 1);
  CHECK(q.next_deadline() == t0 + milliseconds(12));
  q.release(9, t0 + milliseconds(1), rec);
  CHECK(rec.ids() == std::vector<uint32_t>{10, 11, 20});
  CHECK(q.empty());
  CHECK(q.next_deadline() == Clock::time_point::max());
  CHECK(q.counters().held.get() == 3);
  CHECK(q.counters().released[static_cast<std::size_t>(ReleaseCause::Synced)].get() == 3);
}

TEST_CASE("a silent peer costs a held packet its timeout, not more", "[defer]") {
  DeferQueue q(8, 4096);
  Recorder rec;
  REQUIRE(q.hold(1, Decision::Accept, {}, state(1), 3, t0 + milliseconds(10), rec));
  REQUIRE(q.hold(2, Decision::AcceptClaimed, {}, state(2), 4, t0 + milliseconds(15), rec, 0x1234));
  q.release(0, t0 + milliseconds(9), rec);
  CHECK(rec.out.empty());
  q.release(0, t0 + milliseconds(10), rec);
  REQUIRE(rec.ids() == std::vector<uint32_t>{1});
  CHECK(rec.out[0].cause == ReleaseCause::Timeout);
  q.release_all(ReleaseCause::Stopped, rec);
  REQUIRE(rec.ids() == std::vector<uint32_t>{1, 2});
  CHECK(rec.out[1].cause == ReleaseCause::Stopped);
  CHECK(rec.out[1].decision == Decision::AcceptClaimed);
  CHECK(rec.out[0].mark == 0);
  CHECK(rec.out[1].mark == 0x1234);  // which its claimed verdict keeps
}

TEST_CASE("a held packet whose state was removed meanwhile goes as a drop, whatever lets it go", "[defer]") {
  std::set<uint64_t> alive{1, 2, 3, 4};
  DeferQueue q(2, 4096, [&alive](const engine::StateId& id) { return alive.count(id.counter) > 0; });
  Recorder rec;
  const std::vector<uint8_t> rewrite = bytes_of(40, 7);
  REQUIRE(q.hold(1, Decision::Accept, {}, state(1), 1, t0 + milliseconds(10), rec));
  REQUIRE(q.hold(2, Decision::AcceptRewritten, rewrite, state(2), 1, t0 + milliseconds(10), rec));
  // Killed while held: state 1 on its way out for room, state 2 by the peer's ack.
  alive.erase(1);
  alive.erase(2);
  REQUIRE(q.hold(3, Decision::Accept, {}, state(3), 2, t0 + milliseconds(10), rec));
  q.release(1, t0, rec);
  // State 3 lives: its packet goes at the timeout as it was decided.
  q.release(1, t0 + milliseconds(10), rec);
  REQUIRE(rec.ids() == std::vector<uint32_t>{1, 2, 3});
  CHECK(rec.out[0].cause == ReleaseCause::Full);
  CHECK(rec.out[0].decision == Decision::Drop);
  CHECK(rec.out[1].cause == ReleaseCause::Synced);
  CHECK(rec.out[1].decision == Decision::Drop);
  CHECK(rec.out[1].bytes.empty());
  CHECK(rec.out[2].cause == ReleaseCause::Timeout);
  CHECK(rec.out[2].decision == Decision::Accept);
  CHECK(q.counters().state_gone.get() == 2);
  CHECK(q.counters().released[static_cast<std::size_t>(ReleaseCause::Synced)].get() == 1);

  // So does a packet that a shutdown lets go.
  REQUIRE(q.hold(4, Decision::Accept, {}, state(4), 3, t0 + milliseconds(20), rec));
  alive.erase(4);
  q.release_all(ReleaseCause::Stopped, rec);
  REQUIRE(rec.out.size() == 4);
  CHECK(rec.out[3].decision == Decision::Drop);
  CHECK(q.counters().state_gone.get() == 3);
}

TEST_CASE("a full queue lets its oldest go to hold the newest", "[defer]") {
  DeferQueue q(2, 4096);
  Recorder rec;
  REQUIRE(q.hold(1, Decision::Accept, {}, state(1), 1, t0, rec));
  REQUIRE(q.hold(2, Decision::Accept, {}, state(2), 1, t0, rec));
  REQUIRE(q.hold(3, Decision::Accept, {}, state(3), 1, t0, rec));
  REQUIRE(rec.ids() == std::vector<uint32_t>{1});
  CHECK(rec.out[0].cause == ReleaseCause::Full);
  CHECK(q.size() == 2);
  CHECK_FALSE(q.holds_state(state(1)));
  CHECK(q.holds_state(state(3)));
}

TEST_CASE("rewritten packets keep their bytes while held, across the arena's wrap", "[defer]") {
  DeferQueue q(16, 1000);
  Recorder rec;
  auto hold = [&](uint32_t id, std::size_t n) {
    const auto b = bytes_of(n, static_cast<uint8_t>(id));
    return q.hold(id, Decision::AcceptRewritten, b, state(id), id, t0 + milliseconds(100), rec);
  };
  REQUIRE(hold(1, 400));
  REQUIRE(hold(2, 400));
  REQUIRE(
      q.hold(3, Decision::Accept, bytes_of(900, 0), state(3), 3, t0 + milliseconds(100), rec));  // no copy
  q.release(1, t0, rec);  // frees the first 400 bytes
  REQUIRE(hold(4, 300));  // fits only at the arena's start
  CHECK(rec.ids() == std::vector<uint32_t>{1});
  REQUIRE(hold(5, 300));  // needs the room of packet 2: it goes first
  REQUIRE(rec.ids() == std::vector<uint32_t>{1, 2});
  CHECK(rec.out[1].cause == ReleaseCause::Full);
  q.release(10, t0, rec);
  REQUIRE(rec.ids() == std::vector<uint32_t>{1, 2, 3, 4, 5});
  CHECK(rec.out[0].bytes == bytes_of(400, 1));
  CHECK(rec.out[1].bytes == bytes_of(400, 2));
  CHECK(rec.out[2].bytes.empty());  // the kernel keeps a packet it gets back unchanged
  CHECK(rec.out[3].bytes == bytes_of(300, 4));
  CHECK(rec.out[4].bytes == bytes_of(300, 5));
  // Empty again: the whole arena is one piece.
  REQUIRE(hold(6, 1000));
  q.release(6, t0, rec);
  CHECK(rec.out.back().bytes == bytes_of(1000, 6));
}

TEST_CASE("a rewrite larger than the arena is not held", "[defer]") {
  DeferQueue q(4, 100);
  Recorder rec;
  CHECK_FALSE(q.hold(1, Decision::AcceptRewritten, bytes_of(101, 0), state(1), 1, t0, rec));
  CHECK(q.empty());
  CHECK(q.counters().too_large.get() == 1);
  CHECK(q.counters().held.get() == 0);
}

TEST_CASE("holds_state() knows exactly the states with packets held, through wraps and overflows",
          "[defer]") {
  // A model to compare with: the states of the packets held, in order.
  DeferQueue q(64, 1 << 16);
  std::vector<engine::StateId> model;
  Recorder rec;
  uint64_t next = 1;
  auto drop_released = [&] {
    for (std::size_t i = 0; i < rec.out.size(); ++i) model.erase(model.begin());
    rec.out.clear();
  };
  for (int round = 0; round < 2000; ++round) {
    // A few states with several packets each, many with one; the counters collide in the index.
    const engine::StateId s = state(round % 7 == 0 ? 3 : (next++ * 1024));
    REQUIRE(q.hold(static_cast<uint32_t>(round), Decision::Accept, {}, s, static_cast<uint64_t>(round),
                   t0 + milliseconds(round), rec));
    drop_released();
    model.push_back(s);
    if (round % 5 == 0) {
      q.release(static_cast<uint64_t>(round - 20), t0, rec);
      drop_released();
    }
    REQUIRE(q.size() == model.size());
    for (uint64_t probe : {uint64_t{3}, (next - 1) * 1024, (next - 30) * 1024, next * 1024}) {
      const bool held = std::find(model.begin(), model.end(), state(probe)) != model.end();
      REQUIRE(q.holds_state(state(probe)) == held);
    }
  }
}

}  // namespace
}  // namespace pairwall::io
