// [failover] parsing: a good section, and one row per mistake with the line it must produce.
#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "failover/failover_config.h"
#include "tests/unit/support/temp_dir.h"

namespace pf = pairwall::failover;
namespace fs = std::filesystem;

namespace {

// A directory with a config path and a key file beside it, removed at the end of the test.
struct Dir {
  pairwall::test::TempDir dir{"failover-config"};
  const fs::path& root = dir.path;
  Dir() {
    std::ofstream(root / "failover.key") << "0123456789abcdef0123456789abcdef\n";
    std::ofstream(root / "short.key") << "tooshort\n";
    std::ofstream(root / "open.key") << "0123456789abcdef0123456789abcdef\n";
    std::ofstream(root / "huge.key") << std::string(5000, 'k');
    std::ofstream(root / "next.key") << "fedcba9876543210fedcba9876543210\n";
    for (const char* name : {"failover.key", "short.key", "huge.key", "next.key"})
      fs::permissions(root / name, fs::perms::owner_read | fs::perms::owner_write);
    fs::permissions(root / "open.key",
                    fs::perms::owner_read | fs::perms::owner_write | fs::perms::others_read);
    fs::create_directory(root / "dir.key");
  }
  std::string file() const { return (root / "pairwall.toml").string(); }
};

pf::FailoverConfig parse(const Dir& d, const std::string& body) {
  const toml::table t = toml::parse(body);
  return pf::parse_failover_config(*t["failover"].as_table(), d.file());
}

const std::string kVips =
    "vips = [ { interface = \"lan0\", address = \"10.1.0.1/24\" },\n"
    "         { interface = \"lan0\", address = \"fd00:1::1/64\" },\n"
    "         { interface = \"lan1\", address = \"10.2.0.1/24\" } ]\n";

}  // namespace

TEST_CASE("failover config: a full section", "[config]") {
  Dir d;
  const auto c = parse(d,
                       "[failover]\ndriver = \"builtin\"\nvhid = 7\nadvbase_ms = 100\nadvskew = 100\n"
                       "preempt = true\nkey_file = \"failover.key\"\naccept_key_file = \"next.key\"\n"
                       "port = 9000\ngroup4 = \"239.1.2.3\"\n"
                       "group6 = \"ff02::1:2\"\nannounce_count = 3\nvip_lease_s = -1\n" +
                           kVips);
  CHECK(c.driver == pf::Driver::Builtin);
  CHECK(c.vhid == 7);
  CHECK(c.advbase_ms == 100);
  CHECK(c.advskew == 100);
  CHECK(c.preempt);
  CHECK(c.key == "0123456789abcdef0123456789abcdef");
  CHECK(c.key_file == (d.root / "failover.key").string());
  CHECK(c.accept_key == "fedcba9876543210fedcba9876543210");
  CHECK(c.accept_key_file == (d.root / "next.key").string());
  CHECK(c.port == 9000);
  CHECK(c.group4 == std::array<uint8_t, 4>{239, 1, 2, 3});
  CHECK(c.group6[15] == 2);
  CHECK(c.announce_count == 3);
  CHECK(c.effective_announce_interval_ms() == 50);
  CHECK(c.effective_vip_lease_s() == 0);
  REQUIRE(c.vips.size() == 3);
  CHECK(c.vips[0].text() == "10.1.0.1/24");
  CHECK(c.vips[1].text() == "fd00:1::1/64");
  CHECK(c.vips[1].family == AF_INET6);
  CHECK(c.interfaces() == std::vector<std::string>{"lan0", "lan1"});
  // One advertisement channel per interface and family with a VIP (lan1 has none of IPv6), each to
  // its family's group on the port.
  const std::vector<pf::AdvertChannel> channels = c.advert_channels();
  REQUIRE(channels.size() == 3);
  CHECK(channels[0].text() == "lan0 (IPv4) to 239.1.2.3 port 9000");
  CHECK(channels[1].text() == "lan0 (IPv6) to ff02::1:2 port 9000");
  CHECK(channels[2].text() == "lan1 (IPv4) to 239.1.2.3 port 9000");
  CHECK_FALSE(std::any_of(channels.begin(), channels.end(), [](const auto& ch) { return ch.unicast; }));
}

TEST_CASE("failover config: a link's peer takes its channel in that family from the group", "[config]") {
  Dir d;
  const auto c = parse(d, "[failover]\nkey_file = \"failover.key\"\n" + kVips +
                              "peers = [ { interface = \"lan0\", address = \"fe80::2\" },\n"
                              "          { interface = \"lan1\", address = \"10.2.0.3\" } ]\n");
  REQUIRE(c.peers.size() == 2);
  CHECK(c.peers[0].text() == "fe80::2");
  CHECK(c.peers[0].family == AF_INET6);
  CHECK(c.peers[1].text() == "10.2.0.3");
  const std::vector<pf::AdvertChannel> channels = c.advert_channels();
  REQUIRE(channels.size() == 3);
  // lan0's IPv4 channel names no peer: it keeps the group.
  CHECK(channels[0].text() == "lan0 (IPv4) to 224.0.0.18 port 8112");
  CHECK_FALSE(channels[0].unicast);
  CHECK(channels[1].text() == "lan0 (IPv6) to fe80::2 port 8112");
  CHECK(channels[1].unicast);
  CHECK(channels[2].text() == "lan1 (IPv4) to 10.2.0.3 port 8112");
  CHECK(channels[2].unicast);
  // The peer's datagrams may leave it from its own address or from a VIP of the family, any link's;
  // a group's from anywhere.
  const auto address = [](int family, const char* text) {
    std::array<uint8_t, 16> a{};
    REQUIRE(inet_pton(family, text, a.data()) == 1);
    return a;
  };
  CHECK(c.from_peer(channels[2], address(AF_INET, "10.2.0.3")));
  CHECK(c.from_peer(channels[2], address(AF_INET, "10.2.0.1")));
  CHECK(c.from_peer(channels[2], address(AF_INET, "10.1.0.1")));
  CHECK_FALSE(c.from_peer(channels[2], address(AF_INET, "10.2.0.4")));
  CHECK_FALSE(c.from_peer(channels[2], address(AF_INET, "10.1.0.3")));
  CHECK(c.from_peer(channels[1], address(AF_INET6, "fe80::2")));
  CHECK(c.from_peer(channels[1], address(AF_INET6, "fd00:1::1")));
  CHECK_FALSE(c.from_peer(channels[1], address(AF_INET6, "fe80::3")));
  CHECK(c.from_peer(channels[0], address(AF_INET, "192.0.2.7")));
  // A channel that changed its destination is another channel.
  pf::FailoverConfig moved = c;
  moved.peers[1].address[3] = 4;
  CHECK(moved.advert_channels()[0] == channels[0]);
  CHECK_FALSE(moved.advert_channels()[2] == channels[2]);
  moved.port = 8113;
  CHECK_FALSE(moved.advert_channels()[0] == channels[0]);
}

TEST_CASE("failover config: tracked interfaces are watched after the VIP interfaces, each once", "[config]") {
  Dir d;
  const auto c = parse(d,
                       "[failover]\nkey_file = \"failover.key\"\ntrack_interfaces = [\"wan0\", \"lan1\", "
                       "\"wan1\"]\n" +
                           kVips);
  CHECK(c.track_interfaces == std::vector<std::string>{"wan0", "lan1", "wan1"});
  CHECK(c.watched_interfaces() == std::vector<std::string>{"lan0", "lan1", "wan0", "wan1"});
  CHECK(c.advert_channels().size() == 3);  // no advertisements on a tracked link
}

TEST_CASE("failover config: the notify script, relative to the config's directory", "[config]") {
  Dir d;
  std::ofstream(d.root / "notify.sh") << "#!/bin/sh\n";
  fs::permissions(d.root / "notify.sh", fs::perms::owner_all);
  CHECK(parse(d, "[failover]\nkey_file = \"failover.key\"\n" + kVips).notify.empty());
  CHECK(parse(d, "[failover]\nkey_file = \"failover.key\"\nnotify = \"notify.sh\"\n" + kVips).notify ==
        (d.root / "notify.sh").string());
}

TEST_CASE("failover config: defaults", "[config]") {
  Dir d;
  const auto c = parse(d, "[failover]\nkey_file = \"failover.key\"\n" + kVips);
  CHECK(c.vhid == 1);
  CHECK(c.advbase_ms == 1000);
  CHECK(c.advskew == 0);
  CHECK_FALSE(c.preempt);
  CHECK(c.port == 8112);
  CHECK(c.group4 == std::array<uint8_t, 4>{224, 0, 0, 18});
  CHECK(c.announce_count == 5);
  CHECK(c.effective_announce_interval_ms() == 500);
  CHECK(c.effective_vip_lease_s() == 4);
  const auto fast = parse(d, "[failover]\nadvbase_ms = 100\nkey_file = \"failover.key\"\n" + kVips);
  CHECK(fast.effective_vip_lease_s() == 3);
  // The repeats after a takeover never come slower than the once-a-second tail after them.
  const auto slow = parse(d, "[failover]\nadvbase_ms = 10000\nkey_file = \"failover.key\"\n" + kVips);
  CHECK(slow.effective_announce_interval_ms() == 1000);
  const auto slowest = parse(d, "[failover]\nadvbase_ms = 255000\nkey_file = \"failover.key\"\n" + kVips);
  CHECK(slowest.effective_announce_interval_ms() == 1000);
  const auto asked =
      parse(d, "[failover]\nadvbase_ms = 10000\nannounce_interval_ms = 3000\nkey_file = \"failover.key\"\n" +
                   kVips);
  CHECK(asked.effective_announce_interval_ms() == 3000);
}

TEST_CASE(
    "failover config: a host may end in all zeros or ones where its prefix has no network, broadcast or "
    "anycast address there",
    "[config]") {
  Dir d;
  const auto c = parse(d,
                       "[failover]\nkey_file = \"failover.key\"\n"
                       "vips = [ { interface = \"lan0\", address = \"10.0.0.0/31\" },\n"
                       "         { interface = \"lan0\", address = \"10.0.1.255/32\" },\n"
                       "         { interface = \"lan0\", address = \"10.0.2.255/23\" },\n"
                       "         { interface = \"lan0\", address = \"fd00:1::/127\" },\n"
                       "         { interface = \"lan0\", address = \"fd00:2::ff/120\" } ]\n");
  CHECK(c.vips.size() == 5);
}

TEST_CASE("failover config: addresses beside the refused ranges are accepted", "[config]") {
  Dir d;
  const auto c = parse(d,
                       "[failover]\nkey_file = \"failover.key\"\n"
                       "vips = [ { interface = \"lan0\", address = \"169.253.255.1/24\" },\n"
                       "         { interface = \"lan0\", address = \"169.255.0.1/24\" },\n"
                       "         { interface = \"lan0\", address = \"223.255.255.1/24\" },\n"
                       "         { interface = \"lan0\", address = \"::fffe:a00:1/120\" },\n"
                       "         { interface = \"lan0\", address = \"::1:ffff:a00:1/120\" },\n"
                       "         { interface = \"lan0\", address = \"64:ff9b::a00:1/120\" } ]\n");
  CHECK(c.vips.size() == 6);
}

TEST_CASE("failover config: keepalived mode needs neither key nor VIPs", "[config]") {
  Dir d;
  const auto c = parse(d, "[failover]\ndriver = \"keepalived\"\n");
  CHECK(c.driver == pf::Driver::Keepalived);
  CHECK(c.vips.empty());
  CHECK(c.key.empty());
}

TEST_CASE("failover config: every mistake names file, section and key", "[config]") {
  struct Row {
    std::string body;
    std::string message;  // the whole line after "FILE: "
  };
  const std::string key = "key_file = \"failover.key\"\n";
  const std::vector<Row> rows{
      {"driver = \"vrrp\"\n" + key + kVips,
       "[failover] driver: expected \"builtin\" or \"keepalived\", got \"vrrp\""},
      {"driver = 1\n" + key + kVips, "[failover] driver: expected a string, got 1"},
      {"vhid = 0\n" + key + kVips, "[failover] vhid: expected 1..255, got 0"},
      {"vhid = 256\n" + key + kVips, "[failover] vhid: expected 1..255, got 256"},
      {"advbase_ms = 5\n" + key + kVips, "[failover] advbase_ms: expected 10..255000, got 5"},
      {"advbase_ms = \"1s\"\n" + key + kVips, "[failover] advbase_ms: expected 10..255000, got \"1s\""},
      {"advskew = 255\n" + key + kVips, "[failover] advskew: expected 0..254, got 255"},
      {"advskew = -1\n" + key + kVips, "[failover] advskew: expected 0..254, got -1"},
      {"preempt = \"yes\"\n" + key + kVips, "[failover] preempt: expected true or false, got \"yes\""},
      {"port = 0\n" + key + kVips, "[failover] port: expected 1..65535, got 0"},
      {"group4 = \"10.0.0.1\"\n" + key + kVips,
       "[failover] group4: expected an IPv4 multicast address, got \"10.0.0.1\""},
      {"group6 = \"fe80::1\"\n" + key + kVips,
       "[failover] group6: expected an IPv6 multicast address, got \"fe80::1\""},
      {"group6 = \"ff01::12\"\n" + key + kVips,
       "[failover] group6: \"ff01::12\" never leaves this node (interface-local or reserved scope); expected "
       "link-local scope or wider, e.g. \"ff02::12\""},
      {"group6 = \"ff10::12\"\n" + key + kVips,
       "[failover] group6: \"ff10::12\" never leaves this node (interface-local or reserved scope); expected "
       "link-local scope or wider, e.g. \"ff02::12\""},
      {"vip_lease_s = -2\n" + key + kVips, "[failover] vip_lease_s: expected -1..86400, got -2"},
      {kVips, "[failover] key_file: missing: advertisements are authenticated with a shared key file"},
      {"driver = \"keepalived\"\nadvskew = 100\n" + kVips,
       "[failover] advskew: the builtin election's; with driver = \"keepalived\", keepalived.conf decides it "
       "(priority, advert_int, virtual_ipaddress): remove it"},
      {"driver = \"keepalived\"\n" + key + kVips,
       "[failover] key_file: the builtin election's; with driver = \"keepalived\", keepalived.conf decides "
       "it "
       "(priority, advert_int, virtual_ipaddress): remove it"},
      {"key_file = \"short.key\"\n" + kVips,
       "[failover] key_file: \"DIR/short.key\" holds 8 bytes, need at least 16 (e.g. head -c 32 /dev/urandom "
       "| base64)"},
      {"key_file = \"absent.key\"\n" + kVips,
       "[failover] key_file: cannot read \"DIR/absent.key\": No such file or directory"},
      {"key_file = \"open.key\"\n" + kVips,
       "[failover] key_file: \"DIR/open.key\" is accessible by other users (mode 0604): chmod 600 it"},
      {"key_file = \"huge.key\"\n" + kVips,
       "[failover] key_file: \"DIR/huge.key\" is larger than 4096 bytes: not a key file"},
      {"key_file = \"dir.key\"\n" + kVips, "[failover] key_file: \"DIR/dir.key\" is not a regular file"},
      {key + "accept_key_file = \"short.key\"\n" + kVips,
       "[failover] accept_key_file: \"DIR/short.key\" holds 8 bytes, need at least 16 (e.g. head -c 32 "
       "/dev/urandom | base64)"},
      {key + "accept_key_file = \"failover.key\"\n" + kVips,
       "[failover] accept_key_file: holds the key of key_file: name the other key"},
      {"driver = \"keepalived\"\naccept_key_file = \"next.key\"\n",
       "[failover] accept_key_file: the builtin election's; with driver = \"keepalived\", keepalived.conf "
       "decides it (priority, advert_int, virtual_ipaddress): remove it"},
      {key, "[failover] vips: missing: a failover group needs at least one virtual address"},
      {key + "vips = \"10.0.0.1/24\"\n",
       "[failover] vips: expected an array of { interface = \"...\", address = \"ADDRESS/PREFIX\" }, got "
       "\"10.0.0.1/24\""},
      {key + "vips = [ \"10.0.0.1/24\" ]\n",
       "[failover] vips[0]: expected { interface = \"...\", address = \"ADDRESS/PREFIX\" }, got "
       "\"10.0.0.1/24\""},
      {key + "vips = [ { interface = \"lan0\", address = \"10.0.0.1\" } ]\n",
       "[failover] vips[0].address: expected ADDRESS/PREFIX (e.g. \"10.1.0.1/24\"), got \"10.0.0.1\""},
      {key + "vips = [ { interface = \"lan0\", address = \"10.0.0.300/24\" } ]\n",
       "[failover] vips[0].address: \"10.0.0.300\" is not an IPv4 or IPv6 address"},
      {key + "vips = [ { interface = \"lan0\", address = \"10.0.0.1/33\" } ]\n",
       "[failover] vips[0].address: prefix length of \"10.0.0.1/33\" must be 1..32"},
      {key + "vips = [ { interface = \"lan0\", address = \"fe80::1/64\" } ]\n",
       "[failover] vips[0].address: \"fe80::1\" cannot be a virtual address (unspecified, loopback, "
       "multicast or link-local)"},
      {key + "vips = [ { interface = \"lan0\", address = \"169.254.10.1/16\" } ]\n",
       "[failover] vips[0].address: \"169.254.10.1\" cannot be a virtual address (unspecified, loopback, "
       "multicast or link-local)"},
      {key + "vips = [ { interface = \"lan0\", address = \"::ffff:10.0.0.1/120\" } ]\n",
       "[failover] vips[0].address: \"::ffff:10.0.0.1\" is an IPv4-mapped address (::ffff:0:0/96), which no "
       "host is reached at over IPv6: write it as IPv4, 10.0.0.1 with its IPv4 prefix"},
      {key + "vips = [ { interface = \"lan0\", address = \"::ffff:a00:1/64\" } ]\n",
       "[failover] vips[0].address: \"::ffff:a00:1\" is an IPv4-mapped address (::ffff:0:0/96), which no "
       "host is reached at over IPv6: write it as IPv4, 10.0.0.1 with its IPv4 prefix"},
      {key + "vips = [ { interface = \"lan0\", address = \"224.0.0.1/24\" } ]\n",
       "[failover] vips[0].address: \"224.0.0.1\" cannot be a virtual address (unspecified, loopback, "
       "multicast or link-local)"},
      {key + "vips = [ { interface = \"lan0\", address = \"10.0.0.0/24\" } ]\n",
       "[failover] vips[0].address: \"10.0.0.0/24\" is the network address of its prefix, not a host's"},
      {key + "vips = [ { interface = \"lan0\", address = \"10.0.1.255/23\" } ]\n",
       "[failover] vips[0].address: \"10.0.1.255/23\" is the broadcast address of its prefix, not a host's"},
      {key + "vips = [ { interface = \"lan0\", address = \"fd00:1::/64\" } ]\n",
       "[failover] vips[0].address: \"fd00:1::/64\" is the subnet-router anycast address of its prefix, "
       "which "
       "every router on the link answers for"},
      {key + "vips = [ { interface = \"a/b\", address = \"10.0.0.1/24\" } ]\n",
       "[failover] vips[0].interface: expected an interface name (1..15 characters, no '/', ':' or spaces)"},
      {key + "vips = [ { interface = \"lan\\r0\", address = \"10.0.0.1/24\" } ]\n",
       "[failover] vips[0].interface: expected an interface name (1..15 characters, no '/', ':' or spaces)"},
      {key + "vips = [ { interface = \"lan0\", address = \"10.0.0.1\\u0000junk/24\" } ]\n",
       "[failover] vips[0].address: expected no NUL character, got \"10.0.0.1\\u0000junk/24\""},
      {key + "vips = [ { interface = \"lan0\" } ]\n",
       "[failover] vips[0].address: expected a string \"ADDRESS/PREFIX\""},
      {key + "vips = [ { interface = \"lan0\", address = \"10.0.0.1/24\", vmac = true } ]\n",
       "[failover] vips[0].vmac: unknown key"},
      {key + "vips = [ { interface = \"lan0\", address = \"10.0.0.1/24\" }, { interface = \"lan1\", address "
             "= \"10.0.0.1/16\" } ]\n",
       "[failover] vips[1].address: \"10.0.0.1/16\" is listed twice"},
      {key + kVips + "advsekw = 10\n", "[failover] advsekw: unknown key"},
      {key + kVips + "track_interfaces = [\"wan/0\"]\n",
       "[failover] track_interfaces: \"wan/0\" is not an interface name (1..15 characters, no '/', ':' or "
       "spaces)"},
      {key + kVips + "track_interfaces = [\"wan0\", \"wan0\"]\n",
       "[failover] track_interfaces: \"wan0\" is listed twice"},
      {"driver = \"keepalived\"\ntrack_interfaces = [\"wan0\"]\n" + kVips,
       "[failover] track_interfaces: keepalived tracks interfaces itself (track_interface in "
       "keepalived.conf): "
       "remove it"},
      {key + kVips + "notify = \"absent.sh\"\n", "[failover] notify: DIR/absent.sh: not an executable file"},
      {key + kVips + "notify = \"failover.key\"\n",
       "[failover] notify: DIR/failover.key: not an executable file"},
      {key + kVips + "notify = \"dir.key\"\n", "[failover] notify: DIR/dir.key: not an executable file"},
      {key + kVips + "peers = \"10.1.0.3\"\n",
       "[failover] peers: expected an array of { interface = \"...\", address = \"ADDRESS\" }, got "
       "\"10.1.0.3\""},
      {key + kVips + "peers = [ \"10.1.0.3\" ]\n",
       "[failover] peers[0]: expected { interface = \"...\", address = \"ADDRESS\" }, got \"10.1.0.3\""},
      {key + kVips + "peers = [ { interface = \"lan0\", address = \"10.1.0.3\", ttl = 1 } ]\n",
       "[failover] peers[0].ttl: unknown key"},
      {key + kVips + "peers = [ { interface = \"lan/0\", address = \"10.1.0.3\" } ]\n",
       "[failover] peers[0].interface: expected an interface name (1..15 characters, no '/', ':' or spaces)"},
      {key + kVips + "peers = [ { interface = \"lan0\" } ]\n",
       "[failover] peers[0].address: expected a string \"ADDRESS\""},
      {key + kVips + "peers = [ { interface = \"lan0\", address = \"10.1.0.3/24\" } ]\n",
       "[failover] peers[0].address: \"10.1.0.3/24\" is not an IPv4 or IPv6 address"},
      {key + kVips + "peers = [ { interface = \"lan0\", address = \"224.0.0.18\" } ]\n",
       "[failover] peers[0].address: \"224.0.0.18\" is not the peer's own address (unspecified, loopback, "
       "multicast, broadcast or IPv4-mapped); name the address the other node has on lan0"},
      {key + kVips + "peers = [ { interface = \"lan0\", address = \"255.255.255.255\" } ]\n",
       "[failover] peers[0].address: \"255.255.255.255\" is not the peer's own address (unspecified, "
       "loopback, multicast, broadcast or IPv4-mapped); name the address the other node has on lan0"},
      {key + kVips + "peers = [ { interface = \"lan0\", address = \"::1\" } ]\n",
       "[failover] peers[0].address: \"::1\" is not the peer's own address (unspecified, loopback, "
       "multicast, broadcast or IPv4-mapped); name the address the other node has on lan0"},
      {key + kVips + "peers = [ { interface = \"lan0\", address = \"::ffff:10.1.0.3\" } ]\n",
       "[failover] peers[0].address: \"::ffff:10.1.0.3\" is not the peer's own address (unspecified, "
       "loopback, multicast, broadcast or IPv4-mapped); name the address the other node has on lan0"},
      {key + kVips + "peers = [ { interface = \"lan1\", address = \"fd00:2::3\" } ]\n",
       "[failover] peers[0].interface: lan1 holds no IPv6 virtual address: advertisements go out only where "
       "the group has one"},
      {key + kVips + "peers = [ { interface = \"wan0\", address = \"10.9.0.3\" } ]\n",
       "[failover] peers[0].interface: wan0 holds no IPv4 virtual address: advertisements go out only where "
       "the group has one"},
      {key + kVips +
           "peers = [ { interface = \"lan0\", address = \"10.1.0.3\" }, { interface = \"lan0\", address = "
           "\"10.1.0.4\" } ]\n",
       "[failover] peers[1]: a second IPv4 peer on lan0: one node is the other"},
      {key + kVips + "peers = [ { interface = \"lan1\", address = \"10.2.0.1\" } ]\n",
       "[failover] peers[0].address: \"10.2.0.1\" is a virtual address of the group, not the peer's own"},
      {"driver = \"keepalived\"\npeers = [ { interface = \"lan0\", address = \"10.1.0.3\" } ]\n",
       "[failover] peers: keepalived sends to its peers itself (unicast_peer in keepalived.conf): remove it"},
      {"driver = \"keepalived\"\nnotify = \"notify.sh\"\n" + kVips,
       "[failover] notify: keepalived runs its own notify scripts (notify_master, notify_backup, "
       "notify_fault "
       "in keepalived.conf): remove it"},
  };
  Dir d;
  for (const auto& row : rows) {
    std::string expected = d.file() + ": " + row.message;
    if (auto p = expected.find("DIR"); p != std::string::npos) expected.replace(p, 3, d.root.string());
    INFO(row.body);
    try {
      parse(d, "[failover]\n" + row.body);
      FAIL("accepted");
    } catch (const pairwall::ConfigError& e) {
      CHECK(std::string(e.what()) == expected);
    }
  }
}

TEST_CASE("advert_channels: each VIP interface in each family it has VIPs of, IPv4 first", "[config]") {
  Dir d;
  const auto vips = [&](const std::string& list) {
    return parse(d, "[failover]\nkey_file = \"failover.key\"\nvips = [ " + list + " ]\n");
  };
  const auto text = [](const pf::FailoverConfig& c) {
    std::string out;
    for (const pf::AdvertChannel& channel : c.advert_channels()) {
      out += (out.empty() ? "" : ", ") + channel.interface + (channel.family == AF_INET ? " IPv4" : " IPv6");
    }
    return out;
  };
  struct Row {
    std::string list;
    std::string expected;
  };
  const std::vector<Row> rows{
      {R"({ interface = "lan0", address = "10.1.0.1/24" }, { interface = "lan0", address = "10.1.0.5/24" })",
       "lan0 IPv4"},
      // An interface's IPv6 VIP listed first: its IPv4 channel still comes first.
      {R"({ interface = "lan0", address = "fd00:1::1/64" }, { interface = "lan1", address = "10.2.0.1/24" },
          { interface = "lan0", address = "10.1.0.1/24" })",
       "lan0 IPv4, lan0 IPv6, lan1 IPv4"},
      {R"({ interface = "lan1", address = "fd00:2::1/64" }, { interface = "lan0", address = "fd00:1::1/64" })",
       "lan1 IPv6, lan0 IPv6"},
  };
  for (const Row& row : rows) {
    INFO(row.list);
    CHECK(text(vips(row.list)) == row.expected);
  }
}
