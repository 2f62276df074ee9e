#include "daemon/io/kernel_queue_stats.h"

#include <catch2/catch.hpp>

namespace pairwall::io {
namespace {

TEST_CASE("parses /proc/net/netfilter/nfnetlink_queue", "[nfqueue]") {
  const char* text =
      "    0 3141592     7 2 65535     12   345 98765432  1\n"
      "    3   4242     0 2 65535      0     0        0  1\n"
      "garbage line\n";
  const auto stats = parse_kernel_queue_stats(text);
  REQUIRE(stats.size() == 2);
  CHECK(stats[0].queue == 0);
  CHECK(stats[0].peer_portid == 3141592);
  CHECK(stats[0].queued == 7);
  CHECK(stats[0].copy_mode == 2);
  CHECK(stats[0].copy_range == 65535);
  CHECK(stats[0].queue_dropped == 12);
  CHECK(stats[0].user_dropped == 345);
  CHECK(stats[0].id_sequence == 98765432);
  CHECK(stats[1].queue == 3);
  REQUIRE(find_queue(stats, 3));
  CHECK(find_queue(stats, 3)->peer_portid == 4242);
  CHECK_FALSE(find_queue(stats, 1));
  CHECK(parse_kernel_queue_stats("").empty());
}

TEST_CASE("a missing statistics file is an error naming the file", "[nfqueue]") {
  CHECK_THROWS_WITH(read_kernel_queue_stats("/nonexistent/nfnetlink_queue"),
                    Catch::Contains("/nonexistent/nfnetlink_queue"));
}

}  // namespace
}  // namespace pairwall::io
