#include "daemon/control/boot_epoch.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/unit/support/temp_dir.h"

namespace pc = pairwall::control;
namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::string s;
  std::getline(f, s);
  return s;
}

}  // namespace

TEST_CASE("the boot epoch grows even when the clock went back", "[control][epoch]") {
  const pairwall::test::TempDir dir("epoch");
  const std::string file = (dir.path / "epoch").string();
  // The file holds the floor: past this start's first id and the ids reserved after it.
  const uint64_t reserved_epochs = pc::kReservedStateIds >> 12;

  const auto first = pc::take_boot_epoch(file, 5'000'000);
  CHECK(first.epoch == 5'000'000);
  CHECK(first.warning.empty());
  CHECK(read(file) == std::to_string(5'000'000 + reserved_epochs));

  // Restarted with the clock an hour behind: still larger than before, and its ids above the
  // earlier start's first kReservedStateIds.
  const auto second = pc::take_boot_epoch(file, 1'000'000);
  CHECK(second.epoch == 5'000'001 + reserved_epochs);
  CHECK(pc::first_state_counter(second.epoch) >=
        pc::first_state_counter(first.epoch) + pc::kReservedStateIds);
  CHECK(read(file) == std::to_string(second.epoch + reserved_epochs));

  // The clock ahead again: the clock wins.
  const auto third = pc::take_boot_epoch(file, 9'000'000'000);
  CHECK(third.epoch == 9'000'000'000);
  CHECK_FALSE(fs::exists(file + ".new"));
}

// A start that made more states than the reserve before a restart with the clock behind: the next
// start's ids must still lie above all of them.
TEST_CASE("the floor is kept ahead of the state ids a start makes", "[control][epoch]") {
  const pairwall::test::TempDir dir("epoch");
  const std::string file = (dir.path / "epoch").string();
  const auto first = pc::take_boot_epoch(file, 5'000'000);
  const std::string recorded = read(file);
  pc::EpochFloor floor(file, first.epoch);
  const uint64_t start = pc::first_state_counter(first.epoch);

  // Under half the reserve used: the file is left alone.
  CHECK(floor.update(start + pc::kReservedStateIds / 2 - 4096).empty());
  CHECK(read(file) == recorded);
  // Past it: recorded again, a whole reserve ahead of the ids made.
  const uint64_t made = start + pc::kReservedStateIds / 2 + 10;
  CHECK(floor.update(made).empty());
  CHECK(read(file) == std::to_string(pc::epoch_floor(made)));
  CHECK(floor.recorded() == pc::epoch_floor(made));

  // The start then makes its whole reserve and more, and restarts with the clock behind.
  const uint64_t last_made = made + pc::kReservedStateIds / 2 - 4096;
  const auto next = pc::take_boot_epoch(file, 1'000'000);
  CHECK(pc::first_state_counter(next.epoch) > last_made);
}

TEST_CASE("a floor that cannot be recorded is reported once per reason", "[control][epoch]") {
  const pairwall::test::TempDir dir("epoch");
  pc::EpochFloor floor((dir.path / "missing" / "epoch").string(), 5'000'000);
  const uint64_t far = pc::first_state_counter(5'000'000) + pc::kReservedStateIds;
  CHECK(floor.update(far).find("cannot write") != std::string::npos);
  CHECK(floor.update(far + 1).empty());
  pc::EpochFloor none("", 5'000'000);
  CHECK(none.update(far).empty());
}

TEST_CASE("no epoch file: the wall clock", "[control][epoch]") {
  const auto e = pc::take_boot_epoch("", 42);
  CHECK(e.epoch == 42);
  CHECK(e.warning.empty());
}

TEST_CASE("an epoch file that cannot be used is reported, not fatal", "[control][epoch]") {
  const pairwall::test::TempDir dir("epoch");
  SECTION("garbage inside") {
    const std::string file = (dir.path / "epoch").string();
    std::ofstream(file) << "not a number\n";
    const auto e = pc::take_boot_epoch(file, 7);
    CHECK(e.epoch == 7);
    CHECK(e.warning.find("not a number") != std::string::npos);
    CHECK(read(file) == std::to_string(7 + (pc::kReservedStateIds >> 12)));
  }
  SECTION("directory missing") {
    const auto e = pc::take_boot_epoch((dir.path / "missing" / "epoch").string(), 7);
    CHECK(e.epoch == 7);
    CHECK(e.warning.find("cannot write") != std::string::npos);
  }
}
