// The verdict messages of one queue socket, sent in the order they were planned.
//
// Order is what makes batching safe (verdict_plan.h): a batch verdict settles every packet still
// queued up to its id, so one sent past a lost verdict would settle that packet too, and a packet
// the engine dropped or rewrote would leave as it came. A send that fails therefore loses nothing:
// the messages stay, ahead of everything planned after them, until a later send takes them; and
// while they cannot go, nothing new is added past the buffer's end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace pairwall::io {

class VerdictBuffer {
 public:
  explicit VerdictBuffer(std::size_t capacity = 0) : bytes_(capacity) {}

  std::size_t capacity() const noexcept { return bytes_.size(); }
  std::size_t used() const noexcept { return used_; }
  bool fits(std::size_t size) const noexcept { return used_ + size <= bytes_.size(); }

  // Where the next message goes; the caller has checked fits() and then commits what it wrote.
  uint8_t* tail() noexcept { return bytes_.data() + used_; }
  void commit(std::size_t size) noexcept { used_ += size; }

  // Sends everything buffered with `send` (bool(std::span<const uint8_t>): all of it taken, or
  // none). On failure the buffer is kept whole, to be sent again first.
  template <typename Send>
  bool flush(Send&& send) noexcept {
    if (used_ == 0) return true;
    if (!send(std::span<const uint8_t>(bytes_.data(), used_))) return false;
    used_ = 0;
    return true;
  }

 private:
  std::vector<uint8_t> bytes_;
  std::size_t used_ = 0;
};

}  // namespace pairwall::io
