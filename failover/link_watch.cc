#include "failover/link_watch.h"

#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <system_error>

namespace pairwall::failover {

// MNL_SOCKET_BUFFER_SIZE is computed at run time; 8 KiB holds any message we send or receive
// (the kernel caps one dump message at a page or 8 KiB, whichever is larger, on this platform).
constexpr std::size_t kNetlinkBuffer = 8192;

LinkWatch::LinkWatch(boost::asio::io_context& io, std::vector<std::string> names,
                     std::function<void()> on_change)
    : on_change_(std::move(on_change)), fd_(io), retry_timer_(io) {
  for (auto& n : names) links_.push_back(Link{std::move(n), 0, false});
}

LinkWatch::~LinkWatch() {
  stop();
}

std::size_t LinkWatch::with_carrier() const {
  std::size_t n = 0;
  for (const auto& l : links_) n += l.carrier;
  return n;
}

void LinkWatch::start() {
  nl_ = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (!nl_) throw std::system_error(errno, std::generic_category(), "failover: link watch socket");
  if (mnl_socket_bind(nl_, RTMGRP_LINK, MNL_SOCKET_AUTOPID) < 0) {
    const int err = errno;
    mnl_socket_close(nl_);
    nl_ = nullptr;
    throw std::system_error(err, std::generic_category(), "failover: link watch bind");
  }
  start(Transport{mnl_socket_get_fd(nl_),
                  [this](const void* buf, std::size_t len) { return mnl_socket_sendto(nl_, buf, len); },
                  [this](void* buf, std::size_t len) { return mnl_socket_recvfrom(nl_, buf, len); }});
}

void LinkWatch::start(Transport transport) {
  transport_ = std::move(transport);
  started_ = true;
  // The first read is synchronous: the service decides its first role from it.
  read_links_now();
  changed_ = false;
  fd_.assign(transport_.fd);
  arm();
}

void LinkWatch::read_links_now() {
  request_dump();
  const int fd = transport_.fd;
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  if (dump_seq_ != 0) read_pending(true);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);  // later reads end at EAGAIN
}

void LinkWatch::watch(std::vector<std::string> names) {
  std::vector<Link> links;
  std::vector<bool> in_dump;
  bool added = false;
  for (std::string& name : names) {
    const auto known =
        std::find_if(links_.begin(), links_.end(), [&](const Link& l) { return l.name == name; });
    if (known == links_.end()) {
      added = true;
      links.push_back(Link{std::move(name), 0, false});
      in_dump.push_back(false);
    } else {
      links.push_back(*known);
      const auto i = static_cast<std::size_t>(known - links_.begin());
      in_dump.push_back(i < in_dump_.size() && in_dump_[i]);
    }
  }
  links_ = std::move(links);
  in_dump_ = std::move(in_dump);
  // A dump in flight ends before the one asked here, which reads every link again.
  if (started_ && added) read_links_now();
}

void LinkWatch::stop() {
  if (!started_) return;
  started_ = false;
  boost::system::error_code ec;
  retry_timer_.cancel(ec);
  fd_.cancel(ec);
  fd_.release();  // the fd belongs to the mnl socket, or to whoever gave the transport
  if (nl_) mnl_socket_close(nl_);
  nl_ = nullptr;
}

void LinkWatch::request_dump() {
  if (dump_seq_ != 0) {
    dump_again_ = true;
    return;
  }
  char buf[kNetlinkBuffer];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_GETLINK;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  dump_seq_ = static_cast<uint32_t>(std::time(nullptr)) | 1;
  nlh->nlmsg_seq = dump_seq_;
  auto* ifi = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifi->ifi_family = AF_UNSPEC;
  if (transport_.send(nlh, nlh->nlmsg_len) < 0) {
    // Without a dump the links read "no carrier" (a fault at start) until an event names them.
    dump_seq_ = 0;
    retry_dump_later();
  }
  // Links keep what they hold until the dump has ended: cleared first, they would read "no carrier"
  // to anyone looking meanwhile, and stay so if the dump never ended.
  in_dump_.assign(links_.size(), false);
}

void LinkWatch::retry_dump_later() {
  if (retry_pending_) return;
  retry_pending_ = true;
  const auto delay = std::min<std::chrono::milliseconds>(kDumpRetryFirst * (1 << std::min(dump_retries_, 10)),
                                                         kDumpRetryMax);
  ++dump_retries_;
  retry_timer_.expires_after(delay);
  retry_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !started_) return;
    retry_pending_ = false;
    request_dump();
  });
}

void LinkWatch::end_dump(bool complete) {
  dump_seq_ = 0;
  dumps_failed_ = complete ? 0 : dumps_failed_ + 1;
  if (complete) {
    dump_retries_ = 0;
    for (std::size_t i = 0; i < links_.size(); ++i) {
      if (in_dump_[i] || (links_[i].ifindex == 0 && !links_[i].carrier)) continue;
      links_[i].carrier_losses += links_[i].carrier;
      links_[i].ifindex = 0;
      links_[i].carrier = false;
      changed_ = true;
    }
  } else if (dumps_failed_ < 3) {
    dump_again_ = true;  // refused or cut short: the table is still to be read
  } else if (!dump_again_) {
    retry_dump_later();
  }
  if (dump_again_) {
    dump_again_ = false;
    request_dump();
  }
}

int LinkWatch::on_message(const nlmsghdr* nlh) {
  if (nlh->nlmsg_type != RTM_NEWLINK && nlh->nlmsg_type != RTM_DELLINK) return MNL_CB_OK;
  const auto* ifi = static_cast<const ifinfomsg*>(mnl_nlmsg_get_payload(nlh));
  // A bridge tells of its ports on the same group in messages of its own family, and of a port
  // leaving it with an RTM_DELLINK (br_ifinfo_notify): the link is still there.
  if (ifi->ifi_family != AF_UNSPEC) return MNL_CB_OK;
  struct Attrs {
    const char* name = nullptr;
    int operstate = IF_OPER_UNKNOWN;
  } attrs;
  mnl_attr_parse(
      nlh, sizeof(*ifi),
      [](const nlattr* attr, void* data) {
        auto* a = static_cast<Attrs*>(data);
        if (mnl_attr_get_type(attr) == IFLA_IFNAME && mnl_attr_validate(attr, MNL_TYPE_STRING) >= 0) {
          a->name = mnl_attr_get_str(attr);
        } else if (mnl_attr_get_type(attr) == IFLA_OPERSTATE && mnl_attr_validate(attr, MNL_TYPE_U8) >= 0) {
          a->operstate = mnl_attr_get_u8(attr);
        }
        return MNL_CB_OK;
      },
      &attrs);
  const char* name = attrs.name;
  const int operstate = attrs.operstate;
  for (std::size_t i = 0; i < links_.size(); ++i) {
    Link& l = links_[i];
    const bool same_index = l.ifindex != 0 && l.ifindex == static_cast<unsigned>(ifi->ifi_index);
    const bool same_name = name ? l.name == name : same_index;
    if (!same_name && !same_index) continue;
    // The kernel builds a dump's parts as they are read: a link created, or renamed to our name,
    // after the dump passed its place is told by an event between two parts and by no part. What
    // that event says is as new as the dump, and must survive its end.
    if (same_name && dump_seq_ != 0) in_dump_[i] = true;
    Link next = l;
    // Our link's index under another name: it was renamed, and no link has our name until an
    // event names one; kept, it would show the carrier of a link the VIPs are no longer on.
    if (nlh->nlmsg_type == RTM_DELLINK || !same_name) {
      next.ifindex = 0;
      next.carrier = false;
    } else {
      next.ifindex = static_cast<unsigned>(ifi->ifi_index);
      next.carrier = (ifi->ifi_flags & IFF_UP) && (ifi->ifi_flags & IFF_LOWER_UP) &&
                     (operstate == IF_OPER_UP || operstate == IF_OPER_UNKNOWN);
    }
    if (l.carrier && (!next.carrier || next.ifindex != l.ifindex)) ++next.carrier_losses;
    if (next.ifindex != l.ifindex || next.carrier != l.carrier) changed_ = true;
    l = next;
  }
  return MNL_CB_OK;
}

bool LinkWatch::read_pending(bool until_dump_done) {
  char buf[kNetlinkBuffer];
  for (int i = 0; i < 256; ++i) {
    const ssize_t n = transport_.receive(buf, sizeof buf);
    if (n < 0) {
      if (errno == ENOBUFS) {
        // Events were lost: read everything again rather than guess.
        ++resyncs_;
        request_dump();
        changed_ = true;
        continue;
      }
      break;  // EAGAIN: drained
    }
    // Events carry seq 0 and dump replies our own: seq 0 / port 0 accept both. The callback
    // sees link messages only; NLMSG_DONE (or an error) ending our dump returns STOP / ERROR.
    const int rc = mnl_cb_run(
        buf, static_cast<size_t>(n), 0, 0,
        [](const nlmsghdr* nlh, void* self) { return static_cast<LinkWatch*>(self)->on_message(nlh); }, this);
    if (rc <= MNL_CB_STOP && dump_seq_ != 0) end_dump(rc == MNL_CB_STOP);
    if (until_dump_done && dump_seq_ == 0) break;
  }
  // A dump half read says nothing of the links it has yet to name: what changed is told once it
  // has ended.
  if (dump_seq_ != 0) return false;
  const bool changed = changed_;
  changed_ = false;
  return changed;
}

void LinkWatch::arm() {
  fd_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                 [this](const boost::system::error_code& ec) {
                   if (ec) return;  // cancelled by stop()
                   if (read_pending(false) && on_change_) on_change_();
                   arm();
                 });
}

}  // namespace pairwall::failover
