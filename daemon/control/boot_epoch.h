// The boot epoch: one number per start of pairwalld, larger than every earlier one. Sync and the
// failover advertisements carry it, and their receivers refuse anything from an epoch older than
// the newest they heard (anti-replay across restarts). The wall clock alone goes backwards when a
// node boots without a real-time clock or before NTP has run; a file remembering the last epoch
// keeps the sequence growing anyway.
#pragma once

#include <cstdint>
#include <string>

namespace pairwall::control {

struct BootEpoch {
  uint64_t epoch = 0;
  std::string warning;  // non-empty: the file could not be used; the epoch is the wall clock
};

// Returns max(wall_clock_us, last epoch in `file` + 1) and records it in `file` (written aside and
// renamed, so a crash leaves the old value or the new one). An empty `file` returns the wall clock.
BootEpoch take_boot_epoch(const std::string& file, uint64_t wall_clock_us);

// Microseconds since the Unix epoch.
uint64_t wall_clock_us();

}  // namespace pairwall::control
