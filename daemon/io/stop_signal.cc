#include "daemon/io/stop_signal.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pairwall::io {

StopSignal::StopSignal() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (fd_ < 0) throw std::runtime_error(std::string("cannot create an eventfd: ") + std::strerror(errno));
}

StopSignal::~StopSignal() {
  close(fd_);
}

void StopSignal::request() noexcept {
  flag_.store(true, std::memory_order_relaxed);
  const uint64_t one = 1;
  // Only fails when the counter would overflow, and then it is readable already.
  [[maybe_unused]] const auto n = write(fd_, &one, sizeof(one));
}

}  // namespace pairwall::io
