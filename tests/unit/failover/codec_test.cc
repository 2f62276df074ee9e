// Advertisement frames: round trip, and every way a frame is refused, each with its counter.
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "failover/advert_codec.h"

namespace pf = pairwall::failover;
using Frame = std::vector<uint8_t>;

namespace {

const std::string kKey = "0123456789abcdef0123456789abcdef";

pf::Advert sample(uint64_t counter = 7) {
  pf::Advert a;
  a.node_id = 2;
  a.advbase_ms = 100;
  a.advskew = 100;
  a.demotion = 16;
  a.boot_epoch = 1'700'000'000'000'000ull;
  a.counter = counter;
  return a;
}

Frame encode(const pf::Advert& a, const std::string& key = kKey, uint8_t vhid = 9) {
  pf::AdvertCodec sender(key, vhid, a.node_id);
  Frame f(pf::kAdvertMaxFrame);
  f.resize(sender.encode(a, f));
  REQUIRE(!f.empty());
  return f;
}

}  // namespace

TEST_CASE("advertisement round trip keeps every field", "[codec]") {
  for (const bool leaving : {false, true}) {
    pf::Advert a = sample();
    a.leaving = leaving;
    if (leaving) {
      a.advskew = pf::kLeavingAdvskew;
      a.demotion = pf::kLeavingDemotion;
    }
    const Frame f = encode(a);
    CHECK(f.size() == pf::kAdvertHeaderSize + (f[6] << 8 | f[7]) + pf::kAdvertTagSize);
    CHECK(std::memcmp(f.data(), "PWFA", 4) == 0);
    CHECK(f[4] == pf::kAdvertVersion);
    CHECK(f[5] == 9);
    pf::AdvertCodec rx(kKey, 9, 1);
    const auto r = rx.decode(f, 255);
    REQUIRE(r.ok);
    CHECK(r.advert.node_id == a.node_id);
    CHECK(r.advert.advbase_ms == a.advbase_ms);
    CHECK(r.advert.advskew == a.advskew);
    CHECK(r.advert.demotion == a.demotion);
    CHECK(r.advert.boot_epoch == a.boot_epoch);
    CHECK(r.advert.counter == a.counter);
    CHECK(r.advert.leaving == a.leaving);
    CHECK(rx.accepted() == 1);
  }
}

// A reload's vhid, as `ifconfig carpN vhid N`: frames go out with it, and only its own are taken.
TEST_CASE("a new vhid holds for the frames sent and taken from then on; the replay marks stay", "[codec]") {
  pf::AdvertCodec rx(kKey, 9, 1);
  REQUIRE(rx.decode(encode(sample(7)), 255).ok);
  rx.set_vhid(10);
  auto r = rx.decode(encode(sample(8)), 255);
  CHECK_FALSE(r.ok);
  CHECK(r.reason == pf::Reject::WrongVhid);
  CHECK(rx.decode(encode(sample(8), kKey, 10), 255).ok);
  r = rx.decode(encode(sample(7), kKey, 10), 255);  // node 2's counter 7 was heard before the change
  CHECK_FALSE(r.ok);
  CHECK(r.reason == pf::Reject::Replay);

  Frame sent(pf::kAdvertMaxFrame);
  pf::Advert own = sample(1);
  own.node_id = 1;
  sent.resize(rx.encode(own, sent));
  REQUIRE(!sent.empty());
  CHECK(sent[5] == 10);
}

TEST_CASE("leaving with an ordinary rank is accepted: only the leaving values need the flag", "[codec]") {
  struct Row {
    uint8_t advskew;
    uint32_t demotion;
  };
  for (const Row row : {Row{100, 16}, Row{pf::kLeavingAdvskew, 16}, Row{100, pf::kLeavingDemotion}}) {
    INFO("advskew " << int{row.advskew} << ", demotion " << row.demotion);
    pf::Advert a = sample();
    a.leaving = true;
    a.advskew = row.advskew;
    a.demotion = row.demotion;
    pf::AdvertCodec rx(kKey, 9, 1);
    const auto r = rx.decode(encode(a), 255);
    REQUIRE(r.ok);
    CHECK(r.advert.leaving);
    CHECK(r.advert.advskew == row.advskew);
    CHECK(r.advert.demotion == row.demotion);
  }
}

TEST_CASE("a second key is accepted but never signs", "[codec]") {
  const std::string next = "fedcba9876543210fedcba9876543210";
  pf::AdvertCodec rx(kKey, 9, 1, next);
  REQUIRE(rx.decode(encode(sample(1)), 255).ok);
  CHECK(rx.accepted_on_accept_key() == 0);
  REQUIRE(rx.decode(encode(sample(2), next), 255).ok);
  CHECK(rx.accepted_on_accept_key() == 1);
  CHECK(rx.decode(encode(sample(3), "another key, neither of the two"), 255).reason == pf::Reject::BadTag);

  // A node that moved to the new key and still accepts the old one signs with the new.
  pf::AdvertCodec moved(next, 9, 2, kKey);
  Frame f(pf::kAdvertMaxFrame);
  f.resize(moved.encode(sample(4), f));
  pf::AdvertCodec old_only(kKey, 9, 1);
  CHECK(old_only.decode(f, 255).reason == pf::Reject::BadTag);
  pf::AdvertCodec new_only(next, 9, 1);
  CHECK(new_only.decode(f, 255).ok);

  // Changed while running: the old key is then refused.
  rx.set_keys(next, {});
  CHECK(rx.decode(encode(sample(5)), 255).reason == pf::Reject::BadTag);
  CHECK(rx.decode(encode(sample(6), next), 255).ok);
}

TEST_CASE("encode refuses a buffer that is too small", "[codec]") {
  pf::AdvertCodec tx(kKey, 9, 2);
  Frame f(20);
  CHECK(tx.encode(sample(), f) == 0);
}

TEST_CASE("forged, damaged and foreign frames are rejected by reason", "[codec]") {
  struct Row {
    const char* what;
    std::function<Frame()> make;
    int ttl;
    pf::Reject reason;
  };
  const Frame good = encode(sample());
  auto mutate = [&](std::function<void(Frame&)> f) {
    return [=] {
      Frame x = good;
      f(x);
      return x;
    };
  };
  const std::vector<Row> rows{
      {"ttl 64 (crossed a router)", [&] { return good; }, 64, pf::Reject::BadTtl},
      {"ttl 254", [&] { return good; }, 254, pf::Reject::BadTtl},
      {"ttl unknown", [&] { return good; }, -1, pf::Reject::BadTtl},
      {"empty", [] { return Frame{}; }, 255, pf::Reject::Truncated},
      {"header only", mutate([](Frame& f) { f.resize(pf::kAdvertHeaderSize); }), 255, pf::Reject::Truncated},
      {"tag cut short", mutate([](Frame& f) { f.pop_back(); }), 255, pf::Reject::Truncated},
      {"length larger than frame", mutate([](Frame& f) { f[7] = static_cast<uint8_t>(f[7] + 1); }), 255,
       pf::Reject::Truncated},
      {"trailing garbage", mutate([](Frame& f) { f.push_back(0); }), 255, pf::Reject::Malformed},
      {"bad magic", mutate([](Frame& f) { f[0] = 'X'; }), 255, pf::Reject::Malformed},
      {"version 2", mutate([](Frame& f) { f[4] = 2; }), 255, pf::Reject::BadVersion},
      {"version 0", mutate([](Frame& f) { f[4] = 0; }), 255, pf::Reject::BadVersion},
      {"another vhid", [] { return encode(sample(), kKey, 10); }, 255, pf::Reject::WrongVhid},
      {"vhid rewritten in flight", mutate([](Frame& f) { f[5] = 10; }), 255, pf::Reject::WrongVhid},
      {"wrong key", [] { return encode(sample(), "another key of sixteen+ bytes"); }, 255,
       pf::Reject::BadTag},
      {"body byte flipped", mutate([](Frame& f) { f[pf::kAdvertHeaderSize + 1] ^= 1; }), 255,
       pf::Reject::BadTag},
      {"tag byte flipped", mutate([](Frame& f) { f.back() ^= 0x80; }), 255, pf::Reject::BadTag},
      {"advskew 255 without leaving",
       [] {
         auto a = sample();
         a.advskew = 255;
         return encode(a);
       },
       255, pf::Reject::Malformed},
      {"demotion 4294967295 without leaving",
       [] {
         auto a = sample();
         a.demotion = pf::kLeavingDemotion;
         return encode(a);
       },
       255, pf::Reject::Malformed},
      {"advbase 0",
       [] {
         auto a = sample();
         a.advbase_ms = 0;
         return encode(a);
       },
       255, pf::Reject::Malformed},
      {"node id 0",
       [] {
         auto a = sample();
         a.node_id = 0;
         return encode(a);
       },
       255, pf::Reject::Malformed},
      {"our own node id",
       [] {
         auto a = sample();
         a.node_id = 1;
         return encode(a);
       },
       255, pf::Reject::Own},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    pf::AdvertCodec rx(kKey, 9, 1);
    const auto r = rx.decode(row.make(), row.ttl);
    CHECK_FALSE(r.ok);
    CHECK(r.reason == row.reason);
    CHECK(rx.rejects()[static_cast<std::size_t>(row.reason)] == 1);
    CHECK(rx.accepted() == 0);
    // A rejected frame leaves no mark: the genuine frame is still accepted afterwards.
    CHECK(rx.decode(good, 255).ok);
  }
}

TEST_CASE("replay: (boot epoch, counter) must grow per sender; copies are not refreshes", "[codec]") {
  struct Step {
    uint32_t node;
    uint64_t epoch;
    uint64_t counter;
    bool ok;
    pf::Reject reason;
  };
  const std::vector<Step> steps{
      {2, 100, 5, true, {}},
      {2, 100, 5, false, pf::Reject::Duplicate},  // the same frame on a second interface
      {2, 100, 4, false, pf::Reject::Replay},
      {2, 100, 6, true, {}},
      {2, 99, 1000, false, pf::Reject::Replay},  // a frame from the sender's previous life
      {3, 1, 1, true, {}},                       // another sender has its own mark
      {2, 101, 0, true, {}},                     // the sender restarted: new epoch, counter anew
      {2, 100, 7, false, pf::Reject::Replay},
      {3, 1, 1, false, pf::Reject::Duplicate},
  };
  pf::AdvertCodec rx(kKey, 9, 1);
  uint64_t replays = 0, duplicates = 0;
  for (const auto& s : steps) {
    auto a = sample();
    a.node_id = s.node;
    a.boot_epoch = s.epoch;
    a.counter = s.counter;
    const auto r = rx.decode(encode(a), 255);
    CHECK(r.ok == s.ok);
    if (!s.ok) {
      CHECK(r.reason == s.reason);
      replays += s.reason == pf::Reject::Replay;
      duplicates += s.reason == pf::Reject::Duplicate;
    }
  }
  CHECK(rx.rejects()[static_cast<std::size_t>(pf::Reject::Replay)] == replays);
  CHECK(rx.rejects()[static_cast<std::size_t>(pf::Reject::Duplicate)] == duplicates);
  CHECK(rx.accepted() == 4);
}

TEST_CASE("a frame from another address than a link's peer is refused and raises no mark", "[codec]") {
  pf::AdvertCodec rx(kKey, 9, 1);
  // A valid frame, sent to this node's own address on a link with a peer, by another host:
  // refused before its tag is read, so that the peer's own frame with the same counter still counts.
  auto r = rx.decode(encode(sample(5)), 255, false);
  CHECK_FALSE(r.ok);
  CHECK(r.reason == pf::Reject::NotPeer);
  CHECK(rx.rejects()[static_cast<std::size_t>(pf::Reject::NotPeer)] == 1);
  r = rx.decode(encode(sample(5)), 255, true);
  CHECK(r.ok);
  CHECK(rx.accepted() == 1);
  CHECK(std::string(pf::reject_name(pf::Reject::NotPeer)) == "not_peer");
}

TEST_CASE("our own frame coming back is a replay, not another node with our id", "[codec]") {
  // A bridge loop, a reflecting switch port or two VIP interfaces on one segment hand a node its
  // own advertisements; only a frame of another boot epoch is another node configured alike.
  pf::AdvertCodec codec(kKey, 9, 2);
  Frame sent;
  for (uint64_t counter = 1; counter <= 3; ++counter) {
    sent.assign(pf::kAdvertMaxFrame, 0);
    sent.resize(codec.encode(sample(counter), sent));
    REQUIRE(!sent.empty());
  }
  auto r = codec.decode(sent, 255);
  CHECK_FALSE(r.ok);
  CHECK(r.reason == pf::Reject::Replay);
  r = codec.decode(encode(sample(2)), 255);
  CHECK(r.reason == pf::Reject::Replay);
  CHECK(codec.rejects()[static_cast<std::size_t>(pf::Reject::Own)] == 0);

  auto other = sample(1);
  other.boot_epoch += 1;  // another process with node id 2
  r = codec.decode(encode(other), 255);
  CHECK(r.reason == pf::Reject::Own);
  other.boot_epoch -= 2;
  r = codec.decode(encode(other), 255);
  CHECK(r.reason == pf::Reject::Own);
  // Same epoch but a counter we have not sent yet: not ours either.
  r = codec.decode(encode(sample(4)), 255);
  CHECK(r.reason == pf::Reject::Own);
  CHECK(codec.rejects()[static_cast<std::size_t>(pf::Reject::Own)] == 3);
  CHECK(codec.rejects()[static_cast<std::size_t>(pf::Reject::Replay)] == 2);

  // Before it has sent anything, no frame can be a node's own.
  pf::AdvertCodec fresh(kKey, 9, 2);
  CHECK(fresh.decode(encode(sample(1)), 255).reason == pf::Reject::Own);
}

TEST_CASE("every reject reason has a distinct metrics name", "[codec]") {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < pf::kRejectCount; ++i) {
    const std::string n = pf::reject_name(static_cast<pf::Reject>(i));
    CHECK(n != "unknown");
    CHECK(std::find(names.begin(), names.end(), n) == names.end());
    names.push_back(n);
  }
}
