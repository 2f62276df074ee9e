#include "daemon/io/nfq_socket.h"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

// After <arpa/inet.h>: glibc's netinet/in.h must come before the kernel's linux/in.h.
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>

#include "daemon/io/kernel_queue_stats.h"

namespace pairwall::io {
namespace {

constexpr std::size_t kSendBufferBytes = 256 * 1024;
constexpr int kSndbufRequest = 4 << 20;
// Headroom in a receive slot above the copied payload, for the packet's other attributes.
constexpr std::size_t kSlotHeadroom = 4096;
constexpr int kAckTimeoutMs = 5000;

std::size_t verdict_message_size(std::size_t payload) {
  std::size_t size = MNL_NLMSG_HDRLEN + MNL_ALIGN(sizeof(nfgenmsg)) + MNL_ATTR_HDRLEN +
                     MNL_ALIGN(sizeof(nfqnl_msg_verdict_hdr));
  if (payload != 0) size += MNL_ATTR_HDRLEN + MNL_ALIGN(payload);
  size += MNL_ATTR_HDRLEN + MNL_ALIGN(sizeof(uint32_t));  // NFQA_MARK, when the packet is claimed
  return size;
}

std::string errno_text(int err) {
  return std::string(std::strerror(err));
}

// Whether the attributes run exactly to the end of the message. libmnl's walk stops without a
// word at one that does not fit what is left: a cut-off payload would pass for a packet without
// one (copy mode meta), and garbage after the last attribute for nothing at all.
bool attributes_fill(const nlmsghdr* nlh) {
  const auto* tail = static_cast<const char*>(mnl_nlmsg_get_payload_tail(nlh));
  auto* attr = static_cast<const nlattr*>(mnl_nlmsg_get_payload_offset(nlh, sizeof(nfgenmsg)));
  while (mnl_attr_ok(attr, static_cast<int>(tail - reinterpret_cast<const char*>(attr))))
    attr = mnl_attr_next(attr);
  return reinterpret_cast<const char*>(attr) >= tail;
}

}  // namespace

bool recover_packet_id(const uint8_t* data, std::size_t size, uint32_t& id) noexcept {
  if (size < MNL_NLMSG_HDRLEN + MNL_ALIGN(sizeof(nfgenmsg))) return false;
  std::size_t offset = MNL_NLMSG_HDRLEN + MNL_ALIGN(sizeof(nfgenmsg));
  while (offset + sizeof(nlattr) <= size) {
    nlattr attr;
    std::memcpy(&attr, data + offset, sizeof(attr));
    if (attr.nla_len < sizeof(nlattr)) return false;
    if ((attr.nla_type & NLA_TYPE_MASK) == NFQA_PACKET_HDR) {
      // Of its own length, as nfq_nlmsg_parse() takes it: a shorter one's id would be read from
      // the next attribute's bytes, and settle some other packet in its place.
      if (attr.nla_len != MNL_ATTR_HDRLEN + sizeof(nfqnl_msg_packet_hdr)) return false;
      if (offset + attr.nla_len > size) return false;
      nfqnl_msg_packet_hdr hdr;
      std::memcpy(&hdr, data + offset + MNL_ATTR_HDRLEN, sizeof(hdr));
      id = ntohl(hdr.packet_id);
      return true;
    }
    offset += MNL_ALIGN(attr.nla_len);
  }
  return false;
}

std::size_t put_verdict(uint8_t* buf, uint16_t queue, const VerdictOp& op, uint32_t claim_mark,
                        std::span<const uint8_t> payload) noexcept {
  const int type = op.kind == VerdictOp::Kind::Batch ? NFQNL_MSG_VERDICT_BATCH : NFQNL_MSG_VERDICT;
  nlmsghdr* nlh = nfq_nlmsg_put(reinterpret_cast<char*>(buf), type, queue);
  nfq_nlmsg_verdict_put(nlh, static_cast<int>(op.id), op.accept ? NF_ACCEPT : NF_DROP);
  if (op.claimed && claim_mark != 0) nfq_nlmsg_verdict_put_mark(nlh, op.mark | claim_mark);
  if (op.with_payload) nfq_nlmsg_verdict_put_pkt(nlh, payload.data(), static_cast<uint32_t>(payload.size()));
  return MNL_ALIGN(nlh->nlmsg_len);
}

MessageStatus parse_queue_message(nlmsghdr* nlh, QueuedPacket& out) noexcept {
  if (nlh->nlmsg_type < NLMSG_MIN_TYPE) return MessageStatus::NotPacket;
  if (NFNL_SUBSYS_ID(nlh->nlmsg_type) != NFNL_SUBSYS_QUEUE ||
      NFNL_MSG_TYPE(nlh->nlmsg_type) != NFQNL_MSG_PACKET) {
    return MessageStatus::NotPacket;
  }
  if (nlh->nlmsg_len < MNL_NLMSG_HDRLEN + MNL_ALIGN(sizeof(nfgenmsg))) return MessageStatus::Malformed;

  nlattr* attr[NFQA_MAX + 1] = {};
  if (nfq_nlmsg_parse(nlh, attr) < 0 || !attributes_fill(nlh)) return MessageStatus::Malformed;
  if (attr[NFQA_PACKET_HDR] == nullptr) return MessageStatus::Malformed;

  out = QueuedPacket{};
  const auto* hdr = static_cast<const nfqnl_msg_packet_hdr*>(mnl_attr_get_payload(attr[NFQA_PACKET_HDR]));
  out.id = ntohl(hdr->packet_id);
  out.hw_protocol = ntohs(hdr->hw_protocol);
  out.hook = hdr->hook;
  if (attr[NFQA_IFINDEX_INDEV]) out.in_ifindex = ntohl(mnl_attr_get_u32(attr[NFQA_IFINDEX_INDEV]));
  if (attr[NFQA_IFINDEX_OUTDEV]) out.out_ifindex = ntohl(mnl_attr_get_u32(attr[NFQA_IFINDEX_OUTDEV]));
  if (attr[NFQA_MARK]) out.mark = ntohl(mnl_attr_get_u32(attr[NFQA_MARK]));
  if (attr[NFQA_SKB_INFO]) {
    const uint32_t info = ntohl(mnl_attr_get_u32(attr[NFQA_SKB_INFO]));
    out.checksum_partial = (info & NFQA_SKB_CSUMNOTREADY) != 0;
    out.gso = (info & NFQA_SKB_GSO) != 0;
  }
  if (attr[NFQA_PAYLOAD]) {
    out.payload = {static_cast<uint8_t*>(mnl_attr_get_payload(attr[NFQA_PAYLOAD])),
                   mnl_attr_get_payload_len(attr[NFQA_PAYLOAD])};
  }
  out.length = static_cast<uint32_t>(out.payload.size());
  // The kernel adds NFQA_CAP_LEN, holding the real length, only when it copied less than that.
  if (attr[NFQA_CAP_LEN]) {
    const uint32_t real_length = ntohl(mnl_attr_get_u32(attr[NFQA_CAP_LEN]));
    if (real_length > out.length) {
      out.length = real_length;
      return MessageStatus::Truncated;
    }
  }
  // No payload at all (copy mode none or meta): nothing can be inspected either.
  if (out.payload.empty()) return MessageStatus::Truncated;
  return MessageStatus::Packet;
}

NfqSocket::NfqSocket(const QueueConfig& config) : config_(config), planner_(config.batch_verdicts) {
  if (config_.recv_batch == 0) config_.recv_batch = 1;
  if (config_.copy_range == 0 || config_.copy_range > 0xffff) config_.copy_range = 0xffff;

  nl_ = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
  if (nl_ == nullptr) {
    throw std::runtime_error("cannot open a netfilter netlink socket for NFQUEUE " +
                             std::to_string(config_.queue) + ": " + errno_text(errno));
  }
  fd_ = mnl_socket_get_fd(nl_);
  try {
    if (mnl_socket_bind(nl_, 0, MNL_SOCKET_AUTOPID) < 0) {
      throw std::runtime_error("cannot bind the netlink socket for NFQUEUE " + std::to_string(config_.queue) +
                               ": " + errno_text(errno));
    }
    int one = 1;
    // Overruns are counted by the kernel (user_dropped) and in our counters; an ENOBUFS error
    // on every recv would add nothing but a failed syscall.
    mnl_socket_setsockopt(nl_, NETLINK_NO_ENOBUFS, &one, sizeof(one));
    // Error replies must not echo a whole 64 KiB verdict payload back at us.
    mnl_socket_setsockopt(nl_, NETLINK_CAP_ACK, &one, sizeof(one));
    mnl_socket_setsockopt(nl_, NETLINK_EXT_ACK, &one, sizeof(one));

    size_receive_buffer(config_.rcvbuf_bytes);

    int sndbuf = kSndbufRequest;
    if (setsockopt(fd_, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf)) != 0) {
      setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    }
    int sndbuf_effective = 0;
    socklen_t len = sizeof(sndbuf_effective);
    getsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &sndbuf_effective, &len);
    // netlink_sendmsg refuses a message longer than sk_sndbuf - 32.
    const std::size_t send_capacity =
        std::min<std::size_t>(kSendBufferBytes, static_cast<std::size_t>(sndbuf_effective) - 64);
    if (send_capacity < verdict_message_size(kMaxVerdictPayload)) {
      throw std::runtime_error(
          "the netlink send buffer of NFQUEUE " + std::to_string(config_.queue) + " is " +
          std::to_string(sndbuf_effective) +
          " bytes, too small for one verdict with a full packet; raise net.core.wmem_max");
    }
    verdicts_ = VerdictBuffer(send_capacity);

    slot_size_ = (config_.copy_range + kSlotHeadroom + 4095) / 4096 * 4096;
    recv_buffer_.resize(slot_size_ * config_.recv_batch);
    msgs_.resize(config_.recv_batch);
    iovs_.resize(config_.recv_batch);
    for (uint32_t i = 0; i < config_.recv_batch; ++i) {
      iovs_[i] = {recv_buffer_.data() + i * slot_size_, slot_size_};
      msgs_[i] = {};
      msgs_[i].msg_hdr.msg_iov = &iovs_[i];
      msgs_[i].msg_hdr.msg_iovlen = 1;
    }

    packets_.resize(config_.recv_batch);
    decisions_.resize(config_.recv_batch);
    order_.reserve(config_.recv_batch);

    configure();
    max_len_.store(config_.max_len, std::memory_order_relaxed);
    fail_open_.store(config_.fail_open, std::memory_order_relaxed);
    const timeval tv{0, kStopCheckMs * 1000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  } catch (...) {
    mnl_socket_close(nl_);
    throw;
  }
}

NfqSocket::~NfqSocket() {
  // Closing the socket unbinds the queue; the kernel drops what is still queued to us, so the
  // verdicts we owe go out first.
  finish_batch();
  mnl_socket_close(nl_);
}

uint32_t NfqSocket::portid() const {
  return mnl_socket_get_portid(nl_);
}

void NfqSocket::size_receive_buffer(int bytes) {
  if (setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) == 0) {
    rcvbuf_forced_.store(true, std::memory_order_relaxed);
  } else if (setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) == 0) {
    rcvbuf_forced_.store(false, std::memory_order_relaxed);
  } else {
    throw std::runtime_error("cannot size the receive buffer of NFQUEUE " + std::to_string(config_.queue) +
                             ": " + errno_text(errno));
  }
  int effective = 0;
  socklen_t len = sizeof(effective);
  getsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &effective, &len);
  rcvbuf_.store(effective, std::memory_order_relaxed);
}

void NfqSocket::set_limits(uint32_t max_len, int rcvbuf_bytes) {
  alignas(nlmsghdr) char buf[256];  // a header and one attribute
  nlmsghdr* nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, config_.queue);
  nfq_nlmsg_cfg_put_qmaxlen(nlh, max_len);
  if (mnl_socket_sendto(nl_, nlh, nlh->nlmsg_len) < 0) {
    throw std::runtime_error("cannot send the queue length of NFQUEUE " + std::to_string(config_.queue) +
                             ": " + errno_text(errno));
  }
  max_len_.store(max_len, std::memory_order_relaxed);
  size_receive_buffer(rcvbuf_bytes);
}

void NfqSocket::set_flags(bool fail_open, bool gso) {
  alignas(nlmsghdr) char buf[256];  // a header and two attributes
  nlmsghdr* nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, config_.queue);
  const uint32_t flags = (fail_open ? NFQA_CFG_F_FAIL_OPEN : 0) | (gso ? NFQA_CFG_F_GSO : 0);
  mnl_attr_put_u32(nlh, NFQA_CFG_FLAGS, htonl(flags));
  mnl_attr_put_u32(nlh, NFQA_CFG_MASK, htonl(NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO));  // the others stay
  if (mnl_socket_sendto(nl_, nlh, nlh->nlmsg_len) < 0) {
    throw std::runtime_error("cannot send the flags of NFQUEUE " + std::to_string(config_.queue) + ": " +
                             errno_text(errno));
  }
  fail_open_.store(fail_open, std::memory_order_relaxed);
}

void NfqSocket::configure() {
  // One message binds and configures, so that the queue never exists with the kernel's
  // defaults (copy mode none, 1024 packets) for longer than that one call.
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = nfq_nlmsg_put(buf.data(), NFQNL_MSG_CONFIG, config_.queue);
  nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, NFQNL_CFG_CMD_BIND);
  nfq_nlmsg_cfg_put_params(nlh, NFQNL_COPY_PACKET, static_cast<int>(config_.copy_range));
  nfq_nlmsg_cfg_put_qmaxlen(nlh, config_.max_len);
  uint32_t flags = 0;
  if (config_.gso) flags |= NFQA_CFG_F_GSO;
  if (config_.fail_open) flags |= NFQA_CFG_F_FAIL_OPEN;
  // Conntrack and uid/gid attributes cost per-packet work in the kernel that we do not use.
  const uint32_t mask = NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_CONNTRACK | NFQA_CFG_F_UID_GID;
  mnl_attr_put_u32(nlh, NFQA_CFG_FLAGS, htonl(flags));
  mnl_attr_put_u32(nlh, NFQA_CFG_MASK, htonl(mask));
  const uint32_t seq = 1;
  nlh->nlmsg_flags |= NLM_F_ACK;
  nlh->nlmsg_seq = seq;

  const std::string what = "NFQUEUE " + std::to_string(config_.queue);
  if (mnl_socket_sendto(nl_, nlh, nlh->nlmsg_len) < 0) {
    throw std::runtime_error("cannot send the configuration of " + what + ": " + errno_text(errno));
  }

  // Packets may reach the socket before the acknowledgement; they go back through the hook
  // (NF_REPEAT) and are queued again once we are ready for them.
  int error = -1;
  int waited_ms = 0;
  while (error < 0) {
    pollfd pfd{fd_, POLLIN, 0};
    const int ready = poll(&pfd, 1, 100);
    if (ready < 0 && errno != EINTR) {
      throw std::runtime_error("waiting for the kernel to confirm " + what + ": " + errno_text(errno));
    }
    if (ready <= 0) {
      waited_ms += 100;
      if (waited_ms >= kAckTimeoutMs) {
        throw std::runtime_error("the kernel did not confirm the configuration of " + what + " within " +
                                 std::to_string(kAckTimeoutMs / 1000) + " s");
      }
      continue;
    }
    const ssize_t got = recv(fd_, recv_buffer_.data(), slot_size_, 0);
    if (got < 0) {
      if (errno == EINTR || errno == ENOBUFS) continue;
      throw std::runtime_error("reading the configuration reply of " + what + ": " + errno_text(errno));
    }
    int remaining = static_cast<int>(got);
    auto* msg = reinterpret_cast<nlmsghdr*>(recv_buffer_.data());
    while (mnl_nlmsg_ok(msg, remaining)) {
      if (msg->nlmsg_type == NLMSG_ERROR && msg->nlmsg_seq == seq) {
        const auto* err = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(msg));
        error = -err->error;
        break;
      }
      QueuedPacket packet;
      const auto status = parse_queue_message(msg, packet);
      if (status == MessageStatus::Packet || status == MessageStatus::Truncated) {
        std::vector<char> out(MNL_SOCKET_BUFFER_SIZE);
        nlmsghdr* verdict = nfq_nlmsg_put(out.data(), NFQNL_MSG_VERDICT, config_.queue);
        nfq_nlmsg_verdict_put(verdict, static_cast<int>(packet.id), NF_REPEAT);
        mnl_socket_sendto(nl_, verdict, verdict->nlmsg_len);
        counters_.startup_repeats.add();
      }
      msg = mnl_nlmsg_next(msg, &remaining);
    }
  }
  if (error == 0) return;

  if (error == EPERM || error == EBUSY) {
    std::optional<KernelQueueStats> bound;
    try {
      bound = find_queue(read_kernel_queue_stats(), config_.queue);
    } catch (const std::exception&) {
    }
    if (bound && bound->peer_portid != portid()) {
      throw std::runtime_error(
          what + " is already bound by netlink port " + std::to_string(bound->peer_portid) +
          " (another pairwalld or pairwall-nfq-null in this network namespace?); stop it "
          "or use another queue range");
    }
    throw std::runtime_error("binding " + what + " was refused (" + errno_text(error) +
                             "): the process needs CAP_NET_ADMIN in its network namespace");
  }
  if (error == EOPNOTSUPP) {
    throw std::runtime_error("the kernel refused the flags of " + what +
                             " (GSO / fail-open): " + errno_text(error));
  }
  throw std::runtime_error("configuring " + what + " failed: " + errno_text(error));
}

int NfqSocket::receive() noexcept {
  const int n = recvmmsg(fd_, msgs_.data(), static_cast<unsigned>(msgs_.size()), MSG_WAITFORONE, nullptr);
  if (n > 0) {
    counters_.recv_calls.add();
    return n;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK) {
    counters_.polls.add();
    return 0;
  }
  counters_.recv_calls.add();
  if (errno == ENOBUFS) {
    counters_.enobufs.add();
  } else if (errno != EINTR) {
    counters_.recv_errors.add();
    poll(nullptr, 0, 1);
  }
  return 0;
}

bool NfqSocket::collect(int slot, std::size_t& offset) noexcept {
  const mmsghdr& msg = msgs_[static_cast<std::size_t>(slot)];
  uint8_t* base = recv_buffer_.data() + static_cast<std::size_t>(slot) * slot_size_;
  if (offset == 0 && ((msg.msg_hdr.msg_flags & MSG_TRUNC) != 0 || msg.msg_len > slot_size_)) {
    if (batch_full()) return false;
    // Cannot happen with copy_range below the slot size; if it does, settle the packet by the
    // fail-open policy rather than leave it queued forever.
    counters_.oversize.add();
    offset = slot_size_;
    uint32_t id = 0;
    if (recover_packet_id(base, slot_size_, id)) {
      counters_.packets.add();
      settle_uninspected(id);
    } else {
      counters_.malformed.add();
    }
    return true;
  }
  while (offset < msg.msg_len) {
    if (batch_full()) return false;
    int remaining = static_cast<int>(msg.msg_len - offset);
    auto* nlh = reinterpret_cast<nlmsghdr*>(base + offset);
    if (!mnl_nlmsg_ok(nlh, remaining)) {
      counters_.malformed.add();
      offset = msg.msg_len;
      return true;
    }
    offset += MNL_ALIGN(nlh->nlmsg_len);
    QueuedPacket& packet = packets_[collected_];
    switch (parse_queue_message(nlh, packet)) {
      case MessageStatus::Packet:
        counters_.packets.add();
        counters_.bytes.add(packet.length);
        order_.push_back({packet.id, static_cast<uint32_t>(collected_), Decision::Drop});
        ++collected_;
        break;
      case MessageStatus::Truncated:
        counters_.packets.add();
        counters_.bytes.add(packet.length);
        counters_.truncated.add();
        // The bytes past the copy range cannot be seen, nor can a verdict give the packet back
        // whole with new bytes: it cannot be judged. Accepted unseen whatever the rules say, any
        // packet that a merge (GRO) made longer than the copy range would get past them.
        settle_uninspected(packet.id);
        break;
      case MessageStatus::NotPacket:
        if (nlh->nlmsg_type == NLMSG_ERROR && nlh->nlmsg_len >= MNL_NLMSG_HDRLEN + sizeof(int) &&
            static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh))->error != 0) {
          counters_.netlink_errors.add();
        }
        break;
      case MessageStatus::Malformed: {
        counters_.malformed.add();
        // Settled by the fail-open policy where its id can be read: left alone, the next batch
        // verdict would settle it, and accept it uninspected.
        uint32_t id = 0;
        if (recover_packet_id(reinterpret_cast<const uint8_t*>(nlh), nlh->nlmsg_len, id))
          settle_uninspected(id);
        break;
      }
    }
  }
  return true;
}

void NfqSocket::settle_uninspected(uint32_t id) noexcept {
  counters_.uninspected.add();
  settle_later(id, fail_open_.load(std::memory_order_relaxed) ? Decision::Accept : Decision::Drop);
}

void NfqSocket::settle_later(uint32_t id, Decision decision) noexcept {
  // Not planned at once: a batch verdict planned for this id would also settle the lower ids
  // collected before it and not yet decided.
  order_.push_back({id, kNoPacket, decision});
}

void NfqSocket::plan_collected() noexcept {
  for (const Settle& s : order_) {
    if (s.packet == kNoPacket) {
      plan(s.id, s.decision, nullptr);
    } else {
      plan(s.id, decisions_[s.packet], &packets_[s.packet]);
    }
  }
  order_.clear();
  collected_ = 0;
}

void NfqSocket::plan(uint32_t id, Decision decision, const QueuedPacket* packet) noexcept {
  if (decision == Decision::Held) {
    const VerdictSteps steps = planner_.hold();
    for (uint8_t i = 0; i < steps.count; ++i) append(steps.ops[i], {});
    return;
  }
  if (rewritten(decision) && (packet == nullptr || packet->payload.size() > kMaxVerdictPayload)) {
    // The translated bytes cannot be returned; accepting the original would leak what NAT hides.
    counters_.rewrite_too_large.add();
    decision = Decision::Drop;
  }
  count(decision);
  const VerdictSteps steps = planner_.add(id, decision, packet != nullptr ? packet->mark : 0);
  for (uint8_t i = 0; i < steps.count; ++i) {
    append(steps.ops[i], steps.ops[i].with_payload ? std::span<const uint8_t>(packet->payload)
                                                   : std::span<const uint8_t>());
  }
}

void NfqSocket::settle_held(uint32_t id, Decision decision, std::span<const uint8_t> bytes,
                            uint32_t mark) noexcept {
  planner_.released();
  if (rewritten(decision) && bytes.size() > kMaxVerdictPayload) {
    counters_.rewrite_too_large.add();
    decision = Decision::Drop;
  }
  count(decision);
  const VerdictOp op{VerdictOp::Kind::Single, id,  decision != Decision::Drop, rewritten(decision),
                     claimed(decision),       mark};
  append(op, op.with_payload ? bytes : std::span<const uint8_t>());
}

void NfqSocket::count(Decision decision) noexcept {
  switch (decision) {
    case Decision::Accept:
    case Decision::AcceptClaimed:
      counters_.accepted.add();
      break;
    case Decision::AcceptRewritten:
    case Decision::AcceptRewrittenClaimed:
      counters_.rewritten.add();
      break;
    case Decision::Drop:
      counters_.dropped.add();
      break;
    case Decision::Held:
      break;
  }
}

void NfqSocket::append(const VerdictOp& op, std::span<const uint8_t> payload) noexcept {
  const std::size_t need = verdict_message_size(payload.size());
  // Nothing goes past verdicts the kernel has not taken (verdict_buffer.h): the worker waits for
  // it rather than let a later batch verdict settle their packets.
  while (!verdicts_.fits(need) && !send_pending()) poll(nullptr, 0, 1);
  verdicts_.commit(put_verdict(verdicts_.tail(), config_.queue, op, config_.claim_mark, payload));
  counters_.verdict_messages.add();
  if (op.kind == VerdictOp::Kind::Batch) counters_.batch_verdicts.add();
}

void NfqSocket::finish_batch() noexcept {
  const VerdictSteps steps = planner_.flush();
  for (uint8_t i = 0; i < steps.count; ++i) append(steps.ops[i], {});
  send_pending();
}

bool NfqSocket::send_pending() noexcept {
  if (verdicts_.used() == 0) return true;
  const bool sent = verdicts_.flush([this](std::span<const uint8_t> messages) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (mnl_socket_sendto(nl_, messages.data(), messages.size()) >= 0) return true;
      if (errno != EINTR && errno != ENOBUFS && errno != EAGAIN) break;
    }
    return false;
  });
  (sent ? counters_.send_calls : counters_.send_errors).add();
  return sent;
}

}  // namespace pairwall::io
