// pairwall-bench SUITE [--json] [--only NAME] [--seconds S] [--runs N] [--rules N,N,...]
//                       [--rule-packets N] [--states N,N,...]
//
// A suite is a list of named benchmarks; each adds its keys to one JSON object, printed as one
// line with --json or as a table otherwise. Add a benchmark by writing a function that fills its
// keys and listing it under its suite in kSuites.
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tools/bench/json.h"
#include "tools/bench/rules_bench.h"
#include "tools/bench/state_bench.h"
#include "tools/bench/sync_bench.h"

namespace pairwall::bench {
namespace {

struct Options {
  bool json = false;
  double seconds = 0.5;  // per measurement run
  int runs = 3;          // runs per point; the median is reported
  std::vector<uint32_t> rule_counts = {10, 100, 1000, 10000};
  std::vector<uint32_t> state_counts = {1000, 100000, 1000000};
  uint32_t rule_packets = 4096;  // distinct packets per rule count
  std::string only;              // run just this benchmark of the suite
};

struct Benchmark {
  std::string_view name;
  void (*fill)(const Options&, Json& out);
};

void rules_keys(const Options& options, Json& out) {
  const auto points =
      run_rules_bench(options.rule_counts, options.rule_packets, options.seconds, options.runs);
  for (const auto& [count, p] : points) {
    const std::string n = std::to_string(count);
    out["rules_mpps"][n] = p.mpps;
    out["rules_single_mpps"][n] = p.single_mpps;
    out["rules_segmented_mpps"][n] = p.segmented_mpps;
    out["rules_compile_ms"][n] = p.compile_ms;
    out["rules_memory_bytes"][n] = p.memory_bytes;
    out["rules_words_per_packet"][n] = p.words_per_packet;
    out["rules_ipv6_share"][n] = p.ipv6_share;
  }
}

void state_keys(const Options& options, Json& out) {
  const StateBenchResult r = run_state_bench(options.state_counts, options.seconds);
  // state_lookup_mpps: Engine::process_batch() on recvmmsg-sized batches, as the daemon's queue
  // workers call the engine; state_lookup_single_mpps: one process() call per packet.
  for (const auto& [count, mpps] : r.lookup_mpps) out["state_lookup_mpps"][std::to_string(count)] = mpps;
  for (const auto& [count, mpps] : r.lookup_single_mpps)
    out["state_lookup_single_mpps"][std::to_string(count)] = mpps;
  out["state_create_per_s"] = r.create_per_s;
  out["synproxy_syn_per_s"] = r.synproxy_syn_per_s;
  out["ns_per_packet_hit"] = r.ns_per_packet_hit;
  out["ns_per_packet_hit_single"] = r.ns_per_packet_hit_single;
  out["ns_per_packet_hit_states"] = r.ns_per_packet_hit_states;
}

const std::map<std::string_view, std::vector<Benchmark>> kSuites = {
    {"engine", {{"rules", rules_keys}, {"state", state_keys}}},
    {"sync", {{"sync", [](const Options& o, Json& out) { sync_keys(o.seconds, o.runs, out); }}}},
};

// Suites that drive network namespaces and external tools, run as tools/bench/<name>.py.
constexpr std::string_view kScriptSuites[] = {"e2e", "rules", "states", "failover", "sync-lab"};

int usage(const std::string& problem) {
  std::fprintf(
      stderr,
      "pairwall-bench: %s\n"
      "usage: pairwall-bench SUITE [--json] [--only NAME] [--seconds S] [--runs N] [--rules N,N,...]\n"
      "       [--rule-packets N] [--states N,N,...]\n"
      "suites (namespaces, root):",
      problem.c_str());
  for (const std::string_view name : kScriptSuites)
    std::fprintf(stderr, " %.*s", static_cast<int>(name.size()), name.data());
  std::fprintf(stderr, "\nsuites (in process):");
  for (const auto& [name, benchmarks] : kSuites)
    std::fprintf(stderr, " %.*s", static_cast<int>(name.size()), name.data());
  std::fprintf(stderr, "\n");
  return 2;
}

template <typename T>
bool parse_number(std::string_view text, T& out) {
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

bool parse_counts(std::string_view text, std::vector<uint32_t>& out) {
  out.clear();
  while (!text.empty()) {
    const auto comma = text.find(',');
    uint32_t n = 0;
    if (!parse_number(text.substr(0, comma), n) || n == 0) return false;
    out.push_back(n);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  return !out.empty();
}

void print_table(const Json& result, const std::string& indent = "") {
  for (const auto& [key, value] : result.members()) {
    if (value.is_object()) {
      std::printf("%s%s\n", indent.c_str(), key.c_str());
      print_table(value, indent + "  ");
    } else {
      std::printf("%s%-24s %s\n", indent.c_str(), key.c_str(), value.scalar_text().c_str());
    }
  }
}

// Suites that drive network namespaces and external tools (iperf3, iptables, pairwalld) are
// scripts beside this file; the binary hands them its arguments so that every suite has one entry.
int exec_script_suite(const std::string& suite, int argc, char** argv) {
  const std::string script = std::string(PAIRWALL_SOURCE_DIR) + "/tools/bench/" + suite + ".py";
  std::vector<char*> args;
  std::string python = "python3";
  args.push_back(python.data());
  std::string script_arg = script;
  args.push_back(script_arg.data());
  std::string build_flag = "--build";
  std::string build_dir = std::string(PAIRWALL_BINARY_DIR);
  args.push_back(build_flag.data());
  args.push_back(build_dir.data());
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "pairwall-bench: cannot run %s: %s\n", script.c_str(), std::strerror(errno));
  return 1;
}

int run(int argc, char** argv) {
  if (argc < 2) return usage("no suite given");
  for (const std::string_view script : kScriptSuites)
    if (argv[1] == script) return exec_script_suite(std::string(script), argc, argv);
  const auto suite = kSuites.find(argv[1]);
  if (suite == kSuites.end()) return usage(std::string("unknown suite '") + argv[1] + "'");
  Options options;
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--json") {
      options.json = true;
    } else if (arg == "--only" && has_value) {
      options.only = argv[++i];
    } else if (arg == "--seconds" && has_value) {
      const std::string value = argv[++i];
      if (!parse_number(value, options.seconds) || !(options.seconds > 0))
        return usage("--seconds wants a positive number");
    } else if (arg == "--runs" && has_value) {
      if (!parse_number(std::string_view(argv[++i]), options.runs) || options.runs < 1) {
        return usage("--runs wants a positive integer");
      }
    } else if (arg == "--rules" && has_value) {
      if (!parse_counts(argv[++i], options.rule_counts))
        return usage("--rules wants counts like 10,100,1000");
    } else if (arg == "--states" && has_value) {
      if (!parse_counts(argv[++i], options.state_counts))
        return usage("--states wants counts like 1000,1000000");
    } else if (arg == "--rule-packets" && has_value) {
      if (!parse_number(std::string_view(argv[++i]), options.rule_packets) || options.rule_packets < 1)
        return usage("--rule-packets wants a positive integer");
    } else {
      return usage("unknown or incomplete option '" + std::string(arg) + "'");
    }
  }
  Json result;
  bool ran = false;
  for (const Benchmark& benchmark : suite->second) {
    if (!options.only.empty() && benchmark.name != options.only) continue;
    benchmark.fill(options, result);
    ran = true;
  }
  if (!ran) return usage("suite '" + std::string(suite->first) + "' has no benchmark '" + options.only + "'");
  if (options.json) {
    std::printf("%s\n", result.dump().c_str());
  } else {
    print_table(result);
  }
  return 0;
}

}  // namespace
}  // namespace pairwall::bench

int main(int argc, char** argv) {
  try {
    return pairwall::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pairwall-bench: %s\n", e.what());
    return 1;
  }
}
