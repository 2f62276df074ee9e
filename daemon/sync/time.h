// The sync protocol never reads a clock: every entry point takes `now` from its caller, so the
// unit tests drive loss, resends and timeouts by hand. Microseconds, because round trips on a
// direct link are well below a millisecond.
#pragma once

#include <chrono>

namespace pairwall::sync {

// Microseconds since an arbitrary, monotonic epoch chosen by the caller.
using Micros = std::chrono::microseconds;

}  // namespace pairwall::sync
