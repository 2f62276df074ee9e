// Realistic rule sets of a given size for the rule benchmarks, with the packets to measure them.
//
// A set looks like a perimeter firewall's: `block log all`, a quick block list (`<blocked>`, public
// hosts and small networks, as many entries as rules) and `pass out all` first, then pass and
// block rules on four interfaces, in and out (1% of them quick), IPv4 and IPv6 prefixes of varied
// lengths (many under 10/8, including wide ones), address groups as tables (one pair per 200
// rules, each used by a handful of rules), port lists and ranges, TCP/UDP/ICMP, `flags S/SA`.
// Consecutive rules differ in interface, direction, family, protocol and addresses, so pf's
// skip-steps could not jump over long runs.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "daemon/engine/interfaces.h"
#include "daemon/engine/packet.h"
#include "daemon/engine/rules/ast.h"

namespace pairwall::bench {

struct GeneratedRules {
  engine::rules::RuleFile file;
  std::vector<const char*> interfaces;  // names the rules use
};

// `count` filter rules (exactly), deterministic for a given seed.
GeneratedRules generate_rules(uint32_t count, uint64_t seed);

struct BenchPacket {
  engine::PacketView view;
  engine::IfaceId iface = engine::kNoIface;  // arrival interface (the in pass)
};

// The share of IPv6 among the measured packets, where the rules near the end allow it.
constexpr uint32_t kIpv6PacketPercent = 30;

// The last `tail` rules of `file`, grown towards the front until the tail's in-pass rules can match
// both families: the measured packets then mix IPv4 and IPv6 alike at every rule count, and the
// figures of two rule counts compare rule counts, not families (a family's address walk costs
// differ).
uint32_t tail_with_both_families(const engine::rules::RuleFile& file, uint32_t tail);

// `count` new-flow packets for the in pass, each drawn from the fields of one of the last `tail`
// rules of `file` (addresses inside its prefixes and tables, ports inside its port lists), kept
// when `keep` says so (the caller checks which rule really decides). `ifaces` resolves names.
std::vector<BenchPacket> packets_for_tail(const engine::rules::RuleFile& file, uint32_t tail, uint32_t count,
                                          engine::InterfaceRegistry& ifaces, uint64_t seed,
                                          const std::function<bool(const BenchPacket&)>& keep);

}  // namespace pairwall::bench
