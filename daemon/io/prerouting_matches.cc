#include "daemon/io/prerouting_matches.h"

#include <algorithm>
#include <optional>
#include <string>

namespace pairwall::io {
namespace {

using engine::Family;
using engine::rules::AddressElement;
using engine::rules::PortMatch;
using engine::rules::TranslationRule;

// A rule lists at most this many combinations of interface, protocol and destination as matches of
// their own; past it, the destinations and then the interfaces widen to any.
constexpr std::size_t kMaxMatchesPerRule = 64;

struct PortRange {
  uint16_t first = 0;
  uint16_t last = 0;
};

// The one range a port list says, or nullopt where it says none iptables can (several, `!=`, `<>`).
std::optional<PortRange> port_range(const std::vector<PortMatch>& ports) {
  if (ports.size() != 1) return std::nullopt;
  const PortMatch& p = ports.front();
  int first = 0;
  int last = 0;
  switch (p.op) {
    case PortMatch::Op::Eq:
      first = last = p.low;
      break;
    case PortMatch::Op::RangeInclusive:
      first = p.low, last = p.high;
      break;
    case PortMatch::Op::RangeExclusive:
      first = p.low + 1, last = p.high - 1;
      break;
    case PortMatch::Op::Lt:
      first = 1, last = p.low - 1;
      break;
    case PortMatch::Op::Le:
      first = 1, last = p.low;
      break;
    case PortMatch::Op::Gt:
      first = p.low + 1, last = 65535;
      break;
    case PortMatch::Op::Ge:
      first = std::max(1, int{p.low}), last = 65535;
      break;
    case PortMatch::Op::Ne:
    case PortMatch::Op::Outside:
      return std::nullopt;
  }
  if (first < 1 || last > 65535 || last < first) return std::nullopt;
  return PortRange{static_cast<uint16_t>(first), static_cast<uint16_t>(last)};
}

// This node's own address (`to em0`, `to (em0)`): the chain's LOCAL rule queues it.
bool own_address(const AddressElement& a) {
  return a.kind == AddressElement::Kind::Interface && !a.networks && !a.negated;
}

std::string prefix_text(const engine::IpPrefix& p) {
  return engine::to_string(p.family, p.address) + "/" + std::to_string(p.length);
}

// The destinations of a rule's inbound way: each listed prefix, or nullopt (any) where the list
// holds anything else. Empty: every one is this node's own.
std::optional<std::vector<engine::IpPrefix>> destinations(const TranslationRule& rule) {
  if (rule.kind == TranslationRule::Kind::Binat) {
    // Inbound, a binat takes packets to its external address, the rule's target.
    if (rule.targets.size() != 1) return std::nullopt;
    return std::vector<engine::IpPrefix>{rule.targets.front()};
  }
  const std::vector<AddressElement>& to = rule.to.addresses;
  if (to.empty()) return std::nullopt;
  std::vector<engine::IpPrefix> out;
  for (const AddressElement& a : to) {
    if (own_address(a)) continue;
    if (a.kind != AddressElement::Kind::Prefix || a.negated) return std::nullopt;
    out.push_back(a.prefix);
  }
  return out;
}

// Whether the rule can translate packets of `family`: its own (`inet`), else its targets' where
// they are known (an interface's address is only known when the rules load).
bool translates(const TranslationRule& rule, Family family) {
  if (rule.family) return *rule.family == family;
  if (rule.targets.empty() || !rule.target_interface.empty()) return true;
  return std::any_of(rule.targets.begin(), rule.targets.end(),
                     [family](const engine::IpPrefix& p) { return p.family == family; });
}

// Widens `matches` one way (`widen` on each) and drops the duplicates that leaves, keeping the order.
template <typename Widen>
void widen_all(std::vector<PreroutingMatch>& matches, Widen widen) {
  std::vector<PreroutingMatch> wide;
  for (PreroutingMatch m : matches) {
    widen(m);
    if (std::find(wide.begin(), wide.end(), m) == wide.end()) wide.push_back(m);
  }
  matches = std::move(wide);
}

}  // namespace

std::vector<PreroutingMatch> prerouting_matches(const engine::rules::RuleFile& file,
                                                std::vector<PreroutingMatch> kept) {
  std::vector<PreroutingMatch> out = std::move(kept);
  const auto add = [&out](const PreroutingMatch& m) {
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  };
  for (const TranslationRule& rule : file.translation_rules) {
    if (rule.kind == TranslationRule::Kind::Nat || rule.negate_translation) continue;

    std::optional<std::vector<engine::IpPrefix>> dsts = destinations(rule);
    if (dsts && dsts->empty()) continue;
    std::vector<std::string> interfaces;
    for (const auto& i : rule.interfaces) {
      if (i.negated) {
        interfaces.clear();
        break;
      }
      interfaces.push_back(i.name);
    }
    if (interfaces.empty()) interfaces.push_back("");
    std::vector<uint8_t> protocols = rule.protocols;
    if (protocols.empty()) protocols.push_back(0);
    const std::size_t per_destination = interfaces.size() * protocols.size();
    if (dsts && per_destination * dsts->size() > kMaxMatchesPerRule) dsts.reset();
    if (per_destination > kMaxMatchesPerRule) interfaces.assign(1, "");
    if (interfaces.size() * protocols.size() > kMaxMatchesPerRule) protocols.assign(1, 0);

    // Ports on the inbound way: rdr's destination ports (binat names none).
    const std::optional<PortRange> ports =
        rule.kind == TranslationRule::Kind::Rdr ? port_range(rule.to.ports) : std::nullopt;
    for (const Family family : {Family::V4, Family::V6}) {
      if (!translates(rule, family)) continue;
      std::vector<std::string> family_dsts;
      if (dsts) {
        for (const engine::IpPrefix& p : *dsts) {
          if (p.family == family) family_dsts.push_back(prefix_text(p));
        }
        if (family_dsts.empty()) continue;  // nothing of this family is translated
      } else {
        family_dsts.push_back("");
      }
      for (const std::string& interface : interfaces) {
        for (const uint8_t protocol : protocols) {
          for (const std::string& destination : family_dsts) {
            PreroutingMatch m{family, interface, protocol, destination, 0, 0};
            if (ports && (protocol == 6 || protocol == 17)) {
              m.port_first = ports->first;
              m.port_last = ports->last;
            }
            add(m);
          }
        }
      }
    }
  }
  if (out.size() > kMaxPreroutingMatches) {
    widen_all(out, [](PreroutingMatch& m) {
      m.destination.clear();
      m.port_first = m.port_last = 0;
    });
  }
  if (out.size() > kMaxPreroutingMatches) widen_all(out, [](PreroutingMatch& m) { m.interface.clear(); });
  if (out.size() > kMaxPreroutingMatches) widen_all(out, [](PreroutingMatch& m) { m.protocol = 0; });
  return out;
}

}  // namespace pairwall::io
