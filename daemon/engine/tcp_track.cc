#include "daemon/engine/tcp_track.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

namespace pairwall::engine {
namespace {

using tcpflag::kAck;
using tcpflag::kFin;
using tcpflag::kRst;
using tcpflag::kSyn;

constexpr uint32_t kMaxWin = 65535;  // TCP_MAXWIN
// How far an ACK may lag or lead the data we saw: one unscaled window plus a segment of fudge,
// as pf's MAXACKWINDOW.
constexpr int64_t kMaxAckWindow = 0xffff + 1500;

void raise_state(PeerTracking& p, TcpState s, bool& changed) {
  if (p.state < static_cast<uint8_t>(s)) {
    p.state = static_cast<uint8_t>(s);
    changed = true;
  }
}
bool at_least(const PeerTracking& p, TcpState s) {
  return p.state >= static_cast<uint8_t>(s);
}

// The window scale a SYN offers, in PeerTracking encoding (0 when absent).
uint8_t offered_wscale(const PacketView& packet) {
  if (!(packet.tcp.flags & kSyn) || !packet.tcp.has_window_scale) return 0;
  return PeerTracking::kScaleOffered | std::min<uint8_t>(packet.tcp.window_scale, 14);
}

uint32_t segment_length(const PacketView& packet) {
  return packet.payload_length;
}

}  // namespace

TimeoutClass tcp_timeout_class(const PeerTracking& a, const PeerTracking& b) noexcept {
  if (at_least(a, TcpState::FinWait2) && at_least(b, TcpState::FinWait2)) return TimeoutClass::TcpClosed;
  if (at_least(a, TcpState::Closing) && at_least(b, TcpState::Closing)) return TimeoutClass::TcpFinWait;
  if (!at_least(a, TcpState::Established) || !at_least(b, TcpState::Established)) {
    return TimeoutClass::TcpOpening;
  }
  if (at_least(a, TcpState::Closing) || at_least(b, TcpState::Closing)) return TimeoutClass::TcpClosing;
  return TimeoutClass::TcpEstablished;
}

bool tcp_state_reusable(const PeerTracking& a, const PeerTracking& b) noexcept {
  return at_least(a, TcpState::FinWait2) && at_least(b, TcpState::FinWait2);
}

bool tcp_state_established(const PeerTracking& a, const PeerTracking& b) noexcept {
  return at_least(a, TcpState::Established) && at_least(b, TcpState::Established);
}

TimeoutClass track_first_packet(PeerTracking& src, PeerTracking& dst, const PacketView& packet) noexcept {
  src = PeerTracking{};
  dst = PeerTracking{};
  if (packet.is_tcp()) {
    const TcpInfo& th = packet.tcp;
    src.seqlo = th.seq;
    src.seqhi = th.seq + segment_length(packet) + 1;
    if (th.flags & kSyn) {
      ++src.seqhi;
      src.wscale = offered_wscale(packet);
    }
    src.max_win = std::max<uint32_t>(th.window, 1);
    if (src.wscale & PeerTracking::kScaleMask) {
      // A SYN's window is never scaled (RFC 7323 2.2); store it in scaled units like later ones.
      const uint32_t shift = src.wscale & PeerTracking::kScaleMask;
      src.max_win = (src.max_win + (1u << shift) - 1) >> shift;
    }
    if (th.flags & kFin) ++src.seqhi;
    if (th.has_mss) src.mss = th.mss;
    dst.seqhi = 1;
    dst.max_win = 1;
    src.state = static_cast<uint8_t>(TcpState::SynSent);
    dst.state = static_cast<uint8_t>(TcpState::Closed);
    return TimeoutClass::TcpFirst;
  }
  src.state = static_cast<uint8_t>(FlowState::Single);
  dst.state = static_cast<uint8_t>(FlowState::NoTraffic);
  if (packet.is_udp()) return TimeoutClass::UdpFirst;
  if (packet.is_icmp()) return TimeoutClass::IcmpFirst;
  return TimeoutClass::OtherFirst;
}

namespace {

TrackResult track_tcp(PeerTracking& src, PeerTracking& dst, const PacketView& packet,
                      TimeoutClass current) noexcept {
  const TcpInfo& th = packet.tcp;
  TrackResult result;
  result.timeout = current;
  uint32_t win = th.window;
  uint32_t sws = 0;
  uint32_t dws = 0;
  if (src.wscale && dst.wscale && !(th.flags & kSyn)) {
    sws = src.wscale & PeerTracking::kScaleMask;
    dws = dst.wscale & PeerTracking::kScaleMask;
  }

  uint32_t seq = th.seq;
  uint32_t ack = th.ack;
  uint32_t end = 0;
  uint32_t data_end = 0;
  // An end's first packet sets up its half (and the window scale of both) before the window test:
  // one that then fails it must leave them as they were. pf keeps them, so that one forged
  // SYN-ACK with a wrong ack anchors the responder's half where the real one is out of window.
  // Copied only then: every later packet of the connection pays nothing for it.
  std::optional<std::pair<PeerTracking, PeerTracking>> before;
  if (src.seqlo == 0) {
    before.emplace(src, dst);
    // First packet from this end.
    end = seq + segment_length(packet);
    if (th.flags & kSyn) {
      ++end;
      if (dst.wscale & PeerTracking::kScaleOffered) {
        src.wscale = offered_wscale(packet);
        if (src.wscale & PeerTracking::kScaleOffered) {
          sws = src.wscale & PeerTracking::kScaleMask;
          win = (win + (1u << sws) - 1) >> sws;
          dws = dst.wscale & PeerTracking::kScaleMask;
        } else {
          // The other end offered scaling and this one declined: neither scales (RFC 7323 1.3).
          dst.max_win = std::min(kMaxWin, dst.max_win << (dst.wscale & PeerTracking::kScaleMask));
          dst.wscale = 0;
        }
      }
      if (th.has_mss) src.mss = th.mss;
    }
    data_end = end;
    if (th.flags & kFin) ++end;
    src.seqlo = seq;
    raise_state(src, TcpState::SynSent, result.protocol_state_changed);
    const uint32_t reach = std::max<uint32_t>(1, dst.max_win << dws);
    if (src.seqhi == 1 || seq_geq(end + reach, src.seqhi)) src.seqhi = end + reach;
    if (win > src.max_win) src.max_win = win;
  } else {
    end = seq + segment_length(packet);
    if (th.flags & kSyn) {
      ++end;
      // A SYN's window is never scaled (RFC 7323 2.2): a retransmitted SYN or SYN-ACK counts it in
      // the units of its end's later windows, as its first did. Taken raw (pf_tcp_track_full's), it
      // raised the end's largest window, and how far the other end may send, 2^shift-fold.
      if (src.wscale & PeerTracking::kScaleOffered) {
        const uint32_t shift = src.wscale & PeerTracking::kScaleMask;
        win = (win + (1u << shift) - 1) >> shift;
        if (dst.wscale & PeerTracking::kScaleOffered) {
          sws = shift;
          dws = dst.wscale & PeerTracking::kScaleMask;
        }
      }
    }
    data_end = end;
    if (th.flags & kFin) ++end;
  }

  // The stand-ins for a missing ACK only get the segment past the ack-skew test; they say nothing
  // of how far the other end may send, so they do not slide its bound. pf_tcp_track_full slides it
  // anyway: under a retransmitted SYN, the silent responder's bound became the SYN's window counted
  // from sequence number 0, some 2^31 off the responder's own numbers half of the time.
  bool acknowledges = true;
  if (!(th.flags & kAck)) {
    ack = dst.seqlo;  // no ACK: let it through the ack-skew test
    acknowledges = false;
  } else if ((ack == 0 && (th.flags & (kAck | kRst)) == (kAck | kRst)) ||
             dst.state < static_cast<uint8_t>(TcpState::SynSent)) {
    ack = dst.seqlo;  // stacks that send RST|ACK with ack 0, or an ACK before the peer spoke
    acknowledges = false;
  }

  if (seq == end) {
    // No data: loosen the sequence test for pure ACKs.
    seq = src.seqlo;
    data_end = end = seq;
  }

  const int64_t ackskew = static_cast<int32_t>(dst.seqlo - ack);
  const uint32_t orig_seq = th.seq;
  // RFC 5961 3.2: a reset needs an exact sequence number, or, as pf_tcp_track_full allows, one from
  // up to a window behind the data sent with an ACK of exactly the other end's next byte (stacks
  // that reset from their oldest unacknowledged byte). That ACK must be the one sent: pf's check
  // would also take the stand-in for an ACK of 0, and so any sequence number in the range.
  const bool rst_exact =
      !(th.flags & kRst) || orig_seq == src.seqlo || orig_seq == src.seqlo + 1 || orig_seq + 1 == src.seqlo ||
      ((th.flags & kAck) && th.ack == dst.seqlo && seq_geq(orig_seq, src.seqlo - (dst.max_win << dws)) &&
       seq_leq(orig_seq, src.seqlo + 1));

  if (seq_geq(src.seqhi, data_end) &&                    // last octet inside the other's window
      seq_geq(seq, src.seqlo - (dst.max_win << dws)) &&  // retransmit: at most one window back
      ackskew >= -kMaxAckWindow &&                       // acking at most one window forward
      ackskew <= (kMaxAckWindow << sws) &&               // acking at most one window back
      rst_exact) {
    if (src.max_win < win) src.max_win = win;
    if (seq_gt(end, src.seqlo)) src.seqlo = end;
    if (acknowledges && seq_geq(ack + (win << sws), dst.seqhi))
      dst.seqhi = ack + std::max<uint32_t>(win << sws, 1);

    if (th.flags & kSyn) raise_state(src, TcpState::SynSent, result.protocol_state_changed);
    if (th.flags & kFin) raise_state(src, TcpState::Closing, result.protocol_state_changed);
    if (th.flags & kAck) {
      if (dst.state == static_cast<uint8_t>(TcpState::SynSent)) {
        raise_state(dst, TcpState::Established, result.protocol_state_changed);
      } else if (dst.state == static_cast<uint8_t>(TcpState::Closing)) {
        raise_state(dst, TcpState::FinWait2, result.protocol_state_changed);
      }
    }
    if (th.flags & kRst) {
      raise_state(src, TcpState::TimeWait, result.protocol_state_changed);
      raise_state(dst, TcpState::TimeWait, result.protocol_state_changed);
    }
    result.timeout = tcp_timeout_class(src, dst);
    result.reason = Reason::State;
    return result;
  }

  if ((dst.state < static_cast<uint8_t>(TcpState::SynSent) || at_least(dst, TcpState::FinWait2) ||
       at_least(src, TcpState::FinWait2)) &&
      seq_geq(src.seqhi + kMaxAckWindow, data_end) && seq_geq(seq, src.seqlo - kMaxAckWindow)) {
    // pf's loose branch: SYNs shotgunned before the peer answers, and stragglers right after a
    // close. The expiry is not refreshed here, so a flood cannot keep the state alive.
    if (src.max_win < win) src.max_win = win;
    if (seq_gt(end, src.seqlo)) src.seqlo = end;
    if (acknowledges && seq_geq(ack + (win << sws), dst.seqhi))
      dst.seqhi = ack + std::max<uint32_t>(win << sws, 1);
    if (th.flags & kFin) raise_state(src, TcpState::Closing, result.protocol_state_changed);
    if (th.flags & kRst) {
      raise_state(src, TcpState::TimeWait, result.protocol_state_changed);
      raise_state(dst, TcpState::TimeWait, result.protocol_state_changed);
    }
    result.timeout = current;
    result.refresh = false;
    result.reason = Reason::State;
    return result;
  }

  if (before) {
    std::tie(src, dst) = *before;
  } else if (src.state == static_cast<uint8_t>(TcpState::SynSent) &&
             dst.state == static_cast<uint8_t>(TcpState::SynSent)) {
    // Neither end's SYN acknowledged yet, and this end's segment does not fit its half: a
    // simultaneous open gone wrong, or a SYN forged in its name that anchored the half first.
    // pf_tcp_track_full frees the half, so that the end's next segment (the retransmission of
    // its real SYN-ACK) sets it up afresh instead of failing until the state expires.
    src.seqlo = 0;
    src.seqhi = 1;
    src.max_win = 1;
  }
  result.reason = Reason::BadSeq;
  result.protocol_state_changed = false;
  return result;
}

TrackResult track_flow(PeerTracking& src, PeerTracking& dst, const PacketView& packet) noexcept {
  TrackResult result;
  result.reason = Reason::State;
  if (src.state < static_cast<uint8_t>(FlowState::Single))
    src.state = static_cast<uint8_t>(FlowState::Single);
  // pf_test_state_udp / _other: a packet makes its receiver, if it has sent, Multiple, and its
  // sender no more than Single. A query answered once is Multiple:Single and lives udp.single;
  // only the initiator's next packet after an answer makes both Multiple (udp.multiple).
  if (dst.state == static_cast<uint8_t>(FlowState::Single)) {
    dst.state = static_cast<uint8_t>(FlowState::Multiple);
    result.protocol_state_changed = true;
  }
  const bool both = src.state == static_cast<uint8_t>(FlowState::Multiple) &&
                    dst.state == static_cast<uint8_t>(FlowState::Multiple);
  if (packet.is_udp()) {
    result.timeout = both ? TimeoutClass::UdpMultiple : TimeoutClass::UdpSingle;
  } else if (packet.is_icmp()) {
    // pf_test_state_icmp gives a query's state the short error-reply timeout on any packet after
    // its first, the reply or the request again: a host that never answers (a ping of a dead
    // address, a sweep) leaves its state for icmp.error after its last request, not icmp.first.
    result.timeout = TimeoutClass::IcmpError;
  } else {
    result.timeout = both ? TimeoutClass::OtherMultiple : TimeoutClass::OtherSingle;
  }
  return result;
}

}  // namespace

TrackResult track_packet(PeerTracking& sender, PeerTracking& receiver, const PacketView& packet,
                         TimeoutClass current) noexcept {
  if (packet.is_tcp()) return track_tcp(sender, receiver, packet, current);
  return track_flow(sender, receiver, packet);
}

TrackResult track_sloppy(PeerTracking& sender, PeerTracking& receiver, const PacketView& packet,
                         TimeoutClass current) noexcept {
  if (!packet.is_tcp()) return track_packet(sender, receiver, packet, current);
  const uint8_t flags = packet.tcp.flags;
  const auto is = [](const PeerTracking& p, TcpState s) { return p.state == static_cast<uint8_t>(s); };
  TrackResult result;
  bool changed = false;
  if (flags & kSyn) raise_state(sender, TcpState::SynSent, changed);
  if (flags & kFin) raise_state(sender, TcpState::Closing, changed);
  if (flags & kAck) {
    if (is(receiver, TcpState::SynSent)) {
      raise_state(receiver, TcpState::Established, changed);
    } else if (is(receiver, TcpState::Closing)) {
      raise_state(receiver, TcpState::FinWait2, changed);
    } else if (is(sender, TcpState::SynSent) && !at_least(receiver, TcpState::SynSent)) {
      // Only the initiator's half is seen: its ACK after the SYN establishes the connection.
      raise_state(sender, TcpState::Established, changed);
      raise_state(receiver, TcpState::Established, changed);
    } else if (is(sender, TcpState::Closing) && is(receiver, TcpState::Established) && receiver.seqlo == 0) {
      // The close of a half connection, whose other end's FIN is never seen.
      raise_state(receiver, TcpState::Closing, changed);
    }
  }
  if (flags & kRst) {
    raise_state(sender, TcpState::TimeWait, changed);
    raise_state(receiver, TcpState::TimeWait, changed);
  }
  result.protocol_state_changed = changed;
  result.timeout = tcp_timeout_class(sender, receiver);
  return result;
}

TrackResult adopt_packet(PeerTracking& sender, PeerTracking& receiver, const PacketView& packet,
                         TimeoutClass current) noexcept {
  if (!packet.is_tcp()) return track_flow(sender, receiver, packet);
  const TcpInfo& th = packet.tcp;
  TrackResult result;
  result.timeout = current;
  const bool established =
      at_least(sender, TcpState::Established) && at_least(receiver, TcpState::Established);
  if ((th.flags & kSyn) && !(th.flags & kAck) && established) {
    result.reason = Reason::StateMismatch;
    return result;
  }
  // The SYN of an end the record has not heard from (the responder's SYN-ACK): nothing from that
  // end can lag, so it opens its half as pf's first packet from an end does, taking the window
  // scale it answers with and establishing the initiator. Re-anchored instead, the connection
  // would go on unscaled and its responder's half would never leave Closed (tcp.opening).
  if ((th.flags & kSyn) && sender.seqlo == 0) return track_tcp(sender, receiver, packet, current);
  const uint32_t sws = (sender.wscale && receiver.wscale) ? sender.wscale & PeerTracking::kScaleMask : 0;
  uint32_t window = th.window;
  if ((th.flags & kSyn) && (sender.wscale & PeerTracking::kScaleOffered)) {
    // A retransmitted SYN or SYN-ACK: its window is never scaled, count it as track_tcp does.
    const uint32_t shift = sender.wscale & PeerTracking::kScaleMask;
    window = (window + (1u << shift) - 1) >> shift;
  }
  uint32_t end = th.seq + segment_length(packet);
  if (th.flags & (kSyn | kFin)) ++end;
  sender.seqlo = end;
  sender.max_win = std::max(sender.max_win, window);
  const uint32_t rcv_dws =
      (sender.wscale && receiver.wscale) ? receiver.wscale & PeerTracking::kScaleMask : 0;
  sender.seqhi = end + std::max<uint32_t>(1, receiver.max_win << rcv_dws);
  if (th.flags & kAck) {
    receiver.seqlo = th.ack;
    receiver.seqhi = th.ack + std::max<uint32_t>(window << sws, 1);
  }
  // The peer's record may predate the handshake's end or the close; track flags as the strict
  // path would, this end having sent at least its SYN (pf's first packet from an end). An end
  // left below Established would keep the state in tcp.opening: the one the record never heard
  // from for good, the other until this end sends again.
  raise_state(sender, TcpState::SynSent, result.protocol_state_changed);
  if (th.flags & kFin) raise_state(sender, TcpState::Closing, result.protocol_state_changed);
  if (th.flags & kAck) {
    if (receiver.state == static_cast<uint8_t>(TcpState::SynSent)) {
      raise_state(receiver, TcpState::Established, result.protocol_state_changed);
    } else if (receiver.state == static_cast<uint8_t>(TcpState::Closing)) {
      raise_state(receiver, TcpState::FinWait2, result.protocol_state_changed);
    }
  }
  if (th.flags & kRst) {
    raise_state(sender, TcpState::TimeWait, result.protocol_state_changed);
    raise_state(receiver, TcpState::TimeWait, result.protocol_state_changed);
  }
  result.timeout = tcp_timeout_class(sender, receiver);
  result.reason = Reason::State;
  return result;
}

}  // namespace pairwall::engine
