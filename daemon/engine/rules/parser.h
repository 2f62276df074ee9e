// The pf.conf subset described in DESIGN.md "Rule language". Errors name file:line:column, what
// was expected and what was found; the first error stops the parse.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "daemon/engine/rules/ast.h"

namespace pairwall::engine::rules {

struct RuleError {
  SourceLocation location;
  std::string message;  // e.g. "expected port number, got 'http'"

  // "file:line:column: message", as compilers and pfctl print them.
  std::string to_string() const;
};

// Reads the file at `path` into `text`: 0, or the errno of the failure (or kNotRegularFile).
using ReadFile = std::function<int(const std::string& path, std::string& text)>;
inline constexpr int kNotRegularFile = -1;             // a directory, FIFO or device: not read
inline constexpr std::size_t kMaxFileSize = 64 << 20;  // rule, anchor and table files
// For messages: strerror(err), or what kNotRegularFile means.
std::string read_error(int err);

// Parses rule text. `include "PATH"` reads PATH with `read_file` (a relative PATH is the
// including file's directory's; without `read_file`, an include is an error); an error in an
// included file names that file. Table files (`table <t> file "PATH"`) are only named in
// Table::files: reading them is parse_rules_file()'s.
std::variant<RuleFile, RuleError> parse_rules(std::string_view text, std::string file_name,
                                              const ReadFile& read_file = {});

// Parses an anchor's rules, as `pfctl -a NAME -f FILE` reads them: filter rules, anchors (their
// paths relative to the anchor: set_anchor_rules() places them), macros and includes; a table,
// `set`, scrub or translation rule is an error.
std::variant<RuleFile, RuleError> parse_anchor_rules(std::string_view text, std::string file_name,
                                                     const ReadFile& read_file = {});
std::variant<RuleFile, RuleError> parse_anchor_file(const std::string& path);

// Reads and parses a rule file and the files it includes, then the table files they name (a
// relative PATH is the naming file's directory's), whose entries join their tables' once each. An
// unreadable rule file is a RuleError at line 0; an unreadable included or table file one at its
// name in the file naming it; a bad entry one at its place in the table file.
std::variant<RuleFile, RuleError> parse_rules_file(const std::string& path);

// A table file's text (pf's table files, pfctl -T ... -f): addresses and prefixes separated by
// white space, `!` before an exception, `#` starting a comment that runs to the end of the line.
std::variant<std::vector<TableEntry>, RuleError> parse_table_entries(std::string_view text,
                                                                     const std::string& file_name);

}  // namespace pairwall::engine::rules
