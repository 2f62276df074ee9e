// What the control plane reads from the packet path: the workers' counters and the queues'.
// Implemented in main() over the NFQUEUE workers; reading never stops a worker.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/engine/engine.h"
#include "daemon/engine/reason.h"

namespace pairwall::control {

struct QueueCounters {
  uint16_t queue = 0;
  uint64_t packets = 0;
  uint64_t bytes = 0;
  uint64_t drops = 0;        // kernel queue full, packet dropped
  uint64_t overruns = 0;     // netlink socket buffer overflow
  uint64_t uninspected = 0;  // settled unseen by the fail-open policy (longer than the copy range, ...)
  uint64_t verdict_errors = 0;
  uint32_t max_len = 0;       // the kernel's queue length
  uint64_t rcvbuf_bytes = 0;  // the socket's receive buffer, as the kernel reports it
};

class DataPlane {
 public:
  virtual ~DataPlane() = default;
  virtual std::vector<const engine::Worker*> workers() const = 0;
  virtual std::vector<QueueCounters> queues() const = 0;
};

struct RuleCounters {
  uint32_t number = 0;  // within its anchor
  std::string anchor;   // its path, empty in the main rule set
  std::string text;
  std::string label;     // the rule's `label`, or empty
  std::string location;  // file:line
  uint64_t evaluations = 0;
  uint64_t packets = 0;
  uint64_t bytes = 0;
  uint32_t states_current = 0;
  uint64_t states_created = 0;
};

// Every counter the daemon exports, read at one moment (each counter is exact; the set is not a
// transaction across workers, which is fine for monitoring).
struct CountersSnapshot {
  uint64_t packets = 0;
  uint64_t bytes = 0;
  std::array<uint64_t, engine::kReasonCount> reasons{};
  uint64_t states = 0;
  uint64_t state_limit = 0;
  double timeout_scale = 1.0;  // adaptive timeouts' factor at the last expiry run
  uint64_t source_nodes = 0;
  uint64_t source_node_limit = 0;
  uint64_t source_overloads = 0;  // queued for their tables
  uint64_t source_overloads_lost = 0;
  // States refused and connections cut, by source limit (engine::SourceLimitKind's order).
  std::array<uint64_t, engine::kSourceLimitKinds> source_limited{};
  uint64_t events_lost = 0;
  std::vector<RuleCounters> rules;
  std::vector<RuleCounters> translations;  // nat, rdr and binat rules, numbered apart (no label)
  std::vector<RuleCounters> scrubs;        // scrub rules, numbered apart: the packets they matched first
  uint64_t rules_digest = 0;               // engine::rules::RuleSet::digest()
  std::vector<QueueCounters> queues;

  // Verdicts whose reason is not a pass.
  uint64_t drops() const;
};

CountersSnapshot take_snapshot(const engine::Engine& engine, const DataPlane* data_plane);

class MetricWriter;
// pairwall_packets_total, pairwall_bytes_total, pairwall_verdicts_total{reason}, pairwall_states,
// pairwall_state_limit, pairwall_timeout_scale, pairwall_source_nodes, pairwall_source_node_limit,
// pairwall_source_limited_total{limit}, pairwall_source_overloads_total,
// pairwall_source_overloads_lost_total, pairwall_rule_*{rule}, pairwall_queue_*{queue}.
void render_core_metrics(const CountersSnapshot& snapshot, MetricWriter& out);

}  // namespace pairwall::control
