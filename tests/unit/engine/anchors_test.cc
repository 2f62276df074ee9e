// pf's anchors: how they parse (in place, nested, `load anchor`), how their rules are placed and
// replaced, and which rule decides a packet when rules stand inside and outside anchors.
#include "daemon/engine/rules/anchors.h"

#include <catch2/catch.hpp>
#include <cerrno>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "daemon/engine/rules/compile.h"
#include "daemon/engine/rules/parser.h"

namespace pairwall::engine::rules {
namespace {

struct Files {
  std::map<std::string, std::string> text;
  ReadFile reader() {
    return [this](const std::string& path, std::string& out) {
      auto it = text.find(path);
      if (it == text.end()) return ENOENT;
      out = it->second;
      return 0;
    };
  }
};

RuleFile parse(const std::string& text, const ReadFile& read = {}) {
  auto parsed = parse_rules(text, "/etc/pw/pf.conf", read);
  if (auto* e = std::get_if<RuleError>(&parsed)) FAIL("parse error: " << e->to_string());
  return std::get<RuleFile>(std::move(parsed));
}

std::string parse_error(const std::string& text, const ReadFile& read = {}) {
  auto parsed = parse_rules(text, "/etc/pw/pf.conf", read);
  auto* e = std::get_if<RuleError>(&parsed);
  return e ? e->to_string() : "(parsed)";
}

// "anchor:line" of each filter rule, in file order.
std::string placed(const RuleFile& f) {
  std::string out;
  for (const FilterRule& r : f.filter_rules)
    out += (r.anchor.empty() ? "-" : r.anchor) + ":" + std::to_string(r.location.line) + " ";
  return out;
}

// "path@position<parent" of each anchor, in declaration order.
std::string anchors(const RuleFile& f) {
  std::string out;
  for (const Anchor& a : f.anchors) out += a.path + "@" + std::to_string(a.position) + "<" + a.parent + " ";
  return out;
}

TEST_CASE("anchors parse in place, nested, with their own terms", "[anchors]") {
  const RuleFile f = parse(
      "block all\n"
      "anchor \"web\" in quick on { lan0 wan0 } inet proto tcp {\n"
      "  pass to port 80\n"
      "  anchor admin {\n"
      "    pass to port 22\n"
      "  }\n"
      "  pass to port 443\n"
      "}\n"
      "anchor \"feeds\"\n"
      "pass out all\n");
  CHECK(placed(f) == "-:1 web:3 web/admin:5 web:7 -:10 ");
  CHECK(anchors(f) == "web@1< web/admin@2<web feeds@4< ");
  const Anchor& web = f.anchors[0];
  CHECK(web.quick);
  CHECK(web.direction == Direction::In);
  CHECK(web.interfaces.size() == 2);
  CHECK(web.family == Family::V4);
  CHECK(web.protocols == std::vector<uint8_t>{6});
  CHECK(web.file_defines_rules);
  CHECK(web.location.line == 2);
  CHECK_FALSE(f.anchors[2].file_defines_rules);
  CHECK(anchor_rule_count(f, "web") == 2);
  CHECK(anchor_rule_count(f, "web/admin") == 1);
  CHECK(anchor_rule_count(f, "") == 2);
}

TEST_CASE("load anchor reads the anchor's rules from a file beside the rule file", "[anchors]") {
  Files files;
  files.text["/etc/pw/anchors/ssh.conf"] =
      "trusted = \"192.0.2.7\"\n"
      "pass in proto tcp from $trusted to port 22\n"
      "anchor \"later\"\n"
      "block in proto tcp to port 22\n";
  const RuleFile f = parse(
      "anchor \"ssh\"\n"
      "anchor \"other\"\n"
      "pass all\n"
      "load anchor \"ssh\" from \"anchors/ssh.conf\"\n",
      files.reader());
  CHECK(placed(f) == "ssh:2 ssh:4 -:3 ");
  CHECK(anchors(f) == "ssh@0< ssh/later@1<ssh other@2< ");
  CHECK(f.filter_rules[0].location.file == "/etc/pw/anchors/ssh.conf");
  CHECK(f.anchors[0].file_defines_rules);
  CHECK(f.anchors[1].file_defines_rules == false);
}

TEST_CASE("load anchor may come before the anchor it fills, as pfctl loads anchors last", "[anchors]") {
  Files files;
  files.text["/etc/pw/ssh.conf"] = "pass in proto tcp to port 22\n";
  files.text["/etc/pw/web.conf"] = "pass in proto tcp to port 443\nanchor \"inner\"\n";
  files.text["/etc/pw/inner.conf"] = "pass in proto tcp to port 8443\n";
  const RuleFile f = parse(
      "load anchor \"ssh\" from \"ssh.conf\"\n"
      "block all\n"
      "anchor \"ssh\"\n"
      "anchor \"web\" {\n"
      "  load anchor \"inner\" from \"inner.conf\"\n"
      "  anchor \"inner\"\n"
      "}\n",
      files.reader());
  CHECK(placed(f) == "-:2 ssh:1 web/inner:1 ");
  CHECK(anchors(f) == "ssh@1< web@2< web/inner@2<web ");
  CHECK(f.anchors[0].file_defines_rules);
  CHECK(f.anchors[2].file_defines_rules);
}

TEST_CASE("anchor errors: where, and what to write instead", "[anchors]") {
  Files files;
  files.text["/etc/pw/bad.conf"] = "pass all\ntable <t> { 10.0.0.1 }\n";
  files.text["/etc/pw/ok.conf"] = "pass all\n";
  files.text["/etc/pw/open.conf"] = "anchor \"a\" {\n  pass all\n";
  files.text["/etc/pw/close.conf"] = "block all\n}\n";
  files.text["/etc/pw/self.conf"] = "anchor \"again\"\nload anchor \"again\" from \"self.conf\"\n";
  struct Row {
    std::string text;
    std::string expected;
  };
  const std::vector<Row> rows = {
      {"anchor \"a\"\nanchor a",
       "/etc/pw/pf.conf:2:8: anchor \"a\" is already declared at /etc/pw/pf.conf:1: an "
       "anchor stands in one place"},
      {"anchor \"ftp-proxy/*\"",
       "/etc/pw/pf.conf:1:8: anchor wildcards ('*') are not supported: name each anchor"},
      {"anchor \"a/b\"",
       "/etc/pw/pf.conf:1:8: an anchor inside another is written inside its '{ }': its name has no '/'"},
      {"anchor \"a b\"",
       "/etc/pw/pf.conf:1:8: an anchor's name holds letters, digits, '_', '-' and '.' only"},
      {"anchor \"a\" from 10.0.0.1",
       "/etc/pw/pf.conf:1:12: an anchor matches on direction, interface, family and protocol: write 'from' "
       "and "
       "'to' on its rules"},
      {"anchor \"a\" {\npass all\n",
       "/etc/pw/pf.conf:3:1: anchor \"a\" opened at line 1, column 12 has no '}'"},
      // A block ends in the file that opened it, and spans the files it includes.
      {"include \"open.conf\"\n}\n",
       "/etc/pw/open.conf:3:1: anchor \"a\" opened at line 1, column 12 has no '}'"},
      {"anchor \"a\" {\n  include \"ok.conf\"\n  block all\n}\n", "(parsed)"},
      {"anchor \"a\" {\n  include \"close.conf\"\n  pass all\n",
       "/etc/pw/close.conf:2:1: this '}' would close anchor \"a\" opened at /etc/pw/pf.conf:1:12: an "
       "anchor's "
       "block ends in the file that opens it"},
      {"anchor \"a\" { pass all }",
       "/etc/pw/pf.conf:1:14: expected end of line after the anchor's '{', got 'pass'"},
      {"anchor \"a\" {\n  set limit states 10\n}",
       "/etc/pw/pf.conf:2:3: 'set' belongs in the main rule file: an anchor holds filter rules and anchors"},
      {"anchor \"a\" {\n  nat on wan0 from any to any -> 192.0.2.1\n}",
       "/etc/pw/pf.conf:2:3: 'nat' belongs in the main rule file: an anchor holds filter rules and anchors"},
      {"load anchor \"a\" from \"ok.conf\"",
       "/etc/pw/pf.conf:1:13: no anchor \"a\" is declared in this file"},
      {"load anchor \"a\" from \"ok.conf\"\nanchor \"a\" {\n}",
       "/etc/pw/pf.conf:1:13: anchor \"a\" has its rules from /etc/pw/pf.conf:2"},
      {"anchor \"a\" {\n}\nload anchor \"a\" from \"ok.conf\"",
       "/etc/pw/pf.conf:3:13: anchor \"a\" has its rules from /etc/pw/pf.conf:1"},
      {"anchor \"a\"\nload anchor \"a\" from \"missing.conf\"",
       "/etc/pw/pf.conf:2:22: cannot read anchor file \"/etc/pw/missing.conf\": No such file or directory"},
      {"anchor \"a\"\nload anchor \"a\" from \"bad.conf\"",
       "/etc/pw/bad.conf:2:1: 'table' belongs in the main rule file: an anchor holds filter rules and "
       "anchors"},
      {"anchor \"a\"\nload anchor \"a\" from \"self.conf\"",
       "/etc/pw/self.conf:2:26: anchor files load others deeper than 16"},
      {"anchor \"a\"\nload \"a\"",
       "/etc/pw/pf.conf:2:6: expected 'anchor' after 'load' (load anchor NAME from FILE), "
       "got '\"a\"'"},
  };
  for (const Row& row : rows) {
    INFO(row.text);
    CHECK(parse_error(row.text, files.reader()) == row.expected);
  }
  // Nesting is bounded, so that a hostile file cannot exhaust the parser's stack.
  std::string deep;
  for (int i = 0; i < 17; ++i) deep += "anchor a {\n";
  CHECK(parse_error(deep) == "/etc/pw/pf.conf:17:8: anchors nest deeper than 16");
  auto anchor_text = parse_anchor_rules("pass all\nscrub in all\n", "a.conf");
  REQUIRE(std::holds_alternative<RuleError>(anchor_text));
  CHECK(std::get<RuleError>(anchor_text).to_string() ==
        "a.conf:2:1: 'scrub' belongs in the main rule file: an anchor holds filter rules and anchors");
}

RuleFile anchor_content(const std::string& text) {
  auto parsed = parse_anchor_rules(text, "/tmp/a.conf");
  if (auto* e = std::get_if<RuleError>(&parsed)) FAIL("parse error: " << e->to_string());
  return std::get<RuleFile>(std::move(parsed));
}

TEST_CASE("set_anchor_rules replaces an anchor's rules and the anchors within it", "[anchors]") {
  RuleFile f = parse(
      "block all\n"
      "anchor \"a\" {\n"
      "  pass proto tcp\n"
      "  anchor \"inner\" {\n"
      "    pass proto udp\n"
      "  }\n"
      "}\n"
      "anchor \"b\"\n"
      "pass out all\n"
      "anchor \"c\"\n");
  REQUIRE(placed(f) == "-:1 a:3 a/inner:5 -:9 ");
  REQUIRE(anchors(f) == "a@1< a/inner@2<a b@3< c@4< ");

  REQUIRE(
      set_anchor_rules(f, "b", anchor_content("pass in proto icmp\npass in proto icmp6\nanchor deeper\n")));
  CHECK(placed(f) == "-:1 a:3 a/inner:5 b:1 b:2 -:9 ");
  CHECK(anchors(f) == "a@1< a/inner@2<a b@3< b/deeper@5<b c@6< ");

  REQUIRE(set_anchor_rules(f, "a", anchor_content("block in proto tcp\n")));
  CHECK(placed(f) == "-:1 a:1 b:1 b:2 -:9 ");
  CHECK(anchors(f) == "a@1< b@2< b/deeper@4<b c@5< ");

  REQUIRE(set_anchor_rules(f, "b/deeper", anchor_content("pass out proto udp\n")));
  CHECK(placed(f) == "-:1 a:1 b:1 b:2 b/deeper:1 -:9 ");
  CHECK(anchors(f) == "a@1< b@2< b/deeper@4<b c@6< ");

  REQUIRE(set_anchor_rules(f, "b", RuleFile{}));
  CHECK(placed(f) == "-:1 a:1 -:9 ");
  CHECK(anchors(f) == "a@1< b@2< c@3< ");

  CHECK_FALSE(set_anchor_rules(f, "nowhere", RuleFile{}));
  CHECK(placed(f) == "-:1 a:1 -:9 ");
}

PacketView tcp_packet() {
  PacketView p;
  Family f;
  p.src = *parse_address("10.0.0.1", &f);
  p.dst = *parse_address("192.0.2.80", &f);
  p.family = f;
  p.proto = 6;
  p.src_port = 40000;
  p.dst_port = 80;
  p.tcp.flags = tcpflag::kSyn;
  return p;
}

PacketView udp_packet() {
  PacketView p = tcp_packet();
  p.proto = 17;
  p.tcp.flags = 0;
  return p;
}

// "anchor@N" of the rule deciding the packet, "-@N" in the main rule set, "none" when no rule does.
std::string decided(const std::string& text, const PacketView& p, Direction direction,
                    const std::string& iface) {
  InterfaceRegistry ifs;
  auto compiled = compile(parse(text), ifs);
  if (auto* e = std::get_if<RuleError>(&compiled)) FAIL("compile error: " << e->to_string());
  const auto& set = std::get<std::shared_ptr<const RuleSet>>(compiled);
  const uint32_t rule = set->evaluate(p, direction, ifs.intern(iface));
  if (rule == kNoRule) return "none";
  const CompiledRule& r = set->rule(rule);
  return (r.anchor.empty() ? "-" : r.anchor) + "@" + std::to_string(r.number);
}

TEST_CASE("rules in anchors decide as pf's: in place, quick final, quick anchors final", "[anchors]") {
  struct Row {
    std::string text;
    bool tcp;
    Direction direction;
    std::string iface;
    std::string expected;
  };
  const std::vector<Row> rows = {
      // An anchor's rules take part in "last match wins" where the anchor stands.
      {"block all\nanchor \"a\" {\n pass proto tcp\n}", true, Direction::In, "lan0", "a@0"},
      // (An anchor takes an @N among the rules where it stands, as pfctl numbers it.)
      {"anchor \"a\" {\n pass proto tcp\n}\nblock all", true, Direction::In, "lan0", "-@1"},
      {"pass all\nanchor \"a\" {\n block proto tcp\n pass proto udp\n}", true, Direction::In, "lan0", "a@0"},
      {"pass all\nanchor \"a\" {\n block proto tcp\n pass proto udp\n}", false, Direction::In, "lan0", "a@1"},
      // A quick rule inside an anchor is final for the whole evaluation.
      {"anchor \"a\" {\n block quick proto tcp\n}\npass all", true, Direction::In, "lan0", "a@0"},
      {"pass quick proto tcp\nanchor \"a\" {\n block quick proto tcp\n}", true, Direction::In, "lan0", "-@0"},
      // A quick anchor ends the evaluation on its last matching rule, when one matched.
      {"anchor \"a\" quick {\n pass proto tcp\n block all\n}\npass all", true, Direction::In, "lan0", "a@1"},
      {"anchor \"a\" quick {\n block all\n pass proto tcp\n}\nblock all", true, Direction::In, "lan0", "a@1"},
      {"anchor \"a\" quick {\n pass proto tcp\n}\nblock all", false, Direction::In, "lan0", "-@1"},
      {"block quick proto udp\nanchor \"a\" quick {\n pass all\n}", false, Direction::In, "lan0", "-@0"},
      // The anchor's own terms hold for its rules.
      {"block all\nanchor \"a\" in on lan0 {\n pass all\n}", true, Direction::In, "lan0", "a@0"},
      {"block all\nanchor \"a\" in on lan0 {\n pass all\n}", true, Direction::Out, "lan0", "-@0"},
      {"block all\nanchor \"a\" in on lan0 {\n pass all\n}", true, Direction::In, "wan0", "-@0"},
      {"block all\nanchor \"a\" proto udp {\n pass all\n}", true, Direction::In, "lan0", "-@0"},
      {"block all\nanchor \"a\" on { lan0 wan0 } {\n pass on ! wan0\n}", true, Direction::In, "lan0", "a@0"},
      {"block all\nanchor \"a\" on { lan0 wan0 } {\n pass on ! wan0\n}", true, Direction::In, "wan0", "-@0"},
      {"block all\nanchor \"a\" inet6 {\n pass all\n}", true, Direction::In, "lan0", "-@0"},
      // A list's elements match each on its own: `{ lan0, !wan0 }` is every interface but wan0.
      {"block all\nanchor \"a\" on { lan0 wan0 dmz0 } {\n pass on { lan0, !wan0 }\n}", true, Direction::In,
       "dmz0", "a@0"},
      {"block all\nanchor \"a\" on { lan0 wan0 dmz0 } {\n pass on { lan0, !wan0 }\n}", true, Direction::In,
       "wan0", "-@0"},
      {"block all\nanchor \"a\" on { !wan0, dmz0 } {\n pass on { lan0 wan0 }\n}", true, Direction::In, "lan0",
       "a@0"},
      {"block all\nanchor \"a\" on { !wan0, dmz0 } {\n pass on { lan0 wan0 }\n}", true, Direction::In, "wan0",
       "-@0"},
      // Nested: each level's terms, each level's quick.
      {"block all\nanchor \"a\" proto tcp {\n anchor \"b\" in quick {\n  pass all\n }\n block all\n}", true,
       Direction::In, "lan0", "a/b@0"},
      {"block all\nanchor \"a\" proto tcp {\n anchor \"b\" in quick {\n  pass all\n }\n block all\n}", true,
       Direction::Out, "lan0", "a@1"},
      {"block all\nanchor \"a\" proto tcp {\n anchor \"b\" in quick {\n  pass all\n }\n block all\n}", false,
       Direction::In, "lan0", "-@0"},
      // An anchor without rules changes nothing.
      {"pass all\nanchor \"a\"\nblock proto udp", true, Direction::In, "lan0", "-@0"},
      {"anchor \"a\"", true, Direction::In, "lan0", "none"},
  };
  for (const Row& row : rows) {
    INFO(row.text << " / " << (row.tcp ? "tcp" : "udp") << " "
                  << (row.direction == Direction::In ? "in" : "out") << " on " << row.iface);
    CHECK(decided(row.text, row.tcp ? tcp_packet() : udp_packet(), row.direction, row.iface) == row.expected);
  }
}

TEST_CASE("anchor terms that leave a rule nothing to match are compile errors at the rule", "[anchors]") {
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"anchor \"a\" in {\n pass out all\n}",
       "/etc/pw/pf.conf:2:2: the rule can never match: its direction is not that of anchor \"a\" "
       "(/etc/pw/pf.conf:1)"},
      {"anchor \"a\" inet {\n pass inet6 all\n}",
       "/etc/pw/pf.conf:2:2: the rule can never match: its address "
       "family is not that of anchor \"a\" (/etc/pw/pf.conf:1)"},
      {"anchor \"a\" proto tcp {\n pass proto { udp icmp } all\n}",
       "/etc/pw/pf.conf:2:2: the rule can never match: none of its protocols is one of anchor \"a\" "
       "(/etc/pw/pf.conf:1)"},
      {"anchor \"a\" on lan0 {\n pass on wan0 all\n}",
       "/etc/pw/pf.conf:2:2: the rule can never match: none of its "
       "interfaces is one of anchor \"a\" (/etc/pw/pf.conf:1)"},
      {"anchor \"a\" on ! lan0 {\n pass on ! wan0 all\n}",
       "/etc/pw/pf.conf:2:2: the rule's 'on' and that of anchor \"a\" (/etc/pw/pf.conf:1) both have '!': "
       "write the "
       "interfaces it may match by name"},
      {"anchor \"a\" inet6 {\n pass from 10.0.0.0/8\n}",
       "/etc/pw/pf.conf:2:12: address 10.0.0.0/8 is IPv4 but the rule is limited to inet6"},
      {"anchor \"a\" proto tcp {\n anchor \"b\" {\n  pass proto udp\n }\n}",
       "/etc/pw/pf.conf:3:3: the rule can never match: none of its protocols is one of anchor \"a\" "
       "(/etc/pw/pf.conf:1)"},
  };
  for (const auto& [text, expected] : rows) {
    INFO(text);
    InterfaceRegistry ifs;
    auto compiled = compile(parse(text), ifs);
    REQUIRE(std::holds_alternative<RuleError>(compiled));
    CHECK(std::get<RuleError>(compiled).to_string() == expected);
  }
  // An anchor's `proto tcp` is what the rule's flags and ports need.
  InterfaceRegistry ifs;
  CHECK(std::holds_alternative<std::shared_ptr<const RuleSet>>(
      compile(parse("anchor \"a\" proto tcp {\n pass to port 80 flags S/SA\n}"), ifs)));
}

TEST_CASE("rules are numbered within their anchor and keep their counters across loads", "[anchors]") {
  InterfaceRegistry ifs;
  RuleFile f = parse(
      "block all\n"
      "anchor \"a\"\n"
      "pass out all\n");
  auto first = compile(f, ifs);
  REQUIRE(std::holds_alternative<std::shared_ptr<const RuleSet>>(first));
  const auto& before = *std::get<std::shared_ptr<const RuleSet>>(first);
  before.rule(1).stats->packets = 7;

  REQUIRE(set_anchor_rules(f, "a", anchor_content("pass in proto tcp\npass in proto udp\n")));
  auto second = compile(f, ifs, &before);
  REQUIRE(std::holds_alternative<std::shared_ptr<const RuleSet>>(second));
  const auto& after = *std::get<std::shared_ptr<const RuleSet>>(second);
  REQUIRE(after.size() == 4);
  CHECK(after.rule(0).number == 0);
  CHECK(after.rule(1).anchor == "a");
  CHECK(after.rule(1).number == 0);
  CHECK(after.rule(2).number == 1);
  CHECK(after.rule(3).anchor.empty());
  CHECK(after.rule(3).number == 2);  // after `anchor "a"`, @1
  REQUIRE(after.anchors().size() == 1);
  CHECK(after.anchors()[0].number == 1);
  CHECK(after.anchors()[0].position == 1);
  CHECK(after.anchors()[0].text == "anchor \"a\" all");
  CHECK(after.rule(1).anchor_number == 1);
  CHECK(after.rule(3).stats == before.rule(1).stats);  // `pass out all`, two places further on
  CHECK(after.rule(3).stats->packets == 7);
  CHECK(after.rule(1).stats != before.rule(1).stats);
  CHECK(after.rule(0).stats == before.rule(0).stats);
  // A state's creator names its anchor in logs only while it is a rule of the running set.
  CHECK(after.holds(&after.rule(3)));
  CHECK_FALSE(after.holds(&before.rule(0)));
  CHECK_FALSE(after.holds(nullptr));
}

}  // namespace
}  // namespace pairwall::engine::rules
