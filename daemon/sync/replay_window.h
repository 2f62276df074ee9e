// Anti-replay for the transmission counter of one peer epoch: RFC 4303 section 3.4.3 with a
// bitmap indexed by counter modulo the window (RFC 6479), so sliding costs no shifts.
#pragma once

#include <array>
#include <cstdint>

namespace pairwall::sync {

class ReplayWindow {
 public:
  // Counters this far below the highest accepted are rejected even if never seen. Resends get a
  // new counter, so the window only has to absorb reordering on the link, not loss.
  static constexpr uint64_t kSize = 4096;

  void reset() noexcept {
    highest_ = 0;
    bits_.fill(0);
  }

  // Whether `counter` would be accepted: not zero, not seen, not older than the window.
  bool check(uint64_t counter) const noexcept {
    if (counter == 0) return false;
    if (counter > highest_) return true;
    if (highest_ - counter >= kSize) return false;
    return !test(counter);
  }

  // Records `counter` as seen. Precondition: check(counter).
  void commit(uint64_t counter) noexcept {
    if (counter > highest_) {
      if (counter - highest_ >= kSize) {
        bits_.fill(0);
      } else {
        for (uint64_t c = highest_ + 1; c < counter; ++c) clear(c);
      }
      highest_ = counter;
    }
    set(counter);
  }

  uint64_t highest() const noexcept { return highest_; }

 private:
  bool test(uint64_t c) const noexcept { return (bits_[(c % kSize) / 64] >> (c % 64)) & 1U; }
  void set(uint64_t c) noexcept { bits_[(c % kSize) / 64] |= uint64_t{1} << (c % 64); }
  void clear(uint64_t c) noexcept { bits_[(c % kSize) / 64] &= ~(uint64_t{1} << (c % 64)); }

  uint64_t highest_ = 0;
  std::array<uint64_t, kSize / 64> bits_{};
};

}  // namespace pairwall::sync
