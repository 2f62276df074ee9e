// Rules that never decide: a table of rule files, each with the rules the compiler warns about
// (by line) and the line of the rule it names as deciding instead, or none. Every "none" row is a
// rule set where the later or quick rule does not match every packet the earlier one does.
#include "daemon/engine/rules/shadowed.h"

#include <catch2/catch.hpp>
#include <string>
#include <variant>
#include <vector>

#include "daemon/engine/rules/compile.h"

namespace pairwall::engine::rules {
namespace {

// "line<-line" per warning: the rule that never decides, then the one that decides instead.
std::vector<std::string> shadowed(const std::string& text) {
  auto parsed = parse_rules(text, "t.conf");
  if (auto* e = std::get_if<RuleError>(&parsed)) FAIL("parse error: " << e->to_string());
  InterfaceRegistry ifs;
  std::vector<RuleError> notices;
  auto compiled = compile(std::get<RuleFile>(parsed), ifs, nullptr, {}, &notices);
  if (auto* e = std::get_if<RuleError>(&compiled)) FAIL("compile error: " << e->to_string());
  std::vector<std::string> out;
  for (const RuleError& n : notices) {
    const auto at = n.message.find("(t.conf:");
    REQUIRE(at != std::string::npos);
    out.push_back(std::to_string(n.location.line) + "<-" +
                  n.message.substr(at + 8, n.message.find(')', at) - at - 8));
  }
  return out;
}

using Lines = std::vector<std::string>;

}  // namespace

TEST_CASE("shadowed: a rule that another always overrides is named with the rule that decides",
          "[compile][shadowed]") {
  struct Row {
    const char* what;
    std::string text;
    Lines expected;
  };
  const std::vector<Row> rows = {
      {"block written last, pf's most common slip",
       "pass in on em0 proto tcp to port 22\nblock in on em0\n",
       {"1<-2"}},
      {"a block of any direction overrides an in rule",
       "pass in on em0 proto udp to port 53\nblock all\n",
       {"1<-2"}},
      {"an earlier quick rule",
       "block in quick from 192.0.2.0/24\nblock in proto tcp from 192.0.2.0/24 to port 80\n",
       {"2<-1"}},
      {"the same rule twice: the first never decides",
       "pass in proto tcp to port 22 keep state (max 10)\npass in proto tcp to port 22\n",
       {"1<-2"}},
      {"a later rule naming fewer fields",
       "pass in on em0 proto tcp from 10.0.0.0/8 to 10.1.0.1 port 443\n"
       "block in proto tcp to 10.1.0.1 port 443\n",
       {"1<-2"}},
      {"UDP is not held back by flags that test TCP alone",
       "pass in proto udp to port 53\npass in all\n",
       {"1<-2"}},
      {"a TCP rule's flags, as the later rule tests TCP's",
       "pass in proto tcp to port 22 keep state (max-src-conn 10)\npass in all\n",
       {"1<-2"}},
      {"an anchor's rule, the anchor not quick",
       "anchor \"a\" in on em0 {\n  pass proto tcp to port 22\n}\nblock all\n",
       {"2<-4"}},

      {"a later rule that decides for SYNs alone leaves the rest",
       "block in proto tcp to port 25\npass in all\n",
       {}},
      {"nor a TCP rule with flags of its own",
       "pass in proto tcp to port 22 flags S/SAFR\npass in all\n",
       {}},
      {"the later rule is narrower", "pass out all\npass out on em0 proto tcp to port 443\n", {}},
      {"another interface", "pass in on em0 proto tcp to port 22\nblock in on em1\n", {}},
      {"another direction", "pass in proto tcp to port 22\nblock out all\n", {}},
      {"a quick rule decides first", "pass in quick on em0 proto tcp to port 22\nblock in on em0\n", {}},
      {"a quick anchor's rules decide before the rules after it",
       "anchor \"a\" in quick on em0 {\n  pass proto tcp to port 22\n}\nblock all\n",
       {}},
      {"written otherwise, not seen as covering",
       "pass in proto tcp to port 2000\nblock in proto tcp to port > 1024\n",
       {}},
      {"a later rule that decides only by chance",
       "pass in proto tcp to port 22\nblock in all probability 50%\n",
       {}},
      {"a later rule that tests a tag",
       "pass in proto tcp to port 22\nmatch in tag X\nblock in tagged X\n",
       {}},
      {"a tag that another rule tests still tags",
       "pass in proto tcp to port 22 tag SSH\nblock in all\n"
       "pass out tagged SSH\n",
       {}},
      {"match rules never decide, nor are they overridden",
       "match in all tag X\nblock all\npass out tagged X\n",
       {}},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    CHECK(shadowed(row.text) == row.expected);
  }
}

TEST_CASE("shadowed: past kMaxShadowNotices, one warning says how many more", "[compile][shadowed]") {
  std::string text;
  const std::size_t count = kMaxShadowNotices + 5;
  for (std::size_t i = 0; i < count; ++i)
    text += "pass in proto tcp to port " + std::to_string(1000 + i) + "\n";
  text += "block all\n";
  auto parsed = parse_rules(text, "t.conf");
  REQUIRE(std::holds_alternative<RuleFile>(parsed));
  InterfaceRegistry ifs;
  std::vector<RuleError> notices;
  auto compiled = compile(std::get<RuleFile>(parsed), ifs, nullptr, {}, &notices);
  REQUIRE(std::holds_alternative<std::shared_ptr<const RuleSet>>(compiled));
  REQUIRE(notices.size() == kMaxShadowNotices + 1);
  CHECK(notices.front().to_string() ==
        "t.conf:1:1: warning: this rule never decides: 'block all' (t.conf:38), after it, matches every "
        "packet it "
        "does, and the last matching rule decides: make this rule quick, or move it below that one");
  CHECK(notices.back().to_string() ==
        "t.conf:38:1: warning: 5 more rules never decide (the first 32 are named)");
  // Without a place for notices, the compiler looks for none.
  CHECK(std::holds_alternative<std::shared_ptr<const RuleSet>>(compile(std::get<RuleFile>(parsed), ifs)));
}

}  // namespace pairwall::engine::rules
