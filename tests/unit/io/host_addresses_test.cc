// The host's addresses by interface, from getifaddrs(3) lists built by hand.
#include "daemon/io/host_addresses.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <catch2/catch.hpp>
#include <deque>
#include <string>

namespace pairwall::io {
namespace {

// A getifaddrs(3) list whose entries live as long as it does.
class IfaddrsList {
 public:
  IfaddrsList& v4(const char* name, const char* address, const char* mask) {
    sockaddr_in& a = v4_.emplace_back();
    a.sin_family = AF_INET;
    inet_pton(AF_INET, address, &a.sin_addr);
    sockaddr_in& m = v4_.emplace_back();
    m.sin_family = AF_INET;
    inet_pton(AF_INET, mask, &m.sin_addr);
    return add(name, reinterpret_cast<sockaddr*>(&a), reinterpret_cast<sockaddr*>(&m));
  }
  IfaddrsList& v6(const char* name, const char* address, const char* mask) {
    sockaddr_in6& a = v6_.emplace_back();
    a.sin6_family = AF_INET6;
    inet_pton(AF_INET6, address, &a.sin6_addr);
    sockaddr_in6& m = v6_.emplace_back();
    m.sin6_family = AF_INET6;
    inet_pton(AF_INET6, mask, &m.sin6_addr);
    return add(name, reinterpret_cast<sockaddr*>(&a), reinterpret_cast<sockaddr*>(&m));
  }
  IfaddrsList& link(const char* name) { return add(name, nullptr, nullptr); }

  const ifaddrs* head() const { return entries_.empty() ? nullptr : &entries_.front(); }

 private:
  IfaddrsList& add(const char* name, sockaddr* address, sockaddr* mask) {
    ifaddrs& e = entries_.emplace_back();
    e.ifa_name = names_.emplace_back(name).data();
    e.ifa_addr = address;
    e.ifa_netmask = mask;
    if (entries_.size() > 1) entries_[entries_.size() - 2].ifa_next = &e;
    return *this;
  }

  // Deques: an entry's address stays put as more are added.
  std::deque<ifaddrs> entries_;
  std::deque<std::string> names_;
  std::deque<sockaddr_in> v4_;
  std::deque<sockaddr_in6> v6_;
};

std::string text(const engine::rules::InterfaceAddress& a) {
  return engine::to_string(a.family, a.address) + "/" + std::to_string(a.prefix_length);
}

std::vector<std::string> texts(const engine::rules::InterfaceAddresses& all, const std::string& name) {
  std::vector<std::string> out;
  const auto it = all.find(name);
  if (it == all.end()) return out;
  for (const auto& a : it->second) out.push_back(text(a));
  return out;
}

TEST_CASE("an IPv4 alias's label lists its address under its interface", "[host_addresses]") {
  IfaddrsList list;
  list.link("eth0")
      .link("eth1")
      .v4("eth0", "192.0.2.1", "255.255.255.0")
      .v4("eth0:1", "198.51.100.7", "255.255.255.128")  // ifupdown's eth0:1 stanza
      .v4("eth0:vip", "203.0.113.9", "255.255.255.255")
      .v4("eth1", "10.0.0.1", "255.0.0.0")
      .v6("eth0", "2001:db8::1", "ffff:ffff:ffff:ffff::")
      .v6("eth0", "fe80::1", "ffff:ffff:ffff:ffff::");
  const auto all = interface_addresses_of(list.head());
  CHECK(texts(all, "eth0") ==
        std::vector<std::string>{"192.0.2.1/24", "198.51.100.7/25", "203.0.113.9/32", "2001:db8::1/64"});
  CHECK(texts(all, "eth1") == std::vector<std::string>{"10.0.0.1/8"});
  CHECK(all.size() == 2);  // no interface named after a label
}

TEST_CASE("an interface without addresses is listed, empty", "[host_addresses]") {
  IfaddrsList list;
  list.link("dummy0");
  const auto all = interface_addresses_of(list.head());
  REQUIRE(all.count("dummy0") == 1);
  CHECK(all.at("dummy0").empty());
}

}  // namespace
}  // namespace pairwall::io
