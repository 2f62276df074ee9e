// The advertisement path on one VIP interface for one address family: a UDP socket bound to the
// group and the interface, joined to the group there, sending with TTL / hop limit 255 and
// reporting the TTL / hop limit of what it receives (RFC 5798 5.1.1.3 / 5.1.2.3).
#pragma once

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace pairwall::failover {

class AdvertSocket {
 public:
  // (frame, ttl or -1 when the kernel did not say)
  using Receive = std::function<void(std::span<const uint8_t>, int)>;

  AdvertSocket(boost::asio::io_context& io, std::string ifname, int family, std::span<const uint8_t> group,
               uint16_t port);
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

  const std::string& ifname() const { return ifname_; }
  int family() const { return family_; }

 private:
  void arm();
  void drain();

  boost::asio::posix::stream_descriptor fd_;
  std::string ifname_;
  int family_;
  std::array<uint8_t, 16> group_{};
  uint16_t port_;
  unsigned ifindex_ = 0;
  Receive receive_;
};

}  // namespace pairwall::failover
