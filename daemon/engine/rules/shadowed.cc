#include "daemon/engine/rules/shadowed.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace pairwall::engine::rules {
namespace {

// The four sparse fields, each a bit: what a rule's index entry and a lookup are keyed by.
constexpr unsigned kSrc = 1, kDst = 2, kSrcPorts = 4, kDstPorts = 8;

// The covers() tests a rule gets at most: rule sets that repeat one address or port in thousands of
// rules would otherwise make the check quadratic. Fewer tests only mean fewer warnings.
constexpr std::size_t kMaxTestsPerRule = 64;

unsigned sparse_fields(const MatchSpec& s) {
  return (s.src.empty() ? 0 : kSrc) | (s.dst.empty() ? 0 : kDst) | (s.src_ports.empty() ? 0 : kSrcPorts) |
         (s.dst_ports.empty() ? 0 : kDstPorts);
}

template <typename T>
void append_bytes(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// The fields of `s` that `fields` names, as bytes: two rules written alike there have equal keys.
std::string sparse_key(const MatchSpec& s, unsigned fields) {
  std::string key(1, static_cast<char>(fields));
  const auto addresses = [&](const std::vector<AddressTerm>& terms) {
    append_bytes(key, terms.size());
    for (const AddressTerm& t : terms) {
      append_bytes(key, t.kind);
      append_bytes(key, t.negated);
      append_bytes(key, t.prefix.family);
      append_bytes(key, t.prefix.address);
      append_bytes(key, t.prefix.length);
      append_bytes(key, t.table);
      append_bytes(key, t.last);
    }
  };
  const auto ports = [&](const std::vector<PortMatch>& list) {
    append_bytes(key, list.size());
    for (const PortMatch& p : list) {
      append_bytes(key, p.op);
      append_bytes(key, p.low);
      append_bytes(key, p.high);
    }
  };
  if (fields & kSrc) addresses(s.src);
  if (fields & kDst) addresses(s.dst);
  if (fields & kSrcPorts) ports(s.src_ports);
  if (fields & kDstPorts) ports(s.dst_ports);
  return key;
}

template <typename List>
bool any_or_same(const List& b, const List& a) {
  return b.empty() || b == a;
}

}  // namespace

bool covers(const MatchSpec& b, const MatchSpec& a) {
  if (b.direction != Direction::Any && b.direction != a.direction) return false;
  if (!any_or_same(b.interfaces, a.interfaces) || !any_or_same(b.received_on, a.received_on)) return false;
  if (b.family && b.family != a.family) return false;
  if (!b.protocols.empty()) {
    if (a.protocols.empty()) return false;
    for (const uint8_t p : a.protocols) {
      if (std::find(b.protocols.begin(), b.protocols.end(), p) == b.protocols.end()) return false;
    }
  }
  if (!any_or_same(b.src, a.src) || !any_or_same(b.dst, a.dst) || !any_or_same(b.src_ports, a.src_ports) ||
      !any_or_same(b.dst_ports, a.dst_ports))
    return false;
  if (b.flags) {
    // Flags that test TCP alone leave a rule of other protocols whole (`pass in all` and UDP), and
    // test a rule of TCP alone as its own flags do.
    const bool a_not_tcp = !a.protocols.empty() && std::find(a.protocols.begin(), a.protocols.end(),
                                                             ipproto::kTcp) == a.protocols.end();
    const bool a_tcp_only = a.protocols.size() == 1 && a.protocols[0] == ipproto::kTcp;
    const bool same = a.flags && *a.flags == *b.flags &&
                      (a.flags_tcp_only == b.flags_tcp_only || (b.flags_tcp_only && a_tcp_only));
    if (!same && !(b.flags_tcp_only && a_not_tcp)) return false;
  }
  if (!b.icmp_types.empty() && (b.icmp_types != a.icmp_types || b.icmp6 != a.icmp6)) return false;
  if (b.tagged != 0 || b.tagged_negated) return false;
  if (b.urpf_failed && !a.urpf_failed) return false;
  if (b.src_route != RouteTest::None && b.src_route != a.src_route) return false;
  if (b.dst_route != RouteTest::None && b.dst_route != a.dst_route) return false;
  if (b.tos && b.tos != a.tos) return false;
  return true;
}

void shadowed_rule_notices(const std::vector<MatchSpec>& specs, const std::vector<CompiledRule>& rules,
                           std::vector<RuleError>& notices) {
  // The rules that may decide in another's stead, indexed by the sparse fields they name and how
  // they write them, each list in the order of decision.
  std::unordered_map<std::string, std::vector<uint32_t>> deciders;
  for (uint32_t i = 0; i < specs.size(); ++i) {
    if (!specs[i].decides || rules[i].conditional || specs[i].tagged != 0) continue;
    deciders[sparse_key(specs[i], sparse_fields(specs[i]))].push_back(i);
  }
  for (auto& [key, list] : deciders) {
    std::sort(list.begin(), list.end(),
              [&](uint32_t x, uint32_t y) { return specs[x].rank < specs[y].rank; });
  }

  std::size_t found = 0;
  for (uint32_t i = 0; i < specs.size(); ++i) {
    const MatchSpec& a = specs[i];
    if (!a.decides || rules[i].tag != 0) continue;
    const unsigned fields = sparse_fields(a);
    std::size_t tests = 0;
    uint32_t decider = UINT32_MAX;
    // Every subset of a's sparse fields: a rule that names those alone, as a writes them.
    for (unsigned subset = fields;; subset = (subset - 1) & fields) {
      const auto it = deciders.find(sparse_key(a, subset));
      if (it != deciders.end()) {
        for (const uint32_t b : it->second) {
          if (specs[b].rank >= a.rank || tests == kMaxTestsPerRule) break;
          ++tests;
          if (covers(specs[b], a)) {
            decider = std::min(decider, b);
            break;
          }
        }
      }
      if (subset == 0) break;
    }
    if (decider == UINT32_MAX) continue;
    if (++found > kMaxShadowNotices) continue;
    const CompiledRule& d = rules[decider];
    const std::string where = "'" + d.text + "' (" + d.location.file_and_line() + ")";
    notices.push_back(RuleError{
        rules[i].location,
        decider < i ? "warning: this rule never decides: " + where +
                          ", before it and quick, matches every packet it does"
                    : "warning: this rule never decides: " + where +
                          ", after it, matches every packet it does, and the last matching rule decides: "
                          "make this rule quick, or move it below that one"});
  }
  if (found > kMaxShadowNotices) {
    notices.push_back(
        RuleError{rules.back().location, "warning: " + std::to_string(found - kMaxShadowNotices) +
                                             " more rules never decide (the first " +
                                             std::to_string(kMaxShadowNotices) + " are named)"});
  }
}

}  // namespace pairwall::engine::rules
