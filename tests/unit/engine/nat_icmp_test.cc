// ICMP errors about translated and modulated connections, from either side and from the node
// itself, and the filter rules `nat pass` and `rdr pass` leave to the other pass: crafted packets.
#include <catch2/catch.hpp>
#include <string>

#include "daemon/engine/engine.h"
#include "tests/unit/engine/firewall.h"
#include "tests/unit/support/packet_builder.h"

using namespace pairwall::engine;
using pairwall::test::Bytes;
using pairwall::test::Firewall;
using pairwall::test::get16;
using pairwall::test::PacketBuilder;
using Action = Verdict::Action;

namespace {

uint32_t get32(const Bytes& b, std::size_t at) {
  return uint32_t{get16(b, at)} << 16 | get16(b, at + 2);
}

Bytes seg(const std::string& s, uint16_t sp, const std::string& d, uint16_t dp, uint8_t flags, uint32_t seq,
          uint32_t ack, std::size_t payload = 0) {
  return PacketBuilder()
      .ipv4(s, d)
      .tcp(sp, dp)
      .flags(flags)
      .seq(seq)
      .ack(ack)
      .window(512)
      .payload(payload)
      .build();
}

Bytes frag_needed(const std::string& from, const std::string& to, const Bytes& quote) {
  return PacketBuilder().ipv4(from, to).icmp_error(3, 4, quote, 1280).build();
}

}  // namespace

// The node's own "fragmentation needed" (hooks = forward+local) quotes the client's segment as
// the kernel received it, before the forward hook modulated it: in the client's own numbers.
TEST_CASE("the node's own ICMP error about a modulated segment reaches the client in its own numbers",
          "[engine][modulate][icmp]") {
  using namespace tcpflag;
  for (const bool with_nat : {false, true}) {
    INFO((with_nat ? "nat + modulate" : "modulate"));
    Firewall fw(std::string(with_nat ? "nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\n" : "") +
                "pass out all\n"
                "pass in on lan0 proto tcp to port 80 modulate state\n");
    REQUIRE(fw.out(seg("10.1.0.10", 40000, "192.0.2.80", 80, kSyn, 1000, 0)).action == Action::Accept);
    const uint16_t port = get16(fw.last_packet, 20);
    const uint32_t cdiff = get32(fw.last_packet, 24) - 1000;
    REQUIRE(cdiff != 0);
    const std::string outside = with_nat ? "203.0.113.1" : "10.1.0.10";
    REQUIRE(fw.in(seg("192.0.2.80", 80, outside, port, kSyn | kAck, 9000, 1000 + cdiff + 1)).reason ==
            Reason::State);
    const uint32_t sdiff = get32(fw.last_packet, 24) - 9000;
    REQUIRE(fw.out(seg("10.1.0.10", 40000, "192.0.2.80", 80, kAck, 1001, 9000 + sdiff + 1)).reason ==
            Reason::State);

    // A 1400-byte segment the node cannot forward: its error, about the segment as the client
    // sent it, from the node's inside address, through OUTPUT.
    const Bytes big = seg("10.1.0.10", 40000, "192.0.2.80", 80, kAck, 1001, 9000 + sdiff + 1, 1400);
    const Bytes error = frag_needed("10.1.0.1", "10.1.0.10", big);
    const Verdict v = fw.run(error, PacketMeta{Hook::Output, kNoIface, fw.lan, false});
    CHECK(v.action == Action::Accept);
    CHECK(v.reason == Reason::State);
    CHECK(fw.last_packet == error);  // the client must find its own sequence number in the quote
  }
}

namespace {
constexpr const char* kNatAll = R"(
nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1
nat on wan0 inet6 from 2001:db8:1::/48 to any -> 2001:db8:ff::1
pass all
)";

Bytes echo(bool v6, const std::string& s, const std::string& d, uint16_t id, bool reply = false) {
  PacketBuilder b;
  if (v6)
    b.ipv6(s, d);
  else
    b.ipv4(s, d);
  return b.icmp_echo(id, 1, reply).payload(16).build();
}
Bytes error_about(bool v6, const std::string& s, const std::string& d, const Bytes& quote) {
  PacketBuilder b;
  if (v6)
    b.ipv6(s, d).icmp_error(3, 0, quote);
  else
    b.ipv4(s, d).icmp_error(11, 0, quote);
  return b.build();
}
}  // namespace

TEST_CASE("errors quoting an echo request whose id nat changed", "[engine][nat][icmp]") {
  for (const bool v6 : {false, true}) {
    INFO((v6 ? "v6" : "v4"));
    Firewall fw(kNatAll);
    const std::string a = v6 ? "2001:db8:1::10" : "10.1.0.10";
    const std::string b = v6 ? "2001:db8:1::11" : "10.1.0.11";
    const std::string server = v6 ? "2001:db8:2::80" : "192.0.2.80";
    const std::string outside = v6 ? "2001:db8:ff::1" : "203.0.113.1";
    const std::string router = v6 ? "2001:db8:9::1" : "198.51.100.1";
    const std::size_t l4 = v6 ? 40 : 20;
    REQUIRE(fw.out(echo(v6, a, server, 77)).action == Action::Accept);
    const Bytes from_b = echo(v6, b, server, 77);
    REQUIRE(fw.out(from_b).action == Action::Accept);
    const uint16_t id = get16(fw.last_packet, l4 + 4);
    REQUIRE(id != 77);
    const Bytes translated = fw.last_packet;
    CHECK(translated == echo(v6, outside, server, id));
    const Verdict e = fw.in(error_about(v6, router, outside, translated));
    CHECK(e.reason == Reason::State);
    CHECK(fw.last_packet == error_about(v6, router, b, from_b));
    CHECK(fw.in(echo(v6, server, outside, id, true)).reason == Reason::State);
    CHECK(fw.last_packet == echo(v6, server, b, 77, true));
  }
}

TEST_CASE("IPv4 UDP without a checksum under nat, and in a quote", "[engine][nat][udp]") {
  Firewall fw(kNatAll);
  const auto udp0 = [](const std::string& s, uint16_t sp, const std::string& d, uint16_t dp) {
    return PacketBuilder().ipv4(s, d).udp(sp, dp).payload(10).l4_checksum(0).build();
  };
  const Bytes q = udp0("10.1.0.10", 5353, "192.0.2.80", 53);
  REQUIRE(fw.out(q).action == Action::Accept);
  const uint16_t port = get16(fw.last_packet, 20);
  CHECK(fw.last_packet == udp0("203.0.113.1", port, "192.0.2.80", 53));
  const Bytes tr = fw.last_packet;
  CHECK(fw.in(PacketBuilder().ipv4("192.0.2.80", "203.0.113.1").icmp_error(3, 3, tr).build()).reason ==
        Reason::State);
  CHECK(fw.last_packet == PacketBuilder().ipv4("192.0.2.80", "10.1.0.10").icmp_error(3, 3, q).build());
}

TEST_CASE("ICMP errors about an rdr'd connection, both ways", "[engine][nat][icmp]") {
  using namespace tcpflag;
  for (const bool v6 : {false, true}) {
    INFO((v6 ? "v6" : "v4"));
    const std::string vip = v6 ? "2001:db8:ff::1" : "203.0.113.1";
    const std::string srv = v6 ? "2001:db8:2::10" : "10.2.0.10";
    const std::string x = v6 ? "2001:db8:7::7" : "198.51.100.7";
    const std::string inner_router = v6 ? "2001:db8:2::fe" : "10.2.0.254";
    const std::string outer_router = v6 ? "2001:db8:9::1" : "198.51.100.1";
    Firewall fw("rdr on wan0 proto tcp to " + vip + " port 80 -> " + srv + " port 8080\npass all\n");
    const auto s = [&](const std::string& a, uint16_t ap, const std::string& b, uint16_t bp, uint8_t f,
                       uint32_t seq, uint32_t ack) {
      PacketBuilder p;
      if (v6)
        p.ipv6(a, b);
      else
        p.ipv4(a, b);
      return p.tcp(ap, bp).flags(f).seq(seq).ack(ack).window(512).build();
    };
    const auto err = [&](const std::string& a, const std::string& b, const Bytes& q) {
      PacketBuilder p;
      if (v6)
        p.ipv6(a, b).icmp_error(1, 3, q);
      else
        p.ipv4(a, b).icmp_error(3, 1, q);
      return p.build();
    };
    const PacketMeta pre{Hook::Prerouting, fw.wan, kNoIface, false};
    const Bytes syn = s(x, 4000, vip, 80, kSyn, 1000, 0);
    REQUIRE(fw.run(syn, pre).claimed);
    const Bytes delivered = fw.last_packet;
    CHECK(delivered == s(x, 4000, srv, 8080, kSyn, 1000, 0));
    // An inside router cannot reach the server: the client hears it from the rdr address.
    const Verdict a = fw.out(err(inner_router, x, delivered));
    CHECK(a.reason == Reason::State);
    CHECK(fw.last_packet == err(vip, x, syn));
    // The server's SYN-ACK, and an outside router's error about it, addressed to the rdr address.
    const Bytes synack = s(srv, 8080, x, 4000, kSyn | kAck, 5000, 1001);
    REQUIRE(fw.out(synack).reason == Reason::State);
    const Bytes left = fw.last_packet;
    CHECK(left == s(vip, 80, x, 4000, kSyn | kAck, 5000, 1001));
    const Verdict b = fw.run(err(outer_router, vip, left), pre);
    CHECK(b.reason == Reason::State);
    CHECK(b.claimed);
    CHECK(fw.last_packet == err(outer_router, srv, synack));
  }
}

// pf: `nat pass` / `rdr pass` skip the filter rules of the pass they translate on; the packet's
// other pass (pf_test on the other interface) still meets its filter rules.
TEST_CASE("nat pass and rdr pass skip their own pass's filter rules only", "[engine][nat]") {
  Firewall fw(
      "nat pass on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\n"
      "rdr pass on wan0 proto tcp to 203.0.113.1 port 22 -> 10.2.0.22\n"
      "pass all\n"
      "block in quick on lan0 from 10.1.0.66\n"
      "block out quick on lan0 to 10.2.0.22\n");
  const Verdict quarantined = fw.out(seg("10.1.0.66", 40000, "192.0.2.80", 80, tcpflag::kSyn, 1000, 0));
  CHECK(quarantined.action == Action::Drop);
  const Verdict inbound = fw.in(seg("198.51.100.7", 4000, "203.0.113.1", 22, tcpflag::kSyn, 1000, 0));
  CHECK(inbound.action == Action::Drop);
}
