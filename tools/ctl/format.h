// Human-readable rendering of pairwalld's control responses (pairwallctl without --json).
#pragma once

#include <string>

#include "proto/control.pb.h"

namespace pairwall::ctl {

std::string format_status(const control::Status& s);
std::string format_rules(const control::RuleList& rules);
// pfctl -s labels: per label, in the order labels first appear, the sums of its rules' counters.
std::string format_labels(const control::RuleList& rules);
// Every table and its size, or (`entries`) each table's entries, one a line; after an edit
// (`edited`), first how many entries it added and deleted, and a table of more than 32 entries
// by its size alone.
std::string format_tables(const control::TableList& tables, bool entries, bool edited);
// `tables zero`: how many of the table's entries were zeroed, as pfctl -T zero says it.
std::string format_table_zero(const control::TableList& tables);
// pfctl -T test's answer: "N/M addresses match.", then the matching ones, one a line.
std::string format_table_test(const control::TableList& tables);
std::string format_states(const control::StateList& states, bool count_only);
// One source node a line, as pfctl -s Sources -v shows them, then how many of the limit.
std::string format_anchors(const control::AnchorList& list);
std::string format_sources(const control::SourceList& sources);
std::string format_stats(const control::Stats& s);
// As pfctl -s timeouts, then -s memory's hard limits.
std::string format_settings(const control::Settings& s);
std::string format_sync(const control::SyncStatus& s);
std::string format_failover(const control::FailoverStatus& s);

// "1.5 GB", "12 KB", "900 B".
std::string human_bytes(uint64_t bytes);
// "3d04h", "2h05m", "4m10s", "12.3s".
std::string human_duration_ms(uint64_t ms);
// "10.0.0.1:80", "[2001:db8::1]:80"; the port is left out for 0 when `with_port` is false.
std::string endpoint(const control::StateEndpoint& e, uint32_t family, bool with_port);

}  // namespace pairwall::ctl
