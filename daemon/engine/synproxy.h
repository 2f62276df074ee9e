// `synproxy state`, as pf's: this node answers a TCP client's SYN itself and opens the connection
// to the server only once the client has completed that handshake, so that a flood of SYNs from
// forged sources never reaches the server. Once the server has answered, the two handshakes are
// spliced: each end keeps the initial sequence number it chose, the node shifts each end's numbers
// into the other's by the offsets of `modulate state` (Engine::track_modulated), and the window
// scale, SACK and timestamp options the client offered are not passed on (pf does the same: its
// SYN-ACK carries an MSS option only). Each step reaches the sync peer in the state's records
// (StateRecord::proxy, proxy_isn), so that a node taking over finishes a handshake its peer began.
//
// The segments the node sends in the two ends' names are made by segment.h's build_segment.
#pragma once

#include <string_view>

#include "daemon/engine/segment.h"
#include "daemon/engine/state.h"

namespace pairwall::engine {

// For people: "awaiting initiator", "awaiting responder", "spliced"; "" for None.
std::string_view proxy_name(Proxy proxy);

}  // namespace pairwall::engine
