// What a state is: one entry per connection, covering both directions and both passes of a
// forwarded packet. An entry carries two keys — as seen on the initiator's side ("stack") and on
// the far side ("wire") — which differ only when the state translates addresses (NAT), and is
// indexed by both, so a translated packet costs one lookup like any other.
#pragma once

#include <array>
#include <compare>
#include <cstdint>

#include "daemon/engine/address.h"
#include "daemon/engine/interfaces.h"
#include "daemon/engine/time.h"
#include "daemon/engine/timeouts.h"

namespace pairwall::engine {

// (family, protocol, two endpoints). ICMP messages other than errors are keyed by identifier and
// type as ports (PacketView::src_port).
// Endpoint 0 is the side that sent the first packet.
struct StateKey {
  IpAddress addr[2];
  uint16_t port[2] = {0, 0};
  Family family = Family::V4;
  uint8_t proto = 0;
  // The link of a flow that never leaves it (this node's own IPv6 traffic with a link-local address
  // or a link-scoped group): that interface, kNoIface for every other flow. fe80::1 on one link is
  // not fe80::1 on another; pf embeds the scope in the address (KAME's way), here the key holds it.
  IfaceId link = kNoIface;

  StateKey reversed() const {
    StateKey k = *this;
    std::swap(k.addr[0], k.addr[1]);
    std::swap(k.port[0], k.port[1]);
    return k;
  }
  friend bool operator==(const StateKey&, const StateKey&) = default;
};

// Globally unique: the node that created the state and that node's counter. Lets both nodes
// create states concurrently without coordination (pfsync's creatorid + id). Packed to 12 bytes,
// so that the state entry's line that holds it has room for the four that would pad it.
struct [[gnu::packed, gnu::aligned(4)]] StateId {
  uint32_t creator = 0;
  uint64_t counter = 0;
  friend auto operator<=>(const StateId&, const StateId&) = default;
};
static_assert(sizeof(StateId) == 12);

// Per-side TCP connection state, pf's TCPS_* progression.
enum class TcpState : uint8_t {
  Closed,
  Listen,
  SynSent,
  SynReceived,
  Established,
  CloseWait,
  FinWait1,
  Closing,
  LastAck,
  FinWait2,
  TimeWait,
};

// Where a `synproxy state` is in the handshakes its node completes for the two ends (synproxy.h).
// The phases only move forward.
enum class Proxy : uint8_t {
  None,       // not a synproxy state
  Initiator,  // answered the initiator's SYN, waits for its ACK (pf's PF_TCPS_PROXY_SRC)
  Responder,  // sent the responder a SYN, waits for its SYN-ACK (PF_TCPS_PROXY_DST)
  Spliced,    // both ends established: shifted into each other's numbers, as modulate state
};

// Per-side state of a connectionless flow (pf's PFUDPS_* / PFOTHERS_*).
enum class FlowState : uint8_t { NoTraffic, Single, Multiple };

// One end of a connection as tracked (van Rooij, "Real Stateful TCP Packet Filtering in IP
// Filter"; pf_tcp_track_full). seqlo..seqhi is the window of sequence numbers this end may send;
// max_win its largest advertised window as on the wire (unscaled, as pf keeps it).
struct PeerTracking {
  uint32_t seqlo = 0;    // highest sequence number sent + 1 (next expected)
  uint32_t seqhi = 0;    // highest sequence number the other end allows this end to send
  uint32_t max_win = 0;  // largest window this end advertised, unscaled
  uint8_t wscale = 0;    // kScaleOffered | shift when the end sent a window scale option
  uint8_t state = 0;     // TcpState or FlowState, by protocol
  uint16_t mss = 0;

  static constexpr uint8_t kScaleOffered = 0x80;  // pf's PF_WSCALE_FLAG
  static constexpr uint8_t kScaleMask = 0x0f;     // shift; RFC 7323 2.3 caps it at 14
  friend bool operator==(const PeerTracking&, const PeerTracking&) = default;
};

// `scrub reassemble tcp` (pf's pf_state_scrub) for one end of a TCP connection: the highest TTL
// (hop limit) its segments arrived with, which each later one leaves with, so that none can be
// aimed to expire between this node and the other end (past what a monitor behind this node
// sees); and what its timestamps gain on the way through (RFC 7323 TSval; 0 where they pass as
// they are), so that they tell the far side nothing of the host's uptime or of which hosts share a
// translated address.
// Packed, as the state entry keeps it (TimestampWatch).
struct [[gnu::packed]] TcpScrub {
  uint32_t ts_mod = 0;
  uint8_t ttl = 0;
  friend bool operator==(const TcpScrub&, const TcpScrub&) = default;
};
static_assert(sizeof(TcpScrub) == 5);

// A state change as the engine reports it to sync, and as sync applies a peer's to the local
// table. Carries everything needed to recreate the state on the other node.
struct StateRecord {
  enum class Kind : uint8_t { Insert, Update, Delete, Clear };  // Clear: every state

  Kind kind = Kind::Insert;
  StateId id;
  StateKey stack_key;  // initiator's side
  StateKey wire_key;   // far side; equal to stack_key without translation
  PeerTracking src;    // the initiator
  PeerTracking dst;
  TimeoutClass timeout = TimeoutClass::TcpFirst;
  Millis expires_in{0};  // remaining lifetime when the record was made (clocks differ per node)
  Millis age{0};         // how long the state had lived then (pfsync's creation); inserts only
  uint32_t rule = 0;     // the creating rule's number on the creator, informational
  uint8_t flags = 0;     // StateFlags
  // `modulate state`: what each end's sequence numbers gain on the way through ([0] the
  // initiator's), 0 for an end not (yet) modulated.
  std::array<uint32_t, 2> seqdiff{0, 0};
  // `synproxy state`: the handshakes' progress, and the initial sequence numbers the node chose
  // toward each end ([0] its SYN-ACK to the initiator, [1] its SYN to the responder; 0 not yet).
  Proxy proxy = Proxy::None;
  std::array<uint32_t, 2> proxy_isn{0, 0};
  // `scrub reassemble tcp` ([0] the initiator): whether the state normalizes its segments, and
  // how far. Inserts say whether; updates carry the ends' figures alone.
  bool scrub_tcp = false;
  std::array<TcpScrub, 2> scrub{};
  // The creating rule's index in its rule set (RuleSet::rule()) and that rule set's digest; 0: no
  // creating rule. Inserts only.
  uint64_t rules_digest = 0;
  uint32_t rule_index = 0;
  // Where rules_digest is given: the translation rules that rewrote the connection on its in and
  // out pass, as indexes of that rule set's RuleSet::translation_entry(); kNoTranslation for none.
  // Inserts only.
  static constexpr uint32_t kNoTranslation = UINT32_MAX;
  std::array<uint32_t, 2> translation_index{kNoTranslation, kNoTranslation};
  // `if-bound`: the interfaces the state is bound to (StateEntry::bound), this node's numbers;
  // the sync link carries their names. Inserts only.
  std::array<IfaceId, 2> bound{kNoIface, kNoIface};
};

namespace stateflag {
inline constexpr uint8_t kLog = 0x01;
inline constexpr uint8_t kTranslated = 0x02;        // stack_key != wire_key
inline constexpr uint8_t kFromPeer = 0x04;          // created by a sync peer
inline constexpr uint8_t kNoSync = 0x08;            // (no-sync), or a link's own flow: never sent to the peer
inline constexpr uint8_t kSourceConnection = 0x10;  // counted by its source node as a connection
inline constexpr uint8_t kSloppy = 0x20;            // its rule said (sloppy): TCP without windows
inline constexpr uint8_t kModulated = 0x40;         // `modulate state`: TCP sequence numbers shifted
inline constexpr uint8_t kAllowOpts = 0x80;         // every pass's rule said allow-opts: IP options pass
}  // namespace stateflag

}  // namespace pairwall::engine
