// Bounded single-producer single-consumer ring. The producer is a packet worker, the consumer the
// sync thread; neither ever blocks or allocates. Capacity is fixed at construction.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <memory>
#include <new>

namespace pairwall::engine {

template <typename T>
class SpscRing {
 public:
  explicit SpscRing(std::size_t capacity)
      : mask_(std::bit_ceil(capacity < 2 ? std::size_t{2} : capacity) - 1),
        slots_(std::make_unique<T[]>(mask_ + 1)) {}

  std::size_t capacity() const { return mask_ + 1; }

  // Producer side. Returns false when full; the caller counts the loss.
  bool push(const T& value) noexcept {
    const auto head = head_.load(std::memory_order_relaxed);
    if (head - tail_cache_ > mask_) {
      tail_cache_ = tail_.load(std::memory_order_acquire);
      if (head - tail_cache_ > mask_) return false;
    }
    slots_[head & mask_] = value;
    head_.store(head + 1, std::memory_order_release);
    return true;
  }

  // Consumer side. Returns false when empty.
  bool pop(T& out) noexcept {
    const auto tail = tail_.load(std::memory_order_relaxed);
    if (tail == head_cache_) {
      head_cache_ = head_.load(std::memory_order_acquire);
      if (tail == head_cache_) return false;
    }
    out = slots_[tail & mask_];
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }

  // Records pushed so far: the producer's count, read by the producer.
  std::size_t produced() const noexcept { return head_.load(std::memory_order_relaxed); }
  // Records pushed so far as the consumer sees them: all of them can be popped.
  std::size_t published() const noexcept { return head_.load(std::memory_order_acquire); }
  // Records popped so far: the consumer's count, read by the consumer.
  std::size_t consumed() const noexcept { return tail_.load(std::memory_order_relaxed); }

  std::size_t size_approx() const noexcept {
    return head_.load(std::memory_order_acquire) - tail_.load(std::memory_order_acquire);
  }

 private:
  static constexpr std::size_t kLine = 64;
  const std::size_t mask_;
  std::unique_ptr<T[]> slots_;
  alignas(kLine) std::atomic<std::size_t> head_{0};
  std::size_t tail_cache_ = 0;  // producer's view of tail
  alignas(kLine) std::atomic<std::size_t> tail_{0};
  std::size_t head_cache_ = 0;  // consumer's view of head
};

}  // namespace pairwall::engine
