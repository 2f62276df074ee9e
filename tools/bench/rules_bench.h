// Rule evaluation benchmark: new-flow classification on the in pass, one thread, on generated
// rule sets of growing size, with packets decided near the end of the set. Measured both as the
// engine classifies (RuleSet::evaluate_batch, the new flows of one prefetch group per call) and
// with one evaluate() per packet.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace pairwall::bench {

struct RulesBenchPoint {
  double mpps = 0;            // evaluate_batch(), median of the runs' fastest passes, millions per CPU second
  double single_mpps = 0;     // one evaluate() per packet, likewise
  double segmented_mpps = 0;  // evaluate_batch() on the rules in two segments (rules_bench.cc)
  double compile_ms = 0;      // compile() of the parsed file, thread CPU time, median of the runs
  uint64_t memory_bytes = 0;  // heap held by the compiled RuleSet
  double words_per_packet = 0;  // 64-rule words the classifier tests per packet, mean (untimed)
  double ipv6_share = 0;        // of the measured packets
};

// `packets` distinct packets per rule count; `seconds` (of thread CPU time) per run at least,
// `runs` runs per point, median reported.
std::map<uint32_t, RulesBenchPoint> run_rules_bench(const std::vector<uint32_t>& rule_counts,
                                                    uint32_t packets, double seconds, int runs);

}  // namespace pairwall::bench
