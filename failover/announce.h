// Tells the segment where a VIP now lives: a gratuitous ARP for IPv4 (an ARP request with sender =
// target = the VIP, RFC 5227 2.3 "ARP Announcement", broadcast through AF_PACKET) and an
// unsolicited neighbour advertisement for IPv6 (RFC 4861 7.2.6: to all-nodes ff02::1, Override
// set, Solicited clear, Router set where the interface forwards (RFC 5798 6.4.2; a host that saw
// it clear would drop this router's default route, RFC 4861 7.2.5), with our link-layer address,
// hop limit 255). Both update the entries
// neighbours already hold for the VIP, which is what moves traffic to the new master.
#pragma once

#include <array>
#include <cstdint>

#include "failover/failover_config.h"

namespace pairwall::failover {

class Announcer {
 public:
  Announcer();  // throws std::system_error without CAP_NET_RAW
  ~Announcer();
  Announcer(const Announcer&) = delete;
  Announcer& operator=(const Announcer&) = delete;

  // 0 or an errno value.
  int announce(const Vip& vip, unsigned ifindex) noexcept;

  // The frames, exposed for tests.
  static std::array<uint8_t, 28> arp_announcement(const std::array<uint8_t, 6>& mac, const uint8_t* ipv4);
  static std::array<uint8_t, 32> neighbour_advertisement(const std::array<uint8_t, 6>& mac,
                                                         const uint8_t* ipv6, bool router);

 private:
  int hardware_address(unsigned ifindex, std::array<uint8_t, 6>& mac) noexcept;

  int packet_fd_ = -1;  // AF_PACKET, ETH_P_ARP
  int icmp6_fd_ = -1;   // raw ICMPv6; the kernel fills in the checksum
};

}  // namespace pairwall::failover
