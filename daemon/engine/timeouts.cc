#include "daemon/engine/timeouts.h"

#include <chrono>

namespace pairwall::engine {

namespace {

struct TimeoutEntry {
  TimeoutClass cls;
  std::string_view name;
  std::chrono::seconds pf_default;
};

// Names and defaults as in pf.conf(5) "set timeout".
constexpr TimeoutEntry kTimeoutTable[] = {
    {TimeoutClass::TcpFirst, "tcp.first", std::chrono::seconds(120)},
    {TimeoutClass::TcpOpening, "tcp.opening", std::chrono::seconds(30)},
    {TimeoutClass::TcpEstablished, "tcp.established", std::chrono::seconds(86400)},
    {TimeoutClass::TcpClosing, "tcp.closing", std::chrono::seconds(900)},
    {TimeoutClass::TcpFinWait, "tcp.finwait", std::chrono::seconds(45)},
    {TimeoutClass::TcpClosed, "tcp.closed", std::chrono::seconds(90)},
    {TimeoutClass::UdpFirst, "udp.first", std::chrono::seconds(60)},
    {TimeoutClass::UdpSingle, "udp.single", std::chrono::seconds(30)},
    {TimeoutClass::UdpMultiple, "udp.multiple", std::chrono::seconds(60)},
    {TimeoutClass::IcmpFirst, "icmp.first", std::chrono::seconds(20)},
    {TimeoutClass::IcmpError, "icmp.error", std::chrono::seconds(10)},
    {TimeoutClass::OtherFirst, "other.first", std::chrono::seconds(60)},
    {TimeoutClass::OtherSingle, "other.single", std::chrono::seconds(30)},
    {TimeoutClass::OtherMultiple, "other.multiple", std::chrono::seconds(60)},
};

static_assert(std::size(kTimeoutTable) == kTimeoutClassCount,
              "every timeout class needs a name and a default");

constexpr bool table_in_enum_order() {
  for (std::size_t i = 0; i < std::size(kTimeoutTable); ++i)
    if (static_cast<std::size_t>(kTimeoutTable[i].cls) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "kTimeoutTable is indexed by TimeoutClass");

}  // namespace

Timeouts Timeouts::defaults() {
  Timeouts t{};
  for (const auto& e : kTimeoutTable) t[e.cls] = std::chrono::duration_cast<Millis>(e.pf_default);
  return t;
}

double AdaptiveTimeouts::scale(uint64_t states, uint64_t limit) const noexcept {
  const uint64_t from = first(limit);
  const uint64_t to = last(limit);
  if (to <= from || states <= from) return 1.0;
  if (states >= to) return 0.0;
  return static_cast<double>(to - states) / static_cast<double>(to - from);
}

std::optional<TimeoutClass> timeout_class_from_name(std::string_view name) {
  for (const auto& e : kTimeoutTable)
    if (e.name == name) return e.cls;
  return std::nullopt;
}

std::string_view timeout_class_name(TimeoutClass c) {
  auto i = static_cast<std::size_t>(c);
  return i < std::size(kTimeoutTable) ? kTimeoutTable[i].name : std::string_view("unknown");
}

bool is_timeout_name(std::string_view name) {
  return timeout_class_from_name(name).has_value() || name == kSourceTrackTimeoutName;
}

std::string timeout_names() {
  std::string out;
  for (const auto& e : kTimeoutTable) {
    out += e.name;
    out += ", ";
  }
  return out + std::string(kSourceTrackTimeoutName);
}

}  // namespace pairwall::engine
