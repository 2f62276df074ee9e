#include "daemon/engine/tcp_track.h"

#include <catch2/catch.hpp>
#include <cstdint>

using namespace pairwall::engine;
using namespace pairwall::engine::tcpflag;

namespace {

// A TCP segment as the tracker sees it: only the fields it reads.
PacketView segment(uint8_t flags, uint32_t seq, uint32_t ack, uint16_t window, uint16_t payload = 0,
                   int wscale = -1) {
  PacketView p;
  p.proto = ipproto::kTcp;
  p.tcp.flags = flags;
  p.tcp.seq = seq;
  p.tcp.ack = ack;
  p.tcp.window = window;
  p.payload_length = payload;
  if (wscale >= 0) {
    p.tcp.has_window_scale = true;
    p.tcp.window_scale = static_cast<uint8_t>(wscale);
  }
  return p;
}

// Client (initiator) and server halves of one connection, driven packet by packet.
struct Conn {
  PeerTracking client;
  PeerTracking server;
  TimeoutClass timeout = TimeoutClass::TcpFirst;

  Reason from_client(const PacketView& p) { return step(client, server, p); }
  Reason from_server(const PacketView& p) { return step(server, client, p); }

 private:
  Reason step(PeerTracking& s, PeerTracking& d, const PacketView& p) {
    const TrackResult r = track_packet(s, d, p, timeout);
    if (r.reason == Reason::State) timeout = r.timeout;
    return r.reason;
  }
};

constexpr uint32_t kIsn = 1000;
constexpr uint32_t kIsnServer = 500000;

// SYN, SYN|ACK, ACK with window scaling 7 on both sides.
Conn established(int client_wscale = 7, int server_wscale = 7) {
  Conn c;
  c.timeout = track_first_packet(c.client, c.server, segment(kSyn, kIsn, 0, 64240, 0, client_wscale));
  REQUIRE(c.from_server(segment(kSyn | kAck, kIsnServer, kIsn + 1, 65160, 0, server_wscale)) ==
          Reason::State);
  REQUIRE(c.from_client(segment(kAck, kIsn + 1, kIsnServer + 1, 502)) == Reason::State);
  return c;
}

}  // namespace

TEST_CASE("handshake establishes both ends", "[tcp]") {
  Conn c = established();
  CHECK(c.client.state == static_cast<uint8_t>(TcpState::Established));
  CHECK(c.server.state == static_cast<uint8_t>(TcpState::Established));
  CHECK(c.timeout == TimeoutClass::TcpEstablished);
  CHECK((c.client.wscale & PeerTracking::kScaleMask) == 7);
  CHECK((c.server.wscale & PeerTracking::kScaleMask) == 7);
}

TEST_CASE("first packet sets opening timeout and SYN_SENT", "[tcp]") {
  PeerTracking s, d;
  CHECK(track_first_packet(s, d, segment(kSyn, 42, 0, 1000)) == TimeoutClass::TcpFirst);
  CHECK(s.state == static_cast<uint8_t>(TcpState::SynSent));
  CHECK(d.state == static_cast<uint8_t>(TcpState::Closed));
  CHECK(s.seqlo == 42);
  CHECK(s.seqhi == 44);
}

TEST_CASE("data inside the scaled window passes, beyond it is dropped", "[tcp]") {
  Conn c = established();
  // Server advertised 502 << 7 = 64256 bytes... the client's ACK advertised 502 (scaled 7):
  // the server may send up to ack + 64256.
  CHECK(c.from_server(segment(kAck, kIsnServer + 1, kIsn + 1, 509, 1400)) == Reason::State);
  CHECK(c.from_client(segment(kAck, kIsn + 1, kIsnServer + 1401, 502)) == Reason::State);
  // Large scaled windows: 60000 bytes ahead is inside 502 << 7.
  CHECK(c.from_server(segment(kAck, kIsnServer + 1401 + 60000, kIsn + 1, 509, 1000)) == Reason::State);
  // 10 MB ahead is far outside any window either end advertised.
  CHECK(c.from_server(segment(kAck, kIsnServer + 10'000'000, kIsn + 1, 509, 100)) == Reason::BadSeq);
}

TEST_CASE("without window scaling a 100 kB jump is out of window", "[tcp]") {
  Conn c = established(-1, -1);
  CHECK(c.client.wscale == 0);
  CHECK(c.from_client(segment(kAck, kIsn + 1, kIsnServer + 1, 65535, 1000)) == Reason::State);
  CHECK(c.from_client(segment(kAck, kIsn + 1 + 100'000, kIsnServer + 1, 65535, 1000)) == Reason::BadSeq);
}

TEST_CASE("one side declining window scaling disables it for both", "[tcp]") {
  Conn c = established(7, -1);
  CHECK((c.client.wscale & PeerTracking::kScaleMask) == 0);
  CHECK(c.server.wscale == 0);
}

TEST_CASE("acks far ahead of data sent are dropped", "[tcp]") {
  Conn c = established();
  CHECK(c.from_client(segment(kAck, kIsn + 1, kIsnServer + 1 + 5'000'000, 502)) == Reason::BadSeq);
}

TEST_CASE("old retransmissions within a window pass, ancient ones do not", "[tcp]") {
  Conn c = established(-1, -1);
  for (uint32_t i = 0; i < 10; ++i) {
    REQUIRE(c.from_client(segment(kAck, kIsn + 1 + i * 1000, kIsnServer + 1, 65535, 1000)) == Reason::State);
  }
  CHECK(c.from_client(segment(kAck, kIsn + 1 + 5000, kIsnServer + 1, 65535, 1000)) == Reason::State);
  // Move far forward (acked by the server each time), then replay the first segment.
  for (uint32_t i = 0; i < 200; ++i) {
    const uint32_t seq = kIsn + 10'001 + i * 1000;
    REQUIRE(c.from_client(segment(kAck, seq, kIsnServer + 1, 65535, 1000)) == Reason::State);
    REQUIRE(c.from_server(segment(kAck, kIsnServer + 1, seq + 1000, 65535)) == Reason::State);
  }
  CHECK(c.from_client(segment(kAck, kIsn + 1, kIsnServer + 1, 65535, 1000)) == Reason::BadSeq);
}

TEST_CASE("a responder's first packet that fails the window test leaves the state as it was", "[tcp]") {
  Conn c;
  c.timeout = track_first_packet(c.client, c.server, segment(kSyn, kIsn, 0, 64240, 0, 7));
  const PeerTracking client = c.client;
  const PeerTracking server = c.server;
  // A forged SYN-ACK acking nothing the client sent, from a blind attacker's sequence space.
  CHECK(c.from_server(segment(kSyn | kAck, 77'000'000, kIsn + 1'000'000, 65160, 0, 7)) == Reason::BadSeq);
  CHECK(c.server.seqlo == server.seqlo);
  CHECK(c.server.seqhi == server.seqhi);
  CHECK(c.server.wscale == server.wscale);
  CHECK(c.client.max_win == client.max_win);
  CHECK(c.client.wscale == client.wscale);
  // The real one still opens the connection.
  CHECK(c.from_server(segment(kSyn | kAck, kIsnServer, kIsn + 1, 65160, 0, 7)) == Reason::State);
  CHECK(c.from_client(segment(kAck, kIsn + 1, kIsnServer + 1, 502)) == Reason::State);
  CHECK(c.timeout == TimeoutClass::TcpEstablished);
}

TEST_CASE("a segment that fails the window test while both ends are in SYN_SENT frees its sender's half",
          "[tcp]") {
  // Both ends have sent a SYN and neither has been acknowledged: a simultaneous open, or a SYN
  // forged in the responder's name that anchored its half first. A segment of that end's that
  // then fails the window test frees the half, as pf_tcp_track_full does, so that the end's next
  // segment sets it up afresh; anchored for good, the responder's every real SYN-ACK was dropped
  // until the state expired.
  Conn c;
  c.timeout = track_first_packet(c.client, c.server, segment(kSyn, kIsn, 0, 64240, 0, 7));
  REQUIRE(c.from_server(segment(kSyn, 77'000'000, 0, 65160, 0, 7)) == Reason::State);
  REQUIRE(c.client.state == static_cast<uint8_t>(TcpState::SynSent));
  REQUIRE(c.server.state == static_cast<uint8_t>(TcpState::SynSent));
  const PacketView real_synack = segment(kSyn | kAck, kIsnServer, kIsn + 1, 65160, 0, 7);
  CHECK(c.from_server(real_synack) == Reason::BadSeq);
  CHECK(c.server.seqlo == 0);
  CHECK(c.server.seqhi == 1);
  CHECK(c.server.max_win == 1);
  // Its retransmission opens the connection.
  CHECK(c.from_server(real_synack) == Reason::State);
  CHECK(c.from_client(segment(kAck, kIsn + 1, kIsnServer + 1, 502)) == Reason::State);
  CHECK(c.timeout == TimeoutClass::TcpEstablished);
  // Once a half has been acknowledged, a failing segment changes nothing.
  const PeerTracking server = c.server;
  CHECK(c.from_server(segment(kAck, kIsnServer + 90'000'000, kIsn + 1, 509, 100)) == Reason::BadSeq);
  CHECK(c.server == server);
}

TEST_CASE("a segment without an acknowledgment leaves the other end's window to that end's own packets",
          "[tcp]") {
  // A SYN retransmitted before the answer (or a segment of a connection picked up mid-stream
  // before the other end has spoken) acknowledges nothing: the stand-in for its ACK, the silent
  // end's sequence number 0, only gets it past the ack-skew test. Taken for a real one, it set the
  // responder's upper bound to the SYN's window counted from 0: with an initial sequence number
  // in the upper half of the space, that bound lay some 2^31 ahead of it, so that the responder's
  // data passed from anywhere in that half for the connection's life, or (just above 2^31) every
  // SYN-ACK failed the window test until the state expired.
  struct Case {
    const char* name;
    uint32_t server_isn;
  };
  const Case cases[] = {
      {"low initial sequence number", 500000},
      {"initial sequence number in the upper half", 0x90000000u},
      {"initial sequence number just above 2^31", 0x80001000u},
      {"initial sequence number just below 2^32", 0xfffff000u},
  };
  for (const Case& k : cases) {
    INFO(k.name);
    Conn c;
    c.timeout = track_first_packet(c.client, c.server, segment(kSyn, kIsn, 0, 64240, 0, 7));
    REQUIRE(c.from_client(segment(kSyn, kIsn, 0, 64240, 0, 7)) == Reason::State);
    CHECK(c.server.seqhi == 1);
    CHECK(c.from_server(segment(kSyn | kAck, k.server_isn, kIsn + 1, 65160, 0, 7)) == Reason::State);
    CHECK(c.from_client(segment(kAck, kIsn + 1, k.server_isn + 1, 502)) == Reason::State);
    CHECK(c.timeout == TimeoutClass::TcpEstablished);
    CHECK(c.from_server(segment(kAck, k.server_isn + 1, kIsn + 1, 509, 1400)) == Reason::State);
    CHECK(c.from_server(segment(kAck, k.server_isn + 1 + 100'000'000, kIsn + 1, 509, 100)) == Reason::BadSeq);
  }
}

TEST_CASE("a retransmitted SYN or SYN-ACK counts its window in its end's scaled units, as the first did",
          "[tcp]") {
  // A SYN's window is never scaled (RFC 7323 2.2). The first SYN of each end is stored in the units
  // of the end's later windows; taken raw, a retransmission raised the end's largest window 2^7-fold
  // here, and with it how far the other end may send ahead of an acknowledgment and back from its
  // data: 8 MB where the connection had agreed on 64 kB.
  SECTION("the client's SYN again before the answer") {
    Conn c;
    c.timeout = track_first_packet(c.client, c.server, segment(kSyn, kIsn, 0, 64240, 0, 7));
    const uint32_t max_win = c.client.max_win;
    REQUIRE(c.from_client(segment(kSyn, kIsn, 0, 64240, 0, 7)) == Reason::State);
    CHECK(c.client.max_win == max_win);
    REQUIRE(c.from_server(segment(kSyn | kAck, kIsnServer, kIsn + 1, 65160, 0, 7)) == Reason::State);
    REQUIRE(c.from_client(segment(kAck, kIsn + 1, kIsnServer + 1, 502)) == Reason::State);
    CHECK(c.from_server(segment(kAck, kIsnServer + 1 + 1'000'000, kIsn + 1, 509, 100)) == Reason::BadSeq);
  }
  SECTION("the server's SYN-ACK again") {
    Conn c = established();
    const uint32_t max_win = c.server.max_win;
    REQUIRE(c.from_server(segment(kSyn | kAck, kIsnServer, kIsn + 1, 65160, 0, 7)) == Reason::State);
    CHECK(c.server.max_win == max_win);
    for (uint32_t i = 0; i < 3; ++i)
      REQUIRE(c.from_client(segment(kAck, kIsn + 1 + i * 1000, kIsnServer + 1, 502, 1000)) == Reason::State);
    // Far more than the server's window (65160) behind the client's data: no retransmission.
    CHECK(c.from_client(segment(kAck, kIsn + 1 + 3000 - 1'000'000, kIsnServer + 1, 502, 100)) ==
          Reason::BadSeq);
  }
  SECTION("without scaling agreed, the window stays as sent") {
    Conn c = established(7, -1);
    const uint32_t max_win = c.server.max_win;
    REQUIRE(c.from_server(segment(kSyn | kAck, kIsnServer, kIsn + 1, 65160)) == Reason::State);
    CHECK(c.server.max_win == max_win);
    REQUIRE(c.from_client(segment(kSyn, kIsn, 0, 65535, 0, 7)) == Reason::State);
    CHECK(c.client.max_win == 65535);
  }
}

TEST_CASE("RST must match the expected sequence number exactly", "[tcp]") {
  SECTION("blind reset guess is dropped") {
    Conn c = established();
    CHECK(c.from_server(segment(kRst, kIsnServer + 1 + 30000, 0, 0)) == Reason::BadSeq);
    CHECK(c.server.state == static_cast<uint8_t>(TcpState::Established));
  }
  SECTION("exact reset closes both ends") {
    Conn c = established();
    CHECK(c.from_server(segment(kRst | kAck, kIsnServer + 1, kIsn + 1, 0)) == Reason::State);
    CHECK(c.client.state == static_cast<uint8_t>(TcpState::TimeWait));
    CHECK(c.server.state == static_cast<uint8_t>(TcpState::TimeWait));
    CHECK(c.timeout == TimeoutClass::TcpClosed);
  }
}

TEST_CASE("a RST|ACK behind the data sent passes when it acknowledges exactly what the other end sent",
          "[tcp]") {
  // The client has sent 3000 bytes the server has not acknowledged yet, then resets from the
  // first of them (a stack that resets from the oldest unacknowledged byte). pf_tcp_track_full
  // takes such a reset anywhere from a window back to one past the data sent, if its ACK is
  // exactly the other end's next byte; this tracker asks for that ACK as sent (pf would also take
  // a RST|ACK with an ACK of 0 anywhere in that range).
  struct Case {
    const char* name;
    uint8_t flags;
    int64_t seq_from_end;  // the reset's sequence number, from the end of the client's data
    int64_t ack_offset;    // from the server's next byte; INT64_MIN for 0
    Reason reason;
  };
  constexpr int64_t kZero = INT64_MIN;
  const Case cases[] = {
      {"from the first unacknowledged byte, exact ACK", kRst | kAck, -3000, 0, Reason::State},
      {"one past the data, exact ACK", kRst | kAck, 1, 0, Reason::State},
      {"from the first unacknowledged byte, ACK one off", kRst | kAck, -3000, 1, Reason::BadSeq},
      {"from the first unacknowledged byte, ACK one short", kRst | kAck, -3000, -1, Reason::BadSeq},
      {"from the first unacknowledged byte, ACK 0", kRst | kAck, -3000, kZero, Reason::BadSeq},
      {"from the first unacknowledged byte, no ACK", kRst, -3000, 0, Reason::BadSeq},
      {"two past the data, exact ACK", kRst | kAck, 2, 0, Reason::BadSeq},
      {"more than a window back, exact ACK", kRst | kAck, -70'000, 0, Reason::BadSeq},
  };
  for (const Case& k : cases) {
    INFO(k.name);
    Conn c = established();
    for (uint32_t i = 0; i < 3; ++i)
      REQUIRE(c.from_client(segment(kAck, kIsn + 1 + i * 1000, kIsnServer + 1, 502, 1000)) == Reason::State);
    const uint32_t end = kIsn + 1 + 3000;
    REQUIRE(c.client.seqlo == end);
    const uint32_t ack = k.ack_offset == kZero
                             ? 0
                             : static_cast<uint32_t>(c.server.seqlo + static_cast<uint32_t>(k.ack_offset));
    const PeerTracking client = c.client;
    const PeerTracking server = c.server;
    CHECK(c.from_client(segment(k.flags, end + static_cast<uint32_t>(k.seq_from_end), ack, 0)) == k.reason);
    if (k.reason == Reason::State) {
      CHECK(c.client.state == static_cast<uint8_t>(TcpState::TimeWait));
      CHECK(c.server.state == static_cast<uint8_t>(TcpState::TimeWait));
      CHECK(c.timeout == TimeoutClass::TcpClosed);
    } else {
      CHECK(c.client == client);
      CHECK(c.server == server);
    }
  }
}

TEST_CASE("FIN exchange walks closing, fin-wait and closed timeouts", "[tcp]") {
  Conn c = established();
  CHECK(c.from_client(segment(kFin | kAck, kIsn + 1, kIsnServer + 1, 502)) == Reason::State);
  CHECK(c.client.state == static_cast<uint8_t>(TcpState::Closing));
  CHECK(c.timeout == TimeoutClass::TcpClosing);
  CHECK(c.from_server(segment(kFin | kAck, kIsnServer + 1, kIsn + 2, 509)) == Reason::State);
  CHECK(c.client.state == static_cast<uint8_t>(TcpState::FinWait2));
  CHECK(c.timeout == TimeoutClass::TcpFinWait);
  CHECK(c.from_client(segment(kAck, kIsn + 2, kIsnServer + 2, 502)) == Reason::State);
  CHECK(c.server.state == static_cast<uint8_t>(TcpState::FinWait2));
  CHECK(c.timeout == TimeoutClass::TcpClosed);
  CHECK(tcp_state_reusable(c.client, c.server));
}

TEST_CASE("protocol state changes are reported, plain data is not", "[tcp]") {
  Conn c = established();
  TrackResult data = track_packet(c.client, c.server, segment(kAck, kIsn + 1, kIsnServer + 1, 502, 100),
                                  TimeoutClass::TcpEstablished);
  CHECK(data.reason == Reason::State);
  CHECK_FALSE(data.protocol_state_changed);
  TrackResult fin = track_packet(c.client, c.server, segment(kFin | kAck, kIsn + 101, kIsnServer + 1, 502),
                                 TimeoutClass::TcpEstablished);
  CHECK(fin.protocol_state_changed);
}

TEST_CASE("sequence numbers wrap around 2^32", "[tcp]") {
  Conn c;
  const uint32_t isn = 0xffffff00u;
  c.timeout = track_first_packet(c.client, c.server, segment(kSyn, isn, 0, 65535));
  REQUIRE(c.from_server(segment(kSyn | kAck, 77, isn + 1, 65535)) == Reason::State);
  REQUIRE(c.from_client(segment(kAck, isn + 1, 78, 65535)) == Reason::State);
  CHECK(c.from_client(segment(kAck, isn + 1, 78, 65535, 1000)) == Reason::State);  // crosses zero
  CHECK(c.from_client(segment(kAck, isn + 1001, 78, 65535, 1000)) == Reason::State);
  CHECK(c.client.seqlo == static_cast<uint32_t>(isn + 2001));
}

TEST_CASE("adoption re-anchors a state learned from the peer", "[tcp]") {
  // The peer's record lags: it knows the handshake, not the 50 MB sent since.
  Conn c = established();
  PeerTracking client = c.client;
  PeerTracking server = c.server;
  const uint32_t far = kIsn + 1 + 50'000'000;
  PeerTracking strict_client = client, strict_server = server;
  CHECK(track_packet(strict_client, strict_server, segment(kAck, far, kIsnServer + 1, 502, 1000),
                     TimeoutClass::TcpEstablished)
            .reason == Reason::BadSeq);
  TrackResult adopted = adopt_packet(client, server, segment(kAck, far, kIsnServer + 1, 502, 1000),
                                     TimeoutClass::TcpEstablished);
  CHECK(adopted.reason == Reason::State);
  // From here on strict tracking holds with the new anchors.
  CHECK(track_packet(server, client, segment(kAck, kIsnServer + 1, far + 1000, 509),
                     TimeoutClass::TcpEstablished)
            .reason == Reason::State);
  CHECK(track_packet(client, server, segment(kAck, far + 1000, kIsnServer + 1, 502, 1000),
                     TimeoutClass::TcpEstablished)
            .reason == Reason::State);
  CHECK(track_packet(client, server, segment(kAck, far + 90'000'000, kIsnServer + 1, 502, 10),
                     TimeoutClass::TcpEstablished)
            .reason == Reason::BadSeq);
}

TEST_CASE("adoption counts a retransmitted SYN's or SYN-ACK's window in its end's scaled units", "[tcp]") {
  // As track_packet() does: a SYN's window is never scaled (RFC 7323 2.2). Taken raw, the first
  // packet seen here of a state learned from the peer, when it was a retransmitted SYN or SYN-ACK,
  // let the other end send 2^7 times the window agreed.
  SECTION("the client's SYN again, the peer having sent the SYN's insert") {
    Conn c;
    c.timeout = track_first_packet(c.client, c.server, segment(kSyn, kIsn, 0, 64240, 0, 7));
    const uint32_t max_win = c.client.max_win;
    REQUIRE(adopt_packet(c.client, c.server, segment(kSyn, kIsn, 0, 64240, 0, 7), c.timeout).reason ==
            Reason::State);
    CHECK(c.client.max_win == max_win);
    REQUIRE(c.from_server(segment(kSyn | kAck, kIsnServer, kIsn + 1, 65160, 0, 7)) == Reason::State);
    REQUIRE(c.from_client(segment(kAck, kIsn + 1, kIsnServer + 1, 502)) == Reason::State);
    CHECK(c.from_server(segment(kAck, kIsnServer + 1 + 1'000'000, kIsn + 1, 509, 100)) == Reason::BadSeq);
  }
  SECTION("the server's SYN-ACK again, the peer having sent the established state") {
    Conn c = established();
    const uint32_t max_win = c.server.max_win;
    REQUIRE(
        adopt_packet(c.server, c.client, segment(kSyn | kAck, kIsnServer, kIsn + 1, 65160, 0, 7), c.timeout)
            .reason == Reason::State);
    CHECK(c.server.max_win == max_win);
    CHECK(c.from_client(segment(kAck, kIsn + 1 + 1'000'000, kIsnServer + 1, 502, 100)) == Reason::BadSeq);
  }
}

TEST_CASE("adoption refuses a SYN on an established state", "[tcp]") {
  Conn c = established();
  CHECK(adopt_packet(c.client, c.server, segment(kSyn, 123, 0, 1000), TimeoutClass::TcpEstablished).reason ==
        Reason::StateMismatch);
}

TEST_CASE("UDP goes from first to single to multiple", "[udp]") {
  PacketView p;
  p.proto = ipproto::kUdp;
  PeerTracking a, b;
  CHECK(track_first_packet(a, b, p) == TimeoutClass::UdpFirst);
  CHECK(track_packet(a, b, p, TimeoutClass::UdpFirst).timeout == TimeoutClass::UdpSingle);
  // As pf's: the answer makes the asker Multiple, the answerer Single (pfctl's MULTIPLE:SINGLE),
  // and the state stays on udp.single until the asker sends again.
  const TrackResult reply = track_packet(b, a, p, TimeoutClass::UdpSingle);
  CHECK(reply.timeout == TimeoutClass::UdpSingle);
  CHECK(reply.protocol_state_changed);
  CHECK(a.state == static_cast<uint8_t>(FlowState::Multiple));
  CHECK(b.state == static_cast<uint8_t>(FlowState::Single));
  CHECK(track_packet(b, a, p, TimeoutClass::UdpSingle).timeout == TimeoutClass::UdpSingle);
  const TrackResult again = track_packet(a, b, p, TimeoutClass::UdpSingle);
  CHECK(again.timeout == TimeoutClass::UdpMultiple);
  CHECK(again.protocol_state_changed);
  CHECK(track_packet(b, a, p, TimeoutClass::UdpMultiple).timeout == TimeoutClass::UdpMultiple);
}

TEST_CASE("ICMP query state: any packet after the first uses the error-reply timeout, as pf's", "[icmp]") {
  PacketView p;
  p.proto = ipproto::kIcmp;
  SECTION("answered") {
    PeerTracking a, b;
    CHECK(track_first_packet(a, b, p) == TimeoutClass::IcmpFirst);
    CHECK(track_packet(b, a, p, TimeoutClass::IcmpFirst).timeout == TimeoutClass::IcmpError);
  }
  SECTION("asked again, never answered") {
    PeerTracking a, b;
    CHECK(track_first_packet(a, b, p) == TimeoutClass::IcmpFirst);
    CHECK(track_packet(a, b, p, TimeoutClass::IcmpFirst).timeout == TimeoutClass::IcmpError);
    CHECK(track_packet(a, b, p, TimeoutClass::IcmpError).timeout == TimeoutClass::IcmpError);
  }
}

TEST_CASE("sloppy tracking: flags move the states from either side, sequence numbers are not checked",
          "[tcp][sloppy]") {
  auto sloppy = [](PeerTracking& s, PeerTracking& d, const PacketView& p) {
    return track_sloppy(s, d, p, TimeoutClass::TcpFirst);
  };
  auto state = [](const PeerTracking& p) { return static_cast<TcpState>(p.state); };

  SECTION("both halves seen: the handshake establishes, a close walks to closed") {
    PeerTracking client, server;
    track_first_packet(client, server, segment(kSyn, kIsn, 0, 64240));
    TrackResult r = sloppy(server, client, segment(kSyn | kAck, kIsnServer, kIsn + 1, 65160));
    CHECK(r.reason == Reason::State);
    CHECK(r.protocol_state_changed);
    CHECK(state(client) == TcpState::Established);
    CHECK(state(server) == TcpState::SynSent);
    r = sloppy(client, server, segment(kAck, kIsn + 1, kIsnServer + 1, 502));
    CHECK(state(server) == TcpState::Established);
    CHECK(r.timeout == TimeoutClass::TcpEstablished);
    // Data far outside any window: the full tracker drops it, the sloppy one does not look.
    r = sloppy(server, client, segment(kAck, kIsnServer + 50'000'000, kIsn + 1, 100, 1000));
    CHECK(r.reason == Reason::State);
    CHECK_FALSE(r.protocol_state_changed);
    r = sloppy(client, server, segment(kFin | kAck, kIsn + 1, kIsnServer + 1, 502));
    CHECK(state(client) == TcpState::Closing);
    r = sloppy(server, client, segment(kFin | kAck, kIsnServer + 1, kIsn + 2, 502));
    CHECK(state(client) == TcpState::FinWait2);
    CHECK(state(server) == TcpState::Closing);
    r = sloppy(client, server, segment(kAck, kIsn + 2, kIsnServer + 2, 502));
    CHECK(state(server) == TcpState::FinWait2);
    CHECK(r.timeout == TimeoutClass::TcpClosed);
  }
  SECTION("one half seen (asymmetric routing): the initiator's ACK after its SYN establishes both") {
    PeerTracking client, server;
    track_first_packet(client, server, segment(kSyn, kIsn, 0, 64240));
    const TrackResult r = sloppy(client, server, segment(kAck, kIsn + 1, kIsnServer + 1, 502));
    CHECK(r.protocol_state_changed);
    CHECK(state(client) == TcpState::Established);
    CHECK(state(server) == TcpState::Established);
    CHECK(r.timeout == TimeoutClass::TcpEstablished);
    // Its FIN, with the other end's never seen: that end counts as closing too, and the next ACK
    // as done (pf's order of the checks).
    sloppy(client, server, segment(kFin | kAck, kIsn + 1, kIsnServer + 1, 502));
    CHECK(state(client) == TcpState::Closing);
    CHECK(state(server) == TcpState::Closing);
    sloppy(client, server, segment(kAck, kIsn + 2, kIsnServer + 2, 502));
    CHECK(state(server) == TcpState::FinWait2);
  }
  SECTION("a reset from either side ends both") {
    PeerTracking client, server;
    track_first_packet(client, server, segment(kSyn, kIsn, 0, 64240));
    const TrackResult r = sloppy(server, client, segment(kRst, 12345, 0, 0));
    CHECK(r.reason == Reason::State);
    CHECK(state(client) == TcpState::TimeWait);
    CHECK(state(server) == TcpState::TimeWait);
    CHECK(r.timeout == TimeoutClass::TcpClosed);
  }
}
