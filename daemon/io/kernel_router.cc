#include "daemon/io/kernel_router.h"

#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <ctime>

#include "daemon/engine/siphash.h"

namespace pairwall::io {

namespace {

// A route answer is one message of a few hundred bytes; an error quotes the request.
constexpr std::size_t kNetlinkBuffer = 8192;

struct Answer {
  uint32_t oif = 0;
  uint8_t type = RTN_UNSPEC;
};

int read_route(const nlmsghdr* nlh, void* data) {
  auto& answer = *static_cast<Answer*>(data);
  const auto* rtm = static_cast<const rtmsg*>(mnl_nlmsg_get_payload(nlh));
  answer.type = rtm->rtm_type;
  mnl_attr_parse(
      nlh, sizeof(rtmsg),
      [](const nlattr* attr, void* out) {
        if (mnl_attr_get_type(attr) == RTA_OIF && mnl_attr_validate(attr, MNL_TYPE_U32) >= 0)
          static_cast<Answer*>(out)->oif = mnl_attr_get_u32(attr);
        return MNL_CB_OK;
      },
      &answer);
  return MNL_CB_OK;
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
          return RouteAnswer{answer.oif, true};
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
                             (uint64_t{query.in_link} << 32) | static_cast<uint8_t>(query.family),
                             query.mark};
  return engine::siphash13(engine::SipKey{0, 0}, words, 4) % kSlots;
}

engine::Route KernelRouter::route(const engine::RouteQuery& query, engine::Millis now) noexcept {
  Slot& slot = slots_[slot_of(query)];
  const bool kept = slot.used && now < slot.until && slot.family == query.family && slot.dst == query.dst &&
                    slot.in_link == query.in_link && slot.mark == query.mark;
  if (!kept) {
    asked_.add();
    std::optional<RouteAnswer> answer = ask_ ? ask_(query) : netlink_.ask(query);
    // Unanswered, the connection meets its in pass alone, as without a router. The failure is
    // kept like an answer, so that a kernel that does not answer costs a worker one wait per
    // destination and kKeep, not one per connection.
    if (!answer) failed_.add();
    const RouteAnswer taken = answer.value_or(RouteAnswer{});
    slot = Slot{query.family, query.dst, query.in_link, query.mark, taken, true, now + kKeep};
  }
  const uint32_t ifindex = slot.answer.ifindex;
  return {ifindex == 0 ? engine::kNoIface : ifaces_.lookup(ifindex).id, slot.answer.exists};
}

}  // namespace pairwall::io
