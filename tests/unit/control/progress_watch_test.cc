// Stuck versus idle packet workers, as the watchdog and `health` see them.
#include "daemon/control/progress_watch.h"

#include <catch2/catch.hpp>

using pairwall::control::ProgressWatch;
using namespace std::chrono_literals;

namespace {
ProgressWatch::Clock::time_point at(std::chrono::milliseconds ms) {
  return ProgressWatch::Clock::time_point{} + 1h + ms;
}
}  // namespace

TEST_CASE("progress watch: an idle worker is never stuck", "[watch]") {
  ProgressWatch w(3s);
  for (int t = 0; t <= 60; ++t) {
    w.tick(at(t * 1000ms), {{0, 42, 0u}});
    CHECK_FALSE(w.stuck());
  }
}

TEST_CASE("progress watch: packets waiting without progress is stuck after the delay", "[watch]") {
  ProgressWatch w(3s);
  w.tick(at(0ms), {{0, 10, 0u}, {1, 5, 7u}});
  CHECK_FALSE(w.stuck());
  w.tick(at(1000ms), {{0, 11, 0u}, {1, 5, 7u}});
  CHECK_FALSE(w.stuck());
  w.tick(at(2999ms), {{0, 12, 3u}, {1, 5, 9u}});
  CHECK_FALSE(w.stuck());
  w.tick(at(3000ms), {{0, 13, 3u}, {1, 5, 9u}});
  REQUIRE(w.stuck());
  CHECK(*w.stuck() == "queue 1 worker made no progress for 3 s with 9 packets waiting");
  CHECK(w.any_stuck());
  // It moves again: no longer stuck.
  w.tick(at(4000ms), {{0, 13, 0u}, {1, 6, 9u}});
  CHECK_FALSE(w.stuck());
  CHECK_FALSE(w.any_stuck());
}

TEST_CASE("progress watch: a worker that keeps moving with a busy queue is fine", "[watch]") {
  ProgressWatch w(3s);
  for (int t = 0; t <= 20; ++t) {
    w.tick(at(t * 1000ms), {{0, static_cast<uint64_t>(t), 500u}});
    CHECK_FALSE(w.stuck());
  }
}

TEST_CASE("progress watch: the queue draining resets the clock", "[watch]") {
  ProgressWatch w(3s);
  w.tick(at(0ms), {{0, 1, 4u}});
  w.tick(at(2000ms), {{0, 1, 0u}});  // idle for a moment
  w.tick(at(4000ms), {{0, 1, 2u}});
  CHECK_FALSE(w.stuck());
  w.tick(at(7000ms), {{0, 1, 2u}});
  CHECK(w.stuck());
}

TEST_CASE("progress watch: without the kernel's view nobody is accused", "[watch]") {
  ProgressWatch w(1s);
  for (int t = 0; t <= 10; ++t) {
    w.tick(at(t * 1000ms), {{0, 1, std::nullopt}});
    CHECK_FALSE(w.stuck());
  }
}
