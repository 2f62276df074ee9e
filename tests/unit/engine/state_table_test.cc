#include "daemon/engine/state_table.h"

#include <catch2/catch.hpp>
#include <set>
#include <thread>
#include <vector>

using namespace pairwall::engine;

namespace {

StateKey tcp_key(uint32_t a, uint16_t pa, uint32_t b, uint16_t pb) {
  StateKey k;
  k.family = Family::V4;
  k.proto = 6;
  k.addr[0] = IpAddress::v4(a);
  k.addr[1] = IpAddress::v4(b);
  k.port[0] = pa;
  k.port[1] = pb;
  return k;
}

constexpr SipKey kKey{0x0123456789abcdefULL, 0xfedcba9876543210ULL};

StateTable::Handle make(StateTable& t, const StateKey& k, uint64_t counter, Millis now = Millis{0},
                        Millis duration = Millis{1000}, StateTable::CreateStatus* out = nullptr) {
  StateTable::CreateStatus status;
  auto h = t.create(k, k, StateId{1, counter}, TimeoutClass::TcpEstablished, duration, now, status);
  if (out) *out = status;
  return h;
}

}  // namespace

TEST_CASE("siphash13 gives the reference outputs", "[state_table]") {
  // The reference vectors' key (bytes 0..15) and messages (bytes 0..n-1), read as little-endian
  // words: the outputs for the empty, the 8-byte and the 16-byte message.
  const SipKey key{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  const uint64_t message[2] = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  CHECK(siphash13(key, message, 0) == 0xabac0158050fc4dcull);
  CHECK(siphash13(key, message, 1) == 0x369095118d299a8eull);
  CHECK(siphash13(key, message, 2) == 0xcc4fdd1a7d908b66ull);
}

TEST_CASE("hash is symmetric and keyed", "[state_table]") {
  StateTable t(16, kKey, 100);
  const auto k = tcp_key(0x0a000001, 1234, 0x0a000002, 80);
  CHECK(t.hash(k) == t.hash(k.reversed()));
  CHECK(t.hash(k) != t.hash(tcp_key(0x0a000001, 1235, 0x0a000002, 80)));
  StateTable other(16, SipKey{1, 2}, 100);
  CHECK(t.hash(k) != other.hash(k));
}

TEST_CASE("created state is found from both directions", "[state_table]") {
  StateTable t(16, kKey, 100);
  const auto k = tcp_key(0x0a000001, 1234, 0x0a000002, 80);
  StateTable::CreateStatus status;
  {
    auto h = make(t, k, 1, Millis{0}, Millis{1000}, &status);
    REQUIRE(h);
  }
  CHECK(status == StateTable::CreateStatus::Created);
  CHECK(t.size() == 1);

  auto fwd = t.find(k, t.hash(k));
  REQUIRE(fwd);
  CHECK_FALSE(fwd.reversed());
  CHECK(fwd->id.counter == 1);
  fwd.release();

  const auto rev = k.reversed();
  auto back = t.find(rev, t.hash(rev));
  REQUIRE(back);
  CHECK(back.reversed());
  back.release();

  const auto miss = tcp_key(0x0a000001, 1234, 0x0a000003, 80);
  CHECK_FALSE(t.find(miss, t.hash(miss)));
}

TEST_CASE("creating an existing key returns the existing entry", "[state_table]") {
  StateTable t(4, kKey, 100);
  const auto k = tcp_key(1, 2, 3, 4);
  make(t, k, 1).release();
  StateTable::CreateStatus status;
  auto h = make(t, k.reversed(), 2, Millis{0}, Millis{1000}, &status);
  CHECK(status == StateTable::CreateStatus::Exists);
  REQUIRE(h);
  CHECK(h->id.counter == 1);
  h.release();
  CHECK(t.size() == 1);
}

TEST_CASE("the limit is hard and counted by the caller", "[state_table]") {
  StateTable t(4, kKey, 3);
  for (uint32_t i = 0; i < 3; ++i) {
    StateTable::CreateStatus status;
    make(t, tcp_key(i, 1, 100, 2), i + 1, Millis{0}, Millis{1000}, &status).release();
    REQUIRE(status == StateTable::CreateStatus::Created);
  }
  StateTable::CreateStatus status;
  auto h = make(t, tcp_key(99, 1, 100, 2), 99, Millis{0}, Millis{1000}, &status);
  CHECK(status == StateTable::CreateStatus::Full);
  CHECK_FALSE(h);
  CHECK(t.size() == 3);
}

TEST_CASE("expiry removes exactly the expired entries, touched ones survive", "[state_table]") {
  StateTable t(8, kKey, 1000);
  for (uint32_t i = 0; i < 100; ++i) make(t, tcp_key(i, 1, 100, 2), i + 1, Millis{i}, Millis{1000}).release();
  // Entries 0..49 get a packet at t=500: they now expire at 1500.
  for (uint32_t i = 0; i < 50; ++i) {
    const auto k = tcp_key(i, 1, 100, 2);
    auto h = t.find(k, t.hash(k));
    REQUIRE(h);
    t.touch(h, TimeoutClass::TcpEstablished, Millis{1000}, Millis{500});
  }
  std::set<uint64_t> gone;
  const auto collect = [&](const StateEntry& e) { gone.insert(e.id.counter); };
  // Untouched entries i = 50..99 expire at 1000 + i; touched ones at 1500.
  CHECK(t.expire(Millis{1074}, collect) == 25);
  CHECK(t.expire(Millis{1099}, collect) == 25);
  CHECK(gone.size() == 50);
  CHECK(*gone.begin() == 51);
  CHECK(*gone.rbegin() == 100);
  CHECK(t.size() == 50);
  CHECK(t.expire(Millis{1499}, nullptr) == 0);
  CHECK(t.expire(Millis{1500}, nullptr) == 50);
  CHECK(t.size() == 0);
}

TEST_CASE("different timeouts live in different queues", "[state_table]") {
  StateTable t(1, kKey, 100);
  make(t, tcp_key(1, 1, 2, 2), 1, Millis{0}, Millis{10'000}).release();
  make(t, tcp_key(3, 1, 2, 2), 2, Millis{0}, Millis{100}).release();
  CHECK(t.expire(Millis{100}, nullptr) == 1);
  const auto k = tcp_key(1, 1, 2, 2);
  CHECK(t.find(k, t.hash(k)));
}

TEST_CASE("moving a state to a shorter timeout class expires it on the new timeout", "[state_table]") {
  StateTable t(1, kKey, 100);
  const auto k = tcp_key(1, 1, 2, 2);
  make(t, k, 1, Millis{0}, Millis{86'400'000}).release();
  {
    auto h = t.find(k, t.hash(k));
    t.touch(h, TimeoutClass::TcpClosed, Millis{90'000}, Millis{10});
    CHECK(h->timeout == TimeoutClass::TcpClosed);
  }
  CHECK(t.expire(Millis{90'009}, nullptr) == 0);
  CHECK(t.expire(Millis{90'010}, nullptr) == 1);
}

TEST_CASE("translated states are found by both keys and removed from both indexes", "[state_table]") {
  StateTable t(64, kKey, 1000);
  // Many pairs so that some stack/wire keys land in different shards, in both orders.
  for (uint32_t i = 0; i < 200; ++i) {
    const auto stack = tcp_key(0x0a000000 + i, 1000, 0x08080808, 53);
    const auto wire = tcp_key(0xcb007101, static_cast<uint16_t>(50000 + i), 0x08080808, 53);
    StateTable::CreateStatus status;
    auto h = t.create(stack, wire, StateId{1, i + 1}, TimeoutClass::UdpFirst, Millis{100}, Millis{0}, status);
    REQUIRE(status == StateTable::CreateStatus::Created);
    CHECK(h->translated());
  }
  for (uint32_t i = 0; i < 200; ++i) {
    const auto wire_reply = tcp_key(0x08080808, 53, 0xcb007101, static_cast<uint16_t>(50000 + i));
    auto h = t.find(wire_reply, t.hash(wire_reply));
    REQUIRE(h);
    CHECK(h.key_index() == 1);
    CHECK(h.reversed());
    CHECK(h->id.counter == i + 1);
  }
  CHECK(t.expire(Millis{100}, nullptr) == 200);
  CHECK(t.size() == 0);
  const auto wire0 = tcp_key(0xcb007101, 50000, 0x08080808, 53);
  CHECK_FALSE(t.find(wire0, t.hash(wire0)));
}

TEST_CASE("find by id, erase, clear", "[state_table]") {
  StateTable t(8, kKey, 100);
  for (uint32_t i = 0; i < 20; ++i) make(t, tcp_key(i, 1, 100, 2), i + 1).release();
  {
    auto h = t.find_by_id(StateId{1, 7});
    REQUIRE(h);
    CHECK(h->key(0).addr[0] == IpAddress::v4(6));
    t.erase(h);
    CHECK_FALSE(h);
  }
  CHECK_FALSE(t.find_by_id(StateId{1, 7}));
  CHECK_FALSE(t.find_by_id(StateId{2, 8}));
  CHECK(t.size() == 19);
  std::size_t seen = 0;
  t.for_each([&](const StateEntry&) { ++seen; });
  CHECK(seen == 19);
  CHECK(t.clear(nullptr) == 19);
  CHECK(t.size() == 0);
}

TEST_CASE("entries are reused after removal without leaking the limit", "[state_table]") {
  StateTable t(2, kKey, 10);
  for (int round = 0; round < 50; ++round) {
    for (uint32_t i = 0; i < 10; ++i) {
      StateTable::CreateStatus status;
      make(t, tcp_key(i, 1, 2, 3), static_cast<uint64_t>(round) * 100 + i, Millis{round * 10}, Millis{5},
           &status)
          .release();
      REQUIRE(status == StateTable::CreateStatus::Created);
    }
    REQUIRE(t.expire(Millis{round * 10 + 5}, nullptr) == 10);
  }
  CHECK(t.size() == 0);
}

TEST_CASE("concurrent workers create, find and expire without losing entries", "[state_table]") {
  StateTable t(16, kKey, 1'000'000);
  constexpr uint32_t kPerThread = 20'000;
  std::vector<std::thread> threads;
  for (uint32_t w = 0; w < 4; ++w) {
    threads.emplace_back([&t, w] {
      for (uint32_t i = 0; i < kPerThread; ++i) {
        const auto k = tcp_key(w << 24 | i, 1, 7, 2);
        StateTable::CreateStatus status;
        t.create(k, k, StateId{w, i + 1}, TimeoutClass::TcpFirst, Millis{1000}, Millis{0}, status).release();
        const auto r = k.reversed();
        auto h = t.find(r, t.hash(r));
        if (!h || h->id.counter != i + 1) std::abort();
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(t.size() == 4 * kPerThread);
  CHECK(t.expire(Millis{1000}, nullptr) == 4 * kPerThread);
}

TEST_CASE("a busy entry stays while touched and expires at most kRequeueAfter late", "[state_table]") {
  StateTable t(1, kKey, 10);
  const auto k = tcp_key(1, 1, 2, 2);
  make(t, k, 1, Millis{0}, Millis{2000}).release();
  make(t, tcp_key(5, 1, 2, 2), 2, Millis{0}, Millis{2000}).release();  // idle neighbour
  std::size_t expired_early = 0;
  for (int64_t ms = 10; ms <= 5000; ms += 10) {
    auto h = t.find(k, t.hash(k));
    REQUIRE(h);
    t.touch(h, TimeoutClass::TcpEstablished, Millis{2000}, Millis{ms});
    h.release();
    if (ms % 250 == 0) expired_early += t.expire(Millis{ms}, nullptr);
  }
  CHECK(expired_early == 1);  // only the idle neighbour, at 2000
  CHECK(t.expire(Millis{6999}, nullptr) == 0);
  CHECK(t.expire(Millis{7000} + StateTable::kRequeueAfter, nullptr) == 1);
}

TEST_CASE("an entry learned from the peer expires by its time left, never early, at most an eighth late",
          "[state_table]") {
  constexpr Millis kDay{86'400'000};
  const Millis now{kDay * 2};
  for (const int64_t left : {1, 900, 1'024, 1'025, 1'500, 2'049, 59'999, 60'000, 3'600'000, 86'399'999}) {
    INFO("time left " << left << " ms");
    StateTable t(1, kKey, 100);
    // Another entry of the same duration, active just now, queued ahead of it.
    make(t, tcp_key(9, 1, 2, 2), 9, now, kDay).release();
    const auto k = tcp_key(1, 1, 2, 2);
    const Millis last_seen = now + Millis{left} - kDay;
    make(t, k, 1, last_seen, kDay).release();
    {
      auto h = t.find(k, t.hash(k));
      REQUIRE(h);
      t.file_learned(h, TimeoutClass::TcpEstablished, kDay, last_seen, now);
    }
    CHECK(t.expire(now + Millis{left - 1}, nullptr) == 0);
    t.expire(now + std::max(Millis{left + left / 8}, Millis{1'024}), nullptr);
    CHECK_FALSE(t.find(k, t.hash(k)));
  }
}

TEST_CASE("a learned entry the peer or a packet saw of late is filed by its duration", "[state_table]") {
  StateTable t(1, kKey, 100);
  const auto k = tcp_key(1, 1, 2, 2);
  make(t, k, 1, Millis{0}, Millis{10'000}).release();
  {
    auto h = t.find(k, t.hash(k));
    // 8.5 s left of 10 s: filed by its time left.
    t.file_learned(h, TimeoutClass::TcpEstablished, Millis{10'000}, Millis{39'500}, Millis{41'000});
    // Then a packet at 45 s: 10 s from then, as any entry of that duration.
    t.touch(h, TimeoutClass::TcpEstablished, Millis{10'000}, Millis{45'000});
  }
  CHECK(t.expire(Millis{54'999}, nullptr) == 0);
  CHECK(t.expire(Millis{55'000}, nullptr) == 1);
}

TEST_CASE("entries stay findable across a raised limit and into huge-page chunks", "[state_table]") {
  // 3 000 entries in 1 shard: past the small chunks, so some come from the 2 MiB chunks; the
  // raised limit rehashes the key index with every entry in it.
  StateTable t(1, kKey, 100);
  t.set_limit(3'000);
  for (uint32_t i = 0; i < 3'000; ++i) {
    const auto k = tcp_key(0x0a000000 + i, 1000, 0x0a0000ff, 80);
    REQUIRE(make(t, k, i + 1));
    if (i == 1'500) t.set_limit(100'000);
  }
  CHECK(t.size() == 3'000);
  for (uint32_t i = 0; i < 3'000; ++i) {
    const auto k = tcp_key(0x0a000000 + i, 1000, 0x0a0000ff, 80);
    t.prefetch_bucket(t.hash(k));
    t.prefetch_entry(t.hash(k));
    auto h = t.find(k.reversed(), t.hash(k));
    REQUIRE(h);
    CHECK(h->id.counter == i + 1);
    CHECK(reinterpret_cast<uintptr_t>(h.get()) % 64 == 0);
  }
  CHECK(t.clear(nullptr) == 3'000);
  CHECK(t.size() == 0);
}

TEST_CASE("an entry seen just after it was queued expires on time behind entries queued later",
          "[state_table]") {
  // Seen 0.5 s after it was queued: not requeued then (kRequeueAfter), so its place says 0 while
  // it is due at 10.5 s. The entries queued after it must not hold it back until they expire.
  StateTable t(1, kKey, 100);
  const auto k = tcp_key(1, 1, 2, 2);
  make(t, k, 1, Millis{0}, Millis{10'000}).release();
  {
    auto h = t.find(k, t.hash(k));
    REQUIRE(h);
    t.touch(h, TimeoutClass::TcpEstablished, Millis{10'000}, Millis{500});
  }
  make(t, tcp_key(3, 1, 2, 2), 2, Millis{5'000}, Millis{10'000}).release();
  CHECK(t.expire(Millis{10'000}, nullptr) == 0);
  CHECK(t.expire(Millis{10'499}, nullptr) == 0);
  CHECK(t.expire(Millis{10'500} + StateTable::kRequeueAfter, nullptr) == 1);
  CHECK_FALSE(t.find(k, t.hash(k)));
  CHECK(t.expire(Millis{14'999}, nullptr) == 0);
  CHECK(t.expire(Millis{15'000}, nullptr) == 1);
}

TEST_CASE("TranslatorRefs keeps two 12-bit rule indexes apart, larger ones as none", "[state_table]") {
  TranslatorRefs refs;
  CHECK_FALSE(refs.any());
  CHECK(refs.get(0) == TranslatorRefs::kNone);
  CHECK(refs.get(1) == TranslatorRefs::kNone);
  for (const uint32_t in : {0u, 1u, 0x0abu, 0x7ffu, 0xffeu}) {
    for (const uint32_t out : {0u, 0x0f0u, 0x123u, 0xffeu, TranslatorRefs::kNone}) {
      INFO(in << " " << out);
      TranslatorRefs r;
      r.set(1, out);
      r.set(0, in);
      CHECK(r.get(0) == in);
      CHECK(r.get(1) == out);
      r.set(1, in);  // either order, and written over
      CHECK(r.get(0) == in);
      CHECK(r.get(1) == in);
      CHECK(r.any());
    }
  }
  TranslatorRefs beyond;
  beyond.set(0, 0x1000);
  beyond.set(1, 70000);
  CHECK(beyond.get(0) == TranslatorRefs::kNone);
  CHECK(beyond.get(1) == TranslatorRefs::kNone);
  CHECK_FALSE(beyond.any());
}
