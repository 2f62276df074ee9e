// The advertisement path on one VIP interface for one address family: a UDP socket bound to the
// interface, sending with TTL / hop limit 255 and reporting the TTL / hop limit of what it
// receives (RFC 5798 5.1.1.3 / 5.1.2.3). To a group, it is bound to the group and joined to it
// there; to a peer (carppeer), bound to the port on any address.
#pragma once

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "failover/failover_config.h"

namespace pairwall::failover {

class AdvertSocket {
 public:
  // (frame, ttl or -1 when the kernel did not say, the sender's address: IPv4 in the first 4 bytes)
  using Receive = std::function<void(std::span<const uint8_t>, int, const std::array<uint8_t, 16>&)>;

  AdvertSocket(boost::asio::io_context& io, AdvertChannel channel);
  ~AdvertSocket();
  AdvertSocket(const AdvertSocket&) = delete;
  AdvertSocket& operator=(const AdvertSocket&) = delete;

  // (Re)opens the socket on the interface's current index and starts receiving. Throws
  // std::system_error naming the interface.
  void open(Receive receive);
  void close();
  bool is_open() const { return fd_.is_open(); }

  // 0 or an errno value.
  int send(std::span<const uint8_t> frame) noexcept;

  const AdvertChannel& channel() const { return channel_; }
  const std::string& ifname() const { return channel_.interface; }
  int family() const { return channel_.family; }

 private:
  void arm();
  void drain();

  boost::asio::posix::stream_descriptor fd_;
  AdvertChannel channel_;
  unsigned ifindex_ = 0;
  Receive receive_;
};

}  // namespace pairwall::failover
