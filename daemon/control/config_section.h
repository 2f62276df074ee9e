// Reading one [section] of a TOML configuration file, the way every pairwall section is read:
// typed getters that refuse a wrong type or range with one line naming the file, the section and
// the key ("pairwall.toml: [queue] count: expected 1..64, got 0"), and finish(), which refuses the
// keys nobody asked for, so that a misspelt key never silently means "default".
#pragma once

#include <toml++/toml.h>

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/control/config_error.h"
#include "daemon/engine/interfaces.h"

namespace pairwall::control {

// What the operator wrote, for "got ...": the value itself when it is short and scalar.
std::string describe(const toml::node& node);

using engine::valid_interface_name;

class ConfigSection {
 public:
  // `table` may be null (the section is absent): every getter then returns nullopt.
  ConfigSection(const toml::table* table, std::string_view name, const std::string& file)
      : table_(table), name_(name), file_(file) {}

  [[noreturn]] void fail(std::string_view key, std::string_view what) const;

  // The node for `key`, marked as known; null when absent.
  const toml::node* get(std::string_view key);

  std::optional<int64_t> integer(std::string_view key, int64_t lo, int64_t hi);
  std::optional<bool> boolean(std::string_view key);
  std::optional<std::string> string(std::string_view key);
  std::optional<std::vector<std::string>> strings(std::string_view key);

  // One of `choices`, case-sensitive.
  template <std::size_t N>
  std::optional<std::string> choice(std::string_view key, const std::array<std::string_view, N>& choices) {
    const toml::node* node = get(key);
    if (!node) return std::nullopt;
    const auto v = node->value_exact<std::string>();
    std::string expected;
    for (std::size_t i = 0; i < N; ++i) {
      expected += (i == 0 ? "" : (i + 1 == N ? " or " : ", "));
      expected += "\"" + std::string(choices[i]) + "\"";
    }
    if (!v) fail(key, "expected " + expected + ", got " + describe(*node));
    for (auto c : choices) {
      if (*v == c) return v;
    }
    fail(key, "expected " + expected + ", got " + describe(*node));
  }

  // Refuses every key nobody asked for.
  void finish() const;

 private:
  const toml::table* table_;
  std::string name_;
  const std::string& file_;
  std::set<std::string, std::less<>> known_;
};

}  // namespace pairwall::control
