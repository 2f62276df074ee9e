// pairwallctl's human-readable numbers, at the edges where one decimal rounds up into the next unit.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "tools/ctl/format.h"

using pairwall::ctl::human_bytes;
using pairwall::ctl::human_duration_ms;

TEST_CASE("pairwallctl: sizes and durations never read as a full unit below the next", "[ctl]") {
  struct Case {
    uint64_t value;
    std::string text;
  };
  const Case bytes[] = {
      {0, "0 B"},
      {999, "999 B"},
      {1'000, "1.0 KB"},
      {1'500, "1.5 KB"},
      {999'949, "999.9 KB"},
      {999'950, "1.0 MB"},
      {999'999, "1.0 MB"},
      {1'000'000, "1.0 MB"},
      {12'340'000, "12.3 MB"},
      {999'999'999'999, "1.0 TB"},
  };
  for (const Case& c : bytes) {
    INFO(c.value);
    CHECK(human_bytes(c.value) == c.text);
  }
  const Case durations[] = {
      {0, "0.0s"},       {12'345, "12.3s"},     {59'949, "59.9s"},    {59'999, "59.9s"},
      {60'000, "1m00s"}, {3'599'999, "59m59s"}, {3'600'000, "1h00m"}, {90'061'000, "1d01h"},
  };
  for (const Case& c : durations) {
    INFO(c.value);
    CHECK(human_duration_ms(c.value) == c.text);
  }
}
