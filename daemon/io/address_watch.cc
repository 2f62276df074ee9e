#include "daemon/io/address_watch.h"

#include <libmnl/libmnl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace pairwall::io {

AddressWatch::AddressWatch(boost::asio::io_context& io, std::function<void()> on_change)
    : on_change_(std::move(on_change)), fd_(io) {}

AddressWatch::~AddressWatch() {
  boost::system::error_code ec;
  fd_.close(ec);
}

void AddressWatch::start() {
  const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "address watch socket");
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  local.nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::system_error(err, std::generic_category(), "address watch bind");
  }
  fd_.assign(fd);
  arm();
}

void AddressWatch::arm() {
  fd_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                 [this](const boost::system::error_code& ec) {
                   if (ec) return;  // closed
                   if (drain()) on_change_();
                   arm();
                 });
}

bool AddressWatch::drain() {
  bool changed = false;
  alignas(nlmsghdr) char buf[8192];
  for (;;) {
    const ssize_t n = ::recv(fd_.native_handle(), buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOBUFS) {  // events were lost: the caller reads the addresses again anyway
        changed = true;
        continue;
      }
      return changed;  // EAGAIN: drained
    }
    // libmnl's walk, not NLMSG_NEXT: the macro's char* cast trips clang's -Wcast-align.
    int remaining = static_cast<int>(n);
    for (auto* nlh = reinterpret_cast<const nlmsghdr*>(buf); mnl_nlmsg_ok(nlh, remaining);
         nlh = mnl_nlmsg_next(nlh, &remaining)) {
      changed = changed || nlh->nlmsg_type == RTM_NEWADDR || nlh->nlmsg_type == RTM_DELADDR;
    }
  }
}

}  // namespace pairwall::io
