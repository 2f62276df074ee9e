#include "daemon/control/config.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <boost/asio/ip/address.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "daemon/control/config_section.h"

namespace pairwall::control {
namespace {

std::string default_node_name() {
  std::array<char, 256> buf{};
  if (gethostname(buf.data(), buf.size() - 1) != 0) return "pairwall";
  return std::string(buf.data());
}

// A path the config names, relative to the config file and made absolute: the daemon's working
// directory is not the operator's, and `status` should name the file unambiguously.
std::string beside_config(const Config& cfg, const std::string& path) {
  std::filesystem::path p(path);
  if (p.is_relative()) p = std::filesystem::absolute(std::filesystem::path(cfg.file)).parent_path() / p;
  return p.lexically_normal().string();
}

void parse_node(Config& cfg, const toml::table* t) {
  ConfigSection s(t, "node", cfg.file);
  const auto id = s.integer("id", 1, std::numeric_limits<uint32_t>::max());
  if (!id) s.fail("id", "missing: every node needs a unique id (1..4294967295)");
  cfg.node.id = static_cast<uint32_t>(*id);
  if (auto name = s.string("name")) {
    if (name->empty()) s.fail("name", "expected a non-empty string, got \"\"");
    cfg.node.name = *name;
  } else {
    cfg.node.name = default_node_name();
  }
  if (auto v = s.string("epoch_file")) {
    if (v->empty()) s.fail("epoch_file", "expected a path, got \"\"");
    cfg.node.epoch_file = beside_config(cfg, *v);
  }
  s.finish();
}

void parse_queue(Config& cfg, const toml::table* t) {
  ConfigSection s(t, "queue", cfg.file);
  auto& q = cfg.queue;
  if (auto v = s.integer("first", 0, 65535)) q.first = static_cast<uint16_t>(*v);
  if (auto v = s.integer("count", 1, 64)) q.count = static_cast<uint16_t>(*v);
  if (q.first + q.count - 1 > 65535) {
    s.fail("count", "queues " + std::to_string(q.first) + ".." + std::to_string(q.first + q.count - 1) +
                        " run past queue 65535");
  }
  if (auto v = s.boolean("fail_open")) q.fail_open = *v;
  if (auto v = s.integer("maxlen", 1, 1 << 24)) q.maxlen = static_cast<uint32_t>(*v);
  if (auto v = s.integer("rcvbuf_bytes", 64 << 10, 1 << 30)) q.rcvbuf_bytes = static_cast<uint32_t>(*v);
  if (auto v = s.boolean("batch_verdicts")) q.batch_verdicts = *v;
  if (auto v = s.boolean("gso")) q.gso = *v;
  if (auto v = s.choice("hooks", std::array<std::string_view, 2>{"forward", "forward+local"})) {
    q.hooks = *v == "forward" ? HookSet::Forward : HookSet::ForwardLocal;
  }
  if (auto v = s.strings("exclude_interfaces")) {
    for (const auto& name : *v) {
      if (!valid_interface_name(name)) {
        s.fail("exclude_interfaces",
               "\"" + name + "\" is not an interface name (1..15 characters, no '/', ':' or spaces)");
      }
    }
    q.exclude_interfaces = std::move(*v);
  }
  if (auto v = s.integer("mark", 1, std::numeric_limits<uint32_t>::max())) {
    if (std::popcount(static_cast<uint32_t>(*v)) != 1) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "0x%x", static_cast<unsigned>(*v));
      s.fail("mark", std::string("expected one bit (a power of two, e.g. 0x40000000), got ") + hex);
    }
    q.mark = static_cast<uint32_t>(*v);
  }
  s.finish();
}

void parse_rules(Config& cfg, const toml::table* t) {
  ConfigSection s(t, "rules", cfg.file);
  auto file = s.string("file");
  if (!file) s.fail("file", "missing: name the rule file, e.g. file = \"/etc/pairwall/pf.conf\"");
  if (file->empty()) s.fail("file", "expected a path, got \"\"");
  cfg.rules.file = beside_config(cfg, *file);
  s.finish();
}

void parse_log(Config& cfg, const toml::table* t) {
  ConfigSection s(t, "log", cfg.file);
  auto& l = cfg.log;
  if (auto v = s.choice("level", std::array<std::string_view, 7>{"trace", "debug", "info", "warn", "error",
                                                                 "critical", "off"})) {
    l.level = *v;
  }
  // Empty: no pcap log.
  if (auto v = s.string("pcap_file")) l.pcap_file = v->empty() ? *v : beside_config(cfg, *v);
  if (auto v = s.integer("pcap_rotate_bytes", 1 << 20, int64_t{1} << 40)) {
    l.pcap_rotate_bytes = static_cast<uint64_t>(*v);
  }
  if (auto v = s.integer("pcap_keep", 1, 1000)) l.pcap_keep = static_cast<uint32_t>(*v);
  s.finish();
}

void parse_control(Config& cfg, const toml::table* t) {
  ConfigSection s(t, "control", cfg.file);
  if (auto v = s.string("socket")) {
    if (v->empty() || (*v)[0] != '/') s.fail("socket", "expected an absolute path, got \"" + *v + "\"");
    // sun_path holds 108 bytes including the terminator.
    if (v->size() > 107) s.fail("socket", "path longer than 107 bytes");
    cfg.control.socket = *v;
  }
  if (const toml::node* node = s.get("socket_mode")) {
    // TOML has octal integers (0o660); "0660" as a string is accepted because that is how modes
    // are usually written, and a bare 0660 is not valid TOML.
    std::optional<int64_t> mode;
    std::string decimal;
    if (auto i = node->value_exact<int64_t>()) {
      mode = *i;
      // A mode is octal to whoever writes one (chmod, SocketMode=): a decimal 440 would be 0o670,
      // group-writable where 0o440 was meant. Below 8 the two read alike. The base the value was
      // written in is in its flags' two low bits (binary 1, octal 2, hexadecimal 3, decimal 0).
      constexpr auto base_bits = toml::value_flags::format_as_hexadecimal;
      if (*i > 7 && (node->as_integer()->flags() & base_bits) == toml::value_flags::none) {
        mode.reset();
        decimal = ", a decimal number: write a mode in octal, as 0o660";
      }
    } else if (auto str = node->value_exact<std::string>()) {
      if (!str->empty() && str->size() <= 4 && str->find_first_not_of("01234567") == std::string::npos) {
        mode = std::stoll(*str, nullptr, 8);
      }
    }
    if (!mode || *mode < 0 || *mode > 0777) {
      s.fail("socket_mode", "expected an octal mode 0o000..0o777 (or a string like \"0660\"), got " +
                                describe(*node) + decimal);
    }
    cfg.control.socket_mode = static_cast<uint32_t>(*mode);
  }
  s.finish();
}

void parse_metrics(Config& cfg, const toml::table* t) {
  ConfigSection s(t, "metrics", cfg.file);
  if (auto v = s.string("listen")) {
    cfg.metrics.listen = *v;
    if (!v->empty() && !split_host_port(*v, cfg.metrics.host, cfg.metrics.port)) {
      s.fail(
          "listen",
          "expected \"address:port\" (e.g. \"127.0.0.1:9477\", \"[::1]:9477\") or \"\" to disable, got \"" +
              *v + "\"");
    }
  }
  s.finish();
}

void parse_pflow(Config& cfg, const toml::table* t) {
  if (t == nullptr) return;
  ConfigSection s(t, "pflow", cfg.file);
  const std::optional<std::string> collector = s.string("collector");
  if (!collector)
    s.fail("collector", "required in [pflow]: the collector's \"address:port\" (e.g. \"192.0.2.10:4739\")");
  if (!split_host_port(*collector, cfg.pflow.host, cfg.pflow.port)) {
    s.fail("collector",
           "expected \"address:port\" (e.g. \"192.0.2.10:4739\", \"[2001:db8::10]:4739\"), got \"" +
               *collector + "\"");
  }
  cfg.pflow.collector = *collector;
  if (auto v = s.string("source")) {
    boost::system::error_code ec;
    const auto source = boost::asio::ip::make_address(*v, ec);
    if (ec) s.fail("source", "expected an IPv4 or IPv6 address, got \"" + *v + "\"");
    const bool v6 = boost::asio::ip::make_address(cfg.pflow.host).is_v6();
    if (source.is_v6() != v6) {
      s.fail("source", std::string("expected an address of the collector's family (") +
                           (v6 ? "IPv6" : "IPv4") + "), got \"" + *v + "\"");
    }
    cfg.pflow.source = *v;
  }
  if (auto v = s.integer("observation_domain", 0, std::numeric_limits<uint32_t>::max())) {
    cfg.pflow.observation_domain = static_cast<uint32_t>(*v);
  }
  s.finish();
}

void parse_engine(Config& cfg, const toml::table* t) {
  ConfigSection s(t, "engine", cfg.file);
  if (auto v = s.integer("shards", 1, 4096)) {
    if ((*v & (*v - 1)) != 0) s.fail("shards", "expected a power of two 1..4096, got " + std::to_string(*v));
    cfg.engine.shards = static_cast<uint32_t>(*v);
  }
  if (auto v = s.integer("state_limit", 1, std::numeric_limits<uint32_t>::max())) {
    cfg.engine.state_limit = static_cast<uint32_t>(*v);
  }
  s.finish();
}

}  // namespace

bool split_host_port(std::string_view text, std::string& host, uint16_t& port) {
  std::string_view h;
  std::string_view p;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') return false;
    h = text.substr(1, close - 1);
    p = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return false;
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
    if (h.find(':') != std::string_view::npos) return false;  // a bare IPv6 address needs brackets
  }
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string_view::npos) return false;
  const unsigned long n = std::stoul(std::string(p));
  if (n == 0 || n > 65535) return false;
  boost::system::error_code ec;
  boost::asio::ip::make_address(std::string(h), ec);
  if (ec) return false;
  host = std::string(h);
  port = static_cast<uint16_t>(n);
  return true;
}

Config parse_config(std::string_view text, const std::string& file_name) {
  Config cfg;
  cfg.file = file_name;
  toml::table root;
  try {
    root = toml::parse(text, file_name);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << file_name << ":" << e.source().begin.line << ":" << e.source().begin.column << ": "
        << e.description();
    std::string line = msg.str();
    for (char& c : line) {
      if (c == '\n') c = ' ';
    }
    throw ConfigError(line);
  }

  static constexpr std::array<std::string_view, 10> kSections = {
      "node", "queue", "rules", "log", "control", "metrics", "engine", "pflow", "sync", "failover"};
  for (auto&& [key, value] : root) {
    bool known = false;
    for (auto name : kSections) known = known || key.str() == name;
    if (!value.is_table()) {
      if (known) {
        throw ConfigError(file_name + ": " + std::string(key.str()) + ": expected a section [" +
                          std::string(key.str()) + "], got " + describe(value));
      }
      throw ConfigError(file_name + ": " + std::string(key.str()) +
                        ": unknown top-level key (every key belongs in a section such as [node])");
    }
    if (!known) throw ConfigError(file_name + ": [" + std::string(key.str()) + "]: unknown section");
  }

  parse_node(cfg, root["node"].as_table());
  parse_queue(cfg, root["queue"].as_table());
  parse_rules(cfg, root["rules"].as_table());
  parse_log(cfg, root["log"].as_table());
  parse_control(cfg, root["control"].as_table());
  parse_metrics(cfg, root["metrics"].as_table());
  parse_engine(cfg, root["engine"].as_table());
  parse_pflow(cfg, root["pflow"].as_table());
  if (auto* t = root["sync"].as_table()) cfg.sync = *t;
  if (auto* t = root["failover"].as_table()) cfg.failover = *t;
  cfg.document = std::move(root);
  return cfg;
}

namespace {

// A setting as TOML writes it, types told apart (1 and 1.0, "1" and 1): what two files compare by,
// whatever their spacing or their arrays' layout.
std::string setting_text(const toml::node& node) {
  std::ostringstream out;
  node.visit([&out](const auto& value) { out << value; });
  return out.str();
}

}  // namespace

std::vector<std::string> settings_awaiting_restart(const Config& running, const Config& next,
                                                   std::span<const Setting> taken) {
  // Every (section, key) either file sets, in the order of the sections and keys' names.
  std::set<std::pair<std::string, std::string>> settings;
  for (const toml::table* document : {&running.document, &next.document}) {
    for (auto&& [section, table] : *document) {
      if (const toml::table* keys = table.as_table()) {
        for (auto&& [key, value] : *keys) settings.emplace(section.str(), key.str());
      }
    }
  }
  const auto find = [](const toml::table& document, const std::string& section,
                       const std::string& key) -> const toml::node* {
    const toml::table* keys = document[section].as_table();
    return keys != nullptr ? keys->get(key) : nullptr;
  };
  std::vector<std::string> out;
  for (const auto& [section, key] : settings) {
    if (std::find(taken.begin(), taken.end(), Setting{section, key}) != taken.end()) continue;
    const toml::node* before = find(running.document, section, key);
    const toml::node* after = find(next.document, section, key);
    if (before != nullptr && after != nullptr && setting_text(*before) == setting_text(*after)) continue;
    std::string change = "changed";
    if (before == nullptr) change = "added (" + describe(*after) + ")";
    if (after == nullptr) change = "removed";
    const auto scalar = [](const toml::node* n) { return n != nullptr && !n->is_table() && !n->is_array(); };
    if (scalar(before) && scalar(after)) change += " (" + describe(*before) + " -> " + describe(*after) + ")";
    out.push_back(next.file + ": [" + section + "] " + key + ": warning: " + change +
                  ", which a reload does not take: the daemon keeps what it started with until it restarts");
  }
  return out;
}

Config load_config(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    throw ConfigError(path + ": cannot read the configuration file: not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError(path + ": cannot read the configuration file: " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(path + ": cannot read the configuration file");
  return parse_config(text.str(), path);
}

}  // namespace pairwall::control
