// Rule file -> RuleSet. Resolves tables, interfaces and settings, validates what the parser
// cannot (unknown table, icmp-type without proto icmp, flags without proto tcp, ...) and builds
// the decision structure.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "daemon/engine/interfaces.h"
#include "daemon/engine/rules/interface_addresses.h"
#include "daemon/engine/rules/parser.h"
#include "daemon/engine/rules/ruleset.h"

namespace pairwall::engine::rules {

// `counters_from`: a rule set whose rules' counters carry over to the rules here written alike in
// the same anchor, and to the scrub and translation rules written alike, which the main rules'
// counters follow (a table edit or an anchor's load recompiles the others unchanged).
// `keeps_counters`, when given, names the anchors ("" the main rules) whose rules take them; the
// others' start at zero, as rules loaded anew. `notices`, when given, gets a warning for each
// filter rule that never decides (shadowed.h).
std::variant<std::shared_ptr<const RuleSet>, RuleError> compile(
    const RuleFile& file, InterfaceRegistry& interfaces, const RuleSet* counters_from = nullptr,
    const std::function<bool(std::string_view anchor)>& keeps_counters = {},
    std::vector<RuleError>* notices = nullptr);

// What an anchor matches, as written after its name ("in quick on lan0 proto tcp", or "all").
std::string anchor_terms_text(const Anchor& anchor);

// Warnings, added to `notices`, about rules that load but cannot do what they say: a `tagged
// NAME` that no rule tags (a typo, or a tag left behind) never matches, and `! tagged NAME` always.
void tag_notices(const RuleFile& file, std::vector<RuleError>& notices);

// parse_rules_file + resolve_interfaces and tag_notices (their notices into `notices`, where
// given): the file as compile() takes it.
std::variant<RuleFile, RuleError> read_rules_file(const std::string& path,
                                                  const InterfaceAddresses& addresses = {},
                                                  std::vector<RuleError>* notices = nullptr);

// read_rules_file + compile.
std::variant<std::shared_ptr<const RuleSet>, RuleError> load_rules_file(
    const std::string& path, InterfaceRegistry& interfaces, const InterfaceAddresses& addresses = {},
    std::vector<RuleError>* notices = nullptr);

}  // namespace pairwall::engine::rules
