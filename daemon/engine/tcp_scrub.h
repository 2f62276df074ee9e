// `scrub reassemble tcp`'s watch over a TCP connection's timestamps (RFC 7323), as pf's
// pf_normalize_tcp_stateful keeps it: PAWS, which an end applies to what it receives, applied
// here to both ends at once, and a bound on how far ahead of the last a value may run. A blind
// attacker who guessed a segment's sequence numbers must then guess its timestamps too: by pf's
// reckoning 10 to 18 bits more to guess where the ends draw their clocks' starts at random. Pure
// functions over the two ends' watches.
//
// The watch is this node's own and is not synced: it begins with each end's first segment, which a
// node that takes a connection over has not seen, so that node shifts the timestamps (their
// offsets are synced) but does not watch them. (pfsync's peer watches again from the next
// segments, and then refuses echoes of values sent before the takeover.) A node that gets a
// connection back from its peer watches it again from the next segments (Engine::apply()).
#pragma once

#include <cstdint>

#include "daemon/engine/packet.h"
#include "daemon/engine/reason.h"
#include "daemon/engine/time.h"

namespace pairwall::engine {

// One end's timestamps, as seen here: values in its own clock, echoes in the other end's (both
// before the node shifts them). Packed: both ends' watches share the state entry's last cache line
// with what it held before (StateEntry).
struct [[gnu::packed]] TimestampWatch {
  uint32_t first = 0;    // the lowest value the end sent before its first echoed one (pfss_tsval0)
  uint32_t value = 0;    // the highest value it sent
  uint32_t echo = 0;     // the highest echo it sent
  uint32_t last_ms = 0;  // when it last sent one, in milliseconds since the state was created
  uint8_t flags = 0;

  static constexpr uint8_t kStamped = 0x01;        // it sent timestamps in its SYN (PFSS_TIMESTAMP)
  static constexpr uint8_t kWatched = 0x02;        // values and an echo known: checked (PFSS_PAWS)
  static constexpr uint8_t kIdled = 0x04;          // idle past a clock's wrap: no longer (PFSS_PAWS_IDLED)
  static constexpr uint8_t kDataStamped = 0x08;    // its first data segment had a timestamp
  static constexpr uint8_t kDataUnstamped = 0x10;  // it had none: the end is never held to one
};
static_assert(sizeof(TimestampWatch) == 17);

// Whether a segment the end of `sender` sent fits what the ends' timestamps allow, before it is
// tracked: Reason::State if so, BadTimestamp if not. `echo` is the segment's echo in the receiver's
// own clock; `established`: both ends are; `created`: when the state was. A watch idle too long
// to judge (a 1 kHz clock wraps in 24 days) stops here.
Reason check_timestamps(TimestampWatch& sender, TimestampWatch& receiver, const PacketView& packet,
                        uint32_t echo, bool established, Millis created, Millis now) noexcept;

// Takes a passed segment's timestamps into its sender's watch. Only a connection seen from its
// start is watched: an end's watch begins with its SYN (pf_normalize_tcp_init), or SYN-ACK.
void watch_segment(TimestampWatch& sender, const PacketView& packet, uint32_t echo, Millis created,
                   Millis now) noexcept;

}  // namespace pairwall::engine
