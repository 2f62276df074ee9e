// What the rule fuzzers check of every position a parser or compiler reports: operators jump to
// it in their editor, so it must lie in the text of the file it names (the input "fuzz.conf", or
// an included file, whose text the fuzzers make its own name).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/engine/rules/ast.h"

namespace pairwall::fuzz {

// The rule fuzzers' ReadFile: an included file's text is its own name (`include "pass all"`
// includes a file holding `pass all`), so that the input decides both.
inline int text_is_name(const std::string& path, std::string& text) {
  text = path;
  return 0;
}

// Length of each line, 1-based index; a position may sit one past the end (end of line/file).
inline std::vector<std::size_t> line_lengths(std::string_view text) {
  std::vector<std::size_t> lengths{0, 0};
  for (char c : text) {
    if (c == '\n') {
      lengths.push_back(0);
    } else {
      ++lengths.back();
    }
  }
  return lengths;
}

// Aborts unless `loc` lies in its file's text; `input_lines`: line_lengths() of the input.
inline void check_position(const engine::rules::SourceLocation& loc,
                           const std::vector<std::size_t>& input_lines) {
  const std::vector<std::size_t> lines = loc.file == "fuzz.conf" ? input_lines : line_lengths(loc.file);
  if (loc.line < 1 || loc.line >= lines.size()) std::abort();
  if (loc.column < 1 || loc.column > lines[loc.line] + 1) std::abort();
}

}  // namespace pairwall::fuzz
