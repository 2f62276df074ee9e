#include "daemon/control/boot_epoch.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

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

// Writes `value` to `file` aside and renames it over. Returns "" or why it could not.
std::string record(const std::string& file, uint64_t value) {
  const std::string tmp = file + ".new";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << value << "\n";
    f.flush();
    if (!f) return "cannot write boot epoch file " + tmp + ": " + std::strerror(errno);
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0)
    return "cannot rename " + tmp + " to " + file + ": " + std::strerror(errno);
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
