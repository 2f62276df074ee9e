// A fake kernel for the carrier watch (LinkWatch::Transport) over a socketpair: it answers link
// dumps and sends link events as rtnetlink does, so the watch and the service above it run without
// touching the host's links.
#pragma once

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

#include "failover/link_watch.h"

namespace pairwall::failover {

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
  // Link events the next dump's answer carries between its first part and the rest, as when a link
  // is created or renamed after the kernel has built the part it would have been in.
  std::vector<Link> events_during_dump;

  // A link event, as RTMGRP_LINK delivers it (sequence number 0). The bridge tells of its ports in
  // messages of family AF_BRIDGE on the same group.
  void event(uint16_t type, const Link& l, uint8_t family = AF_UNSPEC) {
    std::array<char, 4096> buf{};
    nlmsghdr* nlh = link_message(buf.data(), type, l, 0);
    static_cast<ifinfomsg*>(mnl_nlmsg_get_payload(nlh))->ifi_family = family;
    put(nlh);
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
    for (std::size_t i = 0; i < links_.size(); ++i) {
      put(link_message(buf.data(), RTM_NEWLINK, links_[i], request.nlmsg_seq));
      if (i == 0) {
        for (const Link& l : events_during_dump) event(RTM_NEWLINK, l);
        events_during_dump.clear();
      }
    }
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

}  // namespace pairwall::failover
