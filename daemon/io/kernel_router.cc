#include "daemon/io/kernel_router.h"

#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "daemon/engine/siphash.h"

namespace pairwall::io {

namespace {

// A route answer is one message of a few hundred bytes; an error quotes the request.
constexpr std::size_t kNetlinkBuffer = 8192;

struct Answer {
  uint32_t oif = 0;
  uint8_t type = RTN_UNSPEC;
  // RTA_MULTIPATH's paths, in the kernel's order (a route entry asked for with RTM_F_FIB_MATCH).
  std::array<uint32_t, engine::kMaxRoutePaths> paths{};
  std::size_t path_count = 0;
};

// The ifindex of each struct rtnexthop in an RTA_MULTIPATH attribute, up to kMaxRoutePaths.
void read_paths(const nlattr* multipath, Answer& answer) {
  const auto* at = static_cast<const uint8_t*>(mnl_attr_get_payload(multipath));
  std::size_t left = mnl_attr_get_payload_len(multipath);
  while (left >= sizeof(rtnexthop) && answer.path_count < answer.paths.size()) {
    rtnexthop nh;
    std::memcpy(&nh, at, sizeof nh);
    if (nh.rtnh_len < sizeof(rtnexthop) || nh.rtnh_len > left) return;
    answer.paths[answer.path_count++] = static_cast<uint32_t>(nh.rtnh_ifindex);
    const std::size_t step = RTNH_ALIGN(nh.rtnh_len);
    if (step >= left) return;
    at += step;
    left -= step;
  }
}

int read_route(const nlmsghdr* nlh, void* data) {
  auto& answer = *static_cast<Answer*>(data);
  const auto* rtm = static_cast<const rtmsg*>(mnl_nlmsg_get_payload(nlh));
  answer.type = rtm->rtm_type;
  mnl_attr_parse(
      nlh, sizeof(rtmsg),
      [](const nlattr* attr, void* out) {
        auto& a = *static_cast<Answer*>(out);
        if (mnl_attr_get_type(attr) == RTA_OIF && mnl_attr_validate(attr, MNL_TYPE_U32) >= 0)
          a.oif = mnl_attr_get_u32(attr);
        if (mnl_attr_get_type(attr) == RTA_MULTIPATH) read_paths(attr, a);
        return MNL_CB_OK;
      },
      &answer);
  return MNL_CB_OK;
}

// A unicast route's answer: its one path, or a multipath route's every path.
RouteAnswer unicast(const Answer& answer) {
  RouteAnswer out{answer.oif, true};
  if (answer.path_count == 0) return out;
  if (out.ifindex == 0) out.ifindex = answer.paths[0];
  std::size_t other = 0;
  for (std::size_t i = 0; i < answer.path_count && other < out.other_ifindexes.size(); ++i) {
    if (answer.paths[i] != out.ifindex) out.other_ifindexes[other++] = answer.paths[i];
  }
  return out;
}

}  // namespace

RouteNetlink::~RouteNetlink() {
  if (nl_ != nullptr) mnl_socket_close(nl_);
}

bool RouteNetlink::open() noexcept {
  nl_ = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
  if (nl_ == nullptr) return false;
  const timeval timeout{0, kAnswerTimeoutMs * 1000};
  if (mnl_socket_bind(nl_, 0, MNL_SOCKET_AUTOPID) < 0 ||
      setsockopt(mnl_socket_get_fd(nl_), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout) < 0) {
    mnl_socket_close(nl_);
    nl_ = nullptr;
    return false;
  }
  portid_ = mnl_socket_get_portid(nl_);
  seq_ = static_cast<uint32_t>(std::time(nullptr));
  return true;
}

std::optional<RouteAnswer> RouteNetlink::ask(const engine::RouteQuery& query) noexcept {
  if (nl_ == nullptr && !open()) return std::nullopt;
  char buf[kNetlinkBuffer];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_GETROUTE;
  nlh->nlmsg_flags = NLM_F_REQUEST;
  nlh->nlmsg_seq = ++seq_;
  auto* rtm = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(rtmsg)));
  const bool v4 = query.family == engine::Family::V4;
  rtm->rtm_family = v4 ? AF_INET : AF_INET6;
  rtm->rtm_dst_len = rtm->rtm_src_len = v4 ? 32 : 128;
  if (query.every_path) rtm->rtm_flags |= RTM_F_FIB_MATCH;
  uint8_t address[16];
  for (const auto& [type, value] : {std::pair{RTA_DST, &query.dst}, std::pair{RTA_SRC, &query.src}}) {
    if (v4) {
      value->to_v4_bytes(address);
    } else {
      value->to_v6_bytes(address);
    }
    mnl_attr_put(nlh, type, v4 ? 4 : 16, address);
  }
  if (query.in_link != 0) mnl_attr_put_u32(nlh, RTA_IIF, query.in_link);
  if (query.mark != 0) mnl_attr_put_u32(nlh, RTA_MARK, query.mark);
  if (mnl_socket_sendto(nl_, nlh, nlh->nlmsg_len) < 0) return std::nullopt;

  // Answers to questions that timed out may still arrive first: they carry older sequences.
  for (;;) {
    const ssize_t n = mnl_socket_recvfrom(nl_, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;  // EAGAIN: no answer within kAnswerTimeoutMs
    }
    int left = static_cast<int>(n);
    for (const auto* reply = reinterpret_cast<const nlmsghdr*>(buf); mnl_nlmsg_ok(reply, left);
         reply = mnl_nlmsg_next(reply, &left)) {
      if (reply->nlmsg_seq != seq_ || reply->nlmsg_pid != portid_) continue;
      // An error is the kernel's answer too: it has no route for the packet (unreachable,
      // prohibit or blackhole, a martian source, forwarding off on the arrival link), and will
      // drop it.
      if (reply->nlmsg_type != RTM_NEWROUTE || reply->nlmsg_len < mnl_nlmsg_size(sizeof(rtmsg)))
        return RouteAnswer{};
      Answer answer;
      read_route(reply, &answer);
      switch (answer.type) {
        case RTN_UNICAST:
          return unicast(answer);
        case RTN_LOCAL:
        case RTN_BROADCAST:
        case RTN_MULTICAST:
        case RTN_ANYCAST:
          return RouteAnswer{0, true};
        default:
          return RouteAnswer{};
      }
    }
  }
}

KernelRouter::KernelRouter(IfindexCache& ifaces, RouteAsk ask) : ifaces_(ifaces), ask_(std::move(ask)) {}

std::size_t KernelRouter::slot_of(const engine::RouteQuery& query) noexcept {
  // Unkeyed: the slots only spread the answers; a crafted collision costs a question, no more.
  const uint64_t words[4] = {query.dst.hi, query.dst.lo,
                             (uint64_t{query.in_link} << 32) | (uint64_t{query.every_path} << 8) |
                                 static_cast<uint8_t>(query.family),
                             query.mark};
  return engine::siphash13(engine::SipKey{0, 0}, words, 4) % kSlots;
}

engine::Route KernelRouter::route(const engine::RouteQuery& query, engine::Millis now) noexcept {
  Slot& slot = slots_[slot_of(query)];
  const bool kept = slot.used && now < slot.until && slot.family == query.family && slot.dst == query.dst &&
                    slot.in_link == query.in_link && slot.mark == query.mark &&
                    slot.every_path == query.every_path;
  if (!kept) {
    asked_.add();
    std::optional<RouteAnswer> answer = ask_ ? ask_(query) : netlink_.ask(query);
    // Unanswered, the connection meets its in pass alone, as without a router. The failure is
    // kept like an answer, so that a kernel that does not answer costs a worker one wait per
    // destination and kKeep, not one per connection.
    if (!answer) failed_.add();
    const RouteAnswer taken = answer.value_or(RouteAnswer{});
    slot =
        Slot{query.family, query.dst, query.in_link, query.mark, query.every_path, taken, true, now + kKeep};
  }
  const auto iface = [this](uint32_t ifindex) {
    return ifindex == 0 ? engine::kNoIface : ifaces_.lookup(ifindex).id;
  };
  engine::Route route{iface(slot.answer.ifindex), slot.answer.exists};
  for (std::size_t i = 0; i < route.other_paths.size(); ++i)
    route.other_paths[i] = iface(slot.answer.other_ifindexes[i]);
  return route;
}

}  // namespace pairwall::io
