// `scrub reassemble tcp` end to end through Engine::process with crafted segments: each end's
// timestamps shifted on the way through and each end seeing its own echoed, each end's TTL raised
// to the highest it has sent with, repeated timestamp options dropped, and the state's figures
// carried to a sync peer. Every rewritten packet is compared byte for byte with the one the
// builder makes with the expected fields, so every checksum is checked against a full recompute.
#include <catch2/catch.hpp>
#include <string>

#include "daemon/engine/engine.h"
#include "daemon/engine/tcp_scrub.h"
#include "tests/unit/engine/firewall.h"
#include "tests/unit/support/packet_builder.h"

using namespace pairwall::engine;
using pairwall::test::Bytes;
using pairwall::test::Firewall;
using pairwall::test::PacketBuilder;
using Action = Verdict::Action;

namespace {

constexpr const char* kScrubbed = R"(
scrub on lan0 from { 10.1.0.0/16, 2001:db8:1::/48 } to any reassemble tcp
block all
pass in on lan0 proto tcp to port 80
pass out on wan0 proto tcp to port 80
pass in on lan0 proto tcp to port 443 flags any
pass out on wan0 proto tcp to port 443 flags any
)";

constexpr uint32_t kClientIsn = 1000;
constexpr uint32_t kServerIsn = 9000;

// One connection's segments, client on lan0 and server on wan0.
struct Connection {
  bool v6 = false;
  uint16_t port = 80;

  std::string client() const { return v6 ? "2001:db8:1::10" : "10.1.0.10"; }
  std::string server() const { return v6 ? "2001:db8:2::80" : "192.0.2.80"; }
  std::size_t tcp_offset() const { return v6 ? 40 : 20; }

  // With timestamps (value, echo) unless `timestamps` is false; `nops` no-operations before the
  // option, two of which pf's and the builder's layout has (one puts its fields at odd offsets).
  // The client's carry 20 bytes of data, the server's none, unless `payload` says otherwise.
  Bytes segment(bool from_client, uint8_t flags, uint32_t seq, uint32_t ack, uint32_t value, uint32_t echo,
                uint8_t ttl = 64, int nops = 2, bool timestamps = true, int payload = -1) const {
    PacketBuilder b;
    if (v6) {
      b.ipv6(from_client ? client() : server(), from_client ? server() : client());
    } else {
      b.ipv4(from_client ? client() : server(), from_client ? server() : client());
    }
    b.ttl(ttl).tcp(from_client ? 40000 : port, from_client ? port : 40000).flags(flags).seq(seq).ack(ack);
    if (timestamps) {
      Bytes option(static_cast<std::size_t>(nops), pairwall::test::tcpopt::kNop);
      option.insert(option.end(), {pairwall::test::tcpopt::kTimestamps, 10});
      for (uint32_t field : {value, echo})
        for (int shift = 24; shift >= 0; shift -= 8) option.push_back(static_cast<uint8_t>(field >> shift));
      while ((option.size() % 4) != 0) option.push_back(pairwall::test::tcpopt::kNop);
      b.tcp_options_raw(option);
    }
    return b.payload(static_cast<std::size_t>(payload >= 0 ? payload : from_client ? 20 : 0)).build();
  }

  uint32_t value_of(const Bytes& packet, int nops = 2) const {
    return pairwall::test::get32(packet, tcp_offset() + 20 + static_cast<std::size_t>(nops) + 2);
  }
};

struct Offsets {
  uint32_t client = 0;
  uint32_t server = 0;
};

// A handshake through `fw` with timestamps (the client's clock at 100, the server's at 5000); the
// offsets each end's timestamps gain.
Offsets handshake(Firewall& fw, const Connection& c) {
  using namespace tcpflag;
  const Verdict syn = fw.out(c.segment(true, kSyn, kClientIsn, 0, 100, 0));
  REQUIRE(syn.action == Action::Accept);
  REQUIRE(syn.rewritten);
  Offsets offsets;
  offsets.client = c.value_of(fw.last_packet) - 100;
  CHECK(offsets.client != 0);
  CHECK(fw.last_packet == c.segment(true, kSyn, kClientIsn, 0, 100 + offsets.client, 0));

  // The server echoes the shifted value; the client gets its own back, and the server's shifted.
  REQUIRE(
      fw.in(c.segment(false, kSyn | kAck, kServerIsn, kClientIsn + 1, 5000, 100 + offsets.client)).reason ==
      Reason::State);
  offsets.server = c.value_of(fw.last_packet) - 5000;
  CHECK(offsets.server != 0);
  CHECK(offsets.server != offsets.client);
  CHECK(fw.last_packet ==
        c.segment(false, kSyn | kAck, kServerIsn, kClientIsn + 1, 5000 + offsets.server, 100));

  REQUIRE(fw.out(c.segment(true, kAck, kClientIsn + 1, kServerIsn + 1, 101, 5000 + offsets.server)).reason ==
          Reason::State);
  CHECK(fw.last_packet == c.segment(true, kAck, kClientIsn + 1, kServerIsn + 1, 101 + offsets.client, 5000));
  return offsets;
}

}  // namespace

TEST_CASE("scrub reassemble tcp: each end's timestamps are shifted, and each end sees its own echoed",
          "[engine][tcp][scrub]") {
  using namespace tcpflag;
  for (const bool v6 : {false, true}) {
    INFO((v6 ? "v6" : "v4"));
    Firewall fw(kScrubbed);
    REQUIRE(fw.engine.rules()->scrub_listing().size() == 1);
    CHECK(fw.engine.rules()->scrub_listing()[0].text ==
          "scrub on lan0 from { 10.1.0.0/16, 2001:db8:1::/48 } to any reassemble tcp");
    const Connection c{v6};
    const Offsets offsets = handshake(fw, c);
    // Data back from the server, echoing the client's shifted clock.
    REQUIRE(
        fw.in(c.segment(false, kAck, kServerIsn + 1, kClientIsn + 21, 5003, 101 + offsets.client)).reason ==
        Reason::State);
    CHECK(fw.last_packet ==
          c.segment(false, kAck, kServerIsn + 1, kClientIsn + 21, 5003 + offsets.server, 101));
    // The option at an odd offset counts in the checksum with its bytes swapped; the builder
    // computes the expected checksum afresh.
    REQUIRE(fw.out(c.segment(true, kAck, kClientIsn + 21, kServerIsn + 1, 102, 5003 + offsets.server, 64, 1))
                .reason == Reason::State);
    CHECK(fw.last_packet ==
          c.segment(true, kAck, kClientIsn + 21, kServerIsn + 1, 102 + offsets.client, 5003, 64, 1));
    // A segment without timestamps (an empty ACK here) passes as it is.
    const Bytes plain = c.segment(false, kAck, kServerIsn + 1, kClientIsn + 41, 0, 0, 64, 2, false);
    REQUIRE(fw.in(plain).reason == Reason::State);
    CHECK(fw.last_packet == plain);
  }
}

TEST_CASE("scrub reassemble tcp: a timestamp of 0 is left as it is", "[engine][tcp][scrub]") {
  // Some stacks send 0 until the handshake is done, and pick their clock's start then.
  using namespace tcpflag;
  Firewall fw(kScrubbed);
  const Connection c;
  const Bytes syn = c.segment(true, kSyn, kClientIsn, 0, 0, 0);
  REQUIRE(fw.out(syn).action == Action::Accept);
  CHECK(fw.last_packet == syn);
  // The server echoes the 0 it got, which stays 0; its own value is shifted.
  REQUIRE(fw.in(c.segment(false, kSyn | kAck, kServerIsn, kClientIsn + 1, 5000, 0)).reason == Reason::State);
  const uint32_t server_offset = c.value_of(fw.last_packet) - 5000;
  CHECK(server_offset != 0);
  CHECK(fw.last_packet == c.segment(false, kSyn | kAck, kServerIsn, kClientIsn + 1, 5000 + server_offset, 0));
  // The client's clock starts; from here on it is shifted too.
  REQUIRE(fw.out(c.segment(true, kAck, kClientIsn + 1, kServerIsn + 1, 700, 5000 + server_offset)).reason ==
          Reason::State);
  const uint32_t client_offset = c.value_of(fw.last_packet) - 700;
  CHECK(client_offset != 0);
  CHECK(fw.last_packet == c.segment(true, kAck, kClientIsn + 1, kServerIsn + 1, 700 + client_offset, 5000));
}

TEST_CASE("scrub reassemble tcp: each end's TTL rises to the highest it has sent with",
          "[engine][tcp][scrub]") {
  using namespace tcpflag;
  for (const bool v6 : {false, true}) {
    INFO((v6 ? "v6" : "v4"));
    Firewall fw(kScrubbed);
    const Connection c{v6};
    REQUIRE(fw.out(c.segment(true, kSyn, kClientIsn, 0, 0, 0, 64, 2, false)).action == Action::Accept);
    // The server's own TTL starts from its first segment, not from the client's.
    REQUIRE(fw.in(c.segment(false, kSyn | kAck, kServerIsn, kClientIsn + 1, 0, 0, 50, 2, false)).reason ==
            Reason::State);
    CHECK(fw.last_packet == c.segment(false, kSyn | kAck, kServerIsn, kClientIsn + 1, 0, 0, 50, 2, false));
    // A segment aimed to expire on the way is raised: TTL 3 leaves with the client's 64.
    REQUIRE(fw.out(c.segment(true, kAck, kClientIsn + 1, kServerIsn + 1, 0, 0, 3, 2, false)).reason ==
            Reason::State);
    CHECK(fw.last_packet == c.segment(true, kAck, kClientIsn + 1, kServerIsn + 1, 0, 0, 64, 2, false));
    // A higher one is the new mark.
    REQUIRE(fw.in(c.segment(false, kAck, kServerIsn + 1, kClientIsn + 21, 0, 0, 60, 2, false)).reason ==
            Reason::State);
    CHECK(fw.last_packet == c.segment(false, kAck, kServerIsn + 1, kClientIsn + 21, 0, 0, 60, 2, false));
    REQUIRE(fw.in(c.segment(false, kAck, kServerIsn + 1, kClientIsn + 21, 0, 0, 40, 2, false)).reason ==
            Reason::State);
    CHECK(fw.last_packet == c.segment(false, kAck, kServerIsn + 1, kClientIsn + 21, 0, 0, 60, 2, false));
  }
}

TEST_CASE("scrub reassemble tcp: a segment with two timestamp options is dropped", "[engine][tcp][scrub]") {
  using namespace tcpflag;
  const Connection c;
  const auto doubled = [&](bool from_client, uint8_t flags, uint32_t seq, uint32_t ack) {
    Bytes option{pairwall::test::tcpopt::kTimestamps, 10, 0, 0, 0, 1, 0, 0, 0, 0};
    option.insert(option.end(), option.begin(), option.end());
    option.insert(option.end(), {pairwall::test::tcpopt::kNop, pairwall::test::tcpopt::kNop,
                                 pairwall::test::tcpopt::kNop, pairwall::test::tcpopt::kNop});
    return PacketBuilder()
        .ipv4(from_client ? c.client() : c.server(), from_client ? c.server() : c.client())
        .tcp(from_client ? 40000 : 80, from_client ? 80 : 40000)
        .flags(flags)
        .seq(seq)
        .ack(ack)
        .tcp_options_raw(option)
        .build();
  };
  Firewall fw(kScrubbed);
  // The first segment, under the scrub rule.
  CHECK(fw.out(doubled(true, kSyn, kClientIsn, 0)).reason == Reason::BadTimestamp);
  // A segment of the state from the other end, which no scrub rule matches.
  handshake(fw, c);
  CHECK(fw.in(doubled(false, kAck, kServerIsn + 1, kClientIsn + 1)).reason == Reason::BadTimestamp);
  // Without the scrub, such a segment is a state's like any other.
  Firewall plain("block all\npass in on lan0 proto tcp to port 80\npass out on wan0 proto tcp to port 80\n");
  CHECK(plain.out(doubled(true, kSyn, kClientIsn, 0)).action == Action::Accept);
}

TEST_CASE("scrub reassemble tcp: without it, or past a connection's start, timestamps pass as they are",
          "[engine][tcp][scrub]") {
  using namespace tcpflag;
  SECTION("no scrub rule") {
    Firewall fw("block all\npass in on lan0 proto tcp to port 80\npass out on wan0 proto tcp to port 80\n");
    const Connection c;
    const Bytes syn = c.segment(true, kSyn, kClientIsn, 0, 100, 0);
    REQUIRE(fw.out(syn).action == Action::Accept);
    CHECK(fw.last_packet == syn);
    const Bytes low = c.segment(false, kSyn | kAck, kServerIsn, kClientIsn + 1, 5000, 100, 3);
    REQUIRE(fw.in(low).reason == Reason::State);
    CHECK(fw.last_packet == low);
  }
  SECTION("a connection picked up in mid-stream keeps its timestamps, and has its TTLs raised") {
    // Each end already holds the other's clock: shifted now, it would jump.
    Firewall fw(kScrubbed);
    const Connection c{false, 443};
    const Bytes data = c.segment(true, kAck, 5000, 7000, 100, 200);
    REQUIRE(fw.out(data).action == Action::Accept);
    CHECK(fw.last_packet == data);
    REQUIRE(fw.out(c.segment(true, kAck, 5020, 7000, 101, 200, 9)).reason == Reason::State);
    CHECK(fw.last_packet == c.segment(true, kAck, 5020, 7000, 101, 200, 64));
  }
}

TEST_CASE(
    "scrub reassemble tcp: the figures travel with the state, and the peer shifts alike after a failover",
    "[engine][tcp][scrub][sync]") {
  using namespace tcpflag;
  Firewall fw(kScrubbed);
  const Connection c;
  const Offsets offsets = handshake(fw, c);
  const auto records = fw.drain();
  REQUIRE_FALSE(records.empty());
  // The SYN's insert already carries the server's offset, drawn with the state.
  CHECK(records.front().scrub_tcp);
  CHECK(records.front().scrub[0].ts_mod == offsets.client);
  CHECK(records.front().scrub[1].ts_mod == offsets.server);
  CHECK(records.front().scrub[0].ttl == 64);

  Firewall peer("block all\n", 2);
  for (const StateRecord& r : records) REQUIRE(peer.engine.apply(r, peer.now));
  REQUIRE(peer.in(c.segment(false, kAck, kServerIsn + 1, kClientIsn + 21, 5003, 101 + offsets.client, 7))
              .reason == Reason::State);
  // The server's TTL mark (64, from its SYN-ACK) came along with the updates.
  CHECK(peer.last_packet ==
        c.segment(false, kAck, kServerIsn + 1, kClientIsn + 21, 5003 + offsets.server, 101));
  REQUIRE(
      peer.out(c.segment(true, kAck, kClientIsn + 21, kServerIsn + 1, 102, 5003 + offsets.server)).reason ==
      Reason::State);
  CHECK(peer.last_packet ==
        c.segment(true, kAck, kClientIsn + 21, kServerIsn + 1, 102 + offsets.client, 5003));
}

TEST_CASE("scrub reassemble tcp: a peer's record never lowers a TTL mark or changes an offset",
          "[engine][tcp][scrub][sync]") {
  using namespace tcpflag;
  Firewall fw(kScrubbed);
  const Connection c;
  const Offsets offsets = handshake(fw, c);
  const auto records = fw.drain();
  REQUIRE_FALSE(records.empty());
  Firewall peer("block all\n", 2);
  for (const StateRecord& r : records) REQUIRE(peer.engine.apply(r, peer.now));
  StateRecord update = records.back();
  update.kind = StateRecord::Kind::Update;
  update.scrub = {TcpScrub{offsets.client + 1, 10}, TcpScrub{offsets.server + 1, 200}};
  // Stale as tracking (apply() says false: nothing moved, no later lifetime), merged all the same.
  peer.engine.apply(update, peer.now);
  // The client's mark stays 64, the server's rises to 200; the offsets stay.
  REQUIRE(peer.out(c.segment(true, kAck, kClientIsn + 1, kServerIsn + 1, 101, 5000 + offsets.server, 30))
              .reason == Reason::State);
  CHECK(peer.last_packet ==
        c.segment(true, kAck, kClientIsn + 1, kServerIsn + 1, 101 + offsets.client, 5000, 64));
  REQUIRE(peer.in(c.segment(false, kAck, kServerIsn + 1, kClientIsn + 21, 5003, 101 + offsets.client, 64))
              .reason == Reason::State);
  CHECK(peer.last_packet ==
        c.segment(false, kAck, kServerIsn + 1, kClientIsn + 21, 5003 + offsets.server, 101, 200));
}

TEST_CASE("scrub reassemble tcp: a peer holding only the SYN's insert shifts alike",
          "[engine][tcp][scrub][sync]") {
  // The master passed the whole handshake and died before the updates that followed the insert
  // reached its peer: each end holds the other's shifted clock, and the peer must shift alike.
  using namespace tcpflag;
  for (const bool v6 : {false, true}) {
    INFO((v6 ? "v6" : "v4"));
    Firewall fw(kScrubbed);
    const Connection c{v6};
    const Offsets offsets = handshake(fw, c);
    const auto records = fw.drain();
    REQUIRE_FALSE(records.empty());
    Firewall peer("block all\n", 2);
    REQUIRE(peer.engine.apply(records.front(), peer.now));
    // The client's last ACK of the handshake, retransmitted to the new master.
    REQUIRE(peer.out(c.segment(true, kAck, kClientIsn + 1, kServerIsn + 1, 101, 5000 + offsets.server, 20))
                .reason == Reason::State);
    CHECK(peer.last_packet ==
          c.segment(true, kAck, kClientIsn + 1, kServerIsn + 1, 101 + offsets.client, 5000));
  }
}

TEST_CASE("scrub reassemble tcp: timestamps RFC 7323 rules out are dropped once both ends are established",
          "[engine][tcp][scrub][paws]") {
  using namespace tcpflag;
  Firewall fw(kScrubbed);
  const Connection c;
  const Offsets o = handshake(fw, c);  // the client's clock at 101, the server's at 5000
  const auto from_client = [&](uint32_t value, uint32_t echo, uint32_t seq = kClientIsn + 21,
                               bool stamped = true, int payload = -1) {
    return fw.out(c.segment(true, kAck, seq, kServerIsn + 1, value, echo, 64, 2, stamped, payload)).reason;
  };
  const auto from_server = [&](uint32_t value, uint32_t echo) {
    return fw.in(c.segment(false, kAck, kServerIsn + 1, kClientIsn + 21, value, echo)).reason;
  };
  REQUIRE(from_server(5001, 101 + o.client) == Reason::State);

  // Older than what the server last echoed of the client's clock (101).
  CHECK(from_client(100, 5001 + o.server) == Reason::BadTimestamp);
  // Further ahead than 30 seconds of a 1.1 kHz clock: 33,000 ticks.
  CHECK(from_client(101 + 34'000, 5001 + o.server) == Reason::BadTimestamp);
  CHECK(from_client(101 + 32'000, 5001 + o.server) == Reason::State);
  // An echo of a value the server never sent: later than its last, or earlier than its first.
  CHECK(from_client(32'200, 5002 + o.server) == Reason::BadTimestamp);
  CHECK(from_client(32'200, 4999 + o.server) == Reason::BadTimestamp);
  CHECK(from_client(32'200, 5001 + o.server) == Reason::State);
  // The server's values are held to the client's echoes alike.
  CHECK(from_server(4990, 32'200 + o.client) == Reason::BadTimestamp);
  CHECK(from_server(5001, 32'300 + o.client) == Reason::BadTimestamp);
  CHECK(from_server(5002, 32'200 + o.client) == Reason::State);

  // Time lets a clock run further: a minute later, 99,000 ticks ahead of the last.
  fw.now += Millis{60'000};
  CHECK(from_client(32'200 + 98'000, 5002 + o.server) == Reason::State);

  // The client's first data segment had a timestamp: data without one is refused, an empty ACK or a
  // reset without one is not.
  CHECK(from_client(0, 0, kClientIsn + 41, false) == Reason::BadTimestamp);
  CHECK(from_client(0, 0, kClientIsn + 41, false, 0) == Reason::State);
  CHECK(fw.out(c.segment(true, kRst | kAck, kClientIsn + 41, kServerIsn + 1, 0, 0, 64, 2, false)).reason ==
        Reason::State);
}

TEST_CASE("scrub reassemble tcp: how far ahead a value may run counts from its sender's last",
          "[engine][tcp][scrub][paws]") {
  using namespace tcpflag;
  Firewall fw(kScrubbed);
  const Connection c;
  const Offsets o = handshake(fw, c);
  fw.now += Millis{60'000};
  REQUIRE(fw.out(c.segment(true, kAck, kClientIsn + 21, kServerIsn + 1, 60'000, 5000 + o.server)).reason ==
          Reason::State);
  // Just sent at 60,000: 40,000 more is past 30 seconds of a 1.1 kHz clock, whatever the state's age.
  CHECK(fw.out(c.segment(true, kAck, kClientIsn + 41, kServerIsn + 1, 100'000, 5000 + o.server)).reason ==
        Reason::BadTimestamp);
}

TEST_CASE("scrub reassemble tcp: what the timestamp watch leaves alone", "[engine][tcp][scrub][paws]") {
  using namespace tcpflag;
  const Connection c;
  SECTION("an end whose first data segment had no timestamp") {
    Firewall fw(kScrubbed);
    const Offsets o = handshake(fw, c);
    REQUIRE(
        fw.in(c.segment(false, kAck, kServerIsn + 1, kClientIsn + 21, 5001, 101 + o.client, 64, 2, false, 10))
            .reason == Reason::State);
    CHECK(fw.in(c.segment(false, kAck, kServerIsn + 11, kClientIsn + 21, 0, 0, 64, 2, false, 10)).reason ==
          Reason::State);
  }
  SECTION("a watch idle for more than 24 days") {
    Firewall fw(kScrubbed);
    const Offsets o = handshake(fw, c);
    REQUIRE(fw.in(c.segment(false, kAck, kServerIsn + 1, kClientIsn + 21, 5001, 101 + o.client)).reason ==
            Reason::State);
    fw.now += Millis{int64_t{25} * 24 * 3600 * 1000};
    CHECK(fw.out(c.segment(true, kAck, kClientIsn + 21, kServerIsn + 1, 50, 5001 + o.server)).reason ==
          Reason::State);
  }
  SECTION("a connection older than 12 days, past which the echoes' lower bound no longer holds") {
    Firewall fw(kScrubbed);
    const Offsets o = handshake(fw, c);
    fw.now += Millis{int64_t{13} * 24 * 3600 * 1000};
    CHECK(fw.out(c.segment(true, kAck, kClientIsn + 21, kServerIsn + 1, 50, 5000 + o.server)).reason ==
          Reason::State);
  }
  SECTION("a connection picked up in mid-stream") {
    Firewall fw(kScrubbed);
    const Connection mid{false, 443};
    REQUIRE(fw.out(mid.segment(true, kAck, 5000, 7000, 100, 200)).action == Action::Accept);
    REQUIRE(fw.in(mid.segment(false, kAck, 7000, 5020, 300, 100)).reason == Reason::State);
    CHECK(fw.out(mid.segment(true, kAck, 5020, 7000, 90, 9'000'000)).reason == Reason::State);
  }
  SECTION("a node that took the connection over") {
    Firewall fw(kScrubbed);
    const Offsets o = handshake(fw, c);
    Firewall peer("block all\n", 2);
    for (const StateRecord& r : fw.drain()) REQUIRE(peer.engine.apply(r, peer.now));
    REQUIRE(peer.in(c.segment(false, kAck, kServerIsn + 1, kClientIsn + 21, 5001, 101 + o.client)).reason ==
            Reason::State);
    CHECK(peer.out(c.segment(true, kAck, kClientIsn + 21, kServerIsn + 1, 101 + 90'000, 5001 + o.server))
              .reason == Reason::State);
  }
}

TEST_CASE(
    "with modulation off, as replays of a capture run, scrub reassemble tcp keeps the timestamps and "
    "watches them",
    "[engine][tcp][scrub][paws]") {
  using namespace tcpflag;
  auto config = pairwall::test::test_config();
  config.modulation = false;
  Firewall fw(kScrubbed, config);
  const Connection c;
  // The capture's server echoes the client's own values.
  const Bytes syn = c.segment(true, kSyn, kClientIsn, 0, 100, 0);
  REQUIRE(fw.out(syn).action == Action::Accept);
  CHECK(fw.last_packet == syn);
  const Bytes synack = c.segment(false, kSyn | kAck, kServerIsn, kClientIsn + 1, 5000, 100);
  REQUIRE(fw.in(synack).reason == Reason::State);
  CHECK(fw.last_packet == synack);
  REQUIRE(fw.out(c.segment(true, kAck, kClientIsn + 1, kServerIsn + 1, 101, 5000)).reason == Reason::State);
  REQUIRE(fw.in(c.segment(false, kAck, kServerIsn + 1, kClientIsn + 21, 5001, 101)).reason == Reason::State);
  CHECK(fw.out(c.segment(true, kAck, kClientIsn + 21, kServerIsn + 1, 90, 5001)).reason ==
        Reason::BadTimestamp);
}

TEST_CASE("scrub reassemble tcp: a node that gets a connection back from its peer watches it afresh",
          "[engine][tcp][scrub][paws][sync]") {
  // fw carried the connection, its peer took it over for a while (both ends' clocks went on), and
  // fw gets it back with its entry still there: the client's first segment echoes a value of the
  // server's that only the peer saw.
  using namespace tcpflag;
  Firewall fw(kScrubbed);
  const Connection c;
  const Offsets o = handshake(fw, c);
  REQUIRE(fw.in(c.segment(false, kAck, kServerIsn + 1, kClientIsn + 21, 5001, 101 + o.client)).reason ==
          Reason::State);
  Firewall peer("block all\n", 2);
  for (const StateRecord& r : fw.drain()) REQUIRE(peer.engine.apply(r, peer.now));
  REQUIRE(peer.in(c.segment(false, kPsh | kAck, kServerIsn + 1, kClientIsn + 21, 9000, 101 + o.client, 64, 2,
                            true, 100))
              .reason == Reason::State);
  REQUIRE(
      peer.out(c.segment(true, kAck, kClientIsn + 21, kServerIsn + 101, 400, 9000 + o.server, 64, 2, true, 0))
          .reason == Reason::State);
  for (StateRecord r : peer.drain()) {
    if (r.kind == StateRecord::Kind::Update) fw.engine.apply(r, fw.now);
  }
  CHECK(fw.out(c.segment(true, kAck, kClientIsn + 21, kServerIsn + 101, 401, 9000 + o.server)).reason ==
        Reason::State);
  CHECK(fw.last_packet == c.segment(true, kAck, kClientIsn + 21, kServerIsn + 101, 401 + o.client, 9000));
}

// The watches lie packed in the state entry at whatever offset its layout gives them, and stop when
// idle there as anywhere. (Reading one through a reference bound to a misaligned field is what
// fuzz_engine's sanitizer stopped at; gcc's, in the unit tests' sanitizer build, does not see it.)
TEST_CASE("scrub reassemble tcp: a timestamp watch is read at any alignment", "[engine][tcp][scrub][paws]") {
  struct [[gnu::packed]] Misaligned {
    uint8_t before = 0;
    TimestampWatch sender;
    TimestampWatch receiver;
  };
  Misaligned at_odd_offset;
  REQUIRE(reinterpret_cast<uintptr_t>(&at_odd_offset.sender.last_ms) % alignof(uint32_t) != 0);
  for (TimestampWatch* w : {&at_odd_offset.sender, &at_odd_offset.receiver}) {
    w->flags = TimestampWatch::kStamped | TimestampWatch::kWatched;
    w->last_ms = 1'000;
  }
  PacketView packet;
  packet.proto = ipproto::kTcp;
  packet.tcp.flags = tcpflag::kAck;
  const Millis created{0};
  // Idle past a 1 kHz clock's wrap, both watches stop, as they would in place.
  const Millis now{int64_t{25} * 24 * 3600 * 1000};
  CHECK(check_timestamps(at_odd_offset.sender, at_odd_offset.receiver, packet, 0, true, created, now) ==
        Reason::State);
  CHECK((at_odd_offset.sender.flags & TimestampWatch::kIdled) != 0);
  CHECK((at_odd_offset.receiver.flags & TimestampWatch::kIdled) != 0);
}
