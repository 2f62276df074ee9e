// Connection tracking per protocol: TCP sequence windows (van Rooij's "Real Stateful TCP Packet
// Filtering in IP Filter", as pf implements it in pf_tcp_track_full), UDP single/multiple, ICMP
// and other protocols' pseudo-states. Pure functions over the two PeerTracking halves of a state.
#pragma once

#include "daemon/engine/packet.h"
#include "daemon/engine/reason.h"
#include "daemon/engine/state.h"
#include "daemon/engine/timeouts.h"

namespace pairwall::engine {

// Four bytes: GCC then builds the returned value in a register. As three bytes it stored them
// to the stack and read them back as one word, a store-forwarding stall on every tracked packet
// (pairwall-bench engine --only state --seconds 0.5 --runs 3, three alternating invocations:
// state_lookup_mpps at 1k states 7.62-7.67 -> 7.69-7.78, state_lookup_single_mpps 7.38-7.44
// -> 7.58-7.66).
struct alignas(4) TrackResult {
  Reason reason = Reason::State;        // State: pass; BadSeq / StateMismatch: drop
  bool protocol_state_changed = false;  // a TCP state moved: sync sends the update at once
  TimeoutClass timeout = TimeoutClass::TcpEstablished;
  bool refresh = true;  // the packet renews the state's life (not one of pf's loose branch)
};

// Sets up both halves for a new state created by `packet` (the initiator's first packet).
// Returns the initial timeout class.
TimeoutClass track_first_packet(PeerTracking& src, PeerTracking& dst, const PacketView& packet) noexcept;

// Tracks a packet on an existing state. `sender` is the half of the end that sent the packet,
// `receiver` the other. `current` is the state's timeout class before this packet.
TrackResult track_packet(PeerTracking& sender, PeerTracking& receiver, const PacketView& packet,
                         TimeoutClass current) noexcept;

// The first packet seen locally on a state learned from the peer: the windows the peer reported
// may lag the connection by up to one sync interval, so re-anchor them on this packet (as pf does
// for connections it picks up mid-stream) instead of judging it against stale numbers.
// Protocol sanity still applies: a SYN cannot revive an established state, and the SYN of an end
// the record has not heard from is tracked as by track_packet().
TrackResult adopt_packet(PeerTracking& sender, PeerTracking& receiver, const PacketView& packet,
                         TimeoutClass current) noexcept;

// pf's sloppy tracker (pf_tcp_track_sloppy), for states whose rule said (sloppy): TCP states move
// on the flags alone, from either side, and no sequence number is checked, so that a node that
// sees one direction of a connection (asymmetric routing across a pair) can still follow it: an
// ACK after the initiator's SYN with nothing seen from the other end makes both established. It
// makes blind insertion and teardown easier, which is why pf only does it when asked. Other
// protocols are tracked as by track_packet().
TrackResult track_sloppy(PeerTracking& sender, PeerTracking& receiver, const PacketView& packet,
                         TimeoutClass current) noexcept;

// Timeout class for the given TCP peer states (pf's table in pf_tcp_track_full).
TimeoutClass tcp_timeout_class(const PeerTracking& a, const PeerTracking& b) noexcept;

// True when a TCP SYN may replace this state: both ends are closing or closed (port reuse).
bool tcp_state_reusable(const PeerTracking& a, const PeerTracking& b) noexcept;

// True when both ends have completed the handshake (and may have gone on to close).
bool tcp_state_established(const PeerTracking& a, const PeerTracking& b) noexcept;

// Serial-number arithmetic on 32-bit sequence numbers (RFC 1982).
constexpr bool seq_lt(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) < 0;
}
constexpr bool seq_leq(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) <= 0;
}
constexpr bool seq_gt(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) > 0;
}
constexpr bool seq_geq(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) >= 0;
}

}  // namespace pairwall::engine
