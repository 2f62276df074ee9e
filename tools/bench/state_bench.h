// Engine state-path benchmarks: established-flow hits at different table sizes, and state
// creation with expiry running. Single thread, the real Engine::process() (and process_batch())
// on crafted packets.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace pairwall::bench {

struct StateBenchResult {
  // State count -> millions of hit packets per CPU second of the thread in the fastest pass of
  // 4,096 (pass_timing.h), through Engine::process_batch() on 64-packet batches: one recvmmsg's
  // worth, as io/nfqueue calls it.
  std::map<uint32_t, double> lookup_mpps;
  // The same with one Engine::process() call per packet, for comparison.
  std::map<uint32_t, double> lookup_single_mpps;
  double create_per_s = 0;  // new states per second, expiry running
  // SYNs `synproxy state` answers per second (a state and a SYN-ACK each), expiry running.
  double synproxy_syn_per_s = 0;
  // CPU ns per hit at the largest table measured (ns_per_packet_hit_states): batched, and single.
  double ns_per_packet_hit = 0;
  double ns_per_packet_hit_single = 0;
  uint32_t ns_per_packet_hit_states = 0;
};

// `state_counts` e.g. {1000, 100000, 1000000}; `seconds` per measurement.
StateBenchResult run_state_bench(const std::vector<uint32_t>& state_counts, double seconds);

}  // namespace pairwall::bench
