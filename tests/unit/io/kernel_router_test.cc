#include "daemon/io/kernel_router.h"

#include <arpa/inet.h>
#include <net/if.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/engine/interfaces.h"

namespace pairwall::io {
namespace {

engine::RouteQuery to(const char* dst, uint32_t in_link = 3, uint32_t mark = 0) {
  engine::Family family = engine::Family::V4;
  engine::RouteQuery q;
  q.dst = *engine::parse_address(dst, &family);
  q.family = family;
  q.src = *engine::parse_address(family == engine::Family::V4 ? "198.51.100.7" : "2001:db8:7::7", &family);
  q.in_link = in_link;
  q.mark = mark;
  return q;
}

// Links 5 (lan0) and 6 (dmz0); the kernel's answers as the test sets them.
struct FakeKernel {
  std::optional<RouteAnswer> answer = RouteAnswer{5, true};
  std::vector<engine::RouteQuery> asked;
  RouteAsk ask() {
    return [this](const engine::RouteQuery& q) {
      asked.push_back(q);
      return answer;
    };
  }
  static IfindexResolver links() {
    return [](uint32_t ifindex, char(&out)[IF_NAMESIZE]) {
      if (ifindex != 5 && ifindex != 6) return false;
      std::strcpy(out, ifindex == 5 ? "lan0" : "dmz0");
      return true;
    };
  }
};

TEST_CASE("a route answer is kept for a second per destination, arrival link and mark", "[route]") {
  engine::InterfaceRegistry registry;
  const engine::IfaceId lan = registry.intern("lan0");
  const engine::IfaceId dmz = registry.intern("dmz0");
  IfindexCache ifaces(registry, FakeKernel::links());
  FakeKernel kernel;
  KernelRouter router(ifaces, kernel.ask());
  const engine::Millis t0{50'000};

  CHECK(router.egress(to("10.2.0.10"), t0) == lan);
  // Any source, any time within the second: the kept answer.
  engine::RouteQuery other_source = to("10.2.0.10");
  other_source.src = engine::IpAddress::v4(0x0a0a0a0a);
  kernel.answer = RouteAnswer{6, true};
  CHECK(router.egress(other_source, t0 + engine::Millis{999}) == lan);
  CHECK(kernel.asked.size() == 1);
  // Another destination, link, mark or family is another question.
  CHECK(router.egress(to("10.2.0.11"), t0) == dmz);
  CHECK(router.egress(to("10.2.0.10", 4), t0) == dmz);
  CHECK(router.egress(to("10.2.0.10", 3, 1), t0) == dmz);
  CHECK(router.egress(to("::a02:a"), t0) == dmz);
  CHECK(kernel.asked.size() == 5);
  // A second on, the route is asked for again.
  CHECK(router.egress(to("10.2.0.10"), t0 + KernelRouter::kKeep) == dmz);
  CHECK(kernel.asked.size() == 6);
  CHECK(router.asked() == 6);
  CHECK(router.failed() == 0);
}

TEST_CASE("local delivery, no route and no answer all leave the connection its in pass", "[route]") {
  engine::InterfaceRegistry registry;
  IfindexCache ifaces(registry, FakeKernel::links());
  FakeKernel kernel;
  KernelRouter router(ifaces, kernel.ask());
  const engine::Millis t0{50'000};

  kernel.answer = RouteAnswer{0, true};  // this node's own
  CHECK(router.route(to("10.2.0.10"), t0).egress == engine::kNoIface);
  CHECK(router.route(to("10.2.0.10"), t0).exists);
  CHECK(router.failed() == 0);
  kernel.answer = RouteAnswer{};  // no route
  CHECK(router.route(to("10.2.0.13"), t0).egress == engine::kNoIface);
  CHECK_FALSE(router.route(to("10.2.0.13"), t0).exists);
  kernel.answer = RouteAnswer{9, true};  // a link that has gone since
  CHECK(router.egress(to("10.2.0.11"), t0) == engine::kNoIface);
  kernel.answer = std::nullopt;
  CHECK(router.egress(to("10.2.0.12"), t0) == engine::kNoIface);
  CHECK(router.failed() == 1);
  // An unanswered question is kept too, as no route: one wait per destination and second.
  CHECK_FALSE(router.route(to("10.2.0.12"), t0 + engine::Millis{10}).exists);
  CHECK(kernel.asked.size() == 4);
}

// uRPF's question: a packet may come back by any path of a multipath route.
TEST_CASE("a question for every path is one of its own, and tells each path of a multipath route",
          "[route]") {
  engine::InterfaceRegistry registry;
  const engine::IfaceId lan = registry.intern("lan0");
  const engine::IfaceId dmz = registry.intern("dmz0");
  IfindexCache ifaces(registry, FakeKernel::links());
  FakeKernel kernel;
  KernelRouter router(ifaces, kernel.ask());
  const engine::Millis t0{50'000};

  RouteAnswer multipath{5, true};
  multipath.other_ifindexes[0] = 6;
  kernel.answer = multipath;
  engine::RouteQuery every = to("10.2.0.10", 0);
  every.every_path = true;
  const engine::Route both = router.route(every, t0);
  CHECK(both.egress == lan);
  CHECK(both.leaves_by(lan));
  CHECK(both.leaves_by(dmz));
  CHECK_FALSE(both.leaves_by(engine::kNoIface));
  // The path this packet would take, asked of the same destination, is another question.
  kernel.answer = RouteAnswer{6, true};
  const engine::Route one = router.route(to("10.2.0.10", 0), t0);
  CHECK(one.egress == dmz);
  CHECK_FALSE(one.leaves_by(lan));
  CHECK(router.route(every, t0 + engine::Millis{500}).leaves_by(dmz));
  REQUIRE(kernel.asked.size() == 2);
  CHECK(kernel.asked[0].every_path);
  CHECK_FALSE(kernel.asked[1].every_path);
}

TEST_CASE("the kernel answers a route question: loopback is delivered locally", "[route]") {
  RouteNetlink netlink;
  engine::RouteQuery q = to("127.0.0.1", 0);
  q.src = *engine::parse_address("127.0.0.1", &q.family);
  const std::optional<RouteAnswer> v4 = netlink.ask(q);
  REQUIRE(v4.has_value());
  CHECK(v4->ifindex == 0);
  CHECK(v4->exists);
  engine::RouteQuery q6 = to("::1", 0);
  q6.src = q6.dst;
  const std::optional<RouteAnswer> v6 = netlink.ask(q6);
  REQUIRE(v6.has_value());
  CHECK(v6->ifindex == 0);
  CHECK(v6->exists);
  // Asked for the route entry (every path), as uRPF asks: the same.
  q.every_path = q6.every_path = true;
  for (const engine::RouteQuery& every : {q, q6}) {
    const std::optional<RouteAnswer> entry = netlink.ask(every);
    REQUIRE(entry.has_value());
    CHECK(entry->ifindex == 0);
    CHECK(entry->exists);
  }
}

// The host's IPv4 default route as /proc/net/route lists it: its gateway and interface.
struct DefaultRoute {
  engine::IpAddress gateway;
  std::string iface;
};
std::optional<DefaultRoute> default_route() {
  std::ifstream routes("/proc/net/route");
  std::string line;
  std::getline(routes, line);  // the header
  while (std::getline(routes, line)) {
    std::istringstream fields(line);
    std::string iface, destination, gateway;
    if (fields >> iface >> destination >> gateway && destination == "00000000" && gateway != "00000000") {
      const uint32_t network_order = static_cast<uint32_t>(std::stoul(gateway, nullptr, 16));
      return DefaultRoute{engine::IpAddress::v4(ntohl(network_order)), iface};
    }
  }
  return std::nullopt;
}

TEST_CASE("the kernel answers a route question: a gateway is reached by its interface", "[route]") {
  const std::optional<DefaultRoute> route = default_route();
  if (!route) {
    WARN("skipped: this host has no IPv4 default route");
    return;
  }
  RouteNetlink netlink;
  engine::RouteQuery q;
  q.dst = route->gateway;
  const std::optional<RouteAnswer> answer = netlink.ask(q);
  REQUIRE(answer.has_value());
  CHECK(answer->ifindex == if_nametoindex(route->iface.c_str()));
  CHECK(answer->exists);
  q.every_path = true;
  const std::optional<RouteAnswer> entry = netlink.ask(q);
  REQUIRE(entry.has_value());
  CHECK(entry->ifindex == if_nametoindex(route->iface.c_str()));
  CHECK(entry->exists);
}

}  // namespace
}  // namespace pairwall::io
