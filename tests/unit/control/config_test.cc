// pairwall.toml: every key's good and bad values, unknown keys and sections, and the exact
// one-line messages an operator sees.
#include "daemon/control/config.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "daemon/control/config_section.h"

using pairwall::ConfigError;
using pairwall::control::Config;
using pairwall::control::HookSet;
using pairwall::control::parse_config;

namespace {

const std::string kMinimal = "[node]\nid = 7\n[rules]\nfile = \"/etc/pairwall/pf.conf\"\n";

// The minimal valid file plus `extra` (whole sections).
Config parse(const std::string& extra) {
  return parse_config(kMinimal + extra, "pairwall.toml");
}

std::string error_of(const std::string& text) {
  try {
    parse_config(text, "pairwall.toml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("config: a minimal file gets the documented defaults", "[config]") {
  const Config c = parse("");
  CHECK(c.node.id == 7);
  CHECK_FALSE(c.node.name.empty());  // the host name
  CHECK(c.rules.file == "/etc/pairwall/pf.conf");
  CHECK(c.queue.first == 0);
  CHECK(c.queue.count == 1);
  CHECK_FALSE(c.queue.fail_open);
  CHECK(c.queue.maxlen == 65536);
  CHECK(c.queue.rcvbuf_bytes == 32u << 20);
  CHECK(c.queue.batch_verdicts);
  CHECK(c.queue.gso);
  CHECK(c.queue.hooks == HookSet::Forward);
  CHECK(c.queue.exclude_interfaces.empty());
  CHECK(c.queue.mark == 0x40000000);
  CHECK(c.log.level == "info");
  CHECK(c.log.pcap_file.empty());
  CHECK(c.control.socket == "/run/pairwall/control.sock");
  CHECK(c.control.socket_mode == 0660);
  CHECK(c.metrics.listen == "127.0.0.1:9477");
  CHECK(c.metrics.enabled());
  CHECK(c.metrics.host == "127.0.0.1");
  CHECK(c.metrics.port == 9477);
  CHECK(c.engine.shards == 64);
  CHECK_FALSE(c.engine.state_limit.has_value());
  CHECK_FALSE(c.sync.has_value());
  CHECK_FALSE(c.pflow.enabled());
  CHECK_FALSE(c.failover.has_value());
}

TEST_CASE("config: the files it names are found beside it, whatever the daemon's directory", "[config]") {
  const Config c = parse_config(R"(
[node]
id = 1
epoch_file = "state/epoch"
[rules]
file = "./rules/../pf.conf"
[log]
pcap_file = "log/pairwall.pcap"
)",
                                "/etc/pairwall/pairwall.toml");
  CHECK(c.node.epoch_file == "/etc/pairwall/state/epoch");
  CHECK(c.rules.file == "/etc/pairwall/pf.conf");
  CHECK(c.log.pcap_file == "/etc/pairwall/log/pairwall.pcap");
  // Empty: no pcap log.
  CHECK(parse_config("[node]\nid = 1\n[rules]\nfile = \"pf.conf\"\n[log]\npcap_file = \"\"\n",
                     "/etc/pairwall/pairwall.toml")
            .log.pcap_file.empty());
}

TEST_CASE("config: every key accepts its good values", "[config]") {
  const Config c = parse_config(R"(
[node]
id = 4294967295
name = "fw-a"
epoch_file = "state/epoch"
[queue]
first = 10
count = 64
fail_open = true
maxlen = 4096
rcvbuf_bytes = 8388608
batch_verdicts = false
gso = false
hooks = "forward+local"
exclude_interfaces = ["sync0", "eth1.100"]
mark = 0x100000
[rules]
file = "rules/pf.conf"
[log]
level = "debug"
pcap_file = "/var/log/pairwall/log.pcap"
pcap_rotate_bytes = 1048576
pcap_keep = 10
[control]
socket = "/tmp/x/ctl.sock"
socket_mode = 0o600
[metrics]
listen = "[::1]:9100"
[engine]
shards = 128
state_limit = 500000
[sync]
interface = "sync0"
[failover]
vhid = 3
)",
                                "/etc/pairwall/pairwall.toml");
  CHECK(c.node.id == 4294967295u);
  CHECK(c.node.name == "fw-a");
  CHECK(c.node.epoch_file.ends_with("/state/epoch"));
  CHECK(c.queue.first == 10);
  CHECK(c.queue.count == 64);
  CHECK(c.queue.fail_open);
  CHECK(c.queue.maxlen == 4096);
  CHECK(c.queue.rcvbuf_bytes == 8388608);
  CHECK_FALSE(c.queue.gso);
  CHECK_FALSE(c.queue.batch_verdicts);
  CHECK(c.queue.hooks == HookSet::ForwardLocal);
  CHECK(c.queue.exclude_interfaces == std::vector<std::string>{"sync0", "eth1.100"});
  CHECK(c.queue.mark == 0x100000);
  CHECK(c.rules.file == "/etc/pairwall/rules/pf.conf");  // relative to the config file
  CHECK(c.log.level == "debug");
  CHECK(c.log.pcap_file == "/var/log/pairwall/log.pcap");
  CHECK(c.log.pcap_rotate_bytes == 1048576);
  CHECK(c.log.pcap_keep == 10);
  CHECK(c.control.socket == "/tmp/x/ctl.sock");
  CHECK(c.control.socket_mode == 0600);
  CHECK(c.metrics.host == "::1");
  CHECK(c.metrics.port == 9100);
  CHECK(c.engine.shards == 128);
  CHECK(c.engine.state_limit == 500000u);
  REQUIRE(c.sync.has_value());
  CHECK(c.sync->get("interface")->value<std::string>() == "sync0");
  REQUIRE(c.failover.has_value());
  CHECK(c.failover->get("vhid")->value<int64_t>() == 3);
}

TEST_CASE("config: small variations that are valid", "[config]") {
  CHECK(parse("[control]\nsocket_mode = \"0640\"\n").control.socket_mode == 0640);
  CHECK(parse("[control]\nsocket_mode = 0o777\n").control.socket_mode == 0777);
  CHECK(parse("[control]\nsocket_mode = 0\n").control.socket_mode == 0);
  CHECK_FALSE(parse("[metrics]\nlisten = \"\"\n").metrics.enabled());
  CHECK(parse("[metrics]\nlisten = \"0.0.0.0:1\"\n").metrics.port == 1);
  CHECK(parse("[queue]\nhooks = \"forward\"\n").queue.hooks == HookSet::Forward);
  CHECK(parse("[queue]\nfirst = 65535\ncount = 1\n").queue.first == 65535);
  CHECK(parse("[engine]\nshards = 1\n").engine.shards == 1);
  CHECK(parse("[engine]\nstate_limit = 1\n").engine.state_limit == 1u);
  CHECK(parse("[log]\nlevel = \"off\"\n").log.level == "off");
  CHECK(parse("[queue]\nexclude_interfaces = []\n").queue.exclude_interfaces.empty());
  {
    const Config c = parse("[pflow]\ncollector = \"[2001:db8::10]:4739\"\nsource = \"2001:db8::1\"\n");
    CHECK(c.pflow.enabled());
    CHECK(c.pflow.host == "2001:db8::10");
    CHECK(c.pflow.port == 4739);
    CHECK(c.pflow.source == "2001:db8::1");
    CHECK_FALSE(c.pflow.observation_domain.has_value());
    CHECK(parse("[pflow]\ncollector = \"192.0.2.10:2055\"\nobservation_domain = 0\n")
              .pflow.observation_domain == 0u);
  }
  CHECK(parse_config("[node]\nid = 1\n[rules]\nfile = \"/abs/pf.conf\"\n", "/etc/pairwall/pairwall.toml")
            .rules.file == "/abs/pf.conf");
}

TEST_CASE("config: bad values are refused with one line naming file, section and key", "[config]") {
  struct Case {
    std::string extra;
    std::string message;
  };
  const Case cases[] = {
      {"[queue]\ncount = 0\n", "pairwall.toml: [queue] count: expected 1..64, got 0"},
      {"[queue]\ncount = 65\n", "pairwall.toml: [queue] count: expected 1..64, got 65"},
      {"[queue]\ncount = \"4\"\n", "pairwall.toml: [queue] count: expected 1..64, got \"4\""},
      {"[queue]\ncount = 2.5\n", "pairwall.toml: [queue] count: expected 1..64, got a float"},
      {"[queue]\nfirst = -1\n", "pairwall.toml: [queue] first: expected 0..65535, got -1"},
      {"[queue]\nfirst = 65536\n", "pairwall.toml: [queue] first: expected 0..65535, got 65536"},
      {"[queue]\nfirst = 65530\ncount = 8\n",
       "pairwall.toml: [queue] count: queues 65530..65537 run past queue 65535"},
      {"[queue]\nfail_open = \"yes\"\n",
       "pairwall.toml: [queue] fail_open: expected true or false, got \"yes\""},
      {"[queue]\nfail_open = 1\n", "pairwall.toml: [queue] fail_open: expected true or false, got 1"},
      {"[queue]\nmaxlen = 0\n", "pairwall.toml: [queue] maxlen: expected 1..16777216, got 0"},
      {"[queue]\nrcvbuf_bytes = 1000\n",
       "pairwall.toml: [queue] rcvbuf_bytes: expected 65536..1073741824, got 1000"},
      {"[queue]\nbatch_verdicts = \"no\"\n",
       "pairwall.toml: [queue] batch_verdicts: expected true or false, got \"no\""},
      {"[queue]\nhooks = \"input\"\n",
       "pairwall.toml: [queue] hooks: expected \"forward\" or \"forward+local\", got \"input\""},
      {"[queue]\nhooks = 1\n",
       "pairwall.toml: [queue] hooks: expected \"forward\" or \"forward+local\", got 1"},
      // One bit: the hooks test it as mark/mask, and the replies set it whole.
      {"[queue]\nmark = 0x3000\n",
       "pairwall.toml: [queue] mark: expected one bit (a power of two, e.g. 0x40000000), got 0x3000"},
      {"[queue]\nmark = 0\n", "pairwall.toml: [queue] mark: expected 1..4294967295, got 0"},
      {"[queue]\nexclude_interfaces = \"sync0\"\n",
       "pairwall.toml: [queue] exclude_interfaces: expected an array of strings, got \"sync0\""},
      {"[queue]\nexclude_interfaces = [\"a\", 2]\n",
       "pairwall.toml: [queue] exclude_interfaces: expected an array of strings, element 1 is 2"},
      {"[queue]\nexclude_interfaces = [\"a-very-long-interface\"]\n",
       "pairwall.toml: [queue] exclude_interfaces: \"a-very-long-interface\" is not an interface name (1..15 "
       "characters, no '/', ':' or spaces)"},
      {"[queue]\nexclude_interfaces = [\"a\\fb\"]\n",
       "pairwall.toml: [queue] exclude_interfaces: \"a\\u000Cb\" is not an interface name (1..15 characters, "
       "no "
       "'/', ':' or spaces)"},
      {"[queue]\nexclude_interfaces = [\"a/b\"]\n",
       "pairwall.toml: [queue] exclude_interfaces: \"a/b\" is not an interface name (1..15 characters, no "
       "'/', "
       "':' or spaces)"},
      {"[log]\nlevel = \"verbose\"\n",
       "pairwall.toml: [log] level: expected \"trace\", \"debug\", \"info\", \"warn\", \"error\", "
       "\"critical\" or "
       "\"off\", got \"verbose\""},
      {"[log]\npcap_file = 3\n", "pairwall.toml: [log] pcap_file: expected a string, got 3"},
      {"[log]\npcap_rotate_bytes = 100\n",
       "pairwall.toml: [log] pcap_rotate_bytes: expected 1048576..1099511627776, got 100"},
      {"[log]\npcap_keep = 0\n", "pairwall.toml: [log] pcap_keep: expected 1..1000, got 0"},
      {"[control]\nsocket = \"ctl.sock\"\n",
       "pairwall.toml: [control] socket: expected an absolute path, got \"ctl.sock\""},
      {"[control]\nsocket = \"/" + std::string(120, 'x') + "\"\n",
       "pairwall.toml: [control] socket: path longer than 107 bytes"},
      {"[control]\nsocket_mode = 0o1777\n",
       "pairwall.toml: [control] socket_mode: expected an octal mode 0o000..0o777 (or a string like "
       "\"0660\"), got "
       "0o1777"},
      {"[queue]\ncount = 0x41\n", "pairwall.toml: [queue] count: expected 1..64, got 0x41"},
      {"[queue]\nmaxlen = 0b0\n", "pairwall.toml: [queue] maxlen: expected 1..16777216, got 0b0"},
      {"[control]\nsocket_mode = \"rw\"\n",
       "pairwall.toml: [control] socket_mode: expected an octal mode 0o000..0o777 (or a string like "
       "\"0660\"), got "
       "\"rw\""},
      {"[control]\nsocket_mode = \"0680\"\n",
       "pairwall.toml: [control] socket_mode: expected an octal mode 0o000..0o777 (or a string like "
       "\"0660\"), got "
       "\"0680\""},
      {"[metrics]\nlisten = \"localhost:9477\"\n",
       "pairwall.toml: [metrics] listen: expected \"address:port\" (e.g. \"127.0.0.1:9477\", \"[::1]:9477\") "
       "or \"\" "
       "to disable, got \"localhost:9477\""},
      {"[metrics]\nlisten = \"127.0.0.1:0\"\n",
       "pairwall.toml: [metrics] listen: expected \"address:port\" (e.g. \"127.0.0.1:9477\", \"[::1]:9477\") "
       "or \"\" "
       "to disable, got \"127.0.0.1:0\""},
      {"[metrics]\nlisten = \"::1:9477\"\n",
       "pairwall.toml: [metrics] listen: expected \"address:port\" (e.g. \"127.0.0.1:9477\", \"[::1]:9477\") "
       "or \"\" "
       "to disable, got \"::1:9477\""},
      {"[metrics]\nlisten = 9477\n", "pairwall.toml: [metrics] listen: expected a string, got 9477"},
      {"[engine]\nshards = 3\n", "pairwall.toml: [engine] shards: expected a power of two 1..4096, got 3"},
      {"[engine]\nshards = 8192\n", "pairwall.toml: [engine] shards: expected 1..4096, got 8192"},
      {"[engine]\nstate_limit = 0\n", "pairwall.toml: [engine] state_limit: expected 1..4294967295, got 0"},
      {"[queue]\ncout = 2\n", "pairwall.toml: [queue] cout: unknown key"},
      {"[pflow]\nsource = \"192.0.2.1\"\n",
       "pairwall.toml: [pflow] collector: required in [pflow]: the collector's \"address:port\" (e.g. "
       "\"192.0.2.10:4739\")"},
      {"[pflow]\ncollector = \"collector:4739\"\n",
       "pairwall.toml: [pflow] collector: expected \"address:port\" (e.g. \"192.0.2.10:4739\", "
       "\"[2001:db8::10]:4739\"), got \"collector:4739\""},
      {"[pflow]\ncollector = \"192.0.2.10:4739\"\nsource = \"2001:db8::1\"\n",
       "pairwall.toml: [pflow] source: expected an address of the collector's family (IPv4), got "
       "\"2001:db8::1\""},
      {"[pflow]\ncollector = \"192.0.2.10:4739\"\nflowdst = 1\n",
       "pairwall.toml: [pflow] flowdst: unknown key"},
      {"[log]\nfile = \"x\"\n", "pairwall.toml: [log] file: unknown key"},
      {"[engine]\n[engine.sub]\nx = 1\n", "pairwall.toml: [engine] sub: unknown key"},
      {"[bogus]\nx = 1\n", "pairwall.toml: [bogus]: unknown section"},
      {"stray = 1\n", "pairwall.toml: [rules] stray: unknown key"},  // TOML: it belongs to [rules]
      {"queue = 5\n", "pairwall.toml: [rules] queue: unknown key"},
  };
  for (const auto& c : cases) {
    INFO(c.extra);
    CHECK(error_of(kMinimal + c.extra) == c.message);
  }
}

// A mode is octal to everyone who writes one (chmod, systemd's UMask=, SocketMode=): a decimal 440
// is 0o670, a group-writable socket where the operator meant a read-only one, and must not pass.
TEST_CASE("config: a socket mode written as a decimal number is refused", "[config]") {
  CHECK(error_of(kMinimal + "[control]\nsocket_mode = 440\n") ==
        "pairwall.toml: [control] socket_mode: expected an octal mode 0o000..0o777 (or a string like "
        "\"0660\"), got 440, a decimal number: write a mode in octal, as 0o660");
  CHECK(error_of(kMinimal + "[control]\nsocket_mode = 8\n") ==
        "pairwall.toml: [control] socket_mode: expected an octal mode 0o000..0o777 (or a string like "
        "\"0660\"), got 8, a decimal number: write a mode in octal, as 0o660");
  // The same in any base, and written in any other base it says what it says.
  CHECK(parse("[control]\nsocket_mode = 7\n").control.socket_mode == 07);
  CHECK(parse("[control]\nsocket_mode = 0x1a0\n").control.socket_mode == 0640);
  CHECK(parse("[control]\nsocket_mode = 0b110100000\n").control.socket_mode == 0640);
}

TEST_CASE("config: [node] and [rules] are required", "[config]") {
  CHECK(error_of("[rules]\nfile = \"/x\"\n") ==
        "pairwall.toml: [node] id: missing: every node needs a unique id (1..4294967295)");
  CHECK(error_of("[node]\nid = 0\n[rules]\nfile = \"/x\"\n") ==
        "pairwall.toml: [node] id: expected 1..4294967295, got 0");
  CHECK(error_of("[node]\nid = 4294967296\n[rules]\nfile = \"/x\"\n") ==
        "pairwall.toml: [node] id: expected 1..4294967295, got 4294967296");
  CHECK(error_of("[node]\nid = 1\nname = \"\"\n[rules]\nfile = \"/x\"\n") ==
        "pairwall.toml: [node] name: expected a non-empty string, got \"\"");
  CHECK(error_of("[node]\nid = 1\nnmae = \"a\"\n[rules]\nfile = \"/x\"\n") ==
        "pairwall.toml: [node] nmae: unknown key");
  CHECK(error_of("[node]\nid = 1\n") ==
        "pairwall.toml: [rules] file: missing: name the rule file, e.g. file = \"/etc/pairwall/pf.conf\"");
  CHECK(error_of("[node]\nid = 1\n[rules]\nfile = \"\"\n") ==
        "pairwall.toml: [rules] file: expected a path, got \"\"");
  CHECK(error_of("[node]\nid = 1\n[rules]\nfile = [\"/x\"]\n") ==
        "pairwall.toml: [rules] file: expected a string, got an array");
  CHECK(error_of("node = 1\n[rules]\nfile = \"/x\"\n") ==
        "pairwall.toml: node: expected a section [node], got 1");
  CHECK(error_of("top = 1\n[node]\nid = 1\n") ==
        "pairwall.toml: top: unknown top-level key (every key belongs in a section such as [node])");
}

TEST_CASE("config: an interface name is what the kernel's dev_valid_name() accepts", "[config]") {
  struct Row {
    std::string name;
    bool valid;
  };
  const std::vector<Row> rows{
      {"lan0", true},
      {"eth1.100", true},
      {"br-lan_2@x", true},
      {"fifteen-chars15", true},
      {"sixteen-chars-16", false},
      {"", false},
      {".", false},
      {"..", false},
      {"...", true},
      {"a/b", false},
      {"a:b", false},
      {"a b", false},
      {"a\tb", false},
      {"a\nb", false},
      {"a\vb", false},
      {"a\fb", false},
      {"a\rb", false},
      {std::string("a\0b", 3), false},
      {"lan\xa0", false},         // the kernel's isspace() takes Latin-1's no-break space
      {"caf\xc3\xa9", true},      // "café": UTF-8, no byte the kernel refuses
      {"l\xc3\xa0", false},       // "là": its second byte is 0xA0
      {"lan\x1f\x7f\x85", true},  // other control bytes are not spaces to the kernel
  };
  for (const auto& row : rows) {
    INFO(ConfigError::one_line(row.name));
    CHECK(pairwall::control::valid_interface_name(row.name) == row.valid);
  }
}

// A C string ends at the NUL: the daemon would open another file than the one the line names.
TEST_CASE("config: a string holding a NUL character is refused", "[config]") {
  CHECK(error_of("[node]\nid = 1\n[rules]\nfile = \"/etc/pf.conf\\u0000.new\"\n") ==
        "pairwall.toml: [rules] file: expected no NUL character, got \"/etc/pf.conf\\u0000.new\"");
  CHECK(error_of(kMinimal + "[control]\nsocket = \"/run/a\\u0000b\"\n") ==
        "pairwall.toml: [control] socket: expected no NUL character, got \"/run/a\\u0000b\"");
  CHECK(error_of(kMinimal + "[log]\npcap_file = \"/var/log/p\\u0000\"\n") ==
        "pairwall.toml: [log] pcap_file: expected no NUL character, got \"/var/log/p\\u0000\"");
  CHECK(error_of(kMinimal + "[queue]\nexclude_interfaces = [\"sync0\", \"a\\u0000\"]\n") ==
        "pairwall.toml: [queue] exclude_interfaces: expected no NUL character, element 1 is \"a\\u0000\"");
}

TEST_CASE("config: a TOML syntax error names file:line:column on one line", "[config]") {
  const std::string msg = error_of("[node]\nid = 1\n[rules\nfile = \"/x\"\n");
  CHECK(msg.rfind("pairwall.toml:3:", 0) == 0);
  CHECK(msg.find('\n') == std::string::npos);
  const std::string octal =
      error_of("[node]\nid = 1\n[rules]\nfile = \"/x\"\n[control]\nsocket_mode = 0660\n");
  CHECK(octal.rfind("pairwall.toml:6:", 0) == 0);
}

TEST_CASE("config: every message is a single line", "[config]") {
  for (const std::string text : {"[queue]\ncount = \"a\nb\"\n", "[queue]\nhooks = \"x\"\n"}) {
    const std::string msg = error_of(kMinimal + text);
    CHECK(msg != "<no error>");
    CHECK(msg.find('\n') == std::string::npos);
  }
  // TOML's escapes put a newline (or any control character) in a value, a key or a section's
  // name: the message writes it as the escape, not as a second line.
  CHECK(error_of(kMinimal + "[queue]\nhooks = \"forward\\nlocal\"\n") ==
        "pairwall.toml: [queue] hooks: expected \"forward\" or \"forward+local\", got \"forward\\nlocal\"");
  CHECK(error_of(kMinimal + "[queue]\n\"cou\\nnt\" = 2\n") == "pairwall.toml: [queue] cou\\nnt: unknown key");
  CHECK(error_of(kMinimal + "[\"que\\rue\"]\nx = 1\n") == "pairwall.toml: [que\\rue]: unknown section");
  CHECK(error_of(kMinimal + "[control]\nsocket = \"run\\tctl\\u0001\"\n") ==
        "pairwall.toml: [control] socket: expected an absolute path, got \"run\\tctl\\u0001\"");
}

TEST_CASE("config: load_config reads a file and names it in errors", "[config]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("pairwall-config-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "pairwall.toml").string();
  { std::ofstream(path) << kMinimal << "[queue]\ncount = 0\n"; }
  try {
    pairwall::control::load_config(path);
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == path + ": [queue] count: expected 1..64, got 0");
  }
  { std::ofstream(path) << "[node]\nid = 1\n[rules]\nfile = \"pf.conf\"\n"; }
  CHECK(pairwall::control::load_config(path).rules.file == (dir / "pf.conf").string());
  std::filesystem::remove_all(dir);
  try {
    pairwall::control::load_config(path);
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == path + ": cannot read the configuration file: No such file or directory");
  }
  std::filesystem::create_directories(dir);
  try {
    pairwall::control::load_config(dir.string());
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == dir.string() + ": cannot read the configuration file: not a regular file");
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("config: split_host_port", "[config]") {
  std::string host;
  uint16_t port = 0;
  CHECK(pairwall::control::split_host_port("127.0.0.1:9477", host, port));
  CHECK(host == "127.0.0.1");
  CHECK(port == 9477);
  CHECK(pairwall::control::split_host_port("[2001:db8::1]:80", host, port));
  CHECK(host == "2001:db8::1");
  CHECK(port == 80);
  CHECK_FALSE(pairwall::control::split_host_port("127.0.0.1", host, port));
  CHECK_FALSE(pairwall::control::split_host_port("127.0.0.1:", host, port));
  CHECK_FALSE(pairwall::control::split_host_port("127.0.0.1:65536", host, port));
  CHECK_FALSE(pairwall::control::split_host_port("127.0.0.1:99999999999", host, port));
  CHECK_FALSE(pairwall::control::split_host_port("[::1]9477", host, port));
  CHECK_FALSE(pairwall::control::split_host_port("300.0.0.1:80", host, port));
  CHECK_FALSE(pairwall::control::split_host_port(":80", host, port));
}

TEST_CASE("config: the shipped sample configuration is valid", "[config]") {
  const std::string path = std::string(PAIRWALL_SOURCE_DIR) + "/packaging/pairwall.toml";
  const Config c = pairwall::control::load_config(path);
  CHECK(c.node.id == 1);
  CHECK(c.node.name == "fw-a");
  CHECK(c.rules.file == std::string(PAIRWALL_SOURCE_DIR) + "/packaging/pairwall.rules");
  CHECK(c.queue.exclude_interfaces == std::vector<std::string>{"sync0"});
  CHECK_FALSE(c.sync.has_value());  // commented out in the sample
}

TEST_CASE("config: a reload names the settings it leaves as they ran", "[config][reload]") {
  using pairwall::control::settings_awaiting_restart;
  const std::string failover =
      "[failover]\ndriver = \"builtin\"\nadvskew = 0\nkey_file = \"a.key\"\n"
      "vips = [ { interface = \"lan0\", address = \"10.0.0.1/24\" } ]\n";
  const Config running = parse("[queue]\ncount = 2\n" + failover);
  using pairwall::control::Setting;
  const Setting taken[] = {{"rules", "file"}, {"failover", "key_file"}, {"failover", "accept_key_file"}};
  const auto after = [&](const std::string& text) {
    return settings_awaiting_restart(running, parse(text), taken);
  };
  const std::string tail =
      ", which a reload does not take: the daemon keeps what it started with until it restarts";

  // The same settings, however written, and those a reload takes: nothing to say.
  CHECK(after("[queue]\ncount = 2\n" + failover).empty());
  CHECK(after("[failover]\nvips = [{interface=\"lan0\",address=\"10.0.0.1/24\"}]\nkey_file = \"b.key\"\n"
              "accept_key_file = \"a.key\"\nadvskew = 0\ndriver = \"builtin\"\n[queue]\ncount = 2\n")
            .empty());
  const Config other_rules = parse_config(
      "[node]\nid = 7\n[rules]\nfile = \"/etc/pairwall/other.conf\"\n[queue]\n"
      "count = 2\n" +
          failover,
      "pairwall.toml");
  CHECK(settings_awaiting_restart(running, other_rules, taken).empty());

  // A value changed, added, removed; a list changed; a section added.
  CHECK(after("[queue]\ncount = 2\n" + failover + "preempt = true\n") ==
        std::vector<std::string>{"pairwall.toml: [failover] preempt: warning: added (true)" + tail});
  CHECK(after("[queue]\ncount = 4\n" + failover) ==
        std::vector<std::string>{"pairwall.toml: [queue] count: warning: changed (2 -> 4)" + tail});
  CHECK(after(failover) == std::vector<std::string>{"pairwall.toml: [queue] count: warning: removed" + tail});
  std::string moved = "[queue]\ncount = 2\n" + failover;
  moved.replace(moved.find("10.0.0.1/24"), 11, "10.0.0.2/24");
  CHECK(after(moved) == std::vector<std::string>{"pairwall.toml: [failover] vips: warning: changed" + tail});
  CHECK(after("[queue]\ncount = 2\n" + failover + "[metrics]\nlisten = \"127.0.0.1:9100\"\n") ==
        std::vector<std::string>{"pairwall.toml: [metrics] listen: warning: added (\"127.0.0.1:9100\")" +
                                 tail});
  // Each setting once, in the order of the sections' and keys' names.
  std::string two = "[queue]\ncount = 3\n" + failover;
  two.replace(two.find("advskew = 0"), 11, "advskew = 100");
  CHECK(after(two) ==
        std::vector<std::string>{"pairwall.toml: [failover] advskew: warning: changed (0 -> 100)" + tail,
                                 "pairwall.toml: [queue] count: warning: changed (2 -> 3)" + tail});
}
