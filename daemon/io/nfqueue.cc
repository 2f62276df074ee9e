#include "daemon/io/nfqueue.h"

#include <linux/netfilter.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pairwall::io {

uint32_t link_back(const QueuedPacket& packet) noexcept {
  return packet.in_ifindex != 0 ? packet.in_ifindex : packet.out_ifindex;
}

uint32_t link_toward(const QueuedPacket& packet, engine::Family family,
                     const engine::IpAddress& destination) noexcept {
  const std::span<const uint8_t> p = packet.payload;
  bool to_source = false;
  if (family == engine::Family::V6 && p.size() >= 24 && (p[0] >> 4) == 6) {
    to_source = engine::IpAddress::from_v6_bytes(p.data() + 8) == destination;
  } else if (family == engine::Family::V4 && p.size() >= 20 && (p[0] >> 4) == 4) {
    to_source = engine::IpAddress::from_v4_bytes(p.data() + 12) == destination;
  }
  if (to_source) return link_back(packet);
  return packet.out_ifindex != 0 ? packet.out_ifindex : packet.in_ifindex;
}

bool worth_deferring(std::span<const uint8_t> packet) noexcept {
  if (packet.size() >= 20 && (packet[0] >> 4) == 4) {
    const uint8_t* dst = packet.data() + 16;
    const bool multicast = (dst[0] & 0xf0) == 0xe0;  // 224.0.0.0/4
    const bool broadcast = dst[0] == 0xff && dst[1] == 0xff && dst[2] == 0xff && dst[3] == 0xff;
    return !multicast && !broadcast;
  }
  if (packet.size() >= 40 && (packet[0] >> 4) == 6) return packet[24] != 0xff;  // ff00::/8
  return true;
}

bool transport_checksum_vouched(const QueuedPacket& packet) noexcept {
  return packet.checksum_partial || packet.gso;
}

engine::Hook hook_of(uint8_t netfilter_hook, bool has_in_iface, bool has_out_iface) noexcept {
  if (netfilter_hook == NF_INET_PRE_ROUTING) return engine::Hook::Prerouting;
  if (has_in_iface && has_out_iface) return engine::Hook::Forward;
  if (has_out_iface) return engine::Hook::Output;
  return engine::Hook::Input;
}

NfQueue::NfQueue(engine::Engine& engine, NfQueueConfig config, PcapLog* log)
    : engine_(engine), config_(std::move(config)), log_(log) {
  if (config_.queues == 0) throw std::runtime_error("nfqueue: at least one queue is needed");
  if (static_cast<uint32_t>(config_.first_queue) + config_.queues - 1 > UINT16_MAX) {
    throw std::runtime_error("nfqueue: queues " + std::to_string(config_.first_queue) + " + " +
                             std::to_string(config_.queues) + " run past queue number 65535");
  }
  if (log_ != nullptr && log_->config().workers < config_.queues) {
    throw std::runtime_error("nfqueue: the pcap log has " + std::to_string(log_->config().workers) +
                             " worker rings for " + std::to_string(config_.queues) + " queues");
  }
  set_defer(config_.defer.enabled, config_.defer.timeout);
  for (std::size_t i = 0; i < config_.queues; ++i) workers_.push_back(std::make_unique<Worker>(engine_, i));
}

NfQueue::~NfQueue() {
  stop();
  for (auto& w : workers_) {
    if (w->wake_fd >= 0) ::close(w->wake_fd);
  }
}

void NfQueue::start() {
  if (started_) throw std::runtime_error("nfqueue: start() called twice");
  // Everything that can fail happens before the first thread starts, so a failure leaves
  // nothing running; sockets opened so far close with the workers' destructors.
  for (auto& w : workers_) {
    QueueConfig qc = config_.queue;
    qc.queue = queue_of(w->index);
    w->socket = std::make_unique<NfqSocket>(qc);
    w->batch.resize(w->socket->config().recv_batch);
    if (config_.reject) w->rejector = std::make_unique<Rejector>(config_.reject_config);
    if (config_.defer.available) {
      w->deferred = std::make_unique<DeferQueue>(config_.defer.max_packets, config_.defer.max_bytes,
                                                 [&engine = engine_](const engine::StateId& id) {
                                                   return static_cast<bool>(engine.states().find_by_id(id));
                                                 });
      w->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (w->wake_fd < 0) throw std::runtime_error(std::string("nfqueue: eventfd: ") + std::strerror(errno));
    }
  }
  started_ = true;
  for (auto& w : workers_) {
    w->thread = std::thread([this, worker = w.get()] {
      const std::string name = "pw-queue-" + std::to_string(queue_of(worker->index));
      pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
      run_worker(*worker);
    });
  }
}

void NfQueue::stop() {
  stop_.store(true, std::memory_order_relaxed);
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
}

const QueueCounters& NfQueue::counters(std::size_t worker) const {
  if (!workers_[worker]->socket) throw std::logic_error("nfqueue: counters() before start()");
  return workers_[worker]->socket->counters();
}

void NfQueue::run_worker(Worker& w) noexcept {
  auto decide_fn = [this, &w](std::span<QueuedPacket> packets, std::span<Decision> decisions,
                              std::chrono::steady_clock::time_point now) noexcept {
    decide(w, packets, decisions, now);
  };
  if (!w.deferred) {
    w.socket->run(stop_, decide_fn);
    return;
  }
  while (!stop_.load(std::memory_order_relaxed)) {
    if (w.deferred->empty() || wait_holding(w)) w.socket->run_once(decide_fn);
    release_held(w);
  }
  w.deferred->release_all(ReleaseCause::Stopped, settler(w));
  w.socket->send_verdicts();
}

bool NfQueue::wait_holding(Worker& w) noexcept {
  const auto now = std::chrono::steady_clock::now();
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(w.deferred->next_deadline() - now);
  const int timeout = static_cast<int>(std::clamp<int64_t>(left.count(), 0, NfqSocket::kStopCheckMs));
  pollfd fds[2] = {{w.socket->fd(), POLLIN, 0}, {w.wake_fd, POLLIN, 0}};
  if (::poll(fds, 2, timeout) <= 0) return false;
  if ((fds[1].revents & POLLIN) != 0) {
    uint64_t wakes = 0;
    [[maybe_unused]] const ssize_t n = ::read(w.wake_fd, &wakes, sizeof wakes);
  }
  // An error pending on the socket (ENOBUFS) is the receive's to take and count.
  return (fds[0].revents & (POLLIN | POLLERR)) != 0;
}

void NfQueue::release_held(Worker& w) noexcept {
  // Nothing held (defer off, or every first packet gone): the loop costs what the plain one does.
  if (w.deferred->empty()) return;
  const auto now = std::chrono::steady_clock::now();
  const auto settle = settler(w);
  if (w.peer_up.load(std::memory_order_seq_cst)) {
    w.deferred->release(w.synced.load(std::memory_order_seq_cst), now, settle);
  } else {
    w.deferred->release_all(ReleaseCause::Stopped, settle);
  }
  w.socket->send_verdicts();
  w.held_now.store(w.deferred->size(), std::memory_order_relaxed);
  if (w.deferred->empty()) w.holding.store(false, std::memory_order_seq_cst);
}

void NfQueue::on_synced(std::size_t worker, uint64_t synced, bool peer_up) noexcept {
  Worker& w = *workers_[worker];
  if (!w.deferred) return;
  // Stored before `holding` is read, as the worker stores `holding` before it reads these: one of
  // the two sees the other's write, so a wake-up is never lost (and the timeout bounds it anyway).
  w.synced.store(synced, std::memory_order_seq_cst);
  w.peer_up.store(peer_up, std::memory_order_seq_cst);
  if (w.holding.load(std::memory_order_seq_cst)) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(w.wake_fd, &one, sizeof one);
  }
}

void NfQueue::set_defer(bool enabled, std::chrono::milliseconds timeout) {
  if (enabled && !config_.defer.available) throw std::logic_error("nfqueue: defer without its hold queues");
  defer_timeout_ms_.store(timeout.count(), std::memory_order_relaxed);
  defer_enabled_.store(enabled, std::memory_order_relaxed);
}

const DeferCounters* NfQueue::defer_counters(std::size_t worker) const {
  const auto& d = workers_[worker]->deferred;
  return d ? &d->counters() : nullptr;
}

const RejectCounters* NfQueue::reject_counters(std::size_t worker) const {
  const auto& r = workers_[worker]->rejector;
  return r ? &r->counters() : nullptr;
}

std::vector<KernelQueueStats> NfQueue::kernel_stats() const {
  std::vector<KernelQueueStats> ours;
  for (const auto& s : read_kernel_queue_stats()) {
    if (s.queue >= config_.first_queue && s.queue < config_.first_queue + config_.queues) ours.push_back(s);
  }
  return ours;
}

void NfQueue::decide(Worker& w, std::span<QueuedPacket> packets, std::span<Decision> decisions,
                     std::chrono::steady_clock::time_point now) noexcept {
  const uint64_t generation = iface_generation_.load(std::memory_order_relaxed);
  if (w.iface_generation != generation) {
    w.ifaces.clear();
    w.iface_generation = generation;
  }
  const std::span<engine::BatchPacket> batch(w.batch.data(), packets.size());
  for (std::size_t i = 0; i < packets.size(); ++i) {
    const QueuedPacket& packet = packets[i];
    engine::BatchPacket& b = batch[i];
    b.bytes = packet.payload;
    b.meta.hook = hook_of(packet.hook, packet.in_ifindex != 0, packet.out_ifindex != 0);
    b.meta.in_iface = w.ifaces.lookup(packet.in_ifindex).id;
    b.meta.out_iface = w.ifaces.lookup(packet.out_ifindex).id;
    b.meta.checksum_partial = packet.checksum_partial;
    b.meta.gso = packet.gso;
    b.meta.in_link = packet.in_ifindex;
    b.meta.mark = packet.mark;
  }
  const auto millis = std::chrono::duration_cast<engine::Millis>(now.time_since_epoch());
  engine_.process_batch(w.engine_worker, batch, millis);
  if (!w.deferred) {
    for (std::size_t i = 0; i < packets.size(); ++i) decisions[i] = act(w, packets[i], batch[i], now);
    return;
  }
  // Every insert of this batch is among the ring's records up to here.
  w.ticket = w.engine_worker.events().produced();
  w.held_in_batch = false;
  for (std::size_t i = 0; i < packets.size(); ++i) {
    decisions[i] = hold_if_deferred(w, packets[i], batch[i].verdict, act(w, packets[i], batch[i], now), now);
  }
  if (w.held_in_batch) {
    w.held_now.store(w.deferred->size(), std::memory_order_relaxed);
    if (sync_kick_) sync_kick_();
  }
}

Decision NfQueue::hold_if_deferred(Worker& w, const QueuedPacket& packet, const engine::Verdict& verdict,
                                   Decision decision, std::chrono::steady_clock::time_point now) noexcept {
  if (decision == Decision::Drop) return decision;
  // The first packet of a synced state while the peer answers; or a later packet of a state whose
  // first is still held, which must not overtake it.
  const bool first = verdict.synced_insert && defer_enabled_.load(std::memory_order_relaxed) &&
                     w.peer_up.load(std::memory_order_relaxed) && worth_deferring(packet.payload);
  if (!first &&
      (w.deferred->empty() || verdict.state.counter == 0 || !w.deferred->holds_state(verdict.state))) {
    return decision;
  }
  if (!w.deferred->hold(packet.id, decision, packet.payload, verdict.state, w.ticket,
                        now + std::chrono::milliseconds(defer_timeout_ms_.load(std::memory_order_relaxed)),
                        settler(w), packet.mark)) {
    return decision;
  }
  w.held_in_batch = true;
  w.holding.store(true, std::memory_order_seq_cst);
  return Decision::Held;
}

Decision NfQueue::act(Worker& w, const QueuedPacket& packet, const engine::BatchPacket& decided,
                      std::chrono::steady_clock::time_point now) noexcept {
  const engine::Verdict& verdict = decided.verdict;
  if (verdict.log != 0 && log_ != nullptr && log_->enabled()) {
    // A record per pass that asked, each on its interface and in its direction, as pf's.
    for (int pass = 0; pass < 2; ++pass) {
      if ((verdict.log & engine::logpass::of(pass)) == 0) continue;
      LogMeta m = pass_log_meta(verdict, pass, packet.payload);
      // lookup() returns a reference that the next lookup may reuse: copy the name at once.
      const uint32_t ifindex = m.outbound ? packet.out_ifindex : packet.in_ifindex;
      if (m.outbound && ifindex == 0 && verdict.routed_out != engine::kNoIface) {
        std::memcpy(m.ifname, w.ifaces.name_of(verdict.routed_out), sizeof(m.ifname));
      } else {
        std::memcpy(m.ifname, w.ifaces.lookup(ifindex).name, sizeof(m.ifname));
      }
      if (!log_->log(w.index, m, packet.payload, now)) w.log_dropped.add();
    }
  }

  switch (verdict.action) {
    case engine::Verdict::Action::Accept:
      if (verdict.claimed)
        return verdict.rewritten ? Decision::AcceptRewrittenClaimed : Decision::AcceptClaimed;
      return verdict.rewritten ? Decision::AcceptRewritten : Decision::Accept;
    case engine::Verdict::Action::Reject: {
      const auto millis = std::chrono::duration_cast<engine::Millis>(now.time_since_epoch());
      if (w.rejector) {
        w.rejector->reject(packet.payload, verdict.reply, verdict.reply_code, verdict.reply_ttl,
                           transport_checksum_vouched(packet), link_back(packet), millis);
      }
      return Decision::Drop;
    }
    case engine::Verdict::Action::Drop:
      // synproxy's answers, in the ends' names.
      if (w.rejector) {
        for (const engine::GeneratedPacket& made : w.engine_worker.generated(verdict))
          w.rejector->send(made, link_toward(packet, made.family, made.destination));
      }
      break;
  }
  return Decision::Drop;
}

}  // namespace pairwall::io
