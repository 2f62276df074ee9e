#include "daemon/engine/spin_lock.h"

#include <sched.h>

namespace pairwall::engine {

void SpinLock::lock() noexcept {
  for (unsigned spins = 0;; ++spins) {
    if (!locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire))
      return;
    if (spins < 256) {
      __builtin_ia32_pause();
    } else {
      sched_yield();
    }
  }
}

}  // namespace pairwall::engine
