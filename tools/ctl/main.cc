// pairwallctl: talks to pairwalld over its control socket (proto/control.proto).
//
// Human output by default; --json prints the response payload as protobuf JSON (snake_case field
// names, every field present, 64-bit integers as strings) for scripts. Exit status: 0 success,
// 1 the daemon refused or could not be reached (message on stderr), 2 usage.
// `health` exits 0 when healthy and 1 with the reason otherwise, for keepalived's vrrp_script.
#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "daemon/control/client.h"
#include "daemon/control/config.h"
#include "daemon/control/framing.h"
#include "daemon/engine/address.h"
#include "daemon/engine/rules/parser.h"
#include "proto/control.pb.h"
#include "tools/ctl/format.h"

namespace {

using namespace pairwall;
using control::Request;
using control::Response;

constexpr const char* kUsage = R"(usage: pairwallctl [-s SOCKET] [--json] COMMAND

commands:
  status                         node, rules, states, packets, queues
  rules load FILE                compile FILE aside and swap it in (states survive);
                                 a file that does not compile is refused, the running set stays
  rules show                     rules with @N and their counters
  rules zero [ANCHOR]            set the rules' counters to zero on this node, as pfctl -z
                                 (states and the states they created still counted); with
                                 ANCHOR, its rules and its anchors' alone, as pfctl -a ANCHOR -z
  reload                         what SIGHUP does, answered once done: the config read again,
                                 its rule file loaded and its keys taken, or all refused
  rules labels                   the counters of the rules' labels, rules with one label added
                                 up, as pfctl -s labels
  states [--count] [--limit N] [FILTER...]
                                 FILTER: ADDRESS or PREFIX, port N (a TCP or UDP port),
                                 proto tcp|udp|icmp|icmp6|N, id CREATOR:COUNTER (as listed),
                                 label NAME (the states of the rules labelled NAME),
                                 from ADDRESS|PREFIX (the side that opened the connection),
                                 to ADDRESS|PREFIX (the other side), as pfctl -k SRC -k DST,
                                 on IF (the states bound to IF, if-bound), as pfctl -i IF
  states kill FILTER...          remove the states FILTER matches (and tell the sync peer), as
                                 pfctl -k: cuts off the connections the rules now block
  stats                          verdicts by reason, rule and queue counters
  settings                       the running rules' timeouts and limits, as pfctl -s timeouts
                                 and -s memory (with the adaptive scaling in force now)
  flush states                   remove every state (and tell the sync peer)
  sources [--limit N]            the source nodes of the rules' max-src-* limits, as pfctl -s Sources
  sources kill ADDRESS|PREFIX    remove the source nodes of those addresses, as pfctl -K: their
                                 states go on, and the addresses start afresh under the limits
  flush sources                  remove every source node, as pfctl -F Sources
  tables [show NAME] [-v]        the running rules' tables and their sizes, or one table's entries;
                                 -v: with each entry's counters (a table with `counters`) and
                                 how long ago they were cleared, as pfctl -T show -v
  tables add|delete NAME ADDR... change a table of the running rules (ADDR: address, prefix, or
  tables replace NAME [ADDR...]  !PREFIX for an exception), as pfctl -T; replace leaves exactly
  tables flush NAME              the ADDRs; a reload sets the tables the rule file lists entries
                                 for back to them
  tables test NAME ADDR...       which ADDRs the table holds, as pfctl -T test (exit 0 when
                                 it holds them all, 2 when not, 1 on an error); -f FILE
                                 tests the addresses of FILE
  tables expire NAME SECONDS     remove the entries added (or zeroed) SECONDS ago or earlier, as
                                 pfctl -T expire (an overload table's offenders, from cron)
  tables zero NAME [ADDR...]     clear the counters of the entries ADDR names (all without one),
                                 as pfctl -T zero; expire then counts them as added now
  tables add|delete|replace NAME -f FILE
                                 the same with the addresses of FILE (white space apart, # to
                                 the end of a line a comment), as pfctl -T ... -f; -f - reads
                                 them from standard input
  anchors [show]                 the running rules' anchors, their terms and rule counts
  anchors show NAME              the rules of anchor NAME and of the anchors in it, with their
                                 counters, as pfctl -a NAME -s rules
  anchors load NAME -f FILE      make FILE's rules (filter rules, anchors, macros) the rules of
                                 anchor NAME ("outer/inner" for one inside another), as pfctl -a
                                 NAME -f FILE; -f - reads them from standard input. A reload of
                                 the rule file keeps them
  anchors flush NAME             remove anchor NAME's rules, as pfctl -a NAME -F rules
  sync status
  sync resync                    ask the peer for its whole table now, as at start (conntrackd -n):
                                 the peer's states made as it holds them, those it no longer has
                                 removed; sync status shows the bulk arrive
  failover status
  failover demote N | promote N  raise / lower the administrative demotion
  failover set-role master|backup|fault
  failover track-file FILE       keep FILE holding this node's demotion (at most 253) for
                                 keepalived's track_file, asked every 100 ms, and 254
                                 (keepalived: FAULT) while pairwalld does not answer within 1 s;
                                 runs until killed, and dies with the process that started it
                                 (pairwall-notify.sh -t)
  health                         exit 0 when healthy, 1 with the reason otherwise

options:
  -s, --socket SOCKET            control socket (default /run/pairwall/control.sock)
  -f, --file FILE                a table command's addresses, or an anchor's rules, from FILE
  --json                         machine-readable output
)";

struct UsageError {
  std::string message;
  bool show_usage = true;  // false where the words were right and their input was not (-f FILE)
};

uint32_t parse_number(const std::string& text, const char* what, uint64_t max, uint64_t min = 0) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 10 ||
      std::stoull(text) > max || std::stoull(text) < min) {
    throw UsageError{std::string(what) + ": expected a number " + std::to_string(min) + ".." +
                     std::to_string(max) + ", got '" + text + "'"};
  }
  return static_cast<uint32_t>(std::stoull(text));
}

uint32_t parse_proto(const std::string& text) {
  if (text == "tcp") return 6;
  if (text == "udp") return 17;
  if (text == "icmp") return 1;
  if (text == "icmp6" || text == "ipv6-icmp") return 58;
  const uint32_t n = parse_number(text, "proto", 255);
  if (n == 0) throw UsageError{"proto: expected tcp, udp, icmp, icmp6 or 1..255"};
  return n;
}

struct Invocation {
  std::string socket = std::string(control::kDefaultControlSocket);
  bool json = false;
  bool count = false;
  std::optional<uint32_t> limit;
  std::optional<std::string> file;  // -f: a table command's addresses
  bool verbose = false;             // -v: `tables show NAME`'s entry counters
  std::vector<std::string> words;
};

Invocation parse_args(int argc, char** argv) {
  Invocation inv;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) {
      if (i + 1 >= argc) throw UsageError{std::string(name) + " needs a value"};
      return std::string(argv[++i]);
    };
    if (a == "-s" || a == "--socket") {
      inv.socket = value("-s");
    } else if (a == "--json") {
      inv.json = true;
    } else if (a == "--count") {
      inv.count = true;
    } else if (a == "--limit") {
      inv.limit = parse_number(value("--limit"), "--limit", UINT32_MAX);
    } else if (a == "-v" || a == "--verbose") {
      inv.verbose = true;
    } else if (a == "-f" || a == "--file") {
      inv.file = value("-f");
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a.size() > 1 && a[0] == '-' && a != "-") {
      throw UsageError{"unknown option '" + a + "'"};
    } else {
      inv.words.push_back(a);
    }
  }
  return inv;
}

// A state filter from words[first...]: ADDRESS or PREFIX, port N, proto P, id C:N, label NAME,
// from ADDRESS, to ADDRESS, on IF, in any order.
void parse_state_filter(const std::vector<std::string>& w, std::size_t first, const char* command,
                        control::StateFilter& filter) {
  static const std::set<std::string> kTerms = {"port", "proto", "id", "label", "from", "to", "on"};
  std::set<std::string> given;
  for (std::size_t i = first; i < w.size(); ++i) {
    const bool term = kTerms.contains(w[i]);
    // One of each: the daemon matches states against all the terms, and a second port or proto
    // would silently replace the first.
    if (term && !given.insert(w[i]).second)
      throw UsageError{std::string(command) + ": '" + w[i] + "' given twice (a filter takes one of each)"};
    if (term && i + 1 < w.size()) {
      const std::string& word = w[i];
      const std::string& value = w[++i];
      // The daemon validates the addresses and the id.
      if (word == "port") filter.set_port(parse_number(value, "port", 65535, 1));
      if (word == "proto") filter.set_proto(parse_proto(value));
      if (word == "id") filter.set_id(value);
      if (word == "from") filter.set_from(value);
      if (word == "to") filter.set_to(value);
      if (word == "on") filter.set_interface(value);
      if (word == "label") {
        if (value.empty()) throw UsageError{std::string(command) + ": label: name one"};
        filter.set_label(value);
      }
    } else if (!term && filter.address().empty()) {
      filter.set_address(w[i]);
    } else {
      throw UsageError{
          std::string(command) + ": unexpected '" + w[i] +
          "' (filter: ADDRESS, port N, proto P, id C:N, label NAME, from ADDRESS, to ADDRESS, on IF)"};
    }
  }
}

constexpr const char* kStandardInput = "(standard input)";

// The whole of -f FILE, "-" standard input. Every read checked: a directory opens like a file and
// then fails to read (EISDIR), and a stream would hand on the nothing it read, which `tables
// replace` takes for an empty list and `anchors load` for an anchor without rules.
std::string read_input(const std::string& path) {
  const bool from_stdin = path == "-";
  const int fd = from_stdin ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UsageError{"-f " + path + ": " + std::strerror(errno), false};
  std::string text;
  int err = 0;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  if (!from_stdin) ::close(fd);
  if (err != 0) throw UsageError{"-f " + path + ": " + std::strerror(err), false};
  return text;
}

// A table file's entries (engine::rules::parse_table_entries()), read here: the daemon's file
// system and working directory are not the operator's. "-" is standard input, as pfctl -T ... -f -
// reads a feed piped in.
std::vector<engine::TableEntry> read_table_file(const std::string& path) {
  auto entries = engine::rules::parse_table_entries(read_input(path), path == "-" ? kStandardInput : path);
  if (auto* error = std::get_if<engine::rules::RuleError>(&entries))
    throw UsageError{error->to_string(), false};
  return std::get<std::vector<engine::TableEntry>>(std::move(entries));
}

// The request for the words after the options.
Request build_request(const Invocation& inv) {
  const auto& w = inv.words;
  Request r;
  r.set_version(control::kControlProtocolVersion);
  auto need = [&](std::size_t n) {
    if (w.size() != n) throw UsageError{"wrong number of arguments for '" + w[0] + "'"};
  };
  if (w.empty()) throw UsageError{"no command"};
  const std::string& cmd = w[0];
  if (cmd == "status") {
    need(1);
    r.mutable_status();
  } else if (cmd == "rules" && w.size() >= 2 && w[1] == "load") {
    need(3);
    // The daemon's working directory is not ours: send an absolute path, also for a file we
    // cannot resolve (missing, or behind a directory we may not search), which the daemon then
    // names in its refusal instead of looking for it from its own directory.
    char resolved[PATH_MAX];
    std::string path = w[2];
    if (::realpath(path.c_str(), resolved) != nullptr) {
      path = resolved;
    } else if (!path.empty()) {
      std::error_code ec;
      const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
      // Not normalized: "link/.." is for the kernel to resolve, where the link points.
      if (!ec) path = absolute.string();
    }
    r.mutable_rules_load()->set_path(path);
  } else if (cmd == "rules" && w.size() >= 2 && w[1] == "zero") {
    if (w.size() > 3) throw UsageError{"rules zero takes at most one ANCHOR"};
    auto* zero = r.mutable_rules_zero();
    if (w.size() == 3) zero->set_anchor(w[2]);
  } else if (cmd == "rules" && w.size() >= 2 && (w[1] == "show" || w[1] == "labels")) {
    need(2);
    r.mutable_rules_show();
  } else if (cmd == "states" && w.size() >= 2 && w[1] == "kill") {
    if (inv.count || inv.limit) throw UsageError{"--count and --limit go with 'states', not 'states kill'"};
    if (w.size() == 2)
      throw UsageError{
          "states kill: name an ADDRESS or PREFIX, port N, proto P, id C:N, label NAME, from, to or on"};
    parse_state_filter(w, 2, "states kill", *r.mutable_kill_states()->mutable_filter());
  } else if (cmd == "states") {
    auto* s = r.mutable_states();
    s->set_count_only(inv.count);
    if (inv.limit) s->set_limit(*inv.limit);
    parse_state_filter(w, 1, "states", *s->mutable_filter());
  } else if (cmd == "tables") {
    const std::string sub = w.size() >= 2 ? w[1] : "";
    if (sub.empty()) {
      r.mutable_tables();
    } else if (sub == "show") {
      need(3);
      r.mutable_tables()->set_name(w[2]);
      r.mutable_tables()->set_verbose(inv.verbose);
    } else if (sub == "zero") {
      if (w.size() < 3) throw UsageError{"tables zero: name the table"};
      if (inv.file) throw UsageError{"-f FILE goes with tables add, delete or replace"};
      auto* edit = r.mutable_table_edit();
      edit->set_name(w[2]);
      edit->set_op(control::TableEdit::ZERO);
      for (std::size_t i = 3; i < w.size(); ++i) edit->add_addresses(w[i]);
    } else if (sub == "expire") {
      need(4);
      if (inv.file) throw UsageError{"-f FILE goes with tables add, delete or replace"};
      auto* edit = r.mutable_table_edit();
      edit->set_name(w[2]);
      edit->set_op(control::TableEdit::EXPIRE);
      edit->set_seconds(parse_number(w[3], "tables expire SECONDS", UINT32_MAX));
    } else if (sub == "test") {
      if (w.size() < 3 || (w.size() < 4 && !inv.file))
        throw UsageError{"tables test: name the table and at least one address, or -f FILE"};
      if (inv.file && w.size() > 3) throw UsageError{"tables test: addresses or -f FILE, not both"};
      r.mutable_tables()->set_name(w[2]);
      for (std::size_t i = 3; i < w.size(); ++i) r.mutable_tables()->add_test(w[i]);
      if (inv.file) {
        // As written, a host without its /32 or /128; the daemon refuses a network or an exception.
        for (const engine::TableEntry& e : read_table_file(*inv.file))
          r.mutable_tables()->add_test((e.negated ? "!" : "") + engine::address_text(e.prefix));
        if (r.tables().test_size() == 0)
          throw UsageError{"tables test: -f " + *inv.file + ": no address", false};
      }
    } else if (sub == "add" || sub == "delete" || sub == "flush" || sub == "replace") {
      if (w.size() < 3) throw UsageError{"tables " + sub + ": name the table"};
      if (sub == "flush") need(3);
      if (inv.file && sub == "flush") throw UsageError{"-f FILE goes with tables add, delete or replace"};
      if (inv.file && w.size() > 3) throw UsageError{"tables " + sub + ": addresses or -f FILE, not both"};
      if ((sub == "add" || sub == "delete") && w.size() < 4 && !inv.file)
        throw UsageError{"tables " + sub + ": name an address or prefix, or -f FILE"};
      auto* edit = r.mutable_table_edit();
      edit->set_name(w[2]);
      edit->set_op(sub == "add"      ? control::TableEdit::ADD
                   : sub == "delete" ? control::TableEdit::DELETE
                   : sub == "flush"  ? control::TableEdit::FLUSH
                                     : control::TableEdit::REPLACE);
      for (std::size_t i = 3; i < w.size(); ++i) edit->add_addresses(w[i]);
      if (inv.file) {
        for (const engine::TableEntry& e : read_table_file(*inv.file))
          edit->add_addresses((e.negated ? "!" : "") + engine::to_string(e.prefix));
      }
    } else {
      throw UsageError{"tables: unknown subcommand '" + sub +
                       "' (show, test, add, delete, replace, flush, expire, zero)"};
    }
  } else if (cmd == "anchors") {
    const std::string sub = w.size() >= 2 ? w[1] : "show";
    if (sub == "show" && w.size() == 3) {
      r.mutable_rules_show()->set_anchor(w[2]);
    } else if (sub == "show") {
      if (w.size() > 2) throw UsageError{"wrong number of arguments for 'anchors show'"};
      r.mutable_anchors();
    } else if (sub == "load" || sub == "flush") {
      need(3);
      auto* load = r.mutable_anchor_load();
      load->set_name(w[2]);
      if (sub == "flush") {
        if (inv.file) throw UsageError{"anchors flush takes no -f FILE"};
        load->set_flush(true);
      } else if (!inv.file) {
        throw UsageError{"anchors load: name the rules' file with -f FILE (-f - for standard input)"};
      } else if (*inv.file == "-") {
        load->set_path(kStandardInput);
        load->set_text(read_input("-"));
      } else {
        // The daemon reads the file (and those it includes) itself, from an absolute path.
        char resolved[PATH_MAX];
        if (::realpath(inv.file->c_str(), resolved) == nullptr)
          throw UsageError{"-f " + *inv.file + ": " + std::strerror(errno), false};
        load->set_path(resolved);
      }
    } else {
      throw UsageError{"anchors: unknown subcommand '" + sub + "' (show, load, flush)"};
    }
  } else if (cmd == "sources" && w.size() >= 2 && w[1] == "kill") {
    if (inv.limit) throw UsageError{"--limit goes with 'sources', not 'sources kill'"};
    if (w.size() != 3)
      throw UsageError{"sources kill: name one ADDRESS or PREFIX (every node: flush sources)"};
    r.mutable_kill_sources()->set_address(w[2]);
  } else if (cmd == "sources") {
    need(1);
    if (inv.limit) r.mutable_sources()->set_limit(*inv.limit);
    r.mutable_sources();
  } else if (cmd == "stats") {
    need(1);
    r.mutable_stats();
  } else if (cmd == "settings") {
    need(1);
    r.mutable_settings();
  } else if (cmd == "reload") {
    need(1);
    r.mutable_reload();
  } else if (cmd == "flush" && w.size() == 2 && w[1] == "states") {
    r.mutable_flush_states();
  } else if (cmd == "flush" && w.size() == 2 && w[1] == "sources") {
    r.mutable_kill_sources();
  } else if (cmd == "sync" && w.size() == 2 && w[1] == "status") {
    r.mutable_sync_status();
  } else if (cmd == "sync" && w.size() == 2 && w[1] == "resync") {
    r.mutable_sync_resync();
  } else if (cmd == "failover" && w.size() >= 2) {
    const std::string& sub = w[1];
    if (sub == "status") {
      need(2);
      r.mutable_failover_status();
    } else if (sub == "demote") {
      need(3);
      r.mutable_failover_demote()->set_amount(parse_number(w[2], "demote", 255));
    } else if (sub == "promote") {
      need(3);
      r.mutable_failover_promote()->set_amount(parse_number(w[2], "promote", 255));
    } else if (sub == "track-file") {
      need(3);
      r.mutable_failover_status();
    } else if (sub == "set-role") {
      need(3);
      control::FailoverStatus::Role role;
      if (w[2] == "master") {
        role = control::FailoverStatus::MASTER;
      } else if (w[2] == "backup") {
        role = control::FailoverStatus::BACKUP;
      } else if (w[2] == "fault") {
        role = control::FailoverStatus::FAULT;
      } else {
        throw UsageError{"set-role: expected master, backup or fault, got '" + w[2] + "'"};
      }
      r.mutable_failover_set_role()->set_role(role);
    } else {
      throw UsageError{"failover: unknown subcommand '" + sub + "'"};
    }
  } else if (cmd == "health") {
    need(1);
    r.mutable_health();
  } else {
    std::string all;
    for (const auto& word : w) all += (all.empty() ? "" : " ") + word;
    throw UsageError{"unknown command '" + all + "'"};
  }
  if (cmd != "states" && inv.count) throw UsageError{"--count goes with 'states'"};
  if (inv.verbose && !r.tables().verbose()) throw UsageError{"-v goes with 'tables show NAME'"};
  if (cmd != "states" && cmd != "sources" && inv.limit)
    throw UsageError{"--limit goes with 'states' and 'sources'"};
  if (inv.file && !r.has_table_edit() && !r.has_anchor_load() && r.tables().test_size() == 0)
    throw UsageError{"-f FILE goes with tables add, delete, replace or test, and anchors load"};
  return r;
}

// The payload of a response (the one field of its oneof), or nullptr.
const google::protobuf::Message* payload_of(const Response& response) {
  const auto* oneof = Response::descriptor()->FindOneofByName("payload");
  const auto* field = response.GetReflection()->GetOneofFieldDescriptor(response, oneof);
  if (!field) return nullptr;
  return &response.GetReflection()->GetMessage(response, field);
}

std::string to_json(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

std::string human(const Request& request, const Response& response, const Invocation& inv) {
  const bool count_only = inv.count;
  switch (response.payload_case()) {
    case Response::kStatus:
      return ctl::format_status(response.status());
    case Response::kRulesLoaded: {
      const auto& l = response.rules_loaded();
      std::string out;
      for (const std::string& warning : l.warnings()) out += warning + "\n";
      return out + "loaded " + l.path() + ": " + std::to_string(l.rule_count()) + " rules, " +
             std::to_string(l.states_kept()) + " states kept\n";
    }
    case Response::kRules:
      if (!request.rules_show().anchor().empty() && response.rules().rules_size() == 0)
        return "anchor \"" + request.rules_show().anchor() + "\": no rules\n";
      return inv.words.size() >= 2 && inv.words[1] == "labels" ? ctl::format_labels(response.rules())
                                                               : ctl::format_rules(response.rules());
    case Response::kStates:
      return ctl::format_states(response.states(), count_only);
    case Response::kStats:
      return ctl::format_stats(response.stats());
    case Response::kFlushed:
      return "flushed " + std::to_string(response.flushed().states()) + " states\n";
    case Response::kRulesZeroed: {
      const uint32_t n = response.rules_zeroed().rules();
      return "zeroed the counters of " + std::to_string(n) + (n == 1 ? " rule\n" : " rules\n");
    }
    case Response::kTables:
      if (request.tables().test_size() > 0) return ctl::format_table_test(response.tables());
      if (request.table_edit().op() == control::TableEdit::ZERO)
        return ctl::format_table_zero(response.tables());
      return ctl::format_tables(response.tables(),
                                request.has_table_edit() || !request.tables().name().empty(),
                                request.has_table_edit());
    case Response::kSources:
      return ctl::format_sources(response.sources());
    case Response::kAnchors:
      if (request.has_anchor_load()) {
        const auto& a = response.anchors().anchors(0);
        std::string out;
        for (const std::string& warning : response.anchors().warnings()) out += warning + "\n";
        return out + "anchor \"" + a.name() + "\": " + std::to_string(a.rules()) +
               (a.rules() == 1 ? " rule" : " rules") + "\n";
      }
      return ctl::format_anchors(response.anchors());
    case Response::kSourcesKilled: {
      const auto& k = response.sources_killed();
      return "killed " + std::to_string(k.sources()) + (k.sources() == 1 ? " source node" : " source nodes") +
             ", " + std::to_string(k.states()) + (k.states() == 1 ? " state" : " states") +
             " no longer counted\n";
    }
    case Response::kKilled:
      return "killed " + std::to_string(response.killed().states()) + " states\n";
    case Response::kSyncStatus:
      if (request.has_sync_resync()) {
        return "asked the peer for its whole table: `pairwallctl sync status` shows the bulk arrive\n";
      }
      return ctl::format_sync(response.sync_status());
    case Response::kFailoverStatus:
      return ctl::format_failover(response.failover_status());
    case Response::kHealth:
      return response.health().healthy() ? "healthy\n" : "unhealthy: " + response.health().reason() + "\n";
    case Response::kSettings:
      return ctl::format_settings(response.settings());
    case Response::PAYLOAD_NOT_SET:
      break;
  }
  return "ok\n";
}

// What `failover track-file` writes while pairwalld does not answer: multiplied by the track_file's
// weight of -1 it is below keepalived's -253, which puts the instance in FAULT (and keepalived
// warns of values beyond 254). A demotion is written up to one less: demoted, a node still takes
// part in the election, as the health script's weight lets it.
constexpr uint32_t kNotAnswering = 254;
constexpr uint32_t kMostDemotion = kNotAnswering - 1;

// Writes "VALUE\n" over FILE; keepalived reads it when it is closed (inotify).
bool write_value(const std::string& path, uint32_t value) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const std::string text = std::to_string(value) + "\n";
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  return ::close(fd) == 0 && written;
}

// `failover track-file FILE`: the demotion as keepalived's track_file reads it, so that keepalived
// hears of a demotion, or of a pairwalld gone, within a tick instead of at its health script's next
// run (a second at best). Asked anew each tick: a daemon that died shows within a tick (its socket
// refuses the connection), one that hangs once the answer's timeout has passed.
int track_file(const std::string& socket, const std::string& path) {
  // The notify script that starts this ignores TERM and is killed: go with it, not on for ever.
  const pid_t parent = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) return 1;  // the parent went before the line above
  constexpr auto kTick = std::chrono::milliseconds(100);
  std::optional<uint32_t> written;
  bool said = false;  // a failed write is said once, until one succeeds
  for (;;) {
    uint32_t value = kNotAnswering;
    try {
      // As long as keepalived gives its health script: a busy node is not taken for a dead one.
      control::ControlClient client(socket, std::chrono::seconds(1));
      Request request;
      request.mutable_failover_status();
      const Response response = client.call(request);
      if (response.ok() && response.has_failover_status())
        value = std::min(response.failover_status().demotion(), kMostDemotion);
    } catch (const std::exception&) {
      // Not answering: kNotAnswering.
    }
    if (written != value) {
      if (write_value(path, value)) {
        written = value;
        said = false;
      } else if (!said) {
        std::fprintf(stderr, "pairwallctl: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
        said = true;
      }
    }
    std::this_thread::sleep_for(kTick);
  }
}

// How long to wait for the answer. A request that compiles the rules (a load, a reload, an
// anchor's rules, a table edit) holds the daemon's loop for as long as the rule set takes: 60,000
// rules take seconds, far longer on a slow host or a sanitized build, and pfctl waits for them
// without a limit.
std::chrono::milliseconds answer_timeout(const Request& request) {
  switch (request.command_case()) {
    case Request::kRulesLoad:
    case Request::kReload:
    case Request::kAnchorLoad:
    case Request::kTableEdit:
      return std::chrono::minutes(10);
    default:
      return std::chrono::seconds(30);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Invocation inv;
  Request request;
  try {
    inv = parse_args(argc, argv);
    request = build_request(inv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "pairwallctl: %s\n%s%s", e.message.c_str(), e.show_usage ? "\n" : "",
                 e.show_usage ? kUsage : "");
    return 2;
  }

  if (inv.words.size() == 3 && inv.words[0] == "failover" && inv.words[1] == "track-file")
    return track_file(inv.socket, inv.words[2]);

  Response response;
  try {
    control::ControlClient client(inv.socket, answer_timeout(request));
    response = client.call(request);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pairwallctl: %s\n", e.what());
    return 1;
  }
  if (!response.ok()) {
    std::fprintf(stderr, "pairwallctl: %s\n", response.error().c_str());
    return 1;
  }

  if (inv.json) {
    const auto* payload = payload_of(response);
    std::cout << (payload ? to_json(*payload) : std::string("{}\n"));
  } else {
    std::cout << human(request, response, inv);
  }
  // A full disk or a closed pipe cuts the answer off: a script reading `--json > FILE` must not
  // take the part written for the whole. Where the status is the answer (health for keepalived's
  // vrrp_script, tables test), the output is an aside and the status stands.
  const bool status_answers = request.has_health() || request.tables().test_size() > 0;
  if ((!std::cout.flush() || std::ferror(stdout) != 0) && !status_answers) {
    std::fprintf(stderr, "pairwallctl: cannot write the output: %s\n", std::strerror(errno));
    return 1;
  }
  // pfctl -T test's status: 2 when the table lacks an address tested, so that a script tells a
  // miss from an error (1).
  if (request.tables().test_size() > 0 && response.tables().matched_size() < request.tables().test_size())
    return 2;
  if (response.has_health() && !response.health().healthy()) {
    if (inv.json) std::fprintf(stderr, "pairwallctl: unhealthy: %s\n", response.health().reason().c_str());
    return 1;
  }
  return 0;
}
