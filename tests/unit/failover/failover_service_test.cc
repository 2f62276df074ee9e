// FailoverService with the carrier watch on a fake kernel. Its VIP interface is one the host does
// not have, so that nothing it does touches the host's links and addresses, and the advertisement
// socket's open fails however often it is tried, as a lasting error on a real link would.
#include "failover/failover_service.h"

#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <sstream>
#include <string>

#include "tests/unit/failover/fake_link_kernel.h"
#include "tests/unit/support/log_capture.h"

namespace pairwall::failover {
namespace {

using std::chrono::milliseconds;
using test::LogCapture;
using test::occurrences;

constexpr const char* kAbsentLink = "pwnosuchlink0";

FailoverConfig config_on_absent_link() {
  FailoverConfig c;
  c.key = std::string(32, 'k');
  c.advbase_ms = 255'000;  // backup for the whole test: no VIP is ever added, no frame announced
  Vip vip;
  vip.interface = kAbsentLink;
  vip.family = AF_INET;
  vip.address = {192, 0, 2, 1};
  vip.prefix_len = 32;
  c.vips.push_back(vip);
  return c;
}

// The announcer's AF_PACKET socket, made at start, needs CAP_NET_RAW.
bool skipped_without_root() {
  if (::geteuid() == 0) return false;
  WARN("skipped: the announcer needs root (CAP_NET_RAW)");
  return true;
}

// Master 60 ms after its start. Its VIP and announcements name an interface the host does not have:
// they fail before reaching the kernel. No once-a-second tail: announcements come from the burst alone.
FailoverConfig fast_master_config() {
  FailoverConfig c = config_on_absent_link();
  c.advbase_ms = 20;
  c.vip_lease_s = -1;
  return c;
}

uint64_t socket_retries(const FailoverService& s) {
  return s.snapshot().counters.advert_socket_retries;
}

TEST_CASE("FailoverService: an advertisement socket that failed to open is tried again while it has carrier",
          "[failover_service]") {
  if (skipped_without_root()) return;
  REQUIRE(::if_nametoindex(kAbsentLink) == 0);
  boost::asio::io_context io;
  FakeKernel kernel({{kAbsentLink, 4242, true}});
  FailoverService service(io, config_on_absent_link(), 1);
  service.start(kernel.transport());
  REQUIRE(service.snapshot().links.at(0).carrier);
  CHECK(socket_retries(service) == 0);

  // The first retry a second on (waited for up to three, on a loaded machine).
  run_until(io, milliseconds(3000), [&] { return socket_retries(service) >= 1; });
  CHECK(socket_retries(service) == 1);

  // Without carrier nothing is tried: carrier coming back reopens the sockets.
  kernel.event(RTM_NEWLINK, {kAbsentLink, 4242, false});
  run_until(io, milliseconds(1300), [] { return false; });
  CHECK_FALSE(service.snapshot().links.at(0).carrier);
  CHECK(socket_retries(service) == 1);

  kernel.event(RTM_NEWLINK, {kAbsentLink, 4242, true});
  run_until(io, milliseconds(1500), [&] { return socket_retries(service) == 2; });
  CHECK(socket_retries(service) == 2);
  service.stop();
}

// carp(4) demotes a node whose advertisements fail to leave (CARP_SENDAD_MAX_ERRORS): the backup,
// hearing nothing, takes the group, and this node must then rank below it and step down at its
// first advertisement, or both would hold the VIPs for ever.
TEST_CASE("FailoverService: a master whose advertisements leave on no interface demotes itself",
          "[failover_service]") {
  if (skipped_without_root()) return;
  REQUIRE(::if_nametoindex(kAbsentLink) == 0);
  boost::asio::io_context io;
  FakeKernel kernel({{kAbsentLink, 4242, true}});
  FailoverConfig config = config_on_absent_link();
  // Master 60 ms on. Its VIP and announcements name an interface the host does not have: they fail
  // before reaching the kernel, and its advertisement socket never opens.
  config.advbase_ms = 20;
  FailoverService service(io, config, 1);
  service.start(kernel.transport());
  const auto demoted = [&] { return service.snapshot().demotion > 0; };
  run_until(io, milliseconds(3000), demoted);
  const FailoverSnapshot s = service.snapshot();
  CHECK(s.role == Role::Master);
  CHECK(s.demotion == 32);
  REQUIRE(s.demotion_reasons.size() == 1);
  CHECK(s.demotion_reasons[0] == "advertisements not leaving (+32)");
  service.stop();
}

// Announcements sent or failed so far.
uint64_t announce_attempts(const FailoverService& service) {
  const FailoverCounters c = service.snapshot().counters;
  return c.announcements + c.announce_errors;
}

// Runs `service` until it is master and its takeover's burst (the announcement and announce_count
// repeats, 10 ms apart) has ended; returns the announcement attempts made by then.
uint64_t master_after_takeover_burst(boost::asio::io_context& io, FailoverService& service,
                                     const FailoverConfig& config) {
  run_until(io, milliseconds(3000), [&] { return service.snapshot().role == Role::Master; });
  REQUIRE(service.snapshot().role == Role::Master);
  run_until(io, milliseconds(3000), [&] { return announce_attempts(service) >= 1 + config.announce_count; });
  run_until(io, milliseconds(200), [] { return false; });
  const uint64_t after_takeover = announce_attempts(service);
  REQUIRE(after_takeover == 1 + config.announce_count);
  return after_takeover;
}

// A VIP interface taken down and up again loses its IPv6 addresses (unless keep_addr_on_down), and
// its neighbours may have flushed their entries: the master adds its VIPs again and announces them.
// Both events read in one batch leave the link as it was before, carrier and index, and the bounce
// must still be seen.
TEST_CASE("FailoverService: a master re-adds and announces its VIPs after a link bounce read in one batch",
          "[failover_service]") {
  if (skipped_without_root()) return;
  REQUIRE(::if_nametoindex(kAbsentLink) == 0);
  boost::asio::io_context io;
  FakeKernel kernel({{kAbsentLink, 4242, true}});
  const FailoverConfig config = fast_master_config();
  FailoverService service(io, config, 1);
  service.start(kernel.transport());
  const uint64_t after_takeover = master_after_takeover_burst(io, service, config);

  kernel.event(RTM_NEWLINK, {kAbsentLink, 4242, false});
  kernel.event(RTM_NEWLINK, {kAbsentLink, 4242, true});
  run_until(io, milliseconds(1000), [&] { return announce_attempts(service) > after_takeover; });
  CHECK(service.snapshot().links.at(0).carrier);
  CHECK(announce_attempts(service) > after_takeover);
  service.stop();
}

// Link events lost to an overflowing socket buffer (ENOBUFS) may have held such a bounce; the
// dump read again shows only how the links are now, so the master puts its VIPs back all the same.
TEST_CASE("FailoverService: a master re-adds and announces its VIPs after link events were lost",
          "[failover_service]") {
  if (skipped_without_root()) return;
  REQUIRE(::if_nametoindex(kAbsentLink) == 0);
  boost::asio::io_context io;
  FakeKernel kernel({{kAbsentLink, 4242, true}});
  LinkWatch::Transport transport = kernel.transport();
  bool overflow = false;
  transport.receive = [&overflow, receive = transport.receive](void* buf, std::size_t len) -> ssize_t {
    if (overflow) {
      overflow = false;
      errno = ENOBUFS;
      return -1;
    }
    return receive(buf, len);
  };
  const FailoverConfig config = fast_master_config();
  FailoverService service(io, config, 1);
  service.start(std::move(transport));
  const uint64_t after_takeover = master_after_takeover_burst(io, service, config);

  overflow = true;
  kernel.event(RTM_NEWLINK, {"pwother0", 4343, true});  // wakes the watch, which reads ENOBUFS first
  run_until(io, milliseconds(1000), [&] { return announce_attempts(service) > after_takeover; });
  CHECK(service.snapshot().counters.link_resyncs == 1);
  CHECK(service.snapshot().links.at(0).carrier);
  CHECK(announce_attempts(service) > after_takeover);
  service.stop();
}

// A failing add is logged once, not at each retry; but a takeover that fails again after the VIPs
// were released meanwhile is news, and is logged again.
TEST_CASE("FailoverService: a VIP error is logged again when it comes back after a release",
          "[failover_service]") {
  if (skipped_without_root()) return;
  REQUIRE(::if_nametoindex(kAbsentLink) == 0);
  std::ostringstream log;
  LogCapture capture(log);
  boost::asio::io_context io;
  FakeKernel kernel({{kAbsentLink, 4242, true}});
  FailoverConfig config = config_on_absent_link();
  config.advbase_ms = 20;
  FailoverService service(io, config, 1);
  service.start(kernel.transport());
  const std::string failed_add = "adding VIPs: pwnosuchlink0 192.0.2.1/32";
  run_until(io, milliseconds(3000), [&] { return occurrences(log.str(), failed_add) >= 1; });
  run_until(io, milliseconds(1500), [] { return false; });  // a retry or more, not logged
  REQUIRE(occurrences(log.str(), failed_add) == 1);

  // Released at the fault, taken again once carrier is back.
  kernel.event(RTM_NEWLINK, {kAbsentLink, 4242, false});
  run_until(io, milliseconds(1000), [&] { return service.snapshot().role == Role::Fault; });
  REQUIRE(service.snapshot().role == Role::Fault);
  kernel.event(RTM_NEWLINK, {kAbsentLink, 4242, true});
  run_until(io, milliseconds(3000), [&] { return occurrences(log.str(), failed_add) >= 2; });
  CHECK(service.snapshot().role == Role::Master);
  CHECK(occurrences(log.str(), failed_add) == 2);
  service.stop();
}

// keepalived holds all of its virtual_ipaddress or none. A restart that finds some of the VIPs here
// cannot tell the role, and says why, so that a [failover] vips that is not keepalived's shows.
TEST_CASE("FailoverService: keepalived mode says why a restart finds no role in the VIPs",
          "[failover_service]") {
  REQUIRE(::if_nametoindex(kAbsentLink) == 0);
  std::ostringstream log;
  LogCapture capture(log);
  boost::asio::io_context io;
  FakeKernel kernel({{"lo", 1, true}, {kAbsentLink, 4242, true}});
  FailoverConfig config;
  config.driver = Driver::Keepalived;
  Vip here;  // every host's
  here.interface = "lo";
  here.family = AF_INET;
  here.address = {127, 0, 0, 1};
  here.prefix_len = 8;
  config.vips = {here, config_on_absent_link().vips.at(0)};
  FailoverService service(io, config, 1);
  service.start(kernel.transport());
  CHECK(service.snapshot().role == Role::Init);
  CHECK(occurrences(log.str(),
                    "1 of the 2 VIPs are here, a mix keepalived never leaves: INIT until it reports a "
                    "role (do [failover] vips list keepalived.conf's virtual_ipaddress?)") == 1);
  service.stop();

  FailoverConfig none;
  none.driver = Driver::Keepalived;
  FailoverService without(io, none, 1);
  FakeKernel no_links({});
  without.start(no_links.transport());
  CHECK(without.snapshot().role == Role::Init);
  CHECK(occurrences(log.str(),
                    "no [failover] vips to read keepalived's role from: INIT until it reports one") == 1);
  without.stop();
}

// keepalived reports MASTER, BACKUP and FAULT. A set-role request without a role reads as INIT, the
// field's default: it must not take the node out of the role keepalived last reported.
TEST_CASE("FailoverService: set-role takes master, backup or fault, and nothing else", "[failover_service]") {
  boost::asio::io_context io;
  FailoverConfig config;
  config.driver = Driver::Keepalived;
  FailoverService service(io, config, 1);
  FakeKernel kernel({});
  service.start(kernel.transport());
  CHECK(service.set_role(control::FailoverStatus::BACKUP).empty());
  CHECK(service.snapshot().role == Role::Backup);
  CHECK(service.set_role(control::FailoverStatus::INIT) ==
        "set-role: expected master, backup or fault, got init (a request without a role?)");
  CHECK(service.set_role(static_cast<control::FailoverStatus::Role>(9)) ==
        "set-role: expected master, backup or fault, got role 9");
  CHECK(service.snapshot().role == Role::Backup);
  CHECK(service.snapshot().transitions_total == 1);
  CHECK(service.set_role(control::FailoverStatus::FAULT).empty());
  CHECK(service.snapshot().role == Role::Fault);
  service.stop();
}

// A reload's [failover] (FailoverService::reconfigure): the election's settings are taken at once,
// the VIPs on the service's thread, with the channels and links they bring or leave.
TEST_CASE("FailoverService: a reload takes advbase, advskew, the VIPs and their channels",
          "[failover_service]") {
  if (skipped_without_root()) return;
  constexpr const char* kSecondLink = "pwnosuchlink1";
  REQUIRE(::if_nametoindex(kAbsentLink) == 0);
  REQUIRE(::if_nametoindex(kSecondLink) == 0);
  boost::asio::io_context io;
  FakeKernel kernel({{kAbsentLink, 4242, true}, {kSecondLink, 4243, false}});
  const FailoverConfig config = config_on_absent_link();
  FailoverService service(io, config, 1);
  service.start(kernel.transport());
  REQUIRE(service.snapshot().role == Role::Backup);
  CHECK(service.snapshot().advertisements ==
        std::vector<std::string>{std::string(kAbsentLink) + " (IPv4) to 224.0.0.18 port 8112"});

  FailoverConfig next = config;
  next.advbase_ms = 200'000;
  next.advskew = 50;
  next.preempt = true;
  Vip second = next.vips.at(0);
  second.address = {192, 0, 2, 2};
  next.vips.push_back(second);
  service.reconfigure(next);
  FailoverSnapshot s = service.snapshot();
  CHECK(s.advbase_ms == 200'000);
  CHECK(s.advskew == 50);
  CHECK(s.preempt);
  CHECK(s.vips == std::vector<std::string>{std::string(kAbsentLink) + " 192.0.2.1/32",
                                           std::string(kAbsentLink) + " 192.0.2.2/32"});
  CHECK(s.role == Role::Backup);
  CHECK(s.counters.adverts_sent + s.counters.advert_send_errors == 0);  // a backup says nothing of it
  CHECK(service.vips() == next.vips);

  // A VIP on a link the group had none on: its carrier is watched from then on, and the link
  // without carrier demotes the node.
  const int requests = kernel.requests;
  FailoverConfig wider = next;
  Vip on_second_link = second;
  on_second_link.interface = kSecondLink;
  wider.vips.push_back(on_second_link);
  service.reconfigure(wider);
  const auto links = [&] { return service.snapshot().links.size(); };
  run_until(io, milliseconds(1000), [&] { return links() == 2; });
  s = service.snapshot();
  REQUIRE(s.links.size() == 2);
  CHECK(s.links[1].name == kSecondLink);
  CHECK_FALSE(s.links[1].carrier);
  CHECK(s.demotion_reasons ==
        std::vector<std::string>{"VIP interface without carrier (+" + std::to_string(s.demotion) + ")"});
  CHECK(kernel.requests == requests + 1);

  // Back to the first link alone: the second is no longer watched, nor does it demote.
  service.reconfigure(next);
  run_until(io, milliseconds(1000), [&] { return links() == 1; });
  s = service.snapshot();
  CHECK(s.links.size() == 1);
  CHECK(s.demotion == 0);
  CHECK(s.role == Role::Backup);

  // A peer on the link, and another port: the channel opened anew, to the peer's address.
  FailoverConfig to_peer = next;
  to_peer.port = 8113;
  to_peer.peers.push_back({kAbsentLink, AF_INET, {192, 0, 2, 3}});
  service.reconfigure(to_peer);
  const std::vector<std::string> peer_channel{std::string(kAbsentLink) + " (IPv4) to 192.0.2.3 port 8113"};
  run_until(io, milliseconds(1000), [&] { return service.snapshot().advertisements == peer_channel; });
  CHECK(service.snapshot().advertisements == peer_channel);
  service.stop();
}

// keepalived's track_interface with a weight: an uplink without VIPs whose loss demotes the node,
// where a VIP interface's would fault it once none has carrier.
TEST_CASE(
    "FailoverService: a tracked interface without carrier demotes the node, and a reload sets the tracking",
    "[failover_service]") {
  if (skipped_without_root()) return;
  constexpr const char* kUplink = "pwnosuchlink2";
  REQUIRE(::if_nametoindex(kUplink) == 0);
  boost::asio::io_context io;
  // The uplink is down when the service starts (the fake kernel's dumps say so).
  FakeKernel kernel({{kAbsentLink, 4242, true}, {kUplink, 4244, false}});
  FailoverConfig config = config_on_absent_link();
  config.track_interfaces = {kUplink};
  FailoverService service(io, config, 1);
  service.start(kernel.transport());
  FailoverSnapshot s = service.snapshot();
  REQUIRE(s.links.size() == 2);
  CHECK(s.links[1].name == kUplink);
  CHECK(s.demotion_reasons == std::vector<std::string>{"tracked interface without carrier (+64)"});
  CHECK(s.role == Role::Backup);  // its VIP interface has carrier: no fault

  kernel.event(RTM_NEWLINK, {kUplink, 4244, true});
  run_until(io, milliseconds(1000), [&] { return service.snapshot().demotion == 0; });
  CHECK(service.snapshot().demotion == 0);
  kernel.event(RTM_NEWLINK, {kUplink, 4244, false});
  run_until(io, milliseconds(1000), [&] { return service.snapshot().demotion > 0; });
  CHECK(service.snapshot().demotion == kTrackedLinkDemotion);

  // Tracked no longer: the demotion goes with the link.
  FailoverConfig untracked = config;
  untracked.track_interfaces.clear();
  service.reconfigure(untracked);
  run_until(io, milliseconds(1000), [&] { return service.snapshot().links.size() == 1; });
  s = service.snapshot();
  CHECK(s.links.size() == 1);
  CHECK(s.demotion == 0);

  // Tracked again, the link still down: demoted at once.
  service.reconfigure(config);
  run_until(io, milliseconds(1000), [&] { return service.snapshot().links.size() == 2; });
  CHECK(service.snapshot().demotion == kTrackedLinkDemotion);

  // The uplink back, the VIP interface without carrier: no VIP interface has it, a fault, whatever
  // the tracked link has.
  kernel.event(RTM_NEWLINK, {kUplink, 4244, true});
  kernel.event(RTM_NEWLINK, {kAbsentLink, 4242, false});
  run_until(io, milliseconds(1000), [&] { return service.snapshot().role == Role::Fault; });
  CHECK(service.snapshot().role == Role::Fault);
  service.stop();
}

TEST_CASE("FailoverService: a master adds and announces the VIPs a reload brings, and no others",
          "[failover_service]") {
  if (skipped_without_root()) return;
  REQUIRE(::if_nametoindex(kAbsentLink) == 0);
  boost::asio::io_context io;
  FakeKernel kernel({{kAbsentLink, 4242, true}});
  const FailoverConfig config = fast_master_config();
  FailoverService service(io, config, 1);
  service.start(kernel.transport());
  const uint64_t after_takeover = master_after_takeover_burst(io, service, config);
  const uint64_t vip_errors = service.snapshot().counters.vip_errors;

  // advbase and advskew alone: no address work, no announcement.
  FailoverConfig slower = config;
  slower.advbase_ms = 40;
  slower.advskew = 10;
  service.reconfigure(slower);
  run_until(io, milliseconds(200), [] { return false; });
  CHECK(announce_attempts(service) == after_takeover);
  CHECK(service.snapshot().counters.vip_errors == vip_errors);
  CHECK(service.snapshot().role == Role::Master);

  // A VIP more: added (its interface is absent, so the add fails and is counted) and announced.
  FailoverConfig more = slower;
  Vip second = more.vips.at(0);
  second.address = {192, 0, 2, 2};
  more.vips.push_back(second);
  service.reconfigure(more);
  run_until(io, milliseconds(1000), [&] { return service.snapshot().counters.vip_errors > vip_errors; });
  CHECK(service.snapshot().counters.vip_errors == vip_errors + 1);
  run_until(io, milliseconds(3000),
            [&] { return announce_attempts(service) >= after_takeover + 2 * (1 + config.announce_count); });
  run_until(io, milliseconds(200), [] { return false; });
  // Both VIPs, announced once and announce_count times again.
  CHECK(announce_attempts(service) == after_takeover + 2 * (1 + config.announce_count));
  service.stop();
}

}  // namespace
}  // namespace pairwall::failover
