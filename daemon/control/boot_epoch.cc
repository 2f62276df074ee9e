#include "daemon/control/boot_epoch.h"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace pairwall::control {

uint64_t wall_clock_us() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

BootEpoch take_boot_epoch(const std::string& file, uint64_t wall_clock_us) {
  BootEpoch out{wall_clock_us, {}};
  if (file.empty()) return out;

  std::ifstream in(file);
  if (in) {
    std::string text;
    std::getline(in, text);
    uint64_t last = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), last);
    if (ec != std::errc() || end != text.data() + text.size()) {
      out.warning =
          "boot epoch file " + file + " holds \"" + text.substr(0, 32) + "\", not a number: replaced";
    } else if (last >= out.epoch) {
      out.epoch = last + 1;  // the clock is behind an earlier boot
    }
  }

  const std::string tmp = file + ".new";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << out.epoch << "\n";
    f.flush();
    if (!f) {
      out.warning = "cannot write boot epoch file " + tmp + ": " + std::strerror(errno) +
                    "; using the wall clock, which a restart with the clock behind would repeat";
      out.epoch = std::max(out.epoch, wall_clock_us);
      return out;
    }
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0) {
    out.warning = "cannot rename " + tmp + " to " + file + ": " + std::strerror(errno);
  }
  return out;
}

}  // namespace pairwall::control
