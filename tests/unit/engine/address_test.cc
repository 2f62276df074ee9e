// Addresses and prefixes (parse, format, ranges), plus the pf timeout names and defaults that the
// rule parser and the state table share.
#include "daemon/engine/address.h"

#include <array>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "daemon/engine/timeouts.h"

namespace {

using namespace pairwall::engine;

TEST_CASE("parse_address: valid addresses", "[address]") {
  struct Case {
    const char* text;
    Family family;
    uint64_t hi;
    uint64_t lo;
    const char* formatted;
  };
  const std::vector<Case> cases = {
      {"0.0.0.0", Family::V4, 0, 0, "0.0.0.0"},
      {"10.1.2.3", Family::V4, 0, 0x0a010203, "10.1.2.3"},
      {"255.255.255.255", Family::V4, 0, 0xffffffff, "255.255.255.255"},
      {"192.0.2.1", Family::V4, 0, 0xc0000201, "192.0.2.1"},
      {"::", Family::V6, 0, 0, "::"},
      {"::1", Family::V6, 0, 1, "::1"},
      {"2001:db8::1", Family::V6, 0x20010db800000000, 1, "2001:db8::1"},
      {"2001:DB8:0:0:0:0:0:FF", Family::V6, 0x20010db800000000, 0xff, "2001:db8::ff"},
      {"fe80::1:2:3:4", Family::V6, 0xfe80000000000000, 0x0001000200030004, "fe80::1:2:3:4"},
      {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Family::V6, ~uint64_t{0}, ~uint64_t{0},
       "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
      {"::ffff:192.0.2.1", Family::V6, 0, 0x0000ffffc0000201, "::ffff:192.0.2.1"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    Family f = c.family == Family::V4 ? Family::V6 : Family::V4;  // must be overwritten
    auto a = parse_address(c.text, &f);
    REQUIRE(a);
    CHECK(f == c.family);
    CHECK(a->hi == c.hi);
    CHECK(a->lo == c.lo);
    CHECK(to_string(c.family, *a) == c.formatted);
    CHECK(parse_address(c.text, nullptr) == a);
  }
}

TEST_CASE("parse_address: invalid text", "[address]") {
  for (const char* text : {"",
                           " ",
                           "1.2.3",
                           "1.2.3.4.5",
                           "256.0.0.1",
                           "1.2.3.-4",
                           "1.2.3.4 ",
                           " 1.2.3.4",
                           "a.b.c.d",
                           "0x01.2.3.4",
                           "1.2.3.4/24",
                           ":::",
                           "2001:db8::1::2",
                           "2001:db8:::1",
                           "12345::",
                           "::g",
                           "1:2:3:4:5:6:7:8:9",
                           "fe80::1%eth0",
                           "2001:db8::1/64",
                           "0000000000000000000000000000000000000000000000000000000000000000000"}) {
    INFO("'" << text << "'");
    Family f = Family::V4;
    CHECK_FALSE(parse_address(text, &f));
  }
}

TEST_CASE("parse_address: text that is not terminated where the view ends", "[address]") {
  const std::string text = "10.0.0.12345";
  Family f = Family::V6;
  auto a = parse_address(std::string_view(text).substr(0, 8), &f);
  REQUIRE(a);
  CHECK(f == Family::V4);
  CHECK(to_string(Family::V4, *a) == "10.0.0.1");
}

TEST_CASE("IpAddress: byte conversions round-trip in network order", "[address]") {
  const std::array<uint8_t, 4> b4{192, 0, 2, 7};
  const IpAddress a4 = IpAddress::from_v4_bytes(b4.data());
  CHECK(a4 == IpAddress::v4(0xc0000207));
  CHECK(a4.v4_value() == 0xc0000207);
  std::array<uint8_t, 4> out4{};
  a4.to_v4_bytes(out4.data());
  CHECK(out4 == b4);

  std::array<uint8_t, 16> b6{};
  for (std::size_t i = 0; i < b6.size(); ++i) b6[i] = static_cast<uint8_t>(0x10 + i);
  const IpAddress a6 = IpAddress::from_v6_bytes(b6.data());
  CHECK(a6.hi == 0x1011121314151617);
  CHECK(a6.lo == 0x18191a1b1c1d1e1f);
  std::array<uint8_t, 16> out6{};
  a6.to_v6_bytes(out6.data());
  CHECK(out6 == b6);
}

TEST_CASE("IpAddress: ordering is numeric", "[address]") {
  auto a = [](const char* t) { return *parse_address(t, nullptr); };
  CHECK(a("10.0.0.1") < a("10.0.0.2"));
  CHECK(a("9.255.255.255") < a("10.0.0.0"));
  CHECK(a("2001:db8::ffff") < a("2001:db8:0:1::"));
  CHECK(a("::ffff:ffff:ffff:ffff") < a("0:0:0:1::"));
}

TEST_CASE("parse_prefix: ranges, first, last", "[address][prefix]") {
  struct Case {
    const char* text;
    Family family;
    uint8_t length;
    const char* first;
    const char* last;
    const char* formatted;
  };
  const std::vector<Case> cases = {
      {"0.0.0.0/0", Family::V4, 0, "0.0.0.0", "255.255.255.255", "0.0.0.0/0"},
      {"128.0.0.0/1", Family::V4, 1, "128.0.0.0", "255.255.255.255", "128.0.0.0/1"},
      {"10.0.0.0/8", Family::V4, 8, "10.0.0.0", "10.255.255.255", "10.0.0.0/8"},
      {"192.0.2.0/24", Family::V4, 24, "192.0.2.0", "192.0.2.255", "192.0.2.0/24"},
      {"192.0.2.4/31", Family::V4, 31, "192.0.2.4", "192.0.2.5", "192.0.2.4/31"},
      {"192.0.2.9/32", Family::V4, 32, "192.0.2.9", "192.0.2.9", "192.0.2.9/32"},
      {"192.0.2.9", Family::V4, 32, "192.0.2.9", "192.0.2.9", "192.0.2.9/32"},
      {"::/0", Family::V6, 0, "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "::/0"},
      {"8000::/1", Family::V6, 1, "8000::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "8000::/1"},
      {"2001:db8::/32", Family::V6, 32, "2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
       "2001:db8::/32"},
      {"2001:db8:0:2::/63", Family::V6, 63, "2001:db8:0:2::", "2001:db8:0:3:ffff:ffff:ffff:ffff",
       "2001:db8:0:2::/63"},
      {"2001:db8:0:1::/64", Family::V6, 64, "2001:db8:0:1::", "2001:db8:0:1:ffff:ffff:ffff:ffff",
       "2001:db8:0:1::/64"},
      {"2001:db8:0:1:8000::/65", Family::V6, 65, "2001:db8:0:1:8000::", "2001:db8:0:1:ffff:ffff:ffff:ffff",
       "2001:db8:0:1:8000::/65"},
      {"2001:db8::/127", Family::V6, 127, "2001:db8::", "2001:db8::1", "2001:db8::/127"},
      {"2001:db8::7/128", Family::V6, 128, "2001:db8::7", "2001:db8::7", "2001:db8::7/128"},
      {"2001:db8::7", Family::V6, 128, "2001:db8::7", "2001:db8::7", "2001:db8::7/128"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    auto p = parse_prefix(c.text);
    REQUIRE(p);
    CHECK(p->family == c.family);
    CHECK(p->length == c.length);
    CHECK(to_string(c.family, p->first()) == c.first);
    CHECK(to_string(c.family, p->last()) == c.last);
    CHECK(to_string(*p) == c.formatted);
    CHECK(parse_prefix(to_string(*p)) == p);
  }
}

TEST_CASE("parse_prefix: rejected text", "[address][prefix]") {
  for (const char* text : {"", "/", "/24", "10.0.0.0/", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/+8",
                           "10.0.0.0/ 8", "10.0.0.0/8 ", "10.0.0.0/8/8", "10.0.0.0/0x8", "10.0.0.0/1000",
                           "10.0.0.0/08a", "2001:db8::/129", "2001:db8::/", "1.2.3/8", "bogus/8"}) {
    INFO("'" << text << "'");
    CHECK_FALSE(parse_prefix(text));
  }
}

TEST_CASE("parse_table_entry: a prefix, '!' before it for an exception", "[address][prefix]") {
  const auto plain = parse_table_entry("192.0.2.1");
  REQUIRE(plain);
  CHECK_FALSE(plain->negated);
  CHECK(to_string(plain->prefix) == "192.0.2.1/32");
  const auto negated = parse_table_entry("!2001:db8::/32");
  REQUIRE(negated);
  CHECK(negated->negated);
  CHECK(to_string(negated->prefix) == "2001:db8::/32");
  for (const char* text : {"", "!", "!!192.0.2.1", "! 192.0.2.1", "192.0.2.1!", "!10.0.0.1/8"}) {
    INFO("'" << text << "'");
    CHECK_FALSE(parse_table_entry(text));
  }
}

TEST_CASE("parse_prefix: host bits set are an error, as in pfctl", "[address][prefix]") {
  for (const char* text :
       {"10.0.0.1/8", "192.0.2.1/24", "192.0.2.5/31", "0.0.0.1/0", "128.0.0.0/0", "2001:db8::1/32",
        "2001:db8:0:1::/63", "2001:db8:0:1:8000::/64", "2001:db8::1/127", "::1/0"}) {
    INFO(text);
    CHECK_FALSE(parse_prefix(text));
  }
}

TEST_CASE("IpPrefix::contains: boundaries and families", "[address][prefix]") {
  struct Case {
    const char* prefix;
    const char* address;
    bool inside;
  };
  const std::vector<Case> cases = {
      {"10.0.0.0/8", "10.0.0.0", true},
      {"10.0.0.0/8", "10.255.255.255", true},
      {"10.0.0.0/8", "11.0.0.0", false},
      {"10.0.0.0/8", "9.255.255.255", false},
      {"0.0.0.0/0", "255.255.255.255", true},
      {"0.0.0.0/0", "0.0.0.0", true},
      {"192.0.2.9/32", "192.0.2.9", true},
      {"192.0.2.9/32", "192.0.2.8", false},
      {"192.0.2.4/31", "192.0.2.5", true},
      {"192.0.2.4/31", "192.0.2.6", false},
      {"::/0", "2001:db8::1", true},
      {"2001:db8::/32", "2001:db8:ffff::1", true},
      {"2001:db8::/32", "2001:db9::", false},
      {"2001:db8:0:1::/64", "2001:db8:0:1:ffff::", true},
      {"2001:db8:0:1::/64", "2001:db8:0:2::", false},
      {"2001:db8:0:1:8000::/65", "2001:db8:0:1:7fff:ffff:ffff:ffff", false},
      {"2001:db8:0:1:8000::/65", "2001:db8:0:1:8000::1", true},
      {"2001:db8::/127", "2001:db8::1", true},
      {"2001:db8::/127", "2001:db8::2", false},
      {"2001:db8::7/128", "2001:db8::7", true},
      {"2001:db8::7/128", "2001:db8::6", false},
      // The family travels beside the address: ::10.0.0.1 is not 10.0.0.1.
      {"10.0.0.0/8", "::a00:1", false},
      {"::/96", "10.0.0.1", false},
      {"::/0", "0.0.0.0", false},
  };
  for (const auto& c : cases) {
    INFO(c.prefix << " contains " << c.address);
    auto p = parse_prefix(c.prefix);
    REQUIRE(p);
    Family f = Family::V4;
    auto a = parse_address(c.address, &f);
    REQUIRE(a);
    CHECK(p->contains(f, *a) == c.inside);
  }
}

TEST_CASE("timeouts: pf.conf(5) defaults", "[timeouts]") {
  using std::chrono::seconds;
  const Timeouts t = Timeouts::defaults();
  struct Case {
    TimeoutClass cls;
    const char* name;
    int64_t seconds;
  };
  const std::vector<Case> cases = {
      {TimeoutClass::TcpFirst, "tcp.first", 120},
      {TimeoutClass::TcpOpening, "tcp.opening", 30},
      {TimeoutClass::TcpEstablished, "tcp.established", 86400},
      {TimeoutClass::TcpClosing, "tcp.closing", 900},
      {TimeoutClass::TcpFinWait, "tcp.finwait", 45},
      {TimeoutClass::TcpClosed, "tcp.closed", 90},
      {TimeoutClass::UdpFirst, "udp.first", 60},
      {TimeoutClass::UdpSingle, "udp.single", 30},
      {TimeoutClass::UdpMultiple, "udp.multiple", 60},
      {TimeoutClass::IcmpFirst, "icmp.first", 20},
      {TimeoutClass::IcmpError, "icmp.error", 10},
      {TimeoutClass::OtherFirst, "other.first", 60},
      {TimeoutClass::OtherSingle, "other.single", 30},
      {TimeoutClass::OtherMultiple, "other.multiple", 60},
  };
  REQUIRE(cases.size() == kTimeoutClassCount);
  for (const auto& c : cases) {
    INFO(c.name);
    CHECK(t[c.cls] == Millis(c.seconds * 1000));
    CHECK(timeout_class_name(c.cls) == c.name);
    CHECK(timeout_class_from_name(c.name) == c.cls);
  }
}

TEST_CASE("timeouts: unknown names", "[timeouts]") {
  for (const char* name : {"", "tcp", "tcp.", "TCP.FIRST", "tcp.first ", "udp.established", "interval",
                           "frag", "src.track", "adaptive.start"}) {
    INFO("'" << name << "'");
    CHECK_FALSE(timeout_class_from_name(name));
  }
  // src.track is a timeout, of source nodes rather than a state's class; pf's default is 0.
  CHECK(is_timeout_name("src.track"));
  CHECK_FALSE(is_timeout_name("interval"));
  CHECK(Timeouts::defaults().source_track == Millis{0});
}

TEST_CASE("timeouts: the table is writable per class", "[timeouts]") {
  Timeouts t = Timeouts::defaults();
  t[TimeoutClass::UdpMultiple] = Millis(120000);
  CHECK(t[TimeoutClass::UdpMultiple] == Millis(120000));
  CHECK(t[TimeoutClass::UdpSingle] == Millis(30000));
}

}  // namespace
