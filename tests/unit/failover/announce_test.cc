// The announcement frames, byte by byte against RFC 826 / RFC 5227 and RFC 4861.
#include "failover/announce.h"

#include <catch2/catch.hpp>

namespace pf = pairwall::failover;

TEST_CASE("gratuitous ARP is an ARP announcement: request, sender = target = VIP", "[announce]") {
  const std::array<uint8_t, 6> mac{0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
  const uint8_t vip[4] = {10, 31, 0, 1};
  const auto f = pf::Announcer::arp_announcement(mac, vip);
  const std::array<uint8_t, 28> expected{
      0x00, 0x01,                          // hardware: Ethernet
      0x08, 0x00,                          // protocol: IPv4
      6,    4,                             // address lengths
      0x00, 0x01,                          // op: request (RFC 5227 2.3)
      0x02, 0x11, 0x22, 0x33, 0x44, 0x55,  // sender hardware: ours
      10,   31,   0,    1,                 // sender protocol: the VIP
      0,    0,    0,    0,    0,    0,     // target hardware: zero
      10,   31,   0,    1,                 // target protocol: the VIP
  };
  CHECK(f == expected);
}

TEST_CASE("unsolicited NA: Override set, Solicited clear, Router as the interface forwards, target option",
          "[announce]") {
  const std::array<uint8_t, 6> mac{0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
  uint8_t vip[16] = {0xfd, 0x31};
  vip[15] = 1;
  CHECK(pf::Announcer::neighbour_advertisement(mac, vip, true)[4] == 0xa0);  // R=1 S=0 O=1 (RFC 5798 6.4.2)
  const auto f = pf::Announcer::neighbour_advertisement(mac, vip, false);
  CHECK(f[0] == 136);  // RFC 4861 4.4
  CHECK(f[1] == 0);
  CHECK(f[4] == 0x20);  // R=0 S=0 O=1
  CHECK(f[5] == 0);
  CHECK(std::equal(vip, vip + 16, f.begin() + 8));
  CHECK(f[24] == 2);  // target link-layer address option
  CHECK(f[25] == 1);  // 8 bytes
  CHECK(std::equal(mac.begin(), mac.end(), f.begin() + 26));
}
