// State sync benchmarks: two nodes in one process (two engines, two SyncServices on loopback UDP,
// 127.0.0.1 and 127.0.0.2, real HMAC, real Engine::apply), the local node's states made by
// Engine::process() from crafted TCP packets on worker threads as the packet path makes them.
// Needs root (the sync socket is bound to its interface, SO_BINDTODEVICE).
#pragma once

#include <cstdint>

#include "tools/bench/json.h"

namespace pairwall::bench {

struct SyncBenchResult {
  double states_synced_per_s = 0;  // inserts made on A and applied on B, sustained, none lost
  uint64_t states_synced = 0;
  double bulk_states_per_s = 0;  // a restarted B asking for A's whole table
  uint64_t bulk_states = 0;
  double bulk_seconds = 0;
  double update_latency_ms_p50 = 0;  // a TCP state change on A until B's table shows it
  double update_latency_ms_p99 = 0;
  double insert_latency_ms_p50 = 0;  // a new state on A until B has it
  double insert_latency_ms_p99 = 0;
  double create_per_s_sync_off = 0;  // new states per second on one worker, rings drained
  // The same with sync shipping every one to a peer that acks and counts them (its table work is
  // not on this node's CPUs, as on a real pair).
  double create_per_s_sync_on = 0;
  double create_rate_ratio = 0;
  // The same with the whole peer (engine, apply) in this process, on the same two CPUs.
  double create_per_s_sync_on_shared = 0;
  double create_rate_ratio_shared_cpu = 0;
  uint64_t lost = 0;  // states made on A that never reached B, over every phase (must be 0)
};

// `seconds`: length of each timed phase; `bulk_states`: table size for the bulk measurement.
SyncBenchResult run_sync_bench(double seconds, uint32_t bulk_states, int runs);

// The `sync` suite's keys (states_synced_per_s, bulk_states_per_s of 1,000,000 states,
// create_rate_ratio, update_latency_ms_p50/p99, ...).
void sync_keys(double seconds, int runs, Json& out);

}  // namespace pairwall::bench
