// Engine state-path benchmarks: established-flow hits at different table sizes, and state
// creation with expiry running. Single thread, the real Engine::process() (and process_batch())
// on crafted packets.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace pairwall::bench {

struct StateBenchResult {
  // State count -> millions of hit packets per CPU second of the thread, one process() call per
  // packet (how io/nfqueue calls the engine today).
  std::map<uint32_t, double> lookup_mpps;
  // The same through Engine::process_batch() on 64-packet batches (one recvmmsg's worth).
  std::map<uint32_t, double> lookup_batch_mpps;
  double create_per_s = 0;  // new states per second, expiry running
  // CPU ns per single-packet hit at the largest table measured (ns_per_packet_hit_states), from
  // the lookup_mpps run there.
  double ns_per_packet_hit = 0;
  uint32_t ns_per_packet_hit_states = 0;
};

// `state_counts` e.g. {1000, 100000, 1000000}; `seconds` per measurement.
StateBenchResult run_state_bench(const std::vector<uint32_t>& state_counts, double seconds);

}  // namespace pairwall::bench
