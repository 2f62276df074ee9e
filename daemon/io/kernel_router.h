// engine::Router from the kernel's routing tables: RTM_GETROUTE, asked as `ip route get DST from
// SRC iif LINK mark M` asks, so that the answer is the route the kernel will give the packet
// itself once the engine lets it go (policy rules, the arrival link's forwarding switch, source
// validation included).
// A question for every path (uRPF's) is asked as `ip route get fibmatch ...`: the route entry
// itself, with each path of a multipath route, rather than the one path this packet would take.
//
// Answers are kept for kKeep per (family, destination, arrival link, mark, every path or one).
// rdr sends connections to a few servers, so nearly every question was asked a moment before, and
// a flood of new connections costs no more system calls than one. What follows from the key: a route change
// reaches new connections within kKeep, and a source-based policy rule (`ip rule add from ...`)
// is taken as the first source asked about a destination found it, for as long.
#pragma once

#include <libmnl/libmnl.h>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>

#include "daemon/engine/router.h"
#include "daemon/io/counter.h"
#include "daemon/io/ifindex_cache.h"

namespace pairwall::io {

// The kernel's answer to one question: the ifindex the packet leaves by, 0 where the kernel
// delivers it locally or has no route for it (it drops it then); and whether it has a route
// (engine::Route::exists).
struct RouteAnswer {
  uint32_t ifindex = 0;
  bool exists = false;
  // A question for every path (RouteQuery::every_path) of a multipath route: the ifindexes of
  // its other paths, 0 past the last.
  std::array<uint32_t, engine::kMaxRoutePaths - 1> other_ifindexes{};
};
// One question to the kernel; nullopt where it went unanswered.
using RouteAsk = std::function<std::optional<RouteAnswer>(const engine::RouteQuery&)>;

// The kernel's routing tables over rtnetlink, one socket, opened at the first question.
class RouteNetlink {
 public:
  RouteNetlink() = default;
  RouteNetlink(const RouteNetlink&) = delete;
  RouteNetlink& operator=(const RouteNetlink&) = delete;
  ~RouteNetlink();

  std::optional<RouteAnswer> ask(const engine::RouteQuery& query) noexcept;

  // How long a question may wait for its answer: the worker asking holds its queue meanwhile.
  static constexpr int kAnswerTimeoutMs = 100;

 private:
  bool open() noexcept;

  mnl_socket* nl_ = nullptr;
  uint32_t portid_ = 0;
  uint32_t seq_ = 0;
};

class KernelRouter final : public engine::Router {
 public:
  // `ask` answers the questions the kept answers do not; by default the kernel, over netlink.
  explicit KernelRouter(IfindexCache& ifaces, RouteAsk ask = {});

  // An unanswered question counts as no route: a connection rdr redirects meets its in pass
  // alone, and `urpf-failed` and `no-route` match.
  engine::Route route(const engine::RouteQuery& query, engine::Millis now) noexcept override;

  uint64_t asked() const { return asked_.get(); }    // questions put to the kernel
  uint64_t failed() const { return failed_.get(); }  // of them, unanswered

  static constexpr std::size_t kSlots = 256;  // direct-mapped, by a hash of the key
  static constexpr engine::Millis kKeep{1000};

 private:
  struct Slot {
    engine::Family family = engine::Family::V4;
    engine::IpAddress dst;
    uint32_t in_link = 0;
    uint32_t mark = 0;
    bool every_path = false;
    RouteAnswer answer;
    bool used = false;
    engine::Millis until{0};
  };
  static std::size_t slot_of(const engine::RouteQuery& query) noexcept;

  IfindexCache& ifaces_;
  RouteAsk ask_;
  RouteNetlink netlink_;
  std::array<Slot, kSlots> slots_{};
  Counter asked_;
  Counter failed_;
};

}  // namespace pairwall::io
