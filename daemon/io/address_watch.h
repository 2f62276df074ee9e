// Changes of the host's interface addresses, from rtnetlink's address events (RTMGRP_IPV4_IFADDR,
// RTMGRP_IPV6_IFADDR) on an io_context: rules that name interfaces as addresses follow them.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>

namespace pairwall::io {

class AddressWatch {
 public:
  // `on_change` runs on the io_context after events that added or removed an address were read
  // (or were lost: the kernel's queue overflowed), once per batch; it reads the addresses itself.
  AddressWatch(boost::asio::io_context& io, std::function<void()> on_change);
  ~AddressWatch();
  AddressWatch(const AddressWatch&) = delete;
  AddressWatch& operator=(const AddressWatch&) = delete;

  void start();  // throws std::system_error

 private:
  void arm();
  bool drain();  // true when an address was added or removed, or events were lost

  std::function<void()> on_change_;
  boost::asio::posix::stream_descriptor fd_;
};

}  // namespace pairwall::io
