#include "daemon/sync/send_window.h"

#include <algorithm>

namespace pairwall::sync {

SendWindow::SendWindow(const SendWindowConfig& config)
    : config_(config), cwnd_(config.cwnd_initial), ssthresh_(config.cwnd_max) {}

Micros SendWindow::rto() const noexcept {
  Micros base = config_.rto_initial;
  if (have_rtt_) base = srtt_ + std::max(4 * rttvar_, Micros{1'000}) + config_.ack_delay;
  base = std::clamp(base, config_.rto_min, config_.rto_max);
  for (unsigned i = 0; i < backoff_ && base < config_.rto_max; ++i) base *= 2;
  return std::min(base, config_.rto_max);
}

void SendWindow::set_capacity(std::size_t capacity) {
  config_.capacity = std::max<std::size_t>(capacity, 1);
  while (slots_.size() > config_.capacity) evict_front();
}

uint64_t SendWindow::push(std::vector<uint8_t> payload, std::vector<engine::StateId> ids,
                          std::string controls, Micros now) {
  if (slots_.size() >= config_.capacity) evict_front();
  const uint64_t seq = next_seq();
  Slot& s = slots_.emplace_back();
  s.payload = std::move(payload);
  s.ids = std::move(ids);
  s.controls = std::move(controls);
  s.last_sent = now;
  s.transmissions = 1;
  ++outstanding_;
  ++in_flight_;
  if (head_ == 0) timer_restart_ = now;
  list_append(seq);
  return seq;
}

void SendWindow::list_append(uint64_t seq) {
  Slot& s = at(seq);
  s.prev = tail_;
  s.next = 0;
  if (tail_ != 0) {
    at(tail_).next = seq;
  } else {
    head_ = seq;
  }
  tail_ = seq;
}

void SendWindow::list_remove(uint64_t seq) {
  Slot& s = at(seq);
  if (s.prev != 0) {
    at(s.prev).next = s.next;
  } else {
    head_ = s.next;
  }
  if (s.next != 0) {
    at(s.next).prev = s.prev;
  } else {
    tail_ = s.prev;
  }
  s.prev = s.next = 0;
}

void SendWindow::store_evicted(uint64_t seq, Slot& s) {
  if (s.ids.empty() && s.controls.empty()) return;
  Evicted& e = evicted_.emplace_back();
  e.seq = seq;
  evicted_ids_ += s.ids.size();
  e.ids = std::move(s.ids);
  e.controls = std::move(s.controls);
  trim_evicted();
}

void SendWindow::trim_evicted() {
  // Oldest first: the peer asks for the oldest gaps first, and the newest are likeliest to be
  // needed when a link comes back. Control messages stay, with a marker for the ids that went: they
  // are few and small, and no resync of states would make up for a lost one (a resync request, a
  // bulk request).
  for (std::size_t i = 0; evicted_ids_ > config_.evicted_id_budget && i < evicted_.size();) {
    Evicted& e = evicted_[i];
    const bool keeps_controls = !e.taken && !e.controls.empty();
    if (keeps_controls && e.ids.size() == 1 && e.ids.front() == kDroppedIds) {
      ++i;  // trimmed already
      continue;
    }
    if (!e.taken) evicted_ids_dropped_ += e.ids.size();
    evicted_ids_ -= e.ids.size();
    if (!keeps_controls) {
      evicted_.erase(evicted_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    e.ids.assign(1, kDroppedIds);
    ++evicted_ids_;
    ++i;
  }
  while (!evicted_.empty() && evicted_.front().taken) evicted_.pop_front();
}

void SendWindow::evict_front() {
  const uint64_t seq = first_seq_;
  Slot& s = slots_.front();
  if (!s.acked) {
    ++evictions_;
    if (!s.lost) {
      list_remove(seq);
      --in_flight_;
    }
    --outstanding_;
    store_evicted(seq, s);
  }
  slots_.pop_front();
  ++first_seq_;
  pop_acked_front();
}

void SendWindow::pop_acked_front() {
  while (!slots_.empty() && slots_.front().acked) {
    slots_.pop_front();
    ++first_seq_;
  }
}

void SendWindow::rtt_sample(Micros rtt) {
  if (rtt < Micros{0}) return;
  min_rtt_ = std::min(min_rtt_, rtt);
  if (!have_rtt_) {
    srtt_ = rtt;
    rttvar_ = rtt / 2;
    have_rtt_ = true;
    return;
  }
  // RFC 6298 section 2.3, alpha 1/8, beta 1/4.
  const Micros err = rtt > srtt_ ? rtt - srtt_ : srtt_ - rtt;
  rttvar_ = (3 * rttvar_ + err) / 4;
  srtt_ = (7 * srtt_ + rtt) / 8;
}

void SendWindow::ack_slot(uint64_t seq, Micros now, bool delivered) {
  Slot& s = at(seq);
  if (s.acked) return;
  s.acked = true;
  --outstanding_;
  if (!s.lost) {
    list_remove(seq);
    --in_flight_;
  }
  std::vector<uint8_t>().swap(s.payload);
  std::vector<engine::StateId>().swap(s.ids);
  std::string().swap(s.controls);
  if (!delivered) return;
  const Micros rtt = now - s.last_sent;
  if (s.transmissions == 1) {
    // Karn: only a datagram sent once gives an unambiguous round trip.
    rtt_sample(rtt);
    // Leave slow start when the round trip grows well past its minimum: a queue is building
    // (HyStart's delay increase, RFC 9406 in spirit), before it overflows and drops a burst.
    if (cwnd_ < ssthresh_ && rtt > min_rtt_ + std::max(min_rtt_ / 2, Micros{4'000})) ssthresh_ = cwnd_;
    rack_time_ = std::max(rack_time_, s.last_sent);
  } else if (have_rtt_ && rtt >= min_rtt_) {
    // A resend acked no sooner than a round trip answers that resend (RFC 8985 step 2), so
    // whatever was sent before it and is still unacked is lost.
    rack_time_ = std::max(rack_time_, s.last_sent);
  }
  // Congestion avoidance: slow start below ssthresh, then one datagram per window.
  if (cwnd_ < ssthresh_) {
    cwnd_ += 1;
  } else {
    cwnd_ += 1 / cwnd_;
  }
  cwnd_ = std::min(cwnd_, config_.cwnd_max);
}

void SendWindow::mark_lost(uint64_t seq) {
  Slot& s = at(seq);
  list_remove(seq);
  --in_flight_;
  s.lost = true;
  lost_.push_back(seq);
}

void SendWindow::on_loss_event(bool timeout, uint64_t highest_lost) {
  // One reduction per window of data, as in TCP's fast recovery (RFC 6582).
  if (!timeout && highest_lost < recovery_end_) return;
  ssthresh_ = std::max(cwnd_ / 2, config_.cwnd_min);
  cwnd_ = timeout ? config_.cwnd_min : ssthresh_;
  recovery_end_ = next_seq();
}

std::size_t SendWindow::on_ack(uint64_t cum, uint64_t sack, Micros now) {
  const std::size_t before = outstanding_;
  const uint64_t last = std::min(cum, next_seq() - 1);
  for (uint64_t seq = first_seq_; seq <= last; ++seq) ack_slot(seq, now, true);
  for (unsigned i = 0; sack != 0 && i < 64; ++i) {
    if ((sack >> i) & 1U) {
      const uint64_t seq = cum + 2 + i;
      if (holds(seq)) ack_slot(seq, now, true);
    }
  }
  pop_acked_front();
  const std::size_t newly = before - outstanding_;
  on_progress(newly, now);
  detect_losses();
  return newly;
}

std::size_t SendWindow::on_sack_runs(uint64_t cum, std::span<const uint64_t> runs, Micros now) {
  // Runs count from an ack of something sent: past that, cum + 1 + a run could wrap around to
  // sequences the peer never received, which would never be resent.
  if (cum >= next_seq()) return 0;
  const std::size_t before = outstanding_;
  uint64_t seq = cum + 1;
  for (std::size_t i = 0; i + 1 < runs.size(); i += 2) {
    // Runs beyond what was ever sent are bogus: stop there.
    if (runs[i] >= next_seq() || seq + runs[i] >= next_seq()) break;
    seq += runs[i];
    const uint64_t end = std::min(seq + runs[i + 1], next_seq());
    for (; seq < end; ++seq) {
      if (holds(seq)) ack_slot(seq, now, true);
    }
  }
  pop_acked_front();
  const std::size_t newly = before - outstanding_;
  on_progress(newly, now);
  detect_losses();
  return newly;
}

void SendWindow::on_progress(std::size_t newly, Micros now) {
  if (newly == 0) return;
  backoff_ = 0;
  progress_since_timer_ = true;
  timer_restart_ = now;
}

void SendWindow::detect_losses() {
  // RACK: whatever was sent a reordering window before a datagram that got through is lost.
  const Micros reo = std::max(have_rtt_ ? min_rtt_ / 4 : Micros{0}, Micros{1'000});
  uint64_t highest_lost = 0;
  while (head_ != 0 && at(head_).last_sent + reo < rack_time_) {
    highest_lost = std::max(highest_lost, head_);
    mark_lost(head_);
  }
  if (highest_lost != 0) on_loss_event(false, highest_lost);
}

Micros SendWindow::timer_deadline() const noexcept {
  if (head_ == 0) return Micros::max();
  return std::max(slots_[head_ - first_seq_].last_sent, timer_restart_) + rto();
}

void SendWindow::check_timer(Micros now) {
  if (head_ == 0 || now < timer_deadline()) return;
  ++rto_expirations_;
  // Everything sent a timeout ago is lost (RFC 8985 section 6.3). When the peer acked something
  // since the last expiry it is alive and this is loss, not a dead link: the window halves once
  // and the timer does not back off, so that a lossy link keeps a short timer. When nothing came
  // back the window collapses and the timer backs off, so a dead link sees a few datagrams per
  // timeout.
  const bool dead = !progress_since_timer_;
  const Micros limit = now - rto();
  uint64_t highest_lost = head_;
  mark_lost(head_);
  while (head_ != 0 && at(head_).last_sent <= limit) {
    highest_lost = std::max(highest_lost, head_);
    mark_lost(head_);
  }
  if (dead && backoff_ < 16) ++backoff_;
  progress_since_timer_ = false;
  timer_restart_ = now;
  on_loss_event(dead, highest_lost);
}

uint64_t SendWindow::next_lost() noexcept {
  while (!lost_.empty()) {
    const uint64_t seq = lost_.front();
    lost_.pop_front();
    if (holds(seq) && at(seq).lost && !at(seq).acked) return seq;
  }
  return 0;
}

void SendWindow::resent(uint64_t seq, Micros now) {
  Slot& s = at(seq);
  s.lost = false;
  s.last_sent = now;
  ++s.transmissions;
  ++in_flight_;
  list_append(seq);
}

SendWindow::Lookup SendWindow::take_for_resync(uint64_t seq, std::vector<engine::StateId>& ids,
                                               std::string& controls) {
  if (holds(seq)) {
    Slot& s = at(seq);
    if (s.acked) return Lookup::Acked;
    // The peer gave it up (it fell out of the peer's window): no use resending it any more.
    ids.insert(ids.end(), s.ids.begin(), s.ids.end());
    controls = s.controls;
    ack_slot(seq, Micros{0}, false);
    pop_acked_front();
    return Lookup::Found;
  }
  auto it = std::lower_bound(evicted_.begin(), evicted_.end(), seq,
                             [](const Evicted& e, uint64_t s) { return e.seq < s; });
  if (it != evicted_.end() && it->seq == seq && !it->taken) {
    ids.insert(ids.end(), it->ids.begin(), it->ids.end());
    controls = std::move(it->controls);
    evicted_ids_ -= it->ids.size();
    std::vector<engine::StateId>().swap(it->ids);
    it->taken = true;
    trim_evicted();
    return Lookup::Found;
  }
  return Lookup::Forgotten;
}

void SendWindow::blank_unacked() {
  for (Slot& s : slots_) {
    if (s.acked) continue;
    std::vector<uint8_t>().swap(s.payload);
    std::vector<engine::StateId>().swap(s.ids);
    std::string().swap(s.controls);
  }
}

void SendWindow::clear_evicted() {
  evicted_.clear();
  evicted_ids_ = 0;
}

}  // namespace pairwall::sync
