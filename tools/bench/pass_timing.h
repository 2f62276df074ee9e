// How the in-process benchmarks time their work: in thread CPU time, by the fastest of many short
// passes.
#pragma once

#include <time.h>

#include <algorithm>
#include <cstddef>
#include <limits>

namespace pairwall::bench {

// CPU time of this thread: on a shared machine, wall time also counts the time the thread waits
// for a CPU, which says nothing about the code. On an idle machine the two agree.
inline double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Runs `pass` (which handles `packets` packets) for `seconds` of thread CPU time, timing each
// run: the rate of the fastest, in millions of packets a second. A pass takes about a millisecond
// or less, so most passes run undisturbed; the slower ones measure the other guests of a shared
// host, not the code.
template <typename Pass>
double fastest_pass_mpps(std::size_t packets, double seconds, Pass pass) {
  const double start = thread_seconds();
  double fastest = std::numeric_limits<double>::infinity();
  for (double now = start; now - start < seconds;) {
    pass();
    const double after = thread_seconds();
    fastest = std::min(fastest, after - now);
    now = after;
  }
  return static_cast<double>(packets) / fastest / 1e6;
}

}  // namespace pairwall::bench
