// Recursive descent over the token stream, one statement per logical line. Statements:
//   name = value                       macro definition
//   include "path"                     another rule file, read where the statement stands
//   table <name> [persist] [const] [counters] [file "path" ...] [{ addr, !addr/len, ... }]
//                                      the options in any order, before or after the one list
//   antispoof [log] [quick] for IF     `log` and `quick` in either order
//   set limit ... | set timeout ...  (limits: states, frags, src-nodes, table-entries)
//   [no] scrub [in|out] [on IF] [inet|inet6] [proto P] [from SRC to DST | all] [options]
//   [no] nat|rdr|binat ...
//   pass|block|match ...
// The first error is thrown as SyntaxError and becomes the RuleError; nothing is recovered,
// so every message is about what the operator wrote, not about a cascade.
#include "daemon/engine/rules/parser.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <tuple>
#include <utility>

#include "daemon/engine/rules/anchors.h"
#include "daemon/engine/rules/lexer.h"
#include "daemon/engine/timeouts.h"

namespace pairwall::engine::rules {
namespace {

// Words with a meaning of their own: they cannot name macros or interfaces.
constexpr std::string_view kKeywords[] = {
    "all",         "allow-opts", "antispoof",    "any",       "binat",   "block",      "code",
    "const",       "drop",       "flags",        "file",      "for",     "fragment",   "from",
    "icmp-type",   "icmp6-type", "in",           "include",   "inet",    "inet6",      "keep",
    "label",       "limit",      "log",          "max",       "max-mss", "min-ttl",    "modulate",
    "nat",         "no",         "no-df",        "on",        "out",     "pass",       "persist",
    "port",        "proto",      "quick",        "random-id", "rdr",     "reassemble", "return",
    "return-icmp", "return-rst", "return-icmp6", "scrub",     "set",     "state",      "table",
    "timeout",     "to",
};

// `path` as named in `file`: a relative path is the file's directory's.
std::string beside(const std::string& file, const std::string& path) {
  if (path.starts_with('/')) return path;
  const auto slash = file.rfind('/');
  return slash == std::string::npos ? path : file.substr(0, slash + 1) + path;
}

// pf.conf statements this subset does not implement: say so instead of "unknown keyword".
constexpr std::string_view kUnsupportedStatements[] = {
    "queue", "altq", "nat-anchor", "rdr-anchor", "binat-anchor",
};

// pf's filter rule options this subset does not implement, and what to do instead: said by name,
// rather than as a token the rule did not expect.
struct UnsupportedOption {
  std::string_view name;
  std::string_view advice;
};
constexpr UnsupportedOption kUnsupportedRuleOptions[] = {
    {"route-to", "packets leave by the kernel's routes (choose them with ip rule)"},
    {"reply-to", "packets leave by the kernel's routes (choose them with ip rule)"},
    {"dup-to", "packets leave by the kernel's routes (choose them with ip rule)"},
    {"fastroute", "packets leave by the kernel's routes (choose them with ip rule)"},
    {"rtable", "routing tables are the kernel's (choose them with ip rule)"},
    {"nat-to", "write a nat rule: nat on IF from ... -> ADDRESS"},
    {"rdr-to", "write an rdr rule: rdr on IF ... -> ADDRESS"},
    {"binat-to", "write a binat rule: binat on IF from ... -> ADDRESS"},
    {"af-to", "there is no translation between address families"},
    {"divert-to", "there is no diverting to local sockets"},
    {"divert-reply", "there is no diverting to local sockets"},
    {"divert-packet", "there is no diverting to local sockets"},
    {"os", "there is no OS fingerprinting"},
    {"user", "this node forwards: there is no local socket to match"},
    {"group", "this node forwards: there is no local socket to match"},
    {"prio", "there are no priorities or queues"},
    {"queue", "there are no priorities or queues"},
    {"set", "there is no 'set prio' or 'set queue'; a scrub rule sets the TOS: scrub out all set-tos T"},
    {"scrub", "write a scrub rule with the same options: scrub in|out [on IF] ... (no-df, max-mss N, ...)"},
};

// Statements of the main rule file only: an anchor holds filter rules and anchors.
constexpr std::string_view kMainFileStatements[] = {
    "table", "set", "scrub", "nat", "rdr", "binat", "no",
};

constexpr std::size_t kMaxAnchorName = 63;   // pf's anchor names, PF_ANCHOR_NAME_SIZE less the NUL
constexpr std::size_t kMaxAnchorDepth = 16;  // anchors within anchors, as includes nest

// An anchor file's error, thrown out of the parser that reads `load anchor` as it is.
struct AnchorFileError {
  RuleError error;
};

// What `load anchor` may still read, shared by the parsers of one rule file: anchor files load
// others, each in a parser of its own, and a file that loads itself would never end.
struct LoadBudget {
  static constexpr unsigned kMaxDepth = Lexer::kMaxIncludeDepth;
  static constexpr unsigned kMaxFiles = Lexer::kMaxFiles;
  unsigned depth = 0;  // of the parser at hand
  unsigned files = 0;  // anchor files read, all told
};

struct Named {
  std::string_view name;
  uint16_t value;
};

// Well-known ports, built in so a rule file means the same on every host (no /etc/services).
constexpr Named kServices[] = {
    {"ftp-data", 20},     {"ftp", 21},     {"ssh", 22},    {"telnet", 23},        {"smtp", 25},
    {"domain", 53},       {"tftp", 69},    {"http", 80},   {"www", 80},           {"kerberos", 88},
    {"pop3", 110},        {"ntp", 123},    {"imap", 143},  {"snmp", 161},         {"snmp-trap", 162},
    {"bgp", 179},         {"ldap", 389},   {"https", 443}, {"isakmp", 500},       {"syslog", 514},
    {"submission", 587},  {"ldaps", 636},  {"imaps", 993}, {"pop3s", 995},        {"openvpn", 1194},
    {"radius", 1812},     {"mysql", 3306}, {"rdp", 3389},  {"ipsec-nat-t", 4500}, {"sip", 5060},
    {"postgresql", 5432},
};

constexpr Named kProtocols[] = {
    {"icmp", 1},    {"igmp", 2},     {"tcp", 6},    {"udp", 17},     {"ipv6", 41},
    {"gre", 47},    {"esp", 50},     {"ah", 51},    {"icmp6", 58},   {"ipv6-icmp", 58},
    {"ospf", 89},   {"pim", 103},    {"vrrp", 112}, {"carp", 112},   {"sctp", 132},
    {"ipencap", 4}, {"etherip", 97}, {"l2tp", 115}, {"pfsync", 240},
};

// RFC 792 / RFC 4443 type numbers under pf's names (pfctl's icmp_type and icmp6_type tables).
constexpr Named kIcmpTypes[] = {
    {"echorep", 0},    {"unreach", 3},    {"squench", 4},    {"redir", 5},     {"althost", 6},
    {"echoreq", 8},    {"routeradv", 9},  {"routersol", 10}, {"timex", 11},    {"paramprob", 12},
    {"timereq", 13},   {"timerep", 14},   {"inforeq", 15},   {"inforep", 16},  {"maskreq", 17},
    {"maskrep", 18},   {"trace", 30},     {"dataconv", 31},  {"mobredir", 32}, {"ipv6-where", 33},
    {"ipv6-here", 34}, {"mobregreq", 35}, {"mobregrep", 36}, {"skip", 39},     {"photuris", 40},
};
constexpr Named kIcmp6Types[] = {
    {"unreach", 1},      {"toobig", 2},        {"timex", 3},        {"paramprob", 4},   {"echoreq", 128},
    {"echorep", 129},    {"groupqry", 130},    {"listqry", 130},    {"grouprep", 131},  {"listenrep", 131},
    {"groupterm", 132},  {"listendone", 132},  {"routersol", 133},  {"routeradv", 134}, {"neighbrsol", 135},
    {"neighbradv", 136}, {"redir", 137},       {"routrrenum", 138}, {"wrureq", 139},    {"wrurep", 140},
    {"fqdnreq", 139},    {"fqdnrep", 140},     {"niqry", 139},      {"nirep", 140},     {"mtraceresp", 200},
    {"mtrace", 201},     {"listenrepv2", 143},
};

// pfctl's names of codes (its icmp_code and icmp6_code tables), each a code of one type only:
// `icmp-type unreach code needfrag`.
struct NamedCode {
  uint8_t type;
  std::string_view name;
  uint8_t code;
};
constexpr NamedCode kIcmpCodes[] = {
    {3, "net-unr", 0},    {3, "host-unr", 1},       {3, "proto-unr", 2},     {3, "port-unr", 3},
    {3, "needfrag", 4},   {3, "srcfail", 5},        {3, "net-unk", 6},       {3, "host-unk", 7},
    {3, "isolate", 8},    {3, "net-prohib", 9},     {3, "host-prohib", 10},  {3, "net-tos", 11},
    {3, "host-tos", 12},  {3, "filter-prohib", 13}, {3, "host-preced", 14},  {3, "cutoff-preced", 15},
    {5, "redir-net", 0},  {5, "redir-host", 1},     {5, "redir-tos-net", 2}, {5, "redir-tos-host", 3},
    {9, "normal-adv", 0}, {9, "common-adv", 16},    {11, "transit", 0},      {11, "reassemb", 1},
    {12, "badhead", 0},   {12, "optmiss", 1},       {12, "badlen", 2},       {40, "unknown-ind", 1},
    {40, "auth-fail", 2}, {40, "decrypt-fail", 3},
};
constexpr NamedCode kIcmp6Codes[] = {
    {1, "admin-unr", 1}, {1, "noroute-unr", 0}, {1, "notnbr-unr", 2},    {1, "beyond-unr", 2},
    {1, "addr-unr", 3},  {1, "port-unr", 4},    {3, "transit", 0},       {3, "reassemb", 1},
    {4, "badhead", 0},   {4, "nxthdr", 1},      {137, "redironlink", 0}, {137, "redirrouter", 1},
};

template <std::size_t N>
std::optional<uint16_t> lookup(const Named (&table)[N], std::string_view name) {
  for (const auto& e : table) {
    if (e.name == name) return e.value;
  }
  return std::nullopt;
}

bool is_keyword(std::string_view word) {
  for (auto k : kKeywords) {
    if (k == word) return true;
  }
  return false;
}

bool is_statement_keyword(std::string_view word) {
  return word == "pass" || word == "block" || word == "table" || word == "set" || word == "scrub" ||
         word == "nat" || word == "rdr" || word == "binat";
}

// Digits only (no sign, no hex): nullopt for anything else; UINT64_MAX when it does not fit, so
// range checks still reject it with the value the operator wrote.
std::optional<uint64_t> decimal(std::string_view text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range) return std::numeric_limits<uint64_t>::max();
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return v;
}

IpAddress host_bits(Family f, uint8_t length) {
  if (f == Family::V4) return {0, length >= 32 ? 0 : (uint64_t{0xffffffff} >> length)};
  if (length >= 128) return {0, 0};
  if (length >= 64) return {0, length == 64 ? ~uint64_t{0} : (~uint64_t{0} >> (length - 64))};
  return {length == 0 ? ~uint64_t{0} : (~uint64_t{0} >> length), ~uint64_t{0}};
}

constexpr const char* kFilterOrder =
    "filter rules read: pass|block [drop|return|return-rst|return-icmp|return-icmp6] [in|out] [log [(all)]] "
    "[quick] (either order) [on IF] [inet|inet6] [proto P] from SRC [port P] to DST [port P] | all, then "
    "flags, icmp-type, tos, state options, allow-opts, label, tag, tagged, received-on, probability, once "
    "and max-pkt-rate";

// Where a keyword belongs in a filter rule, to explain "out of order" instead of "unexpected".
int filter_stage(std::string_view w) {
  if (w == "drop" || w == "return" || w == "return-rst" || w == "return-icmp" || w == "return-icmp6")
    return 1;
  if (w == "in" || w == "out") return 2;
  if (w == "log") return 3;
  if (w == "quick") return 4;
  if (w == "on") return 5;
  if (w == "inet" || w == "inet6") return 6;
  if (w == "proto") return 7;
  if (w == "from" || w == "to" || w == "all") return 8;
  return 0;
}

class Parser {
 public:
  // `anchor_rules`: the text is an anchor's (pfctl -a NAME -f FILE), which holds filter rules,
  // anchors and macros only.
  Parser(std::string_view text, std::string file, const ReadFile& read_file, bool anchor_rules,
         LoadBudget& budget)
      : lexer_(text, file), read_file_(read_file), anchor_rules_(anchor_rules), budget_(budget) {
    out_.file = std::move(file);
  }

  const std::string& file_name(uint16_t file) const { return lexer_.file_name(file); }
  SourceLocation location(const SyntaxError& e) const {
    return SourceLocation{file_name(e.file()), e.line(), e.column()};
  }

  RuleFile run() {
    for (;;) {
      const Token& t = peek();
      if (t.kind == TokenKind::End && t.file == 0) break;
      if (t.kind == TokenKind::Newline || t.kind == TokenKind::End) {  // or an included file's end
        take();
        continue;
      }
      statement();
    }
    for (const PendingLoad& load : pending_loads_) load_anchor_file(load);
    return std::move(out_);
  }

 private:
  // ---- token plumbing --------------------------------------------------------------------

  const Token& peek(std::size_t n = 0) {
    while (ahead_.size() <= n) ahead_.push_back(lexer_.next());
    return ahead_[n];
  }

  Token take() {
    peek();
    Token t = std::move(ahead_.front());
    ahead_.pop_front();
    return t;
  }

  bool at(TokenKind kind, std::size_t n = 0) { return peek(n).kind == kind; }

  bool at_word(std::string_view word, std::size_t n = 0) {
    const Token& t = peek(n);
    return t.kind == TokenKind::Word && t.text == word;
  }

  bool accept_word(std::string_view word) {
    if (!at_word(word)) return false;
    take();
    return true;
  }

  bool at_end_of_statement() { return at(TokenKind::Newline) || at(TokenKind::End); }

  SourceLocation loc(const Token& t) const {
    return SourceLocation{lexer_.file_name(t.file), t.line, t.column};
  }

  static std::string where(const Token& t) {
    return "line " + std::to_string(t.line) + ", column " + std::to_string(t.column);
  }

  [[noreturn]] static void fail_at(const Token& t, const std::string& message) {
    throw SyntaxError(t.line, t.column, message, t.file);
  }

  [[noreturn]] static void fail_expected(const Token& t, std::string_view what) {
    if (const std::string unterminated = t.unterminated_table(); !unterminated.empty())
      fail_at(t, unterminated);
    fail_at(t, "expected " + std::string(what) + ", got " + t.describe());
  }

  void expect_word(std::string_view word, std::string_view what) {
    if (!accept_word(word)) fail_expected(peek(), what);
  }

  // A word or quoted string standing for a value (name, number, address).
  Token take_value(std::string_view what) {
    const Token& t = peek();
    if (t.kind != TokenKind::Word && t.kind != TokenKind::String) fail_expected(t, what);
    return take();
  }

  void expect_end(std::string_view what) {
    if (!at_end_of_statement()) fail_expected(peek(), what);
  }

  uint64_t number(const Token& t, uint64_t min, uint64_t max, std::string_view what) {
    if (t.kind != TokenKind::Word && t.kind != TokenKind::String) fail_expected(t, what);
    auto v = decimal(t.text);
    if (!v) fail_expected(t, what);
    if (*v < min || *v > max) {
      fail_at(t, std::string(what) + " must be between " + std::to_string(min) + " and " +
                     std::to_string(max) + ", got " + t.describe());
    }
    return *v;
  }

  // pf's forms: a percentage (`20%`, `12.5%`) or a fraction (`0.2`), each of digits and one point.
  double probability(const Token& t) {
    std::string_view text = t.text;
    const bool percent = !text.empty() && text.back() == '%';
    if (percent) text.remove_suffix(1);
    const std::size_t point = text.find('.');
    const auto digits = [](std::string_view d) {
      return !d.empty() && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    const bool well_formed =
        t.kind == TokenKind::Word &&
        (point == std::string_view::npos ? digits(text)
                                         : digits(text.substr(0, point)) && digits(text.substr(point + 1)));
    const double value = well_formed ? std::strtod(std::string(text).c_str(), nullptr) : -1;
    if (!well_formed || value > (percent ? 100.0 : 1.0)) {
      fail_at(t,
              "a probability is a percentage from 0% to 100% or a fraction from 0 to 1, got " + t.describe());
    }
    return percent ? value / 100 : value;
  }

  // `{ a, b c }`: commas optional, newlines allowed inside (as in pf). Calls `element` for each.
  // An empty list is a mistake everywhere but in a table (`table <t> persist {}`). `nested`: a list
  // may hold lists, whose elements join it (pf's host lists: `lan = "{ a b }"`, then `{ $lan c }`).
  template <typename F>
  void list(std::string_view what, F&& element, bool allow_empty = false, bool nested = false) {
    const Token open = take();  // '{'
    bool any = false;
    bool comma_ok = false;
    for (;;) {
      bool crossed_line = false;
      while (at(TokenKind::Newline)) {
        take();
        crossed_line = true;
      }
      const Token& t = peek();
      if (t.kind == TokenKind::RBrace) {
        if (!any && !allow_empty) fail_at(t, "empty list: expected at least one " + std::string(what));
        take();
        return;
      }
      if (t.kind == TokenKind::End ||
          (crossed_line && t.kind == TokenKind::Word && is_statement_keyword(t.text))) {
        fail_at(t, "expected '}' to close the list opened at " + where(open) + ", got " + t.describe());
      }
      if (t.kind == TokenKind::Comma && comma_ok) {
        take();
        comma_ok = false;
        continue;
      }
      if (t.kind == TokenKind::LBrace) {
        if (!nested) fail_at(t, "lists cannot be nested: expected " + std::string(what));
        list(what, element, false, true);
      } else {
        element();
      }
      any = true;
      comma_ok = true;
    }
  }

  // ---- statements ------------------------------------------------------------------------

  void statement() {
    const Token& t = peek();
    if (t.kind == TokenKind::Word && at(TokenKind::Eq, 1)) return macro();
    if (t.kind != TokenKind::Word) {
      fail_expected(t, "a rule, 'table', 'set', 'include' or a macro definition");
    }
    if (t.text == "include") return include();
    if (anchor_rules_ || !scope_.empty()) {
      for (auto m : kMainFileStatements) {
        if (m == t.text)
          fail_at(t,
                  "'" + t.text + "' belongs in the main rule file: an anchor holds filter rules and anchors");
      }
    }
    if (t.text == "anchor") return anchor();
    if (t.text == "load") return load_anchor();
    if (t.text == "table") return table();
    if (t.text == "set") return set();
    if (t.text == "scrub" || (t.text == "no" && at_word("scrub", 1))) return scrub();
    if (t.text == "nat" || t.text == "rdr" || t.text == "binat" || t.text == "no") return translation();
    if (t.text == "pass" || t.text == "block" || t.text == "match") return filter();
    if (t.text == "antispoof") return antispoof();
    for (auto u : kUnsupportedStatements) {
      if (u == t.text) fail_at(t, "'" + t.text + "' rules are not supported");
    }
    fail_expected(t,
                  "a rule (pass, block, match, antispoof, anchor, nat, rdr, binat, scrub), 'table', 'set', "
                  "'include' or a macro definition");
  }

  // anchor "name" [in|out] [quick] [on IF] [inet|inet6] [proto P] [all] [{ rules }]
  void anchor() {
    const Token first = take();
    Anchor a;
    a.location = loc(first);
    const Token name = anchor_name("anchor");
    a.path = scoped(name.text);
    a.parent = scope_;
    if (static_cast<std::size_t>(std::count(a.path.begin(), a.path.end(), '/')) >= kMaxAnchorDepth)
      fail_at(name, "anchors nest deeper than " + std::to_string(kMaxAnchorDepth));
    if (const Anchor* known = find_anchor(out_, a.path)) {
      fail_at(name, "anchor \"" + a.path + "\" is already declared at " + known->location.file_and_line() +
                        ": an anchor stands in one place");
    }
    a.direction = direction();
    a.quick = accept_word("quick");
    if (accept_word("on")) a.interfaces = interfaces();
    a.family = family();
    if (accept_word("proto")) a.protocols = protocols();
    accept_word("all");
    if (at_word("from") || at_word("to")) {
      fail_at(peek(),
              "an anchor matches on direction, interface, family and protocol: write 'from' and "
              "'to' on its rules");
    }
    a.position = static_cast<uint32_t>(out_.filter_rules.size());
    const bool block = at(TokenKind::LBrace);
    a.file_defines_rules = block;
    out_.anchors.push_back(a);
    if (block) anchor_block(take(), a.path);
    expect_end(block ? "end of line after the anchor's '}'"
                     : "'in', 'out', 'quick', 'on', 'inet', 'inet6', 'proto', '{' or end of line");
  }

  // The rules of an anchor written in place, up to its '}'.
  void anchor_block(const Token& open, const std::string& path) {
    if (!at(TokenKind::Newline)) fail_expected(peek(), "end of line after the anchor's '{'");
    const std::string outer = std::exchange(scope_, path);
    for (;;) {
      const Token& t = peek();
      if (t.kind == TokenKind::RBrace) {
        if (t.file != open.file) {
          fail_at(t, "this '}' would close anchor \"" + path + "\" opened at " + file_name(open.file) + ":" +
                         std::to_string(open.line) + ":" + std::to_string(open.column) +
                         ": an anchor's block ends in the file that opens it");
        }
        break;
      }
      // As every statement, an anchor's block ends in the file that opened it; the ends of files
      // it includes are passed over.
      if (t.kind == TokenKind::End && (t.file == 0 || t.file == open.file)) {
        fail_at(t, "anchor \"" + path + "\" opened at " + where(open) + " has no '}'");
      }
      if (t.kind == TokenKind::Newline || t.kind == TokenKind::End) {  // or an included file's end
        take();
        continue;
      }
      statement();
    }
    take();
    scope_ = outer;
  }

  // A `load anchor` statement, read once its file is.
  struct PendingLoad {
    Token name;
    std::string path;  // the anchor's, from the scope the statement stood in
    Token file;
  };

  // load anchor "name" from "FILE": the file's rules are the anchor's, as `pfctl -a name -f FILE`
  // would load them; a relative FILE is the naming file's directory's. Read once this file is: as
  // pfctl loads anchors after the rule set, the anchor may be declared further down.
  void load_anchor() {
    take();
    expect_word("anchor", "'anchor' after 'load' (load anchor NAME from FILE)");
    const Token name = anchor_name("load anchor");
    std::string path = scoped(name.text);
    expect_word("from", "'from' and the anchor's file (load anchor NAME from FILE)");
    if (!at(TokenKind::String)) fail_expected(peek(), "the anchor's file in quotes");
    const Token file = take();
    expect_end("end of line after the anchor's file");
    pending_loads_.push_back(PendingLoad{name, std::move(path), file});
  }

  void load_anchor_file(const PendingLoad& load) {
    const Token& name = load.name;
    const Token& file = load.file;
    const std::string& path = load.path;
    Anchor* target = find_anchor(out_, path);
    if (target == nullptr) fail_at(name, "no anchor \"" + path + "\" is declared in this file");
    if (target->file_defines_rules) {
      fail_at(name, "anchor \"" + path + "\" has its rules from " + target->location.file_and_line());
    }
    if (!read_file_) fail_at(file, "'load anchor' reads files: these rules were not read from one");
    if (budget_.depth >= LoadBudget::kMaxDepth)
      fail_at(file, "anchor files load others deeper than " + std::to_string(LoadBudget::kMaxDepth));
    if (++budget_.files > LoadBudget::kMaxFiles)
      fail_at(file, "more than " + std::to_string(LoadBudget::kMaxFiles) + " anchor files loaded");
    const std::string file_path = beside(lexer_.file_name(file.file), file.text);
    std::string text;
    if (const int err = read_file_(file_path, text); err != 0)
      fail_at(file, "cannot read anchor file \"" + file_path + "\": " + read_error(err));
    ++budget_.depth;
    Parser content(text, file_path, read_file_, /*anchor_rules=*/true, budget_);
    RuleFile rules;
    try {
      rules = content.run();
    } catch (const SyntaxError& e) {
      throw AnchorFileError{RuleError{content.location(e), e.what()}};
    }
    --budget_.depth;
    target->file_defines_rules = true;
    set_anchor_rules(out_, path, std::move(rules));
  }

  // The name after `anchor` or `load anchor`: pf's characters, no wildcard, no path.
  Token anchor_name(std::string_view keyword) {
    const Token& t = peek();
    if (t.kind != TokenKind::String && t.kind != TokenKind::Word)
      fail_expected(t, "the anchor's name after '" + std::string(keyword) + "', e.g. \"ftp-proxy\"");
    Token name = take();
    if (name.text.empty() || name.text.size() > kMaxAnchorName)
      fail_at(name, "an anchor's name has 1 to " + std::to_string(kMaxAnchorName) + " characters");
    if (name.text.find('*') != std::string::npos)
      fail_at(name, "anchor wildcards ('*') are not supported: name each anchor");
    if (name.text.find('/') != std::string::npos)
      fail_at(name, "an anchor inside another is written inside its '{ }': its name has no '/'");
    for (const char c : name.text) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
        fail_at(name, "an anchor's name holds letters, digits, '_', '-' and '.' only");
    }
    return name;
  }

  std::string scoped(const std::string& name) const { return scope_.empty() ? name : scope_ + "/" + name; }

  // include "path": the file's statements stand here; a relative path is the including file's
  // directory's.
  void include() {
    take();
    if (!at(TokenKind::String)) fail_expected(peek(), "a quoted file name after 'include'");
    const Token name = take();
    if (!at_end_of_statement()) fail_expected(peek(), "end of line after the included file's name");
    if (!read_file_) fail_at(name, "'include' reads files: these rules were not read from one");
    const std::string path = beside(lexer_.file_name(name.file), name.text);
    if (lexer_.reading(path)) fail_at(name, "\"" + path + "\" includes itself");
    std::string text;
    if (const int err = read_file_(path, text); err != 0)
      fail_at(name, "cannot read included file \"" + path + "\": " + read_error(err));
    // The line's end is all the lookahead holds (an end of file would stop the parse before the
    // included statements): the included file's tokens come next.
    ahead_.clear();
    included_.push_back(std::move(text));
    lexer_.include(included_.back(), path, name);
  }

  void macro() {
    const Token name = take();
    take();  // '='
    bool identifier = !name.text.empty() && !(name.text[0] >= '0' && name.text[0] <= '9');
    for (char c : name.text) {
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) {
        identifier = false;
      }
    }
    if (!identifier) {
      fail_at(name, "macro name '" + name.text +
                        "' must start with a letter or '_' and contain only letters, digits and '_'");
    }
    if (is_keyword(name.text)) {
      fail_at(name, "'" + name.text + "' is a keyword and cannot be a macro name");
    }
    if (at_end_of_statement()) fail_expected(peek(), "a macro value after '='");
    // Values are stored as text and re-read where $name appears, so a macro may hold a list.
    std::string value;
    while (!at_end_of_statement()) {
      if (!value.empty()) value += ' ';
      value += take().source_text();
      if (value.size() > Lexer::kMaxMacroValue) break;  // define_macro reports it
    }
    lexer_.define_macro(name, std::move(value));
  }

  void table() {
    take();  // 'table'
    const Token name = peek();
    if (name.kind != TokenKind::Table) fail_expected(name, "a table name in angle brackets, e.g. <blocked>");
    take();
    if (auto it = table_index_.find(name.text); it != table_index_.end()) {
      // As a macro's: the first definition's file too when it lies in another.
      const SourceLocation& first = out_.tables[it->second].location;
      const std::string at =
          first.file != lexer_.file_name(name.file)
              ? first.file + ":" + std::to_string(first.line) + ":" + std::to_string(first.column)
              : "line " + std::to_string(first.line) + ", column " + std::to_string(first.column);
      fail_at(name, "table <" + name.text + "> is already defined at " + at);
    }
    Table table;
    table.location = loc(name);
    table.name = name.text;
    // `persist` holds by construction (every table is kept, used or not); `const` refuses
    // `pairwallctl tables add|delete|flush` on the table, as pf refuses pfctl -T on it. As pfctl,
    // the options stand on either side of the list, in any order.
    std::optional<Token> list_open;
    std::set<IpPrefix> listed;  // plain or negated: a prefix is listed once, its first way
    for (;;) {
      if (accept_word("persist")) continue;
      if (accept_word("const")) {
        table.is_const = true;
        continue;
      }
      if (accept_word("counters")) {
        table.counters = true;
        continue;
      }
      if (accept_word("file")) {
        const Token& path = peek();
        if (path.kind != TokenKind::String || path.text.empty())
          fail_expected(path, "a quoted file name after 'file', e.g. \"/etc/pairwall/blocked\"");
        table.files.push_back(TableFile{loc(path), path.text});
        table.lists_entries = true;
        take();
        continue;
      }
      if (at(TokenKind::LBrace)) {
        if (list_open) {
          fail_at(peek(),
                  "one address list per table: put these entries in the list opened at " + where(*list_open));
        }
        list_open = peek();
        table.lists_entries = true;
        list(
            "address or prefix",
            [&] {
              bool negated = false;
              if (at(TokenKind::Bang)) {
                take();
                negated = true;
              }
              const Token t = take_value("address or prefix");
              AddressElement e;
              if (t.kind == TokenKind::Word && !is_keyword(t.text) && interface_element(t, e)) {
                e.negated = negated;
                e.location = loc(t);
                table.interfaces.push_back(std::move(e));
                return;
              }
              // Each prefix once, as pf's table holds it (and as a table file's are read): listed
              // again, plain or negated, the first one stays, as pfr_ina_define() skips a prefix it
              // holds.
              IpPrefix p = prefix(t, "address or prefix");
              refuse_range(t, "a table");
              if (listed.insert(p).second) (negated ? table.negated_entries : table.entries).push_back(p);
            },
            /*allow_empty=*/true);
        continue;
      }
      break;
    }
    expect_end(list_open ? "'persist', 'const', 'counters', 'file' or end of line"
                         : "'persist', 'const', 'counters', 'file', '{' or end of line");
    table_index_.emplace(table.name, out_.tables.size());
    out_.tables.push_back(std::move(table));
  }

  void set() {
    take();  // 'set'
    if (accept_word("limit")) {
      auto one = [&] {
        const Token which = take_value("'states', 'frags', 'src-nodes' or 'table-entries'");
        Settings& s = out_.settings;
        std::optional<uint32_t>* limit = which.text == "states"          ? &s.limit_states
                                         : which.text == "frags"         ? &s.limit_frags
                                         : which.text == "src-nodes"     ? &s.limit_src_nodes
                                         : which.text == "table-entries" ? &s.limit_table_entries
                                                                         : nullptr;
        if (limit == nullptr) fail_expected(which, "'states', 'frags', 'src-nodes' or 'table-entries'");
        *limit = static_cast<uint32_t>(
            number(take_value("a limit"), 1, std::numeric_limits<uint32_t>::max(), "limit"));
      };
      if (at(TokenKind::LBrace)) {
        list("'states N', 'frags N', 'src-nodes N' or 'table-entries N'", one);
      } else {
        one();
      }
    } else if (accept_word("timeout")) {
      auto one = [&] {
        const Token name = take_value("a timeout name");
        if (is_adaptive(name)) {
          const auto states =
              static_cast<uint32_t>(number(take_value("a number of states"), 0,
                                           std::numeric_limits<uint32_t>::max(), "a number of states"));
          (name.text == AdaptiveTimeouts::kStartName ? out_.settings.adaptive_start
                                                     : out_.settings.adaptive_end) = states;
          out_.settings.timeout_locations[name.text] = loc(name);
          return;
        }
        if (name.text == "interval" || name.text == "frag") {
          // pf's purge interval and fragment timeout: expiry here is O(expired) and runs every
          // second, and the kernel reassembles fragments. Accepted for pf.conf's sake.
          number(take_value("timeout in seconds"), 0, std::numeric_limits<uint32_t>::max(),
                 "timeout in seconds");
          return;
        }
        check_timeout_name(name, true);
        const Token value = take_value("timeout in seconds");
        out_.settings.timeouts[name.text] = static_cast<uint32_t>(
            number(value, 0, std::numeric_limits<uint32_t>::max(), "timeout in seconds"));
        out_.settings.timeout_locations[name.text] = loc(name);
      };
      if (at(TokenKind::LBrace)) {
        list("timeout name and seconds", one);
      } else {
        one();
      }
    } else if (accept_word("block-policy")) {
      const Token policy = take_value("'drop' or 'return'");
      if (policy.text != "drop" && policy.text != "return") fail_expected(policy, "'drop' or 'return'");
      out_.settings.block_policy_return = policy.text == "return";
    } else if (accept_word("skip")) {
      expect_word("on", "'on' and an interface after 'set skip'");
      const Token first = peek();
      for (InterfaceMatch& m : interfaces()) {
        if (m.negated) fail_at(first, "'set skip' takes interface names: '!' would skip every other one");
        out_.settings.skip_interfaces.push_back(std::move(m.name));
      }
    } else if (accept_word("optimization")) {
      optimization();
    } else if (accept_word("state-policy")) {
      const Token policy = take_value("'floating' or 'if-bound'");
      if (policy.text != "floating" && policy.text != "if-bound")
        fail_expected(policy, "'floating' or 'if-bound'");
      out_.settings.states_if_bound = policy.text == "if-bound";
    } else if (at_word("hostid")) {
      fail_at(peek(), "the id this node's states carry to its sync peer is [node] id in pairwall.toml");
    } else if (at_word("fingerprints")) {
      fail_at(peek(), "there is no OS fingerprinting here ('os' in rules is not supported either)");
    } else if (accept_word("reassemble")) {
      // The kernel reassembles every fragmented datagram before the node sees it: 'yes' is what
      // happens, whatever is written.
      const Token value = take_value("'yes' or 'no'");
      if (value.text == "no")
        fail_at(value, "fragments are reassembled by the kernel before the rules see them");
      if (value.text != "yes") fail_expected(value, "'yes' or 'no'");
      if (at_word("no-df")) fail_at(peek(), "'no-df' is a scrub option here: scrub in all no-df");
    } else if (accept_word("syncookies")) {
      const Token mode = take_value("'never', 'always' or 'adaptive'");
      if (mode.text == "always" || mode.text == "adaptive")
        fail_at(
            mode,
            "there are no SYN cookies: answer SYN floods with 'synproxy state' on the rules that pass them");
      if (mode.text != "never") fail_expected(mode, "'never', 'always' or 'adaptive'");
      if (at(TokenKind::LParen)) fail_at(peek(), "'set syncookies never' takes no thresholds");
    } else if (at_word("state-defaults")) {
      // pf's: the state options of every pass rule that writes no `keep state` of its own.
      const Token t = take();
      if (out_.settings.state_defaults)
        fail_at(t, "'set state-defaults' is already given at " +
                       out_.settings.state_defaults_location.file_and_line());
      StateOptions defaults;
      state_options(defaults, std::nullopt);
      out_.settings.state_defaults = std::move(defaults);
      out_.settings.state_defaults_location = loc(t);
    } else if (accept_word("keepcounters")) {
      // pf's: a reload keeps the counters of the rules it finds written alike.
      out_.settings.keep_counters = true;
    } else if (accept_word("fail-policy")) {
      const Token policy = take_value("'drop' or 'return'");
      if (policy.text != "drop" && policy.text != "return") fail_expected(policy, "'drop' or 'return'");
      out_.settings.fail_policy_return = policy.text == "return";
    } else if (accept_word("loginterface") || accept_word("debug") || accept_word("ruleset-optimization") ||
               accept_word("require-order")) {
      // Statistics of one interface, the kernel's log level, pfctl's rule optimizer, the order of
      // sections: accepted for pf.conf's sake, none of them changes what the rules decide.
      take_value("a value");
    } else {
      fail_expected(
          peek(), "'limit', 'timeout', 'block-policy', 'skip', 'optimization' or 'state-policy' after 'set'");
    }
    expect_end("end of line");
  }

  // `set optimization`: pfctl's timeout hints, applied as if written with `set timeout` here (a
  // later `set timeout` overrides them, an earlier one is overridden).
  void optimization() {
    struct Hint {
      const char* name;
      std::array<uint32_t, 6> seconds;  // tcp.first, .opening, .established, .closing, .finwait, .closed
    };
    static constexpr std::array<Hint, 6> kHints = {{
        {"normal", {120, 30, 86400, 900, 45, 90}},
        {"default", {120, 30, 86400, 900, 45, 90}},
        {"high-latency", {180, 35, 86400, 905, 50, 95}},
        {"satellite", {180, 35, 86400, 905, 50, 95}},
        {"conservative", {3600, 900, 432000, 3600, 600, 180}},
        {"aggressive", {30, 5, 18000, 60, 30, 30}},
    }};
    static constexpr std::array<const char*, 6> kTimeouts = {"tcp.first",   "tcp.opening", "tcp.established",
                                                             "tcp.closing", "tcp.finwait", "tcp.closed"};
    const Token which = take_value("'normal', 'high-latency', 'satellite', 'aggressive' or 'conservative'");
    const auto hint =
        std::find_if(kHints.begin(), kHints.end(), [&](const Hint& h) { return which.text == h.name; });
    if (hint == kHints.end()) {
      fail_expected(which, "'normal', 'high-latency', 'satellite', 'aggressive' or 'conservative'");
    }
    for (std::size_t i = 0; i < kTimeouts.size(); ++i) {
      out_.settings.timeouts[kTimeouts[i]] = hint->seconds[i];
      out_.settings.timeout_locations[kTimeouts[i]] = loc(which);
    }
  }

  // `set timeout` also takes the adaptive bounds, a rule's state options do not.
  void check_timeout_name(const Token& name, bool with_adaptive) {
    if (!is_timeout_name(name.text)) {
      std::string expected = timeout_names();
      if (with_adaptive) {
        expected +=
            ", " + std::string(AdaptiveTimeouts::kStartName) + ", " + std::string(AdaptiveTimeouts::kEndName);
      }
      fail_at(name, "unknown timeout " + name.describe() + ": expected one of " + expected);
    }
  }

  static bool is_adaptive(const Token& name) {
    return name.text == AdaptiveTimeouts::kStartName || name.text == AdaptiveTimeouts::kEndName;
  }

  void scrub() {
    const Token first = take();
    ScrubRule r;
    r.location = loc(first);
    if (first.text == "no") {
      // pf's `no scrub`: the packets it matches first meet no scrub rule after it.
      r.negated = true;
      take();
    }
    r.direction = direction();
    // pfctl's `scrub [in|out] [log] on ...`: its log is of what the rule's normalization drops, which
    // is logged here whatever the rules say; its `quick` pfctl refuses.
    for (bool logged = false;;) {
      if (at_word("log") && logged) fail_at(peek(), "duplicate 'log'");
      if (accept_word("log")) {
        logged = true;
        if (at(TokenKind::LParen))
          fail_at(peek(), "a scrub rule's 'log' takes no options: what normalization drops is always logged");
      } else if (at_word("quick")) {
        fail_at(peek(), "scrub rules do not take 'quick': the first one a packet matches applies");
      } else {
        break;
      }
    }
    if (accept_word("on")) r.interfaces = interfaces();
    r.family = family();
    if (accept_word("proto")) r.protocols = protocols();
    from_to(r.from, r.to, r.family);
    constexpr const char* kWhat =
        "scrub option (fragment reassemble, reassemble tcp, max-mss N, min-ttl N, random-id, no-df, "
        "set-tos T) or end of line";
    if (r.negated) {
      expect_end("end of line: 'no scrub' exempts packets from normalization and takes no options");
      out_.scrub_rules.push_back(std::move(r));
      return;
    }
    bool parenthesized = false;
    // As pfctl ("max-mss cannot be respecified"): an option given twice is a mistake, not the later
    // value, whether bare or in the parentheses.
    std::map<std::string, Token> given;
    auto option = [&](std::string_view what) {
      if (const Token& t = peek(); t.kind == TokenKind::Word) {
        if (const auto [seen, added] = given.emplace(t.text, t); !added)
          fail_at(t, "duplicate scrub option '" + t.text + "': already given at " + where(seen->second));
      }
      if (accept_word("fragment")) {
        if (at_word("crop") || at_word("drop-ovl"))
          fail_at(peek(), "the kernel reassembles every fragmented datagram: write 'fragment reassemble'");
        expect_word("reassemble", "'reassemble' after 'fragment'");
        r.fragment_reassemble = true;
      } else if (at_word("reassemble")) {
        // As pfctl's "reassemble tcp rules can not specify direction": the states it marks normalize
        // both ends' segments whichever way the first packet went.
        const Token word = take();
        expect_word("tcp", "'tcp' after 'reassemble'");
        if (r.direction != Direction::Any)
          fail_at(word,
                  "'reassemble tcp' normalizes both directions of a connection: its scrub rule names "
                  "no direction (remove '" +
                      std::string(r.direction == Direction::In ? "in" : "out") + "')");
        r.reassemble_tcp = true;
      } else if (accept_word("set-tos")) {
        r.set_tos = tos(take_value(kTosWhat));
      } else if (accept_word("max-mss")) {
        r.max_mss = static_cast<uint16_t>(number(take_value("max-mss value"), 1, 65535, "max-mss"));
      } else if (accept_word("min-ttl")) {
        r.min_ttl = static_cast<uint8_t>(number(take_value("min-ttl value"), 1, 255, "min-ttl"));
      } else if (accept_word("random-id")) {
        r.random_id = true;
      } else if (accept_word("no-df")) {
        r.no_df = true;
      } else {
        fail_expected(peek(), what);
      }
    };
    while (!at_end_of_statement()) {
      if (at(TokenKind::LParen) && !parenthesized) {
        // Newer pf writes the options in parentheses: `scrub in all (max-mss 1440, no-df)`.
        const Token open = take();
        parenthesized = true;
        bool comma_ok = false;
        bool any = false;
        for (;;) {
          if (at(TokenKind::RParen)) {
            if (!any)
              fail_at(
                  peek(),
                  "empty scrub options: expected fragment reassemble, reassemble tcp, max-mss N, min-ttl N, "
                  "random-id, no-df or set-tos T");
            take();
            break;
          }
          if (at_end_of_statement()) {
            fail_expected(peek(), "')' to close the scrub options opened at " + where(open));
          }
          if (at(TokenKind::Comma) && comma_ok) {
            take();
            comma_ok = false;
            continue;
          }
          option(
              "scrub option (fragment reassemble, max-mss N, min-ttl N, random-id, no-df, set-tos T) or ')'");
          comma_ok = true;
          any = true;
        }
        continue;
      }
      option(kWhat);
    }
    out_.scrub_rules.push_back(std::move(r));
  }

  static constexpr const char* kTosWhat =
      "a TOS: a DSCP name (ef, va, af11..af43, cs0..cs7), lowdelay, throughput, reliability, critical, "
      "inetcontrol, netcontrol, or a number (0x10)";

  // A TOS (pf's set-tos and tos), by pfctl's names or as a number, decimal or hex. Its ECN bits
  // (RFC 3168 5) are the ends' to set: a rule that set them would mark every packet congested or
  // not, and pf's tos compares the packet's with them cleared.
  uint8_t tos(const Token& t) {
    static constexpr Named kNames[] = {
        {"lowdelay", 0x10},    {"throughput", 0x08}, {"reliability", 0x04}, {"critical", 0xa0},
        {"inetcontrol", 0xc0}, {"netcontrol", 0xe0}, {"ef", 0xb8},          {"va", 0xb0},
    };
    for (const Named& n : kNames) {
      if (t.text == n.name) return static_cast<uint8_t>(n.value);
    }
    const std::string_view text = t.text;
    // RFC 2597's assured forwarding class X, drop precedence Y; RFC 2474's class selectors.
    if (text.size() == 4 && text.starts_with("af") && text[2] >= '1' && text[2] <= '4' && text[3] >= '1' &&
        text[3] <= '3')
      return static_cast<uint8_t>((8 * (text[2] - '0') + 2 * (text[3] - '0')) << 2);
    if (text.size() == 3 && text.starts_with("cs") && text[2] >= '0' && text[2] <= '7')
      return static_cast<uint8_t>((text[2] - '0') << 5);
    std::optional<uint64_t> value;
    if (text.starts_with("0x") || text.starts_with("0X")) {
      const std::string_view digits = text.substr(2);
      uint64_t v = 0;
      const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, 16);
      if (!digits.empty() && ptr == digits.data() + digits.size())
        value = ec == std::errc::result_out_of_range ? std::numeric_limits<uint64_t>::max() : v;
    } else {
      value = decimal(text);
    }
    if (!value) fail_expected(t, kTosWhat);
    if (*value > 255) fail_at(t, "a TOS must be between 0 and 255, got " + t.describe());
    if ((*value & 0x03) != 0)
      fail_at(t, "the TOS's two low bits are ECN's (RFC 3168), which rules neither set nor match: got " +
                     t.describe());
    return static_cast<uint8_t>(*value);
  }

  void translation() {
    const Token first = take();
    TranslationRule r;
    r.location = loc(first);
    Token kind = first;
    if (first.text == "no") {
      r.negate_translation = true;
      kind = peek();
      if (!at_word("nat") && !at_word("rdr") && !at_word("binat")) {
        fail_expected(kind, "'nat', 'rdr' or 'binat' after 'no'");
      }
      take();
    }
    r.kind = kind.text == "nat"   ? TranslationRule::Kind::Nat
             : kind.text == "rdr" ? TranslationRule::Kind::Rdr
                                  : TranslationRule::Kind::Binat;
    const bool binat = r.kind == TranslationRule::Kind::Binat;
    if (!r.negate_translation && accept_word("pass")) r.pass = true;
    expect_word("on", "'on' and an interface");
    r.interfaces = interfaces();
    r.family = family();
    if (accept_word("proto")) r.protocols = protocols();
    from_to(r.from, r.to, r.family, binat ? "binat maps whole addresses and takes no 'port'" : nullptr);
    translation_tags(r);

    if (r.negate_translation) {
      if (at(TokenKind::Arrow)) {
        fail_at(peek(), "'no " + kind.text + "' exempts packets from translation and takes no '->' target");
      }
      expect_end("'from', 'to', 'tag', 'tagged' or end of line");
      out_.translation_rules.push_back(std::move(r));
      return;
    }
    if (!at(TokenKind::Arrow)) {
      fail_expected(peek(), "'->' and a translation address");
    }
    take();
    constexpr std::string_view kTarget =
        "translation address (an address, a prefix, an interface, a list { ... } or a table <name>)";
    r.target_location = loc(peek());
    if (at(TokenKind::Table)) {
      if (binat) fail_at(peek(), "binat maps one prefix onto another: its target is not a table");
      r.target_table = take().text;
    } else if (at(TokenKind::LBrace)) {
      if (binat) fail_at(peek(), "binat maps one prefix onto another: its target is not a list");
      list("translation address", [&] { r.targets.push_back(target_address(r, kTarget)); });
    } else if (const std::optional<AddressElement> interface = target_interface()) {
      r.target_interface = interface->table;
      r.target_dynamic = interface->dynamic;
    } else {
      r.targets.push_back(target_address(r, kTarget));
    }
    if (at_word("port")) {
      if (binat) fail_at(peek(), "binat maps whole addresses and takes no 'port'");
      take();
      r.target_port = target_port(r.target_port_follows);
    }
    pool_options(r);
    if (at_word("port")) {
      fail_at(peek(), r.target_port ? "one 'port' per translation"
                                    : "the translation 'port' comes before the pool options, as in pf.conf");
    }
    expect_end(
        "'port', a pool type (bitmask, random, source-hash, round-robin), 'static-port' or end of line");
    out_.translation_rules.push_back(std::move(r));
  }

  // One address or prefix of a translation target, of the rule's family.
  IpPrefix target_address(const TranslationRule& r, std::string_view what) {
    const Token t = peek();
    if (t.kind != TokenKind::Word && t.kind != TokenKind::String) fail_expected(t, what);
    take();
    const IpPrefix p = prefix(t, what);
    refuse_range(t, "a translation target");
    const std::optional<Family> family = r.family            ? r.family
                                         : r.targets.empty() ? std::nullopt
                                                             : std::optional<Family>(r.targets[0].family);
    if (family && *family != p.family) {
      fail_at(t, "translation address " + t.describe() + " is not " +
                     (*family == Family::V4 ? "an IPv4" : "an IPv6") + " address, as " +
                     (r.family ? "the rule's address family requires" : "the pool's first address is"));
    }
    return p;
  }

  // After the target (and its port): `bitmask | random | source-hash [KEY] | round-robin`,
  // `sticky-address`, `static-port`, in any order, each once. Whether the pool admits the type is
  // compile()'s to say.
  void pool_options(TranslationRule& r) {
    for (;;) {
      const Token t = peek();
      if (t.kind != TokenKind::Word) return;
      std::optional<PoolType> type;
      if (t.text == "bitmask") {
        type = PoolType::Bitmask;
      } else if (t.text == "random") {
        type = PoolType::Random;
      } else if (t.text == "source-hash") {
        type = PoolType::SourceHash;
      } else if (t.text == "round-robin") {
        type = PoolType::RoundRobin;
      } else if (t.text == "static-port") {
        if (r.kind != TranslationRule::Kind::Nat)
          fail_at(t, "'static-port' keeps a nat source port: nat only");
        if (r.static_port) fail_at(t, "'static-port' given twice");
        if (r.target_port) fail_at(t, "'static-port' keeps the source port: it takes no 'port'");
        take();
        r.static_port = true;
        continue;
      } else if (t.text == "sticky-address") {
        fail_at(t,
                "sticky-address is not supported: its memory of each source would not survive a failover; "
                "source-hash maps a source to the same address on both nodes");
      } else {
        return;
      }
      if (r.kind == TranslationRule::Kind::Binat)
        fail_at(t, "binat maps one prefix onto another: no pool type");
      if (!r.target_interface.empty() && *type != PoolType::RoundRobin)
        fail_at(t, "an interface's addresses are walked round-robin: no other pool type");
      if (r.pool) {
        fail_at(t,
                "one pool type per rule, got " + t.describe() + " after '" + pool_type_name(*r.pool) + "'");
      }
      take();
      r.pool = type;
      if (*type == PoolType::SourceHash) source_hash_key(r);
    }
  }

  // After `source-hash`: nothing (the built-in key), `0x` and 32 hex digits, or `key "text"`.
  void source_hash_key(TranslationRule& r) {
    const Token t = peek();
    if (t.kind == TokenKind::Word && t.text == "key") {
      take();
      const Token text = take_value("the source-hash key's text after 'key'");
      if (text.text.empty()) fail_at(text, "the source-hash key is empty");
      r.hash_key = text.text;
      r.hash_key_is_text = true;
      return;
    }
    if (t.kind != TokenKind::Word || !(t.text.starts_with("0x") || t.text.starts_with("0X"))) return;
    take();
    const std::string_view hex = std::string_view(t.text).substr(2);
    const bool digits = hex.size() == 32 && std::all_of(hex.begin(), hex.end(), [](char c) {
                          return std::isxdigit(static_cast<unsigned char>(c)) != 0;
                        });
    if (!digits) fail_at(t, "a source-hash key is 0x and 32 hex digits (128 bits), got " + t.describe());
    r.hash_key = t.text;
  }

  // `-> em0` or `-> (em0)`: translation to the interface's address. pf reads `em0` as the address
  // when the rules load and `(em0)` as the address as it changes; both follow it here, as
  // interfaces in filter rules do, and only `(em0)` may have none yet.
  std::optional<AddressElement> target_interface() {
    AddressElement e;
    const Token t = peek();
    if (!accept_interface(e)) return std::nullopt;
    if (e.table == "self") fail_at(t, "'self' is every address of this host: translate to one interface's");
    if (e.networks) fail_at(t, "translate to " + e.table + " (its address), not to its networks");
    return e;
  }

  // An unreachable code for `return-icmp(...)`: pf's name (`host-unr`, `admin-unr`) or 0..255.
  // Names are looked up in pfctl's table of the unreachable type's codes, aliases included
  // (notnbr-unr is beyond-unr's code), not in the one name per code that rules print.
  int16_t unreach_code(bool v6) {
    const std::string what = std::string(v6 ? "an ICMPv6" : "an ICMP") +
                             " unreachable code (a name such as " + (v6 ? "addr-unr" : "port-unr") +
                             ", or 0..255)";
    const Token t = take_value(what);
    const std::span<const NamedCode> codes = v6 ? std::span<const NamedCode>(kIcmp6Codes) : kIcmpCodes;
    const uint8_t unreach = v6 ? 1 : 3;  // RFC 4443 3.1, RFC 792
    for (const NamedCode& c : codes) {
      if (c.type == unreach && c.name == t.text) return c.code;
    }
    return static_cast<int16_t>(number(t, 0, 255, what));
  }

  // `port 8080`, `port 8080:8090` or `port 8080:*` (`follows`: as many ports as the rule's
  // destination range, from 8080) after the translation target.
  PortMatch target_port(bool& follows) {
    constexpr std::string_view kWhat = "port number or range (P:Q or P:*) after the translation address";
    const Token t = peek();
    if (t.kind != TokenKind::Word && t.kind != TokenKind::String) fail_expected(t, kWhat);
    take();
    PortMatch m;
    std::string_view high;
    Token high_token = t;
    if (auto colon = t.text.find(':'); colon != std::string::npos) {
      m.low = port_number(t, t.text.substr(0, colon), kWhat);
      high = std::string_view(t.text).substr(colon + 1);
    } else {
      m.low = port_number(t, t.text, kWhat);
      if (at(TokenKind::Colon)) {
        take();
        high_token = take_value(kWhat);
        high = high_token.text;
      }
    }
    // The engine reads port 0 as no port given (nat's 50001:65535, rdr's port kept), and no
    // connection could use it anyway: TCP and UDP to or from port 0 are dropped as malformed.
    if (m.low == 0) {
      fail_at(t, "a translation port must be between 1 and 65535, got " + t.describe() +
                     ": port 0 carries no connection");
    }
    if (high.data() == nullptr) return m;
    if (high == "*") {
      follows = true;
      return m;
    }
    m.op = PortMatch::Op::RangeInclusive;
    m.high = port_number(high_token, std::string(high), kWhat);
    check_range(t, m);
    return m;
  }

  // antispoof [log] [quick] for IF | { IF, ... } [inet | inet6], `log` and `quick` in either order
  // as pfctl's logquick takes them. Expanded as pfctl does: per interface,
  // `block drop in on ! IF from IF:network` (its networks arrive on it alone) and, but for the
  // loopback, `block drop in from IF` (its own addresses never arrive from outside). Dropped
  // silently: a reply would go to the address the spoofer forged.
  void antispoof() {
    const Token first = take();
    FilterRule r;
    r.location = loc(first);
    r.action = Action::Block;
    r.reply_given = true;
    r.state.keep_state = false;
    r.direction = Direction::In;
    r.anchor = scope_;
    for (int i = 0; i < 2; ++i) {
      if (r.log == LogMode::None && accept_word("log")) r.log = LogMode::First;
      if (!r.quick && accept_word("quick")) r.quick = true;
    }
    expect_word("for", "'for' and the interfaces to protect (antispoof [log] [quick] (either order) for IF)");
    const Token list_start = peek();
    std::vector<SourceLocation> places;
    const std::vector<InterfaceMatch> names = interfaces(&places);
    for (const InterfaceMatch& m : names) {
      if (m.negated) fail_at(list_start, "antispoof protects interfaces it names: '!' has no place here");
    }
    r.family = family();
    if (!at_end_of_statement()) fail_expected(peek(), "'inet', 'inet6' or end of line");
    for (std::size_t i = 0; i < names.size(); ++i) {
      const InterfaceMatch& m = names[i];
      AddressElement own;
      own.kind = AddressElement::Kind::Interface;
      own.table = m.name;
      own.location = places[i];
      FilterRule elsewhere = r;
      elsewhere.interfaces = {InterfaceMatch{m.name, true}};
      own.networks = true;
      elsewhere.from.addresses = {own};
      out_.filter_rules.push_back(std::move(elsewhere));
      if (m.name == "lo") continue;
      FilterRule from_outside = r;
      own.networks = false;
      from_outside.from.addresses = {own};
      out_.filter_rules.push_back(std::move(from_outside));
    }
  }

  // After `label`: the quoted name of the rule's counters, at most pf's 63 characters. Its macros
  // ($if, $srcaddr, $nr, ...) are expanded when the rule is compiled, as pfctl expands them.
  std::string label() {
    const Token t = peek();
    if (t.kind != TokenKind::String) fail_expected(t, "a quoted label after 'label', e.g. \"web\"");
    take();
    if (t.text.empty() || t.text.size() > kMaxLabel)
      fail_at(t, "a label has 1 to " + std::to_string(kMaxLabel) + " characters");
    for (const char c : t.text) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
        fail_at(t, "a label holds printable characters only");
    }
    return t.text;
  }
  static constexpr std::size_t kMaxLabel = 63;  // PF_RULE_LABEL_SIZE less the NUL

  // After `tag` or `tagged`: a tag's name, bare or quoted, at most pf's 63 characters. Letters,
  // digits, '_', '-' and '.' only: pf expands a label's macros in tags, which these are not.
  std::string tag_name(const Token& keyword) {
    const Token t = peek();
    if (t.kind != TokenKind::Word && t.kind != TokenKind::String)
      fail_expected(t, "a tag's name after '" + keyword.text + "', e.g. LAN");
    take();
    const bool plain = std::all_of(t.text.begin(), t.text.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.';
    });
    if (t.text.empty() || t.text.size() > kMaxTag || !plain)
      fail_at(t, "a tag's name has 1 to " + std::to_string(kMaxTag) + " letters, digits, '_', '-' or '.'");
    return t.text;
  }
  static constexpr std::size_t kMaxTag = 63;  // PF_TAG_NAME_SIZE less the NUL

  // Where a rule's `tag` and `tagged` were first given: each at most once a rule.
  struct TagsSeen {
    std::optional<Token> tag;
    std::optional<Token> tagged;
  };

  // `tag NAME` or `tagged NAME`, its keyword next, of a filter or a translation rule.
  template <typename Rule>
  void tag_option(Rule& r, TagsSeen& seen) {
    const Token t = take();
    std::optional<Token>& first = t.text == "tag" ? seen.tag : seen.tagged;
    if (first) fail_at(t, "duplicate '" + t.text + "': already given at " + where(*first));
    first = t;
    if (t.text == "tagged") r.tagged_location = loc(peek());
    (t.text == "tag" ? r.tag : r.tagged) = tag_name(t);
  }

  // A translation rule's `tag NAME` and `[!] tagged NAME`, between its addresses and `->`, each
  // at most once, in either order.
  void translation_tags(TranslationRule& r) {
    TagsSeen seen;
    for (;;) {
      const bool negated = at(TokenKind::Bang);
      if (negated) {
        take();
        if (!at_word("tagged")) fail_expected(peek(), "'tagged' after '!'");
      }
      if (!at_word("tag") && !at_word("tagged")) return;
      tag_option(r, seen);
      if (negated) r.tagged_negated = true;
    }
  }

  void filter() {
    const Token first = take();
    FilterRule r;
    r.location = loc(first);
    r.action = first.text == "pass" ? Action::Pass : first.text == "block" ? Action::Block : Action::Match;
    r.state.keep_state = r.action == Action::Pass;
    r.anchor = scope_;
    int stage = 0;

    if (filter_stage(peek().kind == TokenKind::Word ? peek().text : "") == 1) {
      if (r.action != Action::Block) fail_at(peek(), "'" + peek().text + "' applies to block rules only");
      const Token t = take();
      r.reply_given = true;
      if (t.text == "return-rst") {
        r.reply = BlockReply::ReturnRst;
        if (at(TokenKind::LParen)) {
          take();
          if (!accept_word("ttl")) fail_expected(peek(), "'ttl' (return-rst (ttl N))");
          r.rst_ttl = static_cast<uint8_t>(number(take_value("a TTL"), 1, 255, "a TTL"));
          if (!at(TokenKind::RParen)) fail_expected(peek(), "')' after the TTL");
          take();
        }
      } else if (t.text == "return-icmp" || t.text == "return-icmp6") {
        r.reply = BlockReply::ReturnIcmp;
        if (at(TokenKind::LParen)) {
          take();
          if (t.text == "return-icmp") {
            r.icmp_code = unreach_code(false);
            if (at(TokenKind::Comma)) {
              take();
              r.icmp6_code = unreach_code(true);
            }
          } else {
            r.icmp6_code = unreach_code(true);
          }
          if (!at(TokenKind::RParen)) fail_expected(peek(), "')' after the unreachable code");
          take();
        }
      } else if (t.text == "return") {
        r.reply = BlockReply::ReturnIcmp;
        r.reply_rst_for_tcp = true;
      }
      stage = 1;
    }
    if (at_word("in") || at_word("out")) {
      r.direction = direction();
      stage = 2;
    }
    // `log` and `quick` in either order, as pfctl's logquick takes them.
    for (int i = 0; i < 2; ++i) {
      if (r.action == Action::Match && (at_word("log") || at_word("quick"))) {
        fail_at(peek(), "a match rule decides nothing: '" + peek().text + "' belongs on the rules that do");
      }
      if (r.log == LogMode::None && accept_word("log")) {
        r.log = LogMode::First;
        if (at(TokenKind::LParen)) {
          take();
          // pf's log options, comma-separated; `all` alone has a meaning here.
          for (;;) {
            const Token option = peek();
            if (accept_word("all")) {
              r.log = LogMode::All;
            } else if (at_word("to")) {
              fail_at(option,
                      "'log (to INTERFACE)' is not supported: logged packets go to one pcap file ([log] "
                      "pcap_file)");
            } else if (at_word("matches")) {
              fail_at(option,
                      "'log (matches)' is not supported: put 'log' on the rules whose matches to log");
            } else if (at_word("user")) {
              fail_at(option,
                      "'log (user)' is not supported: this node forwards, packets have no local user");
            } else {
              fail_expected(option, "'all' (log (all))");
            }
            if (!at(TokenKind::Comma)) break;
            take();
          }
          if (!at(TokenKind::RParen)) fail_expected(peek(), "')'");
          take();
        }
        stage = std::max(stage, 3);
      }
      if (!r.quick && accept_word("quick")) {
        r.quick = true;
        stage = 4;
      }
    }
    if (accept_word("on")) {
      r.interfaces = interfaces();
      stage = 5;
    }
    if (auto f = family()) {
      r.family = f;
      stage = 6;
    }
    if (accept_word("proto")) {
      r.protocols = protocols();
      stage = 7;
    }
    if (from_to(r.from, r.to, r.family, nullptr, /*route_tests=*/true)) stage = 8;

    std::optional<Token> flags_seen;
    std::optional<Token> icmp_seen;
    std::optional<Token> state_seen;
    std::optional<Token> label_seen;
    std::optional<Token> allow_opts_seen;
    std::optional<Token> probability_seen;
    std::optional<Token> once_seen;
    std::optional<Token> tos_seen;
    std::optional<Token> rate_seen;
    std::optional<Token> received_on_seen;
    TagsSeen tags_seen;
    while (!at_end_of_statement()) {
      const Token t = peek();
      if (t.kind == TokenKind::Bang) {  // `! tagged NAME`
        take();
        const Token word = peek();
        if (word.kind != TokenKind::Word || word.text != "tagged") fail_expected(word, "'tagged' after '!'");
        r.tagged_negated = true;
        continue;
      }
      if (t.kind == TokenKind::Word) {
        auto once = [&](std::optional<Token>& seen, std::string_view what) {
          if (seen) fail_at(t, "duplicate " + std::string(what) + ": already given at " + where(*seen));
          seen = t;
        };
        if (t.text == "flags") {
          once(flags_seen, "'flags'");
          take();
          r.flags = flags();
          r.flags_any = !r.flags;
          continue;
        }
        if (t.text == "icmp-type" || t.text == "icmp6-type") {
          once(icmp_seen, "icmp-type");
          take();
          r.icmp6_types = t.text == "icmp6-type";
          if (r.family && (*r.family == Family::V6) != r.icmp6_types) {
            fail_at(t, r.icmp6_types ? "icmp6-type matches ICMPv6: use it with inet6, or icmp-type with inet"
                                     : "icmp-type matches ICMP for IPv4: use icmp6-type with inet6");
          }
          r.icmp_types = icmp_types(r.icmp6_types);
          continue;
        }
        if (t.text == "keep" || t.text == "modulate" || t.text == "no" || t.text == "synproxy") {
          once(state_seen, "state option");
          state(r);
          continue;
        }
        if (t.text == "allow-opts") {
          once(allow_opts_seen, "'allow-opts'");
          if (r.action != Action::Pass) fail_at(t, "'allow-opts' applies to pass rules only");
          take();
          r.allow_opts = true;
          continue;
        }
        if (t.text == "label") {
          once(label_seen, "'label'");
          take();
          r.label_location = loc(peek());
          r.label = label();
          continue;
        }
        if (t.text == "tag" || t.text == "tagged") {
          tag_option(r, tags_seen);
          continue;
        }
        if (t.text == "received-on") {
          once(received_on_seen, "'received-on'");
          take();
          r.received_on = interfaces();
          continue;
        }
        if (t.text == "probability") {
          once(probability_seen, "'probability'");
          take();
          r.probability = probability(take_value("a probability, e.g. 20% or 0.2"));
          continue;
        }
        if (t.text == "tos") {
          once(tos_seen, "'tos'");
          take();
          r.tos = tos(take_value(kTosWhat));
          continue;
        }
        if (t.text == "once") {
          once(once_seen, "'once'");
          take();
          r.once = true;
          continue;
        }
        if (t.text == "max-pkt-rate") {
          once(rate_seen, "'max-pkt-rate'");
          take();
          // N stays below pf's PF_THRESHOLD_MAX, where the count, kept in thousandths of a packet,
          // would overflow 32 bits.
          std::tie(r.max_pkt_rate, r.max_pkt_rate_seconds) = rate("max-pkt-rate", "packets", 4'294'966);
          continue;
        }
        if (int s = filter_stage(t.text); s != 0 && s <= 8) {
          fail_at(t, "'" + t.text + "' is out of order or repeated: " + kFilterOrder);
        }
        for (const UnsupportedOption& u : kUnsupportedRuleOptions) {
          if (u.name == t.text) fail_at(t, "'" + t.text + "' is not supported: " + std::string(u.advice));
        }
      }
      fail_expected(t, stage < 8
                           ? "'from', 'to', 'all', a rule option or end of line"
                           : "'flags', 'icmp-type', 'icmp6-type', 'tos', a state option, 'allow-opts', "
                             "'label', 'tag', 'tagged', 'received-on', 'probability', 'once', 'max-pkt-rate' "
                             "or end of line");
    }
    // The tag a packet leaves with is found apart from the deciding rule, by rules that are certain.
    for (const std::optional<Token>& condition : {probability_seen, once_seen, rate_seen}) {
      if (condition && !r.tag.empty()) {
        fail_at(*condition, "'" + condition->text +
                                "' with 'tag' is not supported: tag the packets in a rule of their own");
      }
    }
    if (r.action == Action::Match && r.tag.empty()) {
      fail_at(first,
              "a match rule here carries a tag and does nothing else: add 'tag NAME' (pf's scrub, nat-to "
              "and queue options on match rules are not supported)");
    }
    out_.filter_rules.push_back(std::move(r));
  }

  // keep state [(opts)] | modulate state [(opts)] | synproxy state [(opts)] | no state
  void state(FilterRule& r) {
    const Token t = take();
    if (r.action == Action::Match) fail_at(t, "a match rule decides nothing and makes no state");
    expect_word("state", "'state' after '" + t.text + "'");
    r.state_given = true;
    if (t.text == "no") {
      r.state.keep_state = false;
      return;
    }
    if (r.action == Action::Block) {
      fail_at(t, "'" + t.text + " state' has no effect on a block rule: remove it");
    }
    r.state.keep_state = true;
    r.state.modulate = t.text == "modulate";
    r.state.synproxy = t.text == "synproxy";
    if (!at(TokenKind::LParen)) return;
    const Token open = take();
    state_options(r.state, open);
  }

  // A state option list, `(max 100, no-sync)` after `open`, or without one (`set state-defaults
  // no-sync, max 100`) up to the end of the statement.
  void state_options(StateOptions& state, const std::optional<Token>& open) {
    bool comma_ok = false;
    bool any = false;
    // As pfctl ("multiple definitions"): an option given twice is a mistake, not the later value.
    std::map<std::string, Token> given;
    for (;;) {
      if (open ? at(TokenKind::RParen) : at_end_of_statement()) {
        if (!any)
          fail_at(
              peek(),
              "empty state options: expected 'max N', 'no-sync' or a timeout such as 'tcp.established N'");
        // As pfctl: a node that every `source-track global` rule shares is no rule's own, and so no
        // rule's max-src-nodes could count it; accepted, the limit would hold nothing back.
        if (const auto nodes = given.find("max-src-nodes"); nodes != given.end() && state.source_track_global)
          fail_at(nodes->second,
                  "'max-src-nodes' is incompatible with 'source-track global': the nodes are every such "
                  "rule's, none this rule's own (use 'source-track rule')");
        if (open) take();
        return;
      }
      if (at_end_of_statement())
        fail_expected(peek(), "')' to close the state options opened at " + where(*open));
      if (at(TokenKind::Comma) && comma_ok) {
        take();
        comma_ok = false;
        continue;
      }
      const Token name = take_value(
          "state option ('max N', 'max-src-states N', 'no-sync', 'sloppy' or a timeout such as "
          "'tcp.established N')");
      if (const auto [first, added] = given.emplace(name.text, name); !added) {
        fail_at(name, "duplicate state option '" + name.text + "': already given at " + where(first->second));
      }
      if (name.text == "max") {
        state.max_states = static_cast<uint32_t>(
            number(take_value("maximum number of states"), 1, std::numeric_limits<uint32_t>::max(), "max"));
      } else if (name.text == "no-sync") {
        state.no_sync = true;
      } else if (name.text == "floating" || name.text == "if-bound") {
        const char* other = name.text == "floating" ? "if-bound" : "floating";
        if (const auto said = given.find(other); said != given.end())
          fail_at(name, "'" + name.text + "' contradicts '" + other + "' given at " + where(said->second));
        state.if_bound = name.text == "if-bound";
      } else if (name.text == "pflow") {
        state.pflow = true;
      } else if (name.text == "sloppy") {
        // A node that sees one direction of a connection cannot turn back what it shifted in it.
        if (state.modulate || state.synproxy)
          fail_at(name, "'sloppy' cannot be used with '" +
                            std::string(state.modulate ? "modulate" : "synproxy") +
                            " state': use 'keep state'");
        state.sloppy = true;
      } else if (name.text == "max-src-states" || name.text == "max-src-nodes" ||
                 name.text == "max-src-conn") {
        const auto n = static_cast<uint32_t>(
            number(take_value("a limit"), 1, std::numeric_limits<uint32_t>::max(), name.text));
        (name.text == "max-src-states"  ? state.max_src_states
         : name.text == "max-src-nodes" ? state.max_src_nodes
                                        : state.max_src_conn) = n;
      } else if (name.text == "max-src-conn-rate") {
        std::tie(state.max_src_conn_rate, state.max_src_conn_rate_seconds) =
            rate("max-src-conn-rate", "connections", std::numeric_limits<uint32_t>::max());
      } else if (name.text == "source-track") {
        if (accept_word("global")) {
          state.source_track_global = true;
        } else {
          accept_word("rule");  // pf's default
        }
      } else if (name.text == "overload") {
        const Token table = peek();
        if (table.kind != TokenKind::Table)
          fail_expected(table, "a table name in angle brackets after 'overload', e.g. <bruteforce>");
        take();
        state.overload_table = table.text;
        state.overload_location = loc(table);
        if (accept_word("flush")) {
          state.overload_flush = accept_word("global") ? OverloadFlush::Global : OverloadFlush::Rule;
        }
      } else if (is_adaptive(name)) {
        fail_at(name, name.describe() +
                          " scales every state's timeouts by the size of the whole table: set it "
                          "with 'set timeout', not per rule");
      } else if (is_timeout_name(name.text)) {
        state.timeouts[name.text] = static_cast<uint32_t>(number(
            take_value("timeout in seconds"), 0, std::numeric_limits<uint32_t>::max(), "timeout in seconds"));
      } else if (name.text.find('.') != std::string::npos) {
        check_timeout_name(name, false);
      } else {
        fail_expected(name,
                      "state option ('max N', 'max-src-states N', 'no-sync', 'sloppy' or a timeout such as "
                      "'tcp.established N')");
      }
      any = true;
      comma_ok = true;
    }
  }

  // A rate `N/S` of `what` (at most `most` of them) in S seconds, up to a day: `max-pkt-rate`'s
  // packets, `max-src-conn-rate`'s connections.
  std::pair<uint32_t, uint32_t> rate(std::string_view option, std::string_view what, uint32_t most) {
    const std::string example = "a rate such as 15/5 (" + std::string(what) + "/seconds)";
    const Token t = take_value(example);
    const auto slash = t.text.find('/');
    if (slash == std::string::npos) fail_expected(t, example);
    Token count = t;
    count.text = t.text.substr(0, slash);
    const Token seconds = t.part(slash + 1);
    const std::string option_text(option);
    return {static_cast<uint32_t>(number(count, 1, most, std::string(what) + " in " + option_text)),
            static_cast<uint32_t>(number(seconds, 1, 86'400, "seconds in " + option_text))};
  }

  // ---- rule parts ------------------------------------------------------------------------

  Direction direction() {
    if (accept_word("in")) return Direction::In;
    if (accept_word("out")) return Direction::Out;
    return Direction::Any;
  }

  std::optional<Family> family() {
    if (accept_word("inet")) return Family::V4;
    if (accept_word("inet6")) return Family::V6;
    return std::nullopt;
  }

  // After `on`: IF, !IF or { IF, !IF, ... }; `where`, when given, receives each name's place.
  std::vector<InterfaceMatch> interfaces(std::vector<SourceLocation>* where = nullptr) {
    std::vector<InterfaceMatch> out;
    auto one = [&] {
      InterfaceMatch m;
      if (at(TokenKind::Bang)) {
        const Token bang = take();
        if (at(TokenKind::LBrace)) {
          fail_at(bang,
                  "'!' cannot negate a list of interfaces: '! { a, b }' would match every interface, "
                  "as '{ !a, !b }' does (each element matches on its own, and every interface differs "
                  "from one of them); name the interfaces the rule is for");
        }
        m.negated = true;
      }
      const Token t = peek();
      if ((t.kind != TokenKind::Word && t.kind != TokenKind::String) ||
          (t.kind == TokenKind::Word && is_keyword(t.text))) {
        fail_expected(t, "interface name");
      }
      take();
      check_interface_name(t);
      m.name = t.text;
      if (where) where->push_back(loc(t));
      out.push_back(std::move(m));
    };
    if (at(TokenKind::LBrace)) {
      list("interface name", one);
    } else {
      one();
    }
    return out;
  }

  // Linux's rules (dev_valid_name): 1..15 bytes, not "." or "..", no '/', ':' or blanks.
  static void check_interface_name(const Token& t) {
    constexpr std::size_t kMaxInterfaceName = 15;  // IFNAMSIZ - 1
    bool ok = !t.text.empty() && t.text.size() <= kMaxInterfaceName && t.text != "." && t.text != "..";
    for (char c : t.text) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '/' || c == ':' || u <= 0x20 || u >= 0x7f) ok = false;
    }
    if (!ok) {
      fail_at(t, t.describe() + " is not a valid interface name (1 to 15 characters, no '/', ':' or spaces)");
    }
    // Taken as a name, an OpenBSD rule set's `block in quick on egress ...` would match no packet.
    if (t.text == "egress") {
      fail_at(
          t,
          "'egress' is OpenBSD's group of the interfaces that hold a default route; there are no "
          "interface groups here: name the interface (a macro, ext_if = \"eth0\", keeps it in one place)");
    }
  }

  // After `proto`: P or { P, P }.
  std::vector<uint8_t> protocols() {
    std::vector<uint8_t> out;
    auto one = [&] {
      constexpr std::string_view kWhat = "protocol (tcp, udp, icmp, icmp6, a name or a number 1..255)";
      const Token t = take_value(kWhat);
      if (auto p = lookup(kProtocols, t.text)) {
        out.push_back(static_cast<uint8_t>(*p));
        return;
      }
      if (!decimal(t.text)) fail_expected(t, kWhat);
      // As pfctl: 0 is IPv6's hop-by-hop header, never a packet's protocol; omit 'proto' to match all.
      if (t.text.find_first_not_of('0') == std::string::npos) {
        fail_at(t, "proto 0 cannot be used: omit 'proto' to match every protocol");
      }
      out.push_back(static_cast<uint8_t>(number(t, 1, 255, "protocol number")));
    };
    if (at(TokenKind::LBrace)) {
      list("protocol", one);
    } else {
      one();
    }
    return out;
  }

  // `all`, or [from SRC [port P]] [to DST [port P]]. Returns whether anything was written.
  // `no_ports`: the message when ports are not allowed (binat), or nullptr.
  // `route_tests`: a filter rule's, whose source may be `urpf-failed` and either address
  // `[!] no-route`.
  bool from_to(Endpoint& from, Endpoint& to, std::optional<Family> family, const char* no_ports = nullptr,
               bool route_tests = false) {
    if (accept_word("all")) return true;
    bool any = false;
    if (accept_word("from")) {
      if (route_tests && accept_word("urpf-failed")) from.urpf_failed = true;
      if (route_tests && !from.urpf_failed) from.route = route_test();
      endpoint(from, family, no_ports);
      any = true;
    }
    if (accept_word("to")) {
      if (route_tests) to.route = route_test();
      endpoint(to, family, no_ports);
      any = true;
    }
    return any;
  }

  // `no-route` or `! no-route` where a filter rule's addresses stand.
  RouteTest route_test() {
    if (accept_word("no-route")) return RouteTest::NoRoute;
    if (at(TokenKind::Bang) && at_word("no-route", 1)) {
      take();
      take();
      return RouteTest::Routed;
    }
    return RouteTest::None;
  }

  void endpoint(Endpoint& ep, std::optional<Family> family, const char* no_ports) {
    if (!ep.urpf_failed && ep.route == RouteTest::None && !at_word("port")) ep.addresses = addresses(family);
    if (at_word("port")) {
      if (no_ports) fail_at(peek(), no_ports);
      take();
      ep.ports = ports();
    }
  }

  // An address spec: element | { element, ... }, element = [!] (any | <table> | addr[/len]).
  std::vector<AddressElement> addresses(std::optional<Family> family) {
    std::vector<AddressElement> out;
    auto one = [&](bool in_list) {
      AddressElement e;
      const Token first = peek();
      e.location = loc(first);
      if (at(TokenKind::Bang)) {
        const Token bang = take();
        if (at(TokenKind::LBrace) && !in_list) {
          fail_at(bang,
                  "'!' cannot negate a list: '! { a, b }' would match every address (each element "
                  "is negated on its own, and every address differs from one of them); put the "
                  "addresses in a table and write '! <table>'");
        }
        e.negated = true;
      }
      const Token t = peek();
      if (t.kind == TokenKind::Table) {
        take();
        e.kind = AddressElement::Kind::Table;
        e.table = t.text;
      } else if (t.kind == TokenKind::Word && t.text == "any") {
        if (e.negated) fail_at(t, "'! any' matches no address: remove the rule, or write 'any'");
        take();
        e.kind = AddressElement::Kind::Any;
      } else if (accept_interface(e)) {
        // An interface's addresses (or networks).
      } else if (t.kind == TokenKind::Word || t.kind == TokenKind::String) {
        if (t.kind == TokenKind::Word && is_keyword(t.text)) {
          fail_expected(t, "address, prefix, <table> or 'any'");
        }
        take();
        e.kind = AddressElement::Kind::Prefix;
        e.prefix = prefix(t, "address, prefix, <table> or 'any'");
        if (at_word("-")) range(t, e);
        if (family && *family != e.prefix.family) {
          fail_at(t, t.describe() + " is not " + (*family == Family::V4 ? "an IPv4" : "an IPv6") +
                         " address, as the rule's address family requires");
        }
      } else {
        fail_expected(t, "address, prefix, <table> or 'any'");
      }
      out.push_back(std::move(e));
    };
    if (at(TokenKind::LBrace)) {
      list(
          "address", [&] { one(true); }, false, /*nested=*/true);
    } else {
      one(false);
    }
    return out;
  }

  // `em0` or pf's `(em0)`, if one stands here: fills `e` and takes it. Both are read as pf reads
  // `(em0)`, the addresses as they change.
  bool accept_interface(AddressElement& e) {
    const Token t = peek();
    if (t.kind == TokenKind::LParen) {
      take();
      const Token name = peek();
      if (name.kind != TokenKind::Word || is_keyword(name.text) || !interface_element(name, e))
        fail_expected(name, "an interface name inside '( )'");
      take();
      if (!at(TokenKind::RParen)) fail_expected(peek(), "')'");
      take();
      e.dynamic = true;
      return true;
    }
    if (t.kind != TokenKind::Word || is_keyword(t.text) || !interface_element(t, e)) return false;
    take();
    return true;
  }

  // `em0` (the interface's addresses) or `em0:network` (the networks they lie in), as pf reads an
  // address that is an interface name: a word that starts with a letter, with at most one ':'
  // (an IPv6 address has two or more) before letters. Fills `e` and returns true for those.
  static bool interface_element(const Token& t, AddressElement& e) {
    const std::string_view word = t.text;
    if (word.empty() || !std::isalpha(static_cast<unsigned char>(word[0]))) return false;
    // pf's address forms that ask the routing table: not interface names.
    if (word == "urpf-failed") {
      fail_at(t,
              "'urpf-failed' stands alone after 'from' in a filter rule ('block in quick from urpf-failed'): "
              "not in a list, negated, after 'to', or in a scrub or translation rule");
    }
    if (word == "no-route") {
      fail_at(
          t,
          "'no-route' stands alone after 'from' or 'to' in a filter rule, negated or not ('block in quick "
          "from no-route'): not in a list, or in a scrub or translation rule");
    }
    // Letters or digits after the one ':', so that pf's `:0` is refused by name below; no IPv6
    // address has a single ':'.
    const auto colon = word.find(':');
    const std::string_view modifier = colon == std::string_view::npos ? "" : word.substr(colon + 1);
    if (colon != std::string_view::npos &&
        (modifier.empty() || !std::all_of(modifier.begin(), modifier.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c));
         }))) {
      return false;
    }
    Token name = t;
    name.text = std::string(word.substr(0, colon));
    check_interface_name(name);
    if (name.text == "self" && !modifier.empty())
      fail_at(t, "'self' is every address of this host: it takes no ':" + std::string(modifier) + "'");
    if (!modifier.empty() && modifier != "network") {
      fail_at(t, "'" + t.text + "': ':" + std::string(modifier) + "' is not supported; write " + name.text +
                     " (its addresses) or " + name.text + ":network (their networks)");
    }
    e.kind = AddressElement::Kind::Interface;
    e.table = name.text;
    e.networks = !modifier.empty();
    return true;
  }

  // After a rule's address `first`, at '-': pf's address range, `10.0.0.1 - 10.0.0.50`, both ends
  // included, of one family.
  void range(const Token& first, AddressElement& e) {
    const Token dash = take();
    if (first.text.find('/') != std::string::npos)
      fail_at(first, "an address range runs from one address to another: write " + first.describe() +
                         " without its '/' length, or the prefix alone");
    const Token t = peek();
    if (t.kind != TokenKind::Word && t.kind != TokenKind::String)
      fail_expected(t, "the range's last address");
    take();
    const IpPrefix last = prefix(t, "the range's last address");
    if (t.text.find('/') != std::string::npos || last.family != e.prefix.family)
      fail_at(t, std::string("expected the range's last address, an ") +
                     (e.prefix.family == Family::V4 ? "IPv4" : "IPv6") + " address as its first, got " +
                     t.describe());
    if (last.address < e.prefix.address)
      fail_at(dash,
              "the range " + first.text + " - " + t.text + " runs backwards: write its lower end first");
    e.kind = AddressElement::Kind::Range;
    e.last = last.address;
  }

  // An address range where none may stand (`where`: a table, a translation target), refused by
  // name rather than as an unexpected '-'.
  void refuse_range(const Token& address, std::string_view where) {
    if (!at_word("-")) return;
    fail_at(peek(), "address ranges ('" + address.text + " - ...') are not supported in " +
                        std::string(where) + ": write the range as prefixes");
  }

  // "192.0.2.0/24", "2001:db8::1", ...: a missing length means a host.
  IpPrefix prefix(const Token& t, std::string_view what) {
    const std::string_view text = t.text;
    const auto slash = text.find('/');
    Family f = Family::V4;
    auto address = parse_address(text.substr(0, slash), &f);
    if (!address) fail_expected(t, what);
    const unsigned width = f == Family::V4 ? 32 : 128;
    unsigned length = width;
    if (slash != std::string_view::npos) {
      auto v = decimal(text.substr(slash + 1));
      if (!v || *v > width) {
        fail_at(t, "prefix length in " + t.describe() + " must be between 0 and " + std::to_string(width));
      }
      length = static_cast<unsigned>(*v);
    }
    IpPrefix p{f, *address, static_cast<uint8_t>(length)};
    const IpAddress host = host_bits(f, p.length);
    if ((address->hi & host.hi) != 0 || (address->lo & host.lo) != 0) {
      IpPrefix network{f, {address->hi & ~host.hi, address->lo & ~host.lo}, p.length};
      fail_at(t, "host bits set in " + t.describe() + ": did you mean " + to_string(network) + "?");
    }
    return p;
  }

  // After `port`: item | { item, ... }.
  std::vector<PortMatch> ports() {
    std::vector<PortMatch> out;
    if (at(TokenKind::LBrace)) {
      list("port", [&] { out.push_back(port_item()); });
    } else {
      out.push_back(port_item());
    }
    return out;
  }

  // [op] P | P:Q | P >< Q | P <> Q | P : Q
  PortMatch port_item() {
    constexpr std::string_view kWhat = "port number or service name";
    PortMatch m;
    const Token t = peek();
    using Op = PortMatch::Op;
    std::optional<Op> unary;
    switch (t.kind) {
      case TokenKind::Eq:
        unary = Op::Eq;
        break;
      case TokenKind::Ne:
        unary = Op::Ne;
        break;
      case TokenKind::Lt:
        unary = Op::Lt;
        break;
      case TokenKind::Le:
        unary = Op::Le;
        break;
      case TokenKind::Gt:
        unary = Op::Gt;
        break;
      case TokenKind::Ge:
        unary = Op::Ge;
        break;
      default:
        break;
    }
    if (unary) {
      take();
      const Token v = take_value(kWhat);
      m.op = *unary;
      m.low = port_number(v, v.text, kWhat);
      return m;
    }
    const Token first = take_value(kWhat);
    if (auto colon = first.text.find(':'); colon != std::string::npos) {
      m.op = Op::RangeInclusive;
      m.low = port_number(first, first.text.substr(0, colon), kWhat);
      m.high = port_number(first, first.text.substr(colon + 1), kWhat);
      check_range(first, m);
      return m;
    }
    m.low = port_number(first, first.text, kWhat);
    const TokenKind k = peek().kind;
    if (k == TokenKind::Colon || k == TokenKind::RangeExclusive || k == TokenKind::Outside) {
      take();
      const Token second = take_value(kWhat);
      m.op = k == TokenKind::Colon            ? Op::RangeInclusive
             : k == TokenKind::RangeExclusive ? Op::RangeExclusive
                                              : Op::Outside;
      m.high = port_number(second, second.text, kWhat);
      check_range(first, m);
      return m;
    }
    m.op = Op::Eq;
    return m;
  }

  static void check_range(const Token& at_token, const PortMatch& m) {
    if (m.low > m.high) {
      fail_at(at_token, "port range " + std::to_string(m.low) + " to " + std::to_string(m.high) +
                            " is empty: the first port must not be greater than the second");
    }
    // pfctl refuses `P >< P` (validate_range); `P >< P+1` is as empty, and a rule holding either
    // would never match.
    if (m.op == PortMatch::Op::RangeExclusive && m.high - m.low < 2) {
      fail_at(at_token, "port range " + std::to_string(m.low) + " >< " + std::to_string(m.high) +
                            " holds no port: '><' leaves out both of its ends");
    }
  }

  uint16_t port_number(const Token& t, const std::string& text, std::string_view what) {
    if (auto s = lookup(kServices, text)) return *s;
    auto v = decimal(text);
    if (!v) fail_expected(t, what);
    if (*v > 65535) fail_at(t, "port must be between 0 and 65535, got " + t.describe());
    return static_cast<uint16_t>(*v);
  }

  // After `flags`: any | SET/MASK | /MASK. Letters FSRPAUEW as in pf.
  std::optional<FlagsMatch> flags() {
    const Token t = peek();
    if (t.kind != TokenKind::Word) fail_expected(t, "TCP flags as set/mask (e.g. S/SA) or 'any'");
    take();
    if (t.text == "any") return std::nullopt;
    const auto slash = t.text.find('/');
    if (slash == std::string::npos) fail_expected(t, "TCP flags as set/mask (e.g. S/SA) or 'any'");
    auto bits = [&](std::size_t begin, std::size_t end) {
      static constexpr std::string_view kLetters = "FSRPAUEW";
      uint8_t v = 0;
      for (std::size_t i = begin; i < end; ++i) {
        const auto bit = kLetters.find(t.text[i]);
        if (bit == std::string_view::npos) {
          // Point at the letter itself.
          fail_at(t.part(i), "unknown TCP flag '" + std::string(1, t.text[i]) + "' in " + t.describe() +
                                 ": flags are letters from FSRPAUEW");
        }
        v |= static_cast<uint8_t>(1u << bit);
      }
      return v;
    };
    FlagsMatch f;
    f.set = bits(0, slash);
    f.mask = bits(slash + 1, t.text.size());
    if (f.mask == 0) fail_at(t, "empty flag mask in " + t.describe() + ": write e.g. S/SA");
    if ((f.set & ~f.mask) != 0) {
      fail_at(t, "flags " + t.describe() +
                     " can never match: every flag that must be set must also be in the mask");
    }
    return f;
  }

  // After icmp-type / icmp6-type: item | { item, ... }, item = TYPE [code N].
  std::vector<IcmpTypeMatch> icmp_types(bool v6) {
    std::vector<IcmpTypeMatch> out;
    auto one = [&] {
      const std::string_view what = v6 ? "ICMPv6 type (a name such as echoreq, or a number 0..255)"
                                       : "ICMP type (a name such as echoreq, or a number 0..255)";
      const Token t = take_value(what);
      IcmpTypeMatch m;
      if (auto n = v6 ? lookup(kIcmp6Types, t.text) : lookup(kIcmpTypes, t.text)) {
        m.type = static_cast<uint8_t>(*n);
      } else if (decimal(t.text)) {
        m.type = static_cast<uint8_t>(number(t, 0, 255, v6 ? "ICMPv6 type" : "ICMP type"));
      } else if (v6 ? lookup(kIcmpTypes, t.text).has_value() : lookup(kIcmp6Types, t.text).has_value()) {
        fail_at(t, t.describe() + (v6 ? " is an ICMP (IPv4) type: use icmp-type"
                                      : " is an ICMPv6 type: use icmp6-type"));
      } else {
        fail_expected(t, what);
      }
      if (accept_word("code")) m.code = icmp_code(t, m.type, v6);
      out.push_back(m);
    };
    if (at(TokenKind::LBrace)) {
      list(v6 ? "ICMPv6 type" : "ICMP type", one);
    } else {
      one();
    }
    return out;
  }

  // After `code`: 0..255, or pfctl's name of one of the codes of the type `type` names.
  int16_t icmp_code(const Token& type, uint8_t type_number, bool v6) {
    const Token t = take_value("ICMP code number");
    const std::span<const NamedCode> codes = v6 ? std::span<const NamedCode>(kIcmp6Codes) : kIcmpCodes;
    std::vector<std::string_view> names;
    for (const NamedCode& c : codes) {
      if (c.type != type_number) continue;
      if (c.name == t.text) return c.code;
      names.push_back(c.name);
    }
    if (!decimal(t.text)) {
      std::string what =
          std::string("a code of ") + (v6 ? "ICMPv6" : "ICMP") + " type " + type.text + " (a number 0..255";
      for (std::size_t i = 0; i < names.size(); ++i)
        what += std::string(i == 0 ? ", or " : i + 1 == names.size() ? " or " : ", ") + std::string(names[i]);
      fail_expected(t, what + ")");
    }
    return static_cast<int16_t>(number(t, 0, 255, "ICMP code"));
  }

  std::deque<std::string> included_;  // the included files' text, which the lexer reads in place
  Lexer lexer_;
  std::deque<Token> ahead_;
  const ReadFile& read_file_;
  const bool anchor_rules_;
  LoadBudget& budget_;
  std::string scope_;  // the path of the anchor whose `{ }` the parser is in; empty outside
  std::vector<PendingLoad> pending_loads_;  // this file's `load anchor` statements, in order
  RuleFile out_;
  std::map<std::string, std::size_t> table_index_;  // name -> index in out_.tables
};

}  // namespace

std::string RuleError::to_string() const {
  if (location.line == 0) return location.file + ": " + message;
  return location.file + ":" + std::to_string(location.line) + ":" + std::to_string(location.column) + ": " +
         message;
}

namespace {

std::variant<RuleFile, RuleError> parse(std::string_view text, std::string file_name,
                                        const ReadFile& read_file, bool anchor_rules) {
  LoadBudget budget;
  Parser parser(text, std::move(file_name), read_file, anchor_rules, budget);
  try {
    return parser.run();
  } catch (const SyntaxError& e) {
    return RuleError{parser.location(e), e.what()};
  } catch (AnchorFileError& e) {
    return std::move(e.error);
  }
}

}  // namespace

std::variant<RuleFile, RuleError> parse_rules(std::string_view text, std::string file_name,
                                              const ReadFile& read_file) {
  return parse(text, std::move(file_name), read_file, /*anchor_rules=*/false);
}

std::variant<RuleFile, RuleError> parse_anchor_rules(std::string_view text, std::string file_name,
                                                     const ReadFile& read_file) {
  return parse(text, std::move(file_name), read_file, /*anchor_rules=*/true);
}

std::string read_error(int err) {
  return err == kNotRegularFile ? std::string("not a regular file") : std::string(std::strerror(err));
}

namespace {

// The whole file in `text`; 0, or the errno of the failure (or kNotRegularFile). Only a regular
// file is read, and only up to kMaxFileSize: a FIFO would block the daemon's loop, a device such as
// /dev/zero fill its memory.
int read_file(const std::string& path, std::string& text) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno;
  int err = 0;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    err = errno;
  } else if (S_ISDIR(st.st_mode)) {
    err = EISDIR;
  } else if (!S_ISREG(st.st_mode)) {
    err = kNotRegularFile;
  } else if (static_cast<uint64_t>(st.st_size) > kMaxFileSize) {
    err = EFBIG;
  }
  char buf[65536];
  while (err == 0) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kMaxFileSize) err = EFBIG;  // it grew while read
  }
  ::close(fd);
  return err;
}

// Reads the table's files into its entries, each prefix once, the first way it is listed.
std::optional<RuleError> read_table_files(Table& table) {
  std::set<IpPrefix> seen(table.entries.begin(), table.entries.end());
  seen.insert(table.negated_entries.begin(), table.negated_entries.end());
  for (const TableFile& file : table.files) {
    const std::string path = beside(file.location.file, file.path);
    std::string text;
    if (const int err = read_file(path, text); err != 0) {
      return RuleError{file.location, "cannot read table file \"" + path + "\": " + read_error(err)};
    }
    auto entries = parse_table_entries(text, path);
    if (auto* error = std::get_if<RuleError>(&entries)) return std::move(*error);
    for (const TableEntry& e : std::get<std::vector<TableEntry>>(entries)) {
      if (seen.insert(e.prefix).second)
        (e.negated ? table.negated_entries : table.entries).push_back(e.prefix);
    }
  }
  return std::nullopt;
}

}  // namespace

std::variant<std::vector<TableEntry>, RuleError> parse_table_entries(std::string_view text,
                                                                     const std::string& file_name) {
  std::vector<TableEntry> out;
  uint32_t line = 1;
  std::size_t line_start = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = ++i;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
    } else if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else {
      const std::size_t start = i;
      while (i < text.size() && text[i] != ' ' && text[i] != '\t' && text[i] != '\r' && text[i] != '\n' &&
             text[i] != '#')
        ++i;
      const std::string_view word = text.substr(start, i - start);
      const auto entry = parse_table_entry(word);
      if (!entry) {
        const SourceLocation at{file_name, line, static_cast<uint32_t>(start - line_start + 1)};
        const std::string network = table_entry_network(word);
        return RuleError{at,
                         "expected an address or prefix (e.g. 10.0.0.1, 2001:db8::/32, !10.0.0.0/8), got '" +
                             std::string(word.substr(0, 64)) + "'" +
                             (network.empty() ? "" : ": host bits set, did you mean " + network + "?")};
      }
      out.push_back(*entry);
    }
  }
  return out;
}

std::variant<RuleFile, RuleError> parse_anchor_file(const std::string& path) {
  std::string text;
  if (const int err = read_file(path, text); err != 0) {
    return RuleError{SourceLocation{path, 0, 0}, std::string("cannot read anchor file: ") + read_error(err)};
  }
  return parse_anchor_rules(text, path, read_file);
}

std::variant<RuleFile, RuleError> parse_rules_file(const std::string& path) {
  std::string text;
  if (const int err = read_file(path, text); err != 0) {
    return RuleError{SourceLocation{path, 0, 0}, std::string("cannot read rule file: ") + read_error(err)};
  }
  auto parsed = parse_rules(text, path, read_file);
  if (auto* file = std::get_if<RuleFile>(&parsed)) {
    for (Table& table : file->tables) {
      if (auto error = read_table_files(table)) return std::move(*error);
    }
  }
  return parsed;
}

}  // namespace pairwall::engine::rules
