// The sending side of the reliable stream: every sequenced datagram stays here until the peer
// acks it, and is sent again when it is found lost — by a later datagram being acked first (RACK,
// RFC 8985) or by the resend timer (RFC 6298). A congestion window (RFC 5681 AIMD) paces every
// datagram but those carrying control messages: live records wait for it too, coalescing per state
// in PendingRecords, and so do resyncs and the bulk.
//
// The window has a fixed capacity: a dead link must not grow memory, and control messages, which do
// not wait for the congestion window, could fill any. When it is full the oldest datagram is
// evicted even if unacked, but the state ids and control messages it carried are kept in the
// evicted store, so that when the peer asks for a resync of that sequence the current version of
// those states can be sent (an incremental resync). Only when the evicted store itself overflows
// is a sequence truly forgotten; a request for it then starts a full resync. Unlike conntrackd's
// resend queue, nothing leaves silently: every eviction is counted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "daemon/engine/state.h"
#include "daemon/sync/time.h"

namespace pairwall::sync {

struct SendWindowConfig {
  std::size_t capacity = 4096;               // datagrams held for resending
  std::size_t evicted_id_budget = 1u << 20;  // state ids kept for evicted datagrams
  Micros rto_initial{200'000};
  Micros rto_min{10'000};
  // A dedicated link: no need for TCP's 60 s ceiling, and a link back up should be noticed soon.
  Micros rto_max{250'000};
  Micros ack_delay{1'000};  // the peer may hold an ack this long
  double cwnd_initial = 16;
  double cwnd_min = 8;
  double cwnd_max = 512;
};

class SendWindow {
 public:
  struct Slot {
    std::vector<uint8_t> payload;
    std::vector<engine::StateId> ids;  // states whose records it carried
    std::string controls;              // its control messages, as a serialized Batch
    Micros last_sent{0};
    uint32_t transmissions = 0;
    bool acked = false;
    bool lost = false;  // waiting in the resend queue
    uint64_t prev = 0;  // transmission-time order (seqs; 0 = none)
    uint64_t next = 0;
  };

  // What a resync request for one sequence finds.
  enum class Lookup : uint8_t { Found, Acked, Forgotten };
  // Stands in a resync's ids for those the evicted store dropped over its budget while it kept the
  // datagram's control messages: like a clear's marker (counter 0), it asks for a full resync.
  static constexpr engine::StateId kDroppedIds{0, 0};

  explicit SendWindow(const SendWindowConfig& config);

  uint64_t next_seq() const noexcept { return first_seq_ + slots_.size(); }
  // The oldest sequence that can still be resent (next_seq() when nothing is outstanding).
  uint64_t send_base() const noexcept { return first_seq_; }
  std::size_t outstanding() const noexcept { return outstanding_; }
  std::size_t in_flight() const noexcept { return in_flight_; }
  bool cwnd_open() const noexcept { return static_cast<double>(in_flight_) < cwnd_; }
  double cwnd() const noexcept { return cwnd_; }
  Micros srtt() const noexcept { return srtt_; }
  Micros rto() const noexcept;
  std::size_t evicted_entries() const noexcept { return evicted_.size(); }
  std::size_t evicted_ids() const noexcept { return evicted_ids_; }
  uint64_t evictions() const noexcept { return evictions_; }
  uint64_t evicted_ids_dropped() const noexcept { return evicted_ids_dropped_; }
  uint64_t rto_expirations() const noexcept { return rto_expirations_; }

  // A new capacity ([sync] resend_window from a reload): past it the oldest datagrams are evicted
  // now, as a full window evicts them.
  void set_capacity(std::size_t capacity);
  std::size_t capacity() const noexcept { return config_.capacity; }

  // Records a new datagram as sent at `now`; returns its sequence. Evicts the oldest when full.
  uint64_t push(std::vector<uint8_t> payload, std::vector<engine::StateId> ids, std::string controls,
                Micros now);

  // The peer's ack. Returns how many datagrams it newly acked. Acks never trim the evicted store:
  // a cumulative ack also covers sequences the peer gave up, whose resync request may still come.
  std::size_t on_ack(uint64_t cum, uint64_t sack, Micros now);
  // Selective-ack runs beyond `cum` (see wire::Sack). Returns how many datagrams it newly acked.
  std::size_t on_sack_runs(uint64_t cum, std::span<const uint64_t> runs, Micros now);

  // Fires the resend timer if due: marks the oldest outstanding datagram lost.
  void check_timer(Micros now);
  // When the resend timer fires next; Micros::max() when nothing is outstanding.
  Micros timer_deadline() const noexcept;

  // The next datagram to resend, or 0. The caller sends slot(seq).payload again and calls
  // resent().
  uint64_t next_lost() noexcept;
  bool has_lost() const noexcept { return !lost_.empty(); }
  const Slot& slot(uint64_t seq) const noexcept { return slots_[seq - first_seq_]; }
  void resent(uint64_t seq, Micros now);

  // A resync request for `seq`: hands over the ids and controls it carried (from the window or
  // the evicted store) and forgets them. Acked: the peer had it. Forgotten: no record of it is
  // left (evicted store overflow): only a full resync can cover it.
  Lookup take_for_resync(uint64_t seq, std::vector<engine::StateId>& ids, std::string& controls);

  // Forgets everything outstanding (the peer restarted and will ask for a bulk).
  void clear_evicted();
  // The peer restarted: what it had not acked was meant for its earlier boot. Those datagrams are
  // still sent (the new boot's receive window starts at the send base), but empty: their records
  // are old news to a node that will get the whole table, and their control messages would mean
  // something else to it (the end of a full resync sent to its earlier boot would end its bulk).
  void blank_unacked();

 private:
  struct Evicted {
    uint64_t seq = 0;
    std::vector<engine::StateId> ids;
    std::string controls;
    bool taken = false;
  };

  Slot& at(uint64_t seq) noexcept { return slots_[seq - first_seq_]; }
  bool holds(uint64_t seq) const noexcept { return seq >= first_seq_ && seq < next_seq(); }
  // delivered: the peer acked it (false: given up), which feeds RTT, RACK and the window.
  void ack_slot(uint64_t seq, Micros now, bool delivered);
  void evict_front();
  void pop_acked_front();
  void list_append(uint64_t seq);
  void list_remove(uint64_t seq);
  void mark_lost(uint64_t seq);
  void detect_losses();  // RACK
  void on_progress(std::size_t newly, Micros now);
  void on_loss_event(bool timeout, uint64_t highest_lost);
  void rtt_sample(Micros rtt);
  void store_evicted(uint64_t seq, Slot& s);
  void trim_evicted();

  SendWindowConfig config_;
  std::deque<Slot> slots_;
  uint64_t first_seq_ = 1;
  std::size_t outstanding_ = 0;  // not acked
  std::size_t in_flight_ = 0;    // not acked, not waiting for a resend
  uint64_t head_ = 0;            // oldest transmission among in-flight datagrams
  uint64_t tail_ = 0;
  std::deque<uint64_t> lost_;

  std::deque<Evicted> evicted_;
  std::size_t evicted_ids_ = 0;
  uint64_t evictions_ = 0;
  uint64_t evicted_ids_dropped_ = 0;

  // RTT and resend timer (RFC 6298).
  Micros srtt_{0};
  Micros rttvar_{0};
  Micros min_rtt_ = Micros::max();
  bool have_rtt_ = false;
  unsigned backoff_ = 0;
  bool progress_since_timer_ = false;  // an ack arrived since the last expiry (or ever)
  Micros timer_restart_{0};
  uint64_t rto_expirations_ = 0;

  // Loss detection (RACK): the latest send time among datagrams acked on their first transmission.
  Micros rack_time_{0};

  // Congestion window, in datagrams.
  double cwnd_;
  double ssthresh_;
  uint64_t recovery_end_ = 0;  // losses below this sequence belong to the current reduction
};

}  // namespace pairwall::sync
