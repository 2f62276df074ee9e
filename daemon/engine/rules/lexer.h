// Tokenizer for the rule language (pf.conf subset). Internal to the rule parser.
//
// One logical line is one statement, so newlines are tokens; `\` at the end of a line joins it
// to the next, `#` starts a comment. Unquoted words take letters, digits and `_ . : / - * %`, so
// addresses (`2001:db8::/32`), port ranges (`1000:2000`), flags (`S/SA`), keywords (`return-rst`)
// and probabilities (`20%`) arrive whole and the parser splits them. `<name>` is a table name when a letter
// or `_` follows `<` directly; otherwise `<` is a port operator (`port < 1024`, `port <1024`).
//
// Strings take either quote, `"..."` or `'...'`; as in pfctl, a line break inside the quotes is
// dropped and the string goes on over the next line.
//
// Macros: the parser defines them (`name = value`); `$name` is replaced by the value, re-read
// as rule text the way pfctl does, so `$ports` may expand to `{ 22 80 }`. Tokens from an
// expansion carry the position of the `$name` that produced them; word characters written right
// after the name join the value's last word (`$int_if:network` is `em1:network`). Macros are not
// expanded inside quotes.
//
// Included files (`include "path"`, read by the parser) are lexed where the statement stands, as
// pfctl reads them: the macros of one file are the others' too, and each token names its file.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/engine/rules/ast.h"

namespace pairwall::engine::rules {

enum class TokenKind : uint8_t {
  End,             // end of file (of an included one: Token::file is not 0)
  Newline,         // end of a logical line
  Word,            // unquoted: keyword, name, number, address, ...
  String,          // "quoted" or 'quoted', text without the quotes
  Table,           // <name>, text without the brackets
  LBrace,          // {
  RBrace,          // }
  LParen,          // (
  RParen,          // )
  Comma,           // ,
  Bang,            // !
  Arrow,           // ->
  Eq,              // =
  Ne,              // !=
  Lt,              // <
  Le,              // <=
  Gt,              // >
  Ge,              // >=
  RangeExclusive,  // ><
  Outside,         // <>
  Colon,           // : standing alone (`1000 : 2000`)
};

struct Token {
  TokenKind kind = TokenKind::End;
  std::string text;
  uint32_t line = 0;        // 1-based
  uint32_t column = 0;      // 1-based
  bool from_macro = false;  // produced by a $macro expansion: line/column are the `$`'s
  uint16_t file = 0;        // Lexer::file_name(file): 0 the file lexed first, then included ones

  // How an error message quotes it: 'pass', '"quoted"', '<table>', end of line, end of file.
  std::string describe() const;
  // The text as it would be written back into a macro value.
  std::string source_text() const;
  // The part of `text` from `offset` on, placed where it stands in the line; a macro's value is not
  // in the line, so a part of it stays at the `$`.
  Token part(std::size_t offset) const {
    Token out = *this;
    out.text = text.substr(offset);
    if (!from_macro) out.column += static_cast<uint32_t>(offset);
    return out;
  }
  // For `<name` with no closing '>', lexed as the operator '<' (pf's `port <ssh`): the error to
  // give where a table was expected instead; empty for every other token.
  std::string unterminated_table() const;
};

// The first syntax error; parse_rules turns it into a RuleError.
class SyntaxError : public std::runtime_error {
 public:
  SyntaxError(uint32_t line, uint32_t column, const std::string& message, uint16_t file = 0)
      : std::runtime_error(message), line_(line), column_(column), file_(file) {}
  uint32_t line() const { return line_; }
  uint32_t column() const { return column_; }
  uint16_t file() const { return file_; }  // as Token::file

 private:
  uint32_t line_;
  uint32_t column_;
  uint16_t file_;
};

class Lexer {
 public:
  // `text` must outlive the lexer.
  explicit Lexer(std::string_view text, std::string file_name = {});

  // The next token; throws SyntaxError (unterminated string, undefined macro, stray character).
  Token next();

  // Makes `$name` expand to `value` in the text lexed from now on, a defined macro too (as pfctl).
  // Throws SyntaxError at `name` when the value is too long.
  void define_macro(const Token& name, std::string value);

  bool has_macro(const std::string& name) const { return macros_.count(name) != 0; }

  // Lexes `text` (which must outlive the lexer), named `file_name`, from the next token on; its
  // End (Token::file not 0) ends its last statement, then the lexing goes on where it was. Throws
  // SyntaxError at `at` when includes would nest deeper than kMaxIncludeDepth.
  void include(std::string_view text, std::string file_name, const Token& at);
  // Whether `file_name` is being lexed: the first file, or one included and not yet finished.
  bool reading(const std::string& file_name) const;
  const std::string& file_name(uint16_t file) const { return files_[file]; }

  // Bounds that keep hostile input from exhausting memory or stack.
  static constexpr std::size_t kMaxExpansionDepth = 16;
  static constexpr std::size_t kMaxMacroValue = 64 * 1024;
  // Quoted values are expanded where used, so macros referring to macros multiply: bound the
  // text all expansions of one file may produce.
  static constexpr std::size_t kMaxExpandedText = 4 * 1024 * 1024;
  static constexpr std::size_t kMaxIncludeDepth = 16;
  static constexpr std::size_t kMaxFiles = 4096;  // included files, all told

 private:
  struct Macro {
    std::string_view value;  // in values_
    uint32_t line;
    uint32_t column;
    uint16_t file;
  };
  // The file is source 0; each active $macro expansion and each included file pushes one.
  struct Source {
    std::string_view text;
    std::size_t pos = 0;
    bool expansion = false;
    uint32_t line = 1;  // the file's position, or the `$` of the expansion
    uint32_t column = 1;
    uint16_t file = 0;  // the file, or the file of the `$`
  };

  Token lex_from(Source& src);
  Token lex_string(Source& src, uint32_t line, uint32_t column);
  Token make(TokenKind kind, std::string text, const Source& src, uint32_t line, uint32_t column) const;
  [[noreturn]] void fail(uint32_t line, uint32_t column, const std::string& message) const;
  static void advance(Source& src, std::size_t n);

  std::vector<Source> sources_;
  std::vector<std::string> files_;  // by Token::file
  std::size_t includes_ = 0;        // included files among sources_
  std::map<std::string, Macro> macros_;
  std::deque<std::string> glued_;  // values with the word characters that followed their `$name`
  // Every value a macro has been given: a redefinition leaves the expansions of the earlier value
  // that are being read intact.
  std::deque<std::string> values_;
  std::size_t expanded_ = 0;  // bytes of macro text pushed so far
};

}  // namespace pairwall::engine::rules
