#include "failover/vips.h"

#include <ifaddrs.h>
#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <string_view>
#include <system_error>

namespace pairwall::failover {

// MNL_SOCKET_BUFFER_SIZE is computed at run time; 8 KiB holds any message we send or receive
// (the kernel caps one dump message at a page or 8 KiB, whichever is larger, on this platform).
constexpr std::size_t kNetlinkBuffer = 8192;

AddressNetlink::AddressNetlink() {
  nl_ = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
  if (!nl_) throw std::system_error(errno, std::generic_category(), "failover: rtnetlink socket");
  if (mnl_socket_bind(nl_, 0, MNL_SOCKET_AUTOPID) < 0) {
    const int err = errno;
    mnl_socket_close(nl_);
    throw std::system_error(err, std::generic_category(), "failover: rtnetlink bind");
  }
  portid_ = mnl_socket_get_portid(nl_);
  seq_ = static_cast<uint32_t>(std::time(nullptr));
}

AddressNetlink::~AddressNetlink() {
  if (nl_) mnl_socket_close(nl_);
}

// Enough for any signal storm we could expect, and for every reply a few failed requests left.
constexpr int kNetlinkInterruptions = 8;
constexpr int kNetlinkStrayMessages = 64;

int await_netlink_ack(uint32_t seq, uint32_t portid, const NetlinkReceive& receive) noexcept {
  char buf[kNetlinkBuffer];
  int interrupted = 0;
  int stray = 0;
  for (;;) {
    const ssize_t n = receive(buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR && ++interrupted < kNetlinkInterruptions) continue;
      return errno;
    }
    int left = static_cast<int>(n);
    for (const auto* nlh = reinterpret_cast<const nlmsghdr*>(buf); mnl_nlmsg_ok(nlh, left);
         nlh = mnl_nlmsg_next(nlh, &left)) {
      if (nlh->nlmsg_seq != seq) {
        if (++stray >= kNetlinkStrayMessages) return EPROTO;
        continue;
      }
      const int rc = mnl_cb_run(nlh, nlh->nlmsg_len, seq, portid, nullptr, nullptr);
      if (rc == MNL_CB_ERROR) return errno;
      if (rc == MNL_CB_STOP) return 0;
      // MNL_CB_OK: the ack is still to come.
    }
  }
}

int AddressNetlink::request(nlmsghdr* nlh) noexcept {
  nlh->nlmsg_seq = ++seq_;
  for (int interrupted = 0; mnl_socket_sendto(nl_, nlh, nlh->nlmsg_len) < 0;) {
    if (errno != EINTR || ++interrupted >= kNetlinkInterruptions) return errno;
  }
  return await_netlink_ack(nlh->nlmsg_seq, portid_,
                           [this](void* buf, std::size_t len) { return mnl_socket_recvfrom(nl_, buf, len); });
}

namespace {

nlmsghdr* address_message(char* buf, uint16_t type, uint16_t flags, unsigned ifindex, const Vip& vip) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = type;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
  auto* ifa = static_cast<ifaddrmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifaddrmsg)));
  ifa->ifa_family = static_cast<uint8_t>(vip.family);
  ifa->ifa_prefixlen = vip.prefix_len;
  ifa->ifa_scope = RT_SCOPE_UNIVERSE;
  ifa->ifa_index = ifindex;
  const auto len = static_cast<uint16_t>(vip.family == AF_INET ? 4 : 16);
  mnl_attr_put(nlh, IFA_LOCAL, len, vip.address.data());
  mnl_attr_put(nlh, IFA_ADDRESS, len, vip.address.data());
  return nlh;
}

}  // namespace

int AddressNetlink::add(unsigned ifindex, const Vip& vip, uint32_t lease_s) noexcept {
  char buf[kNetlinkBuffer];
  nlmsghdr* nlh = address_message(buf, RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE, ifindex, vip);
  if (vip.family == AF_INET6) {
    auto* ifa = static_cast<ifaddrmsg*>(mnl_nlmsg_get_payload(nlh));
    ifa->ifa_flags = IFA_F_NODAD;
    mnl_attr_put_u32(nlh, IFA_FLAGS, IFA_F_NODAD);
  }
  if (lease_s > 0) {
    ifa_cacheinfo ci{};
    ci.ifa_prefered = lease_s;
    ci.ifa_valid = lease_s;
    mnl_attr_put(nlh, IFA_CACHEINFO, sizeof ci, &ci);
  }
  return request(nlh);
}

int AddressNetlink::remove(unsigned ifindex, const Vip& vip) noexcept {
  char buf[kNetlinkBuffer];
  return request(address_message(buf, RTM_DELADDR, 0, ifindex, vip));
}

VipSet::VipSet(std::vector<Vip> vips, uint32_t lease_s) : vips_(std::move(vips)), lease_s_(lease_s) {}

namespace {

void note_failure(VipResult& r, const Vip& vip, int err) {
  ++r.failed;
  if (r.error.empty()) r.error = vip.interface + " " + vip.text() + ": " + std::strerror(err);
}

bool absent(int err) {
  return err == EADDRNOTAVAIL || err == ENOENT || err == ENODEV || err == ESRCH;
}

}  // namespace

VipResult VipSet::acquire() {
  VipResult r;
  for (const auto& vip : vips_) {
    const unsigned ifindex = if_nametoindex(vip.interface.c_str());
    const int err = ifindex ? nl_.add(ifindex, vip, lease_s_) : ENODEV;
    if (err) {
      note_failure(r, vip, err);
    } else {
      ++r.changed;
    }
  }
  return r;
}

VipResult VipSet::release() {
  VipResult r;
  for (const auto& vip : vips_) {
    const unsigned ifindex = if_nametoindex(vip.interface.c_str());
    if (!ifindex) continue;  // the interface is gone, and its addresses with it
    const int err = nl_.remove(ifindex, vip);
    if (!err) {
      ++r.changed;
    } else if (!absent(err)) {
      note_failure(r, vip, err);
    }
  }
  return r;
}

VipResult VipSet::replace(std::vector<Vip> vips, uint32_t lease_s) {
  std::vector<Vip> dropped;
  for (const Vip& vip : vips_) {
    if (std::find(vips.begin(), vips.end(), vip) == vips.end()) dropped.push_back(vip);
  }
  vips_ = std::move(dropped);
  const VipResult r = release();
  vips_ = std::move(vips);
  lease_s_ = lease_s;
  return r;
}

std::optional<std::size_t> count_present(const std::vector<Vip>& vips) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return std::nullopt;
  const std::size_t present = count_present(vips, list);
  freeifaddrs(list);
  return present;
}

std::size_t count_present(const std::vector<Vip>& vips, const ifaddrs* list) {
  std::size_t present = 0;
  for (const Vip& vip : vips) {
    for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_name == nullptr || i->ifa_addr->sa_family != vip.family) continue;
      const std::string_view label = i->ifa_name;
      if (label.substr(0, label.find(':')) != vip.interface) continue;
      const void* bytes =
          vip.family == AF_INET
              ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr)
              : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr);
      if (std::memcmp(bytes, vip.address.data(), vip.family == AF_INET ? 4 : 16) == 0) {
        ++present;
        break;
      }
    }
  }
  return present;
}

std::size_t release_vips_from_config(const FailoverConfig& config, std::vector<std::string>* errors) {
  if (config.driver != Driver::Builtin) return 0;
  try {
    VipSet set(config.vips, 0);
    const VipResult r = set.release();
    if (r.failed && errors) errors->push_back("failover: removing VIPs: " + r.error);
    return r.changed;
  } catch (const std::system_error& e) {
    if (errors) errors->push_back(e.what());
    return 0;
  }
}

}  // namespace pairwall::failover
