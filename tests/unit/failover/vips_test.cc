// The VIPs' kernel side without the kernel: getifaddrs(3) lists built by hand.
#include "failover/vips.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <catch2/catch.hpp>
#include <deque>
#include <string>
#include <vector>

namespace pairwall::failover {
namespace {

// A getifaddrs(3) list whose entries live as long as it does.
class IfaddrsList {
 public:
  struct Entry {
    const char* name;
    int family;  // AF_INET, AF_INET6, or 0: the link's own entry, without an address
    const char* address;
  };

  explicit IfaddrsList(const std::vector<Entry>& entries) {
    for (const Entry& e : entries) {
      sockaddr* address = nullptr;
      if (e.family == AF_INET) {
        sockaddr_in& a = v4_.emplace_back();
        a.sin_family = AF_INET;
        inet_pton(AF_INET, e.address, &a.sin_addr);
        address = reinterpret_cast<sockaddr*>(&a);
      } else if (e.family == AF_INET6) {
        sockaddr_in6& a = v6_.emplace_back();
        a.sin6_family = AF_INET6;
        inet_pton(AF_INET6, e.address, &a.sin6_addr);
        address = reinterpret_cast<sockaddr*>(&a);
      }
      ifaddrs& i = entries_.emplace_back();
      i.ifa_name = names_.emplace_back(e.name).data();
      i.ifa_addr = address;
      if (entries_.size() > 1) entries_[entries_.size() - 2].ifa_next = &i;
    }
  }
  IfaddrsList(const IfaddrsList&) = delete;
  IfaddrsList& operator=(const IfaddrsList&) = delete;

  const ifaddrs* head() const { return entries_.empty() ? nullptr : &entries_.front(); }

 private:
  // Deques: an entry's address stays put as more are added.
  std::deque<ifaddrs> entries_;
  std::deque<std::string> names_;
  std::deque<sockaddr_in> v4_;
  std::deque<sockaddr_in6> v6_;
};

Vip vip(const char* interface, int family, const char* address) {
  Vip v;
  v.interface = interface;
  v.family = family;
  inet_pton(family, address, v.address.data());
  v.prefix_len = family == AF_INET ? 24 : 64;
  return v;
}

TEST_CASE("count_present: a VIP under a label counts as its interface's", "[vips]") {
  const std::vector<Vip> vips = {vip("lan0", AF_INET, "10.1.0.1"), vip("lan1", AF_INET, "10.2.0.1"),
                                 vip("lan0", AF_INET6, "fd00:1::1")};
  struct Row {
    const char* what;
    std::vector<IfaddrsList::Entry> list;
    std::size_t present;
  };
  const Row rows[] = {
      {"none", {{"lan0", 0, nullptr}, {"lan0", AF_INET, "10.1.0.2"}, {"lan1", 0, nullptr}}, 0},
      {"plain names",
       {{"lan0", AF_INET, "10.1.0.1"}, {"lan1", AF_INET, "10.2.0.1"}, {"lan0", AF_INET6, "fd00:1::1"}},
       3},
      // keepalived's virtual_ipaddress with `label lan0:vip`, ifupdown's lan1:1
      {"labels",
       {{"lan0", AF_INET, "10.1.0.2"},
        {"lan0:vip", AF_INET, "10.1.0.1"},
        {"lan1:1", AF_INET, "10.2.0.1"},
        {"lan0", AF_INET6, "fd00:1::1"}},
       3},
      {"a label of another interface", {{"lan1:vip", AF_INET, "10.1.0.1"}}, 0},
      {"a name that only starts alike", {{"lan0x", AF_INET, "10.1.0.1"}, {"lan", AF_INET, "10.1.0.1"}}, 0},
      {"the other family", {{"lan0", AF_INET6, "::ffff:10.1.0.1"}}, 0},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    const IfaddrsList list(row.list);
    CHECK(count_present(vips, list.head()) == row.present);
  }
  CHECK(count_present(vips, nullptr) == 0);
}

}  // namespace
}  // namespace pairwall::failover
