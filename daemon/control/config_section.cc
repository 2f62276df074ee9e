#include "daemon/control/config_section.h"

#include <sstream>

namespace pairwall::control {
namespace {

std::string_view type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time:
      return "a date/time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

}  // namespace

std::string describe(const toml::node& node) {
  if (const toml::value<int64_t>* integer = node.as_integer()) {
    // In the base it was written in (0o1777, 0x41): the operator looks for what the file says.
    std::ostringstream written;
    written << *integer;
    return written.str();
  }
  if (auto s = node.value_exact<std::string>()) {
    std::string quoted = "\"";
    quoted += s->size() > 40 ? s->substr(0, 40) + "..." : *s;
    return quoted + "\"";
  }
  if (auto b = node.value_exact<bool>()) return *b ? "true" : "false";
  return std::string(type_name(node.type()));
}

void ConfigSection::fail(std::string_view key, std::string_view what) const {
  std::string msg = file_ + ": [" + name_ + "] ";
  msg += key;
  msg += ": ";
  msg += what;
  throw ConfigError(msg);
}

const toml::node* ConfigSection::get(std::string_view key) {
  known_.emplace(key);
  return table_ ? table_->get(key) : nullptr;
}

std::optional<int64_t> ConfigSection::integer(std::string_view key, int64_t lo, int64_t hi) {
  const toml::node* node = get(key);
  if (!node) return std::nullopt;
  const auto v = node->value_exact<int64_t>();
  if (!v || *v < lo || *v > hi) {
    fail(key, "expected " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + describe(*node));
  }
  return v;
}

std::optional<bool> ConfigSection::boolean(std::string_view key) {
  const toml::node* node = get(key);
  if (!node) return std::nullopt;
  const auto v = node->value_exact<bool>();
  if (!v) fail(key, "expected true or false, got " + describe(*node));
  return v;
}

std::optional<std::string> ConfigSection::string(std::string_view key) {
  const toml::node* node = get(key);
  if (!node) return std::nullopt;
  auto v = node->value_exact<std::string>();
  if (!v) fail(key, "expected a string, got " + describe(*node));
  // TOML allows "\u0000"; every string here ends up a C string (a path, an interface name, an
  // address), which would end at it: "/etc/pf.conf\u0000.new" would load /etc/pf.conf.
  if (v->find('\0') != std::string::npos) fail(key, "expected no NUL character, got " + describe(*node));
  return v;
}

std::optional<std::vector<std::string>> ConfigSection::strings(std::string_view key) {
  const toml::node* node = get(key);
  if (!node) return std::nullopt;
  const toml::array* arr = node->as_array();
  if (!arr) fail(key, "expected an array of strings, got " + describe(*node));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    auto v = (*arr)[i].value_exact<std::string>();
    if (!v) {
      fail(key, "expected an array of strings, element " + std::to_string(i) + " is " + describe((*arr)[i]));
    }
    if (v->find('\0') != std::string::npos) {
      fail(key, "expected no NUL character, element " + std::to_string(i) + " is " + describe((*arr)[i]));
    }
    out.push_back(std::move(*v));
  }
  return out;
}

void ConfigSection::finish() const {
  if (!table_) return;
  for (auto&& [key, value] : *table_) {
    if (!known_.contains(std::string(key.str()))) fail(key.str(), "unknown key");
  }
}

}  // namespace pairwall::control
