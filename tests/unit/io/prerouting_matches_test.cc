#include "daemon/io/prerouting_matches.h"

#include <catch2/catch.hpp>
#include <string>
#include <variant>
#include <vector>

#include "daemon/engine/rules/parser.h"

using pairwall::engine::Family;
using pairwall::io::prerouting_matches;
using pairwall::io::PreroutingMatch;
namespace rules = pairwall::engine::rules;

namespace {

std::vector<PreroutingMatch> matches_of(const std::string& text) {
  auto parsed = rules::parse_rules(text, "test.conf");
  if (auto* e = std::get_if<rules::RuleError>(&parsed)) FAIL(e->to_string());
  return prerouting_matches(std::get<rules::RuleFile>(parsed));
}

}  // namespace

TEST_CASE("pre-routing matches: what rdr and binat may rewrite beyond this node", "[hooks]") {
  struct Row {
    const char* name;
    const char* rules;
    std::vector<PreroutingMatch> expected;
  };
  const Row rows[] = {
      {"nat rewrites the source after routing: nothing",
       "nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\n",
       {}},
      {"an exemption translates nothing", "no rdr on lan0 proto tcp from 10.1.0.7 to any port 80\n", {}},
      {"a transparent proxy: the target's family, the source left out",
       "rdr on lan0 proto tcp from 10.1.0.0/24 to any port 80 -> 10.2.0.10 port 3128\n",
       {{Family::V4, "lan0", 6, "", 80, 80}}},
      {"each protocol and prefix listed, with the port",
       "rdr on lan0 proto { tcp udp } to { 192.0.2.0/24 198.51.100.53 } port 53 -> 10.2.0.53\n",
       {{Family::V4, "lan0", 6, "192.0.2.0/24", 53, 53},
        {Family::V4, "lan0", 6, "198.51.100.53/32", 53, 53},
        {Family::V4, "lan0", 17, "192.0.2.0/24", 53, 53},
        {Family::V4, "lan0", 17, "198.51.100.53/32", 53, 53}}},
      {"this node's own address: the local rule queues it",
       "rdr on ext0 proto tcp to (ext0) port 80 -> 10.2.0.10\n",
       {}},
      {"own addresses beside a prefix: the prefix",
       "rdr on ext0 proto tcp to { ext0 192.0.2.80 } port 80 -> 10.2.0.10\n",
       {{Family::V4, "ext0", 6, "192.0.2.80/32", 80, 80}}},
      {"negations, tables and port lists widen to any",
       "table <web> { 192.0.2.0/24 }\n"
       "rdr on ! lan0 proto tcp to ! 192.0.2.1 port != 22 -> 10.2.0.10\n"
       "rdr on lan0 proto tcp to <web> port { 80 443 } -> 10.2.0.10\n",
       {{Family::V4, "", 6, "", 0, 0}, {Family::V4, "lan0", 6, "", 0, 0}}},
      {"port ranges and operators",
       "rdr on lan0 proto tcp to any port 1000:2000 -> 10.2.0.10\n"
       "rdr on lan0 proto tcp to any port 3000 >< 4000 -> 10.2.0.10\n"
       "rdr on lan0 proto tcp to any port > 50000 -> 10.2.0.10\n"
       "rdr on lan0 proto tcp to any port <= 10 -> 10.2.0.10\n",
       {{Family::V4, "lan0", 6, "", 1000, 2000},
        {Family::V4, "lan0", 6, "", 3001, 3999},
        {Family::V4, "lan0", 6, "", 50001, 65535},
        {Family::V4, "lan0", 6, "", 1, 10}}},
      {"interfaces listed, IPv6",
       "rdr on { lan0 lan1 } inet6 proto tcp to 2001:db8:80::/48 port 80 -> 2001:db8:2::10\n",
       {{Family::V6, "lan0", 6, "2001:db8:80::/48", 80, 80},
        {Family::V6, "lan1", 6, "2001:db8:80::/48", 80, 80}}},
      {"binat's inbound way: to its external address, any protocol",
       "binat on wan0 from 10.1.0.5 to any -> 198.51.100.5\n",
       {{Family::V4, "wan0", 0, "198.51.100.5/32", 0, 0}}},
      {"a rule met twice is queued once",
       "rdr on lan0 proto tcp to any port 80 -> 10.2.0.10\nrdr on lan0 proto tcp to any port 80 -> "
       "10.2.0.11\n",
       {{Family::V4, "lan0", 6, "", 80, 80}}},
      {"a target by interface: both families",
       "rdr on lan0 proto tcp to any port 80 -> (dmz0)\n",
       {{Family::V4, "lan0", 6, "", 80, 80}, {Family::V6, "lan0", 6, "", 80, 80}}},
  };
  for (const Row& row : rows) {
    SECTION(row.name) {
      CHECK(matches_of(row.rules) == row.expected);
    }
  }
}

TEST_CASE("pre-routing matches: a rule of many combinations widens its destinations", "[hooks]") {
  std::string prefixes;
  for (int i = 0; i < 40; ++i) prefixes += " 192.0." + std::to_string(i) + ".0/24";
  const auto matches =
      matches_of("rdr on { lan0 lan1 } proto tcp to {" + prefixes + " } port 80 -> 10.2.0.10\n");
  CHECK(matches == std::vector<PreroutingMatch>{{Family::V4, "lan0", 6, "", 80, 80},
                                                {Family::V4, "lan1", 6, "", 80, 80}});
  // Within the bound, each is its own.
  CHECK(matches_of("rdr on lan0 proto tcp to {" + prefixes + " } port 80 -> 10.2.0.10\n").size() == 40);
}

TEST_CASE("pre-routing matches: an earlier set's come first, and too many widen until they fit", "[hooks]") {
  auto parsed = rules::parse_rules("rdr on lan0 proto tcp to any port 80 -> 10.2.0.10\n", "test.conf");
  REQUIRE(std::holds_alternative<rules::RuleFile>(parsed));
  const rules::RuleFile& file = std::get<rules::RuleFile>(parsed);
  const PreroutingMatch kept{Family::V4, "lan1", 17, "", 53, 53};
  CHECK(prerouting_matches(file, {kept}) ==
        std::vector<PreroutingMatch>{kept, {Family::V4, "lan0", 6, "", 80, 80}});
  CHECK(prerouting_matches(file, {{Family::V4, "lan0", 6, "", 80, 80}}).size() == 1);

  // One rule per port, on two interfaces, 40 of each: 80 matches, past the bound. Without their
  // ports they are two.
  std::string many;
  for (int port = 1000; port < 1040; ++port) {
    for (const char* lan : {"lan0", "lan1"})
      many +=
          "rdr on " + std::string(lan) + " proto tcp to any port " + std::to_string(port) + " -> 10.2.0.10\n";
  }
  CHECK(matches_of(many) ==
        std::vector<PreroutingMatch>{{Family::V4, "lan0", 6, "", 0, 0}, {Family::V4, "lan1", 6, "", 0, 0}});
  // Within the bound, each is its own.
  CHECK(matches_of(many.substr(0, many.size() / 2)).size() == 40);
}

TEST_CASE("pre-routing matches read as pf would write them", "[hooks]") {
  using pairwall::io::to_string;
  CHECK(to_string({Family::V4, "lan0", 6, "", 80, 80}) == "inet on lan0 proto 6 to any port 80");
  CHECK(to_string({Family::V6, "", 17, "2001:db8::/48", 5000, 5100}) ==
        "inet6 proto 17 to 2001:db8::/48 port 5000:5100");
  CHECK(to_string({Family::V4, "wan0", 0, "198.51.100.5/32", 0, 0}) == "inet on wan0 to 198.51.100.5/32");
}
