// The engine never reads a clock: every entry point takes `now` from its caller, so tests and
// replays (pairwall-check --pcap) control time exactly.
#pragma once

#include <chrono>
#include <cstdint>

namespace pairwall::engine {

// Milliseconds since an arbitrary, monotonic epoch chosen by the caller.
using Millis = std::chrono::duration<int64_t, std::milli>;

}  // namespace pairwall::engine
