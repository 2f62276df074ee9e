// One NFQUEUE queue on one netlink socket (libmnl + libnetfilter_queue's mnl API): the socket
// setup, the batched receive, the batched verdicts. It knows nothing of the engine: the caller
// passes a decision function, so pairwalld (engine) and pairwall-nfq-null (accept all) share the
// whole path and differ only in the decision.
//
//   loop: recvmmsg up to `recv_batch` datagrams (one queued packet each), blocking for the first
//         only (MSG_WAITFORONE) — verdicts owed were all sent before (but those of held packets,
//         whose owner waits for them itself), so blocking is safe
//         -> one steady_clock read for the batch
//         -> parse every datagram's attributes into the batch
//         -> decide the whole batch in one call (the engine overlaps its state lookups' misses)
//         -> plan the verdicts in queue order (verdict_plan.h)
//         -> end of batch: close the accept run, send every verdict message in one sendto
//
// A socket belongs to one thread; only counters() may be read from others.
#pragma once

#include <linux/netlink.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "daemon/io/counter.h"
#include "daemon/io/verdict_buffer.h"
#include "daemon/io/verdict_plan.h"

struct mnl_socket;

namespace pairwall::io {

struct QueueConfig {
  uint16_t queue = 0;
  uint32_t max_len = 65536;  // packets the kernel holds for us before it drops (or fails open)
  // Fail open: when the queue or our socket buffer is full, the kernel accepts packets uninspected
  // rather than dropping them. Off by default: a firewall that is overwhelmed should not open.
  bool fail_open = false;
  // Receive GSO packets unsegmented; without it the kernel segments every GSO packet before
  // queueing and TCP throughput falls about tenfold.
  bool gso = true;
  int rcvbuf_bytes = 32 << 20;   // SO_RCVBUFFORCE, falling back to SO_RCVBUF (capped by rmem_max)
  bool batch_verdicts = true;    // false: one verdict message per packet (for measurement)
  uint32_t recv_batch = 64;      // datagrams per recvmmsg
  uint32_t copy_range = 0xffff;  // bytes of each packet copied to us; the kernel's maximum
  uint32_t claim_mark = 0;       // added to a claimed packet's mark (Decision::AcceptClaimed)
};

// One queued packet as the kernel described it. `payload` points into the receive buffer and
// is valid until the decision function returns; it may be rewritten in place.
struct QueuedPacket {
  uint32_t id = 0;
  uint16_t hw_protocol = 0;  // ETH_P_IP / ETH_P_IPV6, host order
  uint8_t hook = 0;          // NF_INET_* where the packet was queued
  uint32_t in_ifindex = 0;   // 0: absent (locally generated)
  uint32_t out_ifindex = 0;  // 0: absent (not yet routed, or local delivery)
  uint32_t length = 0;       // the packet's real length; more than payload.size() when truncated
  uint32_t mark = 0;
  bool checksum_partial = false;  // NFQA_SKB_CSUMNOTREADY: the kernel completes the L4 checksum
  bool gso = false;               // NFQA_SKB_GSO: larger than the MTU, segmented after us
  std::span<uint8_t> payload;
};

enum class MessageStatus : uint8_t {
  Packet,     // a complete packet to decide
  Truncated,  // copy range was smaller than the packet: id valid, payload partial
  NotPacket,  // netlink control message (error/ack, done, noop)
  Malformed,  // attributes did not parse or do not fill the message, or no packet header
};

// Parses one message received on a queue socket. Pure; never reads past nlh->nlmsg_len, which the
// caller has checked against the bytes received. `out.payload` points into the message.
MessageStatus parse_queue_message(nlmsghdr* nlh, QueuedPacket& out) noexcept;

// The packet id of a queue message that cannot be parsed whole (cut short by its receive slot, or
// malformed), read from the attributes that are there: the kernel puts NFQA_PACKET_HDR first.
// Returns false when no whole packet header is there. Reads no byte past data + size.
bool recover_packet_id(const uint8_t* data, std::size_t size, uint32_t& id) noexcept;

// Largest payload a verdict can carry back: the attribute length is 16 bits, header included.
inline constexpr std::size_t kMaxVerdictPayload = 0xffff - 4;

// Writes the verdict message of `op` on `queue` at `buf`, which has room for it, and returns its
// aligned length. A claimed packet leaves with `claim_mark` added to the mark it came with
// (op.mark): the kernel gives the packet the verdict's mark in place of its own, whose other bits
// (policy routing, tc, IPsec) must outlast the claim.
std::size_t put_verdict(uint8_t* buf, uint16_t queue, const VerdictOp& op, uint32_t claim_mark,
                        std::span<const uint8_t> payload) noexcept;

struct QueueCounters {
  Counter packets;           // packet messages received (complete or truncated)
  Counter bytes;             // their real lengths
  Counter recv_calls;        // recvmmsg calls that returned data or an error (not EAGAIN)
  Counter polls;             // receives that waited kStopCheckMs and found nothing
  Counter verdict_messages;  // netlink verdict messages sent (single + batch)
  Counter batch_verdicts;    // of which NFQNL_MSG_VERDICT_BATCH
  Counter send_calls;        // sendto calls carrying verdicts
  Counter enobufs;           // ENOBUFS from recv: the kernel dropped messages for us
  Counter recv_errors;       // other receive errors
  Counter send_errors;       // verdict sends that failed after retries (the verdicts are sent again)
  Counter truncated;         // cap_len < len: longer than the copy range
  Counter uninspected;       // settled by the fail-open policy unseen: truncated, oversize, malformed
  Counter oversize;          // a datagram larger than a receive slot (MSG_TRUNC)
  Counter malformed;         // messages that did not parse
  Counter netlink_errors;    // error replies from the kernel (e.g. a verdict for an unknown id)
  Counter accepted;
  Counter rewritten;  // accepted with new bytes
  Counter dropped;
  Counter rewrite_too_large;  // rewritten packets larger than a verdict can carry: dropped
  Counter startup_repeats;    // packets sent back through the hook (NF_REPEAT) while binding
};

class NfqSocket {
 public:
  // Opens a netlink socket, sizes its buffers and binds it to `config.queue` with copy mode
  // packet, the configured flags and queue length. Throws std::runtime_error with a message
  // saying what failed and what to check (privileges, another listener on the queue, ...).
  explicit NfqSocket(const QueueConfig& config);
  ~NfqSocket();
  NfqSocket(const NfqSocket&) = delete;
  NfqSocket& operator=(const NfqSocket&) = delete;

  uint16_t queue() const { return config_.queue; }
  const QueueConfig& config() const { return config_; }
  int fd() const { return fd_; }
  uint32_t portid() const;
  // The receive buffer as the kernel reports it (twice the request).
  int rcvbuf_bytes() const { return rcvbuf_.load(std::memory_order_relaxed); }
  bool rcvbuf_forced() const { return rcvbuf_forced_.load(std::memory_order_relaxed); }
  uint32_t max_len() const { return max_len_.load(std::memory_order_relaxed); }

  // A reload's [queue] maxlen and rcvbuf_bytes for the running queue, from any thread: the kernel
  // takes a configuration message and a setsockopt whole, whoever else sends on the socket, and
  // the worker need not stop. No acknowledgement is asked for (it would arrive among the packets);
  // a refusal comes back as an error reply, counted as netlink_errors. Throws std::runtime_error
  // naming the queue when the message cannot be sent or the buffer not sized.
  void set_limits(uint32_t max_len, int rcvbuf_bytes);
  // A reload's [queue] fail_open and gso, likewise: the kernel's policy for a full queue and the
  // worker's for a packet it cannot inspect, from the next one on; whether the kernel queues GSO
  // packets whole.
  void set_flags(bool fail_open, bool gso);
  bool fail_open() const { return fail_open_.load(std::memory_order_relaxed); }
  const QueueCounters& counters() const { return counters_; }

  // How long a receive blocks before it returns empty-handed, so that run() sees `stop`. A
  // blocking recvmmsg is one syscall where poll-then-receive is three, at every idle moment.
  static constexpr int kStopCheckMs = 100;

  // Receives and decides one batch, then sends its verdicts. Blocks until packets arrive, at
  // most kStopCheckMs. Returns the number of datagrams handled.
  //
  // decide(std::span<QueuedPacket> packets, std::span<Decision> decisions,
  //        std::chrono::steady_clock::time_point now) must be noexcept and set decisions[i] for
  // packets[i], for every i. It never sees truncated packets: the bytes past the copy range
  // cannot be inspected, so those are settled by the fail-open policy and counted.
  template <typename DecideBatch>
  int run_once(DecideBatch& decide) noexcept;

  // Repeats run_once until `stop` is set: seen after the current batch, within kStopCheckMs
  // when idle.
  template <typename DecideBatch>
  void run(const std::atomic<bool>& stop, DecideBatch& decide) noexcept {
    while (!stop.load(std::memory_order_relaxed)) run_once(decide);
  }

  // The verdict of a packet decided Decision::Held, with its rewritten bytes where the decision
  // says so, and the mark it came with. Sent with the next batch's verdicts, or by send_verdicts().
  void settle_held(uint32_t id, Decision decision, std::span<const uint8_t> bytes, uint32_t mark) noexcept;
  void send_verdicts() noexcept { send_pending(); }

 private:
  void configure();
  void size_receive_buffer(int bytes);
  int receive() noexcept;
  // Parses the datagram in `slot` into the batch: a packet to decide, or a verdict already known
  // (truncated, oversize). Returns false, having added nothing, when the batch is full.
  bool collect(int slot, std::size_t& offset) noexcept;
  // Every collected packet also has its place in order_, so order_ bounds the batch; it never
  // grows past the room reserved at construction.
  bool batch_full() const noexcept { return order_.size() == packets_.size(); }
  void settle_later(uint32_t id, Decision decision) noexcept;
  // A packet that cannot be inspected: accepted with fail_open, dropped without.
  void settle_uninspected(uint32_t id) noexcept;
  // Plans the verdicts of the batch collected so far, in the order the packets arrived.
  void plan_collected() noexcept;
  void plan(uint32_t id, Decision decision, const QueuedPacket* packet) noexcept;
  void count(Decision decision) noexcept;
  void append(const VerdictOp& op, std::span<const uint8_t> payload) noexcept;
  void finish_batch() noexcept;
  // Sends the buffered verdicts; false, with them kept, when the kernel would not take them.
  bool send_pending() noexcept;

  QueueConfig config_;
  mnl_socket* nl_ = nullptr;
  int fd_ = -1;
  std::atomic<int> rcvbuf_{0};
  std::atomic<bool> rcvbuf_forced_{false};
  std::atomic<uint32_t> max_len_{0};
  std::atomic<bool> fail_open_{false};  // the worker reads it where config_.fail_open was at start
  std::size_t slot_size_ = 0;
  std::vector<uint8_t> recv_buffer_;  // recv_batch slots of slot_size_
  std::vector<mmsghdr> msgs_;
  std::vector<iovec> iovs_;
  VerdictBuffer verdicts_;
  VerdictPlanner planner_;

  // The batch between receive and verdicts. `order_` lists every settled packet in arrival order;
  // its `packet` indexes packets_/decisions_, or is kNoPacket for a verdict known without deciding.
  struct Settle {
    uint32_t id;
    uint32_t packet;
    Decision decision;
  };
  static constexpr uint32_t kNoPacket = UINT32_MAX;
  std::vector<QueuedPacket> packets_;
  std::vector<Decision> decisions_;
  std::vector<Settle> order_;
  std::size_t collected_ = 0;
  QueueCounters counters_;
};

template <typename DecideBatch>
int NfqSocket::run_once(DecideBatch& decide) noexcept {
  static_assert(std::is_nothrow_invocable_v<DecideBatch&, std::span<QueuedPacket>, std::span<Decision>,
                                            std::chrono::steady_clock::time_point>,
                "the decision function is on the packet path: it must be noexcept");
  const int received = receive();
  if (received <= 0) {
    send_pending();  // verdicts a failed send kept
    return 0;
  }
  const auto now = std::chrono::steady_clock::now();
  auto decide_collected = [&] {
    decide(std::span(packets_.data(), collected_), std::span(decisions_.data(), collected_), now);
    plan_collected();
  };
  for (int slot = 0; slot < received; ++slot) {
    std::size_t offset = 0;
    while (!collect(slot, offset)) decide_collected();  // full: a datagram held several packets
  }
  decide_collected();
  finish_batch();
  return received;
}

}  // namespace pairwall::io
