// `synproxy state` through Engine::process with crafted segments: the client's handshake answered
// by the node, the server's opened only once it is complete, the two spliced with each end keeping
// its own sequence numbers, and each step handed to a sync peer that can go on from it. Every
// segment the node makes is compared byte for byte with one the builder makes, so every checksum
// is checked against a full recompute.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "daemon/engine/engine.h"
#include "tests/unit/engine/firewall.h"
#include "tests/unit/support/packet_builder.h"

using namespace pairwall::engine;
using pairwall::test::Bytes;
using pairwall::test::Firewall;
using pairwall::test::PacketBuilder;
using Action = Verdict::Action;

namespace {

constexpr const char* kSynproxy = R"(
block all
pass in on lan0 proto tcp to port 80 synproxy state
pass out on wan0 proto tcp to port 80 keep state
)";

constexpr uint32_t kClientIsn = 1000;
constexpr uint32_t kServerIsn = 9000;
constexpr uint16_t kClientPort = 40000;
constexpr uint16_t kMss = 1400;

struct Ends {
  bool v6 = false;
  std::string client = v6 ? "2001:db8:1::10" : "10.1.0.10";
  std::string server = v6 ? "2001:db8:2::80" : "192.0.2.80";
  std::size_t tcp_offset() const { return v6 ? 40 : 20; }

  // A segment from the client (or the server) as the ends send it.
  Bytes segment(bool from_client, uint8_t flags, uint32_t seq, uint32_t ack, uint16_t window = 512,
                std::size_t payload = 0) const {
    PacketBuilder b;
    if (v6) {
      b.ipv6(from_client ? client : server, from_client ? server : client);
    } else {
      b.ipv4(from_client ? client : server, from_client ? server : client);
    }
    b.tcp(from_client ? kClientPort : 80, from_client ? 80 : kClientPort).flags(flags).seq(seq).ack(ack);
    b.window(window);
    if (flags == tcpflag::kSyn) b.mss(kMss).wscale(7).sack_permitted();
    return b.payload(payload).build();
  }

  // A segment the node makes in an end's name: TTL 64, DF, the id left to the kernel.
  Bytes made(bool to_client, uint8_t flags, uint32_t seq, uint32_t ack, uint16_t window,
             uint16_t mss = 0) const {
    PacketBuilder b;
    if (v6) {
      b.ipv6(to_client ? server : client, to_client ? client : server);
    } else {
      b.ipv4(to_client ? server : client, to_client ? client : server).df().ip_id(0);
    }
    b.ttl(kGeneratedTtl);
    b.tcp(to_client ? 80 : kClientPort, to_client ? kClientPort : 80)
        .flags(flags)
        .seq(seq)
        .ack(ack)
        .window(window);
    if (mss != 0) b.mss(mss);
    return b.build();
  }

  uint32_t seq_of(const Bytes& packet) const { return pairwall::test::get32(packet, tcp_offset() + 4); }
};

IpAddress address(const std::string& text) {
  const auto a = parse_address(text, nullptr);
  REQUIRE(a.has_value());
  return *a;
}

std::vector<Bytes> made_by(const Firewall& fw, const Verdict& v) {
  std::vector<Bytes> out;
  for (const GeneratedPacket& p : fw.worker.generated(v))
    out.emplace_back(p.datagram().begin(), p.datagram().end());
  return out;
}

// The initial sequence numbers the node chose: toward the client, and toward the server.
struct ProxyIsns {
  uint32_t to_client = 0;
  uint32_t to_server = 0;
};

// The three steps of the handshakes through `fw`, each checking what the node sends. The client's
// SYN, answered: returns the node's initial sequence number toward the client.
uint32_t answer_syn(Firewall& fw, const Ends& e) {
  using namespace tcpflag;
  const Verdict syn = fw.out(e.segment(true, kSyn, kClientIsn, 0));
  REQUIRE(syn.action == Action::Drop);
  REQUIRE(syn.reason == Reason::Synproxy);
  const auto made = made_by(fw, syn);
  REQUIRE(made.size() == 1);
  const uint32_t to_client = e.seq_of(made[0]);
  // A SYN-ACK from the server's address with the client's MSS and a zero window; nothing else.
  CHECK(made[0] == e.made(true, kSyn | kAck, to_client, kClientIsn + 1, 0, kMss));
  return to_client;
}

// The client's handshake ACK, which opens the server's side: returns the node's initial sequence
// number toward the server.
uint32_t open_server(Firewall& fw, const Ends& e, uint32_t to_client) {
  using namespace tcpflag;
  const Verdict ack = fw.out(e.segment(true, kAck, kClientIsn + 1, to_client + 1));
  REQUIRE(ack.reason == Reason::Synproxy);
  const auto made = made_by(fw, ack);
  REQUIRE(made.size() == 1);
  const uint32_t to_server = e.seq_of(made[0]);
  CHECK(made[0] == e.made(false, kSyn, to_server, 0, 0, kMss));
  return to_server;
}

// The server's SYN-ACK, which splices the two: the server's handshake completed with the client's
// window, the client's window opened with the server's.
void splice(Firewall& fw, const Ends& e, const ProxyIsns& isns) {
  using namespace tcpflag;
  const Verdict synack = fw.in(e.segment(false, kSyn | kAck, kServerIsn, isns.to_server + 1, 1024));
  REQUIRE(synack.action == Action::Drop);
  REQUIRE(synack.reason == Reason::Synproxy);
  const auto made = made_by(fw, synack);
  REQUIRE(made.size() == 2);
  CHECK(made[0] == e.made(false, kAck, isns.to_server + 1, kServerIsn + 1, 512));
  CHECK(made[1] == e.made(true, kAck, isns.to_client + 1, kClientIsn + 1, 1024));
}

ProxyIsns handshakes(Firewall& fw, const Ends& e) {
  ProxyIsns isns;
  isns.to_client = answer_syn(fw, e);
  isns.to_server = open_server(fw, e, isns.to_client);
  splice(fw, e, isns);
  return isns;
}

// 100 bytes from the client and 300 back, each end in its own numbers: each must leave `fw` in
// the numbers the receiving end knows.
void data_both_ways(Firewall& fw, const Ends& e, const ProxyIsns& isns) {
  using namespace tcpflag;
  REQUIRE(fw.out(e.segment(true, kAck, kClientIsn + 1, isns.to_client + 1, 512, 100)).reason ==
          Reason::State);
  CHECK(fw.last_packet == e.segment(true, kAck, isns.to_server + 1, kServerIsn + 1, 512, 100));
  REQUIRE(fw.in(e.segment(false, kAck, kServerIsn + 1, isns.to_server + 101, 1024, 300)).reason ==
          Reason::State);
  CHECK(fw.last_packet == e.segment(false, kAck, isns.to_client + 1, kClientIsn + 101, 1024, 300));
}

}  // namespace

TEST_CASE(
    "synproxy state: the client's handshake is the node's, the server's follows it, and the two are spliced",
    "[engine][tcp][synproxy]") {
  using namespace tcpflag;
  for (const bool v6 : {false, true}) {
    INFO((v6 ? "v6" : "v4"));
    Firewall fw(kSynproxy);
    CHECK(fw.engine.rules()->rule(1).text ==
          "pass in on lan0 proto tcp from any to any port 80 flags S/SA synproxy state");
    const Ends e{v6};
    const ProxyIsns isns = handshakes(fw, e);
    CHECK(isns.to_client != isns.to_server);
    data_both_ways(fw, e, isns);
    // The windows are checked in each end's own numbers: the client acknowledging the server's
    // own numbers, which only the server and the node know, is out of the window.
    CHECK(fw.out(e.segment(true, kAck, kClientIsn + 101, kServerIsn + 301)).reason == Reason::BadSeq);
  }
}

TEST_CASE("synproxy state: retransmissions drive the handshakes, anything else is held back",
          "[engine][tcp][synproxy]") {
  using namespace tcpflag;
  Firewall fw(kSynproxy);
  const Ends e;
  const Verdict syn = fw.out(e.segment(true, kSyn, kClientIsn, 0));
  const Bytes synack = made_by(fw, syn).at(0);
  const uint32_t to_client = e.seq_of(synack);

  // The SYN again (the SYN-ACK was lost): the same SYN-ACK.
  const Verdict again = fw.out(e.segment(true, kSyn, kClientIsn, 0));
  CHECK(again.reason == Reason::Synproxy);
  CHECK(made_by(fw, again) == std::vector<Bytes>{synack});
  // A SYN with another sequence number, an ACK of another number, data: dropped, nothing answered.
  struct Case {
    const char* what;
    Bytes packet;
  };
  const Case held[] = {
      {"another SYN", e.segment(true, kSyn, kClientIsn + 5, 0)},
      {"a wrong ack", e.segment(true, kAck, kClientIsn + 1, to_client + 2)},
      {"a wrong seq", e.segment(true, kAck, kClientIsn + 2, to_client + 1)},
      {"a RST", e.segment(true, kRst | kAck, kClientIsn + 1, to_client + 1)},
      {"a server segment", e.segment(false, kSyn | kAck, kServerIsn, kClientIsn + 1)},
  };
  for (const Case& c : held) {
    INFO(c.what);
    const Verdict v = fw.out(c.packet);
    CHECK(v.action == Action::Drop);
    CHECK(v.reason == Reason::Synproxy);
    CHECK(v.generated == 0);
  }

  // The handshake ACK opens the server's side; the same ACK again sends the same SYN again.
  const Verdict ack = fw.out(e.segment(true, kAck, kClientIsn + 1, to_client + 1));
  const Bytes server_syn = made_by(fw, ack).at(0);
  const Verdict ack_again = fw.out(e.segment(true, kAck, kClientIsn + 1, to_client + 1));
  CHECK(made_by(fw, ack_again) == std::vector<Bytes>{server_syn});
  const uint32_t to_server = e.seq_of(server_syn);

  // Before the server answers, the client's data is dropped (it was offered no window: a segment
  // with the handshake's numbers is its ACK again, as pf takes it), and a SYN-ACK to another SYN is
  // no answer.
  const Verdict early = fw.out(e.segment(true, kAck | kPsh, kClientIsn + 1, to_client + 1, 512, 10));
  CHECK(early.action == Action::Drop);
  CHECK(early.reason == Reason::Synproxy);
  CHECK(made_by(fw, early) == std::vector<Bytes>{server_syn});
  const Verdict stray = fw.in(e.segment(false, kSyn | kAck, kServerIsn, to_server + 7));
  CHECK(stray.reason == Reason::Synproxy);
  CHECK(stray.generated == 0);
  const Verdict refused = fw.in(e.segment(false, kRst | kAck, 0, to_server + 1));
  CHECK(refused.reason == Reason::Synproxy);
  // The sync peer heard of the state and of the server's side opening; of the packets held back,
  // repeated or refused, nothing.
  const auto records = fw.drain();
  REQUIRE(records.size() == 2);
  CHECK(records[0].kind == StateRecord::Kind::Insert);
  CHECK(records[1].proxy == pairwall::engine::Proxy::Responder);
}

TEST_CASE("synproxy state: a flood of SYNs never reaches the server", "[engine][tcp][synproxy]") {
  using namespace tcpflag;
  Firewall fw(kSynproxy);
  constexpr int kSources = 200;
  for (int i = 0; i < kSources; ++i) {
    const std::string forged = "10.9." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1);
    const Verdict v =
        fw.out(PacketBuilder().ipv4(forged, "192.0.2.80").tcp(1024, 80).flags(kSyn).seq(7).mss(1460).build());
    REQUIRE(v.reason == Reason::Synproxy);
    const auto made = made_by(fw, v);
    REQUIRE(made.size() == 1);
    // Every answer goes back to the forged source; none goes to the server.
    PacketView answer;
    REQUIRE(parse_packet(made[0], answer) == Reason::Match);
    CHECK(answer.dst == address(forged));
    CHECK(answer.tcp.flags == (kSyn | kAck));
  }
  CHECK(fw.engine.states().size() == kSources);
  CHECK(fw.worker.counters().get(Reason::Synproxy) == kSources);
  // The peer is told of each half-open state, as pfsync tells of pf's: an insert each.
  CHECK(fw.drain().size() == kSources);
}

TEST_CASE("synproxy state: the peer learns each step, and carries the connection on from any of them",
          "[engine][tcp][synproxy][sync]") {
  using pairwall::engine::Proxy;
  const Ends e;
  Firewall fw(kSynproxy);
  Firewall peer("block all\n", 2);
  auto to_peer = [&] {
    for (const StateRecord& r : fw.drain()) REQUIRE(peer.engine.apply(r, peer.now));
  };
  ProxyIsns isns;

  SECTION("the master dies after the splice") {
    isns = handshakes(fw, e);
    const auto records = fw.drain();
    // An insert with the SYN, an update with each step.
    REQUIRE(records.size() == 3);
    CHECK(records[0].kind == StateRecord::Kind::Insert);
    CHECK(records[0].proxy == Proxy::Initiator);
    CHECK(records[0].proxy_isn[0] == isns.to_client);
    CHECK(records[1].kind == StateRecord::Kind::Update);
    CHECK(records[1].proxy == Proxy::Responder);
    CHECK(records[1].proxy_isn == std::array<uint32_t, 2>{isns.to_client, isns.to_server});
    CHECK(records[2].proxy == Proxy::Spliced);
    CHECK((records[2].flags & stateflag::kModulated) != 0);
    CHECK(records[2].seqdiff ==
          std::array<uint32_t, 2>{isns.to_server - kClientIsn, isns.to_client - kServerIsn});
    CHECK(records[2].src.state == static_cast<uint8_t>(TcpState::Established));
    CHECK(records[2].dst.state == static_cast<uint8_t>(TcpState::Established));
    for (const StateRecord& r : records) REQUIRE(peer.engine.apply(r, peer.now));
  }
  SECTION("the master dies when the server's SYN is out: the peer splices with the server's answer") {
    isns.to_client = answer_syn(fw, e);
    isns.to_server = open_server(fw, e, isns.to_client);
    to_peer();
    splice(peer, e, isns);
  }
  SECTION("the master dies having answered the client: the peer opens the server's side itself") {
    isns.to_client = answer_syn(fw, e);
    to_peer();
    isns.to_server = open_server(peer, e, isns.to_client);
    splice(peer, e, isns);
  }
  data_both_ways(peer, e, isns);
}

TEST_CASE("synproxy state: a client over max-src-conn is refused on its ACK, before the server hears of it",
          "[engine][tcp][synproxy][source]") {
  using namespace tcpflag;
  // pf_synproxy calls pf_src_connlimit on the client's ACK, before it sends the server a SYN: a
  // connection the limit ends there costs the server nothing.
  Firewall fw(
      "table <abusers> persist {}\n"
      "block all\n"
      "pass in on lan0 proto tcp to port 80 synproxy state (max-src-conn 1, overload <abusers>)\n"
      "pass out on wan0 proto tcp to port 80 keep state\n");
  const Ends e;
  const ProxyIsns isns = handshakes(fw, e);
  data_both_ways(fw, e, isns);

  const auto second_segment = [&](uint8_t flags, uint32_t seq, uint32_t ack) {
    return PacketBuilder()
        .ipv4(e.client, e.server)
        .tcp(kClientPort + 1, 80)
        .flags(flags)
        .seq(seq)
        .ack(ack)
        .window(512)
        .build();
  };
  const Verdict syn = fw.out(second_segment(kSyn, kClientIsn, 0));
  REQUIRE(syn.reason == Reason::Synproxy);
  const uint32_t to_client = e.seq_of(made_by(fw, syn).at(0));
  const Verdict ack = fw.out(second_segment(kAck, kClientIsn + 1, to_client + 1));
  CHECK(ack.action == Action::Drop);
  CHECK(ack.reason == Reason::SourceLimit);
  CHECK(ack.generated == 0);
  CHECK(fw.engine.states().size() == 1);
  SourceOverload o;
  CHECK(fw.worker.overloads().pop(o));
  // The first connection carries on.
  REQUIRE(fw.out(e.segment(true, kAck, kClientIsn + 101, isns.to_client + 301, 512, 10)).reason ==
          Reason::State);
}

TEST_CASE("synproxy state behind nat: the server's side speaks from the nat address",
          "[engine][tcp][synproxy][nat]") {
  using namespace tcpflag;
  Firewall fw("nat on wan0 from 10.1.0.0/16 to any -> 198.51.100.1\n" + std::string(kSynproxy));
  const Ends e;
  const Verdict syn = fw.out(e.segment(true, kSyn, kClientIsn, 0));
  const uint32_t to_client = e.seq_of(made_by(fw, syn).at(0));
  const Verdict ack = fw.out(e.segment(true, kAck, kClientIsn + 1, to_client + 1));
  const Bytes server_syn = made_by(fw, ack).at(0);
  PacketView opened;
  REQUIRE(parse_packet(server_syn, opened) == Reason::Match);
  CHECK(opened.src == address("198.51.100.1"));
  CHECK(opened.dst == address("192.0.2.80"));
  const uint16_t nat_port = opened.src_port;
  const uint32_t to_server = opened.tcp.seq;

  const Bytes synack = PacketBuilder()
                           .ipv4("192.0.2.80", "198.51.100.1")
                           .tcp(80, nat_port)
                           .flags(kSyn | kAck)
                           .seq(kServerIsn)
                           .ack(to_server + 1)
                           .window(1024)
                           .build();
  const Verdict spliced = fw.in(synack);
  REQUIRE(spliced.reason == Reason::Synproxy);
  const auto made = made_by(fw, spliced);
  REQUIRE(made.size() == 2);
  PacketView to_server_ack;
  PacketView to_client_ack;
  REQUIRE(parse_packet(made[0], to_server_ack) == Reason::Match);
  REQUIRE(parse_packet(made[1], to_client_ack) == Reason::Match);
  CHECK(to_server_ack.src == address("198.51.100.1"));
  CHECK(to_server_ack.src_port == nat_port);
  CHECK(to_client_ack.src == address("192.0.2.80"));
  CHECK(to_client_ack.dst == address("10.1.0.10"));
  CHECK(to_client_ack.dst_port == kClientPort);

  // The client's data leaves translated and shifted into the server's numbers.
  REQUIRE(fw.out(e.segment(true, kAck, kClientIsn + 1, to_client + 1, 512, 100)).reason == Reason::State);
  PacketView sent;
  REQUIRE(parse_packet(fw.last_packet, sent) == Reason::Match);
  CHECK(sent.src == address("198.51.100.1"));
  CHECK(sent.tcp.seq == to_server + 1);
  CHECK(sent.tcp.ack == kServerIsn + 1);
}

TEST_CASE("synproxy state off (replays of a capture) and for other protocols: kept as keep state",
          "[engine][synproxy]") {
  using namespace tcpflag;
  auto config = pairwall::test::test_config();
  config.synproxy = false;
  Firewall replay(kSynproxy, config);
  const Ends e;
  const Bytes syn = e.segment(true, kSyn, kClientIsn, 0);
  const Verdict v = replay.out(syn);
  REQUIRE(v.action == Action::Accept);
  CHECK(v.generated == 0);
  CHECK(replay.last_packet == syn);
  REQUIRE(replay.in(e.segment(false, kSyn | kAck, kServerIsn, kClientIsn + 1)).reason == Reason::State);

  Firewall udp("block all\npass in on lan0 synproxy state\npass out on wan0 keep state\n");
  const Bytes query = PacketBuilder().ipv4("10.1.0.10", "192.0.2.53").udp(40000, 53).payload(20).build();
  const Verdict u = udp.out(query);
  CHECK(u.action == Action::Accept);
  CHECK(u.generated == 0);
  CHECK(udp.drain().size() == 1);
}

TEST_CASE("synproxy state: a batch makes at most the outbox's worth of answers, and says so",
          "[engine][tcp][synproxy][batch]") {
  using namespace tcpflag;
  Firewall fw(kSynproxy);
  constexpr std::size_t kPackets = Worker::kOutboxCapacity + 3;
  std::vector<Bytes> packets;
  std::vector<BatchPacket> batch(kPackets);
  for (std::size_t i = 0; i < kPackets; ++i) {
    packets.push_back(
        PacketBuilder()
            .ipv4("10.9." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1), "192.0.2.80")
            .tcp(1024, 80)
            .flags(kSyn)
            .seq(7)
            .build());
  }
  for (std::size_t i = 0; i < kPackets; ++i) {
    batch[i].bytes = packets[i];
    batch[i].meta = PacketMeta{Hook::Forward, fw.lan, fw.wan, false};
  }
  fw.engine.process_batch(fw.worker, batch, fw.now);
  // Each answer belongs to its own SYN; the SYNs past the outbox's room are counted as such (their
  // senders retry, and a later batch answers them).
  std::size_t answered = 0;
  for (std::size_t i = 0; i < kPackets; ++i) {
    const Verdict& v = batch[i].verdict;
    CHECK(v.action == Action::Drop);
    if (v.generated == 1) {
      ++answered;
      CHECK(v.reason == Reason::Synproxy);
      PacketView syn;
      PacketView answer;
      REQUIRE(parse_packet(packets[i], syn) == Reason::Match);
      REQUIRE(parse_packet(made_by(fw, v).at(0), answer) == Reason::Match);
      CHECK(answer.dst == syn.src);
    } else {
      CHECK(v.reason == Reason::Memory);
    }
  }
  CHECK(answered == Worker::kOutboxCapacity);
}
