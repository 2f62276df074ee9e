#include "tools/ctl/format.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "daemon/engine/address.h"
#include "daemon/engine/rules/ruleset.h"

namespace pairwall::ctl {
namespace {

std::string proto_name(uint32_t p) {
  switch (p) {
    case 1:
      return "icmp";
    case 6:
      return "tcp";
    case 17:
      return "udp";
    case 58:
      return "icmp6";
    default:
      return "proto-" + std::to_string(p);
  }
}

std::string local_time_ms(uint64_t unix_ms) {
  if (unix_ms == 0) return "never";
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// A table entry as pfctl -T show prints it: a host without its /32 or /128.
std::string table_entry(const std::string& entry) {
  const auto parsed = engine::parse_table_entry(entry);
  return parsed ? (parsed->negated ? "!" : "") + engine::address_text(parsed->prefix) : entry;
}

std::string ago_ms(int64_t ms) {
  return ms < 0 ? "never" : human_duration_ms(static_cast<uint64_t>(ms)) + " ago";
}

// pfctl -v's counters line; a filter rule's (RuleInfo), a translation or a scrub rule's.
template <typename Info>
void rule_counters(std::ostringstream& o, const Info& r) {
  o << "  [ Evaluations: " << r.evaluations() << "  Packets: " << r.packets() << "  Bytes: " << r.bytes()
    << "  States: " << r.states_current() << " (" << r.states_created() << " created) ]\n";
}

bool same_endpoint(const control::StateEndpoint& a, const control::StateEndpoint& b) {
  return a.address() == b.address() && a.port() == b.port();
}

// A rule set digest as 16 hex digits.
std::string digest_text(uint64_t digest) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(digest));
  return text;
}

}  // namespace

std::string human_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  double v = static_cast<double>(bytes);
  std::size_t unit = 0;
  // 999,999 bytes is 1.0 MB, not "1000.0 KB": a unit ends where its one decimal rounds to 1000.
  while (v >= 999.95 && unit + 1 < std::size(kUnits)) {
    v /= 1000.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[unit]);
  }
  return buf;
}

namespace {

void queue_line(std::ostringstream& o, const control::QueueStats& q) {
  o << "  queue " << q.queue() << ": " << q.packets() << " packets, " << q.drops()
    << " dropped (queue full), " << q.overruns() << " overruns, " << q.uninspected()
    << " uninspected (fail-open policy), " << q.verdict_errors() << " verdict errors\n";
  if (q.max_len() != 0) {
    o << "    holds " << q.max_len() << " packets, receive buffer " << human_bytes(q.rcvbuf_bytes()) << "\n";
  }
}

}  // namespace

std::string human_duration_ms(uint64_t ms) {
  const uint64_t s = ms / 1000;
  char buf[32];
  if (s >= 86400) {
    std::snprintf(buf, sizeof buf, "%llud%02lluh", static_cast<unsigned long long>(s / 86400),
                  static_cast<unsigned long long>(s % 86400 / 3600));
  } else if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lluh%02llum", static_cast<unsigned long long>(s / 3600),
                  static_cast<unsigned long long>(s % 3600 / 60));
  } else if (s >= 60) {
    std::snprintf(buf, sizeof buf, "%llum%02llus", static_cast<unsigned long long>(s / 60),
                  static_cast<unsigned long long>(s % 60));
  } else {
    // Tenths cut, not rounded: 59,999 ms is 59.9s, never "60.0s" beside the minutes' "1m00s".
    std::snprintf(buf, sizeof buf, "%.1fs", static_cast<double>(ms / 100) / 10.0);
  }
  return buf;
}

std::string endpoint(const control::StateEndpoint& e, uint32_t family, bool with_port) {
  if (!with_port) return e.address();
  if (family == 6) return "[" + e.address() + "]:" + std::to_string(e.port());
  return e.address() + ":" + std::to_string(e.port());
}

std::string format_status(const control::Status& s) {
  std::ostringstream o;
  o << "node      " << s.node_id() << " (" << s.node_name() << "), pairwalld " << s.version() << ", pid "
    << s.pid() << ", up " << human_duration_ms(s.uptime_ms()) << "\n";
  o << "rules     " << (s.rules_file().empty() ? "(none)" : s.rules_file()) << ": " << s.rule_count()
    << " rules, loaded " << local_time_ms(s.rules_loaded_unix_ms()) << " (" << s.rule_reloads() << " loads, "
    << s.rule_reload_failures() << " refused)\n";
  if (s.rules_digest() != 0) o << "          digest " << digest_text(s.rules_digest()) << "\n";
  o << "states    " << s.states() << " of " << s.state_limit() << "\n";
  o << "packets   " << s.packets() << " (" << human_bytes(s.bytes()) << "), " << s.drops() << " dropped\n";
  o << "queues    " << s.queues_size() << ", " << (s.fail_open() ? "fail-open" : "fail-closed") << "\n";
  for (const auto& q : s.queues()) queue_line(o, q);
  if (s.prerouting_hook()) {
    o << "hooks     pre-routing for translation";
    if (s.prerouting_matches_size() > 0) o << ", also queued there:";
    o << "\n";
    for (const std::string& match : s.prerouting_matches()) o << "            " << match << "\n";
  }
  return o.str();
}

std::string format_rules(const control::RuleList& rules) {
  std::ostringstream o;
  if (rules.rules_size() == 0 && rules.translations_size() == 0 && rules.scrubs_size() == 0)
    o << "no rules loaded\n";
  // pfctl lists scrub and translation rules (-s nat) apart from filter rules: each list has its own @N.
  if (rules.scrubs_size() > 0) {
    o << "# scrub rules, first match\n";
    for (const auto& s : rules.scrubs()) {
      o << "@" << s.number() << " " << s.text() << "\n";
      rule_counters(o, s);
    }
  }
  if (rules.translations_size() > 0) {
    o << "# translation rules, first match\n";
    for (const auto& t : rules.translations()) {
      o << "@" << t.number() << " " << t.text() << "\n";
      rule_counters(o, t);
    }
  }
  if (rules.scrubs_size() > 0 || rules.translations_size() > 0) o << "# filter rules, last match\n";
  // An anchor's rules follow its line, indented by its depth.
  for (const auto& r : rules.rules()) {
    const std::string indent(2 * engine::rules::anchor_depth(r.anchor()), ' ');
    o << indent << "@" << r.number() << " " << r.text() << "\n";
    if (!r.calls_anchor().empty()) continue;
    std::ostringstream counters;
    rule_counters(counters, r);
    o << indent << counters.str();
  }
  return o.str();
}

std::string format_anchors(const control::AnchorList& list) {
  std::ostringstream o;
  for (const auto& a : list.anchors()) {
    o << "anchor \"" << a.name() << "\" " << a.terms() << "  " << a.rules()
      << (a.rules() == 1 ? " rule" : " rules") << (a.from_file() ? ", from the rule file" : ", loaded")
      << " (" << a.location() << ")\n";
  }
  if (list.anchors_size() == 0) o << "no anchors\n";
  return o.str();
}

std::string format_labels(const control::RuleList& rules) {
  struct Sums {
    uint64_t evaluations = 0, packets = 0, bytes = 0, states = 0, created = 0;
  };
  std::vector<std::pair<std::string, Sums>> labels;
  for (const auto& r : rules.rules()) {
    if (r.label().empty()) continue;
    auto it = std::find_if(labels.begin(), labels.end(), [&](const auto& l) { return l.first == r.label(); });
    if (it == labels.end()) it = labels.insert(labels.end(), {r.label(), Sums{}});
    it->second.evaluations += r.evaluations();
    it->second.packets += r.packets();
    it->second.bytes += r.bytes();
    it->second.states += r.states_current();
    it->second.created += r.states_created();
  }
  std::ostringstream o;
  if (labels.empty()) return "no rule has a label\n";
  o << "# label evaluations packets bytes states states-created\n";
  for (const auto& [label, s] : labels) {
    o << label << " " << s.evaluations << " " << s.packets << " " << s.bytes << " " << s.states << " "
      << s.created << "\n";
  }
  return o.str();
}

namespace {

// An entry's counters as pfctl -T show -v writes them.
std::string entry_stats(const control::TableEntryStats& s, bool counted) {
  std::ostringstream o;
  o << "\tCleared:     " << s.cleared_seconds_ago() << " s ago\n";
  if (!counted) return o.str();
  const auto row = [&o](const char* name, uint64_t packets, uint64_t bytes) {
    o << "\t" << name << "[ Packets: " << packets << "  Bytes: " << bytes << " ]\n";
  };
  row("In/Block:    ", s.in_block_packets(), s.in_block_bytes());
  row("In/Pass:     ", s.in_pass_packets(), s.in_pass_bytes());
  row("Out/Block:   ", s.out_block_packets(), s.out_block_bytes());
  row("Out/Pass:    ", s.out_pass_packets(), s.out_pass_bytes());
  return o.str();
}

}  // namespace

std::string format_tables(const control::TableList& tables, bool entries, bool edited) {
  constexpr uint32_t kEditListed = 32;
  std::ostringstream o;
  if (edited) {
    o << tables.added() << " added, " << tables.deleted() << " deleted";
    if (tables.changed() != 0) o << ", " << tables.changed() << " changed";
    o << "\n";
  }
  for (const auto& t : tables.tables()) {
    // After an edit, a table the size of a feed's list is summed up rather than listed.
    if (entries && !(edited && t.count() > kEditListed)) {
      for (int i = 0; i < t.entries_size(); ++i) {
        o << "   " << table_entry(t.entries(i)) << "\n";
        if (i < t.entry_stats_size()) o << entry_stats(t.entry_stats(i), t.counters());
      }
      continue;
    }
    o << "<" << t.name() << ">  " << t.count() << (t.count() == 1 ? " entry" : " entries")
      << (t.is_const() ? ", const" : "") << (t.counters() ? ", counters" : "")
      << (t.shared() ? ", shared with the peer" : "") << "\n";
  }
  if (!entries && tables.tables_size() == 0) o << "no tables\n";
  if (!entries && tables.tables_size() != 0 && tables.entry_limit() != 0) {
    uint64_t total = 0;
    for (const auto& t : tables.tables()) total += t.count();
    o << total << " of " << tables.entry_limit() << " table entries used (set limit table-entries)\n";
  }
  return o.str();
}

std::string format_table_zero(const control::TableList& tables) {
  const uint32_t held = tables.tables_size() > 0 ? tables.tables(0).count() : 0;
  return std::to_string(tables.zeroed()) + "/" + std::to_string(held) + " addresses zeroed\n";
}

std::string format_table_test(const control::TableList& tables) {
  std::ostringstream o;
  o << tables.matched_size() << "/" << tables.tested() << (tables.tested() == 1 ? " address" : " addresses")
    << " match.\n";
  for (const auto& a : tables.matched()) o << "   " << a << "\n";
  return o.str();
}

std::string format_settings(const control::Settings& s) {
  std::ostringstream o;
  char line[96];
  for (const auto& t : s.timeouts()) {
    std::snprintf(line, sizeof line, "%-20s %10llus\n", t.name().c_str(),
                  static_cast<unsigned long long>(t.seconds()));
    o << line;
  }
  if (s.adaptive_start() == 0 && s.adaptive_end() == 0) {
    o << "adaptive timeouts    off\n";
  } else {
    std::snprintf(line, sizeof line, "%-20s %10u states\n%-20s %10u states\n", "adaptive.start",
                  s.adaptive_start(), "adaptive.end", s.adaptive_end());
    o << line;
    std::snprintf(line, sizeof line, "timeouts scaled by   %10.3f (%llu states)\n", s.timeout_scale(),
                  static_cast<unsigned long long>(s.states()));
    o << line;
  }
  o << "\n";
  std::snprintf(line, sizeof line, "%-20s hard limit %10u\n", "states", s.state_limit());
  o << line;
  std::snprintf(line, sizeof line, "%-20s hard limit %10u\n", "src-nodes", s.source_node_limit());
  o << line;
  std::snprintf(line, sizeof line, "%-20s hard limit %10u\n", "table-entries", s.table_entry_limit());
  o << line;
  o << "\nblock-policy " << (s.block_policy_return() ? "return" : "drop") << "\n";
  if (s.skip_interfaces_size() > 0) {
    o << "skip on";
    for (const auto& name : s.skip_interfaces()) o << " " << name;
    o << "\n";
  }
  return o.str();
}

std::string format_sources(const control::SourceList& list) {
  std::ostringstream o;
  for (const auto& n : list.sources()) {
    o << n.address() << "  " << (n.global() ? std::string("global") : "rule @" + std::to_string(n.rule()))
      << "  states " << n.states() << ", connections " << n.connections();
    if (n.rate_seconds() != 0) {
      char rate[32];
      std::snprintf(rate, sizeof rate, "%.1f", n.rate());
      o << ", rate " << rate << "/" << n.rate_seconds() << "s";
    }
    o << "\n";
  }
  o << list.total() << " of " << list.limit() << " source nodes";
  if (static_cast<uint64_t>(list.sources_size()) < list.total())
    o << " (" << list.sources_size() << " listed)";
  o << "\n";
  return o.str();
}

std::string format_states(const control::StateList& list, bool count_only) {
  std::ostringstream o;
  if (count_only) {
    o << list.matched() << "\n";
    return o.str();
  }
  for (const auto& s : list.states()) {
    const bool ports = s.proto() == 6 || s.proto() == 17;
    o << proto_name(s.proto()) << " " << endpoint(s.src(), s.family(), ports);
    if (s.has_wire_src() && !same_endpoint(s.wire_src(), s.src())) {
      o << " (" << endpoint(s.wire_src(), s.family(), ports) << ")";
    }
    o << " -> " << endpoint(s.dst(), s.family(), ports);
    if (s.has_wire_dst() && !same_endpoint(s.wire_dst(), s.dst())) {
      o << " (" << endpoint(s.wire_dst(), s.family(), ports) << ")";
    }
    if (!s.link().empty()) o << " on " << s.link();
    // An ICMP query's key holds its identifier where the others hold ports; ESP's or GRE's, zeros.
    if (s.proto() == 1 || s.proto() == 58) o << " id " << s.src().port();
    o << "  " << s.src_state() << ":" << s.dst_state() << "\n";
    o << "   age " << human_duration_ms(s.age_ms()) << ", expires in "
      << human_duration_ms(static_cast<uint64_t>(s.expires_in_ms())) << " (" << s.timeout() << "), "
      << s.packets_out() << ":" << s.packets_in() << " pkts, " << human_bytes(s.bytes_out()) << ":"
      << human_bytes(s.bytes_in()) << ", ";
    if (s.rule() == UINT32_MAX) {
      o << "no rule";
    } else {
      o << "rule @" << s.rule();
    }
    if (!s.synproxy().empty()) {
      o << ", synproxy " << s.synproxy();
    } else if (s.modulated()) {
      o << ", modulated";
    }
    if (s.scrub_tcp()) o << ", scrubbed";
    if (!s.bound_in().empty() || !s.bound_out().empty()) {
      o << ", bound";
      if (!s.bound_in().empty()) o << " in on " << s.bound_in();
      if (!s.bound_out().empty()) o << " out on " << s.bound_out();
    }
    o << ", id " << s.creator() << ":" << s.id() << (s.from_peer() ? " (from peer)" : "") << "\n";
  }
  o << list.matched() << " of " << list.total() << " states";
  if (list.truncated()) o << " (" << list.states_size() << " shown: narrow with a filter or --limit)";
  o << "\n";
  return o.str();
}

std::string format_stats(const control::Stats& s) {
  std::ostringstream o;
  o << "packets " << s.packets() << " (" << human_bytes(s.bytes()) << "), states " << s.states() << " of "
    << s.state_limit() << ", state events lost " << s.events_lost() << "\n\n";
  o << "verdicts by reason\n";
  for (const auto& r : s.reasons()) {
    char line[96];
    std::snprintf(line, sizeof line, "  %-20s %-5s %20llu\n", r.reason().c_str(), r.pass() ? "pass" : "drop",
                  static_cast<unsigned long long>(r.count()));
    o << line;
  }
  if (s.queues_size() > 0) {
    o << "\nqueues\n";
    for (const auto& q : s.queues()) queue_line(o, q);
  }
  if (s.rules_size() > 0) {
    o << "\nrules\n";
    for (const auto& r : s.rules()) {
      o << "@" << r.number() << " " << r.text() << "\n";
      rule_counters(o, r);
    }
  }
  return o.str();
}

std::string format_sync(const control::SyncStatus& s) {
  std::ostringstream o;
  if (!s.enabled()) return "sync is not configured\n";
  o << "peer          " << s.peer_address() << " (node " << s.peer_node_id() << "), "
    << control::SyncStatus::PeerState_Name(s.peer_state()) << ", heard " << ago_ms(s.last_heard_ms_ago())
    << "\n";
  o << "bulk          " << control::SyncStatus::BulkState_Name(s.bulk_state()) << ", " << s.bulk_received()
    << " of " << s.bulk_expected() << " states\n";
  o << "datagrams     " << s.datagrams_sent() << " sent, " << s.datagrams_received() << " received, up to "
    << s.datagram_bytes() << " bytes\n";
  o << "messages      " << s.messages_sent() << " sent, " << s.messages_received() << " received\n";
  o << "reliability   " << s.resends() << " resends, " << s.gaps() << " gaps, " << s.resyncs()
    << " resyncs, resend window " << s.resend_window_depth() << ", events lost " << s.events_lost() << "\n";
  if (s.rules_digest() != 0 && s.peer_rules_digest() != 0) {
    if (s.rules_digest() == s.peer_rules_digest()) {
      o << "rules         the same as the peer's (digest " << digest_text(s.rules_digest()) << ")\n";
    } else {
      o << "rules         DIFFER from the peer's (digest " << digest_text(s.rules_digest()) << ", the peer's "
        << digest_text(s.peer_rules_digest()) << "): after a failover new connections meet other rules\n";
    }
  }
  if (s.tables_sent() != 0 || s.tables_received() != 0) {
    o << "tables        " << s.tables_sent() << " sent, " << s.tables_received()
      << " received whole ([sync] tables)\n";
  }
  if (s.peer_states_removed() != 0)
    o << "stale states  " << s.peer_states_removed() << " of the peer's removed after its full transfers\n";
  if (s.defer().enabled()) {
    const auto& d = s.defer();
    const auto released = [&](const char* cause) {
      const auto it = d.released().find(cause);
      return it == d.released().end() ? uint64_t{0} : it->second;
    };
    o << "defer         " << d.holding() << " held now, " << d.held() << " held in all (timeout "
      << d.timeout_ms() << " ms): " << released("synced") << " went when the peer acked, "
      << released("timeout") << " timed out, " << released("full") << " made room, " << released("stopped")
      << " let go with the peer down\n";
  }
  if (!s.drops().empty()) {
    o << "dropped\n";
    std::map<std::string, uint64_t> sorted(s.drops().begin(), s.drops().end());
    for (const auto& [reason, n] : sorted) o << "  " << reason << " " << n << "\n";
  }
  return o.str();
}

std::string format_failover(const control::FailoverStatus& s) {
  std::ostringstream o;
  if (!s.enabled()) return "failover is not configured\n";
  o << "role          " << control::FailoverStatus::Role_Name(s.role()) << " (driver " << s.driver() << ")\n";
  if (s.driver() == "builtin") {
    o << "group         vhid " << s.vhid() << ", advbase " << s.advbase_ms() << " ms, advskew " << s.advskew()
      << ", preempt " << (s.preempt() ? "on" : "off") << "\n";
  } else {
    o << "group         as keepalived.conf sets it\n";
  }
  o << "demotion      " << s.demotion();
  for (int i = 0; i < s.demotion_reasons_size(); ++i) o << (i == 0 ? " (" : ", ") << s.demotion_reasons(i);
  if (s.demotion_reasons_size() > 0) o << ")";
  o << "\n";
  if (s.vips_size() > 0) {
    o << "vips          ";
    if (s.driver() == "builtin") o << (s.vips_held() ? "held: " : "not held: ");
    for (int i = 0; i < s.vips_size(); ++i) o << (i == 0 ? "" : ", ") << s.vips(i);
    o << "\n";
  }
  if (s.links_size() > 0) {
    o << "links         ";
    for (int i = 0; i < s.links_size(); ++i) {
      const auto& link = s.links(i);
      o << (i == 0 ? "" : ", ") << link.interface() << (link.carrier() ? " carrier" : " no carrier")
        << (link.tracked() ? " (tracked)" : "");
    }
    o << "\n";
  }
  for (int i = 0; i < s.advertisements_size(); ++i)
    o << (i == 0 ? "advertising   " : "              ") << s.advertisements(i) << "\n";
  if (!s.notify().empty()) o << "notify        " << s.notify() << "\n";
  if (s.driver() == "builtin") {
    o << "master        node " << s.master_node_id() << ", heard " << ago_ms(s.last_heard_ms_ago()) << "\n";
  } else {
    // keepalived's vrrp_script asks every interval: a check long ago says keepalived is not running.
    o << "health check  last " << ago_ms(s.health_checked_ms_ago()) << "\n";
  }
  if (s.transitions_size() > 0) {
    o << "transitions\n";
    for (const auto& t : s.transitions()) {
      o << "  " << local_time_ms(t.unix_ms()) << " " << control::FailoverStatus::Role_Name(t.from()) << " -> "
        << control::FailoverStatus::Role_Name(t.to()) << ": " << t.cause() << "\n";
    }
  }
  if (!s.rejects().empty()) {
    o << "rejected advertisements\n";
    std::map<std::string, uint64_t> sorted(s.rejects().begin(), s.rejects().end());
    for (const auto& [reason, n] : sorted) o << "  " << reason << " " << n << "\n";
  }
  return o.str();
}

}  // namespace pairwall::ctl
