// Where the kernel will send a packet it has not routed yet.
//
// Before routing (Hook::Prerouting) a packet has no departure interface. A new connection that
// rdr (or binat inbound) translates there is decided there, yet pf lets its `out` filter rules on
// the interface it leaves by decide it too: `block out on $int_if` must hold for a redirected
// connection as for any other. Only the kernel's routing tables know that interface, so the I/O
// adapter answers from them and the engine asks once per such connection.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "daemon/engine/address.h"
#include "daemon/engine/interfaces.h"
#include "daemon/engine/time.h"

namespace pairwall::engine {

// A packet as the kernel will route it: its addresses after translation, where it arrived.
struct RouteQuery {
  Family family = Family::V4;
  IpAddress src;
  IpAddress dst;
  uint32_t in_link = 0;  // PacketMeta::in_link
  uint32_t mark = 0;     // PacketMeta::mark
  // The route's every path, not the one the kernel would pick for this packet: what the unicast
  // reverse path check (`urpf-failed`) asks, since a packet may come back by any path of a
  // multipath route, as pf_routable() walks them.
  bool every_path = false;
};

// The paths of a multipath route a Route tells (more are left out).
inline constexpr std::size_t kMaxRoutePaths = 8;

// The kernel's answer for one packet.
struct Route {
  // The interface the packet leaves by; kNoIface when the kernel delivers it to this node, or
  // cannot route it (and so drops it).
  IfaceId egress = kNoIface;
  // Whether the routing tables have a route for it at all (pf's pf_routable(), asked by
  // `no-route`): a unicast route, or this node's own, broadcast or multicast; not an unreachable,
  // prohibit or blackhole route, nor a table without one.
  bool exists = false;
  // A query for every path of a multipath route: the interfaces its other paths leave by
  // (kNoIface past the last).
  std::array<IfaceId, kMaxRoutePaths - 1> other_paths = [] {
    std::array<IfaceId, kMaxRoutePaths - 1> none;
    none.fill(kNoIface);
    return none;
  }();

  // Whether a path of the route leaves by `iface`.
  bool leaves_by(IfaceId iface) const noexcept {
    if (iface == kNoIface) return false;
    if (iface == egress) return true;
    for (const IfaceId other : other_paths) {
      if (other == iface) return true;
    }
    return false;
  }
};

class Router {
 public:
  virtual ~Router() = default;
  virtual Route route(const RouteQuery& query, Millis now) noexcept = 0;
  IfaceId egress(const RouteQuery& query, Millis now) noexcept { return route(query, now).egress; }
};

}  // namespace pairwall::engine
