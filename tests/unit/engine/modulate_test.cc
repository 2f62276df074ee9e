// `modulate state` end to end through Engine::process with crafted segments: each end's sequence
// numbers shifted on the way through and each end seeing only its own, SACK blocks and ICMP
// quotes turned back, the windows checked in each end's own numbers, and the offsets carried to a
// sync peer. Every rewritten packet is compared byte for byte with the one the builder makes with
// the shifted numbers, so every checksum is checked against a full recompute.
#include <algorithm>
#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <utility>

#include "daemon/engine/engine.h"
#include "tests/unit/engine/firewall.h"
#include "tests/unit/support/packet_builder.h"

using namespace pairwall::engine;
using pairwall::test::Bytes;
using pairwall::test::Firewall;
using pairwall::test::PacketBuilder;
using Action = Verdict::Action;

namespace {

constexpr const char* kModulate = R"(
block all
pass in on lan0 proto tcp to port 80 modulate state
pass out on wan0 proto tcp to port 80 modulate state
pass in on lan0 proto tcp to port 443 flags any modulate state
pass out on wan0 proto tcp to port 443 flags any modulate state
)";

constexpr uint32_t kClientIsn = 1000;
constexpr uint32_t kServerIsn = 9000;

// One connection's segments, IPv4 or IPv6, client on lan0 and server on wan0.
struct Connection {
  bool v6 = false;
  uint16_t port = 80;

  std::string client() const { return v6 ? "2001:db8:1::10" : "10.1.0.10"; }
  std::string server() const { return v6 ? "2001:db8:2::80" : "192.0.2.80"; }
  std::size_t tcp_offset() const { return v6 ? 40 : 20; }

  // A segment from the client (or the server), optionally with one SACK block after `nops`
  // no-operations (one puts its edges at odd offsets).
  Bytes segment(bool from_client, uint8_t flags, uint32_t seq, uint32_t ack, std::size_t payload = 0,
                std::optional<std::pair<uint32_t, uint32_t>> sack = std::nullopt, int nops = 2) const {
    PacketBuilder b;
    if (v6) {
      b.ipv6(from_client ? client() : server(), from_client ? server() : client());
    } else {
      b.ipv4(from_client ? client() : server(), from_client ? server() : client());
    }
    b.tcp(from_client ? 40000 : port, from_client ? port : 40000).flags(flags).seq(seq).ack(ack).window(512);
    if (flags & tcpflag::kSyn) b.wscale(7);
    if (sack) {
      Bytes option(static_cast<std::size_t>(nops), pairwall::test::tcpopt::kNop);
      option.insert(option.end(), {pairwall::test::tcpopt::kSack, 10});
      for (uint32_t edge : {sack->first, sack->second})
        for (int shift = 24; shift >= 0; shift -= 8) option.push_back(static_cast<uint8_t>(edge >> shift));
      b.tcp_options_raw(option);
    }
    return b.payload(payload).build();
  }

  uint32_t seq_of(const Bytes& packet) const { return pairwall::test::get32(packet, tcp_offset() + 4); }
};

// A handshake through `fw`; the offsets it drew for the client ([0]) and the server ([1]).
std::pair<uint32_t, uint32_t> handshake(Firewall& fw, const Connection& c) {
  using namespace tcpflag;
  const Verdict syn = fw.out(c.segment(true, kSyn, kClientIsn, 0));
  REQUIRE(syn.action == Action::Accept);
  REQUIRE(syn.rewritten);
  const uint32_t client_diff = c.seq_of(fw.last_packet) - kClientIsn;
  CHECK(client_diff != 0);
  CHECK(fw.last_packet == c.segment(true, kSyn, kClientIsn + client_diff, 0));

  // The server answers the shifted SYN; the client gets its own ISN acknowledged.
  const Verdict synack = fw.in(c.segment(false, kSyn | kAck, kServerIsn, kClientIsn + client_diff + 1));
  REQUIRE(synack.reason == Reason::State);
  REQUIRE(synack.rewritten);
  const uint32_t server_diff = c.seq_of(fw.last_packet) - kServerIsn;
  CHECK(server_diff != 0);
  CHECK(server_diff != client_diff);
  CHECK(fw.last_packet == c.segment(false, kSyn | kAck, kServerIsn + server_diff, kClientIsn + 1));

  REQUIRE(fw.out(c.segment(true, kAck, kClientIsn + 1, kServerIsn + server_diff + 1)).reason ==
          Reason::State);
  CHECK(fw.last_packet == c.segment(true, kAck, kClientIsn + 1 + client_diff, kServerIsn + 1));
  return {client_diff, server_diff};
}

// 100 bytes from the client and 300 back, each acknowledging what the other sent, as each end
// sees the numbers: each segment must leave `fw` in the receiving end's numbers.
void data_both_ways(Firewall& fw, const Connection& c, std::pair<uint32_t, uint32_t> diffs) {
  using namespace tcpflag;
  const auto [client_diff, server_diff] = diffs;
  REQUIRE(fw.out(c.segment(true, kAck, kClientIsn + 1, kServerIsn + server_diff + 1, 100)).reason ==
          Reason::State);
  CHECK(fw.last_packet == c.segment(true, kAck, kClientIsn + 1 + client_diff, kServerIsn + 1, 100));
  REQUIRE(fw.in(c.segment(false, kAck, kServerIsn + 1, kClientIsn + client_diff + 101, 300)).reason ==
          Reason::State);
  CHECK(fw.last_packet == c.segment(false, kAck, kServerIsn + 1 + server_diff, kClientIsn + 101, 300));
}

}  // namespace

TEST_CASE("modulate state: each end's sequence numbers are shifted, and each end sees its own",
          "[engine][tcp][modulate]") {
  using namespace tcpflag;
  for (const bool v6 : {false, true}) {
    INFO((v6 ? "v6" : "v4"));
    Firewall fw(kModulate);
    CHECK(fw.engine.rules()->rule(1).text ==
          "pass in on lan0 proto tcp from any to any port 80 flags S/SA modulate state");
    const Connection c{v6};
    const auto [client_diff, server_diff] = handshake(fw, c);
    data_both_ways(fw, c, {client_diff, server_diff});

    // A SACK block counts the other end's numbers, as the acknowledgment does.
    const Verdict sacked =
        fw.out(c.segment(true, kAck, kClientIsn + 101, kServerIsn + server_diff + 1, 0,
                         std::pair{kServerIsn + server_diff + 201, kServerIsn + server_diff + 301}));
    REQUIRE(sacked.reason == Reason::State);
    CHECK(fw.last_packet == c.segment(true, kAck, kClientIsn + 101 + client_diff, kServerIsn + 1, 0,
                                      std::pair{kServerIsn + 201, kServerIsn + 301}));
    // Its edges at odd offsets count in the checksum with their bytes swapped; the builder
    // computes the expected checksum afresh.
    const Verdict sacked_odd =
        fw.out(c.segment(true, kAck, kClientIsn + 101, kServerIsn + server_diff + 1, 0,
                         std::pair{kServerIsn + server_diff + 211, kServerIsn + server_diff + 311}, 1));
    REQUIRE(sacked_odd.reason == Reason::State);
    CHECK(fw.last_packet == c.segment(true, kAck, kClientIsn + 101 + client_diff, kServerIsn + 1, 0,
                                      std::pair{kServerIsn + 211, kServerIsn + 311}, 1));

    // The windows are checked in each end's own numbers: a segment that acknowledges the server's
    // real numbers, which only the server and this node know, is out of the window.
    CHECK(fw.out(c.segment(true, kAck, kClientIsn + 101, kServerIsn + 301)).reason == Reason::BadSeq);

    // An ICMP error from past this node quotes the client's segment as it left, shifted: the
    // client gets it about its own.
    const Bytes sent = c.segment(true, kAck, kClientIsn + 101, kServerIsn + 301);
    const Bytes shifted = c.segment(true, kAck, kClientIsn + 101 + client_diff, kServerIsn + 301);
    const auto error = [&](const Bytes& quote) {
      PacketBuilder b;
      if (v6) {
        b.ipv6("2001:db8:9::1", c.client()).icmp_error(2, 0, quote, 1280);  // packet too big
      } else {
        b.ipv4("198.51.100.1", c.client()).icmp_error(3, 4, quote, 1280);  // fragmentation needed
      }
      return b.build();
    };
    const Verdict v = fw.in(error(shifted));
    CHECK(v.reason == Reason::State);
    CHECK(v.rewritten);
    CHECK(fw.last_packet == error(sent));
  }
}

TEST_CASE("modulate state on the out pass's rule alone shifts the connection that a plain in rule passes",
          "[engine][tcp][modulate]") {
  // pf's classic `pass out on $ext_if modulate state` behind `pass in on $int_if`: pf's out-pass
  // state shifts what leaves; one state shifts it alike. The in rule is the state's rule.
  for (const char* rules : {"block all\npass in on lan0 proto tcp to port 80\n"
                            "pass out on wan0 proto tcp to port 80 modulate state\n",
                            "block all\npass in on lan0 proto tcp to port 80 modulate state\n"
                            "pass out on wan0 proto tcp to port 80\n"}) {
    INFO(rules);
    Firewall fw(rules);
    const Connection c;
    const auto [client_diff, server_diff] = handshake(fw, c);
    data_both_ways(fw, c, {client_diff, server_diff});
    CHECK(fw.engine.states().size() == 1);
  }
  // Neither rule modulates: the numbers pass as they are.
  Firewall plain("block all\npass in on lan0 proto tcp to port 80\npass out on wan0 proto tcp to port 80\n");
  const Connection c;
  const Bytes syn = c.segment(true, tcpflag::kSyn, kClientIsn, 0);
  REQUIRE(plain.out(syn).action == Action::Accept);
  CHECK(plain.last_packet == syn);
}

TEST_CASE("modulate state: a connection picked up in mid-stream is kept, not shifted",
          "[engine][tcp][modulate]") {
  Firewall fw(kModulate);
  const Connection c{false, 443};
  const Bytes data = c.segment(true, tcpflag::kAck, 5000, 7000, 100);
  const Verdict v = fw.out(data);
  REQUIRE(v.action == Action::Accept);
  CHECK_FALSE(v.rewritten);
  CHECK(fw.last_packet == data);
  const Bytes reply = c.segment(false, tcpflag::kAck, 7000, 5100, 10);
  REQUIRE(fw.in(reply).reason == Reason::State);
  CHECK(fw.last_packet == reply);
}

TEST_CASE("modulate state: the offsets travel with the state, and the peer shifts alike after a failover",
          "[engine][tcp][modulate][sync]") {
  using namespace tcpflag;
  Firewall fw(kModulate);
  const Connection c;
  const auto [client_diff, server_diff] = handshake(fw, c);
  const auto records = fw.drain();
  REQUIRE_FALSE(records.empty());
  CHECK((records.front().flags & stateflag::kModulated) != 0);
  // The SYN's insert already carries the server's offset, drawn with the state.
  CHECK(records.front().seqdiff == std::array<uint32_t, 2>{client_diff, server_diff});
  CHECK(records.back().seqdiff == std::array<uint32_t, 2>{client_diff, server_diff});

  Firewall peer("block all\n", 2);
  for (const StateRecord& r : records) REQUIRE(peer.engine.apply(r, peer.now));
  data_both_ways(peer, c, {client_diff, server_diff});
}

TEST_CASE("modulate state: a peer holding only the SYN's insert shifts the server as the client saw it",
          "[engine][tcp][modulate][sync]") {
  // The master passed the whole handshake and died before the updates that followed the insert
  // reached its peer: the client has seen the server's shifted ISN, and the peer must shift alike.
  using namespace tcpflag;
  for (const bool v6 : {false, true}) {
    INFO((v6 ? "v6" : "v4"));
    Firewall fw(kModulate);
    const Connection c{v6};
    const auto diffs = handshake(fw, c);
    const auto records = fw.drain();
    REQUIRE_FALSE(records.empty());

    Firewall peer("block all\n", 2);
    REQUIRE(peer.engine.apply(records.front(), peer.now));
    // The client's last ACK of the handshake, retransmitted to the new master.
    REQUIRE(peer.out(c.segment(true, kAck, kClientIsn + 1, kServerIsn + diffs.second + 1)).reason ==
            Reason::State);
    CHECK(peer.last_packet == c.segment(true, kAck, kClientIsn + 1 + diffs.first, kServerIsn + 1));
    data_both_ways(peer, c, diffs);
  }
}

TEST_CASE("modulate state: an insert without the responder's offset gets one on the responder's SYN-ACK",
          "[engine][tcp][modulate][sync]") {
  // A peer that draws the responder's offset on its SYN-ACK, as pf does, inserts states with the
  // initiator's offset alone.
  using namespace tcpflag;
  Firewall fw(kModulate);
  const Connection c;
  REQUIRE(fw.out(c.segment(true, kSyn, kClientIsn, 0)).rewritten);
  const uint32_t client_diff = c.seq_of(fw.last_packet) - kClientIsn;
  auto records = fw.drain();
  REQUIRE(records.size() == 1);
  StateRecord insert = records.front();
  insert.seqdiff[1] = 0;

  Firewall peer("block all\n", 2);
  REQUIRE(peer.engine.apply(insert, peer.now));
  const Verdict synack = peer.in(c.segment(false, kSyn | kAck, kServerIsn, kClientIsn + client_diff + 1));
  REQUIRE(synack.reason == Reason::State);
  REQUIRE(synack.rewritten);
  const uint32_t server_diff = c.seq_of(peer.last_packet) - kServerIsn;
  CHECK(server_diff != 0);
  CHECK(peer.last_packet == c.segment(false, kSyn | kAck, kServerIsn + server_diff, kClientIsn + 1));
  // The drawn offset goes to the other node at once, not with the next refresh.
  const auto drawn = peer.drain();
  CHECK(std::any_of(drawn.begin(), drawn.end(), [&](const StateRecord& r) {
    return r.kind == StateRecord::Kind::Update && r.seqdiff[1] == server_diff;
  }));
  REQUIRE(peer.out(c.segment(true, kAck, kClientIsn + 1, kServerIsn + server_diff + 1)).reason ==
          Reason::State);
  data_both_ways(peer, c, {client_diff, server_diff});
}

TEST_CASE("modulate state applies to TCP only: other protocols' states are kept", "[engine][modulate]") {
  Firewall fw("block all\npass in on lan0 modulate state\npass out on wan0 modulate state\n");
  const Bytes query = PacketBuilder().ipv4("10.1.0.10", "192.0.2.53").udp(40000, 53).payload(20).build();
  const Verdict v = fw.out(query);
  REQUIRE(v.action == Action::Accept);
  CHECK_FALSE(v.rewritten);
  CHECK(fw.last_packet == query);
  const auto records = fw.drain();
  REQUIRE(records.size() == 1);
  CHECK((records[0].flags & stateflag::kModulated) == 0);
}

TEST_CASE("with modulation off, as replays of a capture run, modulate state keeps the numbers",
          "[engine][tcp][modulate]") {
  using namespace tcpflag;
  auto config = pairwall::test::test_config();
  config.modulation = false;
  Firewall fw(kModulate, config);
  const Connection c;
  const Bytes syn = c.segment(true, kSyn, kClientIsn, 0);
  REQUIRE(fw.out(syn).action == Action::Accept);
  CHECK(fw.last_packet == syn);
  // The server's answer acknowledges the client's own number, as in the capture.
  const Bytes synack = c.segment(false, kSyn | kAck, kServerIsn, kClientIsn + 1);
  REQUIRE(fw.in(synack).reason == Reason::State);
  CHECK(fw.last_packet == synack);
  const auto records = fw.drain();
  REQUIRE_FALSE(records.empty());
  CHECK((records.front().flags & stateflag::kModulated) == 0);
}
