#include "daemon/engine/tcp_scrub.h"

#include <algorithm>

#include "daemon/engine/tcp_track.h"

namespace pairwall::engine {
namespace {

// The fastest timestamp clock RFC 7323 5.4 allows ticks once a millisecond, and wraps its 32 bits
// in 24 days: past that idle, values can no longer be compared. The echo's lower bound (the other
// end's first value) holds for half of that from the connection's start (pf's TS_MAX_IDLE and
// TS_MAX_CONN).
constexpr Millis kMaxIdle{int64_t{24} * 24 * 3600 * 1000};
constexpr Millis kMaxWatched{int64_t{12} * 24 * 3600 * 1000};
// How far ahead of the last a value may run: 1.1 ticks a millisecond (the fastest clock, 10 % fast)
// since the last, and 30 seconds more for a segment held up on the way (pf's ts.diff default).
constexpr int64_t kTicksPerSecond = 1100;
constexpr int64_t kLeewayMs = 30'000;

uint32_t ms_since(Millis created, Millis now) {
  return static_cast<uint32_t>(std::clamp<int64_t>((now - created).count(), 0, UINT32_MAX));
}

bool carries_data(const PacketView& packet) {
  return packet.payload_length > 0;
}

void watch_first_segment(TimestampWatch& sender, const PacketView& syn) noexcept {
  if (!syn.tcp.has_timestamps) return;
  sender.flags |= TimestampWatch::kStamped;
  sender.first = syn.tcp.ts_value;
  sender.value = syn.tcp.ts_value;
  sender.echo = syn.tcp.ts_echo;
  sender.last_ms = 0;
}

}  // namespace

Reason check_timestamps(TimestampWatch& sender, TimestampWatch& receiver, const PacketView& packet,
                        uint32_t echo, bool established, Millis created, Millis now) noexcept {
  const Millis since_created = now - created;
  // A copy of the packed field, not a reference to it: the watch may lie at any address.
  const auto idle = [&](const TimestampWatch& w) { return since_created - Millis{Millis::rep{w.last_ms}}; };
  const auto stop = [](TimestampWatch& w) {
    w.flags = static_cast<uint8_t>((w.flags & ~TimestampWatch::kWatched) | TimestampWatch::kIdled);
  };
  if ((sender.flags & TimestampWatch::kWatched) != 0 &&
      (idle(sender) > kMaxIdle || since_created > kMaxWatched))
    stop(sender);
  if ((receiver.flags & TimestampWatch::kWatched) != 0 && idle(receiver) > kMaxIdle) stop(receiver);
  if ((sender.flags & receiver.flags & TimestampWatch::kWatched) == 0) return Reason::State;

  if (!packet.tcp.has_timestamps) {
    // Stacks leave timestamps off resets (RFC 7323 5.2 tells receivers not to look) and often off
    // empty ACKs; and some boxes in the middle answer for a server without them. So only an end
    // whose first data segment had one is held to one on the rest (pf's PFSS_DATA_TS).
    const bool owed = carries_data(packet) && (packet.tcp.flags & tcpflag::kRst) == 0 &&
                      (sender.flags & TimestampWatch::kDataStamped) != 0;
    return owed ? Reason::BadTimestamp : Reason::State;
  }
  if (!established) return Reason::State;
  // RFC 7323 5.3: a value is no older than what the receiver last echoed of it, and runs no further
  // ahead of the sender's last than its clock can have ticked since; an echo is of a value the
  // receiver sent, no later than its last and no earlier than its first.
  const int64_t elapsed_ms = std::max<int64_t>(0, idle(sender).count());
  const auto ahead = static_cast<uint32_t>(
      std::min<int64_t>((elapsed_ms + kLeewayMs) * kTicksPerSecond / 1000, int64_t{1} << 30));
  const uint32_t value = packet.tcp.ts_value;
  const bool bad_echo = echo != 0 && (seq_gt(echo, receiver.value) || seq_lt(echo, receiver.first));
  if (seq_lt(value, receiver.echo) || seq_gt(value, sender.value + ahead) || bad_echo)
    return Reason::BadTimestamp;
  return Reason::State;
}

void watch_segment(TimestampWatch& sender, const PacketView& packet, uint32_t echo, Millis created,
                   Millis now) noexcept {
  const bool stamped = packet.tcp.has_timestamps;
  // The responder's watch begins with its SYN-ACK, as the initiator's with its SYN.
  if (stamped && (packet.tcp.flags & tcpflag::kSyn) != 0 && (sender.flags & TimestampWatch::kStamped) == 0)
    watch_first_segment(sender, packet);
  constexpr uint8_t kDataSeen = TimestampWatch::kDataStamped | TimestampWatch::kDataUnstamped;
  if (carries_data(packet) &&
      (sender.flags & (TimestampWatch::kStamped | kDataSeen)) == TimestampWatch::kStamped)
    sender.flags |= stamped ? TimestampWatch::kDataStamped : TimestampWatch::kDataUnstamped;
  if (!stamped ||
      (sender.flags & (TimestampWatch::kStamped | TimestampWatch::kIdled)) != TimestampWatch::kStamped)
    return;
  const bool watched = (sender.flags & TimestampWatch::kWatched) != 0;
  const uint32_t value = packet.tcp.ts_value;
  sender.last_ms = ms_since(created, now);
  if (!watched || seq_geq(value, sender.value)) sender.value = value;
  if (echo == 0) return;
  if (!watched || seq_geq(echo, sender.echo)) sender.echo = echo;
  // The first value is the lowest the end sent before it was watched: the lower bound of the
  // other end's echoes.
  if (!watched && (sender.first == 0 || seq_lt(value, sender.first))) sender.first = value;
  sender.flags |= TimestampWatch::kWatched;
}

}  // namespace pairwall::engine
