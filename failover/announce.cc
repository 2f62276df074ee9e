#include "failover/announce.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/icmp6.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <system_error>

namespace pairwall::failover {
namespace {

// net.ipv6.conf.IFACE.forwarding, as keepalived reads it for its advertisements' Router flag.
bool ipv6_forwarding(unsigned ifindex) {
  char name[IF_NAMESIZE] = {};
  if (!if_indextoname(ifindex, name)) return false;
  std::ifstream in(std::string("/proc/sys/net/ipv6/conf/") + name + "/forwarding");
  int value = 0;
  return static_cast<bool>(in >> value) && value != 0;
}

}  // namespace

Announcer::Announcer() {
  packet_fd_ = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, 0);  // protocol 0: send only
  if (packet_fd_ < 0) throw std::system_error(errno, std::generic_category(), "failover: AF_PACKET socket");
  icmp6_fd_ = socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMPV6);
  if (icmp6_fd_ < 0) {
    const int err = errno;
    ::close(packet_fd_);
    throw std::system_error(err, std::generic_category(), "failover: ICMPv6 socket");
  }
  // RFC 4861 7.1.2: a receiver drops neighbour discovery with any other hop limit.
  const int hops = 255;
  setsockopt(icmp6_fd_, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, &hops, sizeof hops);
  // We only send; nothing should queue up on this socket.
  icmp6_filter filter;
  ICMP6_FILTER_SETBLOCKALL(&filter);
  setsockopt(icmp6_fd_, IPPROTO_ICMPV6, ICMP6_FILTER, &filter, sizeof filter);
}

Announcer::~Announcer() {
  if (packet_fd_ >= 0) ::close(packet_fd_);
  if (icmp6_fd_ >= 0) ::close(icmp6_fd_);
}

int Announcer::hardware_address(unsigned ifindex, std::array<uint8_t, 6>& mac) noexcept {
  ifreq ifr{};
  if (!if_indextoname(ifindex, ifr.ifr_name)) return errno;
  if (ioctl(packet_fd_, SIOCGIFHWADDR, &ifr) < 0) return errno;
  std::memcpy(mac.data(), ifr.ifr_hwaddr.sa_data, 6);
  return 0;
}

std::array<uint8_t, 28> Announcer::arp_announcement(const std::array<uint8_t, 6>& mac, const uint8_t* ipv4) {
  std::array<uint8_t, 28> f{};
  f[0] = 0;  // hardware type Ethernet (1)
  f[1] = ARPHRD_ETHER;
  f[2] = 0x08;  // protocol IPv4
  f[3] = 0x00;
  f[4] = 6;
  f[5] = 4;
  f[6] = 0;
  f[7] = ARPOP_REQUEST;  // RFC 5227 2.3: an announcement is a request, target hardware zero
  std::memcpy(&f[8], mac.data(), 6);
  std::memcpy(&f[14], ipv4, 4);
  std::memcpy(&f[24], ipv4, 4);
  return f;
}

std::array<uint8_t, 32> Announcer::neighbour_advertisement(const std::array<uint8_t, 6>& mac,
                                                           const uint8_t* ipv6, bool router) {
  std::array<uint8_t, 32> f{};
  f[0] = ND_NEIGHBOR_ADVERT;
  f[1] = 0;                     // code; checksum (2..3) by the kernel
  f[4] = router ? 0xa0 : 0x20;  // Router as the interface says, Override; Solicited clear
  std::memcpy(&f[8], ipv6, 16);
  f[24] = ND_OPT_TARGET_LINKADDR;
  f[25] = 1;  // length in units of 8 bytes
  std::memcpy(&f[26], mac.data(), 6);
  return f;
}

int Announcer::announce(const Vip& vip, unsigned ifindex) noexcept {
  std::array<uint8_t, 6> mac{};
  if (const int err = hardware_address(ifindex, mac)) return err;
  ssize_t n;
  if (vip.family == AF_INET) {
    const auto frame = arp_announcement(mac, vip.address.data());
    sockaddr_ll ll{};
    ll.sll_family = AF_PACKET;
    ll.sll_protocol = htons(ETH_P_ARP);
    ll.sll_ifindex = static_cast<int>(ifindex);
    ll.sll_halen = 6;
    std::memset(ll.sll_addr, 0xff, 6);
    n = sendto(packet_fd_, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&ll), sizeof ll);
  } else {
    const auto frame = neighbour_advertisement(mac, vip.address.data(), ipv6_forwarding(ifindex));
    sockaddr_in6 dst{};
    dst.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "ff02::1", &dst.sin6_addr);
    dst.sin6_scope_id = ifindex;
    n = sendto(icmp6_fd_, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&dst), sizeof dst);
  }
  return n < 0 ? errno : 0;
}

}  // namespace pairwall::failover
