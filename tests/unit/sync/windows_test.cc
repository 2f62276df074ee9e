// The anti-replay window and the in-order receive window, edge by edge.
#include <catch2/catch.hpp>
#include <vector>

#include "daemon/sync/receive_window.h"
#include "daemon/sync/replay_window.h"

using namespace pairwall::sync;

TEST_CASE("replay window accepts each counter once", "[sync][replay]") {
  ReplayWindow w;
  CHECK_FALSE(w.check(0));  // 0 is never sent
  REQUIRE(w.check(1));
  w.commit(1);
  CHECK_FALSE(w.check(1));
  CHECK(w.check(3));
  w.commit(3);
  CHECK(w.check(2));  // late, within the window
  w.commit(2);
  CHECK_FALSE(w.check(2));
  CHECK_FALSE(w.check(3));
  CHECK(w.highest() == 3);
}

TEST_CASE("replay window edges", "[sync][replay]") {
  constexpr uint64_t n = ReplayWindow::kSize;
  ReplayWindow w;
  w.commit(n + 10);
  SECTION("the oldest counter inside the window is accepted once") {
    const uint64_t oldest = n + 10 - (n - 1);
    REQUIRE(w.check(oldest));
    w.commit(oldest);
    CHECK_FALSE(w.check(oldest));
  }
  SECTION("one older than the window is rejected though never seen") {
    CHECK_FALSE(w.check(10));
    CHECK_FALSE(w.check(1));
  }
  SECTION("sliding forgets bits that wrap around") {
    // Counter n+10 and 10 share a bit; after moving to 2n+10, n+10 is exactly out of range and
    // 2n+9 (never seen) must be accepted even though its bit index was used before.
    w.commit(2 * n + 10);
    CHECK_FALSE(w.check(n + 10));
    CHECK(w.check(2 * n + 9));
    CHECK(w.check(n + 11));
  }
  SECTION("a jump past the whole window clears it") {
    w.commit(10 * n);
    CHECK(w.check(10 * n - 1));
    CHECK(w.check(10 * n - (n - 1)));
    CHECK_FALSE(w.check(10 * n - n));
  }
  SECTION("reset starts over") {
    w.reset();
    CHECK(w.check(1));
    CHECK(w.highest() == 0);
  }
}

namespace {

struct Sink {
  std::vector<uint64_t> delivered;
  std::vector<std::pair<uint64_t, uint64_t>> gaps;
  auto deliver() {
    return [this](uint64_t seq, std::span<const uint8_t> p) {
      CHECK(p.size() == 1);
      CHECK(p[0] == static_cast<uint8_t>(seq));
      delivered.push_back(seq);
    };
  }
  auto give_up() {
    return [this](uint64_t a, uint64_t b) { gaps.emplace_back(a, b); };
  }
};

std::vector<uint8_t> body(uint64_t seq) {
  return {static_cast<uint8_t>(seq)};
}

}  // namespace

TEST_CASE("receive window delivers in order and holds early datagrams", "[sync][rwin]") {
  ReceiveWindow w(64);
  w.reset(1);
  Sink s;
  CHECK(w.accept(1, body(1), s.deliver()) == ReceiveWindow::Accept::Delivered);
  CHECK(w.accept(3, body(3), s.deliver()) == ReceiveWindow::Accept::Held);
  CHECK(w.accept(4, body(4), s.deliver()) == ReceiveWindow::Accept::Held);
  CHECK(s.delivered == std::vector<uint64_t>{1});
  CHECK(w.base() == 1);
  CHECK(w.sack_bits(1) == 0b11);  // 3 and 4 (bit i = cum + 2 + i)
  CHECK(w.accept(3, body(3), s.deliver()) == ReceiveWindow::Accept::Duplicate);
  CHECK(w.accept(2, body(2), s.deliver()) == ReceiveWindow::Accept::Delivered);
  CHECK(s.delivered == std::vector<uint64_t>{1, 2, 3, 4});
  CHECK(w.base() == 4);
  CHECK(w.held() == 0);
  CHECK(w.accept(2, body(2), s.deliver()) == ReceiveWindow::Accept::Duplicate);
  CHECK(s.gaps.empty());
}

TEST_CASE("receive window gives up what the sender can no longer resend", "[sync][rwin]") {
  ReceiveWindow w(64);
  w.reset(10);
  Sink s;
  w.accept(12, body(12), s.deliver());
  w.accept(15, body(15), s.deliver());
  // The sender's oldest resendable sequence is now 14: 10, 11, 13 are gone for good.
  w.advance_to(14, s.deliver(), s.give_up());
  CHECK(s.gaps == std::vector<std::pair<uint64_t, uint64_t>>{{10, 11}, {13, 13}});
  CHECK(s.delivered == std::vector<uint64_t>{12});
  CHECK(w.base() == 13);
  // 14 arrives: 14 and the held 15 are delivered.
  w.accept(14, body(14), s.deliver());
  CHECK(s.delivered == std::vector<uint64_t>{12, 14, 15});
  // An older send base changes nothing.
  w.advance_to(3, s.deliver(), s.give_up());
  CHECK(s.gaps.size() == 2);
}

TEST_CASE("receive window drops a datagram beyond it and gives nothing up", "[sync][rwin]") {
  ReceiveWindow w(64);
  w.reset(1);
  Sink s;
  w.accept(2, body(2), s.deliver());
  // 100 is 100 past base 0 with room for 64: the sender still holds 1, so it is not given up.
  CHECK(w.accept(100, body(100), s.deliver()) == ReceiveWindow::Accept::Beyond);
  CHECK(s.gaps.empty());
  CHECK(s.delivered.empty());
  CHECK(w.base() == 0);
  CHECK_FALSE(w.has(100));
  // 1 comes again: 1 and the held 2 are delivered, and 64 past 2 is inside the window now.
  w.accept(1, body(1), s.deliver());
  CHECK(s.delivered == std::vector<uint64_t>{1, 2});
  CHECK(w.accept(66, body(66), s.deliver()) == ReceiveWindow::Accept::Held);
}

// [sync] resend_window raised by a reload: room for the peer's larger window.
TEST_CASE("receive window grown keeps what it holds, and holds further; it never shrinks", "[sync][rwin]") {
  ReceiveWindow w(64);
  w.reset(1);
  Sink s;
  w.accept(1, body(1), s.deliver());
  w.accept(3, body(3), s.deliver());
  w.accept(60, body(60), s.deliver());
  CHECK(w.accept(100, body(100), s.deliver()) == ReceiveWindow::Accept::Beyond);
  w.grow(200);
  CHECK(w.capacity() == 200);
  CHECK(w.held() == 2);
  CHECK(w.has(3));
  CHECK(w.has(60));
  CHECK_FALSE(w.has(59));
  CHECK(w.accept(100, body(100), s.deliver()) == ReceiveWindow::Accept::Held);
  w.grow(10);
  CHECK(w.capacity() == 200);
  // 2 arrives: everything held in order behind it goes, each once.
  w.accept(2, body(2), s.deliver());
  CHECK(s.delivered == std::vector<uint64_t>{1, 2, 3});
  CHECK(w.base() == 3);
  for (uint64_t seq = 4; seq <= 100; ++seq) w.accept(seq, body(seq), s.deliver());
  CHECK(s.delivered.size() == 100);
  CHECK(s.delivered.back() == 100);
  CHECK(w.held() == 0);
}

TEST_CASE("receive window: a huge jump of the send base is one gap", "[sync][rwin]") {
  ReceiveWindow w(64);
  w.reset(1);
  Sink s;
  w.advance_to(1'000'001, s.deliver(), s.give_up());
  CHECK(s.gaps == std::vector<std::pair<uint64_t, uint64_t>>{{1, 1'000'000}});
  CHECK(w.base() == 1'000'000);
}

TEST_CASE("receive window: held runs, up to the top of the sequence space", "[sync][rwin]") {
  ReceiveWindow w(64);
  w.reset(1);
  Sink s;
  for (uint64_t seq : {3, 4, 7}) w.accept(seq, body(seq), s.deliver());
  std::vector<uint64_t> runs;
  w.held_runs(w.base(), 8, runs);
  CHECK(runs == std::vector<uint64_t>{2, 2, 2, 1});  // 1-2 missing, 3-4 held, 5-6 missing, 7 held
  w.held_runs(w.base(), 3, runs);
  CHECK(runs == std::vector<uint64_t>{2, 2});

  // The last sequence a 64-bit counter can carry, held behind three missing ones.
  const uint64_t top = UINT64_MAX;
  w.reset(top - 3);
  w.accept(top, body(top), s.deliver());
  w.held_runs(w.base(), 8, runs);
  CHECK(runs == std::vector<uint64_t>{3, 1});
  CHECK(w.sack_bits(w.base()) == 0b100);  // the top, cum + 4; nothing past it
}
