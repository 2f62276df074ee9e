// The receiving side of the reliable stream of one peer epoch: delivers datagrams in sequence
// order (so that a delete can never overtake the insert it follows), holds the ones that arrive
// early, and gives sequences up — reporting them, never silently — when the sender says it can no
// longer resend them. A datagram that arrives past the window is dropped for the sender to resend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace pairwall::sync {

class ReceiveWindow {
 public:
  enum class Accept : uint8_t { Delivered, Held, Duplicate, Beyond };

  // `capacity`: how far past the last delivered sequence a datagram may arrive and be held.
  explicit ReceiveWindow(std::size_t capacity) : slots_(capacity < 64 ? 64 : capacity) {}

  // A new peer epoch: `next_expected` is the first sequence to deliver.
  void reset(uint64_t next_expected) {
    for (auto& s : slots_) {
      s.held = false;
      s.payload.clear();
    }
    held_ = 0;
    base_ = next_expected == 0 ? 0 : next_expected - 1;
    highest_ = base_;
  }

  // Room for `capacity` past the last delivered sequence, if that is more than it has (a reload's
  // larger resend_window): what it holds stays held. Never less: a datagram it holds was acked.
  void grow(std::size_t capacity) {
    if (capacity <= slots_.size()) return;
    std::vector<Slot> wider(capacity);
    for (uint64_t seq = base_ + 1; held_ > 0 && seq <= highest_; ++seq) {
      if (has(seq)) wider[seq % capacity] = std::move(slot(seq));
    }
    slots_.swap(wider);
  }

  // Every sequence <= base() was delivered or given up.
  uint64_t base() const noexcept { return base_; }
  uint64_t highest() const noexcept { return highest_; }
  std::size_t held() const noexcept { return held_; }
  std::size_t capacity() const noexcept { return slots_.size(); }

  // Delivered, given up or held.
  bool has(uint64_t seq) const noexcept {
    if (seq <= base_) return true;
    if (seq - base_ > slots_.size()) return false;
    return slot(seq).held;
  }

  // Bit i set when sequence `cum` + 2 + i is had (the header's selective ack).
  uint64_t sack_bits(uint64_t cum) const noexcept {
    uint64_t bits = 0;
    if (highest_ <= cum + 1) return 0;
    // Up to `highest_`, past which nothing is had and cum + 2 + i could wrap.
    const uint64_t count = highest_ - cum - 1;
    for (uint64_t i = 0; i < 64 && i < count; ++i) {
      if (has(cum + 2 + i)) bits |= uint64_t{1} << i;
    }
    return bits;
  }

  // What is held past `cum` as alternating run lengths from cum + 1: missing, held, missing...
  // At most `max_runs` entries, ending with a held run.
  void held_runs(uint64_t cum, std::size_t max_runs, std::vector<uint64_t>& out) const {
    out.clear();
    if (held_ == 0 || highest_ <= cum + 1) return;
    // Counted from cum + 1 rather than compared with `highest_`: a window that ends at the last
    // sequence a 64-bit counter carries would otherwise wrap around to the delivered ones.
    const uint64_t span = highest_ - cum;
    uint64_t at = 0;
    while (at < span && out.size() + 2 <= max_runs) {
      uint64_t missing = 0;
      while (at < span && !has(cum + 1 + at)) ++missing, ++at;
      if (at == span) break;
      uint64_t run = 0;
      while (at < span && has(cum + 1 + at)) ++run, ++at;
      out.push_back(missing);
      out.push_back(run);
    }
  }

  // The sender can no longer resend anything below `send_base`: deliver what is held below it
  // and give up the rest. deliver(seq, payload); give_up(first, last) per missing range.
  template <typename Deliver, typename GiveUp>
  void advance_to(uint64_t send_base, Deliver&& deliver, GiveUp&& give_up) {
    if (send_base > base_ + 1) slide(send_base - 1, deliver, give_up);
  }

  // One sequenced datagram, after advance_to() its send base. Delivers it (and whatever it
  // unblocks) when it is next in order, holds a copy when it is early. Past the window it is
  // Beyond, and not kept: the sender can still resend every sequence from its send base on, so
  // none is given up (which would cost a resync, or a full one once the ack told the sender they
  // arrived), and it sends this one again once the window has moved. Only a sender whose resend
  // window is larger than this window (another resend_window on the peer) gets that far.
  template <typename Deliver>
  Accept accept(uint64_t seq, std::span<const uint8_t> payload, Deliver&& deliver) {
    if (seq <= base_) return Accept::Duplicate;
    if (seq - base_ > slots_.size()) return Accept::Beyond;
    if (seq > highest_) highest_ = seq;
    Slot& s = slot(seq);
    if (s.held) return Accept::Duplicate;
    if (seq == base_ + 1) {
      base_ = seq;
      deliver(seq, payload);
      drain(deliver);
      return Accept::Delivered;
    }
    s.held = true;
    s.payload.assign(payload.begin(), payload.end());
    ++held_;
    return Accept::Held;
  }

 private:
  struct Slot {
    bool held = false;
    std::vector<uint8_t> payload;
  };

  Slot& slot(uint64_t seq) noexcept { return slots_[seq % slots_.size()]; }
  const Slot& slot(uint64_t seq) const noexcept { return slots_[seq % slots_.size()]; }

  template <typename Deliver>
  void drain(Deliver& deliver) {
    while (held_ > 0) {
      Slot& s = slot(base_ + 1);
      if (!s.held) break;
      ++base_;
      take(s, base_, deliver);
    }
  }

  template <typename Deliver>
  void take(Slot& s, uint64_t seq, Deliver& deliver) {
    s.held = false;
    --held_;
    std::vector<uint8_t> payload;
    payload.swap(s.payload);
    deliver(seq, std::span<const uint8_t>(payload));
  }

  // Moves base_ to `target`, delivering held datagrams on the way and giving up the gaps.
  template <typename Deliver, typename GiveUp>
  void slide(uint64_t target, Deliver& deliver, GiveUp& give_up) {
    uint64_t gap_first = 0;
    // Only base_+1 .. base_+capacity can be held; anything beyond is a gap without a look.
    const uint64_t scan_end = target - base_ > slots_.size() ? base_ + slots_.size() : target;
    for (uint64_t s = base_ + 1; s <= scan_end; ++s) {
      Slot& sl = slot(s);
      if (sl.held) {
        if (gap_first != 0) give_up(gap_first, s - 1);
        gap_first = 0;
        base_ = s;
        take(sl, s, deliver);
      } else if (gap_first == 0) {
        gap_first = s;
      }
    }
    if (scan_end < target && gap_first == 0) gap_first = scan_end + 1;
    if (gap_first != 0) give_up(gap_first, target);
    base_ = target;
    if (highest_ < base_) highest_ = base_;
    drain(deliver);
  }

  std::vector<Slot> slots_;
  std::size_t held_ = 0;
  uint64_t base_ = 0;
  uint64_t highest_ = 0;
};

}  // namespace pairwall::sync
