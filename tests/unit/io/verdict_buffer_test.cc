// A queue socket's verdict messages: in the order planned, nothing lost to a failed send.
#include "daemon/io/verdict_buffer.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

using pairwall::io::VerdictBuffer;

namespace {

void put(VerdictBuffer& buffer, const std::string& message) {
  REQUIRE(buffer.fits(message.size()));
  std::memcpy(buffer.tail(), message.data(), message.size());
  buffer.commit(message.size());
}

// A kernel that refuses the first `refusals` sends and records what it takes.
struct Kernel {
  int refusals = 0;
  std::string taken;
  bool operator()(std::span<const uint8_t> bytes) {
    if (refusals > 0) {
      --refusals;
      return false;
    }
    taken.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return true;
  }
};

}  // namespace

TEST_CASE("verdicts a send failed to deliver are sent again first, before any planned after them",
          "[nfqueue][verdicts]") {
  VerdictBuffer buffer(64);
  Kernel kernel;
  kernel.refusals = 2;
  put(buffer, "drop 10;");
  CHECK_FALSE(buffer.flush(kernel));
  CHECK(buffer.used() == 8);  // kept whole
  // The batch verdict planned next goes behind the drop, never ahead of it.
  put(buffer, "batch 12;");
  CHECK_FALSE(buffer.flush(kernel));
  CHECK(buffer.flush(kernel));
  CHECK(kernel.taken == "drop 10;batch 12;");
  CHECK(buffer.used() == 0);
  // Nothing to send is not a failure.
  CHECK(buffer.flush(kernel));
  CHECK(kernel.taken == "drop 10;batch 12;");
}

TEST_CASE("a full buffer takes no message past its end", "[nfqueue][verdicts]") {
  VerdictBuffer buffer(16);
  put(buffer, "0123456789");
  CHECK(buffer.fits(6));
  CHECK_FALSE(buffer.fits(7));
  Kernel kernel;
  CHECK(buffer.flush(kernel));
  CHECK(buffer.fits(16));
}
