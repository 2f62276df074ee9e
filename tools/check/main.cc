// pairwall-check: the operator's dry run.
//
//   pairwall-check -f RULES
//       parse and compile RULES; print errors as file:line:column (exit 1), like `pfctl -nf`.
//   pairwall-check -f RULES --pcap FILE --inside CIDR[,CIDR...] [--inside-if NAME] [--outside-if NAME]
//       replay a capture through the engine as a forwarding firewall would see it and print one
//       JSON line per packet: index, verdict, reason, deciding rule, state id.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "daemon/engine/engine.h"
#include "daemon/engine/packet.h"
#include "daemon/engine/rules/compile.h"
#include "tools/check/pcap_reader.h"

namespace {

using namespace pairwall;
using namespace pairwall::engine;

struct Options {
  std::string rules_file;
  std::string pcap_file;
  std::vector<IpPrefix> inside;
  std::string inside_if = "in0";
  std::string outside_if = "out0";
};

[[noreturn]] void usage(const std::string& error) {
  if (!error.empty()) std::cerr << "pairwall-check: " << error << "\n";
  std::cerr << "usage: pairwall-check -f RULES [--pcap FILE --inside CIDR[,CIDR...] [--inside-if NAME]"
               " [--outside-if NAME]]\n";
  std::exit(2);
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "-f") {
      o.rules_file = value();
    } else if (arg == "--pcap") {
      o.pcap_file = value();
    } else if (arg == "--inside") {
      const std::string list = value();
      std::size_t start = 0;
      while (start <= list.size()) {
        const std::size_t comma = list.find(',', start);
        const std::string item =
            list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        auto prefix = parse_prefix(item);
        if (!prefix) usage("--inside: not an address or prefix: '" + item + "'");
        o.inside.push_back(*prefix);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (arg == "--inside-if") {
      o.inside_if = value();
    } else if (arg == "--outside-if") {
      o.outside_if = value();
    } else if (arg == "-h" || arg == "--help") {
      usage("");
    } else {
      usage("unknown argument '" + arg + "'");
    }
  }
  if (o.rules_file.empty()) usage("-f RULES is required");
  if (!o.pcap_file.empty() && o.inside.empty()) usage("--pcap needs --inside to tell the two sides apart");
  return o;
}

const char* verdict_name(Verdict::Action a) {
  switch (a) {
    case Verdict::Action::Accept:
      return "pass";
    case Verdict::Action::Drop:
      return "drop";
    case Verdict::Action::Reject:
      return "reject";
  }
  return "drop";
}

int replay(const Options& o, Engine& engine) {
  tools::PcapReader reader(o.pcap_file);
  Worker worker(engine);
  const IfaceId inside_if = engine.interfaces().intern(o.inside_if);
  const IfaceId outside_if = engine.interfaces().intern(o.outside_if);
  std::optional<int64_t> first_us;
  Millis last_expire{0};
  for (uint64_t index = 0;; ++index) {
    auto packet = reader.next();
    if (!packet) {
      if (!reader.truncation().empty()) {
        std::fprintf(stderr, "pairwall-check: %s: %s; records replayed before it: %llu\n",
                     o.pcap_file.c_str(), reader.truncation().c_str(),
                     static_cast<unsigned long long>(index));
      }
      break;
    }
    if (!first_us) first_us = packet->timestamp_us;
    // Engine time starts at 1 s so that "0" never means "unset".
    const Millis now{1000 + (packet->timestamp_us - *first_us) / 1000};
    if (now - last_expire >= Millis{1000}) {
      engine.expire(now);
      last_expire = now;
    }
    PacketMeta meta;
    meta.hook = Hook::Forward;
    meta.in_iface = outside_if;
    meta.out_iface = inside_if;
    PacketView view;
    if (parse_packet(packet->ip, view) == Reason::Match) {
      for (const auto& prefix : o.inside) {
        if (prefix.contains(view.family, view.src)) {
          meta.in_iface = inside_if;
          meta.out_iface = outside_if;
          break;
        }
      }
    }
    const Verdict v = engine.process(worker, packet->ip, meta, now);
    std::printf("{\"index\":%llu,\"verdict\":\"%s\",\"reason\":\"%.*s\",\"rule\":",
                static_cast<unsigned long long>(index), verdict_name(v.action),
                static_cast<int>(reason_name(v.reason).size()), reason_name(v.reason).data());
    if (v.rule == rules::kNoRule) {
      std::printf("null");
    } else {
      std::printf("%u", v.rule);
    }
    if (v.state.counter == 0) {
      std::printf(",\"state\":null}\n");
    } else {
      std::printf(",\"state\":\"%u:%llu\"}\n", v.state.creator,
                  static_cast<unsigned long long>(v.state.counter));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_args(argc, argv);
  Engine engine;
  auto loaded = rules::load_rules_file(options.rules_file, engine.interfaces());
  if (auto* error = std::get_if<rules::RuleError>(&loaded)) {
    std::cerr << error->to_string() << "\n";
    return 1;
  }
  auto rules = std::get<std::shared_ptr<const rules::RuleSet>>(std::move(loaded));
  if (options.pcap_file.empty()) {
    std::cout << options.rules_file << ": " << rules->size() << " filter rules, state limit "
              << rules->state_limit() << ": OK\n";
    return 0;
  }
  engine.load_rules(std::move(rules));
  try {
    return replay(options, engine);
  } catch (const std::exception& e) {
    std::cerr << "pairwall-check: " << e.what() << "\n";
    return 1;
  }
}
