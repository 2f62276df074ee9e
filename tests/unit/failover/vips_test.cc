// The VIPs' kernel side without the kernel: getifaddrs(3) lists built by hand.
#include "failover/vips.h"

#include <arpa/inet.h>
#include <linux/netlink.h>
#include <netinet/in.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <deque>
#include <string>
#include <variant>
#include <vector>

#include "failover/failover_service.h"

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

// The kernel's side of the rtnetlink socket: datagrams queued for reading, or a read's error.
class FakeKernel {
 public:
  static constexpr uint32_t kPortid = 4242;

  // The ack (NLMSG_ERROR) of request `seq`; `error` 0 or a negative errno, as the kernel writes it.
  FakeKernel& ack(uint32_t seq, int error = 0) {
    std::vector<uint8_t> d(NLMSG_LENGTH(sizeof(nlmsgerr)));
    auto* nlh = reinterpret_cast<nlmsghdr*>(d.data());
    nlh->nlmsg_len = static_cast<uint32_t>(d.size());
    nlh->nlmsg_type = NLMSG_ERROR;
    nlh->nlmsg_seq = seq;
    nlh->nlmsg_pid = kPortid;
    auto* err = static_cast<nlmsgerr*>(NLMSG_DATA(nlh));
    err->error = error;
    err->msg.nlmsg_seq = seq;
    queue_.emplace_back(std::move(d));
    return *this;
  }
  FakeKernel& fail(int err) {
    queue_.emplace_back(err);
    return *this;
  }
  // Every read past the queue fails with `err`, or (0) returns a stale ack, for ever.
  FakeKernel& then_always(int err) {
    forever_ = err;
    return *this;
  }

  NetlinkReceive receive() {
    return [this](void* buf, std::size_t len) -> ssize_t {
      ++reads_;
      if (queue_.empty()) {
        if (forever_ != 0) {
          errno = forever_;
          return -1;
        }
        ack(1);  // not the request's
      }
      auto next = std::move(queue_.front());
      queue_.erase(queue_.begin());
      if (const int* err = std::get_if<int>(&next)) {
        errno = *err;
        return -1;
      }
      const auto& d = std::get<std::vector<uint8_t>>(next);
      REQUIRE(d.size() <= len);
      std::memcpy(buf, d.data(), d.size());
      return static_cast<ssize_t>(d.size());
    };
  }
  int reads() const { return reads_; }
  std::size_t queued() const { return queue_.size(); }

 private:
  std::vector<std::variant<std::vector<uint8_t>, int>> queue_;
  int forever_ = 0;
  int reads_ = 0;
};

TEST_CASE("await_netlink_ack: the request's own ack, past interrupted reads and others' acks", "[vips]") {
  constexpr uint32_t seq = 1000;
  SECTION("its ack") {
    FakeKernel k;
    k.ack(seq);
    CHECK(await_netlink_ack(seq, FakeKernel::kPortid, k.receive()) == 0);
  }
  SECTION("its ack refusing the request") {
    FakeKernel k;
    k.ack(seq, -EEXIST);
    CHECK(await_netlink_ack(seq, FakeKernel::kPortid, k.receive()) == EEXIST);
  }
  SECTION("a read interrupted by a signal is read again") {
    FakeKernel k;
    k.fail(EINTR).fail(EINTR).ack(seq);
    CHECK(await_netlink_ack(seq, FakeKernel::kPortid, k.receive()) == 0);
    CHECK(k.queued() == 0);
  }
  SECTION("the acks an earlier failed read left queued are passed over, their errors too") {
    FakeKernel k;
    k.ack(seq - 2).ack(seq - 1, -EEXIST).ack(seq);
    CHECK(await_netlink_ack(seq, FakeKernel::kPortid, k.receive()) == 0);
    CHECK(k.queued() == 0);
  }
  SECTION("another error ends the wait") {
    FakeKernel k;
    k.fail(ENOBUFS).ack(seq);
    CHECK(await_netlink_ack(seq, FakeKernel::kPortid, k.receive()) == ENOBUFS);
  }
  SECTION("endless interruptions: it gives up") {
    FakeKernel k;
    k.then_always(EINTR);
    CHECK(await_netlink_ack(seq, FakeKernel::kPortid, k.receive()) == EINTR);
    CHECK(k.reads() < 100);
  }
  SECTION("endless acks of other requests: it gives up") {
    FakeKernel k;
    CHECK(await_netlink_ack(seq, FakeKernel::kPortid, k.receive()) == EPROTO);
    CHECK(k.reads() < 1000);
  }
}

TEST_CASE("await_netlink_ack: a request after one whose read was interrupted succeeds", "[vips]") {
  // The first request's read fails: its ack stays queued in the kernel, ahead of the second's.
  FakeKernel k;
  k.fail(ENOBUFS).ack(7);
  CHECK(await_netlink_ack(7, FakeKernel::kPortid, k.receive()) == ENOBUFS);
  k.ack(8);
  CHECK(await_netlink_ack(8, FakeKernel::kPortid, k.receive()) == 0);
  k.ack(9);
  CHECK(await_netlink_ack(9, FakeKernel::kPortid, k.receive()) == 0);
  CHECK(k.queued() == 0);
}

TEST_CASE("role_from_vips: keepalived's role at start, from the VIPs present", "[vips][keepalived]") {
  struct Row {
    std::optional<std::size_t> present;
    std::size_t total;
    std::optional<Role> role;
  };
  const Row rows[] = {
      {3, 3, Role::Master},
      {0, 3, Role::Backup},
      {1, 3, std::nullopt},  // keepalived is adding or removing them: its next word tells
      {2, 3, std::nullopt},
      {std::nullopt, 3, std::nullopt},  // the addresses could not be read: not "none of them"
      {0, 0, std::nullopt},
  };
  for (const Row& row : rows) {
    INFO((row.present ? std::to_string(*row.present) : "unknown") << " of " << row.total);
    CHECK(role_from_vips(row.present, row.total) == row.role);
  }
}

}  // namespace
}  // namespace pairwall::failover
