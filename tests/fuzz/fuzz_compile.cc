// libFuzzer target for the rule compiler: any rule file the parser takes, its interfaces resolved
// against a fixed host, must compile to a rule set or be refused with a RuleError, never crash,
// hang or throw: a reload of such a file must leave the running rules in place, not end the
// daemon. Every position the compiler reports, its warnings' too (rules that never decide), must
// lie in the text. Included files' texts are their names, as in fuzz_rules.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "daemon/engine/interfaces.h"
#include "daemon/engine/rules/compile.h"
#include "tests/fuzz/positions.h"

namespace {

namespace rules = pairwall::engine::rules;
using pairwall::engine::Family;
using pairwall::engine::IpAddress;

// The host the rules are resolved on: two interfaces with an address of each family.
const rules::InterfaceAddresses& host() {
  static const rules::InterfaceAddresses addresses = [] {
    rules::InterfaceAddresses a;
    a["lan0"] = {{Family::V4, IpAddress::v4(0x0a000001), 24},
                 {Family::V6, IpAddress{0xfd00000000000000, 1}, 64}};
    a["wan0"] = {{Family::V4, IpAddress::v4(0xc0000201), 24}};
    return a;
  }();
  return addresses;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = rules::parse_rules(text, "fuzz.conf", pairwall::fuzz::text_is_name);
  if (!std::holds_alternative<rules::RuleFile>(parsed)) return 0;  // fuzz_rules' ground
  auto& file = std::get<rules::RuleFile>(parsed);
  const auto lines = pairwall::fuzz::line_lengths(text);
  std::vector<rules::RuleError> notices;
  if (const auto error = rules::resolve_interfaces(file, host(), &notices)) {
    pairwall::fuzz::check_position(error->location, lines);
    return 0;
  }
  pairwall::engine::InterfaceRegistry interfaces;
  auto compiled = rules::compile(file, interfaces, nullptr, {}, &notices);
  if (const auto* error = std::get_if<rules::RuleError>(&compiled)) {
    pairwall::fuzz::check_position(error->location, lines);
    if (error->message.empty()) std::abort();
    return 0;
  }
  if (std::get<std::shared_ptr<const rules::RuleSet>>(compiled) == nullptr) std::abort();
  for (const rules::RuleError& notice : notices) {
    pairwall::fuzz::check_position(notice.location, lines);
    if (notice.message.find("warning: ") != 0) std::abort();
  }
  return 0;
}
