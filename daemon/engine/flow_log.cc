#include "daemon/engine/flow_log.h"

#include <mutex>
#include <utility>

namespace pairwall::engine {

FlowLog::FlowLog(std::size_t capacity) : capacity_(capacity) {
  records_.reserve(capacity_);
}

bool FlowLog::push(const FlowRecord& record) noexcept {
  std::lock_guard guard(lock_);
  if (records_.size() >= capacity_) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  records_.push_back(record);
  recorded_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void FlowLog::take(std::vector<FlowRecord>& out) {
  // Reserved before the lock, so that the swap hands push() a vector it can fill without allocating.
  out.clear();
  out.reserve(capacity_);
  std::lock_guard guard(lock_);
  std::swap(records_, out);
}

}  // namespace pairwall::engine
