// NAT in bytes: the address a translation pool gives, and the rewrite of a packet from one of its
// state's keys to the other. Every checksum a rewritten field is part of is updated
// incrementally (RFC 1624), never recomputed over the packet, except where the kernel left the
// transport checksum for later (complete_transport_checksum()).
//
// Translation is decided once, when the state is created (Engine::translate); the state then
// holds both keys, and every later packet of the connection, and every ICMP error quoting one,
// is rewritten from the key it arrived with to the other, turned the same way.
#pragma once

#include <cstdint>
#include <span>

#include "daemon/engine/address.h"
#include "daemon/engine/packet.h"
#include "daemon/engine/state.h"

namespace pairwall::engine {

// `address` moved into `pool`: the pool's network bits over the address's host bits (pf's
// `bitmask` pool). A /32 (/128) pool is its one address; binat maps a prefix onto another 1:1.
IpAddress graft(const IpPrefix& pool, const IpAddress& address);

// Rewrites `bytes`, described by `view`, so that its source and destination (addresses, and
// ports or ICMP query id) become `to.addr[0]:to.port[0]` and `to.addr[1]:to.port[1]`. Only
// fields that differ are written.
void rewrite_packet(std::span<uint8_t> bytes, const PacketView& view, const StateKey& to) noexcept;

// Rewrites an ICMP error (`view`) quoting a packet of a translated state (`quoted`, parsed from
// the bytes at view.icmp.quoted_offset): the quote becomes `to`, the quoted packet's key on this
// side of the translation, and the error's destination, the quoted packet's source, follows it.
// The quote's own checksums are kept right where the quote still holds them.
void rewrite_icmp_error(std::span<uint8_t> bytes, const PacketView& view, const PacketView& quoted,
                        const StateKey& to) noexcept;

// `modulate state` (pf's defence for hosts whose initial sequence numbers can be guessed): each
// end of a TCP connection has its sequence numbers shifted by a random offset of its own on the
// way through, so that from the far side they cannot be guessed. A segment's sequence number gains
// `seq_add` (its sender's offset); its acknowledgment and SACK blocks, which count the receiver's
// numbers as the sender saw them, lose `ack_sub` (the receiver's offset).
void modulate_segment(std::span<uint8_t> bytes, const PacketView& view, uint32_t seq_add,
                      uint32_t ack_sub) noexcept;

// `scrub reassemble tcp`'s timestamps (RFC 7323 3.2), as modulate_segment() shifts sequence
// numbers: the segment's TSval gains `value_add` (its sender's offset); its TSecr, which echoes the
// receiver's values as the sender saw them, loses `echo_sub` (the receiver's offset). For a view
// with a timestamp option (TcpInfo::has_timestamps).
void modulate_timestamps(std::span<uint8_t> bytes, const PacketView& view, uint32_t value_add,
                         uint32_t echo_sub) noexcept;

// An ICMP error (`view`) quoting a segment of a modulated state (`quoted`) on its way back to the
// segment's sender: the quoted sequence number loses `seq_sub`, the sender's offset, so that the
// sender recognises its segment (a host drops an error whose quote is outside its window, and
// with it path MTU discovery).
void demodulate_icmp_quote(std::span<uint8_t> bytes, const PacketView& view, const PacketView& quoted,
                           uint32_t seq_sub) noexcept;

// Computes the transport checksum of a TCP, UDP or ICMP/ICMPv6 packet over its whole segment.
// For packets the kernel queued with the checksum left to finish (CHECKSUM_PARTIAL: the field
// holds the pseudo-header sum only) and the engine changed: a verdict that returns new bytes makes
// the kernel take the checksum as complete (nfqnl_mangle sets CHECKSUM_NONE), so it is finished
// here. Not for GSO packets (partial_transport_checksum()).
void complete_transport_checksum(std::span<uint8_t> bytes, const PacketView& view) noexcept;

// Writes the pseudo-header sum of a TCP or UDP packet, folded and not inverted, into its checksum
// field: the form the kernel keeps while the checksum is left to finish. For GSO packets the engine
// changed: the kernel cuts them into segments after the verdict and sums each segment starting
// from that field, which for UDP (__udp_gso_segment) it takes as it finds it; a checksum finished
// over the whole packet there would make every segment's wrong.
void partial_transport_checksum(std::span<uint8_t> bytes, const PacketView& view) noexcept;

}  // namespace pairwall::engine
