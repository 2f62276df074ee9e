// Engine state-path benchmarks: established-flow hits at different table sizes, and state
// creation with expiry running. Single thread, the real Engine::process() on crafted packets.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace pairwall::bench {

struct StateBenchResult {
  std::map<uint32_t, double> lookup_mpps;  // state count -> millions of hit packets per second
  double create_per_s = 0;                 // new states per second, expiry running
  double ns_per_packet_hit = 0;            // at the smallest table
};

// `state_counts` e.g. {1000, 100000, 1000000}; `seconds` per measurement.
StateBenchResult run_state_bench(const std::vector<uint32_t>& state_counts, double seconds);

}  // namespace pairwall::bench
