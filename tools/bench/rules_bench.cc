#include "tools/bench/rules_bench.h"

#include <malloc.h>
#include <time.h>

#include <algorithm>
#include <stdexcept>
#include <variant>

#include "daemon/engine/rules/compile.h"
#include "tools/bench/rulegen.h"

namespace pairwall::bench {

using namespace pairwall::engine;
namespace {

// CPU time of this thread: on a shared machine, wall time also counts the time the thread waits
// for a CPU, which says nothing about the code. On an idle machine the two agree.
double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

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

RulesBenchPoint measure(uint32_t count, double seconds, int runs) {
  const GeneratedRules generated = generate_rules(count, 0x9e3779b97f4a7c15ull ^ count);
  InterfaceRegistry ifaces;
  for (const char* name : generated.interfaces) ifaces.intern(name);

  RulesBenchPoint point;
  std::vector<double> compile_ms;
  std::shared_ptr<const rules::RuleSet> set;
  for (int run = 0; run < runs; ++run) {
    set.reset();
    const uint64_t before = heap_in_use();
    const double start = thread_seconds();
    set = compile_or_throw(generated.file, ifaces);
    compile_ms.push_back((thread_seconds() - start) * 1e3);
    point.memory_bytes = heap_in_use() - before;
  }
  point.compile_ms = median(compile_ms);

  // Packets decided by one of the last 10% of the rules (at least the last two).
  const uint32_t tail = std::max<uint32_t>(2, count / 10);
  const auto packets = packets_for_tail(generated.file, tail, 4096, ifaces, count, [&](const BenchPacket& p) {
    const uint32_t r = set->evaluate(p.view, rules::Direction::In, p.iface);
    return r != rules::kNoRule && r >= count - tail;
  });

  std::vector<double> mpps;
  for (int run = 0; run < runs; ++run) {
    uint64_t evaluated = 0;
    uint64_t check = 0;
    const double start = thread_seconds();
    double elapsed = 0;
    while (elapsed < seconds) {
      for (const BenchPacket& p : packets) check += set->evaluate(p.view, rules::Direction::In, p.iface);
      evaluated += packets.size();
      elapsed = thread_seconds() - start;
    }
    // Every packet was chosen for the rule that decides it, so the sum cannot be zero; using it
    // also keeps the compiler from dropping the loop.
    if (check == 0) throw std::runtime_error("rules bench: no packet was decided");
    mpps.push_back(static_cast<double>(evaluated) / elapsed / 1e6);
  }
  point.mpps = median(mpps);
  return point;
}

}  // namespace

std::map<uint32_t, RulesBenchPoint> run_rules_bench(const std::vector<uint32_t>& rule_counts, double seconds,
                                                    int runs) {
  std::map<uint32_t, RulesBenchPoint> out;
  for (uint32_t n : rule_counts) out[n] = measure(n, seconds, runs);
  return out;
}

}  // namespace pairwall::bench
