// Rule parser: every construct of the pf.conf subset into the AST, and the exact message (file,
// line, column, text) for each kind of mistake.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/engine/rules/lexer.h"
#include "daemon/engine/rules/parser.h"
#include "daemon/engine/timeouts.h"
#include "tests/unit/support/temp_dir.h"

namespace {

using namespace pairwall::engine;
using namespace pairwall::engine::rules;

RuleFile parse_ok(std::string_view text) {
  auto r = parse_rules(text, "t.conf");
  if (auto* e = std::get_if<RuleError>(&r)) FAIL("unexpected error: " << e->to_string());
  return std::get<RuleFile>(std::move(r));
}

std::string parse_error(std::string_view text) {
  auto r = parse_rules(text, "t.conf");
  if (std::holds_alternative<RuleFile>(r)) FAIL("parsed without error: " << text);
  return std::get<RuleError>(r).to_string();
}

IpPrefix prefix(std::string_view text) {
  auto p = parse_prefix(text);
  REQUIRE(p);
  return *p;
}

std::string render(const std::vector<InterfaceMatch>& ifs) {
  std::string s;
  for (const auto& i : ifs) s += (s.empty() ? "" : ",") + std::string(i.negated ? "!" : "") + i.name;
  return s;
}

std::string render(const PortMatch& p) {
  using Op = PortMatch::Op;
  const std::string lo = std::to_string(p.low);
  const std::string hi = std::to_string(p.high);
  switch (p.op) {
    case Op::Eq:
      return "=" + lo;
    case Op::Ne:
      return "!=" + lo;
    case Op::Lt:
      return "<" + lo;
    case Op::Le:
      return "<=" + lo;
    case Op::Gt:
      return ">" + lo;
    case Op::Ge:
      return ">=" + lo;
    case Op::RangeInclusive:
      return lo + ":" + hi;
    case Op::RangeExclusive:
      return lo + "><" + hi;
    case Op::Outside:
      return lo + "<>" + hi;
  }
  return "?";
}

std::string render(const Endpoint& e) {
  std::string s;
  for (const auto& a : e.addresses) {
    s += s.empty() ? "" : ",";
    if (a.negated) s += "!";
    switch (a.kind) {
      case AddressElement::Kind::Any:
        s += "any";
        break;
      case AddressElement::Kind::Table:
        s += "<" + a.table + ">";
        break;
      case AddressElement::Kind::Prefix:
        s += to_string(a.prefix);
        break;
      case AddressElement::Kind::Range:
        s += to_string(a.prefix) + "-" + to_string(IpPrefix{a.prefix.family, a.last, a.prefix.length});
        break;
      case AddressElement::Kind::Interface:
        s += "if:" + a.table + (a.networks ? ":network" : "");
        break;
    }
  }
  if (s.empty()) s = "*";
  if (!e.ports.empty()) {
    s += " port ";
    for (std::size_t i = 0; i < e.ports.size(); ++i) s += (i ? "," : "") + render(e.ports[i]);
  }
  return s;
}

// One line per rule, every field, so a table of expected strings checks the whole AST node.
std::string render(const FilterRule& r) {
  std::ostringstream o;
  o << (r.action == Action::Pass ? "pass" : "block");
  switch (r.reply) {
    case BlockReply::Drop:
      break;
    case BlockReply::ReturnRst:
      o << " rst";
      if (r.rst_ttl != 0) o << "(ttl=" << int{r.rst_ttl} << ")";
      break;
    case BlockReply::ReturnIcmp:
      o << (r.reply_rst_for_tcp ? " rst/icmp" : " icmp");
      break;
  }
  if (r.direction == Direction::In) o << " in";
  if (r.direction == Direction::Out) o << " out";
  if (r.log == LogMode::First) o << " log";
  if (r.log == LogMode::All) o << " log(all)";
  if (r.quick) o << " quick";
  if (!r.interfaces.empty()) o << " on " << render(r.interfaces);
  if (r.family) o << (*r.family == Family::V4 ? " inet" : " inet6");
  if (!r.protocols.empty()) {
    o << " proto ";
    for (std::size_t i = 0; i < r.protocols.size(); ++i) o << (i ? "," : "") << int(r.protocols[i]);
  }
  o << " from " << render(r.from) << " to " << render(r.to);
  if (r.flags) o << " flags " << int(r.flags->set) << "/" << int(r.flags->mask);
  if (!r.icmp_types.empty()) {
    o << (r.icmp6_types ? " icmp6" : " icmp");
    for (const auto& t : r.icmp_types) o << " " << int(t.type) << ":" << t.code;
  }
  o << (!r.state.keep_state ? " nostate"
        : r.state.modulate  ? " modulate"
        : r.state.synproxy  ? " synproxy"
                            : " keep");
  if (r.state.max_states) o << " max=" << r.state.max_states;
  if (r.state.max_src_states) o << " max-src-states=" << r.state.max_src_states;
  if (r.state.max_src_nodes) o << " max-src-nodes=" << r.state.max_src_nodes;
  if (r.state.max_src_conn) o << " max-src-conn=" << r.state.max_src_conn;
  if (r.state.max_src_conn_rate)
    o << " max-src-conn-rate=" << r.state.max_src_conn_rate << "/" << r.state.max_src_conn_rate_seconds;
  if (r.state.source_track_global) o << " source-track=global";
  if (r.state.if_bound) o << (*r.state.if_bound ? " if-bound" : " floating");
  for (const auto& [name, seconds] : r.state.timeouts) o << " " << name << "=" << seconds;
  return o.str();
}

std::string render(const TranslationRule& r) {
  std::ostringstream o;
  if (r.negate_translation) o << "no ";
  o << (r.kind == TranslationRule::Kind::Nat   ? "nat"
        : r.kind == TranslationRule::Kind::Rdr ? "rdr"
                                               : "binat");
  if (r.pass) o << " pass";
  o << " on " << render(r.interfaces);
  if (r.family) o << (*r.family == Family::V4 ? " inet" : " inet6");
  if (!r.protocols.empty()) {
    o << " proto ";
    for (std::size_t i = 0; i < r.protocols.size(); ++i) o << (i ? "," : "") << int(r.protocols[i]);
  }
  o << " from " << render(r.from) << " to " << render(r.to);
  for (std::size_t i = 0; i < r.targets.size(); ++i) o << (i ? ", " : " -> ") << to_string(r.targets[i]);
  if (!r.target_table.empty()) o << " -> <" << r.target_table << ">";
  if (r.target_port)
    o << " port "
      << (r.target_port_follows ? std::to_string(r.target_port->low) + ":*" : render(*r.target_port));
  if (r.pool) o << " pool " << int(*r.pool);
  if (!r.hash_key.empty()) o << (r.hash_key_is_text ? " key-text " : " key ") << r.hash_key;
  if (r.static_port) o << " static-port";
  return o.str();
}

std::string render(const ScrubRule& r) {
  std::ostringstream o;
  o << (r.negated ? "no scrub" : "scrub");
  if (r.direction == Direction::In) o << " in";
  if (r.direction == Direction::Out) o << " out";
  if (!r.interfaces.empty()) o << " on " << render(r.interfaces);
  if (r.family) o << (*r.family == Family::V4 ? " inet" : " inet6");
  if (!r.protocols.empty()) {
    o << " proto ";
    for (std::size_t i = 0; i < r.protocols.size(); ++i) o << (i ? "," : "") << int(r.protocols[i]);
  }
  o << " from " << render(r.from) << " to " << render(r.to);
  if (r.fragment_reassemble) o << " reassemble";
  if (r.reassemble_tcp) o << " reassemble-tcp";
  if (r.max_mss) o << " mss=" << r.max_mss;
  if (r.min_ttl) o << " ttl=" << int(r.min_ttl);
  if (r.random_id) o << " random-id";
  if (r.no_df) o << " no-df";
  if (r.set_tos) o << " tos=" << int(*r.set_tos);
  return o.str();
}

struct Case {
  const char* text;
  const char* expected;
};

}  // namespace

TEST_CASE("lexer: tokens, operators, tables and positions") {
  Lexer lex("pass in\t{ a, b } <tbl> ! != < <= > >= >< <> : = -> ( ) \"q s\" 1000:2000 S/SA\n$");
  struct Want {
    TokenKind kind;
    const char* text;
    uint32_t column;
  };
  const std::vector<Want> want = {
      {TokenKind::Word, "pass", 1},
      {TokenKind::Word, "in", 6},
      {TokenKind::LBrace, "{", 9},
      {TokenKind::Word, "a", 11},
      {TokenKind::Comma, ",", 12},
      {TokenKind::Word, "b", 14},
      {TokenKind::RBrace, "}", 16},
      {TokenKind::Table, "tbl", 18},
      {TokenKind::Bang, "!", 24},
      {TokenKind::Ne, "!=", 26},
      {TokenKind::Lt, "<", 29},
      {TokenKind::Le, "<=", 31},
      {TokenKind::Gt, ">", 34},
      {TokenKind::Ge, ">=", 36},
      {TokenKind::RangeExclusive, "><", 39},
      {TokenKind::Outside, "<>", 42},
      {TokenKind::Colon, ":", 45},
      {TokenKind::Eq, "=", 47},
      {TokenKind::Arrow, "->", 49},
      {TokenKind::LParen, "(", 52},
      {TokenKind::RParen, ")", 54},
      {TokenKind::String, "q s", 56},
      {TokenKind::Word, "1000:2000", 62},
      {TokenKind::Word, "S/SA", 72},
      {TokenKind::Newline, "", 76},
  };
  for (const auto& w : want) {
    Token t = lex.next();
    INFO("expected '" << w.text << "' at column " << w.column);
    CHECK(t.kind == w.kind);
    CHECK(t.text == w.text);
    CHECK(t.line == 1);
    CHECK(t.column == w.column);
  }
  // `$` with no name after it, on line 2.
  try {
    lex.next();
    FAIL("no error for a bare '$'");
  } catch (const SyntaxError& e) {
    CHECK(e.line() == 2);
    CHECK(e.column() == 1);
    CHECK(std::string(e.what()) == "expected a macro name after '$'");
  }
}

TEST_CASE("lexer: comments, continuations, CRLF and arrows inside words") {
  Lexer lex("a # comment { \"\n b \\  \r\n c\r\nx->y -1");
  auto t = lex.next();
  CHECK((t.kind == TokenKind::Word && t.text == "a" && t.line == 1 && t.column == 1));
  t = lex.next();
  CHECK((t.kind == TokenKind::Newline && t.line == 1 && t.column == 16));
  t = lex.next();
  CHECK((t.kind == TokenKind::Word && t.text == "b" && t.line == 2 && t.column == 2));
  t = lex.next();  // the continuation joined line 3 to line 2: no newline
  CHECK((t.kind == TokenKind::Word && t.text == "c" && t.line == 3 && t.column == 2));
  CHECK(lex.next().kind == TokenKind::Newline);
  t = lex.next();
  CHECK((t.kind == TokenKind::Word && t.text == "x" && t.line == 4 && t.column == 1));
  t = lex.next();
  CHECK((t.kind == TokenKind::Arrow && t.column == 2));
  t = lex.next();
  CHECK((t.kind == TokenKind::Word && t.text == "y" && t.column == 4));
  t = lex.next();
  CHECK((t.kind == TokenKind::Word && t.text == "-1" && t.column == 6));
  t = lex.next();
  CHECK((t.kind == TokenKind::End && t.line == 4 && t.column == 8));
}

// pfctl's lexer joins a line ending in a backslash to the next one before it looks for a comment's
// end, so such a comment runs on over the next line: the rule there is not in force.
TEST_CASE("lexer: a comment ending in a backslash goes on over the next line as pfctl's") {
  const RuleFile f = parse_ok(
      "block in all\n"
      "pass in quick proto tcp to port 22   # ssh, and below \\\n"
      "pass in quick proto tcp to port 23\n"
      "# CRLF alike \\\r\n"
      "pass in quick proto tcp to port 24\r\n"
      "# a blank after the backslash ends it, as pfctl's \\ \n"
      "pass in quick proto tcp to port 25\n"
      "# and so does a backslash before it \\\\\n"
      "pass in quick proto tcp to port 26\n");
  REQUIRE(f.filter_rules.size() == 4);
  CHECK(render(f.filter_rules[1]) == "pass in quick proto 6 from * to * port =22 keep");
  CHECK(render(f.filter_rules[2]) == "pass in quick proto 6 from * to * port =25 keep");
  CHECK(f.filter_rules[2].location.line == 7);
  CHECK(render(f.filter_rules[3]) == "pass in quick proto 6 from * to * port =26 keep");
  CHECK(parse_error("# one \\\n two \\\nthree\npass foo\n") ==
        "t.conf:4:6: expected 'from', 'to', 'all', a rule option or end of line, got 'foo'");
}

// pfctl's lexer quotes with either mark, and drops a line break inside the quotes: the string, and
// the statement, go on over the next line.
TEST_CASE("lexer: single and double quotes, and strings over several lines, as pfctl's") {
  const RuleFile f = parse_ok(
      "ext_if = 'em0'\n"
      "web = \"{ 80,\n"
      "        443 }\"\n"
      "pass in on $ext_if proto tcp to port $web label 'it\\'s \"quoted\"'\n"
      "pass in on \"em1\" proto tcp to port 22 label \"say \\\"hi\\\"\"\n");
  REQUIRE(f.filter_rules.size() == 2);
  CHECK(render(f.filter_rules[0]) == "pass in on em0 proto 6 from * to * port =80,=443 keep");
  CHECK(f.filter_rules[0].location.line == 4);
  CHECK(f.filter_rules[0].label == "it's \"quoted\"");
  CHECK(f.filter_rules[1].label == "say \"hi\"");
  CHECK(f.filter_rules[1].location.line == 5);

  Lexer lex("a = 'x \"y\"' \"p\nq\" z");
  CHECK(lex.next().text == "a");
  CHECK(lex.next().kind == TokenKind::Eq);
  Token t = lex.next();
  CHECK((t.kind == TokenKind::String && t.text == "x \"y\"" && t.column == 5));
  t = lex.next();
  CHECK((t.kind == TokenKind::String && t.text == "pq" && t.line == 1 && t.column == 13));
  t = lex.next();
  CHECK((t.kind == TokenKind::Word && t.text == "z" && t.line == 2 && t.column == 4));

  CHECK(parse_error("ext_if = 'veth0\npass all") ==
        "t.conf:1:10: unterminated quoted string: no closing ' before the end of the file");
}

// As pfctl's symset(): a macro defined again takes its new value from there on, the rules before
// keep the old one, and a macro built from it outside quotes (`"{" $svc "24 }"`) keeps the value
// it had then.
TEST_CASE("lexer: a macro defined again takes its new value from there on") {
  const RuleFile f = parse_ok(
      "svc = \"22\"\n"
      "pass in proto tcp to port $svc\n"
      "svc = \"23\"\n"
      "pass in proto tcp to port $svc\n"
      "svcs = \"{\" $svc \"24 }\"\n"
      "svc = \"25\"\n"
      "pass in proto tcp to port $svcs\n");
  REQUIRE(f.filter_rules.size() == 3);
  CHECK(render(f.filter_rules[0]) == "pass in proto 6 from * to * port =22 keep");
  CHECK(render(f.filter_rules[1]) == "pass in proto 6 from * to * port =23 keep");
  CHECK(render(f.filter_rules[2]) == "pass in proto 6 from * to * port =23,=24 keep");
}

TEST_CASE("lexer: macro expansion re-reads the value at the position of the '$'") {
  Lexer lex("pass $ports x");
  Token name;
  name.kind = TokenKind::Word;
  name.text = "ports";
  name.line = 1;
  name.column = 1;
  lex.define_macro(name, "{ 22 80 }");
  CHECK(lex.next().text == "pass");
  for (const char* want : {"{", "22", "80", "}"}) {
    Token t = lex.next();
    CHECK(t.text == want);
    CHECK(t.from_macro);
    CHECK(t.column == 6);
  }
  Token x = lex.next();
  CHECK((x.text == "x" && !x.from_macro && x.column == 13));

  // Word characters after the name join its value's last word, but an arrow does not, as it
  // ends a word written out: `$lan->$ext`.
  Lexer arrow("$lan->$lan:network");
  Token lan = name;
  lan.text = "lan";
  arrow.define_macro(lan, "em1");
  for (const char* want : {"em1", "->", "em1:network"}) CHECK(arrow.next().text == want);
}

TEST_CASE("the DESIGN.md sample rule set parses completely") {
  const char* text = R"(ext_if = "veth-ext"                      # macros, $ext_if
table <blocked> { 192.0.2.0/24, 2001:db8::/32 }
set limit states 1000000
set timeout { tcp.established 86400, udp.first 60, udp.multiple 120, icmp.error 10 }
scrub in all fragment reassemble max-mss 1440
nat on $ext_if from 10.1.0.0/16 to any -> 203.0.113.1
rdr on $ext_if proto tcp to 203.0.113.1 port 80 -> 10.2.0.10 port 8080
block log all
block in quick from <blocked>
pass in on $ext_if proto tcp to 10.2.0.10 port { 80 443 } flags S/SA keep state (max 10000)
pass inet6 proto icmp6 all
pass out all
)";
  const RuleFile f = parse_ok(text);
  CHECK(f.file == "t.conf");
  REQUIRE(f.tables.size() == 1);
  CHECK(f.tables[0].name == "blocked");
  CHECK(f.tables[0].entries == std::vector<IpPrefix>{prefix("192.0.2.0/24"), prefix("2001:db8::/32")});
  CHECK((f.tables[0].location.line == 2 && f.tables[0].location.column == 7));
  CHECK(f.settings.limit_states == 1000000u);
  CHECK(!f.settings.limit_frags);
  CHECK(f.settings.timeouts ==
        std::map<std::string, uint32_t>{
            {"tcp.established", 86400}, {"udp.first", 60}, {"udp.multiple", 120}, {"icmp.error", 10}});
  CHECK(f.settings.timeout_locations.at("udp.first").line == 4);
  CHECK(f.settings.timeout_locations.at("udp.first").column == 38);
  REQUIRE(f.scrub_rules.size() == 1);
  CHECK(render(f.scrub_rules[0]) == "scrub in from * to * reassemble mss=1440");
  REQUIRE(f.translation_rules.size() == 2);
  CHECK(render(f.translation_rules[0]) == "nat on veth-ext from 10.1.0.0/16 to any -> 203.0.113.1/32");
  CHECK(render(f.translation_rules[1]) ==
        "rdr on veth-ext proto 6 from * to 203.0.113.1/32 port =80 -> 10.2.0.10/32 port =8080");
  REQUIRE(f.filter_rules.size() == 5);
  const std::vector<std::string> want = {
      "block log from * to * nostate",
      "block in quick from <blocked> to * nostate",
      "pass in on veth-ext proto 6 from * to 10.2.0.10/32 port =80,=443 flags 2/18 keep max=10000",
      "pass inet6 proto 58 from * to * keep",
      "pass out from * to * keep",
  };
  for (std::size_t i = 0; i < want.size(); ++i) {
    CHECK(render(f.filter_rules[i]) == want[i]);
    CHECK(f.filter_rules[i].location.line == 8 + i);
    CHECK(f.filter_rules[i].location.column == 1);
    CHECK(f.filter_rules[i].location.file == "t.conf");
  }
}

TEST_CASE("filter rules: every construct into the AST") {
  const Case cases[] = {
      {"pass all", "pass from * to * keep"},
      {"block", "block from * to * nostate"},
      {"block drop in all", "block in from * to * nostate"},
      {"block return-rst in proto tcp all", "block rst in proto 6 from * to * nostate"},
      {"block return-rst (ttl 64) in proto tcp all", "block rst(ttl=64) in proto 6 from * to * nostate"},
      {"block return-rst(ttl 1) proto tcp all", "block rst(ttl=1) proto 6 from * to * nostate"},
      {"block return-icmp out proto udp all", "block icmp out proto 17 from * to * nostate"},
      {"block return all", "block rst/icmp from * to * nostate"},
      {"pass in log quick on em0 all", "pass in log quick on em0 from * to * keep"},
      {"pass in log (all) quick on em0 all", "pass in log(all) quick on em0 from * to * keep"},
      {"pass quick on sync0 proto pfsync all", "pass quick on sync0 proto 240 from * to * keep"},
      {"pass in quick log on em0 all", "pass in log quick on em0 from * to * keep"},
      {"pass out on !em0 all", "pass out on !em0 from * to * keep"},
      {"pass on { em0, em1 !em2 } all", "pass on em0,em1,!em2 from * to * keep"},
      {"pass on \"eth-0.10\" all", "pass on eth-0.10 from * to * keep"},
      {"pass inet all", "pass inet from * to * keep"},
      {"pass proto { tcp udp, 47 } all", "pass proto 6,17,47 from * to * keep"},
      {"pass proto ipv6-icmp all", "pass proto 58 from * to * keep"},
      {"pass proto 255", "pass proto 255 from * to * keep"},
      {"pass from 10.0.0.0/8", "pass from 10.0.0.0/8 to * keep"},
      {"pass to 192.0.2.1", "pass from * to 192.0.2.1/32 keep"},
      {"pass from any to any", "pass from any to any keep"},
      {"pass from ! 10.0.0.0/8 to !<t>", "pass from !10.0.0.0/8 to !<t> keep"},
      {"pass from { 10.0.0.0/8, !10.1.0.0/16 <t> any }",
       "pass from 10.0.0.0/8,!10.1.0.0/16,<t>,any to * keep"},
      {"pass inet6 from 2001:db8::/32 to ::1", "pass inet6 from 2001:db8::/32 to ::1/128 keep"},
      {"pass from ::/0 to 0.0.0.0/0", "pass from ::/0 to 0.0.0.0/0 keep"},
      {"pass proto tcp from any port 53 to any port ssh",
       "pass proto 6 from any port =53 to any port =22 keep"},
      {"pass proto tcp to port { http https, imaps pop3s submission }",
       "pass proto 6 from * to * port =80,=443,=993,=995,=587 keep"},
      {"pass proto tcp to port { ftp telnet smtp domain www pop3 ntp imap snmp bgp ldap mysql postgresql rdp "
       "}",
       "pass proto 6 from * to * port =21,=23,=25,=53,=80,=110,=123,=143,=161,=179,=389,=3306,=5432,=3389 "
       "keep"},
      {"pass proto tcp to port = 80", "pass proto 6 from * to * port =80 keep"},
      {"pass proto tcp to port != 80", "pass proto 6 from * to * port !=80 keep"},
      {"pass proto tcp to port < 1024", "pass proto 6 from * to * port <1024 keep"},
      {"pass proto tcp to port <1024", "pass proto 6 from * to * port <1024 keep"},
      {"pass proto tcp to port <= 1024", "pass proto 6 from * to * port <=1024 keep"},
      // A service name right after '<' is the operator's operand, not a table (pf's grammar).
      {"pass proto tcp to port <ssh", "pass proto 6 from * to * port <22 keep"},
      {"pass proto tcp from port { <ssh, >=https } to port <=http",
       "pass proto 6 from * port <22,>=443 to * port <=80 keep"},
      {"pass proto tcp to port > 1023", "pass proto 6 from * to * port >1023 keep"},
      {"pass proto tcp to port >= 1024", "pass proto 6 from * to * port >=1024 keep"},
      {"pass proto tcp to port 1000:2000", "pass proto 6 from * to * port 1000:2000 keep"},
      {"pass proto tcp to port 1000 : 2000", "pass proto 6 from * to * port 1000:2000 keep"},
      {"pass proto tcp to port 1000 >< 2000", "pass proto 6 from * to * port 1000><2000 keep"},
      {"pass proto tcp to port 1000 <> 2000", "pass proto 6 from * to * port 1000<>2000 keep"},
      {"pass proto tcp to port 1000 >< 1002", "pass proto 6 from * to * port 1000><1002 keep"},
      {"pass proto tcp to port { 22, > 1023, 0 65535 }",
       "pass proto 6 from * to * port =22,>1023,=0,=65535 keep"},
      {"pass proto tcp all flags S/SA", "pass proto 6 from * to * flags 2/18 keep"},
      {"pass proto tcp all flags /SFRA", "pass proto 6 from * to * flags 0/23 keep"},
      {"pass proto tcp all flags FSRPAUEW/FSRPAUEW", "pass proto 6 from * to * flags 255/255 keep"},
      {"pass proto tcp all flags any", "pass proto 6 from * to * keep"},
      {"pass proto icmp all icmp-type echoreq", "pass proto 1 from * to * icmp 8:-1 keep"},
      {"pass proto icmp all icmp-type unreach code 3", "pass proto 1 from * to * icmp 3:3 keep"},
      {"pass proto icmp all icmp-type { routersol routeradv timereq maskrep }",
       "pass proto 1 from * to * icmp 10:-1 9:-1 13:-1 18:-1 keep"},
      {"pass proto icmp6 all icmp6-type { redir listqry wrureq mtrace }",
       "pass proto 58 from * to * icmp6 137:-1 130:-1 139:-1 201:-1 keep"},
      // MLDv2's report (RFC 3810 5.2), by pfctl's name for it.
      {"pass proto icmp6 all icmp6-type { listenrep listenrepv2 listendone }",
       "pass proto 58 from * to * icmp6 131:-1 143:-1 132:-1 keep"},
      {"pass proto icmp all icmp-type { echorep, timex paramprob redir squench 42 code 0 }",
       "pass proto 1 from * to * icmp 0:-1 11:-1 12:-1 5:-1 4:-1 42:0 keep"},
      {"pass inet6 proto icmp6 all icmp6-type { echoreq echorep unreach toobig timex paramprob }",
       "pass inet6 proto 58 from * to * icmp6 128:-1 129:-1 1:-1 2:-1 3:-1 4:-1 keep"},
      {"pass proto icmp6 all icmp6-type { neighbrsol neighbradv routersol routeradv 255 code 255 }",
       "pass proto 58 from * to * icmp6 135:-1 136:-1 133:-1 134:-1 255:255 keep"},
      // Codes by pfctl's names, each of its type (icmp_code, icmp6_code).
      {"pass inet proto icmp all icmp-type unreach code needfrag",
       "pass inet proto 1 from * to * icmp 3:4 keep"},
      {"pass proto icmp all icmp-type { unreach code filter-prohib, redir code redir-tos-host, routeradv "
       "code "
       "common-adv, timex code reassemb, paramprob code badlen, photuris code decrypt-fail }",
       "pass proto 1 from * to * icmp 3:13 5:3 9:16 11:1 12:2 40:3 keep"},
      {"pass proto icmp6 all icmp6-type { unreach code admin-unr, unreach code port-unr, timex code transit, "
       "paramprob code nxthdr, redir code redirrouter }",
       "pass proto 58 from * to * icmp6 1:1 1:4 3:0 4:1 137:1 keep"},
      {"pass all keep state", "pass from * to * keep"},
      {"pass all no state", "pass from * to * nostate"},
      {"pass all modulate state", "pass from * to * modulate"},
      {"pass in proto tcp to port 80 synproxy state (max 100)",
       "pass in proto 6 from * to * port =80 synproxy max=100"},
      {"block all no state", "block from * to * nostate"},
      {"pass proto tcp all keep state (max 100, tcp.established 3600 tcp.closing 60)",
       "pass proto 6 from * to * keep max=100 tcp.closing=60 tcp.established=3600"},
      {"pass all modulate state (udp.first 5)", "pass from * to * modulate udp.first=5"},
      // Said or not, as written: `set state-policy` decides for the rules that say neither.
      {"pass all keep state (floating)", "pass from * to * keep floating"},
      {"pass proto tcp all modulate state (max 5, floating)",
       "pass proto 6 from * to * modulate max=5 floating"},
      {"pass in on em0 all keep state (if-bound)", "pass in on em0 from * to * keep if-bound"},
      {"pass all keep state (max 10, if-bound)", "pass from * to * keep max=10 if-bound"},
      {"pass proto tcp all keep state flags S/SA", "pass proto 6 from * to * flags 2/18 keep"},
      {"block return-rst in log quick on em0 inet proto tcp from <bad> port > 1023 to 10.0.0.1 port 22",
       "block rst in log quick on em0 inet proto 6 from <bad> port >1023 to 10.0.0.1/32 port =22 nostate"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    const RuleFile f = parse_ok(c.text);
    REQUIRE(f.filter_rules.size() == 1);
    CHECK(render(f.filter_rules[0]) == c.expected);
  }
}

TEST_CASE("address elements record where they were written") {
  const RuleFile f = parse_ok("pass from { 10.0.0.0/8,\n  !<t> } to any");
  const auto& a = f.filter_rules[0].from.addresses;
  REQUIRE(a.size() == 2);
  CHECK((a[0].location.line == 1 && a[0].location.column == 13));
  CHECK((a[1].location.line == 2 && a[1].location.column == 3));
  const auto& to = f.filter_rules[0].to.addresses;
  REQUIRE(to.size() == 1);
  CHECK((to[0].location.line == 2 && to[0].location.column == 13));
}

TEST_CASE("translation rules") {
  const Case cases[] = {
      {"nat on em0 from 10.0.0.0/8 to any -> 192.0.2.1", "nat on em0 from 10.0.0.0/8 to any -> 192.0.2.1/32"},
      {"nat pass on em0 inet from 10.0.0.0/8 -> 192.0.2.0/28 port 1024:65535",
       "nat pass on em0 inet from 10.0.0.0/8 to * -> 192.0.2.0/28 port 1024:65535"},
      {"nat on { em0 em1 } proto { tcp udp } from 10.0.0.0/8 port 1000 -> 192.0.2.1 port 2000 : 3000",
       "nat on em0,em1 proto 6,17 from 10.0.0.0/8 port =1000 to * -> 192.0.2.1/32 port 2000:3000"},
      {"rdr on em0 proto tcp to 192.0.2.1 port http -> 10.0.0.5 port 8080",
       "rdr on em0 proto 6 from * to 192.0.2.1/32 port =80 -> 10.0.0.5/32 port =8080"},
      {"rdr on em0 proto udp from any to 192.0.2.1 port 5000:5010 -> 10.0.0.5",
       "rdr on em0 proto 17 from any to 192.0.2.1/32 port 5000:5010 -> 10.0.0.5/32"},
      {"rdr on em0 proto tcp to 192.0.2.1 port 5000:5010 -> 10.0.0.5 port 6000:*",
       "rdr on em0 proto 6 from * to 192.0.2.1/32 port 5000:5010 -> 10.0.0.5/32 port 6000:*"},
      {"rdr on em0 inet6 proto tcp to 2001:db8::1 port 443 -> 2001:db8:1::5",
       "rdr on em0 inet6 proto 6 from * to 2001:db8::1/128 port =443 -> 2001:db8:1::5/128"},
      {"binat on em0 from 10.0.0.5 to any -> 192.0.2.5",
       "binat on em0 from 10.0.0.5/32 to any -> 192.0.2.5/32"},
      {"no nat on em0 from 10.0.0.0/8 to 10.0.0.0/8", "no nat on em0 from 10.0.0.0/8 to 10.0.0.0/8"},
      {"no rdr on !em0 proto tcp from 10.1.0.0/16 to any port 80",
       "no rdr on !em0 proto 6 from 10.1.0.0/16 to any port =80"},
      {"no binat on em0 all", "no binat on em0 from * to *"},
      // Pools: a list, pool types (as pf: 3 is round-robin), keys, static-port.
      {"rdr on em0 proto tcp to 192.0.2.1 port 80 -> { 10.0.0.5, 10.0.0.6 10.0.1.0/30 } port 8080",
       "rdr on em0 proto 6 from * to 192.0.2.1/32 port =80 -> 10.0.0.5/32, 10.0.0.6/32, 10.0.1.0/30 port "
       "=8080"},
      {"nat on em0 from 10.0.0.0/8 -> { 192.0.2.1, 192.0.2.2 } round-robin",
       "nat on em0 from 10.0.0.0/8 to * -> 192.0.2.1/32, 192.0.2.2/32 pool 3"},
      {"nat on em0 from 10.0.0.0/8 -> 192.0.2.0/28 bitmask",
       "nat on em0 from 10.0.0.0/8 to * -> 192.0.2.0/28 pool 0"},
      {"nat on em0 from 10.0.0.0/8 -> 192.0.2.0/28 random static-port",
       "nat on em0 from 10.0.0.0/8 to * -> 192.0.2.0/28 pool 1 static-port"},
      {"nat on em0 from 10.0.0.0/8 -> 192.0.2.0/28 static-port source-hash",
       "nat on em0 from 10.0.0.0/8 to * -> 192.0.2.0/28 pool 2 static-port"},
      {"rdr on em0 proto tcp to 192.0.2.1 -> 10.0.0.0/29 source-hash 0x0123456789abcdef0123456789ABCDEF",
       "rdr on em0 proto 6 from * to 192.0.2.1/32 -> 10.0.0.0/29 pool 2 key "
       "0x0123456789abcdef0123456789ABCDEF"},
      {"rdr on em0 proto tcp to 192.0.2.1 port 80 -> <web> port 8080",
       "rdr on em0 proto 6 from * to 192.0.2.1/32 port =80 -> <web> port =8080"},
      {"nat on em0 from 10.0.0.0/8 -> <outside> round-robin static-port",
       "nat on em0 from 10.0.0.0/8 to * -> <outside> pool 3 static-port"},
      {"rdr on em0 proto tcp to 192.0.2.1 -> 10.0.0.0/29 source-hash key \"web pool\"",
       "rdr on em0 proto 6 from * to 192.0.2.1/32 -> 10.0.0.0/29 pool 2 key-text web pool"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    const RuleFile f = parse_ok(c.text);
    REQUIRE(f.translation_rules.size() == 1);
    CHECK(render(f.translation_rules[0]) == c.expected);
    CHECK(f.translation_rules[0].location.column == 1);
    CHECK(f.filter_rules.empty());
  }
}

TEST_CASE("scrub rules, with options bare or in parentheses") {
  const Case cases[] = {
      {"scrub", "scrub from * to *"},
      {"scrub in all", "scrub in from * to *"},
      {"scrub out on em0 inet6 all no-df random-id", "scrub out on em0 inet6 from * to * random-id no-df"},
      {"scrub in on { em0 em1 } from 10.0.0.0/8 to any min-ttl 5 max-mss 1400",
       "scrub in on em0,em1 from 10.0.0.0/8 to any mss=1400 ttl=5"},
      {"scrub in all (max-mss 1440)", "scrub in from * to * mss=1440"},
      {"scrub all reassemble tcp", "scrub from * to * reassemble-tcp"},
      {"scrub on ext0 all fragment reassemble (reassemble tcp, no-df)",
       "scrub on ext0 from * to * reassemble reassemble-tcp no-df"},
      {"scrub in all fragment reassemble (no-df, random-id min-ttl 255, max-mss 65535)",
       "scrub in from * to * reassemble mss=65535 ttl=255 random-id no-df"},
      // `proto` as in filter rules, after the family (pf.conf's scrub rule).
      {"scrub in on ext0 proto tcp all max-mss 1440", "scrub in on ext0 proto 6 from * to * mss=1440"},
      {"scrub out inet6 proto { tcp, udp 132 } from 2001:db8::/32 (min-ttl 3)",
       "scrub out inet6 proto 6,17,132 from 2001:db8::/32 to * ttl=3"},
      // pf's exemption from the scrub rules after it.
      {"no scrub on lo0 all", "no scrub on lo0 from * to *"},
      // pfctl's `log`: what normalization drops is logged whatever it says.
      {"scrub in log on em0 all no-df", "scrub in on em0 from * to * no-df"},
      // pf's set-tos, by pfctl's names or as a number.
      {"scrub out on em0 all set-tos lowdelay", "scrub out on em0 from * to * tos=16"},
      {"scrub all (no-df, set-tos 0xb8)", "scrub from * to * no-df tos=184"},
      {"scrub all set-tos 40", "scrub from * to * tos=40"},
      {"scrub all set-tos ef", "scrub from * to * tos=184"},
      {"scrub all set-tos af11", "scrub from * to * tos=40"},
      {"scrub all set-tos af43", "scrub from * to * tos=152"},
      {"scrub all set-tos cs0", "scrub from * to * tos=0"},
      {"scrub all set-tos cs7", "scrub from * to * tos=224"},
      {"scrub all set-tos throughput", "scrub from * to * tos=8"},
      {"scrub all set-tos reliability", "scrub from * to * tos=4"},
      {"no scrub in inet proto udp from 10.0.0.0/8 to any",
       "no scrub in inet proto 17 from 10.0.0.0/8 to any"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    const RuleFile f = parse_ok(c.text);
    REQUIRE(f.scrub_rules.size() == 1);
    CHECK(render(f.scrub_rules[0]) == c.expected);
  }
}

TEST_CASE("tables: v4, v6, negated entries, options, lists over several lines") {
  // An entry listed twice is held once, as pf holds it; listed again the other way, the first stays.
  const RuleFile f = parse_ok(
      "table <a> persist const { 10.0.0.0/8, !10.1.0.0/16\n"
      "   192.0.2.1, 2001:db8::/32 , 10.0.0.0/8\n"
      "   !2001:db8:1::1 !10.1.0.0/16 !10.0.0.0/8 2001:db8:1::1 }\n"
      "table <empty> persist\n"
      "table <_x.y-z> {}\n");
  REQUIRE(f.tables.size() == 3);
  CHECK(f.tables[0].name == "a");
  CHECK(f.tables[0].entries ==
        std::vector<IpPrefix>{prefix("10.0.0.0/8"), prefix("192.0.2.1/32"), prefix("2001:db8::/32")});
  CHECK(f.tables[0].negated_entries ==
        std::vector<IpPrefix>{prefix("10.1.0.0/16"), prefix("2001:db8:1::1/128")});
  CHECK(f.tables[1].name == "empty");
  CHECK(f.tables[1].entries.empty());
  CHECK((f.tables[1].location.line == 4 && f.tables[1].location.column == 7));
  CHECK(f.tables[2].name == "_x.y-z");
}

TEST_CASE("tables: options before and after the list, in any order, as pfctl takes them") {
  const RuleFile f = parse_ok(
      "table <a> { 10.0.0.0/8 } persist\n"
      "table <b> { 10.0.0.0/8 } const persist\n"
      "table <c> persist {\n  192.0.2.1 } const\n"
      "table <d> {} file \"d.txt\" persist counters\n"
      "table <e> const file \"e.txt\" { !10.1.0.0/16 } file \"f.txt\"\n");
  REQUIRE(f.tables.size() == 5);
  CHECK(f.tables[0].entries == std::vector<IpPrefix>{prefix("10.0.0.0/8")});
  CHECK_FALSE(f.tables[0].is_const);
  CHECK_FALSE(f.tables[0].counters);
  CHECK(f.tables[3].counters);
  CHECK_FALSE(f.tables[4].counters);
  CHECK(f.tables[1].entries == std::vector<IpPrefix>{prefix("10.0.0.0/8")});
  CHECK(f.tables[1].is_const);
  CHECK(f.tables[2].entries == std::vector<IpPrefix>{prefix("192.0.2.1/32")});
  CHECK(f.tables[2].is_const);
  CHECK((f.tables[2].location.line == 3 && f.tables[2].location.column == 7));
  CHECK(f.tables[3].lists_entries);
  REQUIRE(f.tables[3].files.size() == 1);
  CHECK(f.tables[3].files[0].path == "d.txt");
  CHECK_FALSE(f.tables[3].is_const);
  CHECK(f.tables[4].is_const);
  CHECK(f.tables[4].negated_entries == std::vector<IpPrefix>{prefix("10.1.0.0/16")});
  REQUIRE(f.tables[4].files.size() == 2);
  CHECK(f.tables[4].files[0].path == "e.txt");
  CHECK(f.tables[4].files[1].path == "f.txt");
}

TEST_CASE("settings: limits and timeouts, single and in lists") {
  const RuleFile f = parse_ok(
      "set limit states 5000\n"
      "set limit frags 100\n"
      "set limit { states 7, frags 8 }\n"
      "set limit src-nodes 900\n"
      "set timeout tcp.first 30\n"
      "set timeout { tcp.opening 5 tcp.closed 0, other.multiple 4294967295 }\n");
  CHECK(f.settings.limit_states == 7u);
  CHECK(f.settings.limit_frags == 8u);
  CHECK(f.settings.limit_src_nodes == 900u);
  CHECK(f.settings.timeouts ==
        std::map<std::string, uint32_t>{
            {"tcp.first", 30}, {"tcp.opening", 5}, {"tcp.closed", 0}, {"other.multiple", 4294967295u}});
  CHECK(f.settings.timeout_locations.at("tcp.first").line == 5);
  CHECK(f.settings.timeout_locations.at("tcp.first").column == 13);
  CHECK(f.settings.timeout_locations.at("other.multiple").line == 6);
  CHECK(f.settings.timeout_locations.at("other.multiple").column == 43);

  // Every timeout name of timeouts.h is accepted, in settings and per rule.
  for (std::size_t i = 0; i < kTimeoutClassCount; ++i) {
    const std::string name(timeout_class_name(static_cast<TimeoutClass>(i)));
    INFO(name);
    CHECK(parse_ok("set timeout " + name + " 9").settings.timeouts.at(name) == 9u);
    CHECK(parse_ok("pass all keep state (" + name + " 9)").filter_rules[0].state.timeouts.at(name) == 9u);
  }
  CHECK_FALSE(f.settings.keep_counters);
  CHECK(parse_ok("set keepcounters\npass all").settings.keep_counters);
  // pf's source node timeout too, 0 (its default) included.
  CHECK(parse_ok("set timeout src.track 0").settings.timeouts.at("src.track") == 0u);
  CHECK(parse_ok("set timeout { src.track 30, tcp.first 9 }").settings.timeouts.at("src.track") == 30u);
  CHECK(parse_ok("pass all keep state (max-src-conn-rate 5/10, src.track 30)")
            .filter_rules[0]
            .state.timeouts.at("src.track") == 30u);
}

TEST_CASE("settings: pf's optimization hints are timeouts in file order; pf.conf's other settings load") {
  const RuleFile aggressive = parse_ok(
      "set timeout tcp.established 7200\n"
      "set optimization aggressive\n"
      "set timeout tcp.closed 10\n");
  CHECK(aggressive.settings.timeouts ==
        std::map<std::string, uint32_t>{{"tcp.first", 30},
                                        {"tcp.opening", 5},
                                        {"tcp.established", 18000},  // the hint overrides what came before
                                        {"tcp.closing", 60},
                                        {"tcp.finwait", 30},
                                        {"tcp.closed", 10}});  // and what comes after overrides it
  CHECK(aggressive.settings.timeout_locations.at("tcp.first").line == 2);
  CHECK(aggressive.settings.timeout_locations.at("tcp.first").column == 18);
  CHECK(parse_ok("set optimization conservative").settings.timeouts.at("tcp.established") == 432000u);
  CHECK(parse_ok("set optimization high-latency").settings.timeouts.at("tcp.first") == 180u);
  CHECK(parse_ok("set optimization normal").settings.timeouts.at("tcp.closing") == 900u);

  // Accepted without changing a decision: the settings stay as without them.
  const RuleFile others = parse_ok(
      "set loginterface em0\n"
      "set debug urgent\n"
      "set ruleset-optimization basic\n"
      "set require-order yes\n"
      "set reassemble yes\n"
      "set syncookies never\n"
      "set timeout { interval 10, frag 30 }\n"
      "pass all\n");
  CHECK(others.settings.timeouts.empty());
  CHECK(others.filter_rules.size() == 1);

  CHECK(parse_ok("set state-policy if-bound").settings.states_if_bound);
  CHECK_FALSE(parse_ok("set state-policy floating").settings.states_if_bound);
  CHECK_FALSE(parse_ok("pass all").settings.states_if_bound);
}

TEST_CASE("macros: quoted and bare values, lists, concatenation, nesting") {
  const RuleFile f = parse_ok(
      "ext_if = \"em0\"\n"
      "int_if = em1\n"
      "all_ifs = \"{\" $ext_if $int_if \"}\"\n"
      "web = \"{ 80, 443 }\"\n"
      "srv = 10.0.0.5\n"
      "pass in on $all_ifs proto tcp to $srv port $web\n");
  REQUIRE(f.filter_rules.size() == 1);
  CHECK(render(f.filter_rules[0]) == "pass in on em0,em1 proto 6 from * to 10.0.0.5/32 port =80,=443 keep");
  CHECK(f.filter_rules[0].location.line == 6);
}

// pf's host lists hold lists: a macro holding a list can stand among other addresses.
TEST_CASE("macros: an address list inside an address list joins it") {
  const RuleFile f = parse_ok(
      "lan = \"{ 10.0.0.1 10.0.0.2 }\"\n"
      "pass from { $lan 10.0.0.3, { 2001:db8::1 } } to any\n");
  REQUIRE(f.filter_rules.size() == 1);
  CHECK(render(f.filter_rules[0]) ==
        "pass from 10.0.0.1/32,10.0.0.2/32,10.0.0.3/32,2001:db8::1/128 to any keep");
}

TEST_CASE("filter rules are numbered in file order, whatever lies between them") {
  const RuleFile f = parse_ok(
      "# header\n"
      "pass in all\n"
      "table <t> { 10.0.0.0/8 }\n"
      "block out all\n"
      "nat on em0 from 10.0.0.0/8 -> 192.0.2.1\n"
      "\n"
      "pass \\\n"
      "   quick all\n");
  REQUIRE(f.filter_rules.size() == 3);
  CHECK(f.filter_rules[0].direction == Direction::In);
  CHECK(f.filter_rules[1].direction == Direction::Out);
  CHECK(f.filter_rules[2].quick);
  CHECK(f.filter_rules[2].location.line == 7);
}

TEST_CASE("return-icmp codes: every name pfctl's unreachable table has, aliases included") {
  struct Row {
    const char* text;
    int16_t icmp_code;
    int16_t icmp6_code;
  };
  const Row rows[] = {
      {"block return-icmp(filter-prohib) all", 13, -1},
      {"block return-icmp(host-unr, addr-unr) all", 1, 3},
      {"block return-icmp6(admin-unr) all", -1, 1},
      // pfctl's icmp6_code names code 2 twice: not a neighbour (RFC 2463) and beyond scope (RFC 4443).
      {"block return-icmp6(notnbr-unr) all", -1, 2},
      {"block return-icmp6(beyond-unr) all", -1, 2},
      {"block return-icmp(port-unr, notnbr-unr) all", 3, 2},
  };
  for (const Row& row : rows) {
    INFO(row.text);
    const RuleFile f = parse_ok(row.text);
    REQUIRE(f.filter_rules.size() == 1);
    CHECK(f.filter_rules[0].icmp_code == row.icmp_code);
    CHECK(f.filter_rules[0].icmp6_code == row.icmp6_code);
  }
}

TEST_CASE("bad input: the first error, with file, line, column and what was expected") {
  const Case cases[] = {
      // Structure and keywords.
      {"allow in all",
       "t.conf:1:1: expected a rule (pass, block, match, antispoof, anchor, nat, rdr, binat, scrub), "
       "'table', "
       "'set', "
       "'include' or a macro definition, got 'allow'"},
      {"pass all\nnat-anchor \"x\"", "t.conf:2:1: 'nat-anchor' rules are not supported"},
      // pf's rule options that are not implemented are named, before and after from/to.
      {"pass in on lan0 route-to (ext0 10.0.0.1) all",
       "t.conf:1:17: 'route-to' is not supported: packets leave by the kernel's routes (choose them with ip "
       "rule)"},
      // once and max-pkt-rate: at most once each, a rate of N/S, and not where a tag would be found
      // apart from them.
      {"pass in proto tcp to port 22 once once",
       "t.conf:1:35: duplicate 'once': already given at line 1, column 30"},
      {"pass in all once tag A",
       "t.conf:1:13: 'once' with 'tag' is not supported: tag the packets in a rule of their own"},
      {"pass in all max-pkt-rate 100",
       "t.conf:1:26: expected a rate such as 15/5 (packets/seconds), got '100'"},
      {"pass in all max-pkt-rate",
       "t.conf:1:25: expected a rate such as 15/5 (packets/seconds), got end of file"},
      {"pass in all max-pkt-rate 0/10",
       "t.conf:1:26: packets in max-pkt-rate must be between 1 and 4294966, got '0'"},
      {"pass in all max-pkt-rate 4294967/10",
       "t.conf:1:26: packets in max-pkt-rate must be between 1 and 4294966, got '4294967'"},
      {"pass in all max-pkt-rate 10/86401",
       "t.conf:1:29: seconds in max-pkt-rate must be between 1 and 86400, got '86401'"},
      // From a macro, the error points at the '$': the value is not in the line.
      {"r = \"10/\"\npass in all max-pkt-rate $r", "t.conf:2:26: expected seconds in max-pkt-rate, got ''"},
      {"r = \"10/86401\"\npass in all keep state (max-src-conn-rate $r)",
       "t.conf:2:43: seconds in max-src-conn-rate must be between 1 and 86400, got '86401'"},
      {"pass in all max-pkt-rate 10/5 max-pkt-rate 20/5",
       "t.conf:1:31: duplicate 'max-pkt-rate': already given at line 1, column 13"},
      {"pass in all tos bogus",
       "t.conf:1:17: expected a TOS: a DSCP name (ef, va, af11..af43, cs0..cs7), lowdelay, throughput, "
       "reliability, critical, inetcontrol, netcontrol, or a number (0x10), got 'bogus'"},
      {"pass in all tos 0x11",
       "t.conf:1:17: the TOS's two low bits are ECN's (RFC 3168), which rules neither set nor match: got "
       "'0x11'"},
      {"pass in all tos ef tos af11", "t.conf:1:20: duplicate 'tos': already given at line 1, column 13"},
      {"match in all tag A max-pkt-rate 1/1",
       "t.conf:1:20: 'max-pkt-rate' with 'tag' is not supported: tag the packets in a rule of their own"},
      // probability: pf's two forms, at most once, and not where a tag would be found apart from it.
      {"pass in all probability 50",
       "t.conf:1:25: a probability is a percentage from 0% to 100% or a fraction from 0 to 1, got '50'"},
      {"pass in all probability 100.5%",
       "t.conf:1:25: a probability is a percentage from 0% to 100% or a fraction from 0 to 1, got '100.5%'"},
      {"pass in all probability 1e-3",
       "t.conf:1:25: a probability is a percentage from 0% to 100% or a fraction from 0 to 1, got '1e-3'"},
      {"pass in all probability .5",
       "t.conf:1:25: a probability is a percentage from 0% to 100% or a fraction from 0 to 1, got '.5'"},
      {"pass in all probability 5%%",
       "t.conf:1:25: a probability is a percentage from 0% to 100% or a fraction from 0 to 1, got '5%%'"},
      {"pass in all probability", "t.conf:1:24: expected a probability, e.g. 20% or 0.2, got end of file"},
      {"pass in all probability 5% probability 6%",
       "t.conf:1:28: duplicate 'probability': already given at line 1, column 13"},
      {"pass in all probability 5% tag A",
       "t.conf:1:13: 'probability' with 'tag' is not supported: tag the packets in a rule of their own"},
      {"match in all tag A probability 5%",
       "t.conf:1:20: 'probability' with 'tag' is not supported: tag the packets in a rule of their own"},
      {"pass out on ext0 all received-on", "t.conf:1:33: expected interface name, got end of file"},
      {"pass out on ext0 all received-on lan0 received-on dmz0",
       "t.conf:1:39: duplicate 'received-on': already given at line 1, column 22"},
      {"pass out on ext0 all received-on ! { lan0 dmz0 }",
       "t.conf:1:34: '!' cannot negate a list of interfaces: '! { a, b }' would match every interface, as '{ "
       "!a, !b }' does (each element matches on its own, and every interface differs from one of them); name "
       "the interfaces the rule is for"},
      {"pass out all received-on a/b",
       "t.conf:1:26: 'a/b' is not a valid interface name (1 to 15 characters, no '/', ':' or spaces)"},
      {"pass in from 10.0.0.1%em0",
       "t.conf:1:14: expected address, prefix, <table> or 'any', got '10.0.0.1%em0'"},
      {"pass in all tag", "t.conf:1:16: expected a tag's name after 'tag', e.g. LAN, got end of file"},
      {"pass in all tag \"a b\"", "t.conf:1:17: a tag's name has 1 to 63 letters, digits, '_', '-' or '.'"},
      {"pass in all tag \"$if\"", "t.conf:1:17: a tag's name has 1 to 63 letters, digits, '_', '-' or '.'"},
      {"pass in all tag A tag B", "t.conf:1:19: duplicate 'tag': already given at line 1, column 13"},
      {"pass out all tagged A ! tagged B",
       "t.conf:1:25: duplicate 'tagged': already given at line 1, column 14"},
      {"pass out all ! label \"x\"", "t.conf:1:16: expected 'tagged' after '!', got 'label'"},
      {"pass in all set prio 3",
       "t.conf:1:13: 'set' is not supported: there is no 'set prio' or 'set queue'; a scrub rule sets the "
       "TOS: "
       "scrub out all set-tos T"},
      {"match in all scrub (no-df random-id max-mss 1440)",
       "t.conf:1:14: 'scrub' is not supported: write a scrub rule with the same options: "
       "scrub in|out [on IF] ... (no-df, max-mss N, ...)"},
      {"block in quick on egress from 192.0.2.0/24",
       "t.conf:1:19: 'egress' is OpenBSD's group of the interfaces that hold a default route; there are no "
       "interface groups here: name the interface (a macro, ext_if = \"eth0\", keeps it in one place)"},
      {"pass out on lan0 from (egress)",
       "t.conf:1:24: 'egress' is OpenBSD's group of the interfaces that hold a default route; there are no "
       "interface groups here: name the interface (a macro, ext_if = \"eth0\", keeps it in one place)"},
      {"pass in on lan0 proto tcp to port 80 rdr-to 10.0.0.2",
       "t.conf:1:38: 'rdr-to' is not supported: write an rdr rule: rdr on IF ... -> ADDRESS"},
      {"{ pass }", "t.conf:1:1: expected a rule, 'table', 'set', 'include' or a macro definition, got '{'"},
      {"pass all; block all", "t.conf:1:9: unexpected character ';'"},
      {"pass \\ all", "t.conf:1:6: unexpected '\\': a backslash continues a line only as its last character"},
      {"pass all\r\nblock foo\r\n",
       "t.conf:2:7: expected 'from', 'to', 'all', a rule option or end of line, got 'foo'"},
      {"# c\npass in \\\n  on\n", "t.conf:3:5: expected interface name, got end of line"},
      {"pass in on em0 quick all",
       "t.conf:1:16: 'quick' is out of order or repeated: filter rules read: pass|block "
       "[drop|return|return-rst|return-icmp|return-icmp6] [in|out] [log [(all)]] [quick] (either order) [on "
       "IF] "
       "[inet|inet6] [proto P] "
       "from SRC [port P] to DST [port P] | all, then flags, icmp-type, tos, state options, allow-opts, "
       "label, "
       "tag, tagged, received-on, probability, once and max-pkt-rate"},
      {"pass all all",
       "t.conf:1:10: 'all' is out of order or repeated: filter rules read: pass|block "
       "[drop|return|return-rst|return-icmp|return-icmp6] [in|out] [log [(all)]] [quick] (either order) [on "
       "IF] "
       "[inet|inet6] "
       "[proto P] from SRC [port P] to DST [port P] | all, then flags, icmp-type, tos, state "
       "options, allow-opts, label, tag, tagged, received-on, probability, once and max-pkt-rate"},
      {"pass all label web", "t.conf:1:16: expected a quoted label after 'label', e.g. \"web\", got 'web'"},
      {"pass all label \"a\" label \"b\"",
       "t.conf:1:20: duplicate 'label': already given at line 1, column 10"},
      {"pass all label \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"",
       "t.conf:1:16: a label has 1 to 63 characters"},
      {"pass all bogus",
       "t.conf:1:10: expected 'flags', 'icmp-type', 'icmp6-type', 'tos', a state option, 'allow-opts', "
       "'label', "
       "'tag', 'tagged', 'received-on', 'probability', 'once', 'max-pkt-rate' or end of line, got 'bogus'"},
      {"block all allow-opts", "t.conf:1:11: 'allow-opts' applies to pass rules only"},
      {"pass all allow-opts allow-opts",
       "t.conf:1:21: duplicate 'allow-opts': already given at line 1, column 10"},
      {"pass log (matches) all",
       "t.conf:1:11: 'log (matches)' is not supported: put 'log' on the rules whose matches to log"},
      {"pass log (all, to pflog1) all",
       "t.conf:1:16: 'log (to INTERFACE)' is not supported: logged packets go to one pcap file ([log] "
       "pcap_file)"},
      {"pass log (all,) all", "t.conf:1:15: expected 'all' (log (all)), got ')'"},
      {"pass log (all all", "t.conf:1:15: expected ')', got 'all'"},
      {"pass return-rst all", "t.conf:1:6: 'return-rst' applies to block rules only"},
      {"pass proto 0 all", "t.conf:1:12: proto 0 cannot be used: omit 'proto' to match every protocol"},
      {"pass proto { tcp 000 } all",
       "t.conf:1:18: proto 0 cannot be used: omit 'proto' to match every protocol"},
      {"pass from ! any", "t.conf:1:13: '! any' matches no address: remove the rule, or write 'any'"},
      {"pass to { 10.0.0.1, ! any }",
       "t.conf:1:23: '! any' matches no address: remove the rule, or write 'any'"},
      {"block all keep state", "t.conf:1:11: 'keep state' has no effect on a block rule: remove it"},
      {"pass all keep", "t.conf:1:14: expected 'state' after 'keep', got end of file"},
      {"pass all synproxy state (sloppy)",
       "t.conf:1:26: 'sloppy' cannot be used with 'synproxy state': use 'keep state'"},
      {"pass all keep state no state",
       "t.conf:1:21: duplicate state option: already given at line 1, column 10"},
      {"pass proto tcp all flags S/SA flags any",
       "t.conf:1:31: duplicate 'flags': already given at line 1, column 20"},
      // Strings, lists, tables, macros.
      {"ext_if = \"veth0\npass all",
       "t.conf:1:10: unterminated quoted string: no closing \" before the end of the file"},
      {"pass proto tcp to port { 80 443",
       "t.conf:1:32: expected '}' to close the list opened at line 1, column 24, got end of file"},
      {"table <t> { 10.0.0.0/8\npass all",
       "t.conf:2:1: expected '}' to close the list opened at line 1, column 11, got 'pass'"},
      {"pass proto tcp to port { }", "t.conf:1:26: empty list: expected at least one port"},
      {"pass proto tcp to port { 80 { 443 } }", "t.conf:1:29: lists cannot be nested: expected port"},
      {"pass proto { tcp,, udp }",
       "t.conf:1:18: expected protocol (tcp, udp, icmp, icmp6, a name or a number "
       "1..255), got ','"},
      {"table <a> { 10.0.0.0/8 }\ntable <a> { 10.1.0.0/16 }",
       "t.conf:2:7: table <a> is already defined at line 1, column 7"},
      {"table blocked { 10.0.0.0/8 }",
       "t.conf:1:7: expected a table name in angle brackets, e.g. <blocked>, got 'blocked'"},
      {"table <t> { any }", "t.conf:1:13: expected address or prefix, got 'any'"},
      {"table <t> { 10.0.0.0/8 } volatile",
       "t.conf:1:26: expected 'persist', 'const', 'counters', 'file' or end of line, got 'volatile'"},
      {"table <t> persist volatile",
       "t.conf:1:19: expected 'persist', 'const', 'counters', 'file', '{' or end of line, got 'volatile'"},
      {"table <t> { 10.0.0.0/8 } { 10.1.0.0/16 }",
       "t.conf:1:26: one address list per table: put these entries in the list opened at line 1, column 11"},
      {"table <t> {} persist { 10.1.0.0/16 }",
       "t.conf:1:22: one address list per table: put these entries in the list opened at line 1, column 11"},
      {"table <t> {} file",
       "t.conf:1:18: expected a quoted file name after 'file', e.g. "
       "\"/etc/pairwall/blocked\", got end of file"},
      {"block from <foo", "t.conf:1:12: unterminated table name '<foo': expected '>'"},
      {"block from { 10.1.2.3, <foo }", "t.conf:1:24: unterminated table name '<foo': expected '>'"},
      {"table <foo { 10.0.0.0/8 }", "t.conf:1:7: unterminated table name '<foo': expected '>'"},
      {"pass proto tcp to port 22 keep state (max-src-conn 5, overload <bad)",
       "t.conf:1:64: unterminated table name '<bad': expected '>'"},
      {"block from <a23456789012345678901234567890123>",
       "t.conf:1:12: table name '<a23456789012345678901234567890123>' is longer than 31 characters"},
      {"pass in on $nope", "t.conf:1:12: undefined macro '$nope'"},
      {"pass = \"x\"", "t.conf:1:1: 'pass' is a keyword and cannot be a macro name"},
      {"my-if = \"x\"",
       "t.conf:1:1: macro name 'my-if' must start with a letter or '_' and contain only letters, digits and "
       "'_'"},
      {"a =\n", "t.conf:1:4: expected a macro value after '=', got end of line"},
      {"a = \"$a\"\npass on $a", "t.conf:2:9: macro '$a' expands too deeply (does it refer to itself?)"},
      {"srv = 10.0.0.5\npass from \"$srv\"",
       "t.conf:2:11: expected address, prefix, <table> or 'any', got '\"$srv\"'"},
      {"ports = \"{ 80 70000 }\"\npass proto tcp to port $ports",
       "t.conf:2:24: port must be between 0 and 65535, got '70000'"},
      // Addresses.
      {"block from ! { 10.0.0.0/8, 10.1.0.0/16 }",
       "t.conf:1:12: '!' cannot negate a list: '! { a, b }' would match every address (each element is "
       "negated on its own, and every address differs from one of them); put the addresses in a table and "
       "write '! <table>'"},
      {"block from 10.0.0.0/33", "t.conf:1:12: prefix length in '10.0.0.0/33' must be between 0 and 32"},
      {"block from 2001:db8::/129",
       "t.conf:1:12: prefix length in '2001:db8::/129' must be between 0 and 128"},
      {"block from 10.0.0.0/x", "t.conf:1:12: prefix length in '10.0.0.0/x' must be between 0 and 32"},
      {"block from 10.0.0.1/8", "t.conf:1:12: host bits set in '10.0.0.1/8': did you mean 10.0.0.0/8?"},
      {"block to 2001:db8::1/32",
       "t.conf:1:10: host bits set in '2001:db8::1/32': did you mean 2001:db8::/32?"},
      {"block from 10.0.0.256", "t.conf:1:12: expected address, prefix, <table> or 'any', got '10.0.0.256'"},
      {"block from 10.0.0.300", "t.conf:1:12: expected address, prefix, <table> or 'any', got '10.0.0.300'"},
      {"block from em0:broadcast",
       "t.conf:1:12: 'em0:broadcast': ':broadcast' is not supported; write em0 (its addresses) or "
       "em0:network "
       "(their networks)"},
      {"block from self:network",
       "t.conf:1:12: 'self' is every address of this host: it takes no ':network'"},
      {"block from em0:0",
       "t.conf:1:12: 'em0:0': ':0' is not supported; write em0 (its addresses) or em0:network (their "
       "networks)"},
      {"block from (em0:0)",
       "t.conf:1:13: 'em0:0': ':0' is not supported; write em0 (its addresses) or em0:network (their "
       "networks)"},
      {"block from 10.0.0.0/24 - 10.0.0.5",
       "t.conf:1:12: an address range runs from one address to another: write '10.0.0.0/24' without its '/' "
       "length, or the prefix alone"},
      {"block to { 192.0.2.1, 10.0.0.9 - 10.0.0.5 }",
       "t.conf:1:32: the range 10.0.0.9 - 10.0.0.5 runs backwards: write its lower end first"},
      {"block from 10.0.0.1 - 2001:db8::1",
       "t.conf:1:23: expected the range's last address, an IPv4 address as its first, got '2001:db8::1'"},
      {"block from 10.0.0.1 - 10.0.0.5/32",
       "t.conf:1:23: expected the range's last address, an IPv4 address as its first, got '10.0.0.5/32'"},
      {"block from 10.0.0.1 -", "t.conf:1:22: expected the range's last address, got end of file"},
      {"table <t> { 10.0.0.1 - 10.0.0.5 }",
       "t.conf:1:22: address ranges ('10.0.0.1 - ...') are not supported in a table: write the range as "
       "prefixes"},
      {"nat on em0 from 10.1.0.0/16 -> 192.0.2.1 - 192.0.2.5",
       "t.conf:1:42: address ranges ('192.0.2.1 - ...') are not supported in a translation target: write the "
       "range as prefixes"},
      {"block from { no-route, 10.0.0.0/8 }",
       "t.conf:1:14: 'no-route' stands alone after 'from' or 'to' in a filter rule, negated or not ('block "
       "in quick "
       "from no-route'): not in a list, or in a scrub or translation rule"},
      {"block to { ! no-route }",
       "t.conf:1:14: 'no-route' stands alone after 'from' or 'to' in a filter rule, negated or not ('block "
       "in quick "
       "from no-route'): not in a list, or in a scrub or translation rule"},
      {"nat on em0 from no-route -> 192.0.2.1",
       "t.conf:1:17: 'no-route' stands alone after 'from' or 'to' in a filter rule, negated or not ('block "
       "in quick "
       "from no-route'): not in a list, or in a scrub or translation rule"},
      {"scrub in to ! no-route",
       "t.conf:1:15: 'no-route' stands alone after 'from' or 'to' in a filter rule, negated or not ('block "
       "in quick "
       "from no-route'): not in a list, or in a scrub or translation rule"},
      {"block to ! urpf-failed",
       "t.conf:1:12: 'urpf-failed' stands alone after 'from' in a filter rule ('block in quick from "
       "urpf-failed'): not in a list, negated, after 'to', or in a scrub or translation rule"},
      {"block from { urpf-failed, 10.0.0.0/8 }",
       "t.conf:1:14: 'urpf-failed' stands alone after 'from' in a filter rule ('block in quick from "
       "urpf-failed'): not in a list, negated, after 'to', or in a scrub or translation rule"},
      {"block to urpf-failed",
       "t.conf:1:10: 'urpf-failed' stands alone after 'from' in a filter rule ('block in quick from "
       "urpf-failed'): not in a list, negated, after 'to', or in a scrub or translation rule"},
      {"scrub in from urpf-failed",
       "t.conf:1:15: 'urpf-failed' stands alone after 'from' in a filter rule ('block in quick from "
       "urpf-failed'): not in a list, negated, after 'to', or in a scrub or translation rule"},
      {"nat on em0 from urpf-failed -> 192.0.2.1",
       "t.conf:1:17: 'urpf-failed' stands alone after 'from' in a filter rule ('block in quick from "
       "urpf-failed'): not in a list, negated, after 'to', or in a scrub or translation rule"},
      {"table <t> { no-route }",
       "t.conf:1:13: 'no-route' stands alone after 'from' or 'to' in a filter rule, negated or not ('block "
       "in quick "
       "from no-route'): not in a list, or in a scrub or translation rule"},
      {"block from (10.0.0.1)", "t.conf:1:13: expected an interface name inside '( )', got '10.0.0.1'"},
      {"block from (em0", "t.conf:1:16: expected ')', got end of file"},
      {"antispoof em0",
       "t.conf:1:11: expected 'for' and the interfaces to protect (antispoof [log] [quick] (either order) "
       "for IF), got 'em0'"},
      {"antispoof quick log quick for em0",
       "t.conf:1:21: expected 'for' and the interfaces to protect (antispoof [log] [quick] (either order) "
       "for IF), got 'quick'"},
      {"antispoof for ! em0", "t.conf:1:15: antispoof protects interfaces it names: '!' has no place here"},
      {"antispoof for em0 label x", "t.conf:1:19: expected 'inet', 'inet6' or end of line, got 'label'"},
      {"block from to any", "t.conf:1:12: expected address, prefix, <table> or 'any', got 'to'"},
      {"pass inet from 2001:db8::1",
       "t.conf:1:16: '2001:db8::1' is not an IPv4 address, as the rule's address family requires"},
      {"pass inet6 from { ::1 10.0.0.1 }",
       "t.conf:1:23: '10.0.0.1' is not an IPv6 address, as the rule's address family requires"},
      // Interfaces and protocols.
      {"pass on ! { em0 em1 } all",
       "t.conf:1:9: '!' cannot negate a list of interfaces: '! { a, b }' would match every interface, as "
       "'{ !a, !b }' does (each element matches on its own, and every interface differs from one of them); "
       "name the interfaces the rule is for"},
      {"pass on inet all", "t.conf:1:9: expected interface name, got 'inet'"},
      {"pass on abcdefghijklmnop all",
       "t.conf:1:9: 'abcdefghijklmnop' is not a valid interface name (1 to 15 characters, no '/', ':' or "
       "spaces)"},
      {"pass on \"em 0\" all",
       "t.conf:1:9: '\"em 0\"' is not a valid interface name (1 to 15 characters, no '/', ':' or spaces)"},
      {"pass proto 256", "t.conf:1:12: protocol number must be between 1 and 255, got '256'"},
      {"pass proto foo",
       "t.conf:1:12: expected protocol (tcp, udp, icmp, icmp6, a name or a number 1..255), got 'foo'"},
      // Ports.
      {"pass in proto tcp from any port 70000", "t.conf:1:33: port must be between 0 and 65535, got '70000'"},
      {"pass proto tcp to port 99999999999999999999999",
       "t.conf:1:24: port must be between 0 and 65535, got '99999999999999999999999'"},
      {"pass proto tcp to port gopher", "t.conf:1:24: expected port number or service name, got 'gopher'"},
      {"pass proto tcp to port", "t.conf:1:23: expected port number or service name, got end of file"},
      {"pass proto tcp to port 2000:1000",
       "t.conf:1:24: port range 2000 to 1000 is empty: the first port must not be greater than the second"},
      {"pass proto tcp to port 2000 >< 1000",
       "t.conf:1:24: port range 2000 to 1000 is empty: the first port must not be greater than the second"},
      {"pass proto tcp to port 1000 >< 1000",
       "t.conf:1:24: port range 1000 >< 1000 holds no port: '><' leaves out both of its ends"},
      {"pass proto tcp to port { 80, 1000 >< 1001 }",
       "t.conf:1:30: port range 1000 >< 1001 holds no port: '><' leaves out both of its ends"},
      {"pass proto tcp to port 1000:", "t.conf:1:24: expected port number or service name, got '1000:'"},
      {"pass proto tcp to port < > 5", "t.conf:1:26: expected port number or service name, got '>'"},
      // Flags and ICMP.
      {"pass proto tcp all flags S/SX",
       "t.conf:1:29: unknown TCP flag 'X' in 'S/SX': flags are letters from FSRPAUEW"},
      {"pass proto tcp all flags S/A",
       "t.conf:1:26: flags 'S/A' can never match: every flag that must be set must also be in the mask"},
      {"pass proto tcp all flags S",
       "t.conf:1:26: expected TCP flags as set/mask (e.g. S/SA) or 'any', got 'S'"},
      {"pass proto tcp all flags S/", "t.conf:1:26: empty flag mask in 'S/': write e.g. S/SA"},
      {"pass inet6 proto icmp6 all icmp-type echoreq",
       "t.conf:1:28: icmp-type matches ICMP for IPv4: use icmp6-type with inet6"},
      {"pass inet proto icmp all icmp6-type echoreq",
       "t.conf:1:26: icmp6-type matches ICMPv6: use it with inet6, or icmp-type with inet"},
      {"pass proto icmp all icmp-type toobig", "t.conf:1:31: 'toobig' is an ICMPv6 type: use icmp6-type"},
      {"pass proto icmp6 all icmp6-type squench",
       "t.conf:1:33: 'squench' is an ICMP (IPv4) type: use icmp-type"},
      {"pass proto icmp all icmp-type ping",
       "t.conf:1:31: expected ICMP type (a name such as echoreq, or a number 0..255), got 'ping'"},
      {"pass proto icmp all icmp-type 256", "t.conf:1:31: ICMP type must be between 0 and 255, got '256'"},
      {"pass proto icmp all icmp-type echoreq code needfrag",
       "t.conf:1:44: expected a code of ICMP type echoreq (a number 0..255), got 'needfrag'"},
      {"pass proto icmp all icmp-type timex code needfrag",
       "t.conf:1:42: expected a code of ICMP type timex (a number 0..255, or transit or reassemb), got "
       "'needfrag'"},
      {"pass proto icmp6 all icmp6-type unreach code needfrag",
       "t.conf:1:46: expected a code of ICMPv6 type unreach (a number 0..255, or admin-unr, noroute-unr, "
       "notnbr-unr, beyond-unr, addr-unr or port-unr), got 'needfrag'"},
      {"pass proto icmp all icmp-type unreach code 256",
       "t.conf:1:44: ICMP code must be between 0 and 255, got '256'"},
      {"pass proto icmp all icmp-type echoreq icmp-type echorep",
       "t.conf:1:39: duplicate icmp-type: already given at line 1, column 21"},
      {"block return-icmp(host-unreachable) all",
       "t.conf:1:19: expected an ICMP unreachable code (a name such as port-unr, or 0..255), got "
       "'host-unreachable'"},
      {"block return-icmp(3, 256) all",
       "t.conf:1:22: an ICMPv6 unreachable code (a name such as addr-unr, or 0..255) must be between 0 and "
       "255, "
       "got '256'"},
      {"block return-icmp6(port-unr all", "t.conf:1:29: expected ')' after the unreachable code, got 'all'"},
      {"block return-rst (ttl 0) all", "t.conf:1:23: a TTL must be between 1 and 255, got '0'"},
      {"block return-rst (ttl 256) all", "t.conf:1:23: a TTL must be between 1 and 255, got '256'"},
      {"block return-rst (hops 3) all", "t.conf:1:19: expected 'ttl' (return-rst (ttl N)), got 'hops'"},
      {"block return-rst (ttl 3 all", "t.conf:1:25: expected ')' after the TTL, got 'all'"},
      // State options.
      {"pass all keep state (max 0)", "t.conf:1:26: max must be between 1 and 4294967295, got '0'"},
      {"pass all keep state (max 4294967296)",
       "t.conf:1:26: max must be between 1 and 4294967295, got '4294967296'"},
      {"pass all modulate state (no-sync, sloppy)",
       "t.conf:1:35: 'sloppy' cannot be used with 'modulate state': use 'keep state'"},
      {"pass all keep state (if-bound, floating)",
       "t.conf:1:32: 'floating' contradicts 'if-bound' given at line 1, column 22"},
      {"pass all keep state (floating, max 3, if-bound)",
       "t.conf:1:39: 'if-bound' contradicts 'floating' given at line 1, column 22"},
      {"pass all keep state (if-bound, if-bound)",
       "t.conf:1:32: duplicate state option 'if-bound': already given at line 1, column 22"},
      {"pass all keep state (floating, floating)",
       "t.conf:1:32: duplicate state option 'floating': already given at line 1, column 22"},
      {"pass all keep state (max 10, sticky)",
       "t.conf:1:30: expected state option ('max N', 'max-src-states N', 'no-sync', 'sloppy' or a timeout "
       "such as 'tcp.established N'), got 'sticky'"},
      {"pass all keep state (max-src-conn-rate 10)",
       "t.conf:1:40: expected a rate such as 15/5 (connections/seconds), got '10'"},
      {"pass all keep state (max-src-conn-rate 10/0)",
       "t.conf:1:43: seconds in max-src-conn-rate must be between 1 and 86400, got '0'"},
      {"pass all keep state (max-src-states 0)",
       "t.conf:1:37: max-src-states must be between 1 and 4294967295, got '0'"},
      // pfctl refuses it too: no rule's count could hold a node that every global rule shares.
      {"pass all keep state (source-track global, max-src-nodes 10, max-src-states 5)",
       "t.conf:1:43: 'max-src-nodes' is incompatible with 'source-track global': the nodes are every such "
       "rule's, none this rule's own (use 'source-track rule')"},
      {"pass all keep state (max-src-nodes 10, source-track global)",
       "t.conf:1:22: 'max-src-nodes' is incompatible with 'source-track global': the nodes are every such "
       "rule's, none this rule's own (use 'source-track rule')"},
      {"pass all keep state (max-src-conn 10, overload bad flush)",
       "t.conf:1:48: expected a table name in angle brackets after 'overload', e.g. <bruteforce>, got 'bad'"},
      {"set limit src-node 10",
       "t.conf:1:11: expected 'states', 'frags', 'src-nodes' or 'table-entries', got 'src-node'"},
      {"pass all keep state (tcp.bogus 10)",
       "t.conf:1:22: unknown timeout 'tcp.bogus': expected one of tcp.first, tcp.opening, tcp.established, "
       "tcp.closing, tcp.finwait, tcp.closed, udp.first, udp.single, udp.multiple, icmp.first, icmp.error, "
       "other.first, other.single, other.multiple, src.track"},
      {"pass all keep state (max 10",
       "t.conf:1:28: expected ')' to close the state options opened at line 1, "
       "column 21, got end of file"},
      {"pass all keep state (max 10, no-sync, max 20)",
       "t.conf:1:39: duplicate state option 'max': already given at line 1, column 22"},
      {"pass all keep state (tcp.established 60, \\\n  tcp.established 30)",
       "t.conf:2:3: duplicate state option 'tcp.established': already given at line 1, column 22"},
      {"pass all keep state (max-src-conn 5, overload <a>, overload <b>)",
       "t.conf:1:52: duplicate state option 'overload': already given at line 1, column 38"},
      {"pass all keep state ()",
       "t.conf:1:22: empty state options: expected 'max N', 'no-sync' or a timeout such as 'tcp.established "
       "N'"},
      // Settings.
      {"set timeout tcp.foo 10",
       "t.conf:1:13: unknown timeout 'tcp.foo': expected one of tcp.first, tcp.opening, tcp.established, "
       "tcp.closing, tcp.finwait, tcp.closed, udp.first, udp.single, udp.multiple, icmp.first, icmp.error, "
       "other.first, other.single, other.multiple, src.track, adaptive.start, adaptive.end"},
      {"set timeout { tcp.first 10, frog 30 }",
       "t.conf:1:29: unknown timeout 'frog': expected one of tcp.first, tcp.opening, tcp.established, "
       "tcp.closing, tcp.finwait, tcp.closed, udp.first, udp.single, udp.multiple, icmp.first, icmp.error, "
       "other.first, other.single, other.multiple, src.track, adaptive.start, adaptive.end"},
      {"set timeout { interval -1 }", "t.conf:1:24: expected timeout in seconds, got '-1'"},
      {"set timeout tcp.first -1", "t.conf:1:23: expected timeout in seconds, got '-1'"},
      {"set timeout adaptive.start -5", "t.conf:1:28: expected a number of states, got '-5'"},
      {"pass all keep state (adaptive.start 100)",
       "t.conf:1:22: 'adaptive.start' scales every state's timeouts by the size of the whole table: set it "
       "with 'set timeout', not per rule"},
      {"set limit states 0", "t.conf:1:18: limit must be between 1 and 4294967295, got '0'"},
      {"set limit tables 10",
       "t.conf:1:11: expected 'states', 'frags', 'src-nodes' or 'table-entries', got 'tables'"},
      {"set state-policy sticky", "t.conf:1:18: expected 'floating' or 'if-bound', got 'sticky'"},
      {"set optimization fast",
       "t.conf:1:18: expected 'normal', 'high-latency', 'satellite', 'aggressive' or 'conservative', got "
       "'fast'"},
      {"set hostid 7",
       "t.conf:1:5: the id this node's states carry to its sync peer is [node] id in pairwall.toml"},
      {"set fingerprints \"/etc/pf.os\"",
       "t.conf:1:5: there is no OS fingerprinting here ('os' in rules is not supported either)"},
      {"set reassembly yes",
       "t.conf:1:5: expected 'limit', 'timeout', 'block-policy', 'skip', 'optimization' or 'state-policy' "
       "after "
       "'set', got 'reassembly'"},
      {"set reassemble no", "t.conf:1:16: fragments are reassembled by the kernel before the rules see them"},
      {"set reassemble yes no-df", "t.conf:1:20: 'no-df' is a scrub option here: scrub in all no-df"},
      {"set syncookies adaptive (start 25%, end 12%)",
       "t.conf:1:16: there are no SYN cookies: answer SYN floods with 'synproxy state' on the rules that "
       "pass "
       "them"},
      {"set state-defaults no-sync, pflow, pflow",
       "t.conf:1:36: duplicate state option 'pflow': already given at line 1, column 29"},
      {"set fail-policy reject", "t.conf:1:17: expected 'drop' or 'return', got 'reject'"},
      {"set keepcounters yes", "t.conf:1:18: expected end of line, got 'yes'"},
      {"scrub in all fragment crop",
       "t.conf:1:23: the kernel reassembles every fragmented datagram: write 'fragment reassemble'"},
      {"set skip lo", "t.conf:1:10: expected 'on' and an interface after 'set skip', got 'lo'"},
      {"set skip on !lo", "t.conf:1:13: 'set skip' takes interface names: '!' would skip every other one"},
      {"set skip on { lo, !em0 }",
       "t.conf:1:13: 'set skip' takes interface names: '!' would skip every other one"},
      {"set block-policy reject", "t.conf:1:18: expected 'drop' or 'return', got 'reject'"},
      {"set limit states 10 20", "t.conf:1:21: expected end of line, got '20'"},
      // Scrub.
      {"scrub in all min-ttl 256", "t.conf:1:22: min-ttl must be between 1 and 255, got '256'"},
      {"scrub in all max-mss 0", "t.conf:1:22: max-mss must be between 1 and 65535, got '0'"},
      {"scrub in all max-mss 65536", "t.conf:1:22: max-mss must be between 1 and 65535, got '65536'"},
      {"scrub in all fragment cut", "t.conf:1:23: expected 'reassemble' after 'fragment', got 'cut'"},
      {"scrub in all reassemble", "t.conf:1:24: expected 'tcp' after 'reassemble', got end of file"},
      {"scrub in all reassemble udp", "t.conf:1:25: expected 'tcp' after 'reassemble', got 'udp'"},
      {"scrub in all tcp",
       "t.conf:1:14: expected scrub option (fragment reassemble, reassemble tcp, max-mss N, min-ttl N, "
       "random-id, no-df, set-tos T) or end of line, got 'tcp'"},
      {"scrub all reassemble tcp (reassemble tcp)",
       "t.conf:1:27: duplicate scrub option 'reassemble': already given at line 1, column 11"},
      {"scrub in all reassemble tcp",
       "t.conf:1:14: 'reassemble tcp' normalizes both directions of a connection: its scrub rule names no "
       "direction (remove 'in')"},
      {"scrub out on em0 all (no-df, reassemble tcp)",
       "t.conf:1:30: 'reassemble tcp' normalizes both directions of a connection: its scrub rule names no "
       "direction (remove 'out')"},
      {"scrub in all (max-mss 1440",
       "t.conf:1:27: expected ')' to close the scrub options opened at line 1, column 14, got end of file"},
      {"scrub in proto ping all",
       "t.conf:1:16: expected protocol (tcp, udp, icmp, icmp6, a name or a number 1..255), got 'ping'"},
      {"scrub in proto 0 all", "t.conf:1:16: proto 0 cannot be used: omit 'proto' to match every protocol"},
      // As pfctl's "cannot be respecified": the later value does not quietly win.
      {"scrub in all max-mss 1440 max-mss 1300",
       "t.conf:1:27: duplicate scrub option 'max-mss': already given at line 1, column 14"},
      {"scrub in all (min-ttl 5, no-df min-ttl 9)",
       "t.conf:1:32: duplicate scrub option 'min-ttl': already given at line 1, column 15"},
      {"scrub in all random-id (random-id)",
       "t.conf:1:25: duplicate scrub option 'random-id': already given at line 1, column 14"},
      {"scrub in all fragment reassemble no-df fragment reassemble",
       "t.conf:1:40: duplicate scrub option 'fragment': already given at line 1, column 14"},
      {"no scrub in all max-mss 1440",
       "t.conf:1:17: expected end of line: 'no scrub' exempts packets from normalization and takes no "
       "options, "
       "got 'max-mss'"},
      {"no pass all", "t.conf:1:4: expected 'nat', 'rdr' or 'binat' after 'no', got 'pass'"},
      {"scrub in all ()",
       "t.conf:1:15: empty scrub options: expected fragment reassemble, reassemble tcp, max-mss N, min-ttl "
       "N, random-id, no-df or set-tos T"},
      {"scrub in quick all",
       "t.conf:1:10: scrub rules do not take 'quick': the first one a packet matches applies"},
      {"scrub log log all", "t.conf:1:11: duplicate 'log'"},
      {"scrub in log (all) all",
       "t.conf:1:14: a scrub rule's 'log' takes no options: what normalization drops is always logged"},
      {"scrub in all set-tos 0x11",
       "t.conf:1:22: the TOS's two low bits are ECN's (RFC 3168), which rules neither set nor match: got "
       "'0x11'"},
      {"scrub in all set-tos 0x100", "t.conf:1:22: a TOS must be between 0 and 255, got '0x100'"},
      {"scrub in all set-tos af44",
       "t.conf:1:22: expected a TOS: a DSCP name (ef, va, af11..af43, cs0..cs7), lowdelay, throughput, "
       "reliability, critical, inetcontrol, netcontrol, or a number (0x10), got 'af44'"},
      {"scrub in all set-tos",
       "t.conf:1:21: expected a TOS: a DSCP name (ef, va, af11..af43, cs0..cs7), "
       "lowdelay, throughput, reliability, critical, inetcontrol, netcontrol, or a number (0x10), got end of "
       "file"},
      {"scrub in all set-tos 8 set-tos 16",
       "t.conf:1:24: duplicate scrub option 'set-tos': already given at line 1, column 14"},
      // Translation.
      {"nat from any -> 192.0.2.1", "t.conf:1:5: expected 'on' and an interface, got 'from'"},
      {"nat on em0 from 10.0.0.0/8", "t.conf:1:27: expected '->' and a translation address, got end of file"},
      {"binat on em0 from 10.0.0.0/24 -> <pool>",
       "t.conf:1:34: binat maps one prefix onto another: its target is not a table"},
      {"nat on em0 from 10.0.0.0/8 -> 192.0.2.1 static-port bitmask static-port",
       "t.conf:1:61: 'static-port' given twice"},
      {"nat on em0 proto tcp from 10.0.0.0/8 -> 192.0.2.1 port 5000 static-port",
       "t.conf:1:61: 'static-port' keeps the source port: it takes no 'port'"},
      {"rdr on em0 proto tcp to 192.0.2.1 -> 10.0.0.5 static-port",
       "t.conf:1:47: 'static-port' keeps a nat source port: nat only"},
      {"binat on em0 from 10.0.0.5 -> 192.0.2.5 source-hash",
       "t.conf:1:41: binat maps one prefix onto another: no pool type"},
      {"binat on em0 from 10.0.0.0/24 -> { 192.0.2.0/24 }",
       "t.conf:1:34: binat maps one prefix onto another: its target is not a list"},
      {"nat on em0 from 10.0.0.0/8 -> 192.0.2.0/28 random round-robin",
       "t.conf:1:51: one pool type per rule, got 'round-robin' after 'random'"},
      {"nat on em0 proto udp from 10.0.0.0/8 -> 192.0.2.0/28 random port 5000",
       "t.conf:1:61: the translation 'port' comes before the pool options, as in pf.conf"},
      {"nat on em0 proto udp from 10.0.0.0/8 -> 192.0.2.0/28 port 5000 random port 6000",
       "t.conf:1:71: one 'port' per translation"},
      {"nat on em0 from 10.0.0.0/8 -> 192.0.2.0/28 sticky-address",
       "t.conf:1:44: sticky-address is not supported: its memory of each source would not survive a "
       "failover; "
       "source-hash maps a source to the same address on both nodes"},
      {"nat on em0 from 10.0.0.0/8 -> 192.0.2.0/28 source-hash 0x0123",
       "t.conf:1:56: a source-hash key is 0x and 32 hex digits (128 bits), got '0x0123'"},
      {"nat on em0 from 10.0.0.0/8 -> 192.0.2.0/28 source-hash 0x0123456789abcdef0123456789abcdeg",
       "t.conf:1:56: a source-hash key is 0x and 32 hex digits (128 bits), got "
       "'0x0123456789abcdef0123456789abcdeg'"},
      {"nat on em0 from 10.0.0.0/8 -> { 192.0.2.1, 2001:db8::1 }",
       "t.conf:1:44: translation address '2001:db8::1' is not an IPv4 address, as the pool's first address "
       "is"},
      {"nat on em0 inet6 from 2001:db8::/32 -> { 2001:db8:1::1 192.0.2.1 }",
       "t.conf:1:56: translation address '192.0.2.1' is not an IPv6 address, as the rule's address family "
       "requires"},
      {"nat on em0 from 10.0.0.0/8 -> (em0) random",
       "t.conf:1:37: an interface's addresses are walked round-robin: no other pool type"},
      {"nat on em0 from 10.0.0.0/8 -> { }",
       "t.conf:1:33: empty list: expected at least one translation address"},
      {"nat on em0 from 10.0.0.0/8 -> 192.0.2.1 port 2000:1000",
       "t.conf:1:46: port range 2000 to 1000 is empty: the first port must not be greater than the second"},
      {"nat on em0 inet6 from any -> 192.0.2.1",
       "t.conf:1:30: translation address '192.0.2.1' is not an IPv6 address, as the rule's address family "
       "requires"},
      {"no nat on em0 from 10.0.0.0/8 -> 192.0.2.1",
       "t.conf:1:31: 'no nat' exempts packets from translation and takes no '->' target"},
      {"no pass all", "t.conf:1:4: expected 'nat', 'rdr' or 'binat' after 'no', got 'pass'"},
      {"binat on em0 from 10.0.0.5 port 80 -> 192.0.2.5",
       "t.conf:1:28: binat maps whole addresses and takes no 'port'"},
      {"binat on em0 from 10.0.0.5 -> 192.0.2.5 port 80",
       "t.conf:1:41: binat maps whole addresses and takes no 'port'"},
      {"nat on em0 proto tcp from 10.0.0.0/8 -> 192.0.2.1 port 0:1023",
       "t.conf:1:56: a translation port must be between 1 and 65535, got '0:1023': port 0 carries no "
       "connection"},
      {"rdr on em0 proto tcp to any port 80 -> 10.0.0.1 port 0",
       "t.conf:1:54: a translation port must be between 1 and 65535, got '0': port 0 carries no connection"},
      {"rdr on em0 proto tcp to any port 80 -> 10.0.0.1 port < 80",
       "t.conf:1:54: expected port number or range (P:Q or P:*) after the translation address, got '<'"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    CHECK(parse_error(c.text) == c.expected);
  }
}

TEST_CASE("probability: a percentage or a fraction, anywhere among the rule's options", "[parser]") {
  const std::pair<const char*, double> forms[] = {
      {"pass in all probability 20%", 0.2},
      {"pass in all probability 12.5%", 0.125},
      {"pass in all probability 0.25", 0.25},
      {"pass in all probability 1", 1.0},
      {"pass in all probability 0%", 0.0},
      {"pass in all probability 100%", 1.0},
      {"block in all probability 0.001%", 1e-5},
      {"pass in all probability 5% label \"x\"", 0.05},
      {"pass out all tagged A probability 50%", 0.5},
  };
  for (const auto& [text, value] : forms) {
    INFO(text);
    const RuleFile f = parse_ok(text);
    REQUIRE(f.filter_rules.size() == 1);
    CHECK(f.filter_rules[0].probability == Approx(value));
  }
  CHECK(parse_ok("pass in all").filter_rules[0].probability == 1.0);
  // A macro may hold it, as any other value.
  CHECK(parse_ok("p = \"30%\"\npass in all probability $p").filter_rules[0].probability == Approx(0.3));
}

TEST_CASE("once and max-pkt-rate: among the rule's options, in any order", "[parser]") {
  const RuleFile f = parse_ok(
      "pass in proto tcp to port 21 once\n"
      "pass in proto icmp all max-pkt-rate 100/10 label \"ping\"\n"
      "pass in all max-pkt-rate 5/1 once probability 50%\n"
      "r = \"7/2\"\n"
      "block in all max-pkt-rate $r\n");
  REQUIRE(f.filter_rules.size() == 4);
  CHECK(f.filter_rules[0].once);
  CHECK(f.filter_rules[0].max_pkt_rate == 0);
  CHECK_FALSE(f.filter_rules[1].once);
  CHECK(f.filter_rules[1].max_pkt_rate == 100);
  CHECK(f.filter_rules[1].max_pkt_rate_seconds == 10);
  CHECK(f.filter_rules[2].once);
  CHECK(f.filter_rules[2].max_pkt_rate == 5);
  CHECK(f.filter_rules[2].max_pkt_rate_seconds == 1);
  CHECK(f.filter_rules[2].probability == Approx(0.5));
  CHECK(f.filter_rules[3].max_pkt_rate == 7);
  CHECK(f.filter_rules[3].max_pkt_rate_seconds == 2);
}

TEST_CASE("tos: a DSCP name or a number, among the rule's options", "[parser]") {
  const std::pair<const char*, int> forms[] = {
      {"pass in all tos lowdelay", 0x10}, {"pass in all tos ef", 0xb8},
      {"pass in all tos af21", 0x48},     {"pass in all tos cs6", 0xc0},
      {"pass in all tos 0x28", 0x28},     {"block out all tos 184 label \"x\"", 184},
  };
  for (const auto& [text, value] : forms) {
    INFO(text);
    const RuleFile f = parse_ok(text);
    REQUIRE(f.filter_rules.size() == 1);
    REQUIRE(f.filter_rules[0].tos);
    CHECK(*f.filter_rules[0].tos == value);
  }
  CHECK_FALSE(parse_ok("pass in all").filter_rules[0].tos);
}

TEST_CASE("received-on: an interface, a negated one or a list, among the rule's options", "[parser]") {
  CHECK(render(parse_ok("pass out on ext0 all received-on lan0").filter_rules[0].received_on) == "lan0");
  CHECK(render(parse_ok("pass out all received-on ! lan0 label \"x\"").filter_rules[0].received_on) ==
        "!lan0");
  CHECK(render(parse_ok("block out all tagged A received-on { lan0, dmz0 } probability 5%")
                   .filter_rules[0]
                   .received_on) == "lan0,dmz0");
  CHECK(parse_ok("pass out all").filter_rules[0].received_on.empty());
}

TEST_CASE("RuleError::to_string formats file:line:column, or file alone for file errors") {
  CHECK(
      (RuleError{{"a.conf", 3, 7}, "expected x, got 'y'"}.to_string() == "a.conf:3:7: expected x, got 'y'"));
  CHECK((RuleError{{"a.conf", 0, 0}, "cannot read rule file: Permission denied"}.to_string() ==
         "a.conf: cannot read rule file: Permission denied"));
}

TEST_CASE("parse_rules_file: reads a file, names it in locations, reports OS errors") {
  char path[] = "/tmp/pairwall-rules-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const std::string text = "pass all\nblock in on em0 bogus\n";
  REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
  auto r = parse_rules_file(path);
  REQUIRE(std::holds_alternative<RuleError>(r));
  CHECK(std::get<RuleError>(r).to_string() ==
        std::string(path) + ":2:17: expected 'from', 'to', 'all', a rule option or end of line, got 'bogus'");

  std::ofstream(path) << "pass all\n";
  auto ok = parse_rules_file(path);
  REQUIRE(std::holds_alternative<RuleFile>(ok));
  CHECK(std::get<RuleFile>(ok).file == path);
  CHECK(std::get<RuleFile>(ok).filter_rules.at(0).location.file == path);
  std::remove(path);

  auto missing = parse_rules_file(path);
  REQUIRE(std::holds_alternative<RuleError>(missing));
  CHECK(std::get<RuleError>(missing).location.line == 0);
  CHECK(std::get<RuleError>(missing).to_string() ==
        std::string(path) + ": cannot read rule file: No such file or directory");

  auto dir = parse_rules_file("/");
  REQUIRE(std::holds_alternative<RuleError>(dir));
  CHECK(std::get<RuleError>(dir).to_string() == "/: cannot read rule file: Is a directory");

  // Neither a device nor a FIFO is read: /dev/zero would fill the memory, a FIFO block the reader.
  auto device = parse_rules_file("/dev/zero");
  REQUIRE(std::holds_alternative<RuleError>(device));
  CHECK(std::get<RuleError>(device).to_string() == "/dev/zero: cannot read rule file: not a regular file");
  pairwall::test::TempDir fifo_dir("fifo");
  const std::string fifo = (fifo_dir.path / "rules").string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  auto pipe = parse_rules_file(fifo);
  REQUIRE(std::holds_alternative<RuleError>(pipe));
  CHECK(std::get<RuleError>(pipe).to_string() == fifo + ": cannot read rule file: not a regular file");
}

TEST_CASE("table files: entries join their table once, relative to the rule file, errors where they are") {
  pairwall::test::TempDir dir("table-files");
  const std::string rules = (dir.path / "pf.conf").string();
  auto write = [&dir](const std::string& name, const std::string& text) {
    std::ofstream(dir.path / name) << text;
    return (dir.path / name).string();
  };
  const std::string feed = write("feed.txt",
                                 "# a feed: one entry a line, or several\n"
                                 "192.0.2.1 198.51.100.0/24\t2001:db8::/32   # a comment after entries\n"
                                 "\n"
                                 "!198.51.100.7\r\n"
                                 "192.0.2.1\n"
                                 "!192.0.2.1 198.51.100.7 !203.0.113.9\n");
  write(rules, "table <feed> persist file \"feed.txt\" file \"" + feed + "\" { 192.0.2.1, 203.0.113.9 }\n" +
                   "table <plain> { 10.0.0.1 }\nblock in quick from <feed>\n");
  auto parsed = parse_rules_file(rules);
  REQUIRE(std::holds_alternative<RuleFile>(parsed));
  const RuleFile& file = std::get<RuleFile>(parsed);
  const Table& t = file.tables.at(0);
  REQUIRE(t.files.size() == 2);
  CHECK(t.files[0].path == "feed.txt");
  CHECK(t.files[0].location.line == 1);
  CHECK(t.files[0].location.column == 27);
  std::vector<std::string> entries;
  for (const IpPrefix& p : t.entries) entries.push_back(to_string(p));
  CHECK(entries ==
        std::vector<std::string>{"192.0.2.1/32", "203.0.113.9/32", "198.51.100.0/24", "2001:db8::/32"});
  REQUIRE(t.negated_entries.size() == 1);
  CHECK(to_string(t.negated_entries[0]) == "198.51.100.7/32");
  CHECK(file.tables.at(1).entries.size() == 1);
  CHECK(t.lists_entries);
  CHECK(file.tables.at(1).lists_entries);

  // parse_rules() names the files and reads none.
  auto text_only = parse_rules("table <t> file \"/nonexistent\"\n", "t.conf");
  REQUIRE(std::holds_alternative<RuleFile>(text_only));
  CHECK(std::get<RuleFile>(text_only).tables.at(0).entries.empty());
  CHECK(std::get<RuleFile>(text_only).tables.at(0).lists_entries);
  // Neither a list nor a file: a reload keeps the running table's entries.
  auto unlisted = parse_rules("table <bruteforce> persist\ntable <empty> persist {}\n", "t.conf");
  REQUIRE(std::holds_alternative<RuleFile>(unlisted));
  CHECK_FALSE(std::get<RuleFile>(unlisted).tables.at(0).lists_entries);
  CHECK(std::get<RuleFile>(unlisted).tables.at(1).lists_entries);

  write(rules, "table <feed> persist file \"missing.txt\"\n");
  auto missing = parse_rules_file(rules);
  REQUIRE(std::holds_alternative<RuleError>(missing));
  CHECK(std::get<RuleError>(missing).to_string() == rules + ":1:27: cannot read table file \"" +
                                                        (dir.path / "missing.txt").string() +
                                                        "\": No such file or directory");

  write("bad.txt", "192.0.2.1\n  10.0.0.1/8 # host bits\n");
  write(rules, "table <feed> file \"bad.txt\"\n");
  auto bad = parse_rules_file(rules);
  REQUIRE(std::holds_alternative<RuleError>(bad));
  CHECK(std::get<RuleError>(bad).to_string() ==
        (dir.path / "bad.txt").string() +
            ":2:3: expected an address or prefix (e.g. 10.0.0.1, "
            "2001:db8::/32, !10.0.0.0/8), got '10.0.0.1/8': host bits "
            "set, did you mean 10.0.0.0/8?");
  // As the rule file's own lists say it, an exception's network offered as an exception.
  auto negated = parse_table_entries("!2001:db8::1/32\n", "feed");
  REQUIRE(std::holds_alternative<RuleError>(negated));
  CHECK(std::get<RuleError>(negated).to_string() ==
        "feed:1:1: expected an address or prefix (e.g. 10.0.0.1, 2001:db8::/32, !10.0.0.0/8), got "
        "'!2001:db8::1/32': host bits set, did you mean !2001:db8::/32?");

  CHECK(parse_error("table <t> file feed.txt\n") ==
        "t.conf:1:16: expected a quoted file name after 'file', e.g. \"/etc/pairwall/blocked\", got "
        "'feed.txt'");
  CHECK(parse_error("file = \"x\"\n") == "t.conf:1:1: 'file' is a keyword and cannot be a macro name");
}

// Included files from memory: path -> text; a missing path reads as ENOENT.
struct FakeFiles {
  std::map<std::string, std::string> files;
  std::vector<std::string> read;  // paths, in the order they were read
  ReadFile reader() {
    return [this](const std::string& path, std::string& text) {
      read.push_back(path);
      auto it = files.find(path);
      if (it == files.end()) return ENOENT;
      text = it->second;
      return 0;
    };
  }
};

std::string render_rules(const RuleFile& f) {
  std::string out;
  for (const FilterRule& r : f.filter_rules) {
    out += r.location.file + ":" + std::to_string(r.location.line) + " " +
           (r.action == Action::Pass ? "pass" : "block") + " " + render(r.interfaces) + "\n";
  }
  return out;
}

TEST_CASE("include: the file's statements stand where it is named, macros shared both ways") {
  FakeFiles fs;
  fs.files["/etc/pw/site/lan.conf"] =
      "lan_if = \"lan0\"\n"
      "pass in on $ext_if\n"
      "include \"dmz.conf\"\n"  // relative to this file's directory
      "block in on $lan_if";    // no newline at the end
  fs.files["/etc/pw/site/dmz.conf"] = "pass out on dmz0\n";
  fs.files["/etc/pw/last.conf"] = "block out on $lan_if\n";
  auto r = parse_rules(
      "ext_if = \"ext0\"\n"
      "block all\n"
      "include \"site/lan.conf\"\n"
      "pass in on $lan_if\n"
      "include \"/etc/pw/last.conf\"",  // the main file ends on an include
      "/etc/pw/pf.conf", fs.reader());
  if (auto* e = std::get_if<RuleError>(&r)) FAIL(e->to_string());
  const RuleFile& f = std::get<RuleFile>(r);
  CHECK(render_rules(f) ==
        "/etc/pw/pf.conf:2 block \n"
        "/etc/pw/site/lan.conf:2 pass ext0\n"
        "/etc/pw/site/dmz.conf:1 pass dmz0\n"
        "/etc/pw/site/lan.conf:4 block lan0\n"
        "/etc/pw/pf.conf:4 pass lan0\n"
        "/etc/pw/last.conf:1 block lan0\n");
  CHECK(f.file == "/etc/pw/pf.conf");
  CHECK(fs.read ==
        std::vector<std::string>{"/etc/pw/site/lan.conf", "/etc/pw/site/dmz.conf", "/etc/pw/last.conf"});
}

TEST_CASE("include: errors name the file they are in, and the include that failed") {
  FakeFiles fs;
  fs.files["/r/a.conf"] = "pass all\n\nblock in on em0 bogus\n";
  fs.files["/r/self.conf"] = "include \"self.conf\"\n";
  fs.files["/r/loop1.conf"] = "include \"loop2.conf\"\n";
  fs.files["/r/loop2.conf"] = "pass all\ninclude \"loop1.conf\"\n";
  fs.files["/r/macro.conf"] = "x = \"1\"\n";
  fs.files["/r/table.conf"] = "\ntable <t> persist\n";
  fs.files["/r/undefined.conf"] = "pass in on $nowhere\n";
  fs.files["/r/open.conf"] = "pass in proto { tcp\n";
  auto error = [&fs](std::string_view text) {
    auto r = parse_rules(text, "/r/pf.conf", fs.reader());
    if (std::holds_alternative<RuleFile>(r)) FAIL("parsed without error: " << text);
    return std::get<RuleError>(r).to_string();
  };
  CHECK(error("include \"a.conf\"\n") ==
        "/r/a.conf:3:17: expected 'from', 'to', 'all', a rule option or end of line, got 'bogus'");
  CHECK(error("pass all\ninclude \"missing.conf\"\n") ==
        "/r/pf.conf:2:9: cannot read included file \"/r/missing.conf\": No such file or directory");
  CHECK(error("include \"self.conf\"\n") == "/r/self.conf:1:9: \"/r/self.conf\" includes itself");
  CHECK(error("include \"loop1.conf\"\n") == "/r/loop2.conf:2:9: \"/r/loop1.conf\" includes itself");
  CHECK(error("include \"pf.conf\"\n") == "/r/pf.conf:1:9: \"/r/pf.conf\" includes itself");
  CHECK(error("pass all\ntable <t> { }\ninclude \"table.conf\"\n") ==
        "/r/table.conf:2:7: table <t> is already defined at /r/pf.conf:2:7");
  CHECK(error("include \"undefined.conf\"\n") == "/r/undefined.conf:1:12: undefined macro '$nowhere'");
  // A statement cannot run past the end of its file into the next.
  CHECK(error("include \"open.conf\"\n}\n") ==
        "/r/open.conf:2:1: expected '}' to close the list opened at line 1, column 15, got end of file");
  CHECK(error("include a.conf\n") ==
        "/r/pf.conf:1:9: expected a quoted file name after 'include', got 'a.conf'");
  CHECK(error("include \"a.conf\" pass\n") ==
        "/r/pf.conf:1:18: expected end of line after the included file's name, got 'pass'");
  CHECK(error("include = \"x\"\n") == "/r/pf.conf:1:1: 'include' is a keyword and cannot be a macro name");
  // Without a way to read files (rules given as text), an include is refused.
  CHECK(parse_error("include \"a.conf\"\n") ==
        "t.conf:1:9: 'include' reads files: these rules were not read from one");

  // Deep nesting is bounded.
  for (int i = 0; i < 40; ++i)
    fs.files["/r/d" + std::to_string(i) + ".conf"] = "include \"d" + std::to_string(i + 1) + ".conf\"\n";
  CHECK(error("include \"d0.conf\"\n") == "/r/d15.conf:1:9: includes nest deeper than 16 files");
}

TEST_CASE("include: parse_rules_file reads included files from disk, and their table files beside them") {
  pairwall::test::TempDir dir("include");
  std::filesystem::create_directories(dir.path / "site");
  std::ofstream(dir.path / "pf.conf") << "include \"site/tables.conf\"\nblock in quick from <feed>\n";
  std::ofstream(dir.path / "site" / "tables.conf") << "table <feed> file \"feed.txt\"\n";
  std::ofstream(dir.path / "site" / "feed.txt") << "192.0.2.1\n";
  auto r = parse_rules_file((dir.path / "pf.conf").string());
  if (auto* e = std::get_if<RuleError>(&r)) FAIL(e->to_string());
  const RuleFile& f = std::get<RuleFile>(r);
  REQUIRE(f.tables.size() == 1);
  REQUIRE(f.tables[0].entries.size() == 1);
  CHECK(to_string(f.tables[0].entries[0]) == "192.0.2.1/32");
  CHECK(f.tables[0].location.file == (dir.path / "site" / "tables.conf").string());

  std::filesystem::remove(dir.path / "site" / "feed.txt");
  auto missing = parse_rules_file((dir.path / "pf.conf").string());
  REQUIRE(std::holds_alternative<RuleError>(missing));
  CHECK(std::get<RuleError>(missing).to_string() ==
        (dir.path / "site" / "tables.conf").string() + ":1:19: cannot read table file \"" +
            (dir.path / "site" / "feed.txt").string() + "\": No such file or directory");
}

TEST_CASE("the packaged sample rule set and the fuzz corpus parse") {
  // The source tree, found from this file's path (tests/unit/engine/rules_parser_test.cc).
  std::string root = __FILE__;
  root.erase(root.rfind("tests/unit/engine/"));
  for (const char* rel : {"packaging/rules/sample.conf", "tests/fuzz/corpus/rules/design.conf",
                          "tests/fuzz/corpus/rules/large.conf", "tests/fuzz/corpus/rules/edge.conf"}) {
    INFO(rel);
    auto r = parse_rules_file(root + rel);
    if (auto* e = std::get_if<RuleError>(&r)) FAIL(e->to_string());
    CHECK(!std::get<RuleFile>(r).filter_rules.empty());
  }
}

TEST_CASE("a large generated rule set parses, one rule per line") {
  std::string text = "table <t> {";
  for (int i = 0; i < 1000; ++i)
    text += " 10." + std::to_string(i / 256) + "." + std::to_string(i % 256) + ".0/24";
  text += " }\n";
  for (int i = 0; i < 5000; ++i) {
    text += "pass in quick on em" + std::to_string(i % 8) + " proto tcp from <t> to 192.0.2." +
            std::to_string(i % 256) + " port " + std::to_string(1 + i) + " keep state (max " +
            std::to_string(1 + i) + ")\n";
  }
  const RuleFile f = parse_ok(text);
  REQUIRE(f.tables.at(0).entries.size() == 1000);
  REQUIRE(f.filter_rules.size() == 5000);
  CHECK(f.filter_rules[4999].location.line == 5001);
  CHECK(f.filter_rules[4999].to.ports.at(0).low == 5000);
  CHECK(f.filter_rules[4999].state.max_states == 5000);
}

TEST_CASE("hostile macros are bounded: long values, exponential expansion") {
  CHECK(parse_error("a = \"" + std::string(70000, 'x') + "\"") ==
        "t.conf:1:1: value of macro 'a' is longer than 65536 characters");

  // Quoted values keep their `$` until used, so each level multiplies the text by 60. (The
  // innermost value is a comment, which ends with the expansion, so the test stays fast.)
  std::string text = "a = \"# " + std::string(1000, 'x') + "\"\n";
  for (const char* level : {"b", "c", "d"}) {
    text += std::string(level) + " = \"";
    for (int i = 0; i < 60; ++i) text += "$" + std::string(1, static_cast<char>(level[0] - 1)) + " ";
    text += "\"\n";
  }
  text += "pass from { $d }\n";
  CHECK(parse_error(text) ==
        "t.conf:5:13: macros expand to more than 4 MiB of text (macros referring to macros multiply)");
}

TEST_CASE("tag and [!] tagged: pf's names, bare or quoted, after the other options") {
  const RuleFile f = parse_ok(
      "pass in on lan0 proto tcp to port 80 keep state label \"web\" tag WEB\n"
      "pass out on wan0 all ! tagged \"LAN-1.x\"\n"
      "block out tagged WEB tag SEEN\n");
  REQUIRE(f.filter_rules.size() == 3);
  CHECK(f.filter_rules[0].tag == "WEB");
  CHECK(f.filter_rules[0].tagged.empty());
  CHECK(f.filter_rules[1].tagged == "LAN-1.x");
  CHECK(f.filter_rules[1].tagged_negated);
  CHECK(f.filter_rules[2].tagged == "WEB");
  CHECK_FALSE(f.filter_rules[2].tagged_negated);
  CHECK(f.filter_rules[2].tag == "SEEN");
}

TEST_CASE("tag and [!] tagged on translation rules: after the addresses, before '->'") {
  const RuleFile f = parse_ok(
      "rdr on wan0 proto tcp to 203.0.113.1 port 80 tag WEB -> 10.2.0.10\n"
      "nat on wan0 from 10.1.0.0/16 ! tagged DMZ tag OUT -> 203.0.113.1\n"
      "no nat on wan0 to 192.0.2.0/24 tagged LAN\n"
      "binat on wan0 from 10.1.0.5 tag SRV -> 203.0.113.5\n");
  REQUIRE(f.translation_rules.size() == 4);
  CHECK(f.translation_rules[0].tag == "WEB");
  CHECK(f.translation_rules[0].tagged.empty());
  CHECK(f.translation_rules[1].tag == "OUT");
  CHECK(f.translation_rules[1].tagged == "DMZ");
  CHECK(f.translation_rules[1].tagged_negated);
  CHECK(f.translation_rules[2].tagged == "LAN");
  CHECK_FALSE(f.translation_rules[2].tagged_negated);
  CHECK(f.translation_rules[3].tag == "SRV");

  for (const auto& [text, error] : std::vector<std::pair<std::string, std::string>>{
           {"nat on wan0 all tag A tag B -> 203.0.113.1",
            "t.conf:1:23: duplicate 'tag': already given at line 1, column 17"},
           {"nat on wan0 all ! tag A -> 203.0.113.1", "t.conf:1:19: expected 'tagged' after '!', got 'tag'"},
           {"rdr on wan0 all tagged -> 10.2.0.10",
            "t.conf:1:24: expected a tag's name after 'tagged', e.g. LAN, got '->'"},
           {"nat on wan0 all label \"x\" -> 203.0.113.1",
            "t.conf:1:17: expected '->' and a translation address, got 'label'"},
           {"no nat on wan0 all tag A tagged B C",
            "t.conf:1:35: expected 'from', 'to', 'tag', 'tagged' or end of line, got 'C'"},
       }) {
    INFO(text);
    CHECK(parse_error(text) == error);
  }
}

TEST_CASE("match rules: a filter rule's matching options and a tag, deciding nothing") {
  const RuleFile f = parse_ok(
      "match in on lan0 inet proto tcp from 10.1.0.0/16 to port 80 tag LAN label \"lan\"\n"
      "match out tagged LAN tag SEEN\n");
  REQUIRE(f.filter_rules.size() == 2);
  CHECK(f.filter_rules[0].action == Action::Match);
  CHECK(f.filter_rules[0].tag == "LAN");
  CHECK_FALSE(f.filter_rules[0].state.keep_state);
  CHECK(f.filter_rules[1].tagged == "LAN");

  for (const auto& [text, error] : std::vector<std::pair<std::string, std::string>>{
           {"match in quick all tag A",
            "t.conf:1:10: a match rule decides nothing: 'quick' belongs on the rules that do"},
           {"match log in all tag A",
            "t.conf:1:7: a match rule decides nothing: 'log' belongs on the rules that do"},
           {"match in all keep state tag A", "t.conf:1:14: a match rule decides nothing and makes no state"},
           {"match return in all tag A", "t.conf:1:7: 'return' applies to block rules only"},
           {"match in all allow-opts tag A", "t.conf:1:14: 'allow-opts' applies to pass rules only"},
           {"match in on lan0 all",
            "t.conf:1:1: a match rule here carries a tag and does nothing else: add 'tag NAME' (pf's scrub, "
            "nat-to and queue options on match rules are not supported)"},
       }) {
    INFO(text);
    CHECK(parse_error(text) == error);
  }
}

TEST_CASE("address ranges: from one address to another of its family, both ends included") {
  const RuleFile f = parse_ok(
      "pass in from 10.0.0.1 - 10.0.0.50 to ! 2001:db8::1 - 2001:db8::ff\n"
      "block to { 192.0.2.1, 192.0.2.10 - 192.0.2.10 }\n");
  REQUIRE(f.filter_rules.size() == 2);
  CHECK(render(f.filter_rules[0].from) == "10.0.0.1/32-10.0.0.50/32");
  CHECK(render(f.filter_rules[0].to) == "!2001:db8::1/128-2001:db8::ff/128");
  CHECK(render(f.filter_rules[1].to) == "192.0.2.1/32,192.0.2.10/32-192.0.2.10/32");
}
