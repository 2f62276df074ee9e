#include "daemon/io/address_watch.h"

#include <libmnl/libmnl.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace pairwall::io {

bool LinkNames::reload() {
  struct if_nameindex* list = if_nameindex();
  if (list == nullptr) return false;
  names_.clear();
  for (const struct if_nameindex* i = list; i->if_index != 0; ++i) names_[i->if_index] = i->if_name;
  if_freenameindex(list);
  return true;
}

bool LinkNames::apply(const nlmsghdr* nlh) {
  if (nlh->nlmsg_type != RTM_NEWLINK && nlh->nlmsg_type != RTM_DELLINK) return false;
  if (nlh->nlmsg_len < MNL_NLMSG_HDRLEN + sizeof(ifinfomsg)) return false;
  const auto* info = static_cast<const ifinfomsg*>(mnl_nlmsg_get_payload(nlh));
  const auto ifindex = static_cast<uint32_t>(info->ifi_index);
  const auto known = names_.find(ifindex);
  if (nlh->nlmsg_type == RTM_DELLINK) {
    // The index may come back naming another interface (one moved in from another namespace keeps
    // its own): what was kept for it must go.
    if (known == names_.end()) return false;
    names_.erase(known);
    return true;
  }
  const char* name = nullptr;
  mnl_attr_parse(
      nlh, sizeof(ifinfomsg),
      [](const nlattr* attr, void* out) {
        if (mnl_attr_get_type(attr) == IFLA_IFNAME && mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) >= 0)
          *static_cast<const char**>(out) = mnl_attr_get_str(attr);
        return MNL_CB_OK;
      },
      &name);
  if (name == nullptr) return false;
  if (known == names_.end()) {
    names_.emplace(ifindex, name);
    return false;
  }
  if (known->second == name) return false;
  known->second = name;
  return true;
}

AddressWatch::AddressWatch(boost::asio::io_context& io, std::function<void()> on_change,
                           std::function<void()> on_links)
    : on_change_(std::move(on_change)), on_links_(std::move(on_links)), fd_(io) {}

AddressWatch::~AddressWatch() {
  boost::system::error_code ec;
  fd_.close(ec);
}

void AddressWatch::start() {
  const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "address watch socket");
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  local.nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_LINK;
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::system_error(err, std::generic_category(), "address watch bind");
  }
  // Read after the bind: a rename in between is then an event that differs from what was read.
  if (!links_.reload()) {
    const int err = errno;
    ::close(fd);
    throw std::system_error(err, std::generic_category(), "address watch: reading the interface names");
  }
  fd_.assign(fd);
  arm();
}

void AddressWatch::arm() {
  fd_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                 [this](const boost::system::error_code& ec) {
                   if (ec) return;  // closed
                   const Changes changes = drain();
                   if (changes.links && on_links_) on_links_();
                   if (changes.addresses) on_change_();
                   arm();
                 });
}

AddressWatch::Changes AddressWatch::drain() {
  Changes changes;
  alignas(nlmsghdr) char buf[8192];
  for (;;) {
    const ssize_t n = ::recv(fd_.native_handle(), buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOBUFS) {
        // Events were lost: the caller reads the addresses again anyway, and any interface may
        // have been renamed unseen.
        links_.reload();
        changes.addresses = changes.links = true;
        continue;
      }
      return changes;  // EAGAIN: drained
    }
    // libmnl's walk, not NLMSG_NEXT: the macro's char* cast trips clang's -Wcast-align.
    int remaining = static_cast<int>(n);
    for (auto* nlh = reinterpret_cast<const nlmsghdr*>(buf); mnl_nlmsg_ok(nlh, remaining);
         nlh = mnl_nlmsg_next(nlh, &remaining)) {
      if (nlh->nlmsg_type == RTM_NEWADDR || nlh->nlmsg_type == RTM_DELADDR) changes.addresses = true;
      // A renamed interface's addresses are under its new name now.
      if (links_.apply(nlh)) changes.addresses = changes.links = true;
    }
  }
}

}  // namespace pairwall::io
