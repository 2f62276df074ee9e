// iptables command generation (pure) and the install/remove procedures against a fake iptables
// that keeps tables, chains and rules the way the real one does.
#include "daemon/io/hooks.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <csignal>
#include <map>
#include <string>
#include <vector>

namespace pairwall::io {
namespace {

using engine::Family;

std::vector<std::string> lines(const std::vector<Command>& commands) {
  std::vector<std::string> out;
  for (const auto& c : commands) out.push_back(to_string(c));
  return out;
}

TEST_CASE("install commands: the minimal forward-only chain", "[hooks]") {
  HooksConfig c;
  c.queue_first = 4;
  c.queue_last = 4;
  c.defrag = false;
  CHECK(lines(install_commands(c, Family::V4)) ==
        std::vector<std::string>{
            "iptables -w 10 -t filter -N PAIRWALL",
            "iptables -w 10 -t filter -A PAIRWALL -j NFQUEUE --queue-num 4",
            "iptables -w 10 -t filter -I FORWARD 1 -j PAIRWALL",
        });
}

TEST_CASE("install commands: exclusions come before the queue rule, jumps last", "[hooks]") {
  HooksConfig c;
  c.queue_first = 0;
  c.queue_last = 3;
  c.bypass = true;
  c.input = true;
  c.output = true;
  c.excluded_interfaces = {"sync0", "veth+"};
  c.excluded_destinations = {{Family::V4, 17, "224.0.0.18", 8112},
                             {Family::V6, 17, "ff02::12", 8112, 255},
                             {Family::V6, 112, "ff02::12", 0},
                             {Family::V6, 112, "", 0, 255},
                             {Family::V6, 17, "", 8112, 255}};
  c.bypass_mark = 0x10000;
  c.ip6tables = "/usr/sbin/ip6tables-legacy";
  CHECK(lines(install_commands(c, Family::V6)) ==
        std::vector<std::string>{
            "/usr/sbin/ip6tables-legacy -w 10 -t filter -N PAIRWALL",
            "/usr/sbin/ip6tables-legacy -w 10 -t filter -A PAIRWALL -m mark --mark 65536/65536 -j RETURN",
            "/usr/sbin/ip6tables-legacy -w 10 -t filter -A PAIRWALL -i sync0 -j RETURN",
            "/usr/sbin/ip6tables-legacy -w 10 -t filter -A PAIRWALL -o sync0 -j RETURN",
            "/usr/sbin/ip6tables-legacy -w 10 -t filter -A PAIRWALL -i veth+ -j RETURN",
            "/usr/sbin/ip6tables-legacy -w 10 -t filter -A PAIRWALL -o veth+ -j RETURN",
            "/usr/sbin/ip6tables-legacy -w 10 -t filter -A PAIRWALL -p 17 -d ff02::12 --dport 8112 -m hl "
            "--hl-eq 255 -j RETURN",
            "/usr/sbin/ip6tables-legacy -w 10 -t filter -A PAIRWALL -p 112 -d ff02::12 -j RETURN",
            "/usr/sbin/ip6tables-legacy -w 10 -t filter -A PAIRWALL -p 112 -m hl --hl-eq 255 -j RETURN",
            "/usr/sbin/ip6tables-legacy -w 10 -t filter -A PAIRWALL -p 17 --dport 8112 -m hl --hl-eq 255 -j "
            "RETURN",
            "/usr/sbin/ip6tables-legacy -w 10 -t filter -A PAIRWALL -j NFQUEUE --queue-balance 0:3 "
            "--queue-bypass",
            "/usr/sbin/ip6tables-legacy -w 10 -t filter -N PAIRWALL_DEFRAG",
            "/usr/sbin/ip6tables-legacy -w 10 -t filter -A PAIRWALL_DEFRAG -m socket -j RETURN",
            "/usr/sbin/ip6tables-legacy -w 10 -t filter -I FORWARD 1 -j PAIRWALL",
            "/usr/sbin/ip6tables-legacy -w 10 -t filter -I INPUT 1 -j PAIRWALL",
            "/usr/sbin/ip6tables-legacy -w 10 -t filter -I OUTPUT 1 -j PAIRWALL",
        });
}

TEST_CASE("install commands: the pre-routing chain in mangle, its jump after the filter jumps", "[hooks]") {
  struct Row {
    const char* name;
    HooksConfig config;
    Family family;
    std::vector<std::string> mangle;  // the commands after the filter ones
  };
  auto with = [](auto edit) {
    HooksConfig c;
    c.defrag = false;
    c.bypass_mark = 0x40000000;
    c.prerouting = true;
    edit(c);
    return c;
  };
  const Row rows[] = {
      {"one queue, IPv4",
       with([](HooksConfig&) {}),
       Family::V4,
       {
           "iptables -w 10 -t mangle -N PAIRWALL",
           "iptables -w 10 -t mangle -A PAIRWALL -m mark --mark 1073741824/1073741824 -j RETURN",
           "iptables -w 10 -t mangle -A PAIRWALL -m addrtype --dst-type LOCAL -j NFQUEUE --queue-num 0",
           "iptables -w 10 -t mangle -I PREROUTING 1 -j PAIRWALL",
       }},
      {"exclusions without -o, same queues and bypass, IPv6",
       with([](HooksConfig& c) {
         c.queue_first = 2;
         c.queue_last = 5;
         c.bypass = true;
         c.excluded_interfaces = {"sync0", "lo"};
         c.chain = "FW";
       }),
       Family::V6,
       {
           "ip6tables -w 10 -t mangle -N FW",
           "ip6tables -w 10 -t mangle -A FW -m mark --mark 1073741824/1073741824 -j RETURN",
           "ip6tables -w 10 -t mangle -A FW -i sync0 -j RETURN",
           "ip6tables -w 10 -t mangle -A FW -i lo -j RETURN",
           "ip6tables -w 10 -t mangle -A FW -m addrtype --dst-type LOCAL -j NFQUEUE --queue-balance 2:5 "
           "--queue-bypass",
           "ip6tables -w 10 -t mangle -I PREROUTING 1 -j FW",
       }},
      {"matches beyond this node after the local rule, each in its family's chain",
       with([](HooksConfig& c) {
         c.prerouting_matches = {
             {Family::V4, "lan0", 6, "", 80, 80},
             {Family::V6, "lan0", 6, "", 80, 80},
             {Family::V4, "", 17, "192.0.2.0/24", 5000, 5100},
             {Family::V4, "dmz+", 0, "198.51.100.7/32", 0, 0},
         };
       }),
       Family::V4,
       {
           "iptables -w 10 -t mangle -N PAIRWALL",
           "iptables -w 10 -t mangle -A PAIRWALL -m mark --mark 1073741824/1073741824 -j RETURN",
           "iptables -w 10 -t mangle -A PAIRWALL -m addrtype --dst-type LOCAL -j NFQUEUE --queue-num 0",
           "iptables -w 10 -t mangle -A PAIRWALL -i lan0 -p 6 --dport 80 -j NFQUEUE --queue-num 0",
           "iptables -w 10 -t mangle -A PAIRWALL -p 17 -d 192.0.2.0/24 --dport 5000:5100 -j NFQUEUE "
           "--queue-num 0",
           "iptables -w 10 -t mangle -A PAIRWALL -i dmz+ -d 198.51.100.7/32 -j NFQUEUE --queue-num 0",
           "iptables -w 10 -t mangle -I PREROUTING 1 -j PAIRWALL",
       }},
  };
  for (const auto& row : rows) {
    SECTION(row.name) {
      HooksConfig filter_only = row.config;
      filter_only.prerouting = false;
      // The filter commands are those without prerouting; the mangle ones follow them.
      std::vector<std::string> expected = lines(install_commands(filter_only, row.family));
      expected.insert(expected.end(), row.mangle.begin(), row.mangle.end());
      CHECK(lines(install_commands(row.config, row.family)) == expected);
    }
  }
}

TEST_CASE("install commands: nothing in mangle without prerouting", "[hooks]") {
  HooksConfig c;
  c.queue_last = 3;
  c.bypass = true;
  c.input = true;
  c.output = true;
  c.excluded_interfaces = {"sync0"};
  c.excluded_destinations = {{Family::V4, 112, "224.0.0.18", 0}};
  c.bypass_mark = 0x40000000;
  for (const auto family : {Family::V4, Family::V6}) {
    for (const auto& line : lines(install_commands(c, family))) {
      CHECK_THAT(
          line, !Catch::Contains("mangle") && !Catch::Contains("PREROUTING") && !Catch::Contains("addrtype"));
    }
  }
}

TEST_CASE("configurations that cannot be installed are refused with the reason", "[hooks]") {
  struct Row {
    const char* name;
    HooksConfig config;
    const char* message;
  };
  auto with = [](auto edit) {
    HooksConfig c;
    edit(c);
    return c;
  };
  const Row rows[] = {
      {"empty chain", with([](HooksConfig& c) { c.chain = ""; }), "chain name"},
      {"long chain", with([](HooksConfig& c) { c.chain = std::string(30, 'A'); }), "chain name"},
      {"chain with a space", with([](HooksConfig& c) { c.chain = "PAIR WALL"; }), "may only contain"},
      // Removal flushes the chain of this name: a built-in chain's rules would go.
      {"built-in chain", with([](HooksConfig& c) { c.chain = "INPUT"; }), "built-in"},
      {"built-in chain of mangle", with([](HooksConfig& c) { c.chain = "POSTROUTING"; }), "built-in"},
      {"chain read as an option", with([](HooksConfig& c) { c.chain = "-F"; }), "'-'"},
      {"reversed range", with([](HooksConfig& c) { c.queue_first = 5, c.queue_last = 2; }), "ends before"},
      {"interface with a space", with([](HooksConfig& c) { c.excluded_interfaces = {"eth 0"}; }), "eth 0"},
      {"interface too long", with([](HooksConfig& c) { c.excluded_interfaces = {"abcdefghijklmnop"}; }),
       "abcdefghijklmnop"},
      {"interface the kernel refuses", with([](HooksConfig& c) { c.excluded_interfaces = {"lan\xa0"}; }),
       "lan"},
      {"destination of the other family", with([](HooksConfig& c) {
         c.excluded_destinations = {{Family::V6, 17, "224.0.0.18", 8112}};
       }),
       "224.0.0.18"},
      {"destination without a port", with([](HooksConfig& c) {
         c.excluded_destinations = {{Family::V4, 17, "224.0.0.18", 0}};
       }),
       "port 0"},
      // Any destination: only with a TTL that nothing forwarded has.
      {"any destination without a TTL", with([](HooksConfig& c) {
         c.excluded_destinations = {{Family::V4, 112, "", 0}};
       }),
       "or any address with a TTL"},
      {"any UDP destination without a TTL", with([](HooksConfig& c) {
         c.excluded_destinations = {{Family::V4, 17, "", 8112}};
       }),
       "or any address with a TTL"},
      {"any UDP destination without a port", with([](HooksConfig& c) {
         c.excluded_destinations = {{Family::V4, 17, "", 0, 255}};
       }),
       "with a port for TCP and UDP alone"},
      {"port of a protocol without ports", with([](HooksConfig& c) {
         c.excluded_destinations = {{Family::V4, 112, "224.0.0.18", 5}};
       }),
       "port 5"},
      {"no family", with([](HooksConfig& c) { c.ipv4 = c.ipv6 = false; }), "neither"},
      {"prerouting without a bypass mark", with([](HooksConfig& c) { c.prerouting = true; }), "bypass_mark"},
      {"pre-routing match on a bad interface", with([](HooksConfig& c) {
         c.prerouting_matches = {{Family::V4, "a b", 6, "", 0, 0}};
       }),
       "pre-routing match on 'a b': not a valid interface name"},
      {"pre-routing match to a prefix of the other family", with([](HooksConfig& c) {
         c.prerouting_matches = {{Family::V4, "", 6, "2001:db8::/32", 0, 0}};
       }),
       "pre-routing match to '2001:db8::/32': not a numeric address/length of its family"},
      {"pre-routing match to an address without a length", with([](HooksConfig& c) {
         c.prerouting_matches = {{Family::V6, "", 6, "2001:db8::1", 0, 0}};
       }),
       "not a numeric address/length"},
      {"pre-routing match with a length past its family's", with([](HooksConfig& c) {
         c.prerouting_matches = {{Family::V4, "", 6, "192.0.2.1/33", 0, 0}};
       }),
       "not a numeric address/length"},
      {"pre-routing match with ports of a protocol without them", with([](HooksConfig& c) {
         c.prerouting_matches = {{Family::V4, "", 1, "", 80, 80}};
       }),
       "destination ports need TCP or UDP"},
      {"pre-routing match with ports out of order", with([](HooksConfig& c) {
         c.prerouting_matches = {{Family::V4, "", 6, "", 90, 80}};
       }),
       "a range in order"},
  };
  for (const auto& row : rows) {
    SECTION(row.name) {
      CHECK_THROWS_WITH(validate(row.config), Catch::Contains(row.message));
    }
  }
  CHECK_NOTHROW(validate(HooksConfig{}));
  HooksConfig prerouting;
  prerouting.prerouting = true;
  prerouting.bypass_mark = 1;
  CHECK_NOTHROW(validate(prerouting));
  prerouting.prerouting_matches = {{Family::V4, "lan0", 6, "0.0.0.0/0", 1, 65535},
                                   {Family::V6, "", 17, "2001:db8::/128", 53, 53}};
  CHECK_NOTHROW(validate(prerouting));
}

// What the configuration accepts as an interface name (the kernel's dev_valid_name()) the hooks
// must accept too: a name refused only here passes `pairwalld --check`, then stops the daemon's
// start, and `--remove-hooks` with it, on an error that names no key of the file.
TEST_CASE("every interface name the kernel accepts can be excluded", "[hooks]") {
  const std::vector<std::string> names = {
      "sync0",
      "veth+",        // iptables' wildcard
      "a+b",          // a '+' inside a name is a character of it, to the kernel and iptables
      "caf\xc3\xa9",  // UTF-8
      "x!y",
      "lan\x1f\x7f\x85",  // control bytes the kernel does not take for spaces
  };
  for (const auto& name : names) {
    INFO(name);
    HooksConfig c;
    c.excluded_interfaces = {name};
    CHECK_NOTHROW(validate(c));
  }
  for (const std::string name :
       {"", ".", "..", "a b", "a\tb", "a\vb", "lan\xa0", "a/b", "a:b", "sixteen-chars-16"}) {
    INFO(name);
    HooksConfig c;
    c.excluded_interfaces = {name};
    CHECK_THROWS_AS(validate(c), HooksError);
  }
}

// Models one iptables binary: the filter and mangle tables, chains with rule lists;
// -N/-X/-F/-A/-I/-D/-S exit codes as the real one (1 for a missing chain or rule, 1 for -N of an
// existing chain, 1 for -X of a referenced chain; 3 for a table the kernel does not have, as
// iptables-legacy).
class FakeIptables {
 public:
  using Chains = std::map<std::string, std::vector<std::string>>;
  Chains chains{{"FORWARD", {}}, {"INPUT", {}}, {"OUTPUT", {}}};  // the filter table
  Chains mangle{{"PREROUTING", {}}, {"INPUT", {}}, {"FORWARD", {}}, {"OUTPUT", {}}, {"POSTROUTING", {}}};
  bool mangle_missing = false;
  std::vector<std::string> log;
  std::string fail_on;  // a command containing this fails with exit code 2

  // Counts the commands after which FORWARD (of the filter table) led no packet to a queue.
  bool watch_gaps = false;
  int unhooked = 0;

  CommandResult operator()(const Command& argv) {
    const CommandResult r = run(argv);
    if (watch_gaps && !queues_forward()) ++unhooked;
    return r;
  }

  bool queues_forward() const {
    for (const auto& jump : chains.at("FORWARD")) {
      if (jump.rfind("-j ", 0) != 0) continue;
      const auto target = chains.find(jump.substr(3));
      if (target == chains.end()) continue;
      for (const auto& rule : target->second) {
        if (rule.find("NFQUEUE") != std::string::npos) return true;
      }
    }
    return false;
  }

 private:
  CommandResult run(const Command& argv) {
    const std::string line = to_string(argv);
    log.push_back(line);
    if (!fail_on.empty() && line.find(fail_on) != std::string::npos)
      return {2, "iptables: simulated failure"};
    // argv: binary -w 10 -t TABLE OP CHAIN [rest...]
    REQUIRE(argv.size() >= 7);
    REQUIRE((argv[4] == "filter" || argv[4] == "mangle"));
    if (argv[4] == "mangle" && mangle_missing) {
      return {3,
              "iptables v1.8.9 (legacy): can't initialize iptables table `mangle': Table does not exist (do "
              "you need to insmod?)"};
    }
    Chains& table = argv[4] == "mangle" ? mangle : chains;
    const std::string& op = argv[5];
    const std::string& chain = argv[6];
    std::vector<std::string> rest(argv.begin() + 7, argv.end());
    std::string rule;
    for (const auto& r : rest) rule += (rule.empty() ? "" : " ") + r;
    const bool exists = table.count(chain) != 0;
    if (op == "-N") {
      if (exists) return {1, "iptables: Chain already exists."};
      table[chain];
      return {0, ""};
    }
    if (!exists) return {1, "iptables: No chain/target/match by that name."};
    if (op == "-E") {
      // A rename: the jumps follow the chain, as the kernel's do.
      const std::string& to = rest.at(0);
      if (table.count(to) != 0) return {1, "iptables: File exists."};
      table[to] = std::move(table[chain]);
      table.erase(chain);
      for (auto& [name, list] : table) {
        for (auto& r : list) {
          if (r == "-j " + chain) r = "-j " + to;
        }
      }
      return {0, ""};
    }
    auto& rules = table[chain];
    if (op == "-S") return {0, ""};
    if (op == "-A") {
      rules.push_back(rule);
      return {0, ""};
    }
    if (op == "-I") {
      rules.insert(rules.begin(), rule.substr(rule.find(' ') + 1));  // drop the position
      return {0, ""};
    }
    if (op == "-D") {
      auto it = std::find(rules.begin(), rules.end(), rule);
      if (it == rules.end()) return {1, "iptables: Bad rule (does a matching rule exist in that chain?)."};
      rules.erase(it);
      return {0, ""};
    }
    if (op == "-F") {
      rules.clear();
      return {0, ""};
    }
    if (op == "-X") {
      for (const auto& [name, list] : table) {
        for (const auto& r : list) {
          if (r == "-j " + chain) return {1, "iptables: Too many links."};
        }
      }
      if (!rules.empty()) return {1, "iptables: Directory not empty."};
      table.erase(chain);
      return {0, ""};
    }
    FAIL("unexpected command " << line);
    return {2, ""};
  }
};

struct Pair {
  FakeIptables v4;
  FakeIptables v6;
  CommandRunner runner() {
    return [this](const Command& c) { return c.front() == "iptables" ? v4(c) : v6(c); };
  }
};

TEST_CASE("install then remove leaves the tables as they were", "[hooks]") {
  Pair fake;
  HooksConfig c;
  c.queue_last = 1;
  c.input = true;
  c.excluded_interfaces = {"sync0"};
  Hooks hooks(c, fake.runner());
  hooks.install();
  for (auto* t : {&fake.v4, &fake.v6}) {
    CHECK(t->chains.count("PAIRWALL") == 1);
    CHECK(t->chains.count("PAIRWALL_DEFRAG") == 1);
    CHECK(t->chains["FORWARD"] == std::vector<std::string>{"-j PAIRWALL"});
    CHECK(t->chains["INPUT"] == std::vector<std::string>{"-j PAIRWALL"});
    CHECK(t->chains["OUTPUT"].empty());
    CHECK(t->chains["PAIRWALL"].back() == "-j NFQUEUE --queue-balance 0:1");
  }
  hooks.remove();
  for (auto* t : {&fake.v4, &fake.v6}) {
    CHECK(t->chains.size() == 3);
    CHECK(t->chains["FORWARD"].empty());
    CHECK(t->chains["INPUT"].empty());
  }
  // Removing again finds nothing and succeeds.
  CHECK_NOTHROW(hooks.remove());
}

TEST_CASE("install then remove with prerouting: the mangle chain comes and goes", "[hooks]") {
  Pair fake;
  HooksConfig c;
  c.queue_last = 1;
  c.bypass_mark = 0x40000000;
  c.prerouting = true;
  c.excluded_interfaces = {"sync0"};
  Hooks hooks(c, fake.runner());
  hooks.install();
  for (auto* t : {&fake.v4, &fake.v6}) {
    CHECK(t->chains["FORWARD"] == std::vector<std::string>{"-j PAIRWALL"});
    CHECK(t->mangle["PREROUTING"] == std::vector<std::string>{"-j PAIRWALL"});
    CHECK(t->mangle["PAIRWALL"] == std::vector<std::string>{
                                       "-m mark --mark 1073741824/1073741824 -j RETURN",
                                       "-i sync0 -j RETURN",
                                       "-m addrtype --dst-type LOCAL -j NFQUEUE --queue-balance 0:1",
                                   });
    // The pre-routing jump is installed last.
    CHECK_THAT(t->log.back(), Catch::Contains("-t mangle -I PREROUTING 1 -j PAIRWALL"));
    t->log.clear();
  }
  hooks.remove();
  for (auto* t : {&fake.v4, &fake.v6}) {
    CHECK(t->chains.size() == 3);
    CHECK(t->chains["FORWARD"].empty());
    CHECK(t->mangle.size() == 5);
    CHECK(t->mangle.count("PAIRWALL") == 0);
    CHECK(t->mangle["PREROUTING"].empty());
    // In reverse: the pre-routing jump goes before the filter ones.
    const auto at = [&](const std::string& text) {
      return std::find_if(t->log.begin(), t->log.end(),
                          [&](const std::string& l) { return l.find(text) != std::string::npos; }) -
             t->log.begin();
    };
    CHECK(at("-t mangle -D PREROUTING -j PAIRWALL") < at("-t filter -D FORWARD -j PAIRWALL"));
  }
  CHECK_NOTHROW(hooks.remove());
}

TEST_CASE("remove takes a killed run's pre-routing chain whatever the config says", "[hooks]") {
  Pair fake;
  for (auto* t : {&fake.v4, &fake.v6}) {
    t->chains["PAIRWALL"] = {"-j NFQUEUE --queue-num 0"};
    t->chains["FORWARD"] = {"-j PAIRWALL"};
    t->mangle["PAIRWALL"] = {"-m addrtype --dst-type LOCAL -j NFQUEUE --queue-num 0"};
    t->mangle["PREROUTING"] = {"-j PAIRWALL", "-j MARK --set-mark 1", "-j PAIRWALL"};
  }
  HooksConfig c;  // no prerouting: e.g. the rule file lost its nat rules since the killed start
  c.defrag = false;
  Hooks hooks(c, fake.runner());
  hooks.remove();
  for (auto* t : {&fake.v4, &fake.v6}) {
    CHECK(t->chains.count("PAIRWALL") == 0);
    CHECK(t->mangle.count("PAIRWALL") == 0);
    CHECK(t->mangle["PREROUTING"] == std::vector<std::string>{"-j MARK --set-mark 1"});
  }
  // And install does the same before it adds its own, without a mangle chain of its own.
  for (auto* t : {&fake.v4, &fake.v6}) {
    t->mangle["PAIRWALL"] = {};
    t->mangle["PREROUTING"] = {"-j PAIRWALL", "-j MARK --set-mark 1"};
  }
  hooks.install();
  for (auto* t : {&fake.v4, &fake.v6}) {
    CHECK(t->chains["FORWARD"] == std::vector<std::string>{"-j PAIRWALL"});
    CHECK(t->mangle.count("PAIRWALL") == 0);
    CHECK(t->mangle["PREROUTING"] == std::vector<std::string>{"-j MARK --set-mark 1"});
  }
}

TEST_CASE("a kernel without a mangle table has no pre-routing chain to remove", "[hooks]") {
  Pair fake;
  fake.v4.mangle_missing = fake.v6.mangle_missing = true;
  HooksConfig c;
  Hooks hooks(c, fake.runner());
  CHECK_NOTHROW(hooks.install());
  CHECK(fake.v4.chains["FORWARD"] == std::vector<std::string>{"-j PAIRWALL"});
  CHECK_NOTHROW(hooks.remove());
  CHECK(fake.v4.chains.size() == 3);
  // With prerouting the table is needed: install says so, and rolls the filter chain back.
  c.bypass_mark = 1;
  c.prerouting = true;
  Hooks nat(c, fake.runner());
  CHECK_THROWS_WITH(nat.install(),
                    Catch::Contains("-t mangle -N PAIRWALL") && Catch::Contains("exit code 3"));
  for (auto* t : {&fake.v4, &fake.v6}) {
    CHECK(t->chains.size() == 3);
    CHECK(t->chains["FORWARD"].empty());
  }
}

TEST_CASE("a failed pre-routing install rolls back both tables", "[hooks]") {
  Pair fake;
  fake.v6.fail_on = "addrtype";
  HooksConfig c;
  c.bypass_mark = 1;
  c.prerouting = true;
  Hooks hooks(c, fake.runner());
  CHECK_THROWS_WITH(hooks.install(), Catch::Contains("ip6tables -w 10 -t mangle -A PAIRWALL -m addrtype"));
  for (auto* t : {&fake.v4, &fake.v6}) {
    CHECK(t->chains.size() == 3);
    CHECK(t->chains["FORWARD"].empty());
    CHECK(t->mangle.count("PAIRWALL") == 0);
    CHECK(t->mangle["PREROUTING"].empty());
  }
}

TEST_CASE("install cleans up what a crashed run left behind", "[hooks]") {
  Pair fake;
  for (auto* t : {&fake.v4, &fake.v6}) {
    t->chains["PAIRWALL"] = {"-i old0 -j RETURN", "-j NFQUEUE --queue-num 9"};
    t->chains["FORWARD"] = {"-j PAIRWALL", "-j ACCEPT", "-j PAIRWALL"};
    t->chains["OUTPUT"] = {"-j PAIRWALL"};
  }
  HooksConfig c;
  c.defrag = false;
  Hooks hooks(c, fake.runner());
  hooks.install();
  for (auto* t : {&fake.v4, &fake.v6}) {
    CHECK(t->chains["FORWARD"] == std::vector<std::string>{"-j PAIRWALL", "-j ACCEPT"});
    CHECK(t->chains["OUTPUT"].empty());
    CHECK(t->chains["PAIRWALL"] == std::vector<std::string>{"-j NFQUEUE --queue-num 0"});
  }
}

TEST_CASE("install replaces a killed run's hooks without a moment unhooked", "[hooks]") {
  Pair fake;
  HooksConfig c;
  c.queue_last = 1;
  c.excluded_interfaces = {"sync0"};
  c.prerouting = true;
  c.bypass_mark = 0x40000000;
  Hooks(c, fake.runner()).install();  // the run that was killed
  const auto installed = fake.v4.chains;
  const auto installed_mangle = fake.v4.mangle;
  for (auto* t : {&fake.v4, &fake.v6}) {
    t->watch_gaps = true;
    t->log.clear();
  }

  Hooks(c, fake.runner()).install();  // the restart
  for (auto* t : {&fake.v4, &fake.v6}) {
    INFO(t->log.size() << " commands");
    CHECK(t->unhooked == 0);
    CHECK(t->queues_forward());
  }
  // The same hooks as a fresh install, under their own names.
  CHECK(fake.v4.chains == installed);
  CHECK(fake.v4.mangle == installed_mangle);

  // A run killed in the middle of a replacement: its -next chains go too.
  for (auto* t : {&fake.v4, &fake.v6}) {
    t->chains["PAIRWALL-next"] = {"-j NFQUEUE --queue-num 5"};
    t->chains["FORWARD"].insert(t->chains["FORWARD"].begin(), "-j PAIRWALL-next");
  }
  Hooks(c, fake.runner()).install();
  CHECK(fake.v4.chains == installed);
}

TEST_CASE("a replacement that fails leaves the killed run's hooks, or the new ones, never none", "[hooks]") {
  Pair fake;
  HooksConfig c;
  c.defrag = false;
  Hooks(c, fake.runner()).install();  // the run that was killed
  const auto installed = fake.v4.chains;

  SECTION("the new chain cannot be filled: the old hooks stay, and nothing of the new") {
    fake.v6.fail_on = "-A PAIRWALL-next -j NFQUEUE";
    CHECK_THROWS_AS(Hooks(c, fake.runner()).install(), HooksError);
    CHECK(fake.v4.chains == installed);
    CHECK(fake.v6.queues_forward());
    CHECK(fake.v6.chains.count("PAIRWALL-next") == 0);
  }
  SECTION("the old chain cannot be removed: both stay, each complete") {
    fake.v4.fail_on = "-F PAIRWALL";
    CHECK_THROWS_AS(Hooks(c, fake.runner()).install(), HooksError);
    CHECK(fake.v4.queues_forward());
    CHECK(fake.v4.chains.count("PAIRWALL-next") == 1);
    // The next start completes the replacement.
    fake.v4.fail_on.clear();
    Hooks(c, fake.runner()).install();
    CHECK(fake.v4.chains == installed);
  }
  SECTION("a run killed while renaming left only the new chain: it is taken over") {
    for (auto* t : {&fake.v4, &fake.v6}) {
      t->chains["PAIRWALL-next"] = t->chains["PAIRWALL"];
      t->chains.erase("PAIRWALL");
      t->chains["FORWARD"] = {"-j PAIRWALL-next"};
      t->watch_gaps = true;
    }
    Hooks(c, fake.runner()).install();
    CHECK(fake.v4.chains == installed);
    CHECK(fake.v4.unhooked == 0);
    CHECK(fake.v6.unhooked == 0);
  }
  SECTION("remove takes a half-done replacement's chain too") {
    for (auto* t : {&fake.v4, &fake.v6}) {
      t->chains["PAIRWALL-next"] = {"-j NFQUEUE --queue-num 0"};
      t->chains["FORWARD"].insert(t->chains["FORWARD"].begin(), "-j PAIRWALL-next");
    }
    Hooks(c, fake.runner()).remove();
    for (auto* t : {&fake.v4, &fake.v6}) {
      CHECK(t->chains.size() == 3);
      CHECK(t->chains["FORWARD"].empty());
    }
  }
}

TEST_CASE("hooks named after a built-in chain are refused before any command runs", "[hooks]") {
  Pair fake;
  fake.v4.chains["INPUT"] = {"-p tcp --dport 22 -j ACCEPT", "-j DROP"};
  HooksConfig c;
  c.chain = "INPUT";
  CHECK_THROWS_AS(Hooks(c, fake.runner()), HooksError);
  CHECK(fake.v4.log.empty());
  CHECK(fake.v4.chains["INPUT"] == std::vector<std::string>{"-p tcp --dport 22 -j ACCEPT", "-j DROP"});
}

TEST_CASE("a failed install rolls back and names the command", "[hooks]") {
  Pair fake;
  fake.v6.fail_on = "NFQUEUE";
  HooksConfig c;
  Hooks hooks(c, fake.runner());
  try {
    hooks.install();
    FAIL("install should have thrown");
  } catch (const HooksError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("ip6tables -w 10 -t filter -A PAIRWALL -j NFQUEUE --queue-num 0"));
    CHECK_THAT(what, Catch::Contains("exit code 2"));
    CHECK_THAT(what, Catch::Contains("simulated failure"));
  }
  // IPv4 had been installed completely; the rollback removed it, and the partial IPv6 chain.
  for (auto* t : {&fake.v4, &fake.v6}) {
    CHECK(t->chains.size() == 3);
    CHECK(t->chains["FORWARD"].empty());
  }
}

TEST_CASE("a runner failure other than 'absent' is reported by remove", "[hooks]") {
  HooksConfig c;
  c.ipv6 = false;
  Hooks hooks(c, [](const Command&) {
    return CommandResult{4, "iptables: Permission denied (you must be root)"};
  });
  CHECK_THROWS_WITH(hooks.remove(), Catch::Contains("needs CAP_NET_ADMIN"));
}

TEST_CASE("run_command executes without a shell and reports exit codes and output", "[hooks]") {
  const CommandResult ok = run_command({"sh", "-c", "echo out; echo err >&2; exit 3"});
  CHECK(ok.exit_code == 3);
  CHECK_THAT(ok.output, Catch::Contains("out"));
  CHECK_THAT(ok.output, Catch::Contains("err"));
  // Arguments are not interpreted by a shell: the semicolon reaches echo as text.
  const CommandResult literal = run_command({"echo", "a;", "exit", "9"});
  CHECK(literal.exit_code == 0);
  CHECK(literal.output == "a; exit 9");
  const CommandResult missing = run_command({"/nonexistent/iptables"});
  CHECK(missing.exit_code != 0);
  CHECK_THAT(missing.output, Catch::Contains("/nonexistent/iptables"));
}

// SIGCHLD ignored (inherited so through exec from whatever started the daemon) makes the kernel
// reap children itself, and waitpid() then fails: an exit status never learnt is no success, or
// every failing iptables command would pass for done, and a jump "deleted" 32 times over.
TEST_CASE("run_command does not take an exit status it could not learn for success", "[hooks]") {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  struct sigaction previous {};
  REQUIRE(sigaction(SIGCHLD, &ignore, &previous) == 0);
  const CommandResult failed = run_command({"sh", "-c", "exit 1"});
  const CommandResult succeeded = run_command({"true"});
  sigaction(SIGCHLD, &previous, nullptr);
  CHECK(failed.exit_code == -1);
  CHECK(succeeded.exit_code == -1);
  CHECK_THAT(failed.output, Catch::Contains("exit status"));
}

TEST_CASE("run_command's child blocks no signal, whatever the daemon's threads block", "[hooks]") {
  sigset_t terminate;
  sigemptyset(&terminate);
  sigaddset(&terminate, SIGTERM);
  sigset_t previous;
  REQUIRE(pthread_sigmask(SIG_BLOCK, &terminate, &previous) == 0);
  const CommandResult child = run_command({"grep", "SigBlk", "/proc/self/status"});
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  CHECK(child.exit_code == 0);
  CHECK(child.output == "SigBlk:\t0000000000000000");
}

}  // namespace
}  // namespace pairwall::io
