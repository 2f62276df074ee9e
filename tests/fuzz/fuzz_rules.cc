// libFuzzer target for the rule parser: any byte string must yield a RuleFile or a RuleError,
// never a crash, a hang or a sanitizer report; and every position it reports must point into
// the text, since operators jump to it in their editor. An included file's text is its own name
// (`include "pass all"` includes a file holding `pass all`), so that the input decides both. The
// pre-routing matches its translation rules give must pass the hooks' checks.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/engine/rules/parser.h"
#include "daemon/io/hooks.h"
#include "daemon/io/prerouting_matches.h"
#include "tests/fuzz/positions.h"

namespace {

using pairwall::engine::rules::RuleError;
using pairwall::engine::rules::RuleFile;
using pairwall::fuzz::check_position;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto lines = pairwall::fuzz::line_lengths(text);
  auto result = pairwall::engine::rules::parse_rules(text, "fuzz.conf", pairwall::fuzz::text_is_name);
  if (const auto* error = std::get_if<RuleError>(&result)) {
    check_position(error->location, lines);
    if (error->message.empty()) std::abort();
    // The same input gives the same message: nothing depends on the host or on earlier runs.
    auto again = pairwall::engine::rules::parse_rules(text, "fuzz.conf", pairwall::fuzz::text_is_name);
    const auto* second = std::get_if<RuleError>(&again);
    if (!second || second->to_string() != error->to_string()) std::abort();
    return 0;
  }
  const auto& file = std::get<RuleFile>(result);
  for (const auto& t : file.tables) {
    check_position(t.location, lines);
    if (t.name.empty()) std::abort();
  }
  for (const auto& r : file.scrub_rules) check_position(r.location, lines);
  for (const auto& r : file.translation_rules) {
    check_position(r.location, lines);
    // A target is an address or a list of them, or an interface whose address
    // resolve_interfaces() sets later; a list's addresses are of one family.
    if (!r.negate_translation && r.targets.empty() && r.target_interface.empty()) std::abort();
    for (const auto& t : r.targets)
      if (t.family != r.targets[0].family) std::abort();
    if (!r.target_interface.empty()) check_position(r.target_location, lines);
  }
  for (const auto& r : file.filter_rules) {
    check_position(r.location, lines);
    for (const auto* ep : {&r.from, &r.to}) {
      for (const auto& a : ep->addresses) check_position(a.location, lines);
      for (const auto& p : ep->ports) {
        const bool range = p.op == pairwall::engine::rules::PortMatch::Op::RangeInclusive ||
                           p.op == pairwall::engine::rules::PortMatch::Op::RangeExclusive ||
                           p.op == pairwall::engine::rules::PortMatch::Op::Outside;
        if (range && p.low > p.high) std::abort();
      }
    }
    if (r.flags && (r.flags->set & ~r.flags->mask) != 0) std::abort();
  }
  // What the pre-routing chain would queue for these rules installs: a rule file the parser takes
  // must not be refused by the hooks at its load, and the chain stays short.
  pairwall::io::HooksConfig hooks;
  hooks.prerouting = true;
  hooks.bypass_mark = 1;
  hooks.prerouting_matches = pairwall::io::prerouting_matches(file);
  if (hooks.prerouting_matches.size() > pairwall::io::kMaxPreroutingMatches) std::abort();
  try {
    pairwall::io::validate(hooks);
  } catch (const pairwall::io::HooksError&) {
    std::abort();
  }
  return 0;
}
