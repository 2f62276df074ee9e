// Filter rules that can never decide a packet: another rule that decides first wherever they both
// match (a quick rule before them, or a rule after them, the last match winning) matches every
// packet they do. pf's order is easy to get backwards: `pass in on em0 proto tcp to port 22`
// followed by `block in on em0` passes nothing, and its `max-src-conn` limits nothing. pfctl loads
// such a rule without a word; here it loads with a warning naming the rule that decides instead.
#pragma once

#include <vector>

#include "daemon/engine/rules/classifier.h"
#include "daemon/engine/rules/parser.h"
#include "daemon/engine/rules/ruleset.h"

namespace pairwall::engine::rules {

// Whether `b` matches every packet `a` matches, as far as comparing their fields one by one tells:
// each of b's fields accepts anything, or is written as a's. Conservative: false where the fields
// differ in how they are written (b's `port > 1024` covers a's `port 2000`, unseen here).
bool covers(const MatchSpec& b, const MatchSpec& a);

// A warning (into `notices`) for each of `rules` (a rule set's filter rules in file order, with the
// classifier's specs of them) that never decides: `file:line:column: warning: this rule never
// decides: ...`, naming the rule that does. A rule whose `tag` another rule tests still tags the
// packets it matches and is left alone; so is every rule a deciding rule passes over by chance
// (`probability`, `once`, `max-pkt-rate`). At most kMaxShadowNotices, then one that says how many
// more; the search per rule is bounded too, so that a large generated rule set loads as fast.
void shadowed_rule_notices(const std::vector<MatchSpec>& specs, const std::vector<CompiledRule>& rules,
                           std::vector<RuleError>& notices);

inline constexpr std::size_t kMaxShadowNotices = 32;

}  // namespace pairwall::engine::rules
