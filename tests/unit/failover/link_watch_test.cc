// The carrier watch over a socketpair, with a fake kernel answering its link dumps.
#include "failover/link_watch.h"

#include <linux/rtnetlink.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <vector>

#include "tests/unit/failover/fake_link_kernel.h"

namespace pairwall::failover {
namespace {

TEST_CASE("LinkWatch: the first dump reads every link's carrier", "[link_watch]") {
  boost::asio::io_context io;
  FakeKernel kernel({{"lan0", 3, true}, {"lan1", 4, false}});
  LinkWatch watch(io, {"lan0", "lan1", "lan2"}, nullptr);
  watch.start(kernel.transport());
  REQUIRE(watch.links().size() == 3);
  CHECK(watch.links()[0].ifindex == 3);
  CHECK(watch.links()[0].carrier);
  CHECK(watch.links()[1].ifindex == 4);
  CHECK_FALSE(watch.links()[1].carrier);
  CHECK(watch.links()[2].ifindex == 0);
  CHECK(kernel.requests == 1);
  watch.stop();
}

// A reload that brings a VIP on another interface: the new link's carrier is known on return, and a
// link no longer named is no longer watched.
TEST_CASE("LinkWatch: links watched from a reload on are read at once", "[link_watch]") {
  boost::asio::io_context io;
  FakeKernel kernel({{"lan0", 3, true}, {"lan1", 4, true}, {"lan2", 5, false}});
  int changes = 0;
  LinkWatch watch(io, {"lan0"}, [&] { ++changes; });
  watch.start(kernel.transport());
  REQUIRE(watch.links().size() == 1);

  watch.watch({"lan1", "lan0", "lan2"});
  REQUIRE(watch.links().size() == 3);
  CHECK(watch.links()[0].name == "lan1");
  CHECK(watch.links()[0].ifindex == 4);
  CHECK(watch.links()[0].carrier);
  CHECK(watch.links()[1].name == "lan0");
  CHECK(watch.links()[1].ifindex == 3);
  CHECK(watch.links()[2].ifindex == 5);
  CHECK_FALSE(watch.links()[2].carrier);
  CHECK(watch.with_carrier() == 2);
  CHECK(kernel.requests == 2);
  CHECK(changes == 0);

  // The same names again: nothing to read.
  watch.watch({"lan1", "lan0", "lan2"});
  CHECK(kernel.requests == 2);

  watch.watch({"lan2"});
  REQUIRE(watch.links().size() == 1);
  kernel.event(RTM_NEWLINK, {"lan1", 4, false});
  kernel.event(RTM_NEWLINK, {"lan2", 5, true});
  run_until(io, std::chrono::seconds(3), [&] { return watch.links()[0].carrier; });
  CHECK(watch.links()[0].carrier);
  CHECK(watch.links().size() == 1);
  watch.stop();
}

TEST_CASE("LinkWatch: a dump refused at start is asked for again, at growing intervals", "[link_watch]") {
  boost::asio::io_context io;
  FakeKernel kernel({{"lan0", 3, true}});
  int changes = 0;
  LinkWatch watch(io, {"lan0"}, [&] { ++changes; });

  SECTION("its send failed once") {
    kernel.sends_to_refuse = 1;
    watch.start(kernel.transport());
    CHECK_FALSE(watch.links()[0].carrier);
    run_until(io, std::chrono::seconds(3), [&] { return changes > 0; });
    CHECK(changes == 1);
    CHECK(watch.links()[0].carrier);
    CHECK(watch.links()[0].ifindex == 3);
    CHECK(kernel.requests == 2);
  }
  SECTION("its send kept failing: no busy loop, and the dump once it is accepted") {
    kernel.sends_to_refuse = 1'000'000;
    watch.start(kernel.transport());
    const auto t0 = std::chrono::steady_clock::now();
    run_until(io, std::chrono::milliseconds(1000), [] { return false; });
    // 100, 200, 400 ms ... after the first: a few requests a second at most.
    CHECK(kernel.requests >= 2);
    CHECK(kernel.requests <= 1 + 4);
    CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(1000));
    kernel.sends_to_refuse = 0;
    run_until(io, std::chrono::seconds(3), [&] { return changes > 0; });
    CHECK(watch.links()[0].carrier);
  }
  SECTION("the kernel answered the dump with an error, again and again") {
    kernel.dumps_to_fail = 4;
    watch.start(kernel.transport());
    CHECK_FALSE(watch.links()[0].carrier);
    run_until(io, std::chrono::seconds(3), [&] { return changes > 0; });
    CHECK(watch.links()[0].carrier);
    CHECK(kernel.requests == 5);
  }
  watch.stop();
}

TEST_CASE("LinkWatch: a link that appears while the dump is read keeps what its event said", "[link_watch]") {
  struct Row {
    const char* what;
    FakeKernel::Link event;  // between the dump's first part (lan0) and its end
    unsigned ifindex;        // lan1's afterwards
    bool carrier;
  };
  const std::vector<Row> rows{
      {"created, up", {"lan1", 9, true}, 9, true},
      {"created, down", {"lan1", 9, false}, 9, false},
      {"renamed to lan1 from a name the dump had passed", {"lan1", 2, true}, 2, true},
      {"another link: lan1 stays absent", {"lan2", 9, true}, 0, false},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    boost::asio::io_context io;
    FakeKernel kernel({{"lan0", 3, true}});
    kernel.events_during_dump = {row.event};
    LinkWatch watch(io, {"lan0", "lan1"}, nullptr);
    watch.start(kernel.transport());
    CHECK(watch.links()[0].carrier);
    CHECK(watch.links()[1].ifindex == row.ifindex);
    CHECK(watch.links()[1].carrier == row.carrier);
    watch.stop();
  }
}

TEST_CASE("LinkWatch: a watched link renamed away has no carrier until a link takes its name",
          "[link_watch]") {
  boost::asio::io_context io;
  FakeKernel kernel({{"lan0", 3, true}, {"lan1", 4, true}});
  int changes = 0;
  LinkWatch watch(io, {"lan0", "lan1"}, [&] { ++changes; });
  watch.start(kernel.transport());
  REQUIRE(watch.links()[0].carrier);

  kernel.event(RTM_NEWLINK, {"lan0old", 3, true});  // ip link set lan0 name lan0old
  run_until(io, std::chrono::seconds(2), [&] { return changes == 1; });
  CHECK(changes == 1);
  CHECK(watch.links()[0].ifindex == 0);
  CHECK_FALSE(watch.links()[0].carrier);
  CHECK(watch.links()[1].carrier);  // another link's events leave lan1 as it was
  CHECK(watch.links()[1].ifindex == 4);

  kernel.event(RTM_NEWLINK, {"lan0", 7, true});  // a new link takes the name
  run_until(io, std::chrono::seconds(2), [&] { return changes == 2; });
  CHECK(watch.links()[0].ifindex == 7);
  CHECK(watch.links()[0].carrier);

  kernel.event(RTM_NEWLINK, {"lan0old", 3, false});  // the old one's events no longer concern lan0
  kernel.event(RTM_DELLINK, {"lan0old", 3, false});
  run_until(io, std::chrono::milliseconds(200), [&] { return changes == 3; });
  CHECK(changes == 2);
  CHECK(watch.links()[0].ifindex == 7);
  CHECK(watch.links()[0].carrier);
  watch.stop();
}

// A port leaving a bridge is told as an RTM_DELLINK of family AF_BRIDGE (br_ifinfo_notify): the
// link itself stays, with its carrier, and the VIPs on it with it.
TEST_CASE("LinkWatch: a bridge's messages about a watched link leave it as it was", "[link_watch]") {
  boost::asio::io_context io;
  FakeKernel kernel({{"lan0", 3, true}});
  int changes = 0;
  LinkWatch watch(io, {"lan0"}, [&] { ++changes; });
  watch.start(kernel.transport());
  REQUIRE(watch.links()[0].carrier);

  kernel.event(RTM_DELLINK, {"lan0", 3, true}, AF_BRIDGE);  // ip link set lan0 nomaster
  kernel.event(RTM_NEWLINK, {"lan9", 9, true});             // read after it, once it was
  run_until(io, std::chrono::milliseconds(200), [&] { return changes > 0; });
  CHECK(changes == 0);
  CHECK(watch.links()[0].ifindex == 3);
  CHECK(watch.links()[0].carrier);
  CHECK(watch.links()[0].carrier_losses == 0);
  watch.stop();
}

}  // namespace
}  // namespace pairwall::failover
