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

  const auto first = pc::take_boot_epoch(file, 5'000'000);
  CHECK(first.epoch == 5'000'000);
  CHECK(first.warning.empty());
  CHECK(read(file) == "5000000");

  // Restarted with the clock an hour behind: still larger than before.
  const auto second = pc::take_boot_epoch(file, 1'000'000);
  CHECK(second.epoch == 5'000'001);
  CHECK(read(file) == "5000001");

  // The clock ahead again: the clock wins.
  const auto third = pc::take_boot_epoch(file, 9'000'000);
  CHECK(third.epoch == 9'000'000);
  CHECK_FALSE(fs::exists(file + ".new"));
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
    CHECK(read(file) == "7");
  }
  SECTION("directory missing") {
    const auto e = pc::take_boot_epoch((dir.path / "missing" / "epoch").string(), 7);
    CHECK(e.epoch == 7);
    CHECK(e.warning.find("cannot write") != std::string::npos);
  }
}
