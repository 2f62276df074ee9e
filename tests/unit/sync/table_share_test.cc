// The tables the pair shares: a version cut into chunks and put together again, stale and
// malformed chunks, the gap between two versions, and two protocol cores carrying tables over a
// lossy link, to a peer that restarts, and past a resync.
#include <algorithm>
#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness.h"

using namespace pairwall::sync;
using namespace pairwall::sync::test;
using pairwall::engine::AgedTableEntry;
using pairwall::engine::Family;
using pairwall::engine::IpAddress;
using pairwall::engine::IpPrefix;

namespace {

constexpr Micros ms(int64_t n) {
  return Micros{n * 1000};
}

AgedTableEntry v4(uint32_t address, uint8_t length = 32, uint32_t age_s = 0, bool negated = false) {
  return {{negated, IpPrefix{Family::V4, IpAddress::v4(address), length}}, age_s};
}

AgedTableEntry v6(uint64_t hi, uint64_t lo, uint8_t length = 128) {
  return {{false, IpPrefix{Family::V6, IpAddress{hi, lo}, length}}, 0};
}

// `n` entries, IPv4 and IPv6 alternating, distinct.
std::vector<AgedTableEntry> entries(std::size_t n, uint32_t base = 0x0a000000) {
  std::vector<AgedTableEntry> out;
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(i % 2 == 0 ? v4(base + static_cast<uint32_t>(i), 32, static_cast<uint32_t>(i))
                             : v6(0x20010db800000000ull, i));
  }
  return out;
}

// Every chunk of `out` through `to`, in order: the table the last one completed.
std::optional<SharedTable> deliver(TableShare& to, const std::deque<wire::Message>& out, Micros now) {
  std::optional<SharedTable> done;
  for (const wire::Message& m : out) {
    SharedTable t;
    if (to.receive(m.table_chunk(), now, t) == TableShare::Chunk::Complete) done = std::move(t);
  }
  return done;
}

}  // namespace

TEST_CASE("a table larger than a datagram goes in chunks that each fit, and comes whole", "[sync][tables]") {
  TableShare from;
  TableShare to;
  const std::vector<AgedTableEntry> sent = entries(500);
  from.set_local({"bruteforce", sent}, ms(0));
  REQUIRE(from.next_due() == ms(0));
  std::deque<wire::Message> out;
  const std::size_t budget = 1200;
  REQUIRE(from.take_due(ms(2500), budget, out) == 1);
  REQUIRE(out.size() > 5);
  for (const wire::Message& m : out) {
    // As SyncProtocol::add_message counts a message in its batch.
    CHECK(m.ByteSizeLong() + 3 <= budget);
    CHECK(m.table_chunk().count() == out.size());
    CHECK(m.table_chunk().version() == out.front().table_chunk().version());
  }
  CHECK(from.next_due() == Micros::max());

  const auto got = deliver(to, out, ms(2500));
  REQUIRE(got);
  CHECK(got->name == "bruteforce");
  REQUIRE(got->entries.size() == sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) {
    CHECK(got->entries[i].entry == sent[i].entry);
    // Aged by the 2.5 s the table waited on the sender, in whole seconds.
    CHECK(got->entries[i].age_s == sent[i].age_s + 2);
  }
  CHECK(to.tables() == 1);  // held, for a bulk to a peer that restarts
}

TEST_CASE("an empty table goes as one chunk and empties the peer's", "[sync][tables]") {
  TableShare from;
  TableShare to;
  from.set_local({"t", {}}, ms(0));
  std::deque<wire::Message> out;
  REQUIRE(from.take_due(ms(0), 1400, out) == 1);
  REQUIRE(out.size() == 1);
  const auto got = deliver(to, out, ms(0));
  REQUIRE(got);
  CHECK(got->entries.empty());
}

TEST_CASE("chunks out of order complete the version; a chunk again, or an older version, is stale",
          "[sync][tables]") {
  TableShare from;
  TableShare to;
  from.set_local({"t", entries(200)}, ms(0));
  std::deque<wire::Message> first;
  from.take_due(ms(0), 600, first);
  REQUIRE(first.size() >= 3);
  from.set_local({"t", entries(10, 0x0b000000)}, ms(0));
  CHECK(from.next_due() == ms(1000));  // one version a second
  std::deque<wire::Message> second;
  CHECK(from.take_due(ms(999), 600, second) == 0);
  REQUIRE(from.take_due(ms(1000), 600, second) == 1);

  SharedTable t;
  // The first version's chunks but its first, backwards.
  for (std::size_t i = first.size() - 1; i > 0; --i)
    CHECK(to.receive(first[i].table_chunk(), ms(1), t) == TableShare::Chunk::Partial);
  CHECK(to.receive(first[1].table_chunk(), ms(1), t) == TableShare::Chunk::Stale);
  CHECK(to.receive(first[0].table_chunk(), ms(1), t) == TableShare::Chunk::Complete);
  CHECK(t.entries.size() == 200);
  CHECK(to.receive(first[0].table_chunk(), ms(1), t) == TableShare::Chunk::Stale);

  // The newer version, then a resync's copy of the older one.
  REQUIRE(deliver(to, second, ms(1001)));
  for (const wire::Message& m : first)
    CHECK(to.receive(m.table_chunk(), ms(1002), t) == TableShare::Chunk::Stale);

  // A newer version begun supersedes one being put together.
  TableShare other;
  CHECK(other.receive(first[0].table_chunk(), ms(0), t) == TableShare::Chunk::Partial);
  REQUIRE(deliver(other, second, ms(0)));
  CHECK(other.receive(first[1].table_chunk(), ms(0), t) == TableShare::Chunk::Stale);

  // A peer that restarted numbers its versions from 1 again.
  to.peer_restarted();
  TableShare restarted;
  restarted.set_local({"t", entries(3)}, ms(0));
  std::deque<wire::Message> again;
  restarted.take_due(ms(0), 600, again);
  REQUIRE(again.front().table_chunk().version() < second.front().table_chunk().version());
  REQUIRE(deliver(to, again, ms(2)));
}

TEST_CASE("malformed chunks are refused and change nothing", "[sync][tables]") {
  TableShare to;
  SharedTable t;
  const auto chunk = [](std::string name, uint64_t version, uint32_t index, uint32_t count) {
    wire::TableChunk c;
    c.set_table(std::move(name));
    c.set_version(version);
    c.set_index(index);
    c.set_count(count);
    return c;
  };
  CHECK(to.receive(chunk("", 1, 0, 1), ms(0), t) == TableShare::Chunk::Malformed);
  CHECK(to.receive(chunk(std::string(32, 'a'), 1, 0, 1), ms(0), t) == TableShare::Chunk::Malformed);
  CHECK(to.receive(chunk("bad name", 1, 0, 1), ms(0), t) == TableShare::Chunk::Malformed);
  CHECK(to.receive(chunk("t", 0, 0, 1), ms(0), t) == TableShare::Chunk::Malformed);
  CHECK(to.receive(chunk("t", 1, 1, 1), ms(0), t) == TableShare::Chunk::Malformed);
  CHECK(to.receive(chunk("t", 1, 0, 0), ms(0), t) == TableShare::Chunk::Malformed);
  CHECK(to.receive(chunk("t", 1, 0, TableShare::kMaxChunks + 1), ms(0), t) == TableShare::Chunk::Malformed);

  auto with_entry = [&](std::string address, uint32_t prefix) {
    wire::TableChunk c = chunk("t", 1, 0, 2);
    auto* e = c.add_entries();
    e->set_address(std::move(address));
    e->set_prefix(prefix);
    return c;
  };
  CHECK(to.receive(with_entry(std::string("\x0a\x00\x00", 3), 24), ms(0), t) == TableShare::Chunk::Malformed);
  CHECK(to.receive(with_entry(std::string("\x0a\x00\x00\x00", 4), 33), ms(0), t) ==
        TableShare::Chunk::Malformed);
  // 10.0.0.1/8: host bits set, as pfctl refuses it.
  CHECK(to.receive(with_entry(std::string("\x0a\x00\x00\x01", 4), 8), ms(0), t) ==
        TableShare::Chunk::Malformed);
  CHECK(to.receive(with_entry(std::string(16, '\x01'), 64), ms(0), t) == TableShare::Chunk::Malformed);
  // A chunk of a count other than its version's.
  CHECK(to.receive(with_entry(std::string("\x0a\x00\x00\x00", 4), 8), ms(0), t) ==
        TableShare::Chunk::Partial);
  CHECK(to.receive(chunk("t", 1, 1, 3), ms(0), t) == TableShare::Chunk::Malformed);
  CHECK(to.receive(chunk("t", 1, 1, 2), ms(0), t) == TableShare::Chunk::Complete);
  REQUIRE(t.entries.size() == 1);
  CHECK(t.entries[0].entry.prefix == IpPrefix{Family::V4, IpAddress::v4(0x0a000000), 8});
}

TEST_CASE("send_all sends every table held at once, the peer's among them", "[sync][tables]") {
  TableShare node;
  TableShare peer;
  node.set_local({"mine", entries(2)}, ms(0));
  std::deque<wire::Message> out;
  node.take_due(ms(0), 1400, out);
  peer.set_local({"theirs", entries(3)}, ms(0));
  std::deque<wire::Message> theirs;
  peer.take_due(ms(0), 1400, theirs);
  REQUIRE(deliver(node, theirs, ms(0)));

  node.send_all(ms(10));  // within the gap of "mine"'s last version: a bulk does not wait
  CHECK(node.next_due() == ms(10));
  out.clear();
  CHECK(node.take_due(ms(10), 1400, out) == 2);
}

namespace {

struct Taken {
  std::vector<SharedTable> tables;
  void listen(SyncProtocol& p) {
    p.on_peer_table([this](const SharedTable& t) { tables.push_back(t); });
  }
};

void settle(Pair& p) {
  p.start();
  p.run(ms(300));
  REQUIRE(p.a->bulk_done());
  REQUIRE(p.b->bulk_done());
}

// Takes the link down and fills A's window with live records: what A queues next waits behind them.
void stall_a(Pair& p) {
  p.a_to_b.up = false;
  p.b_to_a.up = false;
  for (uint64_t i = 1; i <= 2000; ++i) p.change(true, make_insert(1, i));
  p.run(ms(100));
}

}  // namespace

TEST_CASE("a shared table reaches the peer over a lossy link, and a restarted peer gets it in its bulk",
          "[sync][tables][protocol]") {
  Pair p;
  settle(p);
  p.a_to_b.loss = 0.2;
  p.b_to_a.loss = 0.2;
  Taken on_b;
  on_b.listen(*p.b);
  const std::vector<AgedTableEntry> sent = entries(300);
  p.a->share_table({"bruteforce", sent}, p.now);
  p.run(ms(3000));
  REQUIRE(on_b.tables.size() == 1);
  CHECK(on_b.tables[0].name == "bruteforce");
  REQUIRE(on_b.tables[0].entries.size() == sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) CHECK(on_b.tables[0].entries[i].entry == sent[i].entry);
  CHECK(p.a->counters().tables_sent == 1);
  CHECK(p.b->counters().tables_received == 1);

  // Two changes within a second: the second waits for the gap, and goes.
  p.a->share_table({"bruteforce", entries(1)}, p.now);
  p.run(ms(50));
  p.a->share_table({"bruteforce", entries(2)}, p.now);
  p.run(ms(300));
  REQUIRE(on_b.tables.size() == 2);
  CHECK(on_b.tables[1].entries.size() == 1);
  p.run(ms(2000));
  REQUIRE(on_b.tables.size() == 3);
  CHECK(on_b.tables[2].entries.size() == 2);

  // B restarts, holding nothing: its bulk from A brings the table, which A got from nobody else.
  p.a_to_b.loss = 0;
  p.b_to_a.loss = 0;
  p.restart_b(5000);
  Taken on_new_b;
  on_new_b.listen(*p.b);
  p.run(ms(2000));
  REQUIRE(p.b->bulk_done());
  REQUIRE(on_new_b.tables.size() == 1);
  CHECK(on_new_b.tables[0].entries.size() == 2);

  // What B took from A, B gives A when A asks for a bulk (A restarted, say).
  Taken on_a;
  on_a.listen(*p.a);
  p.a->request_bulk(p.now);
  p.run(ms(2000));
  REQUIRE(on_a.tables.size() == 1);
  CHECK(on_a.tables[0].name == "bruteforce");
  CHECK(on_a.tables[0].entries.size() == 2);
}

TEST_CASE("a node sends no table of its own until its initial bulk is done", "[sync][tables][protocol]") {
  Pair p;
  p.start();
  Taken on_b;
  on_b.listen(*p.b);
  // A asks B for its bulk at start; B hears nothing until the link comes up.
  p.a_to_b.up = false;
  p.b_to_a.up = false;
  p.a->share_table({"t", entries(4)}, p.now);
  p.run(ms(500));
  REQUIRE_FALSE(p.a->bulk_done());
  CHECK(p.a->counters().tables_sent == 0);
  p.a_to_b.up = true;
  p.b_to_a.up = true;
  p.run(ms(3000));
  REQUIRE(p.a->bulk_done());
  REQUIRE(on_b.tables.size() == 1);
  CHECK(on_b.tables[0].entries.size() == 4);
}

TEST_CASE("a table's chunk lost beyond resending comes again with the resync", "[sync][tables][protocol]") {
  Pair p;
  // A resend window smaller than the churn in flight: the lost datagram falls out of it.
  p.config_a.send.capacity = 16;
  settle(p);
  Taken on_b;
  on_b.listen(*p.b);
  // Every datagram carrying a table chunk is lost until A has served a resync.
  int lost = 0;
  p.a_to_b.drop_if = [&](std::span<const uint8_t> d) {
    if (p.a->counters().resync_requests_served != 0 ||
        !carries(d, [](const wire::Message& m) { return m.has_table_chunk(); }))
      return false;
    ++lost;
    return true;
  };
  p.a->share_table({"t", entries(40)}, p.now);
  for (uint64_t i = 1; i <= 3000; ++i) {
    p.change(true, make_insert(1, i));
    if (i % 50 == 0) p.run(ms(2));
  }
  p.run(ms(5000));
  CHECK(lost > 0);
  CHECK(p.b->counters().gaps > 0);
  CHECK(p.a->counters().full_resyncs_started == 0);
  REQUIRE(on_b.tables.size() == 1);
  CHECK(on_b.tables[0].entries.size() == 40);
  CHECK(p.tables_agree());
}

TEST_CASE("a table changing while the link is down waits as one version, its latest",
          "[sync][tables][protocol]") {
  Pair p;
  settle(p);
  Taken on_b;
  on_b.listen(*p.b);
  stall_a(p);
  for (std::size_t v = 1; v <= 8; ++v) {
    p.a->share_table({"t", entries(v)}, p.now);
    p.run(ms(1100));
  }
  CHECK(p.a->counters().tables_sent <= 2);
  p.a_to_b.up = true;
  p.b_to_a.up = true;
  p.run(ms(8000));
  REQUIRE_FALSE(on_b.tables.empty());
  CHECK(on_b.tables.size() <= 3);
  CHECK(on_b.tables.back().entries.size() == 8);
  CHECK(p.tables_agree());
}

TEST_CASE("chunks cut for a datagram larger than a reload's mtu allows are cut again",
          "[sync][tables][protocol]") {
  Pair p;
  settle(p);
  Taken on_b;
  on_b.listen(*p.b);
  stall_a(p);
  p.a->share_table({"t", entries(400)}, p.now);
  p.run(ms(100));
  REQUIRE(p.a->counters().tables_sent == 1);
  const uint64_t chunks = p.a->counters().table_chunks_sent;
  p.a->set_max_datagram(576);
  p.a_to_b.up = true;
  p.b_to_a.up = true;
  p.run(ms(8000));
  CHECK(p.a->counters().send_errors == 1);
  CHECK(p.a->counters().tables_sent == 2);
  CHECK(p.a->counters().table_chunks_sent > chunks + 10);
  REQUIRE(on_b.tables.size() == 1);
  CHECK(on_b.tables[0].entries.size() == 400);
}
