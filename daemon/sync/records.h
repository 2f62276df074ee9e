// engine::StateRecord <-> the wire messages of proto/sync.proto. Decoding validates every field
// (the peer is authenticated, but a peer running other code must not put out-of-range values into
// the state table).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/engine/state.h"
#include "proto/sync.pb.h"

namespace pairwall::sync {

// An address as 4 or 16 network-order bytes, and back: false when `in` is not the family's size.
void encode_address(engine::Family f, const engine::IpAddress& a, std::string* out);
bool decode_address(engine::Family f, const std::string& in, engine::IpAddress& a);

// An if-bound state's interfaces travel by name (pfsync's ifname): `interfaces` names this
// node's numbers on the way out and numbers the peer's names on the way in. Without it, a record
// of a bound state is not encoded bound, and one decoded is refused.
void encode_insert(const engine::StateRecord& r, uint32_t bulk, wire::Insert* out,
                   const engine::InterfaceRegistry* interfaces = nullptr);
void encode_update(const engine::StateRecord& r, wire::Update* out);
void encode_delete(const engine::StateId& id, wire::Delete* out);

// False when a field is out of range; `out` is then unspecified.
bool decode_insert(const wire::Insert& in, engine::StateRecord& out,
                   engine::InterfaceRegistry* interfaces = nullptr);

// The interfaces a node's registry takes from its peer's records at most, its own included.
inline constexpr std::size_t kMaxInterfaceNames = 16384;
bool decode_update(const wire::Update& in, engine::StateRecord& out);
bool decode_delete(const wire::Delete& in, engine::StateRecord& out);

// Whether a record's per-side states, timeout class and synproxy step can belong to a state of IP
// protocol `proto`: TcpState for TCP, FlowState otherwise, a class of the protocol's own
// timeouts. decode_insert() checks it; an update names no protocol, so its store checks it
// against the state the update names.
bool fits_protocol(uint8_t proto, const engine::StateRecord& r);

}  // namespace pairwall::sync
