// pf's anchors in a parsed rule file: placing an anchor's rules, and the order in which rules
// inside and outside anchors decide a packet.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/engine/rules/ast.h"

namespace pairwall::engine::rules {

const Anchor* find_anchor(const RuleFile& file, std::string_view path);
Anchor* find_anchor(RuleFile& file, std::string_view path);

// Makes `content`'s filter rules and anchors (parse_anchor_rules(); their paths relative to the
// anchor) the rules of the anchor at `path`, in place of those it had, the anchors within it
// included. False when `file` declares no such anchor.
bool set_anchor_rules(RuleFile& file, std::string path, RuleFile content);

// The rules of the anchor at `path` itself, those of anchors within it left out.
std::size_t anchor_rule_count(const RuleFile& file, std::string_view path);

// pfctl's @N: each filter rule's number within its anchor (or the main rule set), and each anchor's
// within the one it stands in, an anchor counted among the rules there where it stands.
struct RuleNumbers {
  std::vector<uint32_t> rules;    // by index in filter_rules
  std::vector<uint32_t> anchors;  // by index in anchors
};
RuleNumbers rule_numbers(const RuleFile& file);

// Each filter rule's rank in pf's order of decision, 0 deciding first: the quick rules in file
// order, then the others in reverse file order, so that the lowest-ranked matching rule is the
// one pf's evaluation ends on. An anchor's rules stand where the anchor does; the quick ones
// among them are final for the whole evaluation, the others take part in "last match wins" with
// the rules around them; a quick anchor ranks all of its rules, in its own order, where a quick
// rule would stand.
std::vector<uint32_t> decision_ranks(const RuleFile& file);

}  // namespace pairwall::engine::rules
