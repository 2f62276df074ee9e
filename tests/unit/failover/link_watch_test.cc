// The carrier watch over a socketpair, with a fake kernel answering its link dumps.
#include "failover/link_watch.h"

#include <libmnl/libmnl.h>
#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

namespace pairwall::failover {
namespace {

// Answers each RTM_GETLINK dump with one RTM_NEWLINK per link and NLMSG_DONE, as the kernel does;
// or refuses the request's send, or answers it with an error.
class FakeKernel {
 public:
  struct Link {
    std::string name;
    int ifindex;
    bool up;
  };

  explicit FakeKernel(std::vector<Link> links) : links_(std::move(links)) {
    REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds_.data()) == 0);
  }
  ~FakeKernel() {
    close(fds_[0]);
    close(fds_[1]);
  }
  FakeKernel(const FakeKernel&) = delete;
  FakeKernel& operator=(const FakeKernel&) = delete;

  int sends_to_refuse = 0;  // as the send of a request under memory pressure fails (ENOBUFS)
  int dumps_to_fail = 0;    // answered with an error instead of the links
  int requests = 0;

  // A link event, as RTMGRP_LINK delivers it (sequence number 0).
  void event(uint16_t type, const Link& l) {
    std::array<char, 4096> buf{};
    put(link_message(buf.data(), type, l, 0));
  }

  LinkWatch::Transport transport() {
    return LinkWatch::Transport{fds_[0],
                                [this](const void* buf, std::size_t len) -> ssize_t {
                                  ++requests;
                                  if (sends_to_refuse > 0) {
                                    --sends_to_refuse;
                                    errno = ENOBUFS;
                                    return -1;
                                  }
                                  answer(*static_cast<const nlmsghdr*>(buf));
                                  return static_cast<ssize_t>(len);
                                },
                                [this](void* buf, std::size_t len) { return recv(fds_[0], buf, len, 0); }};
  }

 private:
  void answer(const nlmsghdr& request) {
    REQUIRE(request.nlmsg_type == RTM_GETLINK);
    std::array<char, 4096> buf{};
    if (dumps_to_fail > 0) {
      --dumps_to_fail;
      nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
      nlh->nlmsg_type = NLMSG_ERROR;
      nlh->nlmsg_seq = request.nlmsg_seq;
      auto* err = static_cast<nlmsgerr*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nlmsgerr)));
      err->error = -EBUSY;
      err->msg = request;
      put(nlh);
      return;
    }
    for (const Link& l : links_) put(link_message(buf.data(), RTM_NEWLINK, l, request.nlmsg_seq));
    nlmsghdr* done = mnl_nlmsg_put_header(buf.data());
    done->nlmsg_type = NLMSG_DONE;
    done->nlmsg_flags = NLM_F_MULTI;
    done->nlmsg_seq = request.nlmsg_seq;
    mnl_nlmsg_put_extra_header(done, sizeof(int));
    put(done);
  }
  static nlmsghdr* link_message(char* buf, uint16_t type, const Link& l, uint32_t seq) {
    nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = type;
    nlh->nlmsg_flags = seq ? NLM_F_MULTI : 0;
    nlh->nlmsg_seq = seq;
    auto* ifi = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
    ifi->ifi_index = l.ifindex;
    ifi->ifi_flags = l.up ? static_cast<unsigned>(IFF_UP) | static_cast<unsigned>(IFF_LOWER_UP) : 0U;
    mnl_attr_put_strz(nlh, IFLA_IFNAME, l.name.c_str());
    mnl_attr_put_u8(nlh, IFLA_OPERSTATE, l.up ? IF_OPER_UP : IF_OPER_DOWN);
    return nlh;
  }
  void put(const nlmsghdr* nlh) { REQUIRE(send(fds_[1], nlh, nlh->nlmsg_len, 0) == nlh->nlmsg_len); }

  std::vector<Link> links_;
  std::array<int, 2> fds_{};
};

// Runs `io` until `done` or `limit` has passed.
template <typename Done>
void run_until(boost::asio::io_context& io, std::chrono::milliseconds limit, Done done) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < until) {
    io.run_one_for(std::chrono::milliseconds(10));
    if (io.stopped()) io.restart();
  }
}

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

}  // namespace
}  // namespace pairwall::failover
