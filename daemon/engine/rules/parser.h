// The pf.conf subset described in DESIGN.md "Rule language". Errors name file:line:column, what
// was expected and what was found; the first error stops the parse.
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "daemon/engine/rules/ast.h"

namespace pairwall::engine::rules {

struct RuleError {
  SourceLocation location;
  std::string message;  // e.g. "expected port number, got 'http'"

  // "file:line:column: message", as compilers and pfctl print them.
  std::string to_string() const;
};

std::variant<RuleFile, RuleError> parse_rules(std::string_view text, std::string file_name);

// Reads and parses a file; an unreadable file is a RuleError at line 0.
std::variant<RuleFile, RuleError> parse_rules_file(const std::string& path);

}  // namespace pairwall::engine::rules
