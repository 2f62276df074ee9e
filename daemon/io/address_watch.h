// Changes of the host's interfaces, from rtnetlink's events on an io_context: address events
// (RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR), so that rules naming interfaces as addresses follow
// them; link events (RTMGRP_LINK), so that an interface renamed (`ip link set eth1 name lan0`,
// udev) or removed while the daemon runs is known by its new name at once, not at the next reload:
// the workers map the kernel's ifindexes to names once and keep them (ifindex_cache.h).
#pragma once

#include <linux/netlink.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

namespace pairwall::io {

// The names of the host's interfaces by ifindex, kept from link events, to tell the events that
// change what an ifindex names from the many that do not (carrier, MTU, operstate).
class LinkNames {
 public:
  // Forgets what it knew and reads every interface's name now (if_nameindex(3)); false when the
  // kernel cannot be asked.
  bool reload();
  void set(uint32_t ifindex, std::string name) { names_[ifindex] = std::move(name); }

  // Takes in one rtnetlink message. Returns true when it renamed or removed an interface known
  // before; a new interface, or any other message, is no change.
  bool apply(const nlmsghdr* nlh);

 private:
  std::unordered_map<uint32_t, std::string> names_;
};

class AddressWatch {
 public:
  // `on_change` runs on the io_context after events that added or removed an address were read
  // (or were lost: the kernel's queue overflowed), once per batch; it reads the addresses itself.
  // `on_links` (may be empty) likewise after events that renamed or removed an interface.
  AddressWatch(boost::asio::io_context& io, std::function<void()> on_change,
               std::function<void()> on_links = {});
  ~AddressWatch();
  AddressWatch(const AddressWatch&) = delete;
  AddressWatch& operator=(const AddressWatch&) = delete;

  void start();  // throws std::system_error

 private:
  struct Changes {
    bool addresses = false;
    bool links = false;
  };
  void arm();
  Changes drain();

  std::function<void()> on_change_;
  std::function<void()> on_links_;
  LinkNames links_;
  boost::asio::posix::stream_descriptor fd_;
};

}  // namespace pairwall::io
