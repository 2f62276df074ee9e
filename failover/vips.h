// The group's virtual addresses in the kernel, through rtnetlink (libmnl).
//
// A VIP is added with a finite lifetime (IFA_CACHEINFO valid_lft = preferred_lft = the lease) and
// the master renews it while it holds the group. A pairwalld killed with -9 cannot release its
// VIPs (LAB-NOTES.md), but its kernel drops them itself when the lease runs out, so the old master
// stops answering ARP/ND for them a few seconds after the new one took over; until then the new
// master's repeated announcements keep the neighbours' caches on its side. IPv6 VIPs are added with
// IFA_F_NODAD: the address moves between the two nodes and must be usable at once.
#pragma once

#include <ifaddrs.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "failover/failover_config.h"

struct mnl_socket;
struct nlmsghdr;

namespace pairwall::failover {

// One datagram of the rtnetlink socket, as recvfrom(2) reads it: its length, or -1 and errno.
using NetlinkReceive = std::function<ssize_t(void* buf, std::size_t len)>;

// Reads until the ack of request `seq` and returns its error (0: done), or the errno value of a
// read that failed. Messages of other requests are passed over: a read that failed earlier (a
// signal, EINTR) leaves its request's ack queued, and taking that ack for the next request's
// would fail every request from then on. Gives up, with EINTR or EPROTO, after a few interrupted
// reads or many messages not ours, rather than spin.
int await_netlink_ack(uint32_t seq, uint32_t portid, const NetlinkReceive& receive) noexcept;

class AddressNetlink {
 public:
  AddressNetlink();  // throws std::system_error when no rtnetlink socket can be opened
  ~AddressNetlink();
  AddressNetlink(const AddressNetlink&) = delete;
  AddressNetlink& operator=(const AddressNetlink&) = delete;

  // Adds `vip` on `ifindex`, or renews its lifetime if present. lease_s 0: permanent.
  // Returns 0 or an errno value.
  int add(unsigned ifindex, const Vip& vip, uint32_t lease_s) noexcept;
  // Returns 0, or an errno value; EADDRNOTAVAIL / ENOENT / ENODEV mean it was not there.
  int remove(unsigned ifindex, const Vip& vip) noexcept;

 private:
  int request(nlmsghdr* nlh) noexcept;

  mnl_socket* nl_ = nullptr;
  unsigned portid_ = 0;
  uint32_t seq_ = 0;
};

struct VipResult {
  std::size_t changed = 0;  // added / renewed, or removed
  std::size_t failed = 0;
  std::string error;  // the first failure, for the log: "lan0 10.1.0.1/24: No such device"
};

class VipSet {
 public:
  VipSet(std::vector<Vip> vips, uint32_t lease_s);

  VipResult acquire();  // add every VIP, or renew its lease
  VipResult release();  // remove every VIP; one already gone is not a failure
  // A reload's VIPs and lease: the VIPs no longer listed are removed (the result says how that
  // went), and acquire() adds the others from then on, with the new lease.
  VipResult replace(std::vector<Vip> vips, uint32_t lease_s);
  const std::vector<Vip>& vips() const { return vips_; }
  uint32_t lease_s() const { return lease_s_; }

 private:
  AddressNetlink nl_;
  std::vector<Vip> vips_;
  uint32_t lease_s_;
};

// How many of `vips` are on their interfaces now (getifaddrs), whoever put them there; nullopt
// when the addresses could not be read.
std::optional<std::size_t> count_present(const std::vector<Vip>& vips);
// The same in a getifaddrs(3) list. An IPv4 address is listed under its label, which keepalived's
// `label` (and ifupdown's aliases) make "lan0:vip": no interface name holds a colon, so the
// interface is the name before it.
std::size_t count_present(const std::vector<Vip>& vips, const ifaddrs* list);

// For `pairwalld --cleanup` and the unit's ExecStopPost: removes this node's VIPs of the builtin
// driver (with driver "keepalived" they are keepalived's and are left alone). Returns how many
// were present and removed; failures other than "not there" are appended to `errors`.
std::size_t release_vips_from_config(const FailoverConfig& config,
                                     std::vector<std::string>* errors = nullptr);

}  // namespace pairwall::failover
