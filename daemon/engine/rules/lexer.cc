#include "daemon/engine/rules/lexer.h"

#include <cstdio>

namespace pairwall::engine::rules {
namespace {

// '*' for a translation's `port P:*`, '%' for a rule's `probability 20%`; anywhere else a word
// holding either is refused by its parser.
bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == ':' || c == '/' || c == '-' || c == '*' || c == '%';
}

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool is_macro_char(char c) {
  return is_name_start(c) || (c >= '0' && c <= '9');
}

bool is_table_char(char c) {
  return is_macro_char(c) || c == '-' || c == '.';
}

// Table names share pf's limit (PF_TABLE_NAME_SIZE - 1).
constexpr std::size_t kMaxTableName = kTableNameSize - 1;  // pf's limit, less the NUL

// Error messages quote user text: keep them on one line and of a readable length.
std::string printable(std::string_view text) {
  constexpr std::size_t kMax = 40;
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (text.size() > kMax) out += "...";
  return out;
}

const char* symbol(TokenKind kind) {
  switch (kind) {
    case TokenKind::LBrace:
      return "{";
    case TokenKind::RBrace:
      return "}";
    case TokenKind::LParen:
      return "(";
    case TokenKind::RParen:
      return ")";
    case TokenKind::Comma:
      return ",";
    case TokenKind::Bang:
      return "!";
    case TokenKind::Arrow:
      return "->";
    case TokenKind::Eq:
      return "=";
    case TokenKind::Ne:
      return "!=";
    case TokenKind::Lt:
      return "<";
    case TokenKind::Le:
      return "<=";
    case TokenKind::Gt:
      return ">";
    case TokenKind::Ge:
      return ">=";
    case TokenKind::RangeExclusive:
      return "><";
    case TokenKind::Outside:
      return "<>";
    case TokenKind::Colon:
      return ":";
    case TokenKind::End:
    case TokenKind::Newline:
    case TokenKind::Word:
    case TokenKind::String:
    case TokenKind::Table:
      break;
  }
  return "";
}

}  // namespace

std::string Token::describe() const {
  switch (kind) {
    case TokenKind::End:
      return "end of file";
    case TokenKind::Newline:
      return "end of line";
    case TokenKind::Word:
      return "'" + printable(text) + "'";
    case TokenKind::String:
      return "'\"" + printable(text) + "\"'";
    case TokenKind::Table:
      return "'<" + printable(text) + ">'";
    default:
      return std::string("'") + symbol(kind) + "'";
  }
}

std::string Token::source_text() const {
  switch (kind) {
    case TokenKind::End:
    case TokenKind::Newline:
      return "";
    case TokenKind::Word:
    case TokenKind::String:
      return text;
    case TokenKind::Table:
      return "<" + text + ">";
    default:
      return symbol(kind);
  }
}

std::string Token::unterminated_table() const {
  if (kind != TokenKind::Lt || text.size() <= 1) return "";
  return "unterminated table name '" + printable(text) + "': expected '>'";
}

Lexer::Lexer(std::string_view text, std::string file_name) {
  sources_.push_back(Source{text, 0, false, 1, 1, 0});
  files_.push_back(std::move(file_name));
}

void Lexer::include(std::string_view text, std::string file_name, const Token& at) {
  if (includes_ >= kMaxIncludeDepth) {
    throw SyntaxError(at.line, at.column,
                      "includes nest deeper than " + std::to_string(kMaxIncludeDepth) + " files", at.file);
  }
  if (files_.size() >= kMaxFiles) {
    throw SyntaxError(at.line, at.column, "more than " + std::to_string(kMaxFiles) + " included files",
                      at.file);
  }
  files_.push_back(std::move(file_name));
  sources_.push_back(Source{text, 0, false, 1, 1, static_cast<uint16_t>(files_.size() - 1)});
  ++includes_;
}

bool Lexer::reading(const std::string& file_name) const {
  for (const Source& src : sources_) {
    if (!src.expansion && files_[src.file] == file_name) return true;
  }
  return false;
}

void Lexer::fail(uint32_t line, uint32_t column, const std::string& message) const {
  throw SyntaxError(line, column, message, sources_.back().file);
}

void Lexer::advance(Source& src, std::size_t n) {
  for (std::size_t i = 0; i < n && src.pos < src.text.size(); ++i, ++src.pos) {
    if (src.expansion) continue;
    if (src.text[src.pos] == '\n') {
      ++src.line;
      src.column = 1;
    } else {
      ++src.column;
    }
  }
}

Token Lexer::make(TokenKind kind, std::string text, const Source& src, uint32_t line, uint32_t column) const {
  Token t;
  t.kind = kind;
  t.text = std::move(text);
  t.line = line;
  t.column = column;
  t.from_macro = src.expansion;
  t.file = src.file;
  return t;
}

void Lexer::define_macro(const Token& name, std::string value) {
  if (value.size() > kMaxMacroValue) {
    throw SyntaxError(
        name.line, name.column,
        "value of macro '" + name.text + "' is longer than " + std::to_string(kMaxMacroValue) + " characters",
        name.file);
  }
  // A macro defined again takes its new value from here on, as pfctl's symset() gives it.
  values_.push_back(std::move(value));
  macros_.insert_or_assign(name.text, Macro{values_.back(), name.line, name.column, name.file});
}

Token Lexer::next() {
  for (;;) {
    Source& src = sources_.back();
    const std::string_view text = src.text;

    // Blanks, comments and line continuations produce no token.
    if (src.pos < text.size()) {
      const char c = text[src.pos];
      if (c == ' ' || c == '\t' || c == '\r') {
        advance(src, 1);
        continue;
      }
      if (c == '#') {
        // pfctl joins a line ending in a backslash to the next before it looks for the comment's
        // end, so the comment runs on over that line. Only a backslash right before the line's
        // end (CR LF read as LF) does, and not one a backslash before it escapes: a blank after
        // it ends the comment there, as in pfctl, and the next line stays in force.
        for (;;) {
          while (src.pos < text.size() && text[src.pos] != '\n') advance(src, 1);
          if (src.pos >= text.size()) break;
          std::size_t end = text[src.pos - 1] == '\r' ? src.pos - 1 : src.pos;
          bool joined = false;
          while (text[end - 1] == '\\') {
            joined = !joined;
            --end;
          }
          if (!joined) break;
          advance(src, 1);
        }
        continue;
      }
      if (c == '\\') {
        const uint32_t line = src.line;
        const uint32_t column = src.column;
        std::size_t p = src.pos + 1;
        // Trailing blanks after the backslash are invisible in an editor: tolerate them.
        while (p < text.size() && (text[p] == ' ' || text[p] == '\t' || text[p] == '\r')) ++p;
        if (p < text.size() && text[p] != '\n') {
          fail(src.expansion ? src.line : line, src.expansion ? src.column : column,
               "unexpected '\\': a backslash continues a line only as its last character");
        }
        advance(src, p + 1 - src.pos);
        continue;
      }
    }

    if (src.pos >= text.size()) {
      if (sources_.size() == 1) return make(TokenKind::End, "", src, src.line, src.column);
      if (src.expansion) {
        sources_.pop_back();
        continue;
      }
      // An included file ends like a file: no statement runs on into the including one.
      Token end = make(TokenKind::End, "", src, src.line, src.column);
      sources_.pop_back();
      --includes_;
      return end;
    }

    const uint32_t line = src.line;
    const uint32_t column = src.column;
    const char c = text[src.pos];
    const char c1 = src.pos + 1 < text.size() ? text[src.pos + 1] : '\0';

    if (c == '$') {
      std::size_t end = src.pos + 1;
      while (end < text.size() && is_macro_char(text[end])) ++end;
      const std::string name(text.substr(src.pos + 1, end - src.pos - 1));
      if (name.empty()) fail(line, column, "expected a macro name after '$'");
      auto it = macros_.find(name);
      if (it == macros_.end()) fail(line, column, "undefined macro '$" + name + "'");
      if (sources_.size() - includes_ > kMaxExpansionDepth) {
        fail(line, column, "macro '$" + name + "' expands too deeply (does it refer to itself?)");
      }
      // Word characters right after the name belong to the value's last word, as in pfctl's
      // textual expansion: `$int_if:network`, `$net/24`.
      std::size_t suffix_end = end;
      while (suffix_end < text.size() && is_word_char(text[suffix_end])) {
        if (text[suffix_end] == '-' && suffix_end + 1 < text.size() && text[suffix_end + 1] == '>')
          break;  // `$a->b`
        ++suffix_end;
      }
      std::string_view value = it->second.value;
      if (suffix_end > end) {
        glued_.push_back(std::string(it->second.value) + std::string(text.substr(end, suffix_end - end)));
        value = glued_.back();
      }
      expanded_ += value.size();
      if (expanded_ > kMaxExpandedText) {
        fail(line, column,
             "macros expand to more than " + std::to_string(kMaxExpandedText >> 20) +
                 " MiB of text (macros referring to macros multiply)");
      }
      advance(src, suffix_end - src.pos);
      // `src` is invalidated by the push below.
      const uint16_t file = src.file;
      sources_.push_back(Source{value, 0, true, line, column, file});
      continue;
    }

    if (c == '\n') {
      Token t = make(TokenKind::Newline, "", src, line, column);
      advance(src, 1);
      return t;
    }
    if (c == '"' || c == '\'') return lex_string(src, line, column);

    auto punct = [&](TokenKind kind, std::size_t length) {
      advance(src, length);
      return make(kind, symbol(kind), src, line, column);
    };
    switch (c) {
      case '{':
        return punct(TokenKind::LBrace, 1);
      case '}':
        return punct(TokenKind::RBrace, 1);
      case '(':
        return punct(TokenKind::LParen, 1);
      case ')':
        return punct(TokenKind::RParen, 1);
      case ',':
        return punct(TokenKind::Comma, 1);
      case '=':
        return punct(TokenKind::Eq, 1);
      case '!':
        return c1 == '=' ? punct(TokenKind::Ne, 2) : punct(TokenKind::Bang, 1);
      case '>':
        if (c1 == '<') return punct(TokenKind::RangeExclusive, 2);
        if (c1 == '=') return punct(TokenKind::Ge, 2);
        return punct(TokenKind::Gt, 1);
      case '<': {
        if (c1 == '>') return punct(TokenKind::Outside, 2);
        if (c1 == '=') return punct(TokenKind::Le, 2);
        if (!is_name_start(c1)) return punct(TokenKind::Lt, 1);
        std::size_t end = src.pos + 1;
        while (end < text.size() && is_table_char(text[end])) ++end;
        std::string name(text.substr(src.pos + 1, end - src.pos - 1));
        if (end >= text.size() || text[end] != '>') {
          // Not a table: pf reads `port <ssh` as the operator `<` before a service name. The
          // name rides along, so that where a table was expected the parser can say what is
          // missing (Token::unterminated_table()).
          Token lt = punct(TokenKind::Lt, 1);
          lt.text += name;
          return lt;
        }
        if (name.size() > kMaxTableName) {
          fail(line, column,
               "table name '<" + printable(name) + ">' is longer than " + std::to_string(kMaxTableName) +
                   " characters");
        }
        advance(src, end + 1 - src.pos);
        return make(TokenKind::Table, std::move(name), src, line, column);
      }
      default:
        break;
    }

    if (c == '-' && c1 == '>') return punct(TokenKind::Arrow, 2);
    if (is_word_char(c)) {
      std::size_t end = src.pos;
      while (end < text.size() && is_word_char(text[end])) {
        if (text[end] == '-' && end + 1 < text.size() && text[end + 1] == '>') break;  // `a->b`
        ++end;
      }
      std::string word(text.substr(src.pos, end - src.pos));
      if (word == ":") return punct(TokenKind::Colon, 1);
      advance(src, end - src.pos);
      return make(TokenKind::Word, std::move(word), src, line, column);
    }
    fail(line, column, "unexpected character '" + printable(std::string_view(&c, 1)) + "'");
  }
}

Token Lexer::lex_string(Source& src, uint32_t line, uint32_t column) {
  const std::string_view text = src.text;
  const char quote = text[src.pos];
  std::string value;
  advance(src, 1);  // opening quote
  for (;;) {
    if (src.pos >= text.size()) {
      fail(line, column,
           std::string("unterminated quoted string: no closing ") + quote + " before the end of the file");
    }
    const char c = text[src.pos];
    if (c == quote) {
      advance(src, 1);
      return make(TokenKind::String, std::move(value), src, line, column);
    }
    // As pfctl's lexer: a line break inside quotes is dropped, and the string goes on.
    if (c == '\n') {
      advance(src, 1);
      continue;
    }
    if (c == '\\' && src.pos + 1 < text.size()) {
      const char n = text[src.pos + 1];
      if (n == quote || n == '\\') {
        value += n;
        advance(src, 2);
        continue;
      }
      if (n == '\n') {  // continuation inside the string
        advance(src, 2);
        continue;
      }
    }
    value += c;
    advance(src, 1);
  }
}

}  // namespace pairwall::engine::rules
