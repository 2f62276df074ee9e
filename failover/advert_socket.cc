#include "failover/advert_socket.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "failover/advert_codec.h"

namespace pairwall::failover {
namespace {

[[noreturn]] void fail(const std::string& ifname, const char* what) {
  throw std::system_error(errno, std::generic_category(),
                          "failover: advertisement socket on " + ifname + ": " + what);
}

void set_int(int fd, int level, int opt, int value, const std::string& ifname, const char* what) {
  if (setsockopt(fd, level, opt, &value, sizeof value) < 0) fail(ifname, what);
}

}  // namespace

AdvertSocket::AdvertSocket(boost::asio::io_context& io, AdvertChannel channel)
    : fd_(io), channel_(std::move(channel)) {}

AdvertSocket::~AdvertSocket() {
  close();
}

void AdvertSocket::close() {
  boost::system::error_code ec;
  fd_.close(ec);
}

void AdvertSocket::open(Receive receive) {
  close();
  receive_ = std::move(receive);
  const std::string& ifname = channel_.interface;
  ifindex_ = if_nametoindex(ifname.c_str());
  if (!ifindex_) fail(ifname, "no such interface");
  const int fd = socket(channel_.family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) fail(ifname, "socket");
  // Closed unless every step below succeeds: a socket without its TTL or membership would send
  // adverts the peer drops, and hear none.
  struct Unfinished {
    int fd;
    ~Unfinished() {
      if (fd >= 0) ::close(fd);
    }
  } unfinished{fd};
  // Both nodes' groups, every interface: several sockets share group:port, each bound to its own
  // device so that a frame is read once, on the interface it arrived on. A peer's channel binds the
  // port on any address of its device: the peer sends to whichever address the node has there.
  set_int(fd, SOL_SOCKET, SO_REUSEADDR, 1, ifname, "SO_REUSEADDR");
  if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, ifname.c_str(), static_cast<socklen_t>(ifname.size())) <
      0) {
    fail(ifname, "SO_BINDTODEVICE");
  }
  const bool group = !channel_.unicast;
  if (channel_.family == AF_INET) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(channel_.port);
    if (group) std::memcpy(&sa.sin_addr, channel_.destination.data(), 4);
    if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0) fail(ifname, "bind");
    if (group) {
      ip_mreqn mreq{};
      std::memcpy(&mreq.imr_multiaddr, channel_.destination.data(), 4);
      mreq.imr_ifindex = static_cast<int>(ifindex_);
      if (setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mreq, sizeof mreq) < 0)
        fail(ifname, "IP_ADD_MEMBERSHIP");
      ip_mreqn out{};
      out.imr_ifindex = static_cast<int>(ifindex_);
      if (setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &out, sizeof out) < 0) fail(ifname, "IP_MULTICAST_IF");
      set_int(fd, IPPROTO_IP, IP_MULTICAST_TTL, kAdvertTtl, ifname, "IP_MULTICAST_TTL");
      set_int(fd, IPPROTO_IP, IP_MULTICAST_LOOP, 0, ifname, "IP_MULTICAST_LOOP");
    } else {
      set_int(fd, IPPROTO_IP, IP_TTL, kAdvertTtl, ifname, "IP_TTL");
    }
    // Only the group this socket joined, if any: not every group some other socket joined.
    set_int(fd, IPPROTO_IP, IP_MULTICAST_ALL, 0, ifname, "IP_MULTICAST_ALL");
    set_int(fd, IPPROTO_IP, IP_RECVTTL, 1, ifname, "IP_RECVTTL");
  } else {
    set_int(fd, IPPROTO_IPV6, IPV6_V6ONLY, 1, ifname, "IPV6_V6ONLY");
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(channel_.port);
    if (group) {
      std::memcpy(&sa.sin6_addr, channel_.destination.data(), 16);
      sa.sin6_scope_id = ifindex_;
    }
    if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0) fail(ifname, "bind");
    if (group) {
      ipv6_mreq mreq{};
      std::memcpy(&mreq.ipv6mr_multiaddr, channel_.destination.data(), 16);
      mreq.ipv6mr_interface = ifindex_;
      if (setsockopt(fd, IPPROTO_IPV6, IPV6_JOIN_GROUP, &mreq, sizeof mreq) < 0)
        fail(ifname, "IPV6_JOIN_GROUP");
      set_int(fd, IPPROTO_IPV6, IPV6_MULTICAST_IF, static_cast<int>(ifindex_), ifname, "IPV6_MULTICAST_IF");
      set_int(fd, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, kAdvertTtl, ifname, "IPV6_MULTICAST_HOPS");
      set_int(fd, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, 0, ifname, "IPV6_MULTICAST_LOOP");
    } else {
      set_int(fd, IPPROTO_IPV6, IPV6_UNICAST_HOPS, kAdvertTtl, ifname, "IPV6_UNICAST_HOPS");
    }
    set_int(fd, IPPROTO_IPV6, IPV6_MULTICAST_ALL, 0, ifname, "IPV6_MULTICAST_ALL");
    set_int(fd, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1, ifname, "IPV6_RECVHOPLIMIT");
  }
  fd_.assign(fd);
  unfinished.fd = -1;
  arm();
}

int AdvertSocket::send(std::span<const uint8_t> frame) noexcept {
  if (!fd_.is_open()) return EBADF;
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (channel_.family == AF_INET) {
    auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(channel_.port);
    std::memcpy(&sa->sin_addr, channel_.destination.data(), 4);
    len = sizeof *sa;
  } else {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
    sa->sin6_family = AF_INET6;
    sa->sin6_port = htons(channel_.port);
    std::memcpy(&sa->sin6_addr, channel_.destination.data(), 16);
    sa->sin6_scope_id = ifindex_;  // a link-local peer's link (or the group's)
    len = sizeof *sa;
  }
  const ssize_t n =
      sendto(fd_.native_handle(), frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&ss), len);
  return n < 0 ? errno : 0;
}

void AdvertSocket::arm() {
  fd_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                 [this](const boost::system::error_code& ec) {
                   if (ec) return;  // closed
                   drain();
                   if (fd_.is_open()) arm();
                 });
}

void AdvertSocket::drain() {
  // Bounded: a flood on the segment cannot keep the loop here.
  for (int i = 0; i < 64 && fd_.is_open(); ++i) {
    uint8_t buf[kAdvertMaxFrame + 1];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int)) * 2];
    iovec iov{buf, sizeof buf};
    sockaddr_storage source{};
    msghdr msg{};
    msg.msg_name = &source;
    msg.msg_namelen = sizeof source;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(fd_.native_handle(), &msg, 0);
    if (n < 0) return;  // EAGAIN, or an error the next wakeup will see again
    int ttl = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL) ||
          (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT)) {
        std::memcpy(&ttl, CMSG_DATA(c), sizeof ttl);
      }
    }
    // A datagram longer than any frame was cut by the buffer: hand it over whole-looking but
    // one byte too long, so the codec refuses it instead of reading a prefix.
    const std::size_t len = (msg.msg_flags & MSG_TRUNC) ? sizeof buf : static_cast<std::size_t>(n);
    std::array<uint8_t, 16> sender{};
    if (source.ss_family == AF_INET) {
      std::memcpy(sender.data(), &reinterpret_cast<const sockaddr_in&>(source).sin_addr, 4);
    } else if (source.ss_family == AF_INET6) {
      std::memcpy(sender.data(), &reinterpret_cast<const sockaddr_in6&>(source).sin6_addr, 16);
    }
    if (receive_) receive_(std::span<const uint8_t>(buf, len), ttl, sender);
  }
}

}  // namespace pairwall::failover
