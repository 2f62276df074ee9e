// parse_packet / parse_quoted_packet: every header and option kind, every malformed case and
// its drop reason, fragments, ICMP errors and their quotes, and every truncation of valid packets.
#include "daemon/engine/packet.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tests/unit/support/packet_builder.h"

namespace {

using namespace pairwall::engine;
using pairwall::test::Bytes;
using pairwall::test::get16;
using pairwall::test::PacketBuilder;
using pairwall::test::put16;
namespace ip6ext = pairwall::test::ip6ext;

IpAddress v4(const char* text) {
  return *parse_address(text, nullptr);
}
IpAddress v6(const char* text) {
  return *parse_address(text, nullptr);
}

// Parses from a heap buffer of exactly the packet's size, so that the address sanitizer sees any
// read past the end. The view points into that buffer until the next call.
Reason parse_exact(const Bytes& bytes, PacketView& view) {
  static std::unique_ptr<uint8_t[]> storage;
  storage = std::make_unique<uint8_t[]>(bytes.size() + 1);
  uint8_t* copy = storage.get() + 1;  // never a zero-length allocation
  if (!bytes.empty()) std::memcpy(copy, bytes.data(), bytes.size());
  return parse_packet(std::span<const uint8_t>(copy, bytes.size()), view);
}

Reason parse(const Bytes& bytes) {
  PacketView view;
  return parse_exact(bytes, view);
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

PacketBuilder v4_tcp() {
  return PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").tcp(40000, 80);
}
PacketBuilder v6_tcp() {
  return PacketBuilder().ipv6("2001:db8::1", "2001:db8::2").tcp(40000, 80);
}
PacketBuilder v4_udp() {
  return PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").udp(5000, 53);
}
PacketBuilder v6_udp() {
  return PacketBuilder().ipv6("2001:db8::1", "2001:db8::2").udp(5000, 53);
}

// --- well-formed packets ---------------------------------------------------------------------

TEST_CASE("parse: IPv4 TCP with every option kind", "[packet]") {
  const Bytes b = v4_tcp()
                      .ttl(33)
                      .df()
                      .flags(tcpflag::kSyn | tcpflag::kEce | tcpflag::kCwr)
                      .seq(0x11223344)
                      .ack(0x55667788)
                      .window(29200)
                      .mss(1460)
                      .wscale(7)
                      .sack_permitted()
                      .timestamps(0xdeadbeef, 0x01020304)
                      .payload(10)
                      .build();
  PacketView p;
  REQUIRE(parse_exact(b, p) == Reason::Match);
  CHECK(p.family == Family::V4);
  CHECK(p.proto == ipproto::kTcp);
  CHECK(p.is_tcp());
  CHECK(p.src == v4("10.0.0.1"));
  CHECK(p.dst == v4("10.0.0.2"));
  CHECK(p.src_port == 40000);
  CHECK(p.dst_port == 80);
  CHECK(p.ttl == 33);
  CHECK(p.dont_fragment);
  CHECK_FALSE(p.is_fragment);
  CHECK_FALSE(p.has_ip_options);
  CHECK(p.l3_header_length == 20);
  CHECK(p.l4_offset == 20);
  CHECK(p.tcp.seq == 0x11223344);
  CHECK(p.tcp.ack == 0x55667788);
  CHECK(p.tcp.window == 29200);
  CHECK(p.tcp.flags == (tcpflag::kSyn | tcpflag::kEce | tcpflag::kCwr));
  CHECK(p.tcp.header_length == 20 + 4 + 4 + 4 + 12);
  CHECK(p.tcp.has_mss);
  CHECK(p.tcp.mss == 1460);
  CHECK(get16(b, p.tcp.mss_offset) == 1460);
  CHECK(p.tcp.mss_offset == 20 + 20 + 2);
  CHECK(p.tcp.has_window_scale);
  CHECK(p.tcp.window_scale == 7);
  CHECK(p.tcp.sack_permitted);
  CHECK(p.tcp.has_timestamps);
  CHECK(p.tcp.ts_value == 0xdeadbeef);
  CHECK(p.tcp.ts_echo == 0x01020304);
  CHECK(p.l4_length == 44 + 10);
  CHECK(p.payload_offset == 20 + 44);
  CHECK(p.payload_length == 10);
  CHECK(p.size == b.size());
}

TEST_CASE("parse: TCP options absent, wrong-length, unknown, after EOL", "[packet]") {
  struct Case {
    const char* name;
    Bytes options;
    bool mss, wscale, sack, ts;
    uint8_t shift;
  };
  const std::vector<Case> cases = {
      {"none", {}, false, false, false, false, 0},
      {"window scale 15 is clamped to 14 (RFC 7323 2.3)", {1, 3, 3, 15}, false, true, false, false, 14},
      {"window scale 14 kept", {1, 3, 3, 14}, false, true, false, false, 14},
      {"MSS with length 3 ignored", {2, 3, 5, 1}, false, false, false, false, 0},
      {"wscale with length 4 ignored", {3, 4, 7, 0}, false, false, false, false, 0},
      {"SACK-permitted with length 3 ignored", {4, 3, 0, 1}, false, false, false, false, 0},
      {"timestamps with length 8 ignored", {8, 8, 0, 0, 0, 0, 0, 0}, false, false, false, false, 0},
      {"unknown kind 30 skipped", {30, 4, 0, 0, 2, 4, 5, 180}, true, false, false, false, 0},
      {"SACK blocks skipped", {1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2}, false, false, false, false, 0},
      {"options after EOL are padding", {0, 2, 4, 5, 180, 0, 0, 0}, false, false, false, false, 0},
      {"NOPs only", {1, 1, 1, 1}, false, false, false, false, 0},
      {"SACK-permitted alone", {4, 2, 1, 1}, false, false, true, false, 0},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    PacketView p;
    REQUIRE(parse_exact(v4_tcp().tcp_options_raw(c.options).build(), p) == Reason::Match);
    CHECK(p.tcp.has_mss == c.mss);
    CHECK(p.tcp.has_window_scale == c.wscale);
    CHECK(p.tcp.window_scale == c.shift);
    CHECK(p.tcp.sack_permitted == c.sack);
    CHECK(p.tcp.has_timestamps == c.ts);
  }
}

TEST_CASE("parse: IPv6 TCP, MSS offset counts the extension headers", "[packet]") {
  const Bytes b = v6_tcp().hop_by_hop().dest_opts(16).mss(1220).payload(3).build();
  PacketView p;
  REQUIRE(parse_exact(b, p) == Reason::Match);
  CHECK(p.family == Family::V6);
  CHECK(p.src == v6("2001:db8::1"));
  CHECK(p.dst == v6("2001:db8::2"));
  CHECK(p.l3_header_length == 40 + 8 + 16);
  CHECK(p.l4_offset == 64);
  CHECK(p.tcp.mss == 1220);
  CHECK(p.tcp.mss_offset == 64 + 20 + 2);
  CHECK(get16(b, p.tcp.mss_offset) == 1220);
  CHECK(p.payload_length == 3);
  CHECK(p.ttl == 64);
}

TEST_CASE("parse: UDP, link padding after the datagram ignored", "[packet]") {
  for (bool six : {false, true}) {
    INFO((six ? "IPv6" : "IPv4"));
    const Bytes b = (six ? v6_udp() : v4_udp()).payload(17).trailing(20, 0xee).build();
    PacketView p;
    REQUIRE(parse_exact(b, p) == Reason::Match);
    CHECK(p.is_udp());
    CHECK(p.src_port == 5000);
    CHECK(p.dst_port == 53);
    CHECK(p.l4_length == 8 + 17);
    CHECK(p.payload_offset == (six ? 48 : 28));
    CHECK(p.payload_length == 17);
    CHECK(p.size == b.size());
  }
}

TEST_CASE("parse: UDP length shorter than the IP payload is allowed", "[packet]") {
  PacketView p;
  REQUIRE(parse_exact(v4_udp().payload(10).udp_length(12).build(), p) == Reason::Match);
  CHECK(p.payload_length == 4);
}

// The ports of a message that is not an error key its state as pf's pf_icmp_mapping does: a
// request (identifier, type), its reply (the request's type, identifier).
TEST_CASE("parse: ICMP and ICMPv6 queries are keyed by identifier and the request's type", "[packet]") {
  struct Case {
    const char* name;
    Bytes bytes;
    uint8_t type;
    bool reply;
    uint8_t request_type;
  };
  auto v4i = [] { return PacketBuilder().ipv4("10.0.0.1", "10.0.0.2"); };
  auto v6i = [] { return PacketBuilder().ipv6("2001:db8::1", "2001:db8::2"); };
  const std::vector<Case> cases = {
      {"echo request", v4i().icmp_echo(0x4242, 1).build(), 8, false, 8},
      {"echo reply", v4i().icmp_echo(0x4242, 1, true).build(), 0, true, 8},
      {"timestamp request", v4i().icmp(13, 0, 0x42420001).payload(12).build(), 13, false, 13},
      {"timestamp reply", v4i().icmp(14, 0, 0x42420001).payload(12).build(), 14, true, 13},
      {"information request", v4i().icmp(15, 0, 0x42420001).build(), 15, false, 15},
      {"information reply", v4i().icmp(16, 0, 0x42420001).build(), 16, true, 15},
      {"mask request", v4i().icmp(17, 0, 0x42420001).payload(4).build(), 17, false, 17},
      {"mask reply", v4i().icmp(18, 0, 0x42420001).payload(4).build(), 18, true, 17},
      {"ICMPv6 echo request", v6i().icmp_echo(0x4242, 1).payload(56).build(), 128, false, 128},
      {"ICMPv6 echo reply", v6i().icmp_echo(0x4242, 1, true).build(), 129, true, 128},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    PacketView p;
    REQUIRE(parse_exact(c.bytes, p) == Reason::Match);
    CHECK(p.is_icmp());
    CHECK(p.icmp.type == c.type);
    CHECK(p.icmp.code == 0);
    CHECK(p.icmp.is_query);
    CHECK(p.icmp.is_reply == c.reply);
    CHECK_FALSE(p.icmp.is_error);
    CHECK(p.icmp.id == 0x4242);
    CHECK(p.src_port == (c.reply ? c.request_type : 0x4242));
    CHECK(p.dst_port == (c.reply ? 0x4242 : c.request_type));
  }
}

TEST_CASE("parse: ICMP messages that are neither query nor error are keyed by type", "[packet]") {
  struct Case {
    const char* name;
    Bytes bytes;
    uint16_t src_port;
    uint16_t dst_port;
    bool keeps_no_state = false;
  };
  // A neighbor solicitation's target, ND's "identifier": pf folds its four words into 16 bits.
  const Bytes target = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0};
  const uint16_t target_id = (0xfe80 ^ 0x1234 ^ 0x9abc) ^ (0x0000 ^ 0x5678 ^ 0xdef0);
  const std::vector<Case> cases = {
      {"router advertisement: the answer to a solicitation (type 10)",
       PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").icmp(9, 0, 0x01000708).payload(8).build(), 10, 0},
      {"router solicitation", PacketBuilder().ipv4("10.0.0.2", "224.0.0.2").icmp(10, 0).build(), 0, 10},
      {"neighbour solicitation: keyed by its target",
       PacketBuilder().ipv6("fe80::1", "ff02::1:ff00:2").ttl(255).icmp(135, 0).payload(target).build(),
       target_id, 135},
      {"neighbour advertisement: answers the solicitation, makes no state",
       PacketBuilder().ipv6("fe80::2", "fe80::1").ttl(255).icmp(136, 0, 0x60000000).payload(target).build(),
       135, target_id, true},
      {"MLDv2 report: a state of its own type",
       PacketBuilder().ipv6("fe80::1", "ff02::16").icmp(143, 0).build(), 0, 143},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    PacketView p;
    REQUIRE(parse_exact(c.bytes, p) == Reason::Match);
    CHECK_FALSE(p.icmp.is_query);
    CHECK_FALSE(p.icmp.is_error);
    CHECK(p.src_port == c.src_port);
    CHECK(p.dst_port == c.dst_port);
    CHECK(p.icmp.keeps_no_state == c.keeps_no_state);
  }
  // A solicitation too short for its target is malformed, as pf finds it.
  PacketView p;
  CHECK(parse_exact(PacketBuilder().ipv6("fe80::1", "fe80::2").ttl(255).icmp(135, 0).payload(8).build(), p) ==
        Reason::BadIcmp);
}

// RFC 4861: neighbor discovery is sent with hop limit 255 and never forwarded, so one with a lower
// hop limit was sent from off the link (pf_setup_pdesc drops it, PFRES_NORM). Other ICMPv6 types,
// and a router's IPv4 messages, take any TTL.
TEST_CASE("parse: neighbor discovery must come with hop limit 255", "[packet][icmp]") {
  struct Case {
    const char* name;
    uint8_t type;
    bool v6;
    uint8_t ttl;
    Reason reason;
  };
  const Case cases[] = {
      {"router solicitation, 255", 133, true, 255, Reason::Match},
      {"router solicitation, 64", 133, true, 64, Reason::BadIcmp},
      {"router advertisement, 255", 134, true, 255, Reason::Match},
      {"router advertisement, 254", 134, true, 254, Reason::BadIcmp},
      {"neighbor solicitation, 255", 135, true, 255, Reason::Match},
      {"neighbor solicitation, 1", 135, true, 1, Reason::BadIcmp},
      {"neighbor advertisement, 255", 136, true, 255, Reason::Match},
      {"neighbor advertisement, 64", 136, true, 64, Reason::BadIcmp},
      {"redirect, 255", 137, true, 255, Reason::Match},
      {"redirect, 64", 137, true, 64, Reason::BadIcmp},
      {"ICMPv6 echo request, 64", 128, true, 64, Reason::Match},
      {"router renumbering, 64", 138, true, 64, Reason::Match},
      {"IPv4 router advertisement, 64", 9, false, 64, Reason::Match},
      {"IPv4 router solicitation, 1", 10, false, 1, Reason::Match},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    PacketBuilder b;
    if (c.v6) {
      b.ipv6("fe80::1", "fe80::2");
    } else {
      b.ipv4("10.0.0.1", "10.0.0.2");
    }
    // Long enough for any of them: a redirect's target and destination are 32 bytes.
    const Bytes packet = b.ttl(c.ttl).icmp(c.type, 0).payload(32).build();
    PacketView p;
    CHECK(parse_exact(packet, p) == c.reason);
  }
}

TEST_CASE("parse: other transports pass with no ports", "[packet]") {
  struct Case {
    const char* name;
    Bytes bytes;
    uint8_t proto;
  };
  const std::vector<Case> cases = {
      {"GRE over IPv4", PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").raw_l4(47, Bytes(24, 1)).build(), 47},
      {"ESP over IPv6 ends the chain",
       PacketBuilder()
           .ipv6("2001:db8::1", "2001:db8::2")
           .dest_opts()
           .raw_l4(ip6ext::kEsp, Bytes(32, 7))
           .build(),
       ip6ext::kEsp},
      {"no next header",
       PacketBuilder().ipv6("2001:db8::1", "2001:db8::2").hop_by_hop().raw_l4(ip6ext::kNoNext, {}).build(),
       ip6ext::kNoNext},
      {"zero-length IPv4 payload", PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").raw_l4(253, {}).build(), 253},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    PacketView p;
    REQUIRE(parse_exact(c.bytes, p) == Reason::Match);
    CHECK(p.proto == c.proto);
    CHECK(p.src_port == 0);
    CHECK(p.dst_port == 0);
    CHECK(p.payload_offset == p.l4_offset);
    CHECK(p.payload_length == p.l4_length);
  }
}

TEST_CASE("parse: IPv4 options are walked", "[packet]") {
  struct Case {
    const char* name;
    Bytes options;
    bool has_options;
  };
  const std::vector<Case> cases = {
      {"NOPs alone (pf: fishy)", {1, 1, 1, 1}, true},
      {"EOL first (pf: fishy)", {0, 0, 0, 0}, true},
      {"router alert", {148, 4, 0, 0}, true},
      {"record route", {7, 7, 4, 0, 0, 0, 0, 0}, true},
      {"NOP then timestamp", {1, 68, 12, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0}, true},
      {"40 bytes of options", cat({7, 39, 4}, Bytes(37, 0)), true},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    PacketView p;
    REQUIRE(parse_exact(v4_udp().ip_options(c.options).build(), p) == Reason::Match);
    CHECK(p.has_ip_options == c.has_options);
    CHECK(p.l3_header_length == 20 + (c.options.size() + 3) / 4 * 4);
    CHECK(p.src_port == 5000);
  }
}

TEST_CASE("parse: the router alert of group management is not an IP option to refuse", "[packet]") {
  struct Case {
    const char* name;
    Bytes bytes;
    bool has_options;
  };
  const Bytes alert4{148, 4, 0, 0};
  const Bytes alert6{0, 0, 5, 2, 0, 0, 1, 0};  // hop-by-hop: router alert (MLD), PadN
  auto v4 = [] { return PacketBuilder().ipv4("10.0.0.1", "224.0.0.22"); };
  auto v6 = [] { return PacketBuilder().ipv6("fe80::1", "ff02::16").ttl(1); };
  const std::vector<Case> cases = {
      {"IGMP report with router alert", v4().ip_options(alert4).raw_l4(ipproto::kIgmp, Bytes(8, 0)).build(),
       false},
      {"IGMP with router alert and record route",
       v4().ip_options(cat(alert4, {7, 7, 4, 0, 0, 0, 0, 0})).raw_l4(ipproto::kIgmp, Bytes(8, 0)).build(),
       true},
      {"UDP with router alert", v4().ip_options(alert4).udp(1, 2).build(), true},
      {"MLDv2 report", v6().ipv6_ext_raw(ip6ext::kHopByHop, alert6).icmp(143, 0).build(), false},
      {"MLD query", v6().ipv6_ext_raw(ip6ext::kHopByHop, alert6).icmp(130, 0).payload(16).build(), false},
      {"echo request with router alert", v6().ipv6_ext_raw(ip6ext::kHopByHop, alert6).icmp_echo(1, 1).build(),
       true},
      {"MLD report with a hop limit past its link",
       v6().ttl(2).ipv6_ext_raw(ip6ext::kHopByHop, alert6).icmp(143, 0).build(), true},
      {"MLD report from a global address",
       PacketBuilder()
           .ipv6("2001:db8::1", "ff02::16")
           .ttl(1)
           .ipv6_ext_raw(ip6ext::kHopByHop, alert6)
           .icmp(143, 0)
           .build(),
       true},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    PacketView p;
    REQUIRE(parse_exact(c.bytes, p) == Reason::Match);
    CHECK(p.router_alert);
    CHECK(p.has_ip_options == c.has_options);
  }
}

TEST_CASE("parse: IPv6 extension chains", "[packet]") {
  auto base = [] { return PacketBuilder().ipv6("2001:db8::1", "2001:db8::2"); };
  struct Case {
    const char* name;
    Bytes bytes;
    uint16_t l4_offset;
    bool has_options;
  };
  const std::vector<Case> cases = {
      {"none", base().udp(1, 2).build(), 40, false},
      {"hop-by-hop with padding only (pf: fishy)", base().hop_by_hop().udp(1, 2).build(), 48, true},
      {"hop-by-hop with router alert (MLD)",
       base().ipv6_ext_raw(ip6ext::kHopByHop, {0, 0, 5, 2, 0, 0, 1, 0}).udp(1, 2).build(), 48, true},
      {"hop-by-hop with Pad1s",
       base().ipv6_ext_raw(ip6ext::kHopByHop, {0, 0, 0, 0, 0, 0, 0, 0}).udp(1, 2).build(), 48, true},
      {"destination options 16 bytes (pf: whatever they hold)", base().dest_opts(16).udp(1, 2).build(), 56,
       true},
      {"routing header, segments left 0", base().routing().udp(1, 2).build(), 48, true},
      {"type 0 routing header with no segments left",
       base().ipv6_ext_raw(ip6ext::kRouting, {0, 0, 0, 0, 0, 0, 0, 0}).udp(1, 2).build(), 48, true},
      {"AH", base().ah(24).udp(1, 2).build(), 64, false},
      {"all of them in RFC 8200 order",
       base().hop_by_hop().dest_opts().routing().ah().dest_opts(24).udp(1, 2).build(),
       40 + 8 + 8 + 8 + 24 + 24, true},
      {"largest hop-by-hop (2048 bytes)", base().hop_by_hop(2048).udp(1, 2).build(), 40 + 2048, true},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    PacketView p;
    REQUIRE(parse_exact(c.bytes, p) == Reason::Match);
    CHECK(p.proto == ipproto::kUdp);
    CHECK(p.l4_offset == c.l4_offset);
    CHECK(p.l3_header_length == c.l4_offset);
    CHECK(p.has_ip_options == c.has_options);
    CHECK(p.src_port == 1);
    CHECK(p.dst_port == 2);
  }
}

// --- fragments -------------------------------------------------------------------------------

TEST_CASE("parse: IPv4 fragments", "[packet][fragment]") {
  SECTION("first fragment carries the transport header, UDP length covers the datagram") {
    PacketView p;
    const Bytes b = v4_udp().payload(16).udp_length(3000).fragment(0, true, 0xbeef).build();
    REQUIRE(parse_exact(b, p) == Reason::Match);
    CHECK(p.is_fragment);
    CHECK(p.is_first_fragment);
    CHECK(p.fragment_offset == 0);
    CHECK(p.fragment_id == 0xbeef);
    CHECK(p.src_port == 5000);
    CHECK(p.dst_port == 53);
    CHECK(p.payload_length == 16);
  }
  SECTION("later fragment: IP layer only, ports zero") {
    PacketView p;
    const Bytes b = v4_tcp().payload(100).fragment(1480, true, 7).build();  // 120 bytes: a multiple of 8
    REQUIRE(parse_exact(b, p) == Reason::Match);
    CHECK(p.is_fragment);
    CHECK_FALSE(p.is_first_fragment);
    CHECK(p.fragment_offset == 1480);
    CHECK(p.fragment_id == 7);
    CHECK(p.proto == ipproto::kTcp);
    CHECK(p.src_port == 0);
    CHECK(p.dst_port == 0);
    CHECK(p.tcp.seq == 0);
    CHECK(p.payload_offset == 20);
    CHECK(p.payload_length == 120);
  }
  SECTION("last fragment may have any length") {
    PacketView p;
    REQUIRE(parse_exact(v4_udp().payload(3).fragment(64, false, 9).build(), p) == Reason::Match);
    CHECK(p.is_fragment);
    CHECK_FALSE(p.is_first_fragment);
    CHECK(p.fragment_offset == 64);
  }
  SECTION("DF without fragmentation") {
    PacketView p;
    REQUIRE(parse_exact(v4_udp().df().build(), p) == Reason::Match);
    CHECK(p.dont_fragment);
    CHECK_FALSE(p.is_fragment);
    CHECK_FALSE(p.is_first_fragment);
  }
}

TEST_CASE("parse: IPv6 fragments", "[packet][fragment]") {
  SECTION("first fragment: 32-bit id, transport header parsed") {
    PacketView p;
    const Bytes b = v6_udp().hop_by_hop().fragment(0, true, 0x89abcdef).payload(8).udp_length(4000).build();
    REQUIRE(parse_exact(b, p) == Reason::Match);
    CHECK(p.is_fragment);
    CHECK(p.is_first_fragment);
    CHECK(p.fragment_id == 0x89abcdef);
    CHECK(p.proto == ipproto::kUdp);
    CHECK(p.l4_offset == 40 + 8 + 8);
    CHECK(p.src_port == 5000);
  }
  SECTION("later fragment: upper layer named by the fragment header, ports zero") {
    PacketView p;
    const Bytes b = v6_tcp().fragment(1232, true, 0x01020304).payload(4).build();  // 24 bytes
    REQUIRE(parse_exact(b, p) == Reason::Match);
    CHECK(p.is_fragment);
    CHECK_FALSE(p.is_first_fragment);
    CHECK(p.fragment_offset == 1232);
    CHECK(p.fragment_id == 0x01020304);
    CHECK(p.proto == ipproto::kTcp);
    CHECK(p.src_port == 0);
    CHECK(p.l4_offset == 48);
    CHECK(p.payload_length == 24);
  }
  SECTION("atomic fragment is a whole packet (RFC 6946)") {
    PacketView p;
    REQUIRE(parse_exact(v6_tcp().fragment(0, false, 77).build(), p) == Reason::Match);
    CHECK_FALSE(p.is_fragment);
    CHECK(p.fragment_id == 77);
    CHECK(p.src_port == 40000);
  }
}

// --- ICMP errors and quoted packets ----------------------------------------------------------

TEST_CASE("parse: ICMP errors quote the offending packet", "[packet][icmp]") {
  const Bytes tcp4 =
      PacketBuilder().ipv4("10.0.0.2", "10.0.0.1").tcp(80, 40000).seq(0xabcdef01).mss(1460).build();
  const Bytes udp6 = PacketBuilder().ipv6("2001:db8::2", "2001:db8::1").hop_by_hop().udp(53, 5000).build();
  const Bytes echo4 = PacketBuilder().ipv4("10.0.0.2", "10.0.0.1").icmp_echo(99, 1).build();
  struct Case {
    const char* name;
    bool six;
    uint8_t type;
    uint8_t code;
    Bytes quote;
  };
  const std::vector<Case> cases = {
      {"unreachable, frag needed", false, 3, 4, tcp4},
      {"unreachable, quote cut after 8 transport bytes", false, 3, 1, pairwall::test::truncated(tcp4, 28)},
      {"source quench", false, 4, 0, tcp4},
      {"redirect", false, 5, 1, tcp4},
      {"time exceeded", false, 11, 0, tcp4},
      {"parameter problem", false, 12, 0, tcp4},
      {"unreachable quoting an echo", false, 3, 3, echo4},
      {"ICMPv6 unreachable", true, 1, 4, udp6},
      {"ICMPv6 packet too big", true, 2, 0, udp6},
      {"ICMPv6 time exceeded", true, 3, 0, udp6},
      {"ICMPv6 parameter problem", true, 4, 1, udp6},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    PacketBuilder outer;
    if (c.six) {
      outer.ipv6("2001:db8::ff", "2001:db8::2");
    } else {
      outer.ipv4("192.0.2.254", "10.0.0.2");
    }
    const Bytes b = outer.icmp_error(c.type, c.code, c.quote, 1400).build();
    PacketView p;
    REQUIRE(parse_exact(b, p) == Reason::Match);
    CHECK(p.icmp.is_error);
    CHECK_FALSE(p.icmp.is_query);
    CHECK(p.icmp.type == c.type);
    CHECK(p.icmp.code == c.code);
    CHECK(p.src_port == 0);
    CHECK(p.dst_port == 0);
    const uint16_t header = c.six ? 40 : 20;
    REQUIRE(p.icmp.quoted_offset == header + 8);

    PacketView q;
    const auto quote = std::span<const uint8_t>(b).subspan(p.icmp.quoted_offset);
    REQUIRE(parse_quoted_packet(quote, q) == Reason::Match);
    CHECK(q.family == p.family);
    CHECK(q.data == b.data() + p.icmp.quoted_offset);
    if (c.quote == echo4) {
      CHECK(q.icmp.is_query);
      CHECK(q.src_port == 99);
    } else if (c.six) {
      CHECK(q.proto == ipproto::kUdp);
      CHECK(q.src == v6("2001:db8::2"));
      CHECK(q.src_port == 53);
      CHECK(q.dst_port == 5000);
    } else {
      CHECK(q.proto == ipproto::kTcp);
      CHECK(q.src == v4("10.0.0.2"));
      CHECK(q.dst == v4("10.0.0.1"));
      CHECK(q.src_port == 80);
      CHECK(q.dst_port == 40000);
      CHECK(q.tcp.seq == 0xabcdef01);
    }
  }
}

TEST_CASE("parse_quoted_packet: every cut of a quote", "[packet][icmp]") {
  struct Case {
    const char* name;
    Bytes packet;
    std::size_t minimum;  // IP header (with extensions) + 8 transport bytes
  };
  const std::vector<Case> cases = {
      {"IPv4 TCP", v4_tcp().mss(1460).payload(40).build(), 28},
      {"IPv4 UDP with options", v4_udp().ip_options({148, 4, 0, 0}).payload(40).build(), 32},
      {"IPv6 UDP behind extensions", v6_udp().hop_by_hop().dest_opts(16).payload(40).build(), 72},
      {"IPv6 TCP", v6_tcp().payload(40).build(), 48},
      {"IPv4 echo", PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").icmp_echo(1, 2).payload(40).build(), 28},
  };
  for (const auto& c : cases) {
    for (std::size_t n = 0; n <= c.packet.size(); ++n) {
      INFO(c.name << ", cut at " << n);
      PacketView q;
      const Bytes cut = pairwall::test::truncated(c.packet, n);
      auto storage = std::make_unique<uint8_t[]>(n + 1);
      std::memcpy(storage.get(), cut.data(), n);
      const Reason r = parse_quoted_packet(std::span<const uint8_t>(storage.get(), n), q);
      if (n < c.minimum) {
        CHECK(r == Reason::Short);
      } else {
        CHECK(r == Reason::Match);
        CHECK(q.src_port != 0);
      }
    }
  }
}

// --- malformed packets -----------------------------------------------------------------------

struct Malformed {
  const char* name;
  Bytes bytes;
  Reason reason;
};

void check_all(const std::vector<Malformed>& cases) {
  for (const auto& c : cases) {
    INFO(c.name << " (" << c.bytes.size() << " bytes)");
    PacketView p;
    const Reason r = parse_exact(c.bytes, p);
    CHECK(std::string(reason_name(r)) == std::string(reason_name(c.reason)));
    CHECK_FALSE(is_pass(r));
  }
}

Bytes with(Bytes b, std::size_t at, uint8_t value) {
  b.at(at) = value;
  return b;
}

TEST_CASE("parse: malformed IP headers", "[packet][malformed]") {
  const Bytes udp4 = v4_udp().payload(8).build();
  Bytes bad_total_short = udp4;
  put16(bad_total_short, 2, static_cast<uint16_t>(udp4.size() + 1));
  Bytes total_below_ihl = udp4;
  put16(total_below_ihl, 2, 19);
  Bytes total_zero = udp4;
  put16(total_zero, 2, 0);
  check_all({
      {"empty", {}, Reason::Short},
      {"one byte", {0x45}, Reason::Short},
      {"version 0", with(udp4, 0, 0x05), Reason::BadIpVersion},
      {"version 5", with(udp4, 0, 0x55), Reason::BadIpVersion},
      {"version 15", with(udp4, 0, 0xf5), Reason::BadIpVersion},
      {"IPv4 header of 19 bytes", pairwall::test::truncated(udp4, 19), Reason::Short},
      {"IHL 0", v4_udp().ihl(0).build(), Reason::BadIpHeader},
      {"IHL 4", v4_udp().ihl(4).build(), Reason::BadIpHeader},
      {"IHL past total length", v4_udp().ihl(15).build(), Reason::BadIpHeader},
      {"IHL past the buffer", v4_udp().ihl(15).total_length(60).build(), Reason::Short},
      {"total length past the buffer", bad_total_short, Reason::Short},
      {"total length below IHL", total_below_ihl, Reason::BadIpHeader},
      {"total length zero (no TSO packets)", total_zero, Reason::BadIpHeader},
      {"IPv6 header of 39 bytes", pairwall::test::truncated(v6_udp().build(), 39), Reason::Short},
      {"IPv6 payload length past the buffer", v6_udp().total_length(9).build(), Reason::Short},
      {"IPv6 version in an IPv4-sized packet", v4_udp().version(6).build(), Reason::Short},
  });
}

TEST_CASE("parse: malformed IPv4 options", "[packet][malformed]") {
  check_all({
      {"option length 0", v4_udp().ip_options({7, 0, 0, 0}).build(), Reason::BadIpHeader},
      {"option length 1", v4_udp().ip_options({7, 1, 0, 0}).build(), Reason::BadIpHeader},
      {"option length past the header", v4_udp().ip_options({7, 5, 0, 0}).build(), Reason::BadIpHeader},
      {"option length far past the header", v4_udp().ip_options({7, 255, 4, 0}).build(), Reason::BadIpHeader},
      {"type byte with no length byte", v4_udp().ip_options({1, 1, 1, 68}).build(), Reason::BadIpHeader},
      {"second option runs past", v4_udp().ip_options({148, 4, 0, 0, 7, 8, 4, 0}).build(),
       Reason::BadIpHeader},
  });
}

TEST_CASE("parse: malformed IPv6 extension chains", "[packet][malformed]") {
  auto base = [] { return PacketBuilder().ipv6("2001:db8::1", "2001:db8::2"); };
  PacketBuilder many = base();
  for (int i = 0; i < 17; ++i) many.ah(12);
  check_all({
      {"chain starts with one byte left", base().raw_l4(ip6ext::kHopByHop, {58}).build(),
       Reason::BadIpv6Extension},
      {"hop-by-hop length past the payload",
       base().ipv6_ext_raw(ip6ext::kHopByHop, {0, 1, 1, 4, 0, 0, 0, 0}).build(), Reason::BadIpv6Extension},
      {"routing header length past the payload",
       base().ipv6_ext_raw(ip6ext::kRouting, {0, 2, 4, 0, 0, 0, 0, 0}).udp(1, 2).build(),
       Reason::BadIpv6Extension},
      {"AH length past the payload", base().ipv6_ext_raw(ip6ext::kAh, {0, 4, 0, 0, 0, 0, 0, 0}).build(),
       Reason::BadIpv6Extension},
      {"fragment header cut", base().raw_l4(ip6ext::kFragment, {17, 0, 0, 1}).build(),
       Reason::BadIpv6Extension},
      {"hop-by-hop not first", base().dest_opts().hop_by_hop().udp(1, 2).build(), Reason::BadIpv6Extension},
      {"two fragment headers", base().fragment(0, true, 1).fragment(0, true, 1).udp(1, 2).build(),
       Reason::BadIpv6Extension},
      {"two routing headers", base().routing().routing().udp(1, 2).build(), Reason::BadIpv6Extension},
      {"three destination options", base().dest_opts().dest_opts().dest_opts().udp(1, 2).build(),
       Reason::BadIpv6Extension},
      {"more than 16 headers", many.udp(1, 2).build(), Reason::BadIpv6Extension},
      {"type 0 routing with segments left (RFC 5095)",
       base().ipv6_ext_raw(ip6ext::kRouting, cat({0, 2, 0, 1}, Bytes(20, 0))).udp(1, 2).build(),
       Reason::BadIpv6Extension},
      {"option length past the header",
       base().ipv6_ext_raw(ip6ext::kHopByHop, {0, 0, 1, 5, 0, 0, 0, 0}).build(), Reason::BadIpv6Extension},
      {"option type with no length byte",
       base().ipv6_ext_raw(ip6ext::kDestOpts, {0, 0, 1, 3, 0, 0, 0, 7}).udp(1, 2).build(),
       Reason::BadIpv6Extension},
      // RFC 2675 3: a jumbo payload option says the payload length is 0; where it is not, pf drops
      // the packet as PFRES_IPOPTIONS whatever allow-opts says.
      {"jumbo payload option with a payload length",
       base().ipv6_ext_raw(ip6ext::kHopByHop, {0, 0, 0xc2, 4, 0, 1, 0, 0}).udp(1, 2).build(),
       Reason::BadIpv6Extension},
  });
}

// An IPv4 datagram with authentication headers (RFC 4302) of the given lengths put between its IP
// header and its transport, the first AH's own next header first.
Bytes behind_ipv4_ah(Bytes datagram, const std::vector<std::size_t>& lengths) {
  const std::size_t ihl = (datagram[0] & 0x0fu) * 4u;
  uint8_t next = datagram[9];
  Bytes chain;
  for (auto it = lengths.rbegin(); it != lengths.rend(); ++it) {
    Bytes ah(*it, 0);
    ah[0] = next;
    ah[1] = static_cast<uint8_t>(*it / 4 - 2);
    chain.insert(chain.begin(), ah.begin(), ah.end());
    next = ip6ext::kAh;
  }
  datagram.insert(datagram.begin() + static_cast<std::ptrdiff_t>(ihl), chain.begin(), chain.end());
  datagram[9] = next;
  put16(datagram, 2, static_cast<uint16_t>(get16(datagram, 2) + chain.size()));
  return datagram;
}

TEST_CASE("parse: IPv4 AH is walked to the transport it protects, as IPv6's (pf_walk_header)", "[packet]") {
  SECTION("TCP behind one AH") {
    PacketView p;
    REQUIRE(parse_exact(behind_ipv4_ah(v4_tcp().seq(0x01020304).mss(1400).build(), {24}), p) ==
            Reason::Match);
    CHECK(p.proto == ipproto::kTcp);
    CHECK(p.l4_offset == 20 + 24);
    CHECK(p.l3_header_length == p.l4_offset);
    CHECK(p.src_port == 40000);
    CHECK(p.dst_port == 80);
    CHECK(p.tcp.seq == 0x01020304);
    CHECK(p.tcp.mss_offset == 20 + 24 + 20 + 2);
    CHECK_FALSE(p.has_ip_options);
  }
  SECTION("UDP behind two, after IP options") {
    PacketView p;
    const Bytes b =
        behind_ipv4_ah(v4_udp().ip_options({7, 7, 4, 0, 0, 0, 0, 0}).payload(5).build(), {12, 16});
    REQUIRE(parse_exact(b, p) == Reason::Match);
    CHECK(p.proto == ipproto::kUdp);
    CHECK(p.l4_offset == 28 + 12 + 16);
    CHECK(p.src_port == 5000);
    CHECK(p.payload_length == 5);
    CHECK(p.has_ip_options);
  }
  SECTION("quoted in an ICMP error") {
    const Bytes quoted =
        behind_ipv4_ah(PacketBuilder().ipv4("10.0.0.2", "10.0.0.1").tcp(80, 40000).build(), {24});
    const Bytes b = PacketBuilder().ipv4("192.0.2.254", "10.0.0.2").icmp_error(3, 4, quoted, 1400).build();
    PacketView p;
    REQUIRE(parse_exact(b, p) == Reason::Match);
    PacketView q;
    REQUIRE(parse_quoted_packet(std::span<const uint8_t>(b).subspan(p.icmp.quoted_offset), q) ==
            Reason::Match);
    CHECK(q.proto == ipproto::kTcp);
    CHECK(q.src_port == 80);
    CHECK(q.dst_port == 40000);
  }
  SECTION("a later fragment holds no header to walk") {
    PacketView p;
    Bytes b = v4_udp().payload(16).fragment(1480, true, 7).build();
    b[9] = ip6ext::kAh;
    REQUIRE(parse_exact(b, p) == Reason::Match);
    CHECK(p.proto == ip6ext::kAh);
    CHECK(p.l4_offset == 20);
  }
  SECTION("malformed chains") {
    Bytes past_end = behind_ipv4_ah(v4_udp().build(), {12});
    past_end[21] = 20;  // 88 bytes
    const Bytes first_fragment = behind_ipv4_ah(v4_udp().payload(8).fragment(0, true, 7).build(), {16});
    Bytes cut_first_fragment = first_fragment;
    cut_first_fragment[21] = 20;
    REQUIRE(parse(first_fragment) == Reason::Match);
    check_all({
        {"AH length past the datagram", past_end, Reason::Short},
        {"AH length past a first fragment", cut_first_fragment, Reason::BadOffset},
        {"more than 16 AHs", behind_ipv4_ah(v4_udp().build(), std::vector<std::size_t>(17, 12)),
         Reason::BadIpHeader},
    });
    CHECK(parse(behind_ipv4_ah(v4_udp().build(), std::vector<std::size_t>(16, 12))) == Reason::Match);
  }
}

TEST_CASE("parse: malformed transport headers", "[packet][malformed]") {
  auto v4i = [] { return PacketBuilder().ipv4("10.0.0.1", "10.0.0.2"); };
  auto v6i = [] { return PacketBuilder().ipv6("2001:db8::1", "2001:db8::2"); };
  check_all({
      {"TCP header of 19 bytes", v4i().raw_l4(ipproto::kTcp, Bytes(19, 0x50)).build(), Reason::Short},
      {"TCP header of 0 bytes over IPv6", v6i().raw_l4(ipproto::kTcp, {}).build(), Reason::Short},
      {"TCP data offset 0", v4_tcp().data_offset(0).build(), Reason::BadTcpHeader},
      {"TCP data offset 4", v4_tcp().data_offset(4).build(), Reason::BadTcpHeader},
      {"TCP data offset past the end", v4_tcp().data_offset(6).build(), Reason::BadTcpHeader},
      {"TCP data offset 15, 59 bytes present", v6_tcp().data_offset(15).payload(39).build(),
       Reason::BadTcpHeader},
      {"TCP option length 0", v4_tcp().tcp_options_raw({2, 0, 0, 0}).build(), Reason::BadTcpOptions},
      {"TCP option length 1", v4_tcp().tcp_options_raw({8, 1, 0, 0}).build(), Reason::BadTcpOptions},
      {"TCP option past the header", v4_tcp().tcp_options_raw({1, 8, 10, 0}).build(), Reason::BadTcpOptions},
      {"TCP option kind with no length", v4_tcp().tcp_options_raw({1, 1, 1, 2}).build(),
       Reason::BadTcpOptions},
      {"TCP option runs into the payload", v4_tcp().tcp_options_raw({1, 1, 2, 6}).payload(8).build(),
       Reason::BadTcpOptions},
      {"UDP header of 7 bytes", v4i().raw_l4(ipproto::kUdp, Bytes(7, 0)).build(), Reason::Short},
      {"UDP length past the packet", v4_udp().payload(4).udp_length(13).build(), Reason::BadUdpHeader},
      {"UDP length 7", v4_udp().udp_length(7).build(), Reason::BadUdpHeader},
      {"UDP length 0 (no jumbograms)", v6_udp().payload(10).udp_length(0).build(), Reason::BadUdpHeader},
      {"UDP to port 0", v4i().udp(5000, 0).build(), Reason::BadUdpHeader},
      {"TCP to port 0", v4i().tcp(5000, 0).build(), Reason::BadTcpHeader},
      {"TCP from port 0", v6i().tcp(0, 80).build(), Reason::BadTcpHeader},
      {"UDP to port 0 over IPv6", v6i().udp(5000, 0).build(), Reason::BadUdpHeader},
      {"UDP from port 0", v4i().udp(0, 53).build(), Reason::BadUdpHeader},
      {"ICMP of 7 bytes", v4i().raw_l4(ipproto::kIcmp, Bytes{8, 0, 0, 0, 0, 1, 0}).build(), Reason::BadIcmp},
      {"ICMPv6 of 4 bytes", v6i().raw_l4(ipproto::kIcmp6, Bytes{128, 0, 0, 0}).build(), Reason::BadIcmp},
      {"ICMP timestamp of 19 bytes", v4i().icmp(13, 0, 1).payload(11).build(), Reason::BadIcmp},
      {"ICMP mask request of 8 bytes", v4i().icmp(17, 0, 1).build(), Reason::BadIcmp},
      {"ICMPv6 over IPv4", v4i().icmp_echo(1, 1).ip_proto(ipproto::kIcmp6).build(), Reason::BadIcmp},
      {"ICMP over IPv6", v6i().icmp_echo(1, 1).ip_proto(ipproto::kIcmp).build(), Reason::BadIcmp},
  });
}

TEST_CASE("parse: ICMP errors with bad quotes", "[packet][malformed][icmp]") {
  auto err4 = [](Bytes quote) {
    return PacketBuilder().ipv4("192.0.2.1", "10.0.0.1").icmp_error(3, 1, quote).build();
  };
  auto err6 = [](Bytes quote) {
    return PacketBuilder().ipv6("2001:db8::ff", "2001:db8::1").icmp_error(1, 0, quote).build();
  };
  const Bytes tcp4 = v4_tcp().build();
  const Bytes tcp6 = v6_tcp().build();
  const Bytes inner_error = err4(tcp4);
  check_all({
      {"no quote", err4({}), Reason::BadIcmp},
      {"quote of an IP header only", err4(pairwall::test::truncated(tcp4, 20)), Reason::BadIcmp},
      {"quote cut 1 byte short of 8 transport bytes", err4(pairwall::test::truncated(tcp4, 27)),
       Reason::BadIcmp},
      {"quote with IHL 4", err4(with(tcp4, 0, 0x44)), Reason::BadIcmp},
      {"quote with version 7", err4(with(tcp4, 0, 0x75)), Reason::BadIcmp},
      {"IPv6 quoted in ICMP", err4(tcp6), Reason::BadIcmp},
      {"IPv4 quoted in ICMPv6", err6(tcp4), Reason::BadIcmp},
      {"ICMPv6 quote cut inside the IPv6 header", err6(pairwall::test::truncated(tcp6, 39)), Reason::BadIcmp},
      {"ICMPv6 quote cut inside the extension chain",
       err6(pairwall::test::truncated(v6_tcp().dest_opts(16).build(), 50)), Reason::BadIcmp},
      {"an error quoting an error", err4(pairwall::test::truncated(inner_error, 36)), Reason::BadIcmp},
      {"an error quoting a whole error", err4(inner_error), Reason::BadIcmp},
      {"quote of a later fragment",
       err4(pairwall::test::truncated(v4_udp().payload(64).fragment(1480, true, 7).build(), 48)),
       Reason::BadIcmp},
      {"ICMPv6 quote of a later fragment",
       err6(pairwall::test::truncated(v6_udp().fragment(1232, false, 9).payload(64).build(), 80)),
       Reason::BadIcmp},
      {"quote of ICMPv6 over IPv4",
       err4(PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").icmp_echo(1, 1).ip_proto(ipproto::kIcmp6).build()),
       Reason::BadIcmp},
  });
}

TEST_CASE("parse: malformed fragments", "[packet][malformed][fragment]") {
  Bytes tcp_doff_11(24, 0);  // a TCP header announcing 44 bytes, 24 of them present
  tcp_doff_11[12] = 11 << 4;
  check_all({
      {"IPv4 MF with 9 data bytes", v4_udp().payload(1).fragment(0, true, 1).build(), Reason::BadOffset},
      {"IPv4 later MF with 12 data bytes", v4_udp().payload(4).fragment(800, true, 1).build(),
       Reason::BadOffset},
      {"IPv4 reassembly past 65535", v4_udp().payload(8).fragment(65520, false, 1).build(),
       Reason::BadOffset},
      {"IPv4 TCP at offset 8 (RFC 1858)", v4_tcp().payload(4).fragment(8, false, 1).build(),
       Reason::BadOffset},
      {"IPv4 tiny first TCP fragment",
       PacketBuilder()
           .ipv4("10.0.0.1", "10.0.0.2")
           .fragment(0, true, 1)
           .raw_l4(ipproto::kTcp, Bytes(8, 0))
           .build(),
       Reason::BadOffset},
      {"IPv4 first TCP fragment ending inside the options",
       PacketBuilder()
           .ipv4("10.0.0.1", "10.0.0.2")
           .fragment(0, true, 1)
           .raw_l4(ipproto::kTcp, tcp_doff_11)
           .build(),
       Reason::BadOffset},
      {"IPv6 MF with 12 data bytes", v6_udp().fragment(0, true, 1).payload(4).build(), Reason::BadOffset},
      {"IPv6 reassembly past 65535", v6_udp().fragment(65528, false, 1).payload(8).build(),
       Reason::BadOffset},
      {"IPv6 TCP at offset 8", v6_tcp().fragment(8, false, 1).build(), Reason::BadOffset},
      {"IPv6 tiny first UDP fragment",
       PacketBuilder()
           .ipv6("2001:db8::1", "2001:db8::2")
           .fragment(0, true, 1)
           .raw_l4(ipproto::kUdp, {})
           .build(),
       Reason::BadOffset},
      {"IPv6 first ICMPv6 fragment of 0 bytes",
       PacketBuilder()
           .ipv6("2001:db8::1", "2001:db8::2")
           .fragment(0, true, 1)
           .raw_l4(ipproto::kIcmp6, {})
           .build(),
       Reason::BadOffset},
  });
}

// --- truncation walks ------------------------------------------------------------------------

std::vector<std::pair<const char*, Bytes>> valid_packets() {
  const Bytes quote = v4_tcp().seq(5).mss(1400).build();
  return {
      {"IPv4 TCP SYN with options", v4_tcp()
                                        .ip_options({148, 4, 0, 0})
                                        .mss(1460)
                                        .wscale(7)
                                        .sack_permitted()
                                        .timestamps(1, 2)
                                        .payload(5)
                                        .build()},
      {"IPv4 UDP", v4_udp().payload(9).build()},
      {"IPv4 echo", PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").icmp_echo(1, 2).payload(4).build()},
      {"IPv4 unreachable", PacketBuilder().ipv4("10.9.9.9", "10.0.0.1").icmp_error(3, 3, quote).build()},
      {"IPv4 first fragment", v4_udp().payload(16).udp_length(100).fragment(0, true, 3).build()},
      {"IPv4 later fragment", v4_udp().payload(8).fragment(24, false, 3).build()},
      {"IPv6 TCP behind extensions",
       v6_tcp().hop_by_hop().routing().dest_opts().mss(1200).payload(3).build()},
      {"IPv6 fragment", v6_udp().hop_by_hop().fragment(0, true, 0x11111111).payload(8).build()},
      {"IPv6 echo", PacketBuilder().ipv6("2001:db8::1", "2001:db8::2").icmp_echo(1, 2).build()},
      {"IPv6 too big", PacketBuilder()
                           .ipv6("2001:db8::9", "2001:db8::1")
                           .icmp_error(2, 0, v6_tcp().mss(1440).build())
                           .build()},
  };
}

TEST_CASE("parse: every truncation of a valid packet is dropped as short", "[packet][truncation]") {
  for (const auto& [name, packet] : valid_packets()) {
    PacketView whole;
    REQUIRE(parse_exact(packet, whole) == Reason::Match);
    for (std::size_t n = 0; n < packet.size(); ++n) {
      INFO(name << ", cut at " << n << " of " << packet.size());
      const Reason r = parse(pairwall::test::truncated(packet, n));
      CHECK(r == Reason::Short);
    }
  }
}

// The length fields are rewritten to agree with the cut, so that the cut reaches past the IP
// layer into every byte of the transport header and its options.
TEST_CASE("parse: every cut with consistent IP lengths is dropped or parses within bounds",
          "[packet][truncation]") {
  for (const auto& [name, packet] : valid_packets()) {
    PacketView whole;
    REQUIRE(parse_exact(packet, whole) == Reason::Match);
    const bool six = (packet[0] >> 4) == 6;
    const std::size_t l3 = six ? 40 : (packet[0] & 0xf) * 4u;
    for (std::size_t n = l3; n < packet.size(); ++n) {
      INFO(name << ", cut at " << n << " of " << packet.size());
      Bytes cut = pairwall::test::truncated(packet, n);
      put16(cut, six ? 4 : 2, static_cast<uint16_t>(six ? n - 40 : n));
      PacketView p;
      const Reason r = parse_exact(cut, p);
      const std::size_t quote_minimum = six ? 48 : 28;
      if (n < whole.payload_offset || (whole.icmp.is_error && n < whole.icmp.quoted_offset + quote_minimum)) {
        // Inside the headers the transport needs: never a pass.
        CHECK_FALSE(is_pass(r));
      } else if (r == Reason::Match) {
        CHECK(p.payload_offset + p.payload_length <= n);
        CHECK(p.l4_offset + p.l4_length == n);
      } else {
        // A fragment whose data length stops being a multiple of 8, a UDP length past the cut.
        CHECK((r == Reason::BadOffset || r == Reason::BadUdpHeader || r == Reason::BadIcmp));
      }
    }
  }
}

// Bit flips anywhere in a valid packet must never let the parser read outside the buffer
// (checked by the sanitizers) and a Match must describe ranges inside the packet.
TEST_CASE("parse: single-byte corruptions stay in bounds", "[packet][truncation]") {
  for (const auto& [name, packet] : valid_packets()) {
    for (std::size_t at = 0; at < packet.size(); ++at) {
      for (uint8_t value : {uint8_t{0x00}, uint8_t{0xff}, static_cast<uint8_t>(packet[at] ^ 0x80)}) {
        INFO(name << ", byte " << at << " = " << int{value});
        PacketView p;
        if (parse_exact(with(packet, at, value), p) == Reason::Match) {
          CHECK(p.l4_offset + p.l4_length <= p.size);
          CHECK(p.payload_offset + p.payload_length <= p.size);
          if (p.tcp.has_mss) CHECK(p.tcp.mss_offset + 2u <= p.size);
          if (p.icmp.is_error) CHECK(p.icmp.quoted_offset <= p.size);
        }
      }
    }
  }
}

TEST_CASE("reason names are stable snake_case and unique", "[reason]") {
  CHECK(reason_name(Reason::Match) == "match");
  CHECK(reason_name(Reason::State) == "state");
  CHECK(reason_name(Reason::DefaultPass) == "default_pass");
  CHECK(reason_name(Reason::Skipped) == "skipped");
  CHECK(is_pass(Reason::Skipped));
  CHECK(reason_name(Reason::Short) == "short");
  CHECK(reason_name(Reason::BadIpVersion) == "bad_ip_version");
  CHECK(reason_name(Reason::BadIpv6Extension) == "bad_ipv6_extension");
  CHECK(reason_name(Reason::RuleStateLimit) == "rule_state_limit");
  CHECK(reason_name(Reason::SourceLimit) == "src_limit");
  CHECK(reason_name(Reason::SourceNodeLimit) == "src_node_limit");
  CHECK(reason_name(Reason::Internal) == "internal");
  std::vector<std::string> seen;
  for (std::size_t i = 0; i < kReasonCount; ++i) {
    const std::string name(reason_name(static_cast<Reason>(i)));
    INFO("reason " << i << " = " << name);
    CHECK(name != "unknown");
    CHECK_FALSE(name.empty());
    for (char ch : name) CHECK(((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_'));
    for (const auto& other : seen) CHECK(other != name);
    seen.push_back(name);
  }
}

}  // namespace
