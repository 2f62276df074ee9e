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

// Returns max(wall_clock_us, the floor in `file` + 1) and records this start's floor in `file`
// (written aside and renamed, so a crash leaves the old value or the new one). An empty `file`
// returns the wall clock.
BootEpoch take_boot_epoch(const std::string& file, uint64_t wall_clock_us);

// State ids: a start counts them up from first_state_counter(epoch), 4096 to an epoch step
// (microseconds), which lasts until 2112. Started a second after another, a node counts from 4
// billion ids above it.
uint64_t first_state_counter(uint64_t epoch);

// But a start whose clock is behind takes the file's floor + 1, and the ids of the start before it
// must all lie below its own: the floor is the epoch past the ids a start has made and the next
// kReservedStateIds, kept ahead while it runs (EpochFloor).
inline constexpr uint64_t kReservedStateIds = uint64_t{1} << 32;
uint64_t epoch_floor(uint64_t next_state_counter);

// Keeps the floor in the file ahead of the ids this start makes: recorded again once half the
// reserve is used, so that a node writes the file once per 2 billion states, not per check.
class EpochFloor {
 public:
  EpochFloor(std::string file, uint64_t epoch);
  // Returns why the floor could not be recorded, once per distinct reason; else "".
  std::string update(uint64_t next_state_counter);
  uint64_t recorded() const { return recorded_; }

 private:
  std::string file_;
  uint64_t recorded_;
  std::string last_error_;
};

// Microseconds since the Unix epoch.
uint64_t wall_clock_us();

}  // namespace pairwall::control
