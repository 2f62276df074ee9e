// pairwall-check: the operator's dry run.
//
//   pairwall-check [-v] -f RULES [--iface-address NAME=ADDR/LEN[,ADDR/LEN...]]...
//       parse and compile RULES; print errors as file:line:column (exit 1), like `pfctl -nf`.
//       Interfaces named in address positions (`em0`, `em0:network`, `antispoof for em0`) have
//       this host's addresses, as pfctl reads them, but those --iface-address gives. -v: and the
//       rule set as it was read, like `pfctl -nvf`: macros expanded, interfaces' addresses and
//       table files filled in, each rule with the @N that `pairwallctl rules show` gives it.
//   pairwall-check -f RULES --pcap FILE --inside CIDR[,CIDR...] [--inside-if NAME] [--outside-if NAME]
//       replay a capture through the engine as a forwarding firewall would see it and print one
//       JSON line per packet: index, verdict, reason, deciding rule (@N, and its anchor's path
//       where it stands in one), state id; or verdict "skipped" for what the node never sees as
//       captured (not IP, cut by the snaplen, a fragment). A packet arrives where its source says,
//       so none fails `from urpf-failed` here, and every address has a route (`no-route`): the
//       engine has no routes to ask in a replay.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "daemon/engine/engine.h"
#include "daemon/engine/packet.h"
#include "daemon/engine/rules/compile.h"
#include "daemon/io/host_addresses.h"
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
  rules::InterfaceAddresses addresses;  // --iface-address: instead of the host's, per interface
  bool verbose = false;                 // -v: list the rule set as read
};

[[noreturn]] void usage(const std::string& error) {
  if (!error.empty()) std::cerr << "pairwall-check: " << error << "\n";
  std::cerr << "usage: pairwall-check [-v] -f RULES [--iface-address NAME=ADDR/LEN[,ADDR/LEN...]]...\n"
               "                      [--pcap FILE --inside CIDR[,CIDR...] [--inside-if NAME]"
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
    } else if (arg == "-v") {
      o.verbose = true;
    } else if (arg == "--iface-address") {
      const std::string spec = value();
      const auto eq = spec.find('=');
      if (eq == std::string::npos || eq == 0) usage("--iface-address wants NAME=ADDR/LEN[,ADDR/LEN...]");
      auto& addresses = o.addresses[spec.substr(0, eq)];
      std::size_t start = eq + 1;
      while (start <= spec.size()) {
        const std::size_t comma = spec.find(',', start);
        const std::string item =
            spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        const auto slash = item.find('/');
        rules::InterfaceAddress a;
        const auto address = parse_address(item.substr(0, slash), &a.family);
        const unsigned width = a.family == Family::V4 ? 32 : 128;
        unsigned length = width;
        if (slash != std::string::npos) {
          const std::string digits = item.substr(slash + 1);
          length = digits.empty() || digits.size() > 3 ||
                           digits.find_first_not_of("0123456789") != std::string::npos
                       ? width + 1
                       : static_cast<unsigned>(std::stoul(digits));
        }
        if (!address || length > width) usage("--iface-address: '" + item + "' is not ADDR/LEN");
        a.address = *address;
        a.prefix_length = static_cast<uint8_t>(length);
        addresses.push_back(a);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
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
  if (!o.pcap_file.empty() && o.verbose)
    usage("-v lists the rules of a check; a replay prints JSON lines alone");
  return o;
}

// The rule set as read, in the order and with the numbers of `pairwallctl rules show`: tables,
// then scrub and translation rules (each list numbered apart, as pfctl lists them), then the filter
// rules with each anchor's line before its rules.
void list_rule_set(const rules::RuleFile& file, const rules::RuleSet& rules) {
  for (const rules::Table& t : file.tables) {
    std::cout << "table <" << t.name << ">" << (t.is_const ? " const" : "") << (t.counters ? " counters" : "")
              << " {";
    for (const IpPrefix& p : t.entries) std::cout << " " << address_text(p);
    for (const IpPrefix& p : t.negated_entries) std::cout << " !" << address_text(p);
    std::cout << " }\n";
  }
  const auto listed = [](const char* heading, const std::vector<rules::ListedRule>& list) {
    if (list.empty()) return;
    std::cout << heading << "\n";
    for (const rules::ListedRule& r : list) std::cout << "@" << r.number << " " << r.text << "\n";
  };
  listed("# scrub rules, first match", rules.scrub_listing());
  listed("# translation rules, first match", rules.translation_rules());
  std::cout << "# filter rules, last match\n";
  const auto line = [](std::string_view anchor, uint32_t number, const std::string& text) {
    std::cout << std::string(2 * rules::anchor_depth(anchor), ' ') << "@" << number << " " << text << "\n";
  };
  rules::list_in_file_order(
      rules.anchors(), rules.size(), [&](const rules::AnchorListing& a) { line(a.parent, a.number, a.text); },
      [&](std::size_t i) {
        const rules::CompiledRule& r = rules.rule(static_cast<uint32_t>(i));
        line(r.anchor, r.number, r.text);
      });
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
  Millis now{0};
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
    // Engine time starts at 1 s so that "0" never means "unset", and never goes back, as the
    // node's clock does not: a capture merged from several, or written by several queues, can
    // hold a record stamped before the one ahead of it.
    now = std::max(now, Millis{1000 + (packet->timestamp_us - *first_us) / 1000});
    if (now - last_expire >= Millis{1000}) {
      engine.expire(now);
      last_expire = now;
    }
    // What the node never sees as the capture holds it is not replayed, and says why: a frame that
    // is not IP never reaches the queue, one the capture's snaplen cut short arrived whole, and
    // the kernel reassembles fragments before the queue (a replay would drop each as `fragment`).
    PacketView view;
    const Reason parsed = parse_packet(packet->ip, view);
    const char* skipped = tools::skip_reason(*packet, parsed == Reason::Match && view.is_fragment);
    if (skipped != nullptr) {
      std::printf("{\"index\":%llu,\"verdict\":\"skipped\",\"reason\":\"%s\",\"rule\":null,\"state\":null}\n",
                  static_cast<unsigned long long>(index), skipped);
      continue;
    }
    PacketMeta meta;
    meta.hook = Hook::Forward;
    meta.in_iface = outside_if;
    meta.out_iface = inside_if;
    if (parsed == Reason::Match) {
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
    // A rule in an anchor is numbered within it (anchor names hold no character JSON escapes).
    if (v.by_rule != nullptr && !v.by_rule->anchor.empty())
      std::printf(",\"anchor\":\"%s\"", v.by_rule->anchor.c_str());
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
  EngineConfig config;
  config.modulation = false;  // the capture's ends never saw shifted numbers
  config.synproxy = false;    // nor this node answering for their server
  Engine engine(config);
  rules::InterfaceAddresses addresses;
  try {
    addresses = io::host_interface_addresses();
  } catch (const std::exception& e) {
    std::cerr << "pairwall-check: " << e.what() << " (interfaces in rules get only --iface-address)\n";
  }
  for (const auto& [name, given] : options.addresses) addresses[name] = given;
  std::vector<rules::RuleError> notices;
  auto read = rules::read_rules_file(options.rules_file, addresses, &notices);
  if (auto* error = std::get_if<rules::RuleError>(&read)) {
    std::cerr << error->to_string() << "\n";
    return 1;
  }
  const rules::RuleFile& file = std::get<rules::RuleFile>(read);
  auto compiled = rules::compile(file, engine.interfaces(), nullptr, {}, &notices);
  if (auto* error = std::get_if<rules::RuleError>(&compiled)) {
    std::cerr << error->to_string() << "\n";
    return 1;
  }
  for (const rules::RuleError& notice : notices) std::cerr << notice.to_string() << "\n";
  auto rules = std::get<std::shared_ptr<const rules::RuleSet>>(std::move(compiled));
  if (options.pcap_file.empty()) {
    std::cout << options.rules_file << ": " << rules->size() << " filter rules, state limit "
              << rules->state_limit() << ": OK\n";
    if (options.verbose) list_rule_set(file, *rules);
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
