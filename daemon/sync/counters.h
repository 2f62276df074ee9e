// What the sync protocol counts. Every datagram it drops has a reason and a counter (pfsync's
// per-reason input statistics, with the reasons pfsync lacks: tag, replay, epoch).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pairwall::sync {

enum class DropReason : uint8_t {
  BadTtl,            // not sent on the sync link: its TTL / hop limit is not 255 (ttl_security)
  BadMagic,          // not a sync datagram
  BadVersion,        // a frame version this node cannot read
  Truncated,         // shorter than the header, or than its payload length says
  BadLength,         // longer than its payload length says
  BadTag,            // the HMAC does not verify: wrong key, forged or corrupted
  UnknownSender,     // authenticated, but not the peer (or our own datagram looped back)
  StaleEpoch,        // from an earlier boot of the peer than the one already heard
  Replay,            // transmission counter seen before, or older than the anti-replay window
  MalformedPayload,  // authenticated, but the protobuf does not parse, a field is out of range, or a
                     // record does not fit the state it names
  Unproven,          // from a new incarnation of the peer that has not yet answered this node's challenge
  EarlierBoot,       // sequenced data from a peer that acks an earlier boot of this node: meant for that
                     // boot, and sent again (emptied) once the peer knows of this one
  Count
};

inline constexpr std::size_t kDropReasonCount = static_cast<std::size_t>(DropReason::Count);

// Stable snake_case name for metrics, JSON and the CLI.
std::string_view drop_reason_name(DropReason r);

// Written by the one thread that runs the protocol; copied out for status.
struct SyncCounters {
  std::array<uint64_t, kDropReasonCount> drops{};

  uint64_t datagrams_sent = 0;
  uint64_t datagrams_received = 0;       // accepted (authenticated, fresh)
  uint64_t datagrams_on_accept_key = 0;  // of those, signed with accept_key: the peer signs with it
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t send_errors = 0;  // the socket refused a datagram; reliability resends it

  uint64_t records_queued = 0;     // local state changes handed to sync
  uint64_t records_coalesced = 0;  // folded into a pending record of the same state
  uint64_t pending_overflows = 0;  // pending records dropped for a full resync (pending_limit)
  uint64_t changes_lost = 0;       // the engine's rings dropped changes before sync saw them
  uint64_t epoch_regressions = 0;  // a silent peer came back with a lower epoch (clock behind)
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t messages_unknown = 0;  // a message type this version does not know (ignored)

  // Reliability, sending side.
  uint64_t resends = 0;              // datagrams sent again (same sequence)
  uint64_t rto_expirations = 0;      // resend timer fired (nothing heard back)
  uint64_t window_evictions = 0;     // unacked datagrams pushed out of the resend window (ids kept)
  uint64_t evicted_ids_dropped = 0;  // id lists dropped when the evicted store overflowed
  uint64_t resync_requests_served = 0;
  // A resync request (or the ResyncEnd answering one) that named the sequences of this node's
  // earlier boot: ignored.
  uint64_t resync_requests_stale = 0;
  uint64_t resync_states_sent = 0;    // current versions sent for resync and state requests
  uint64_t full_resyncs_started = 0;  // a gap no resync could fill: whole table sent

  // Reliability, receiving side.
  uint64_t duplicates = 0;    // a sequence received twice (a resend whose ack was lost)
  uint64_t out_of_order = 0;  // held until the sequences before it arrive
  // Past the receive window (the peer's resend window is larger): dropped, and sent again by the
  // peer once the window has moved.
  uint64_t beyond_window = 0;
  uint64_t holes = 0;          // gaps detected in the peer's stream (a datagram arrived early)
  uint64_t gaps = 0;           // ranges given up: the peer could not resend them (resync)
  uint64_t gap_sequences = 0;  // sequences in those ranges
  uint64_t resync_requests_sent = 0;
  uint64_t full_resyncs_received = 0;

  // Applying the peer's records.
  uint64_t applied = 0;
  uint64_t apply_stale = 0;    // older than what the table holds (windows never move back)
  uint64_t apply_unknown = 0;  // update or delete for a state this node does not have
  uint64_t apply_failed = 0;   // the table refused (full)
  uint64_t state_requests_sent = 0;

  // Bulk.
  uint64_t bulk_requests_sent = 0;
  uint64_t bulks_served = 0;
  uint64_t bulk_states_sent = 0;
  uint64_t bulk_states_received = 0;
  uint64_t bulk_timeouts = 0;
  uint64_t peer_states_removed = 0;  // states the peer no longer had at the end of its full transfer

  // Shared tables ([sync] tables), whole versions and the chunks that carry them.
  uint64_t tables_sent = 0;
  uint64_t table_chunks_sent = 0;
  uint64_t tables_received = 0;
  uint64_t table_chunks_stale = 0;  // of a version taken already or superseded (a resend, a resync)

  uint64_t peer_restarts = 0;    // the peer's epoch went up
  uint64_t challenges_sent = 0;  // new incarnations of the peer asked to prove themselves live
  uint64_t epochs_proven = 0;    // ...and that did
  uint64_t keepalives_sent = 0;
  uint64_t acks_sent = 0;  // datagrams sent only to carry an ack
};

}  // namespace pairwall::sync
