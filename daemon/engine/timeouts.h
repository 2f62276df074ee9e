// State timeouts, named as in pf.conf(5) `set timeout`. A state expires `timeout[class]` after its
// last packet; the class changes as the connection progresses.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/engine/time.h"

namespace pairwall::engine {

enum class TimeoutClass : uint8_t {
  TcpFirst,        // after the first packet (SYN)
  TcpOpening,      // before both sides are established
  TcpEstablished,  // both established
  TcpClosing,      // after the first FIN
  TcpFinWait,      // after both FINs, before the state is closed
  TcpClosed,       // after an RST, or both FINs acknowledged
  UdpFirst,        // after the first packet
  UdpSingle,       // the source sent more than one packet, the destination none
  UdpMultiple,     // both directions have sent packets
  IcmpFirst,       // after the first packet
  IcmpError,       // after any later packet of the query: its reply, or the request again
  OtherFirst,
  OtherSingle,
  OtherMultiple,
  Count
};

inline constexpr std::size_t kTimeoutClassCount = static_cast<std::size_t>(TimeoutClass::Count);

struct Timeouts {
  std::array<Millis, kTimeoutClassCount> values;
  // pf's src.track: how long a source node outlives its last state, so that what it counted
  // (max-src-conn-rate) still holds for the address's next connections. Not a state's class;
  // 0, pf's default, frees the node with its last state.
  Millis source_track{0};

  Millis operator[](TimeoutClass c) const { return values[static_cast<std::size_t>(c)]; }
  Millis& operator[](TimeoutClass c) { return values[static_cast<std::size_t>(c)]; }

  // pf's defaults (pf.conf(5)).
  static Timeouts defaults();
};

// pf's adaptive timeouts (pf.conf(5) `set timeout { adaptive.start N, adaptive.end M }`): once the
// table holds more than `start` states, every timeout is scaled by (end - states) / (end - start),
// down to zero at `end`, so that a table filling up (a flood of new connections) sheds its idle
// states sooner instead of refusing new ones. Unset, they follow the state limit as pf's do
// (60 % and 120 % of it); both 0 turn scaling off.
struct AdaptiveTimeouts {
  static constexpr std::string_view kStartName = "adaptive.start";
  static constexpr std::string_view kEndName = "adaptive.end";

  std::optional<uint32_t> start;  // set together with `end` (the rule compiler checks)
  std::optional<uint32_t> end;

  // The factor every timeout is multiplied by with `states` entries in a table limited to `limit`:
  // 1 up to the start, 0 from the end on.
  double scale(uint64_t states, uint64_t limit) const noexcept;
  // The bounds scale() uses for a table limited to `limit`: as set, else pf's defaults
  // (PFSTATE_ADAPT_START and PFSTATE_ADAPT_END, 60 % and 120 % of the limit).
  uint64_t first(uint64_t limit) const noexcept { return start ? *start : limit * 6 / 10; }
  uint64_t last(uint64_t limit) const noexcept { return end ? *end : limit * 12 / 10; }
};

inline constexpr std::string_view kSourceTrackTimeoutName = "src.track";

// "tcp.established" -> TimeoutClass::TcpEstablished; nullopt for an unknown name.
std::optional<TimeoutClass> timeout_class_from_name(std::string_view name);
std::string_view timeout_class_name(TimeoutClass c);
// Whether `name` is a timeout `set timeout` and a rule's state options take: a class, or src.track.
bool is_timeout_name(std::string_view name);
// Every such name, comma separated, for error messages.
std::string timeout_names();

}  // namespace pairwall::engine
