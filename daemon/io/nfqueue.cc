#include "daemon/io/nfqueue.h"

#include <linux/netfilter.h>
#include <pthread.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace pairwall::io {

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
  for (std::size_t i = 0; i < config_.queues; ++i) workers_.push_back(std::make_unique<Worker>(engine_, i));
}

NfQueue::~NfQueue() {
  stop();
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
  }
  started_ = true;
  for (auto& w : workers_) {
    w->thread = std::thread([this, worker = w.get()] {
      const std::string name = "pw-queue-" + std::to_string(queue_of(worker->index));
      pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
      auto decide_fn = [this, worker](std::span<QueuedPacket> packets, std::span<Decision> decisions,
                                      std::chrono::steady_clock::time_point now) noexcept {
        decide(*worker, packets, decisions, now);
      };
      worker->socket->run(stop_, decide_fn);
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
  }
  const auto millis = std::chrono::duration_cast<engine::Millis>(now.time_since_epoch());
  engine_.process_batch(w.engine_worker, batch, millis);
  for (std::size_t i = 0; i < packets.size(); ++i) decisions[i] = act(w, packets[i], batch[i], now);
}

Decision NfQueue::act(Worker& w, const QueuedPacket& packet, const engine::BatchPacket& decided,
                      std::chrono::steady_clock::time_point now) noexcept {
  const engine::Verdict& verdict = decided.verdict;
  if (verdict.log && log_ != nullptr) {
    LogMeta m;
    m.family = (packet.payload[0] >> 4) == 6 ? engine::Family::V6 : engine::Family::V4;
    m.pass = verdict.action == engine::Verdict::Action::Accept;
    m.reason = verdict.reason;
    m.rule = verdict.rule;
    if (verdict.by_rule != nullptr && !verdict.by_rule->anchor.empty()) {
      m.rule = verdict.by_rule->anchor_number;
      m.subrule = verdict.by_rule->number;
      verdict.by_rule->anchor.copy(m.ruleset, sizeof(m.ruleset) - 1);
    }
    m.outbound = decided.meta.hook == engine::Hook::Output;
    // lookup() returns a reference that the next lookup may reuse: copy the name at once.
    const uint32_t ifindex = m.outbound ? packet.out_ifindex : packet.in_ifindex;
    std::memcpy(m.ifname, w.ifaces.lookup(ifindex).name, sizeof(m.ifname));
    if (!log_->log(w.index, m, packet.payload, now)) w.log_dropped.add();
  }

  switch (verdict.action) {
    case engine::Verdict::Action::Accept:
      if (verdict.claimed)
        return verdict.rewritten ? Decision::AcceptRewrittenClaimed : Decision::AcceptClaimed;
      return verdict.rewritten ? Decision::AcceptRewritten : Decision::Accept;
    case engine::Verdict::Action::Reject: {
      const auto millis = std::chrono::duration_cast<engine::Millis>(now.time_since_epoch());
      if (w.rejector) w.rejector->reject(packet.payload, verdict.reply, millis);
      return Decision::Drop;
    }
    case engine::Verdict::Action::Drop:
      break;
  }
  return Decision::Drop;
}

}  // namespace pairwall::io
