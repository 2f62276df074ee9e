// The [sync] section and the key file: what is accepted, and the one-line refusals.
#include "daemon/sync/sync_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "daemon/control/config_error.h"
#include "daemon/sync/key_file.h"

using namespace pairwall::sync;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/pw-sync-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path write(const std::string& name, const std::string& content, mode_t mode = 0600) const {
    const fs::path p = path / name;
    std::ofstream(p, std::ios::binary) << content;
    ::chmod(p.c_str(), mode);
    return p;
  }
};

const std::string kHexKey = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";

toml::table parse(const std::string& text) {
  return toml::parse(text);
}

std::string refusal(const std::string& section, const TempDir& dir) {
  try {
    parse_sync_config(parse(section), (dir.path / "pairwall.toml").string());
  } catch (const pairwall::ConfigError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("key file: hex and raw keys load", "[sync][config]") {
  TempDir dir;
  const auto hex = load_key_file(dir.write("hex.key", kHexKey).string(), "ctx");
  REQUIRE(hex.size() == 32);
  CHECK(hex[0] == 0x00);
  CHECK(hex[1] == 0x11);
  CHECK(hex[15] == 0xff);
  const std::string raw(40, '\x07');
  CHECK(load_key_file(dir.write("raw.key", raw).string(), "ctx") == std::vector<uint8_t>(40, 7));
}

TEST_CASE("key file: refusals name the file and the problem", "[sync][config]") {
  TempDir dir;
  struct Case {
    const char* name;
    std::string path;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"missing", (dir.path / "nope.key").string(), "No such file"},
      {"world readable", dir.write("open.key", kHexKey, 0644).string(), "chmod 600"},
      {"short hex", dir.write("short.key", "0011223344\n").string(), "need at least 64"},
      {"odd hex", dir.write("odd.key", kHexKey.substr(0, 63) + "\n").string(), "odd number"},
      {"short raw", dir.write("raw.key", "not a key, too short").string(), "need at least 32"},
      {"a directory", dir.path.string(), "not a regular file"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    try {
      load_key_file(c.path, "pairwall.toml: [sync] key_file");
      FAIL("accepted");
    } catch (const pairwall::ConfigError& e) {
      const std::string what = e.what();
      CHECK(what.find("pairwall.toml: [sync] key_file: " + c.path) == 0);
      CHECK(what.find(c.expect) != std::string::npos);
    }
  }
}

TEST_CASE("[sync] with every key", "[sync][config]") {
  TempDir dir;
  dir.write("sync.key", kHexKey);
  dir.write("next.key", std::string(32, 'n'));
  const auto c = parse_sync_config(parse(R"(
interface = "sync0"
address = "10.10.9.1"
peer = "10.10.9.2"
port = 8371
key_file = "sync.key"
accept_key_file = "next.key"
flush_interval_ms = 5
mtu = 9000
bulk_timeout_min_s = 20
peer_node_id = 2
resend_window = 256
pending_limit = 5000
defer = true
defer_timeout_ms = 25
ttl_security = false
tables = ["bruteforce", "abuse-v6.list"]
)"),
                                   (dir.path / "pairwall.toml").string());
  CHECK(c.interface == "sync0");
  CHECK(c.address == "10.10.9.1");
  CHECK(c.peer == "10.10.9.2");
  CHECK(c.group.empty());
  CHECK_FALSE(c.ipv6);
  CHECK(c.port == 8371);
  CHECK(c.key_file == (dir.path / "sync.key").string());  // relative to the config file
  CHECK(c.key.size() == 32);
  CHECK(c.accept_key_file == (dir.path / "next.key").string());
  CHECK(c.accept_key == std::vector<uint8_t>(32, 'n'));
  CHECK(c.flush_interval == std::chrono::milliseconds(5));
  CHECK(c.mtu == 9000);
  CHECK(c.bulk_timeout_min == std::chrono::seconds(20));
  CHECK(c.peer_node_id == 2);
  CHECK(c.resend_window == 256);
  CHECK(c.pending_limit == 5000);
  CHECK(c.defer);
  CHECK(c.defer_timeout == std::chrono::milliseconds(25));
  CHECK_FALSE(c.ttl_security);
  CHECK(c.tables == std::vector<std::string>{"bruteforce", "abuse-v6.list"});
}

TEST_CASE("[sync] defaults and an IPv6 multicast group", "[sync][config]") {
  TempDir dir;
  const auto key = dir.write("k", kHexKey);
  const auto c = parse_sync_config(
      parse("interface = \"sync0\"\ngroup = \"ff02::8370\"\nkey_file = \"" + key.string() + "\"\n"),
      (dir.path / "pairwall.toml").string());
  CHECK(c.group == "ff02::8370");
  CHECK(c.ipv6);
  CHECK(c.port == 8370);
  CHECK(c.mtu == 1500);
  CHECK(c.flush_interval == std::chrono::milliseconds(10));
  CHECK(c.bulk_timeout_min == std::chrono::seconds(5));
  CHECK(c.pending_limit == 1u << 20);
  CHECK(c.accept_key.empty());
  CHECK_FALSE(c.defer);
  CHECK(c.defer_timeout == std::chrono::milliseconds(10));
  CHECK(c.ttl_security);
  CHECK(c.tables.empty());
}

// As `ip address` prints a link-local address: with its zone, the sync interface.
TEST_CASE("[sync] defer = false keeps a defer_timeout_ms for a reload that turns defer on",
          "[sync][config]") {
  TempDir dir;
  const auto key = dir.write("k", kHexKey);
  const auto c = parse_sync_config(parse("interface = \"sync0\"\npeer = \"10.0.0.2\"\nkey_file = \"" +
                                         key.string() + "\"\ndefer = false\ndefer_timeout_ms = 40\n"),
                                   (dir.path / "pairwall.toml").string());
  CHECK_FALSE(c.defer);
  CHECK(c.defer_timeout == std::chrono::milliseconds(40));
}

TEST_CASE("[sync] a link-local peer and address may carry the sync interface as their zone",
          "[sync][config]") {
  TempDir dir;
  const auto key = dir.write("k", kHexKey);
  const auto c = parse_sync_config(parse("interface = \"sync0\"\npeer = \"fe80::2%sync0\"\naddress = "
                                         "\"fe80::1%sync0\"\nkey_file = \"" +
                                         key.string() + "\"\n"),
                                   (dir.path / "pairwall.toml").string());
  CHECK(c.peer == "fe80::2");
  CHECK(c.address == "fe80::1");
  CHECK(c.ipv6);
  const auto g = parse_sync_config(
      parse("interface = \"sync0\"\ngroup = \"ff02::8370%sync0\"\nkey_file = \"" + key.string() + "\"\n"),
      (dir.path / "pairwall.toml").string());
  CHECK(g.group == "ff02::8370");
}

// Sent with TTL 255, a group's datagrams would cross any multicast router that forwards the group.
TEST_CASE("[sync] with ttl_security a group must be link-local", "[sync][config]") {
  TempDir dir;
  const auto key = dir.write("k", kHexKey).string();
  struct Case {
    std::string group;
    bool ttl_security;
    bool accepted;
    const char* why;
  };
  const std::vector<Case> cases = {
      {"224.0.0.240", true, true, "the local network control block, 224.0.0.0/24 (RFC 5771 section 4)"},
      {"224.0.0.255", true, true, "its last"},
      {"ff02::8370", true, true, "IPv6 link scope"},
      {"ff12::8370", true, true, "link scope with the transient flag: routers go by the scope"},
      {"224.0.1.1", true, false, "just past the block: the internetwork control block"},
      {"239.255.80.87", true, false, "administratively scoped: routers forward it inside the site"},
      {"232.1.1.1", true, false, "source-specific"},
      {"ff05::8370", true, false, "site scope"},
      {"ff0e::8370", true, false, "global scope"},
      {"239.255.80.87", false, true, "without ttl_security: sent with the system's multicast TTL, 1"},
      {"ff05::8370", false, true, "likewise"},
  };
  for (const auto& c : cases) {
    const std::string text = "interface = \"sync0\"\nkey_file = \"" + key + "\"\ngroup = \"" + c.group +
                             "\"\nttl_security = " + (c.ttl_security ? "true" : "false") + "\n";
    INFO(c.why << "\n" << text);
    const std::string what = refusal(text, dir);
    if (c.accepted) {
      CHECK(what == "accepted");
    } else {
      CHECK(what == (dir.path / "pairwall.toml").string() + ": [sync] group: \"" + c.group +
                        "\" is not a link-local group (224.0.0.0/24, ff02::/16): sent with TTL 255 "
                        "(ttl_security), a multicast router would forward it; use a link-local group or "
                        "ttl_security = false");
    }
  }
}

TEST_CASE("[sync] refusals name the file, the section and the key", "[sync][config]") {
  TempDir dir;
  const auto key = dir.write("k", kHexKey).string();
  const std::string base = "interface = \"sync0\"\nkey_file = \"" + key + "\"\n";
  const std::string file = (dir.path / "pairwall.toml").string();
  struct Case {
    std::string text;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {base + "peer = \"10.0.0.2\"\nport = 0\n", "[sync] port: expected 1..65535, got 0"},
      {base + "peer = \"10.0.0.2\"\ntables = \"bruteforce\"\n",
       "[sync] tables: expected an array of table names, e.g. [\"bruteforce\"]"},
      {base + "peer = \"10.0.0.2\"\ntables = [1]\n", "[sync] tables: expected table names (strings)"},
      {base + "peer = \"10.0.0.2\"\ntables = [\"<bruteforce>\"]\n",
       "[sync] tables: \"<bruteforce>\" is not a table name"},
      {base + "peer = \"10.0.0.2\"\ntables = [\"1st\"]\n", "[sync] tables: \"1st\" is not a table name"},
      {base + "peer = \"10.0.0.2\"\ntables = [\"\"]\n", "[sync] tables: \"\" is not a table name"},
      {base + "peer = \"10.0.0.2\"\ntables = [\"" + std::string(32, 'a') + "\"]\n", "is not a table name"},
      {base + "peer = \"10.0.0.2\"\ntables = [\"t\", \"t\"]\n", "[sync] tables: \"t\" is listed twice"},
      {base + "peer = \"10.0.0.2\"\nprot = 1\n", "[sync] prot: unknown key"},
      {base, "[sync] peer: set exactly one of peer (unicast) and group (multicast)"},
      {base + "peer = \"10.0.0.2\"\ngroup = \"239.1.1.1\"\n", "set exactly one of"},
      {base + "peer = \"10.0.0.300\"\n", "[sync] peer: not an IPv4 or IPv6 address"},
      {base + "peer = \"239.1.1.1\"\n", "[sync] peer: a multicast address: use group"},
      {base + "group = \"10.1.1.1\"\n", "[sync] group: not a multicast address"},
      {base + "peer = \"0.0.0.0\"\n", "[sync] peer: the unspecified address"},
      {base + "peer = \"10.0.0.2\"\naddress = \"fe80::1\"\n", "[sync] address: family differs"},
      // A zone names the sync interface of a link-local address, and nothing else.
      {base + "peer = \"fe80::2%eth0\"\n",
       "[sync] peer: \"fe80::2%eth0\": the zone is eth0, not the sync "
       "interface sync0"},
      {base + "peer = \"2001:db8::2%sync0\"\n",
       "[sync] peer: \"2001:db8::2%sync0\": a zone (%sync0) goes with an IPv6 link-local address only"},
      {base + "peer = \"10.0.0.2%sync0\"\n", "[sync] peer: \"10.0.0.2%sync0\": a zone (%sync0) goes with"},
      // The socket of an IPv6 peer is IPv6 only (IPV6_V6ONLY): it could never send to one of these.
      {base + "peer = \"::ffff:10.0.0.2\"\n",
       "[sync] peer: \"::ffff:10.0.0.2\" is an IPv4-mapped address: write the IPv4 address"},
      {base + "peer = \"2001:db8::2\"\naddress = \"::ffff:10.0.0.1\"\n",
       "[sync] address: \"::ffff:10.0.0.1\" is an IPv4-mapped address: write the IPv4 address"},
      {base + "peer = \"10.0.0.2\"\nport = \"8370\"\n", "[sync] port: expected an integer"},
      {base + "peer = \"10.0.0.2\"\nmtu = 500\n", "[sync] mtu: expected 576..65535, got 500"},
      {base + "peer = \"2001:db8::2\"\nmtu = 1000\n", "[sync] mtu: expected 1280..65535"},
      {base + "peer = \"10.0.0.2\"\nflush_interval_ms = 5000\n",
       "[sync] flush_interval_ms: expected 0..1000"},
      {base + "peer = \"10.0.0.2\"\nbulk_timeout_min_s = 0\n", "[sync] bulk_timeout_min_s: expected 1..3600"},
      {base + "peer = \"10.0.0.2\"\nresend_window = 10\n",
       "[sync] resend_window: expected 64..65536, got 10"},
      {base + "peer = \"10.0.0.2\"\npending_limit = 4\n",
       "[sync] pending_limit: expected 16..67108864, got 4"},
      {base + "peer = \"10.0.0.2\"\ndefer = 1\n", "[sync] defer: expected true or false"},
      {base + "peer = \"10.0.0.2\"\nttl_security = \"yes\"\n", "[sync] ttl_security: expected true or false"},
      {base + "group = \"239.1.1.1\"\n", "[sync] group: \"239.1.1.1\" is not a link-local group"},
      {base + "group = \"ff01::8370\"\n",
       "[sync] group: \"ff01::8370\" has interface-local or reserved scope: it never reaches the peer"},
      {base + "group = \"ff11::8370\"\nttl_security = false\n",
       "[sync] group: \"ff11::8370\" has interface-local"},
      {base + "group = \"ff00::8370\"\nttl_security = false\n",
       "[sync] group: \"ff00::8370\" has interface-local"},
      {base + "group = \"ff0f::8370\"\nttl_security = false\n",
       "[sync] group: \"ff0f::8370\" has interface-local"},
      {base + "peer = \"10.0.0.2\"\ndefer = true\ndefer_timeout_ms = 0\n",
       "[sync] defer_timeout_ms: expected 1..1000, got 0"},
      {base + "peer = \"10.0.0.2\"\ndefer_timeout_ms = 20\n",
       "[sync] defer_timeout_ms: set without defer (defer = true, or defer = false to keep it for later)"},
      {"key_file = \"" + key + "\"\npeer = \"10.0.0.2\"\n", "[sync] interface: missing (required)"},
      {"interface = \"sync0\"\npeer = \"10.0.0.2\"\n", "[sync] key_file: missing (required)"},
      {"interface = \"a-very-long-interface-name\"\npeer = \"10.0.0.2\"\nkey_file = \"" + key + "\"\n",
       "[sync] interface: not an interface name"},
      {"interface = \"sync0\"\npeer = \"10.0.0.2\"\nkey_file = \"missing.key\"\n", "[sync] key_file: "},
      {base + "peer = \"10.0.0.2\"\naccept_key_file = \"missing.key\"\n", "[sync] accept_key_file: "},
      {base + "peer = \"10.0.0.2\"\naccept_key_file = \"" + key + "\"\n",
       "[sync] accept_key_file: holds the key of key_file"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    const std::string what = refusal(c.text, dir);
    CHECK(what.rfind(file + ": ", 0) == 0);
    CHECK(what.find(c.expect) != std::string::npos);
  }
}
