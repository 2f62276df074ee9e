#include "daemon/io/host_addresses.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <bit>
#include <cerrno>
#include <string>
#include <string_view>
#include <system_error>

namespace pairwall::io {
namespace {

uint8_t prefix_length(const sockaddr* mask, std::size_t bytes) {
  if (mask == nullptr) return static_cast<uint8_t>(bytes * 8);
  const auto* p =
      mask->sa_family == AF_INET
          ? reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(mask)->sin_addr)
          : reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr);
  unsigned length = 0;
  for (std::size_t i = 0; i < bytes; ++i) length += static_cast<unsigned>(std::popcount(p[i]));
  return static_cast<uint8_t>(length);
}

}  // namespace

engine::rules::InterfaceAddresses host_interface_addresses() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw std::system_error(errno, std::generic_category(), "getifaddrs");
  try {
    engine::rules::InterfaceAddresses out = interface_addresses_of(list);
    freeifaddrs(list);
    return out;
  } catch (...) {
    freeifaddrs(list);
    throw;
  }
}

engine::rules::InterfaceAddresses interface_addresses_of(const ifaddrs* list) {
  engine::rules::InterfaceAddresses out;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_name == nullptr) continue;
    const std::string_view label = i->ifa_name;
    auto& addresses = out[std::string(label.substr(0, label.find(':')))];
    if (i->ifa_addr == nullptr) continue;
    engine::rules::InterfaceAddress a;
    if (i->ifa_addr->sa_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      a.family = engine::Family::V4;
      a.address = engine::IpAddress::from_v4_bytes(reinterpret_cast<const uint8_t*>(&in->sin_addr));
      a.prefix_length = prefix_length(i->ifa_netmask, 4);
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) continue;
      a.family = engine::Family::V6;
      a.address = engine::IpAddress::from_v6_bytes(reinterpret_cast<const uint8_t*>(&in6->sin6_addr));
      a.prefix_length = prefix_length(i->ifa_netmask, 16);
    } else {
      continue;
    }
    addresses.push_back(a);
  }
  return out;
}

}  // namespace pairwall::io
