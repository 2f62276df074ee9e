// TCP RST and ICMP unreachable construction: crafted packets in, replies parsed back with the
// engine's parser and checked field by field, checksums verified independently.
#include "daemon/io/reject.h"

#include <catch2/catch.hpp>
#include <tuple>

#include "daemon/engine/packet.h"
#include "tests/unit/support/packet_builder.h"

namespace pairwall::io {
namespace {

using engine::Family;
using engine::PacketView;
using engine::Reason;
using engine::rules::BlockReply;
using test::Bytes;
using test::PacketBuilder;
namespace tcpflag = engine::tcpflag;

struct Reply {
  BuiltReply built;
  Bytes bytes;
};

Reply build(const Bytes& offending, BlockReply reply, RejectIcmp icmp = RejectIcmp::PortUnreachable,
            int16_t code = -1, bool checksum_partial = false) {
  Bytes out(kMaxReplySize, 0xEE);
  const BuiltReply b = build_reject(offending, reply, icmp, code, 64, checksum_partial, out);
  out.resize(b.size);
  return {b, out};
}

PacketView parse(const Bytes& bytes) {
  PacketView v;
  REQUIRE(engine::parse_packet(bytes, v) == Reason::Match);
  return v;
}

// The transport checksum over the pseudo-header verifies to zero when it is right.
uint16_t transport_checksum_residue(const Bytes& p, const PacketView& v) {
  uint32_t sum = 0;
  const bool v4 = v.family == Family::V4;
  const std::size_t l4_len = p.size() - v.l4_offset;
  if (!(v4 && v.proto == engine::ipproto::kIcmp)) {
    sum = test::checksum_add(sum, p.data() + (v4 ? 12 : 8), v4 ? 8 : 32);
    sum += static_cast<uint32_t>(l4_len >> 16) + static_cast<uint32_t>(l4_len & 0xffff) + v.proto;
  }
  sum = test::checksum_add(sum, p.data() + v.l4_offset, l4_len);
  return test::checksum_finish(sum);
}

TEST_CASE("RST answers a SYN with ACK = SEQ + 1 and SEQ 0 (RFC 9293 3.10.7.1)", "[reject]") {
  const Bytes syn = PacketBuilder()
                        .ipv4("192.0.2.10", "198.51.100.20")
                        .tcp(40000, 443)
                        .flags(tcpflag::kSyn)
                        .seq(1000)
                        .build();
  const Reply r = build(syn, BlockReply::ReturnRst);
  REQUIRE(r.built.status == RejectStatus::Built);
  CHECK(r.built.kind == ReplyKind::TcpRst);
  CHECK(r.built.size == 40);
  const PacketView v = parse(r.bytes);
  CHECK(v.family == Family::V4);
  CHECK(v.is_tcp());
  CHECK(engine::to_string(Family::V4, v.src) == "198.51.100.20");
  CHECK(engine::to_string(Family::V4, v.dst) == "192.0.2.10");
  CHECK(v.src_port == 443);
  CHECK(v.dst_port == 40000);
  CHECK(v.tcp.flags == (tcpflag::kRst | tcpflag::kAck));
  CHECK(v.tcp.seq == 0);
  CHECK(v.tcp.ack == 1001);
  CHECK(v.payload_length == 0);
  CHECK(v.ttl == 64);
  CHECK(test::internet_checksum(r.bytes.data(), 20) == 0);
  CHECK(transport_checksum_residue(r.bytes, v) == 0);
  CHECK(r.built.family == Family::V4);
  CHECK(engine::to_string(Family::V4, r.built.destination) == "192.0.2.10");
}

TEST_CASE("RST sequence numbers follow the segment's flags and length", "[reject]") {
  struct Row {
    const char* name;
    uint8_t flags;
    uint32_t seq;
    uint32_t ack;
    std::size_t payload;
    uint8_t want_flags;
    uint32_t want_seq;
    uint32_t want_ack;
  };
  const Row rows[] = {
      {"SYN", tcpflag::kSyn, 7, 0, 0, tcpflag::kRst | tcpflag::kAck, 0, 8},
      {"SYN with data", tcpflag::kSyn, 7, 0, 10, tcpflag::kRst | tcpflag::kAck, 0, 18},
      {"FIN without ACK", tcpflag::kFin, 100, 0, 5, tcpflag::kRst | tcpflag::kAck, 0, 106},
      {"ACK with data", tcpflag::kAck | tcpflag::kPsh, 5000, 90000, 100, tcpflag::kRst, 90000, 0},
      {"FIN ACK", tcpflag::kFin | tcpflag::kAck, 5000, 123456, 0, tcpflag::kRst, 123456, 0},
      {"sequence wraps", tcpflag::kSyn, 0xffffffff, 0, 0, tcpflag::kRst | tcpflag::kAck, 0, 0},
  };
  for (const auto& row : rows) {
    SECTION(row.name) {
      const Bytes seg = PacketBuilder()
                            .ipv4("10.0.0.1", "10.0.0.2")
                            .tcp(1234, 80)
                            .flags(row.flags)
                            .seq(row.seq)
                            .ack(row.ack)
                            .payload(row.payload)
                            .build();
      const Reply r = build(seg, BlockReply::ReturnRst);
      REQUIRE(r.built.status == RejectStatus::Built);
      const PacketView v = parse(r.bytes);
      CHECK(v.tcp.flags == row.want_flags);
      CHECK(v.tcp.seq == row.want_seq);
      CHECK(v.tcp.ack == row.want_ack);
      CHECK(transport_checksum_residue(r.bytes, v) == 0);
    }
  }
}

TEST_CASE("RST over IPv6 carries a valid pseudo-header checksum", "[reject]") {
  const Bytes syn = PacketBuilder().ipv6("2001:db8::1", "2001:db8:1::2").tcp(5555, 22).seq(42).build();
  const Reply r = build(syn, BlockReply::ReturnRst);
  REQUIRE(r.built.status == RejectStatus::Built);
  CHECK(r.built.size == 60);
  const PacketView v = parse(r.bytes);
  CHECK(v.family == Family::V6);
  CHECK(engine::to_string(Family::V6, v.src) == "2001:db8:1::2");
  CHECK(engine::to_string(Family::V6, v.dst) == "2001:db8::1");
  CHECK(v.src_port == 22);
  CHECK(v.dst_port == 5555);
  CHECK(v.tcp.ack == 43);
  CHECK(v.ttl == 64);
  CHECK(transport_checksum_residue(r.bytes, v) == 0);
}

TEST_CASE("ICMP unreachable quotes the offending packet", "[reject]") {
  const Bytes udp = PacketBuilder().ipv4("192.0.2.1", "203.0.113.9").udp(5353, 53).payload(30).build();
  SECTION("port unreachable") {
    const Reply r = build(udp, BlockReply::ReturnIcmp, RejectIcmp::PortUnreachable);
    REQUIRE(r.built.status == RejectStatus::Built);
    CHECK(r.built.kind == ReplyKind::Icmp);
    CHECK(r.built.size == 20 + 8 + udp.size());
    const PacketView v = parse(r.bytes);
    CHECK(v.proto == engine::ipproto::kIcmp);
    CHECK(v.icmp.type == 3);
    CHECK(v.icmp.code == 3);
    CHECK(v.icmp.is_error);
    CHECK(engine::to_string(Family::V4, v.src) == "203.0.113.9");
    CHECK(engine::to_string(Family::V4, v.dst) == "192.0.2.1");
    CHECK(Bytes(r.bytes.begin() + 28, r.bytes.end()) == udp);
    CHECK(test::internet_checksum(r.bytes.data(), 20) == 0);
    CHECK_FALSE(v.dont_fragment);  // as the kernel's own ICMP errors
    CHECK(transport_checksum_residue(r.bytes, v) == 0);
    // The quoted packet parses as the one that was rejected.
    PacketView quoted;
    REQUIRE(engine::parse_quoted_packet(std::span<const uint8_t>(r.bytes).subspan(v.icmp.quoted_offset),
                                        quoted) == Reason::Match);
    CHECK(quoted.src_port == 5353);
    CHECK(quoted.dst_port == 53);
  }
  SECTION("administratively prohibited") {
    const Reply r = build(udp, BlockReply::ReturnIcmp, RejectIcmp::AdminProhibited);
    REQUIRE(r.built.status == RejectStatus::Built);
    const PacketView v = parse(r.bytes);
    CHECK(v.icmp.type == 3);
    CHECK(v.icmp.code == 13);
    CHECK(transport_checksum_residue(r.bytes, v) == 0);
  }
  SECTION("TCP gets an ICMP too when the rule says return-icmp") {
    const Bytes syn = PacketBuilder().ipv4("192.0.2.1", "203.0.113.9").tcp(1, 2).build();
    const Reply r = build(syn, BlockReply::ReturnIcmp);
    REQUIRE(r.built.status == RejectStatus::Built);
    CHECK(r.built.kind == ReplyKind::Icmp);
  }
}

TEST_CASE("ICMP quotes are cut at 576 bytes for IPv4 and 1280 for IPv6", "[reject]") {
  const Bytes big4 = PacketBuilder().ipv4("192.0.2.1", "203.0.113.9").udp(1, 2).payload(1400).build();
  const Reply r4 = build(big4, BlockReply::ReturnIcmp);
  REQUIRE(r4.built.status == RejectStatus::Built);
  CHECK(r4.built.size == 576);
  CHECK(Bytes(r4.bytes.begin() + 28, r4.bytes.end()) == Bytes(big4.begin(), big4.begin() + 548));
  const PacketView v4 = parse(r4.bytes);
  CHECK(transport_checksum_residue(r4.bytes, v4) == 0);

  const Bytes big6 = PacketBuilder().ipv6("2001:db8::1", "2001:db8::2").udp(1, 2).payload(1400).build();
  const Reply r6 = build(big6, BlockReply::ReturnIcmp, RejectIcmp::AdminProhibited);
  REQUIRE(r6.built.status == RejectStatus::Built);
  CHECK(r6.built.size == 1280);
  const PacketView v6 = parse(r6.bytes);
  CHECK(v6.proto == engine::ipproto::kIcmp6);
  CHECK(v6.icmp.type == 1);
  CHECK(v6.icmp.code == 1);
  CHECK(transport_checksum_residue(r6.bytes, v6) == 0);
  CHECK(Bytes(r6.bytes.begin() + 48, r6.bytes.end()) == Bytes(big6.begin(), big6.begin() + 1232));
}

TEST_CASE("ICMPv6 port unreachable is type 1 code 4", "[reject]") {
  const Bytes udp = PacketBuilder().ipv6("2001:db8::1", "2001:db8::2").udp(1000, 2000).payload(8).build();
  const Reply r = build(udp, BlockReply::ReturnIcmp, RejectIcmp::PortUnreachable);
  REQUIRE(r.built.status == RejectStatus::Built);
  const PacketView v = parse(r.bytes);
  CHECK(v.icmp.type == 1);
  CHECK(v.icmp.code == 4);
  CHECK(r.built.size == 40 + 8 + udp.size());
  CHECK(transport_checksum_residue(r.bytes, v) == 0);
}

TEST_CASE("a rule's unreachable code replaces the configured one, for each family", "[reject]") {
  const Bytes udp4 = PacketBuilder().ipv4("192.0.2.1", "203.0.113.9").udp(5353, 53).payload(8).build();
  const Bytes udp6 = PacketBuilder().ipv6("2001:db8::1", "2001:db8::2").udp(1000, 2000).payload(8).build();
  for (const auto& [offending, code, type] :
       {std::tuple{udp4, int16_t{1}, uint8_t{3}}, std::tuple{udp4, int16_t{13}, uint8_t{3}},
        std::tuple{udp6, int16_t{1}, uint8_t{1}}, std::tuple{udp6, int16_t{0}, uint8_t{1}}}) {
    const Reply r = build(offending, BlockReply::ReturnIcmp, RejectIcmp::PortUnreachable, code);
    REQUIRE(r.built.status == RejectStatus::Built);
    const PacketView v = parse(r.bytes);
    CHECK(v.icmp.type == type);
    CHECK(v.icmp.code == code);
    CHECK(transport_checksum_residue(r.bytes, v) == 0);
  }
}

TEST_CASE("no reply where the RFCs forbid one", "[reject]") {
  struct Row {
    const char* name;
    Bytes packet;
    BlockReply reply;
    RejectStatus want;
  };
  const Bytes quoted = PacketBuilder().ipv4("198.51.100.1", "192.0.2.1").udp(1, 2).build();
  const Row rows[] = {
      {"RST to an RST", PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").tcp(1, 2).flags(tcpflag::kRst).build(),
       BlockReply::ReturnRst, RejectStatus::NotEligible},
      {"RST for UDP", PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").udp(1, 2).build(), BlockReply::ReturnRst,
       RejectStatus::NotEligible},
      {"ICMP error about an ICMP error",
       PacketBuilder().ipv4("192.0.2.1", "198.51.100.1").icmp_error(3, 1, quoted).build(),
       BlockReply::ReturnIcmp, RejectStatus::NotEligible},
      {"ICMPv6 error about an ICMPv6 error",
       PacketBuilder()
           .ipv6("2001:db8::1", "2001:db8::2")
           .icmp_error(1, 4, PacketBuilder().ipv6("2001:db8::2", "2001:db8::1").udp(1, 2).build())
           .build(),
       BlockReply::ReturnIcmp, RejectStatus::NotEligible},
      {"multicast destination", PacketBuilder().ipv4("10.0.0.1", "224.0.0.251").udp(5353, 5353).build(),
       BlockReply::ReturnIcmp, RejectStatus::NotEligible},
      {"broadcast destination", PacketBuilder().ipv4("10.0.0.1", "255.255.255.255").udp(68, 67).build(),
       BlockReply::ReturnIcmp, RejectStatus::NotEligible},
      {"unspecified source", PacketBuilder().ipv4("0.0.0.0", "10.0.0.1").udp(68, 67).build(),
       BlockReply::ReturnIcmp, RejectStatus::NotEligible},
      {"IPv6 multicast destination", PacketBuilder().ipv6("2001:db8::1", "ff02::1").udp(1, 2).build(),
       BlockReply::ReturnIcmp, RejectStatus::NotEligible},
      {"IPv6 unspecified source", PacketBuilder().ipv6("::", "2001:db8::1").udp(1, 2).build(),
       BlockReply::ReturnIcmp, RejectStatus::NotEligible},
      {"later fragment",
       PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").fragment(1480, false, 9).udp(1, 2).build(),
       BlockReply::ReturnIcmp, RejectStatus::NotEligible},
      {"block drop", PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").udp(1, 2).build(), BlockReply::Drop,
       RejectStatus::NotEligible},
      {"truncated header",
       test::truncated(PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").tcp(1, 2).build(), 30),
       BlockReply::ReturnRst, RejectStatus::Malformed},
      {"empty", Bytes{}, BlockReply::ReturnIcmp, RejectStatus::Malformed},
  };
  for (const auto& row : rows) {
    SECTION(row.name) {
      CHECK(build(row.packet, row.reply).built.status == row.want);
    }
  }
}

TEST_CASE("no RST for a segment whose checksum is wrong, as pf's PFRES_PROTCKSUM", "[reject]") {
  struct Row {
    const char* name;
    Bytes segment;
  };
  const Row rows[] = {
      {"IPv4 SYN", PacketBuilder().ipv4("192.0.2.10", "198.51.100.20").tcp(40000, 443).seq(1000).build()},
      {"IPv4 data", PacketBuilder()
                        .ipv4("192.0.2.10", "198.51.100.20")
                        .tcp(40000, 443)
                        .flags(tcpflag::kAck | tcpflag::kPsh)
                        .payload(101)
                        .build()},
      {"IPv6 SYN", PacketBuilder().ipv6("2001:db8::1", "2001:db8:1::2").tcp(5555, 22).seq(42).build()},
  };
  for (const Row& row : rows) {
    SECTION(row.name) {
      CHECK(build(row.segment, BlockReply::ReturnRst).built.status == RejectStatus::Built);
      const PacketView v = parse(row.segment);
      for (const std::size_t at :
           {std::size_t{v.l4_offset} + 2, std::size_t{v.l4_offset} + 16, row.segment.size() - 1}) {
        Bytes corrupt = row.segment;
        corrupt[at] ^= 0x10;
        CHECK(build(corrupt, BlockReply::ReturnRst).built.status == RejectStatus::NotEligible);
        // An unreachable quotes the packet as it came, whatever its checksum, as pf's.
        CHECK(build(corrupt, BlockReply::ReturnIcmp).built.status == RejectStatus::Built);
        // A checksum the kernel has yet to finish is not wrong.
        CHECK(build(corrupt, BlockReply::ReturnRst, RejectIcmp::PortUnreachable, -1, true).built.status ==
              RejectStatus::Built);
      }
    }
  }
}

TEST_CASE("the host's own loopback traffic is answered", "[reject]") {
  const Bytes udp = PacketBuilder().ipv4("127.0.0.1", "127.0.0.1").udp(40000, 9).build();
  CHECK(build(udp, BlockReply::ReturnIcmp).built.status == RejectStatus::Built);
  const Bytes syn6 = PacketBuilder().ipv6("::1", "::1").tcp(40000, 10).build();
  CHECK(build(syn6, BlockReply::ReturnRst).built.status == RejectStatus::Built);
}

TEST_CASE("an ICMP echo request may be answered with an unreachable", "[reject]") {
  const Bytes echo = PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").icmp_echo(7, 1).payload(16).build();
  CHECK(build(echo, BlockReply::ReturnIcmp).built.status == RejectStatus::Built);
}

TEST_CASE("a reply to a link-local address goes over the interface the packet came in on", "[reject]") {
  const auto address = [](const char* text) { return *engine::parse_address(text, nullptr); };
  sockaddr_in6 to{};
  SECTION("link-local: scoped to the arrival interface") {
    for (const char* text : {"fe80::1", "febf:ffff::1"}) {
      REQUIRE(reply_address_v6(address(text), 7, to));
      CHECK(to.sin6_family == AF_INET6);
      CHECK(to.sin6_scope_id == 7);
      CHECK(engine::IpAddress::from_v6_bytes(to.sin6_addr.s6_addr) == address(text));
    }
  }
  SECTION("link-local without an interface: refused, not left to the routes") {
    CHECK_FALSE(reply_address_v6(address("fe80::1"), 0, to));
  }
  SECTION("other unicast needs no scope") {
    for (const char* text : {"2001:db8::1", "fec0::1", "fe00::1", "::1"}) {
      REQUIRE(reply_address_v6(address(text), 7, to));
      CHECK(to.sin6_scope_id == 0);
      CHECK(engine::IpAddress::from_v6_bytes(to.sin6_addr.s6_addr) == address(text));
    }
    CHECK(reply_address_v6(address("2001:db8::1"), 0, to));
  }
}

TEST_CASE("token bucket: burst, then the configured rate", "[reject]") {
  TokenBucket bucket(10, 3);  // 10 per second, burst 3
  using engine::Millis;
  int granted = 0;
  for (int i = 0; i < 10; ++i) granted += bucket.take(Millis(1000)) ? 1 : 0;
  CHECK(granted == 3);
  CHECK_FALSE(bucket.take(Millis(1050)));  // half a token
  CHECK(bucket.take(Millis(1100)));        // one token after 100 ms
  CHECK_FALSE(bucket.take(Millis(1100)));
  // A long pause refills to the burst, not beyond.
  granted = 0;
  for (int i = 0; i < 10; ++i) granted += bucket.take(Millis(60000)) ? 1 : 0;
  CHECK(granted == 3);
  // Time going backwards grants nothing extra.
  CHECK_FALSE(bucket.take(Millis(1000)));
}

}  // namespace
}  // namespace pairwall::io
