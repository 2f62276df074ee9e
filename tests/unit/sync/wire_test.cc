// The outer frame: round trips, and every rejection open() makes, each with a crafted datagram.
#include "daemon/sync/wire.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "harness.h"

using namespace pairwall::sync;

namespace {

Header sample_header() {
  Header h;
  h.flags = frameflag::kSequenced | frameflag::kAck;
  h.node_id = 0x01020304;
  h.epoch = 0x1122334455667788ULL;
  h.xmit = 42;
  h.seq = 7;
  h.send_base = 5;
  h.ack_epoch = 0x8877665544332211ULL;
  h.cum_ack = 99;
  h.sack = 0x8000000000000001ULL;
  return h;
}

std::vector<uint8_t> sealed(const Header& h, const std::vector<uint8_t>& payload, Authenticator& auth) {
  std::vector<uint8_t> out(kOverhead + payload.size());
  REQUIRE(seal(h, payload, auth, out) == out.size());
  return out;
}

}  // namespace

TEST_CASE("header and payload survive seal and open", "[sync][wire]") {
  const auto key = test::test_key();
  Authenticator auth(key);
  const std::vector<uint8_t> payload = {1, 2, 3, 4, 5};
  const auto d = sealed(sample_header(), payload, auth);

  Header h;
  std::span<const uint8_t> p;
  DropReason why = DropReason::Count;
  REQUIRE(open(d, auth, h, p, why));
  const Header want = sample_header();
  CHECK(h.flags == want.flags);
  CHECK(h.node_id == want.node_id);
  CHECK(h.epoch == want.epoch);
  CHECK(h.xmit == want.xmit);
  CHECK(h.seq == want.seq);
  CHECK(h.send_base == want.send_base);
  CHECK(h.ack_epoch == want.ack_epoch);
  CHECK(h.cum_ack == want.cum_ack);
  CHECK(h.sack == want.sack);
  CHECK(h.payload_len == payload.size());
  CHECK(std::vector<uint8_t>(p.begin(), p.end()) == payload);
  // Big-endian on the wire, magic first.
  CHECK(d[0] == 0x50);
  CHECK(d[1] == 0x57);
  CHECK(d[2] == kVersion);
  CHECK(d[4] == 0x01);
  CHECK(d[7] == 0x04);
}

TEST_CASE("a second key verifies but never signs", "[sync][wire]") {
  const auto key = test::test_key();
  const auto next = test::test_key(0x3c);
  Authenticator current(key);
  Authenticator moving(key, next);
  Authenticator moved(next);
  const std::vector<uint8_t> payload = {9, 8, 7};
  Header h;
  std::span<const uint8_t> p;
  DropReason why = DropReason::Count;

  REQUIRE(open(sealed(sample_header(), payload, current), moving, h, p, why));
  CHECK_FALSE(moving.last_verified_by_also_accept());
  REQUIRE(open(sealed(sample_header(), payload, moved), moving, h, p, why));
  CHECK(moving.last_verified_by_also_accept());
  // It signs with its first key: a node that has not yet taken the second one still hears it.
  CHECK(open(sealed(sample_header(), payload, moving), current, h, p, why));
  CHECK_FALSE(open(sealed(sample_header(), payload, moving), moved, h, p, why));
  CHECK(why == DropReason::BadTag);
  Authenticator other(test::test_key(0x77), next);
  CHECK_FALSE(open(sealed(sample_header(), payload, other), moving, h, p, why));
  CHECK(why == DropReason::BadTag);
}

TEST_CASE("an empty payload is a valid pure ack", "[sync][wire]") {
  Authenticator auth(test::test_key());
  const auto d = sealed(sample_header(), {}, auth);
  CHECK(d.size() == kOverhead);
  Header h;
  std::span<const uint8_t> p;
  DropReason why = DropReason::Count;
  REQUIRE(open(d, auth, h, p, why));
  CHECK(p.empty());
}

TEST_CASE("seal refuses a buffer that is too small", "[sync][wire]") {
  Authenticator auth(test::test_key());
  std::vector<uint8_t> out(kOverhead + 3);
  const std::vector<uint8_t> payload(4, 0);
  CHECK(seal(sample_header(), payload, auth, out) == 0);
}

TEST_CASE("open rejects each malformed frame with its reason", "[sync][wire]") {
  Authenticator auth(test::test_key());
  const std::vector<uint8_t> payload = {9, 9, 9, 9, 9, 9, 9, 9};
  const auto good = sealed(sample_header(), payload, auth);

  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    DropReason want;
  };
  std::vector<Case> cases;
  cases.push_back({"empty", {}, DropReason::Truncated});
  cases.push_back({"one byte", {0x50}, DropReason::Truncated});
  {
    auto d = good;
    d[0] = 0x45;  // an IPv4 header, say
    cases.push_back({"bad magic", d, DropReason::BadMagic});
  }
  cases.push_back({"garbage", std::vector<uint8_t>(100, 0xff), DropReason::BadMagic});
  {
    auto d = good;
    d[2] = kVersion + 1;
    cases.push_back({"a later version", d, DropReason::BadVersion});
  }
  {
    auto d = good;
    d[2] = 0;
    cases.push_back({"version 0", d, DropReason::BadVersion});
  }
  cases.push_back(
      {"header cut", std::vector<uint8_t>(good.begin(), good.begin() + 40), DropReason::Truncated});
  cases.push_back({"tag cut", std::vector<uint8_t>(good.begin(), good.end() - 1), DropReason::Truncated});
  {
    auto d = good;
    d.push_back(0);
    cases.push_back({"trailing byte", d, DropReason::BadLength});
  }
  {
    auto d = good;
    d[kHeaderSize + 2] ^= 0x01;  // payload bit flip
    cases.push_back({"payload corrupted", d, DropReason::BadTag});
  }
  {
    auto d = good;
    d[20] ^= 0x80;  // header bit flip (xmit)
    cases.push_back({"header corrupted", d, DropReason::BadTag});
  }
  {
    auto d = good;
    d.back() ^= 0x01;
    cases.push_back({"tag corrupted", d, DropReason::BadTag});
  }
  {
    Authenticator other(test::test_key(0x33));
    cases.push_back({"wrong key", sealed(sample_header(), payload, other), DropReason::BadTag});
  }
  {
    // Claims a longer payload than it carries.
    auto d = good;
    d[64] = 0x01;
    cases.push_back({"payload length too big", d, DropReason::Truncated});
  }

  for (const auto& c : cases) {
    INFO(c.name);
    Header h;
    std::span<const uint8_t> p;
    DropReason why = DropReason::Count;
    CHECK_FALSE(open(c.bytes, auth, h, p, why));
    CHECK(why == c.want);
  }
}

TEST_CASE("drop reasons have stable distinct names", "[sync][wire]") {
  std::vector<std::string_view> names;
  for (std::size_t i = 0; i < kDropReasonCount; ++i)
    names.push_back(drop_reason_name(static_cast<DropReason>(i)));
  std::sort(names.begin(), names.end());
  CHECK(std::adjacent_find(names.begin(), names.end()) == names.end());
  CHECK(drop_reason_name(DropReason::BadTag) == "bad_tag");
  CHECK(drop_reason_name(DropReason::StaleEpoch) == "stale_epoch");
  CHECK(drop_reason_name(DropReason::BadTtl) == "bad_ttl");
}

TEST_CASE("the TTL check takes 255 alone, and anything without ttl_security", "[sync][wire]") {
  struct Case {
    bool ttl_security;
    int ttl;
    bool accepted;
  };
  const Case cases[] = {
      {true, 255, true},  {true, 254, false}, {true, 64, false}, {true, 1, false},
      {true, 0, false},   {true, -1, false},  // the kernel did not report it: not proven on-link
      {false, 255, true}, {false, 64, true},  {false, 1, true},  {false, -1, true},
  };
  for (const auto& c : cases) {
    INFO("ttl_security " << c.ttl_security << ", ttl " << c.ttl);
    CHECK(ttl_accepted(c.ttl_security, c.ttl) == c.accepted);
  }
}
