#include "daemon/control/boot_epoch.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace pairwall::control {

uint64_t wall_clock_us() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

uint64_t first_state_counter(uint64_t epoch) {
  return (epoch & ((uint64_t{1} << 52) - 1)) << 12;
}

uint64_t epoch_floor(uint64_t next_state_counter) {
  return (next_state_counter + kReservedStateIds + 4095) >> 12;
}

namespace {

// Writes `value` to `file` aside, makes it durable and renames it over, so that a power loss
// leaves the old value or the new one: an empty file after a crash (ext4's delayed allocation
// renames before the data reaches the disk) would let the epoch fall back to the clock, which is
// what the file is there for. Returns "" or why it could not.
std::string record(const std::string& file, uint64_t value) {
  const std::string tmp = file + ".new";
  const std::string text = std::to_string(value) + "\n";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot write boot epoch file " + tmp + ": " + std::strerror(errno);
  const bool written =
      ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const int write_errno = errno;
  ::close(fd);
  if (!written) return "cannot write boot epoch file " + tmp + ": " + std::strerror(write_errno);
  if (std::rename(tmp.c_str(), file.c_str()) != 0)
    return "cannot rename " + tmp + " to " + file + ": " + std::strerror(errno);
  // The rename itself is durable once its directory is.
  const auto slash = file.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : file.substr(0, slash);
  if (const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return {};
}

}  // namespace

BootEpoch take_boot_epoch(const std::string& file, uint64_t wall_clock_us) {
  BootEpoch out{wall_clock_us, {}};
  if (file.empty()) return out;

  std::ifstream in(file);
  if (in) {
    std::string text;
    std::getline(in, text);
    uint64_t floor = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), floor);
    if (ec != std::errc() || end != text.data() + text.size()) {
      out.warning =
          "boot epoch file " + file + " holds \"" + text.substr(0, 32) + "\", not a number: replaced";
    } else if (floor >= out.epoch) {
      out.epoch = floor + 1;  // the clock is behind an earlier start
    }
  }
  if (std::string error = record(file, epoch_floor(first_state_counter(out.epoch))); !error.empty())
    out.warning = error + "; a restart with the clock behind would take an epoch already used";
  return out;
}

EpochFloor::EpochFloor(std::string file, uint64_t epoch)
    : file_(std::move(file)), recorded_(epoch_floor(first_state_counter(epoch))) {}

std::string EpochFloor::update(uint64_t next_state_counter) {
  const uint64_t floor = epoch_floor(next_state_counter);
  if (file_.empty() || floor < recorded_ + (kReservedStateIds >> 13)) return {};
  std::string error = record(file_, floor);
  if (error.empty()) {
    recorded_ = floor;
    last_error_.clear();
    return {};
  }
  if (error == last_error_) return {};
  last_error_ = error;
  return error;
}

}  // namespace pairwall::control
