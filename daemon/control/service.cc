#include "daemon/control/service.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <set>
#include <tuple>
#include <vector>

#include "daemon/control/framing.h"
#include "daemon/engine/address.h"
#include "daemon/engine/rules/anchors.h"
#include "daemon/engine/rules/compile.h"
#include "daemon/engine/rules/parser.h"
#include "daemon/engine/timeouts.h"

#ifndef PAIRWALL_VERSION
#define PAIRWALL_VERSION "unknown"
#endif

namespace pairwall::control {
namespace {

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string_view tcp_state_name(uint8_t s) {
  using engine::TcpState;
  switch (static_cast<TcpState>(s)) {
    case TcpState::Closed:
      return "CLOSED";
    case TcpState::Listen:
      return "LISTEN";
    case TcpState::SynSent:
      return "SYN_SENT";
    case TcpState::SynReceived:
      return "SYN_RCVD";
    case TcpState::Established:
      return "ESTABLISHED";
    case TcpState::CloseWait:
      return "CLOSE_WAIT";
    case TcpState::FinWait1:
      return "FIN_WAIT_1";
    case TcpState::Closing:
      return "CLOSING";
    case TcpState::LastAck:
      return "LAST_ACK";
    case TcpState::FinWait2:
      return "FIN_WAIT_2";
    case TcpState::TimeWait:
      return "TIME_WAIT";
  }
  return "?";
}

std::string_view flow_state_name(uint8_t s) {
  using engine::FlowState;
  switch (static_cast<FlowState>(s)) {
    case FlowState::NoTraffic:
      return "NO_TRAFFIC";
    case FlowState::Single:
      return "SINGLE";
    case FlowState::Multiple:
      return "MULTIPLE";
  }
  return "?";
}

// The fields of one entry, copied under its shard lock so that formatting happens after the lock
// is released and the workers of that shard wait as little as possible.
struct StateCopy {
  engine::StateKey key[2];
  uint8_t peer_state[2] = {0, 0};
  engine::PeerTracking peer[2];
  engine::StateId id;
  engine::TimeoutClass timeout = engine::TimeoutClass::TcpFirst;
  uint8_t flags = 0;
  engine::Proxy proxy = engine::Proxy::None;
  bool scrub_tcp = false;
  engine::IfaceId bound[2] = {engine::kNoIface, engine::kNoIface};
  uint32_t rule = 0;
  engine::Millis created{0};
  engine::Millis expires_at{0};
  uint64_t packets[2] = {0, 0};
  uint64_t bytes[2] = {0, 0};
};

// A StateFilter, checked: an address or prefix, a port (TCP's or UDP's), a protocol, a state id,
// the creating rule's label and the addresses of the side that opened the connection and of the
// other, each optional; addresses and ports match either key (a translated state is found by its
// inside address and by its nat address alike), the first two either endpoint of it.
struct StateMatch {
  std::optional<engine::IpPrefix> prefix;
  uint32_t port = 0;
  uint32_t proto = 0;
  std::optional<engine::StateId> id;
  std::optional<std::string> label;
  std::optional<engine::IpPrefix> from;  // endpoint 0: the side that sent the first packet
  std::optional<engine::IpPrefix> to;
  // Bound to this interface on a pass; kNoIface for a name no interface of this node has had, which
  // no state is bound to.
  std::optional<engine::IfaceId> bound_to;

  bool names_something() const {
    return prefix || port != 0 || proto != 0 || id || label || from || to || bound_to;
  }

  bool key_matches(const engine::StateKey& k) const {
    if (proto != 0 && k.proto != proto) return false;
    if (from && !from->contains(k.family, k.addr[0])) return false;
    if (to && !to->contains(k.family, k.addr[1])) return false;
    // An ICMP query's key holds its identifier and type in the ports' place: not ports.
    if (port != 0 && ((k.proto != engine::ipproto::kTcp && k.proto != engine::ipproto::kUdp) ||
                      (k.port[0] != port && k.port[1] != port)))
      return false;
    if (prefix && !prefix->contains(k.family, k.addr[0]) && !prefix->contains(k.family, k.addr[1]))
      return false;
    return true;
  }
  bool operator()(const engine::StateEntry& e) const {
    if (id && !(e.id == *id)) return false;
    // A state whose rule the peer's rule set had and this one lacks has no creator here.
    if (label && (e.creator == nullptr || e.creator->label != *label)) return false;
    if (bound_to && (*bound_to == engine::kNoIface || (e.bound[0] != *bound_to && e.bound[1] != *bound_to)))
      return false;
    return key_matches(e.key(0)) || (e.translated() && key_matches(e.key(1)));
  }
};

// "CREATOR:COUNTER", both decimal, as `states` lists ids.
std::optional<engine::StateId> parse_state_id(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return std::nullopt;
  uint32_t creator = 0;
  uint64_t counter = 0;
  const char* end = text.data() + text.size();
  auto [p1, e1] = std::from_chars(text.data(), text.data() + colon, creator);
  auto [p2, e2] = std::from_chars(text.data() + colon + 1, end, counter);
  if (e1 != std::errc{} || p1 != text.data() + colon || e2 != std::errc{} || p2 != end) return std::nullopt;
  return engine::StateId{creator, counter};
}

// Empty on success, else the reason, starting with `command`.
std::string parse_state_filter(const StateFilter& f, const engine::InterfaceRegistry& interfaces,
                               const char* command, StateMatch& out) {
  if (!f.address().empty()) {
    out.prefix = engine::parse_prefix(f.address());
    if (!out.prefix) {
      return std::string(command) + ": '" + f.address() +
             "' is not an address or prefix (e.g. 10.0.0.1, 10.0.0.0/8)";
    }
  }
  if (f.port() > 65535)
    return std::string(command) + ": port " + std::to_string(f.port()) + " is out of range 1..65535";
  if (f.proto() > 255)
    return std::string(command) + ": protocol " + std::to_string(f.proto()) + " is out of range 1..255";
  if (!f.id().empty()) {
    out.id = parse_state_id(f.id());
    if (!out.id) return std::string(command) + ": id '" + f.id() + "' is not CREATOR:COUNTER (e.g. 1:4711)";
  }
  if (!f.label().empty()) out.label = f.label();
  for (auto [text, prefix, word] :
       {std::tuple{&f.from(), &out.from, "from"}, std::tuple{&f.to(), &out.to, "to"}}) {
    if (text->empty()) continue;
    *prefix = engine::parse_prefix(*text);
    if (!*prefix) {
      return std::string(command) + ": " + word + " '" + *text +
             "' is not an address or prefix (e.g. 10.0.0.1, 10.0.0.0/8)";
    }
  }
  if (!f.interface().empty()) {
    if (!engine::valid_interface_name(f.interface()))
      return std::string(command) + ": on '" + f.interface() + "' is not an interface name";
    out.bound_to = interfaces.find(f.interface()).value_or(engine::kNoIface);
  }
  out.port = f.port();
  out.proto = f.proto();
  return {};
}

void set_endpoint(StateEndpoint* ep, engine::Family family, const engine::IpAddress& a, uint16_t port) {
  ep->set_address(engine::to_string(family, a));
  ep->set_port(port);
}

void fill_queue(const QueueCounters& q, QueueStats* out) {
  out->set_queue(q.queue);
  out->set_packets(q.packets);
  out->set_bytes(q.bytes);
  out->set_drops(q.drops);
  out->set_overruns(q.overruns);
  out->set_uninspected(q.uninspected);
  out->set_verdict_errors(q.verdict_errors);
  out->set_max_len(q.max_len);
  out->set_rcvbuf_bytes(q.rcvbuf_bytes);
}

// A counted rule's place and counters: a filter rule (RuleInfo), a translation or a scrub rule.
template <typename Info>
void fill_counted(const RuleCounters& r, Info* out) {
  out->set_number(r.number);
  out->set_text(r.text);
  out->set_location(r.location);
  out->set_evaluations(r.evaluations);
  out->set_packets(r.packets);
  out->set_bytes(r.bytes);
  out->set_states_current(r.states_current);
  out->set_states_created(r.states_created);
}

void fill_rule(const RuleCounters& r, RuleInfo* out) {
  fill_counted(r, out);
  out->set_anchor(r.anchor);
  out->set_label(r.label);
}

}  // namespace

ControlService::ControlService(const Config& config, engine::Engine& engine, Clock now)
    : config_(config),
      engine_(engine),
      now_(std::move(now)),
      state_limit_(config.engine.state_limit),
      fail_open_(config.queue.fail_open) {}

namespace {

// Whether `path` is the anchor `anchor` or one within it.
bool within_anchor(std::string_view path, std::string_view anchor) {
  return path.starts_with(anchor) &&
         (path.size() == anchor.size() || (path[anchor.size()] == '/' && !anchor.empty()));
}

// The table named `name` in a rule file, or its tables' end().
template <typename File>
auto find_table(File& file, std::string_view name) {
  return std::find_if(file.tables.begin(), file.tables.end(),
                      [name](const engine::rules::Table& t) { return t.name == name; });
}

// pfctl -f's rule for tables: one the new file defines without a list or a file of entries keeps
// what the running one holds (an overload table's offenders, a feed's last list), const or not, as
// pf's commit of a table defined without addresses keeps its entries; the others are set to the
// file's.
void keep_unlisted_tables(const engine::rules::RuleFile& running, engine::rules::RuleFile& next) {
  for (engine::rules::Table& table : next.tables) {
    if (table.lists_entries) continue;
    const auto old = find_table(running, table.name);
    if (old == running.tables.end()) continue;
    table.entries = old->entries;
    table.negated_entries = old->negated_entries;
  }
}

}  // namespace

ControlService::LoadResult ControlService::load_rules(const std::string& path_in) {
  LoadResult result;
  const std::string path =
      path_in.empty() ? (rules_file_.empty() ? config_.rules.file : rules_file_) : path_in;
  auto parsed = engine::rules::parse_rules_file(path);
  if (auto* error = std::get_if<engine::rules::RuleError>(&parsed)) {
    ++reload_failures_;
    result.error = error->to_string();
    return result;
  }
  auto& file = std::get<engine::rules::RuleFile>(parsed);
  const std::vector<std::string> placed = place_loaded_anchors(file);
  engine::rules::InterfaceAddresses addresses;
  if (std::string error = read_interface_addresses(addresses); !error.empty()) {
    ++reload_failures_;
    result.error = path + ": " + error;
    return result;
  }
  std::vector<engine::rules::RuleError> notices;
  if (auto error = engine::rules::resolve_interfaces(file, addresses, &notices)) {
    ++reload_failures_;
    result.error = error->to_string();
    return result;
  }
  engine::rules::tag_notices(file, notices);
  if (loaded_) keep_unlisted_tables(*loaded_, file);
  // As pfctl -f: the main rules and the anchors the file gives are loaded anew, their counters at
  // zero, unless the file says `set keepcounters`, when every rule written alike keeps its own;
  // the rules loaded into the anchors it only calls stay as they were, counters and all.
  const auto keeps_counters = [&placed, keep_all = file.settings.keep_counters](std::string_view anchor) {
    return keep_all || std::any_of(placed.begin(), placed.end(), [anchor](const std::string& loaded) {
             return within_anchor(anchor, loaded);
           });
  };
  if (std::string error = publish(file, loaded_ ? engine_.rules().get() : nullptr, keeps_counters, &notices);
      !error.empty()) {
    ++reload_failures_;
    result.error = std::move(error);
    return result;
  }
  result.rule_count = static_cast<uint32_t>(file.filter_rules.size());
  for (const auto& notice : notices) result.warnings.push_back(notice.to_string());
  notices_ = result.warnings;
  loaded_ = std::move(file);
  stamp_tables();
  rules_file_ = path;
  rules_loaded_.store(true, std::memory_order_release);
  rules_loaded_unix_ms_ = unix_ms_now();
  ++reloads_;
  result.ok = true;
  return result;
}

ControlService::RefreshResult ControlService::refresh_interface_addresses() {
  RefreshResult result;
  if (!loaded_ || !interface_addresses_) return result;
  engine::rules::InterfaceAddresses addresses;
  if (std::string error = read_interface_addresses(addresses); !error.empty()) {
    result.error = std::move(error);
    return result;
  }
  engine::rules::RuleFile edited = *loaded_;
  result.changed = engine::rules::refresh_interface_tables(edited, addresses);
  result.broadcasts_changed = engine::rules::refresh_local_broadcasts(edited, addresses);
  if (result.changed.empty() && !result.broadcasts_changed) return result;
  if (std::string error = publish(edited, engine_.rules().get()); !error.empty()) {
    result.error = std::move(error);
    result.changed.clear();
    result.broadcasts_changed = false;
    return result;
  }
  loaded_ = std::move(edited);
  stamp_tables();
  return result;
}

std::string ControlService::read_interface_addresses(engine::rules::InterfaceAddresses& out) const {
  if (!interface_addresses_) return {};
  try {
    out = interface_addresses_();
  } catch (const std::exception& e) {
    return std::string("cannot read the interfaces' addresses: ") + e.what();
  }
  return {};
}

std::string ControlService::publish(const engine::rules::RuleFile& file,
                                    const engine::rules::RuleSet* counters_from,
                                    const std::function<bool(std::string_view anchor)>& keeps_counters,
                                    std::vector<engine::rules::RuleError>* notices) {
  auto compiled = engine::rules::compile(file, engine_.interfaces(), counters_from, keeps_counters, notices);
  if (auto* error = std::get_if<engine::rules::RuleError>(&compiled)) return error->to_string();
  auto rules = std::get<std::shared_ptr<const engine::rules::RuleSet>>(std::move(compiled));
  const bool translating = rules->has_translations() && prerouting_hook_.has_value();
  if (translating && !*prerouting_hook_ && !fit_hooks_) {
    return file.file +
           ": translation rules (nat, rdr, binat) need the pre-routing hook, which is installed at "
           "start: restart pairwalld to use them";
  }
  // pf's DIOCSETLIMIT refuses a limit below the states in use (EBUSY), and pfctl then loads
  // nothing. Taken, it would refuse every new state until the table drained, and a limit under
  // five sixths of the states would put the adaptive timeouts' end (120 % of it unless set) below
  // the table's size: every state would go at the next expiry pass. Only a lowered limit is
  // refused: a full table's count runs past its limit for as long as a refused insert takes.
  const uint32_t state_limit = state_limit_.value_or(rules->state_limit());
  if (const std::size_t held = engine_.states().size();
      held > state_limit && state_limit < engine_.states().limit()) {
    const std::string limit = state_limit_ ? "[engine] state_limit " + std::to_string(state_limit)
                                           : "'set limit states " + std::to_string(state_limit) + "'";
    return file.file + ": " + limit + " is below the " + std::to_string(held) +
           " states the table holds: raise it, or kill states first";
  }
  // The same for source nodes: below those held, every new connection from a new source that a
  // source-tracking rule would pass was refused until enough of them had gone.
  const uint32_t source_limit = rules->source_node_limit();
  if (const std::size_t held = engine_.sources().size();
      held > source_limit && source_limit < engine_.sources().limit()) {
    return file.file + ": 'set limit src-nodes " + std::to_string(source_limit) + "' is below the " +
           std::to_string(held) + " source nodes in use: raise it, or kill their states first";
  }
  // Last, as it changes the host: a set refused above leaves the hooks as they were.
  if (translating && fit_hooks_) {
    try {
      fit_hooks_(file);
    } catch (const std::exception& e) {
      return file.file + ": translation rules (nat, rdr, binat) need the pre-routing hook: " + e.what();
    }
    prerouting_hook_ = true;
  }
  engine_.load_rules(std::move(rules), state_limit_);
  return {};
}

bool ControlService::handle_at_once(const Request& request, Response& response) {
  switch (request.command_case()) {
    case Request::kHealth:
    case Request::kFailoverStatus:
    case Request::kFailoverDemote:
    case Request::kFailoverPromote:
    case Request::kFailoverSetRole:
      handle(request, response);
      return true;
    default:
      return false;
  }
}

void ControlService::handle(const Request& request, Response& response) {
  response.Clear();
  response.set_version(kControlProtocolVersion);
  if (request.version() > kControlProtocolVersion) {
    response.set_error("unsupported control protocol version " + std::to_string(request.version()) +
                       " (this daemon speaks " + std::to_string(kControlProtocolVersion) + ")");
    return;
  }
  std::string error;
  switch (request.command_case()) {
    case Request::kStatus:
      status(response.mutable_status());
      break;
    case Request::kRulesLoad:
    case Request::kReload: {
      if (request.command_case() == Request::kReload && !reload_) {
        error = "this daemon cannot reload its config";
        break;
      }
      const auto result =
          request.command_case() == Request::kReload ? reload_() : load_rules(request.rules_load().path());
      if (!result.ok) {
        error = result.error;
        break;
      }
      auto* loaded = response.mutable_rules_loaded();
      loaded->set_path(rules_file_);
      loaded->set_rule_count(result.rule_count);
      loaded->set_states_kept(engine_.states().size());
      for (const std::string& warning : result.warnings) loaded->add_warnings(warning);
      break;
    }
    case Request::kRulesShow:
      error = rules_show(request.rules_show(), response.mutable_rules());
      break;
    case Request::kStates:
      error = states(request.states(), response.mutable_states());
      break;
    case Request::kStats:
      stats(response.mutable_stats());
      break;
    case Request::kRulesZero:
      error = zero_rules(request.rules_zero(), response.mutable_rules_zeroed());
      break;
    case Request::kFlushStates:
      response.mutable_flushed()->set_states(engine_.flush_states());
      break;
    case Request::kKillStates:
      error = kill_states(request.kill_states(), response.mutable_killed());
      break;
    case Request::kTables:
      error = tables(request.tables(), response.mutable_tables());
      break;
    case Request::kTableEdit:
      error = edit_table(request.table_edit(), response.mutable_tables());
      break;
    case Request::kSources:
      sources(request.sources(), response.mutable_sources());
      break;
    case Request::kKillSources:
      error = kill_sources(request.kill_sources(), response.mutable_sources_killed());
      break;
    case Request::kAnchors:
      anchors(response.mutable_anchors());
      break;
    case Request::kAnchorLoad:
      error = load_anchor(request.anchor_load(), response.mutable_anchors());
      break;
    case Request::kSyncResync:
      if (!sync_) {
        error = "sync is not configured (no [sync] section in " + config_.file + ")";
        break;
      }
      error = sync_->request_resync();
      if (!error.empty()) break;
      [[fallthrough]];  // answered with the status
    case Request::kSyncStatus: {
      auto* s = response.mutable_sync_status();
      if (sync_) {
        sync_->fill_status(s);
        s->set_enabled(true);
      } else {
        s->set_enabled(false);
      }
      break;
    }
    case Request::kFailoverStatus:
    case Request::kFailoverDemote:
    case Request::kFailoverPromote:
    case Request::kFailoverSetRole: {
      if (!failover_) {
        if (request.command_case() == Request::kFailoverStatus) {
          response.mutable_failover_status()->set_enabled(false);
        } else {
          error = "failover is not configured (no [failover] section in " + config_.file + ")";
        }
        break;
      }
      if (request.command_case() == Request::kFailoverDemote) {
        error = failover_->demote(request.failover_demote().amount());
      } else if (request.command_case() == Request::kFailoverPromote) {
        error = failover_->promote(request.failover_promote().amount());
      } else if (request.command_case() == Request::kFailoverSetRole) {
        error = failover_->set_role(request.failover_set_role().role());
      }
      if (error.empty()) {
        auto* s = response.mutable_failover_status();
        failover_->fill_status(s);
        s->set_enabled(true);
      }
      break;
    }
    case Request::kHealth:
      health(response.mutable_health());
      break;
    case Request::kSettings:
      settings(response.mutable_settings());
      break;
    case Request::COMMAND_NOT_SET:
      error = "empty request: no command (is pairwallctl older or newer than pairwalld?)";
      break;
  }
  if (!error.empty()) {
    response.clear_payload();
    response.set_error(error);
    return;
  }
  response.set_ok(true);
}

void ControlService::status(Status* out) const {
  const auto snap = snapshot();
  out->set_node_id(config_.node.id);
  out->set_node_name(config_.node.name);
  out->set_version(PAIRWALL_VERSION);
  out->set_pid(static_cast<uint32_t>(getpid()));
  out->set_uptime_ms(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_)
          .count()));
  out->set_rules_file(rules_file_);
  out->set_rules_loaded_unix_ms(static_cast<uint64_t>(rules_loaded_unix_ms_));
  out->set_rule_count(static_cast<uint32_t>(snap.rules.size()));
  out->set_rule_reloads(reloads_);
  out->set_rule_reload_failures(reload_failures_);
  out->set_rules_digest(snap.rules_digest);
  out->set_states(snap.states);
  out->set_state_limit(snap.state_limit);
  for (const auto& q : snap.queues) fill_queue(q, out->add_queues());
  out->set_packets(snap.packets);
  out->set_bytes(snap.bytes);
  out->set_drops(snap.drops());
  out->set_fail_open(fail_open_);
  out->set_prerouting_hook(prerouting_hook_.value_or(false));
  for (const std::string& match : prerouting_matches_) out->add_prerouting_matches(match);
}

std::string ControlService::unknown_anchor(const std::string& command, const std::string& anchor) const {
  if (anchor.empty()) return {};
  const auto& anchors = engine_.rules()->anchors();
  if (std::any_of(anchors.begin(), anchors.end(), [&](const auto& a) { return a.path == anchor; })) return {};
  return command + ": no anchor \"" + anchor + "\" in " + rules_file_;
}

std::string ControlService::zero_rules(const RulesZero& request, RulesZeroed* out) {
  if (std::string error = unknown_anchor("rules zero", request.anchor()); !error.empty()) return error;
  out->set_rules(static_cast<uint32_t>(engine_.zero_rule_counters(request.anchor())));
  return {};
}

std::string ControlService::rules_show(const RulesShow& request, RuleList* out) const {
  out->set_rules_file(rules_file_);
  const auto current = engine_.rules();
  const auto snap = snapshot();
  // With an anchor named, what stands in it: its rules and the anchors within it, theirs too.
  const std::string& only = request.anchor();
  if (std::string error = unknown_anchor("rules", only); !error.empty()) return error;
  auto shown = [&](const std::string& anchor) { return engine::rules::in_anchor(anchor, only); };
  engine::rules::list_in_file_order(
      current->anchors(), snap.rules.size(),
      [&](const engine::rules::AnchorListing& a) {
        if (!shown(a.parent)) return;
        auto* info = out->add_rules();
        info->set_number(a.number);
        info->set_anchor(a.parent);
        info->set_calls_anchor(a.path);
        info->set_text(a.text);
        info->set_location(a.location.file_and_line());
      },
      [&](std::size_t i) {
        if (shown(snap.rules[i].anchor)) fill_rule(snap.rules[i], out->add_rules());
      });
  if (only.empty()) {
    for (const auto& t : snap.translations) fill_counted(t, out->add_translations());
    for (const auto& s : snap.scrubs) fill_counted(s, out->add_scrubs());
  }
  return {};
}

std::string ControlService::kill_states(const KillStates& request, Killed* out) {
  StateMatch match;
  if (std::string error = parse_state_filter(request.filter(), engine_.interfaces(), "states kill", match);
      !error.empty())
    return error;
  if (!match.names_something())
    return "states kill: name an address, prefix, port, protocol, id, label, from, to or on (every state: "
           "flush states)";
  out->set_states(engine_.kill_states(match));
  return {};
}

namespace {

void fill_table(const engine::rules::Table& t, bool with_entries, TableInfo* out) {
  out->set_name(t.name);
  out->set_count(static_cast<uint32_t>(t.entry_count()));
  out->set_is_const(t.is_const);
  out->set_counters(t.counters);
  if (!with_entries) return;
  for (const auto& p : t.entries) out->add_entries(engine::to_string(p));
  for (const auto& p : t.negated_entries) out->add_entries("!" + engine::to_string(p));
}

// A table's entries as a set, so that an edit of many entries (a feed's list) costs n log n.
std::set<engine::TableEntry> entry_set(const engine::rules::Table& t) {
  std::set<engine::TableEntry> out;
  for (const auto& p : t.entries) out.insert({false, p});
  for (const auto& p : t.negated_entries) out.insert({true, p});
  return out;
}

// Sets `t` to `wanted`, each prefix once, the first way it is listed, as a table's definition takes
// them (pfctl -T replace); returns what it holds then.
std::set<engine::TableEntry> replace_entries(engine::rules::Table& t,
                                             std::span<const engine::TableEntry> wanted) {
  t.entries.clear();
  t.negated_entries.clear();
  std::set<engine::TableEntry> after;
  std::set<engine::IpPrefix> listed;
  for (const engine::TableEntry& e : wanted) {
    if (!listed.insert(e.prefix).second) continue;
    after.insert(e);
    (e.negated ? t.negated_entries : t.entries).push_back(e.prefix);
  }
  return after;
}

}  // namespace

std::string ControlService::tables(const TablesRequest& request, TableList* out) const {
  if (!loaded_) return "tables: no rule set loaded";
  if (request.test_size() > 0) return test_table(request, out);
  if (request.name().empty()) out->set_entry_limit(loaded_->settings.table_entry_limit());
  for (const auto& t : loaded_->tables) {
    if (!request.name().empty() && t.name != request.name()) continue;
    TableInfo* info = out->add_tables();
    fill_table(t, !request.name().empty(), info);
    info->set_shared(shared_.contains(t.name));
    if (!request.name().empty() && request.verbose()) fill_entry_stats(t, info);
  }
  if (!request.name().empty() && out->tables_size() == 0)
    return "tables: no table <" + request.name() + "> in " + rules_file_;
  return {};
}

void ControlService::fill_entry_stats(const engine::rules::Table& t, TableInfo* out) const {
  const engine::rules::TableCounters* counted = engine_.rules()->table_counters(t.name);
  const auto stamps = table_added_.find(t.name);
  const engine::Millis now = now_();
  const auto fill = [&](bool negated, const engine::IpPrefix& p) {
    TableEntryStats* stats = out->add_entry_stats();
    if (stamps != table_added_.end()) {
      if (const auto at = stamps->second.find({negated, p}); at != stamps->second.end())
        stats->set_cleared_seconds_ago(
            static_cast<uint64_t>(std::max<int64_t>(0, (now - at->second).count())) / 1000);
    }
    const engine::rules::EntryCounters* c = counted != nullptr ? counted->listed({negated, p}) : nullptr;
    if (c == nullptr) return;
    using engine::rules::CountedAs;
    const auto packets = [c](CountedAs as) { return c->packets[static_cast<std::size_t>(as)].load(); };
    const auto bytes = [c](CountedAs as) { return c->bytes[static_cast<std::size_t>(as)].load(); };
    stats->set_in_block_packets(packets(CountedAs::InBlock));
    stats->set_in_block_bytes(bytes(CountedAs::InBlock));
    stats->set_in_pass_packets(packets(CountedAs::InPass));
    stats->set_in_pass_bytes(bytes(CountedAs::InPass));
    stats->set_out_block_packets(packets(CountedAs::OutBlock));
    stats->set_out_block_bytes(bytes(CountedAs::OutBlock));
    stats->set_out_pass_packets(packets(CountedAs::OutPass));
    stats->set_out_pass_bytes(bytes(CountedAs::OutPass));
  };
  for (const auto& p : t.entries) fill(false, p);
  for (const auto& p : t.negated_entries) fill(true, p);
}

std::string ControlService::zero_table(const TableEdit& request, TableList* out) {
  const auto table = find_table(*loaded_, request.name());
  if (table == loaded_->tables.end()) return "tables: no table <" + request.name() + "> in " + rules_file_;
  std::set<engine::TableEntry> named;
  for (const std::string& text : request.addresses()) {
    const auto entry = engine::parse_table_entry(text);
    if (!entry) return "tables: '" + text + "' is not an address or prefix (e.g. 10.0.0.1, !10.0.0.0/8)";
    named.insert(*entry);
  }
  // As pfr_clr_astats: the entries named that the table holds, or all of them.
  const engine::rules::TableCounters* counted = engine_.rules()->table_counters(table->name);
  auto& stamps = table_added_[table->name];
  const engine::Millis now = now_();
  uint32_t zeroed = 0;
  for (const engine::TableEntry& held : entry_set(*table)) {
    if (!named.empty() && !named.contains(held)) continue;
    if (engine::rules::EntryCounters* c = counted != nullptr ? counted->listed(held) : nullptr) c->zero();
    stamps[held] = now;
    ++zeroed;
  }
  fill_table(*table, true, out->add_tables());
  out->set_zeroed(zeroed);
  return {};
}

std::string ControlService::test_table(const TablesRequest& request, TableList* out) const {
  const auto table = find_table(*loaded_, request.name());
  if (table == loaded_->tables.end()) return "tables: no table <" + request.name() + "> in " + rules_file_;
  // The classifier's own reading of a table, so that the answer is what the rules see.
  const engine::rules::AddressTable membership(table->entries, table->negated_entries);
  for (const std::string& text : request.test()) {
    // A host, also written as a prefix (10.0.0.1/32), as pfr_tst_addrs refuses networks alone.
    const auto host = engine::parse_prefix(text);
    if (!host || host->length != (host->family == engine::Family::V4 ? 32 : 128))
      return "tables: '" + text + "' is not an address (e.g. 192.0.2.1, 2001:db8::1)";
    if (membership.contains(host->family, host->address)) out->add_matched(text);
  }
  out->set_tested(static_cast<uint32_t>(request.test_size()));
  fill_table(*table, false, out->add_tables());
  return {};
}

std::string ControlService::edit_table(const TableEdit& request, TableList* out) {
  if (!loaded_) return "tables: no rule set loaded";
  // proto3 keeps an operation added after this daemon as its number: refused, not guessed at.
  if (!TableEdit::Op_IsValid(request.op())) {
    return "tables: unknown operation " + std::to_string(request.op()) +
           " (is pairwallctl newer than pairwalld?)";
  }
  // Counters only: a const table's too, as pf's, and without a recompile.
  if (request.op() == TableEdit::ZERO) return zero_table(request, out);
  engine::rules::RuleFile edited = *loaded_;
  auto table = find_table(edited, request.name());
  if (table == edited.tables.end()) return "tables: no table <" + request.name() + "> in " + rules_file_;
  if (table->is_const) return "tables: <" + request.name() + "> is const: change it in " + rules_file_;
  std::vector<engine::TableEntry> wanted;
  wanted.reserve(static_cast<std::size_t>(request.addresses_size()));
  for (const std::string& text : request.addresses()) {
    const auto entry = engine::parse_table_entry(text);
    if (!entry) {
      if (const std::string network = engine::table_entry_network(text); !network.empty())
        return "tables: host bits set in '" + text + "': did you mean " + network + "?";
      return "tables: '" + text + "' is not an address or prefix (e.g. 10.0.0.1, !10.0.0.0/8)";
    }
    wanted.push_back(*entry);
  }
  if ((request.op() == TableEdit::FLUSH || request.op() == TableEdit::EXPIRE) && !wanted.empty())
    return std::string("tables: ") + (request.op() == TableEdit::FLUSH ? "flush" : "expire") +
           " takes no addresses";
  uint32_t added = 0;
  uint32_t deleted = 0;
  uint32_t changed = 0;  // an entry kept with its negation flipped (pfr_set_addrs' ADDR_CHANGE)
  if (request.op() == TableEdit::EXPIRE) {
    deleted = expire_table(*table, request.seconds());
  } else if (request.op() == TableEdit::FLUSH || request.op() == TableEdit::REPLACE) {
    // Counted against what the table held, so that a feed's replace reports what changed.
    const std::set<engine::TableEntry> before = entry_set(*table);
    const std::set<engine::TableEntry> after = replace_entries(*table, wanted);
    for (const engine::TableEntry& e : after) {
      if (before.contains(e)) continue;
      (before.contains({!e.negated, e.prefix}) ? changed : added) += 1;
    }
    deleted = static_cast<uint32_t>(before.size() - (after.size() - added));
  } else if (request.op() == TableEdit::ADD) {
    // As pf's pfr_add_addrs: a prefix the table holds is not added again, nor negated the other
    // way (pfctl's "conflict"), which would turn the entry into its opposite.
    std::set<engine::IpPrefix> present(table->entries.begin(), table->entries.end());
    present.insert(table->negated_entries.begin(), table->negated_entries.end());
    for (const engine::TableEntry& e : wanted) {
      if (!present.insert(e.prefix).second) continue;
      (e.negated ? table->negated_entries : table->entries).push_back(e.prefix);
      ++added;
    }
  } else {
    const std::set<engine::TableEntry> removed(wanted.begin(), wanted.end());
    for (const bool negated : {false, true}) {
      auto& list = negated ? table->negated_entries : table->entries;
      const auto kept = std::remove_if(list.begin(), list.end(), [&](const engine::IpPrefix& p) {
        return removed.contains({negated, p});
      });
      deleted += static_cast<uint32_t>(list.end() - kept);
      list.erase(kept, list.end());
    }
  }
  if (added != 0 || deleted != 0 || changed != 0) {
    if (std::string error = publish(edited, engine_.rules().get()); !error.empty()) return "tables: " + error;
  }
  fill_table(*table, true, out->add_tables());
  out->set_added(added);
  out->set_deleted(deleted);
  out->set_changed(changed);
  loaded_ = std::move(edited);
  stamp_tables();
  return {};
}

namespace {

void fill_anchor(const engine::rules::RuleFile& file, const engine::rules::Anchor& a, AnchorInfo* out) {
  out->set_name(a.path);
  out->set_terms(engine::rules::anchor_terms_text(a));
  out->set_rules(static_cast<uint32_t>(engine::rules::anchor_rule_count(file, a.path)));
  out->set_from_file(a.file_defines_rules);
  out->set_location(a.location.file_and_line());
}

}  // namespace

void ControlService::anchors(AnchorList* out) const {
  if (!loaded_) return;
  for (const auto& a : loaded_->anchors) fill_anchor(*loaded_, a, out->add_anchors());
}

std::string ControlService::load_anchor(const AnchorLoad& request, AnchorList* out) {
  if (!loaded_) return "anchors: no rule set loaded";
  const std::string& name = request.name();
  engine::rules::RuleFile edited = *loaded_;
  if (engine::rules::find_anchor(edited, name) == nullptr) {
    return "anchors: no anchor \"" + name + "\" in " + rules_file_ + ": declare it there with anchor \"" +
           name + "\"";
  }
  engine::rules::RuleFile content;
  if (!request.flush()) {
    auto parsed = !request.has_text() ? engine::rules::parse_anchor_file(request.path())
                                      : engine::rules::parse_anchor_rules(request.text(), request.path());
    if (auto* error = std::get_if<engine::rules::RuleError>(&parsed)) return "anchors: " + error->to_string();
    content = std::get<engine::rules::RuleFile>(std::move(parsed));
  }
  engine::rules::set_anchor_rules(edited, name, content);
  engine::rules::InterfaceAddresses addresses;
  if (std::string error = read_interface_addresses(addresses); !error.empty()) return "anchors: " + error;
  std::vector<engine::rules::RuleError> notices;
  if (auto error = engine::rules::resolve_interfaces(edited, addresses, &notices))
    return "anchors: " + error->to_string();
  engine::rules::tag_notices(edited, notices);
  // As pfctl -a NAME -f: the anchor's rules (and those within it) start at zero, the others go on.
  const auto outside = [&name](std::string_view anchor) { return !within_anchor(anchor, name); };
  if (std::string error = publish(edited, engine_.rules().get(), outside, &notices); !error.empty())
    return "anchors: " + error;
  std::vector<std::string> now;
  for (const auto& notice : notices) now.push_back(notice.to_string());
  for (const std::string& warning : now) {
    if (std::find(notices_.begin(), notices_.end(), warning) == notices_.end()) out->add_warnings(warning);
  }
  notices_ = std::move(now);
  // The anchors within it are those the new rules declare: what was loaded into the old ones goes.
  std::erase_if(anchor_rules_, [&](const auto& entry) { return entry.first.starts_with(name + "/"); });
  anchor_rules_[name] = std::move(content);
  loaded_ = std::move(edited);
  stamp_tables();
  fill_anchor(*loaded_, *engine::rules::find_anchor(*loaded_, name), out->add_anchors());
  return {};
}

std::vector<std::string> ControlService::place_loaded_anchors(engine::rules::RuleFile& file) {
  std::vector<std::string> placed;
  // Placing an anchor's rules inserts the anchors within it right after it, which this loop then
  // visits in turn.
  for (std::size_t i = 0; i < file.anchors.size(); ++i) {
    if (file.anchors[i].file_defines_rules) continue;
    const auto loaded = anchor_rules_.find(file.anchors[i].path);
    if (loaded == anchor_rules_.end()) continue;
    engine::rules::set_anchor_rules(file, loaded->first, loaded->second);
    placed.push_back(loaded->first);
  }
  return placed;
}

uint32_t ControlService::expire_table(engine::rules::Table& table, uint32_t seconds) const {
  uint32_t deleted = 0;
  const auto stamps = table_added_.find(table.name);
  if (stamps == table_added_.end()) return deleted;
  const engine::Millis cutoff = now_() - engine::Millis{int64_t{seconds} * 1000};
  for (const bool negated : {false, true}) {
    auto& list = negated ? table.negated_entries : table.entries;
    const auto kept = std::remove_if(list.begin(), list.end(), [&](const engine::IpPrefix& p) {
      const auto at = stamps->second.find({negated, p});
      return at != stamps->second.end() && at->second <= cutoff;
    });
    deleted += static_cast<uint32_t>(list.end() - kept);
    list.erase(kept, list.end());
  }
  return deleted;
}

void ControlService::stamp_tables() {
  const engine::Millis now = now_();
  std::map<std::string, std::map<engine::TableEntry, engine::Millis>> next;
  for (const engine::rules::Table& table : loaded_->tables) {
    auto& stamps = next[table.name];
    const auto old = table_added_.find(table.name);
    auto stamp = [&](bool negated, const engine::IpPrefix& p) {
      const engine::TableEntry key{negated, p};
      engine::Millis at = now;
      if (old != table_added_.end()) {
        if (const auto it = old->second.find(key); it != old->second.end()) at = it->second;
      }
      stamps.emplace(key, at);
    };
    for (const auto& p : table.entries) stamp(false, p);
    for (const auto& p : table.negated_entries) stamp(true, p);
  }
  table_added_ = std::move(next);
  share_changed_tables();
}

void ControlService::share_tables(std::vector<std::string> names) {
  std::map<std::string, std::optional<std::set<engine::TableEntry>>> next;
  for (std::string& name : names) {
    auto& sent = next[name];
    if (const auto kept = shared_.find(name); kept != shared_.end()) {
      sent = std::move(kept->second);
    } else if (loaded_) {
      if (const auto table = find_table(*loaded_, name); table != loaded_->tables.end())
        sent = entry_set(*table);
    }
  }
  shared_ = std::move(next);
}

void ControlService::share_changed_tables() {
  if (shared_.empty() || !loaded_) return;
  const engine::Millis now = now_();
  for (auto& [name, sent] : shared_) {
    const auto table = find_table(*loaded_, name);
    if (table == loaded_->tables.end()) continue;
    std::set<engine::TableEntry> entries = entry_set(*table);
    // First seen (the first load, or a reload that defined it): what the peer holds of it is its
    // own business until either node changes it.
    if (!sent) {
      sent = std::move(entries);
      continue;
    }
    if (entries == *sent) continue;
    std::vector<engine::AgedTableEntry> aged;
    aged.reserve(entries.size());
    const auto& added = table_added_[name];
    for (const engine::TableEntry& e : entries) {
      const auto at = added.find(e);
      const engine::Millis age =
          at != added.end() ? std::max(now - at->second, engine::Millis{0}) : engine::Millis{0};
      aged.push_back({e, static_cast<uint32_t>(std::min<int64_t>(age.count() / 1000, UINT32_MAX))});
    }
    sent = std::move(entries);
    if (sync_) sync_->share_table(name, std::move(aged));
  }
}

ControlService::PeerTableResult ControlService::take_peer_table(
    const std::string& name, std::span<const engine::AgedTableEntry> entries) {
  PeerTableResult result = replace_with_peer_table(name, entries);
  if (!result.error.empty()) ++peer_tables_refused_;
  return result;
}

ControlService::PeerTableResult ControlService::replace_with_peer_table(
    const std::string& name, std::span<const engine::AgedTableEntry> entries) {
  PeerTableResult result;
  const auto shared = shared_.find(name);
  if (shared == shared_.end()) {
    result.error = "<" + name + "> is not in [sync] tables here";
    return result;
  }
  if (!loaded_) {
    result.error = "no rule set loaded";
    return result;
  }
  engine::rules::RuleFile edited = *loaded_;
  const auto table = find_table(edited, name);
  if (table == edited.tables.end()) {
    result.error = "no table <" + name + "> in " + rules_file_;
    return result;
  }
  if (table->is_const) {
    result.error = "<" + name + "> is const in " + rules_file_;
    return result;
  }
  const std::set<engine::TableEntry> before = entry_set(*table);
  std::vector<engine::TableEntry> wanted;
  wanted.reserve(entries.size());
  for (const engine::AgedTableEntry& e : entries) wanted.push_back(e.entry);
  const std::set<engine::TableEntry> after = replace_entries(*table, wanted);
  const uint64_t total = edited.table_entries();
  if (total > edited.settings.table_entry_limit()) {
    result.error = "the tables would hold " + std::to_string(total) + " entries, over the limit of " +
                   std::to_string(edited.settings.table_entry_limit()) + " (set limit table-entries)";
    return result;
  }
  for (const engine::TableEntry& e : after) result.added += before.contains(e) ? 0 : 1;
  for (const engine::TableEntry& e : before) result.deleted += after.contains(e) ? 0 : 1;
  if (result.added != 0 || result.deleted != 0) {
    if (std::string error = publish(edited, engine_.rules().get()); !error.empty()) {
      result.error = std::move(error);
      return result;
    }
    loaded_ = std::move(edited);
  }
  // What the peer holds is not news to it: noted before the change is, so that it is not sent back.
  shared->second = after;
  stamp_tables();
  // Dated as the peer dates them, so that `tables expire` takes the same entries on both nodes.
  const engine::Millis now = now_();
  auto& dates = table_added_[name];
  for (const engine::AgedTableEntry& e : entries) {
    if (const auto it = dates.find(e.entry); it != dates.end())
      it->second = now - engine::Millis{int64_t{e.age_s} * 1000};
  }
  return result;
}

void ControlService::render_metrics(MetricWriter& out) const {
  if (loaded_ && !loaded_->tables.empty()) {
    out.family("pairwall_table_entries", MetricWriter::Type::Gauge,
               "Entries in each table of the running rules, exceptions included.");
    for (const engine::rules::Table& t : loaded_->tables)
      out.sample({{"table", t.name}}, uint64_t{t.entry_count()});
    out.family("pairwall_table_entry_limit", MetricWriter::Type::Gauge,
               "Entries all tables may hold together (set limit table-entries).");
    out.sample(uint64_t{loaded_->settings.table_entry_limit()});
  }
  out.family("pairwall_source_overloads_refused_total", MetricWriter::Type::Counter,
             "Sources an overload could not add to its table: the rules with them added were refused "
             "(set limit table-entries).");
  out.sample(overloads_refused_);
  out.family("pairwall_shared_tables_refused_total", MetricWriter::Type::Counter,
             "Versions of a shared table the peer sent that this node did not take: not in its [sync] "
             "tables, absent from its rules, const, or over set limit table-entries.");
  out.sample(peer_tables_refused_);
  // `systemctl reload` succeeds once the unit's check passes; what only the running daemon can
  // refuse (a limit below what it holds, translation without the pre-routing hook) shows here.
  out.family("pairwall_rule_loads_refused_total", MetricWriter::Type::Counter,
             "Rule file loads (SIGHUP, rules load) refused; the running rules stayed.");
  out.sample(reload_failures_);
}

void ControlService::sources(const SourcesRequest& request, SourceList* out) const {
  const uint32_t limit = request.limit() != 0 ? request.limit() : kDefaultSourceListLimit;
  out->set_total(engine_.sources().size());
  out->set_limit(engine_.sources().limit());
  engine_.sources().for_each(now_(), [&](const engine::SourceView& v) {
    if (static_cast<uint32_t>(out->sources_size()) >= limit) return;
    SourceNode* n = out->add_sources();
    n->set_address(engine::to_string(v.family, v.address));
    n->set_rule(v.owner.rule);
    n->set_global(v.owner.id == nullptr);
    n->set_states(v.states);
    n->set_connections(v.connections);
    n->set_rate(v.rate);
    n->set_rate_seconds(v.rate_seconds);
  });
}

std::string ControlService::kill_sources(const KillSources& request, SourcesKilled* out) {
  std::optional<engine::IpPrefix> prefix;
  if (!request.address().empty()) {
    prefix = engine::parse_prefix(request.address());
    if (!prefix) {
      return "sources kill: '" + request.address() +
             "' is not an address or prefix (e.g. 10.0.0.1, 10.0.0.0/8)";
    }
  }
  const engine::Engine::SourcesKilled killed = engine_.kill_sources(
      [&prefix](const engine::SourceNode& n) { return !prefix || prefix->contains(n.family, n.address); });
  out->set_sources(killed.nodes);
  out->set_states(killed.states);
  return {};
}

ControlService::OverloadResult ControlService::apply_overloads(
    std::span<const engine::SourceOverload> overloads) {
  OverloadResult result;
  if (overloads.empty() || !loaded_) return result;
  engine::rules::RuleFile edited = *loaded_;
  // As pf's pfr_insert_kentry() for each offender, which fails only once the table-entries pool is
  // full: the sources that fit are added, the rest refused, rather than the whole batch.
  const uint64_t entry_limit = edited.settings.table_entry_limit();
  uint64_t entries = edited.table_entries();
  for (const engine::SourceOverload& o : overloads) {
    const std::string name(o.table.data());
    auto table = find_table(edited, name);
    if (table == edited.tables.end() || table->is_const) continue;
    const engine::IpPrefix host{o.family, o.address,
                                static_cast<uint8_t>(o.family == engine::Family::V4 ? 32 : 128)};
    // As pfr_insert_kentry: a prefix the table holds either way stays as it is, so that an
    // exception (`!ADDR`) is not joined by its opposite.
    if (std::find(table->entries.begin(), table->entries.end(), host) != table->entries.end() ||
        std::find(table->negated_entries.begin(), table->negated_entries.end(), host) !=
            table->negated_entries.end())
      continue;
    if (entries >= entry_limit) {
      ++result.refused;
      continue;
    }
    ++entries;
    table->entries.push_back(host);
    result.added.push_back(engine::to_string(o.family, o.address) + " to <" + name + "> (rule @" +
                           std::to_string(o.rule) + ")");
  }
  if (result.refused != 0) {
    result.error = "overload: the tables would hold " + std::to_string(entries + result.refused) +
                   " entries, over the limit of " + std::to_string(entry_limit) +
                   " (raise it with 'set limit table-entries N')";
    overloads_refused_ += result.refused;
  }
  if (!result.added.empty()) {
    if (std::string error = publish(edited, engine_.rules().get()); !error.empty()) {
      result.error = "overload: " + error;
      result.refused += result.added.size();
      overloads_refused_ += result.added.size();
      result.added.clear();
    } else {
      loaded_ = std::move(edited);
      stamp_tables();
    }
  }
  const bool flushing = std::any_of(overloads.begin(), overloads.end(), [](const engine::SourceOverload& o) {
    return o.flush != engine::rules::OverloadFlush::None;
  });
  if (flushing) {
    result.states_killed = engine_.kill_states([&](const engine::StateEntry& e) {
      const engine::StateKey& key = e.key(0);
      return std::any_of(overloads.begin(), overloads.end(), [&](const engine::SourceOverload& o) {
        return o.flush != engine::rules::OverloadFlush::None && key.family == o.family &&
               key.addr[0] == o.address &&
               (o.flush == engine::rules::OverloadFlush::Global ||
                (e.creator != nullptr && e.creator->stats.get() == o.owner));
      });
    });
  }
  return result;
}

std::string ControlService::states(const StatesRequest& request, StateList* out) const {
  StateMatch match;
  if (std::string error = parse_state_filter(request.filter(), engine_.interfaces(), "states", match);
      !error.empty())
    return error;
  const std::size_t total = engine_.states().size();
  out->set_total(total);
  if (request.count_only() && !match.names_something()) {
    out->set_matched(total);
    return {};
  }

  const std::size_t limit = request.limit() != 0 ? request.limit() : kDefaultStateListLimit;
  const engine::Millis now = now_();
  const auto current = engine_.rules();
  // pf_state_expires: past adaptive.start every timeout shrinks with the table's size, as the
  // expiry shrinks it (Engine::expire), and pfctl shows the time left so.
  const double scale = current->adaptive_timeouts().scale(total, engine_.states().limit());
  std::vector<StateCopy> copies;
  if (!request.count_only()) copies.reserve(std::min(limit, total + 64));
  uint64_t matched = 0;
  engine_.states().for_each([&](const engine::StateEntry& e) {
    if (!match(e)) return;
    ++matched;
    if (request.count_only() || copies.size() >= limit) return;
    StateCopy& c = copies.emplace_back();
    c.key[0] = e.key(0);
    c.key[1] = e.key(1);
    c.peer_state[0] = e.peer[0].state;
    c.peer_state[1] = e.peer[1].state;
    c.peer[0] = e.peer[0];
    c.peer[1] = e.peer[1];
    c.id = e.id;
    c.timeout = e.timeout;
    c.flags = e.flags;
    c.proxy = e.proxy;
    c.scrub_tcp = e.scrub_tcp;
    c.bound[0] = e.bound[0];
    c.bound[1] = e.bound[1];
    c.rule = e.rule;
    c.created = e.created;
    const engine::Millis timeout = engine::Engine::timeout_of(e, e.timeout, *current);
    c.expires_at = e.last_seen + (scale < 1.0 ? engine::Millis{static_cast<engine::Millis::rep>(
                                                    static_cast<double>(timeout.count()) * scale)}
                                              : timeout);
    c.packets[0] = e.packets[0];
    c.packets[1] = e.packets[1];
    c.bytes[0] = e.bytes[0];
    c.bytes[1] = e.bytes[1];
  });
  out->set_matched(matched);
  out->set_truncated(!request.count_only() && matched > copies.size());

  for (const auto& c : copies) {
    auto* s = out->add_states();
    const auto& k = c.key[0];
    s->set_creator(c.id.creator);
    s->set_id(c.id.counter);
    s->set_proto(k.proto);
    s->set_family(static_cast<uint32_t>(k.family));
    set_endpoint(s->mutable_src(), k.family, k.addr[0], k.port[0]);
    set_endpoint(s->mutable_dst(), k.family, k.addr[1], k.port[1]);
    if (k.link != engine::kNoIface) s->set_link(engine_.interfaces().name(k.link));
    if (c.flags & engine::stateflag::kTranslated) {
      const auto& w = c.key[1];
      set_endpoint(s->mutable_wire_src(), w.family, w.addr[0], w.port[0]);
      set_endpoint(s->mutable_wire_dst(), w.family, w.addr[1], w.port[1]);
    }
    const bool tcp = k.proto == 6;
    s->set_src_state(std::string(tcp ? tcp_state_name(c.peer_state[0]) : flow_state_name(c.peer_state[0])));
    s->set_dst_state(std::string(tcp ? tcp_state_name(c.peer_state[1]) : flow_state_name(c.peer_state[1])));
    s->set_age_ms(static_cast<uint64_t>(std::max<int64_t>(0, (now - c.created).count())));
    s->set_expires_in_ms(std::max<int64_t>(0, (c.expires_at - now).count()));
    s->set_packets_out(c.packets[0]);
    s->set_packets_in(c.packets[1]);
    s->set_bytes_out(c.bytes[0]);
    s->set_bytes_in(c.bytes[1]);
    s->set_rule(c.rule);
    s->set_from_peer((c.flags & engine::stateflag::kFromPeer) != 0);
    s->set_modulated((c.flags & engine::stateflag::kModulated) != 0);
    s->set_synproxy(std::string(engine::proxy_name(c.proxy)));
    s->set_scrub_tcp(c.scrub_tcp);
    if (c.bound[0] != engine::kNoIface) s->set_bound_in(engine_.interfaces().name(c.bound[0]));
    if (c.bound[1] != engine::kNoIface) s->set_bound_out(engine_.interfaces().name(c.bound[1]));
    s->set_timeout(std::string(engine::timeout_class_name(c.timeout)));
    if (tcp) {
      for (int i = 0; i < 2; ++i) {
        auto* w = i == 0 ? s->mutable_src_window() : s->mutable_dst_window();
        w->set_seqlo(c.peer[i].seqlo);
        w->set_seqhi(c.peer[i].seqhi);
        w->set_max_win(c.peer[i].max_win);
        w->set_wscale(c.peer[i].wscale);
      }
    }
  }
  return {};
}

void ControlService::stats(Stats* out) const {
  const auto snap = snapshot();
  for (std::size_t i = 0; i < engine::kReasonCount; ++i) {
    const auto reason = static_cast<engine::Reason>(i);
    auto* rc = out->add_reasons();
    rc->set_reason(std::string(engine::reason_name(reason)));
    rc->set_count(snap.reasons[i]);
    rc->set_pass(engine::is_pass(reason));
  }
  for (const auto& r : snap.rules) fill_rule(r, out->add_rules());
  for (const auto& q : snap.queues) fill_queue(q, out->add_queues());
  out->set_packets(snap.packets);
  out->set_bytes(snap.bytes);
  out->set_states(snap.states);
  out->set_state_limit(snap.state_limit);
  out->set_events_lost(snap.events_lost);
}

void ControlService::settings(Settings* out) const {
  const auto rules = engine_.rules();
  const engine::Timeouts& t = rules->timeouts();
  auto timeout = [out](std::string_view name, engine::Millis value) {
    auto* e = out->add_timeouts();
    e->set_name(std::string(name));
    e->set_seconds(static_cast<uint64_t>(value.count() / 1000));
  };
  for (std::size_t c = 0; c < engine::kTimeoutClassCount; ++c) {
    const auto cls = static_cast<engine::TimeoutClass>(c);
    timeout(engine::timeout_class_name(cls), t[cls]);
  }
  timeout(engine::kSourceTrackTimeoutName, t.source_track);
  const uint64_t states = engine_.states().size();
  const engine::AdaptiveTimeouts& adaptive = rules->adaptive_timeouts();
  // The table's limit, as the expiry's scaling reads it (Engine::expire).
  const uint64_t limit = engine_.states().limit();
  const uint64_t first = adaptive.first(limit);
  const uint64_t last = adaptive.last(limit);
  const bool scaling = last > first;
  out->set_adaptive_start(scaling ? static_cast<uint32_t>(std::min<uint64_t>(first, UINT32_MAX)) : 0);
  out->set_adaptive_end(scaling ? static_cast<uint32_t>(std::min<uint64_t>(last, UINT32_MAX)) : 0);
  out->set_timeout_scale(adaptive.scale(states, limit));
  out->set_states(states);
  // The limit the table holds to: [engine] state_limit's where it overrides the rule file's.
  out->set_state_limit(engine_.states().limit());
  out->set_source_node_limit(rules->source_node_limit());
  if (loaded_) {
    out->set_table_entry_limit(loaded_->settings.table_entry_limit());
    out->set_block_policy_return(loaded_->settings.block_policy_return);
    for (const std::string& name : loaded_->settings.skip_interfaces) out->add_skip_interfaces(name);
  }
}

void ControlService::health(Health* out) const {
  // Asked first, whatever the engine's health: failover notes when it was asked (keepalived's
  // vrrp_script asks every interval, so a long silence says keepalived is not running).
  std::optional<FailoverControl::HealthResult> failover_health;
  if (failover_) failover_health = failover_->healthy();
  if (!rules_loaded_.load(std::memory_order_acquire)) {
    out->set_healthy(false);
    out->set_reason("no rule set loaded");
    return;
  }
  if (health_probe_) {
    if (auto reason = health_probe_()) {
      out->set_healthy(false);
      out->set_reason(*reason);
      return;
    }
  }
  if (failover_health && !failover_health->healthy) {
    out->set_healthy(false);
    out->set_reason(failover_health->reason.empty() ? "failover reports unhealthy" : failover_health->reason);
    return;
  }
  out->set_healthy(true);
}

}  // namespace pairwall::control
