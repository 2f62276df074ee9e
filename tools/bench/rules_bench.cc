#include "tools/bench/rules_bench.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <variant>

#include "daemon/engine/engine.h"
#include "daemon/engine/rules/compile.h"
#include "daemon/engine/rules/parser.h"
#include "tools/bench/pass_timing.h"
#include "tools/bench/rulegen.h"

namespace pairwall::bench {

using namespace pairwall::engine;
namespace {

// The engine classifies the new flows of each prefetch group of a queue batch together: a
// forwarded packet brings two passes (in and out), so a group of forwarded new flows is one
// evaluate_batch() call of twice the group's size. The bench's queries are in passes.
constexpr std::size_t kBatch = 2 * Engine::kPrefetchGroup;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

uint64_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

std::shared_ptr<const rules::RuleSet> compile_or_throw(const rules::RuleFile& file,
                                                       InterfaceRegistry& ifaces) {
  auto compiled = rules::compile(file, ifaces);
  if (auto* e = std::get_if<rules::RuleError>(&compiled))
    throw std::runtime_error("rules bench: " + e->to_string());
  return std::get<std::shared_ptr<const rules::RuleSet>>(std::move(compiled));
}

// One rule count: its compiled set and the packets it is measured with.
struct Subject {
  uint32_t count = 0;
  InterfaceRegistry ifaces;
  std::shared_ptr<const rules::RuleSet> set;
  // The same rules in two segments (RuleSet::Segment): a match rule tags every in pass first and a
  // last rule, which no measured packet meets, tests the tag, as pf's classify-then-decide idiom
  // does. Each pass then takes both segments' lookups and a tag lookup after each.
  std::shared_ptr<const rules::RuleSet> segmented;
  std::vector<BenchPacket> packets;
  std::vector<rules::MatchQuery> queries;
  std::vector<double> single_mpps;
  std::vector<double> batch_mpps;
  std::vector<double> segmented_mpps;
};

rules::FilterRule parsed_rule(const std::string& text) {
  auto parsed = rules::parse_rules(text, "bench");
  if (auto* e = std::get_if<rules::RuleError>(&parsed))
    throw std::runtime_error("rules bench: " + e->to_string());
  return std::get<rules::RuleFile>(parsed).filter_rules.at(0);
}

// `file` with pf's tagging idiom around it: two segments, deciding every packet as `file` does.
rules::RuleFile in_two_segments(rules::RuleFile file) {
  file.filter_rules.insert(file.filter_rules.begin(), parsed_rule("match in tag SEEN\n"));
  file.filter_rules.push_back(parsed_rule("block in proto 250 tagged SEEN\n"));
  return file;
}

void prepare(Subject& subject, RulesBenchPoint& point, uint32_t packets, int runs) {
  const uint32_t count = subject.count;
  const GeneratedRules generated = generate_rules(count, 0x9e3779b97f4a7c15ull ^ count);
  for (const char* name : generated.interfaces) subject.ifaces.intern(name);

  std::vector<double> compile_ms;
  for (int run = 0; run < runs; ++run) {
    subject.set.reset();
    const uint64_t before = heap_in_use();
    const double start = thread_seconds();
    subject.set = compile_or_throw(generated.file, subject.ifaces);
    compile_ms.push_back((thread_seconds() - start) * 1e3);
    point.memory_bytes = heap_in_use() - before;
  }
  point.compile_ms = median(compile_ms);
  subject.segmented = compile_or_throw(in_two_segments(generated.file), subject.ifaces);

  // Packets decided by one of the last 10% of the rules (at least the last two, and enough for
  // both families).
  const uint32_t tail = tail_with_both_families(generated.file, std::max<uint32_t>(2, count / 10));
  const rules::RuleSet& set = *subject.set;
  subject.packets =
      packets_for_tail(generated.file, tail, packets, subject.ifaces, count, [&](const BenchPacket& p) {
        const uint32_t r = set.evaluate(p.view, rules::Direction::In, p.iface);
        return r != rules::kNoRule && r >= count - tail;
      });
  uint64_t words = 0;
  uint64_t v6 = 0;
  for (const BenchPacket& p : subject.packets) {
    subject.queries.push_back({&p.view, rules::Direction::In, p.iface});
    words += set.words_tested(p.view, rules::Direction::In, p.iface);
    v6 += p.view.family == Family::V6;
  }
  const auto measured = static_cast<double>(subject.packets.size());
  point.words_per_packet = static_cast<double>(words) / measured;
  point.ipv6_share = static_cast<double>(v6) / measured;
  // Rule counts measured on unlike packets compare families, not rule counts. Allowed: the
  // sampling spread of the generator's coin (four standard deviations) and two points.
  const double intended = kIpv6PacketPercent / 100.0;
  if (std::abs(point.ipv6_share - intended) > 0.02 + 4 * std::sqrt(intended * (1 - intended) / measured))
    throw std::runtime_error("rules bench: " + std::to_string(count) + " rules: IPv6 share " +
                             std::to_string(point.ipv6_share) + ", not the generator's");
  // Both ways of evaluating must decide every packet alike, or their figures compare nothing; and
  // the segmented set as the plain one (its rules one further on, after the match rule).
  std::vector<uint32_t> decided(subject.queries.size());
  set.evaluate_batch(subject.queries, decided);
  std::vector<uint32_t> segmented(subject.queries.size());
  subject.segmented->evaluate_batch(subject.queries, segmented);
  for (std::size_t i = 0; i < decided.size(); ++i) {
    const BenchPacket& p = subject.packets[i];
    if (decided[i] != set.evaluate(p.view, rules::Direction::In, p.iface))
      throw std::runtime_error("rules bench: evaluate_batch() and evaluate() disagree");
    if (segmented[i] != decided[i] + 1)
      throw std::runtime_error("rules bench: the segmented rule set decides otherwise");
  }
}

// One run of both ways of evaluating, `seconds` each.
void measure(Subject& subject, double seconds) {
  const rules::RuleSet& set = *subject.set;
  uint64_t check = 0;
  subject.single_mpps.push_back(fastest_pass_mpps(subject.packets.size(), seconds, [&] {
    for (const BenchPacket& p : subject.packets) check += set.evaluate(p.view, rules::Direction::In, p.iface);
  }));
  // Every packet was chosen for the rule that decides it, so the sum cannot be zero; using it
  // also keeps the compiler from dropping the loop.
  if (check == 0) throw std::runtime_error("rules bench: no packet was decided");

  const std::vector<rules::MatchQuery>& queries = subject.queries;
  std::vector<uint32_t> decided(queries.size());
  const auto batched = [&](const rules::RuleSet& rules) {
    check = 0;
    const double mpps = fastest_pass_mpps(queries.size(), seconds, [&] {
      for (std::size_t at = 0; at < queries.size(); at += kBatch) {
        const std::size_t n = std::min(kBatch, queries.size() - at);
        rules.evaluate_batch({queries.data() + at, n}, {decided.data() + at, n});
      }
      for (uint32_t r : decided) check += r;
    });
    if (check == 0) throw std::runtime_error("rules bench: no packet was decided");
    return mpps;
  };
  subject.batch_mpps.push_back(batched(set));
  subject.segmented_mpps.push_back(batched(*subject.segmented));
}

}  // namespace

std::map<uint32_t, RulesBenchPoint> run_rules_bench(const std::vector<uint32_t>& rule_counts,
                                                    uint32_t packets, double seconds, int runs) {
  std::map<uint32_t, RulesBenchPoint> out;
  std::vector<std::unique_ptr<Subject>> subjects;
  for (uint32_t n : rule_counts) {
    subjects.push_back(std::make_unique<Subject>());
    subjects.back()->count = n;
    prepare(*subjects.back(), out[n], packets, runs);
  }
  // The rule counts take turns, run by run: a machine whose load drifts then shifts every point
  // alike, and the ratios between them (the figure that matters) hold.
  for (int run = 0; run < runs; ++run) {
    for (auto& subject : subjects) measure(*subject, seconds);
  }
  for (const auto& subject : subjects) {
    out[subject->count].mpps = median(subject->batch_mpps);
    out[subject->count].single_mpps = median(subject->single_mpps);
    out[subject->count].segmented_mpps = median(subject->segmented_mpps);
  }
  return out;
}

}  // namespace pairwall::bench
