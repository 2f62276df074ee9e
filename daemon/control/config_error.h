// A configuration the daemon refuses to start with. what() is one line a person can act on,
// naming the file, the key and what is wrong: "pairwall.toml: [sync] port: expected 1..65535, got 0".
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pairwall {

class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(std::string_view message) : std::runtime_error(one_line(message)) {}

  // The message quotes what the operator wrote (a value, a key, a section's name), which TOML lets
  // hold a newline or any other control character ("a\nb"): written out as TOML escapes, so that
  // the journal and systemctl status show one line, and show what is really in the file.
  static std::string one_line(std::string_view message) {
    std::string out;
    out.reserve(message.size());
    for (const char c : message) {
      const auto u = static_cast<unsigned char>(c);
      if (u >= 0x20 && u != 0x7f) {
        out += c;
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c == '\t') {
        out += "\\t";
      } else {
        char escaped[8];
        std::snprintf(escaped, sizeof escaped, "\\u%04X", u);
        out += escaped;
      }
    }
    return out;
  }
};

}  // namespace pairwall
