// pairwalld's packet path: one NFQUEUE queue per worker thread, each worker owning its netlink
// socket (NfqSocket), its engine::Worker, its interface cache and its reject sockets, so that
// workers share nothing but the engine's state table.
//
//   kernel --queue N+i--> NfqSocket (batched recv) --> Engine::process_batch() --> Verdicts
//                          |                            | Reject: Rejector (RST / ICMP)
//                          |                            | log:    PcapLog ring
//                          <-- batched verdicts <-------+
//
// A whole receive batch goes to the engine in one call, which starts the state lookups of several
// packets before deciding the first: at a million states nearly every lookup misses the cache,
// and overlapped misses cost about half as much as misses in a row (pairwall-bench engine).
//
// Threads, not Asio: each worker blocks in recvmmsg (MSG_WAITFORONE, a 100 ms timeout to notice
// stop()) on its own socket. An Asio reactor would add an epoll_wait and a handler dispatch to
// every batch and move packets between threads; a dedicated thread per queue is one syscall per
// batch in and one out. Everything else in pairwalld (control, metrics, sync, failover) runs on
// Asio.
//
// Time: each batch reads std::chrono::steady_clock once and passes it to process_batch() as
// milliseconds since steady_clock's epoch; whoever calls Engine::expire() must use the same clock.
//
// Interfaces: the kernel gives ifindexes; a per-worker IfindexCache maps them to engine
// IfaceIds. Call refresh_interfaces() when links are renamed or recreated.
//
// Hook: derived from which interfaces the kernel reported: in and out -> Forward, in only ->
// Input, out only -> Output.
//
// Defer (NfQueueConfig::defer, pfsync's `defer`): a packet that creates a synced state is held
// (defer_queue.h), where worth_deferring() says it helps, until on_synced() says the peer has
// acknowledged the worker's state records up to that packet's batch, or for the timeout. While it
// holds packets a worker waits in poll() on its socket and an eventfd that on_synced() writes, not
// in the blocking receive; after a batch that held packets it calls the sync kick, so that the
// insert leaves at once rather than at the next drain of the rings. Where sync runs the hold
// queues exist from the start, so that set_defer() turns holding on and off at a reload, as
// `ifconfig pfsync0 -defer` does: a worker without them takes the plain receive loop.
//
// Logging (Verdict::log): the pflog record names the arrival interface with direction in
// (Forward, Input), or the departure interface with direction out (Output); the engine does not
// say which pass of a forwarded packet decided. The bytes logged are those after any rewrite.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "daemon/engine/engine.h"
#include "daemon/io/defer_queue.h"
#include "daemon/io/ifindex_cache.h"
#include "daemon/io/kernel_queue_stats.h"
#include "daemon/io/kernel_router.h"
#include "daemon/io/nfq_socket.h"
#include "daemon/io/pcaplog.h"
#include "daemon/io/reject.h"

namespace pairwall::io {

struct DeferConfig {
  // The hold queues exist (sync runs), so that set_defer() may turn holding on later.
  bool available = false;
  bool enabled = false;                   // holding from the start; needs `available`
  std::chrono::milliseconds timeout{10};  // pfsync's: 10 ticks at hz 1000
  // Per queue. pfsync holds 128 per bucket (two buckets a CPU); at 124,000 new flows/s each
  // waiting ~1.5 ms, 128 overflowed for 42 % of them (pairwall-bench states, sync_defer).
  std::size_t max_packets = 1024;
  std::size_t max_bytes = 1 << 20;  // per queue, for the copies of rewritten packets
};

struct NfQueueConfig {
  uint16_t first_queue = 0;
  uint16_t queues = 1;  // one worker each: first_queue .. first_queue + queues - 1
  QueueConfig queue;    // for every queue; its `queue` field is set per worker
  bool reject = true;   // false: Reject verdicts drop silently (no raw sockets needed)
  RejectConfig reject_config;
  DeferConfig defer;
};

engine::Hook hook_of(uint8_t netfilter_hook, bool has_in_iface, bool has_out_iface) noexcept;

// The interfaces over which what this node sends in answer to `packet` leaves: a link-local
// destination means a host only together with its link. link_back: toward the packet's source,
// over the interface it came in on. link_toward: toward `destination`, back over that interface
// when it is the packet's source, else on over the one the packet was leaving by (synproxy's other
// end). A packet of this host has no arrival interface and one to it no departure interface: the
// other one, which holds this host's address, stands in.
uint32_t link_back(const QueuedPacket& packet) noexcept;
uint32_t link_toward(const QueuedPacket& packet, engine::Family family,
                     const engine::IpAddress& destination) noexcept;

// Whether holding a new state's first packet (defer) can help the connection: not when it goes to
// a multicast or the limited broadcast address, since its answers come from unicast addresses the
// state does not name, and the peer's copy of the state would not let them by. pfsync_defer()
// passes M_MCAST and M_BCAST packets at once likewise; holding them would only delay them.
bool worth_deferring(std::span<const uint8_t> packet) noexcept;

// Whether the kernel vouches for `packet`'s transport checksum, so that a reset need not check it
// (build_reject's checksum_partial): one it has yet to finish (NFQA_SKB_CSUMNOTREADY), or a GSO
// packet, which GRO or LRO merged from segments whose checksums were verified, and whose field need
// not sum the merged bytes (fraglist GRO keeps the first segment's). pf_check_tcp_cksum() takes the
// stack's word likewise (M_TCP_CSUM_IN_OK).
bool transport_checksum_vouched(const QueuedPacket& packet) noexcept;

class NfQueue {
 public:
  // `log` may be null (nothing logged); it must have at least `config.queues` workers and
  // outlive this object.
  NfQueue(engine::Engine& engine, NfQueueConfig config, PcapLog* log = nullptr);
  ~NfQueue();  // stop()
  NfQueue(const NfQueue&) = delete;
  NfQueue& operator=(const NfQueue&) = delete;

  // Binds every queue and opens the reject sockets, then starts the workers. Throws
  // std::runtime_error (from NfqSocket / Rejector) before any worker starts if one fails.
  // Call once.
  void start();

  // Tells the workers to stop (each sees it within NfqSocket::kStopCheckMs), waits for them to
  // send the verdicts they owe and joins them. Idempotent.
  void stop();

  std::size_t workers() const { return workers_.size(); }
  uint16_t queue_of(std::size_t worker) const { return static_cast<uint16_t>(config_.first_queue + worker); }

  // The engine worker of `worker`, whose state change ring sync drains.
  engine::Worker& engine_worker(std::size_t worker) { return workers_[worker]->engine_worker; }

  // Counters of `worker`; readable from any thread. Valid after start().
  const QueueCounters& counters(std::size_t worker) const;
  // The socket of `worker` (its configuration, effective receive buffer). Valid after start().
  const NfqSocket& socket(std::size_t worker) const { return *workers_[worker]->socket; }
  const RejectCounters* reject_counters(std::size_t worker) const;
  uint64_t log_dropped(std::size_t worker) const { return workers_[worker]->log_dropped.get(); }
  // Where `worker` asked the kernel how connections translated before routing leave.
  const KernelRouter& router(std::size_t worker) const { return workers_[worker]->router; }

  // The kernel's counters for our queues (queue-full and socket-full drops). Control plane: reads
  // /proc/net/netfilter/nfnetlink_queue; throws std::runtime_error when it cannot.
  std::vector<KernelQueueStats> kernel_stats() const;

  // Defer: called by a worker (any thread, no allocation) after a batch in which it held packets.
  // Before start().
  void set_sync_kick(std::function<void()> kick) { sync_kick_ = std::move(kick); }
  // Defer, from the sync side (any thread): the peer has acknowledged the first `synced` records
  // of `worker`'s state change ring; `peer_up` false releases everything held and holds nothing
  // new (a peer that does not answer is not worth a timeout per connection).
  void on_synced(std::size_t worker, uint64_t synced, bool peer_up) noexcept;
  // Turns holding new states' first packets on or off and sets how long one waits, from any thread;
  // packets held when it goes off still wait for their acknowledgement or timeout. Throws
  // std::logic_error when the queues were made without `defer.available`.
  void set_defer(bool enabled, std::chrono::milliseconds timeout);
  bool defer_enabled() const noexcept { return defer_enabled_.load(std::memory_order_relaxed); }
  // Defer counters of `worker`, or null when the queues were made without `defer.available`.
  // Valid after start().
  const DeferCounters* defer_counters(std::size_t worker) const;
  std::size_t held(std::size_t worker) const {
    return workers_[worker]->held_now.load(std::memory_order_relaxed);
  }

  // [queue] maxlen and rcvbuf_bytes for every running queue (NfqSocket::set_limits). Throws
  // std::runtime_error naming the queue that refused; the queues before it have taken them.
  void set_limits(uint32_t max_len, int rcvbuf_bytes) {
    for (auto& w : workers_) w->socket->set_limits(max_len, rcvbuf_bytes);
  }

  // [queue] fail_open and gso for every running queue (NfqSocket::set_flags); throws likewise.
  void set_flags(bool fail_open, bool gso) {
    for (auto& w : workers_) w->socket->set_flags(fail_open, gso);
  }

  // Makes every worker forget its ifindex mappings at its next packet.
  void refresh_interfaces() { iface_generation_.fetch_add(1, std::memory_order_relaxed); }

 private:
  struct Worker {
    Worker(engine::Engine& engine, std::size_t worker_index)
        : engine_worker(engine), ifaces(engine.interfaces()), router(ifaces), index(worker_index) {
      engine_worker.set_router(&router);
    }
    engine::Worker engine_worker;
    IfindexCache ifaces;
    KernelRouter router;
    std::size_t index;
    uint64_t iface_generation = 0;
    std::unique_ptr<NfqSocket> socket;
    std::vector<engine::BatchPacket> batch;  // one receive batch, sized at start()
    std::unique_ptr<Rejector> rejector;
    Counter log_dropped;
    std::thread thread;
    // Defer (null / unused without defer.available).
    std::unique_ptr<DeferQueue> deferred;
    int wake_fd = -1;                 // eventfd written by on_synced()
    std::atomic<uint64_t> synced{0};  // records of this worker's ring the peer acknowledged
    std::atomic<bool> peer_up{false};
    std::atomic<bool> holding{false};  // deferred is not empty: on_synced() must wake it
    std::atomic<std::size_t> held_now{0};
    uint64_t ticket = 0;  // the ring's record count after the current batch
    bool held_in_batch = false;
  };

  // Sends the verdict of a packet the hold queue lets go.
  static auto settler(Worker& w) {
    return [&w](const DeferQueue::Release& r) { w.socket->settle_held(r.id, r.decision, r.bytes, r.mark); };
  }
  void run_worker(Worker& worker) noexcept;
  // Waits, while packets are held, for packets, a wake-up or the next hold's deadline. Returns
  // whether packets are waiting on the socket.
  bool wait_holding(Worker& worker) noexcept;
  void release_held(Worker& worker) noexcept;
  Decision hold_if_deferred(Worker& worker, const QueuedPacket& packet, const engine::Verdict& verdict,
                            Decision decision, std::chrono::steady_clock::time_point now) noexcept;

  void decide(Worker& worker, std::span<QueuedPacket> packets, std::span<Decision> decisions,
              std::chrono::steady_clock::time_point now) noexcept;
  Decision act(Worker& worker, const QueuedPacket& packet, const engine::BatchPacket& decided,
               std::chrono::steady_clock::time_point now) noexcept;

  engine::Engine& engine_;
  NfQueueConfig config_;
  PcapLog* log_;
  std::function<void()> sync_kick_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> iface_generation_{0};
  // Defer's switch and timeout (set_defer()), read by the workers at each packet they might hold.
  std::atomic<bool> defer_enabled_{false};
  std::atomic<std::chrono::milliseconds::rep> defer_timeout_ms_{0};
  bool started_ = false;
};

}  // namespace pairwall::io
