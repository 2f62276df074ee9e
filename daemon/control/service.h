// The control plane's commands, independent of the socket that carries them: one Request in, one
// Response out. Runs on the control thread; the packet workers are never stopped or locked
// globally (rules are swapped by pointer, states are read shard by shard).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/control/config.h"
#include "daemon/control/control_api.h"
#include "daemon/control/dataplane.h"
#include "daemon/control/metrics.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/rules/ast.h"
#include "daemon/engine/rules/interface_addresses.h"
#include "proto/control.pb.h"

namespace pairwall::control {

inline constexpr uint32_t kDefaultStateListLimit = 10000;
inline constexpr uint32_t kDefaultSourceListLimit = 10000;

class ControlService {
 public:
  using Clock = std::function<engine::Millis()>;

  // `now` must be the clock the packet workers pass to Engine::process_batch().
  ControlService(const Config& config, engine::Engine& engine, Clock now);

  void set_data_plane(const DataPlane* data_plane) { data_plane_ = data_plane; }
  void set_sync(SyncControl* sync) { sync_ = sync; }
  // The tables the pair shares ([sync] tables): from now on each change of one of them (an
  // overload, `tables add`, a reload's file) goes to the peer whole through the SyncControl, and the
  // peer's replace it (take_peer_table()). What they hold now is taken as what the peer has: nothing
  // is sent for it.
  void share_tables(std::vector<std::string> names);
  struct PeerTableResult {
    uint32_t added = 0;
    uint32_t deleted = 0;
    std::string error;  // why it was refused; the table kept as it was
  };
  // A shared table as the peer now holds it: its entries replace this node's (one recompile), each
  // dated as the peer dates it. Not sent back. Refused for a table not shared here, absent, const,
  // or one that would take the tables past `set limit table-entries`.
  PeerTableResult take_peer_table(const std::string& name, std::span<const engine::AgedTableEntry> entries);
  void set_failover(FailoverControl* failover) { failover_ = failover; }
  // The daemon's own health (e.g. a stuck packet worker): nullopt when healthy, else the reason.
  // Asked from any thread (handle_at_once()).
  void set_health_probe(std::function<std::optional<std::string>()> probe) {
    health_probe_ = std::move(probe);
  }

  // Whether the hooks queue packets before routing (io::HooksConfig::prerouting), where alone
  // destination translation can happen, and `fit`, which makes them serve a rule set's translation
  // rules (the pre-routing hook, and the packets not addressed to this node that the rules may
  // rewrite there), throwing what stopped it. Each rule set with translation rules is fitted
  // before it is published; without `fit`, one is refused while the hooks have no pre-routing
  // hook. Until told (the load at start) any rule set is taken.
  void set_prerouting_hook(bool installed, std::function<void(const engine::rules::RuleFile&)> fit = {}) {
    prerouting_hook_ = installed;
    fit_hooks_ = std::move(fit);
  }
  // What the pre-routing chain queues beyond this node's own addresses, as status lists it.
  void set_prerouting_matches(std::vector<std::string> matches) { prerouting_matches_ = std::move(matches); }
  // The running rules as parsed (table edits applied), for the hooks at start; null before a load.
  const engine::rules::RuleFile* running_rules() const { return loaded_ ? &*loaded_ : nullptr; }

  // The host's interfaces and addresses, asked at every load for rules that name interfaces in
  // address positions (`em0`, `em0:network`, `antispoof`). Unset: no interface is known, and such
  // rules are refused. May throw (a load error says why).
  void set_interface_addresses(std::function<engine::rules::InterfaceAddresses()> source) {
    interface_addresses_ = std::move(source);
  }

  // [engine] state_limit, which overrides the rule file's `set limit states` from the next load on
  // (nullopt: the file's). Starts as the config's; a reload sets what the config says now.
  void set_state_limit(std::optional<uint32_t> limit) { state_limit_ = limit; }
  std::optional<uint32_t> state_limit() const { return state_limit_; }
  // [queue] fail_open as it runs, for status: the config's, then a reload's.
  void set_fail_open(bool fail_open) { fail_open_ = fail_open; }

  struct LoadResult {
    bool ok = false;
    std::string error;  // file:line:column: message
    uint32_t rule_count = 0;
    std::vector<std::string> warnings;  // file:line:column: warning: ..., of rules that loaded
  };
  // Parses and compiles `path` aside and publishes it; on failure (including translation rules
  // without the pre-routing hook) the running set stays. States survive either way. An empty path
  // reloads the file loaded last (`pairwallctl rules load` without a path); SIGHUP loads the
  // config's [rules] file, as a restart would.
  LoadResult load_rules(const std::string& path);

  // What the daemon does on SIGHUP (config read again, its rule file loaded, its keys taken), for
  // the Reload request, which answers once it is done: `systemctl reload` waits for the outcome
  // and fails with the reason. Unset, Reload is refused.
  void set_reload(std::function<LoadResult()> reload) { reload_ = std::move(reload); }

  void handle(const Request& request, Response& response);
  // handle() for the requests that read or set failover and health alone, which any thread may
  // ask (the failover service and the health probe are thread-safe): true when `request` was one.
  // The control socket answers them on its own thread, so that keepalived's health check and
  // notify script never wait for a rule compile on the control loop.
  bool handle_at_once(const Request& request, Response& response);

  struct RefreshResult {
    std::vector<std::string> changed;  // the interface tables whose addresses changed
    bool broadcasts_changed = false;   // the networks' broadcast addresses (no reject answers them)
    std::string error;                 // the addresses could not be read, or the rules were refused
  };
  // Reads the interfaces' addresses again and sets the tables the rules made of them (`em0`,
  // `em0:network`, `self`) to them: the running rules recompiled with states and counters kept,
  // when any changed.
  RefreshResult refresh_interface_addresses();

  struct OverloadResult {
    std::vector<std::string> added;  // one line per address added: "ADDR to <table> (rule @N)"
    std::size_t states_killed = 0;
    std::string error;        // sources past set limit table-entries, or the edited rule set refused
    std::size_t refused = 0;  // addresses not added for that
  };
  // Acts on the sources the workers found over a rule's max-src-conn or max-src-conn-rate where
  // the rule says `overload <table>`: adds each address to its table (one recompile for all, as
  // `tables add` would) and kills the states its `flush` names. A table that a reload removed or
  // made const since is passed over.
  OverloadResult apply_overloads(std::span<const engine::SourceOverload> overloads);

  CountersSnapshot snapshot() const { return take_snapshot(engine_, data_plane_); }
  // pairwall_table_entries (each table's size, so that an overload table's growth can alert), the
  // overloads refused, and the rule loads refused.
  void render_metrics(MetricWriter& out) const;
  const std::string& rules_file() const { return rules_file_; }

 private:
  void status(Status* out) const;
  std::string rules_show(const RulesShow& request, RuleList* out) const;
  std::string zero_rules(const RulesZero& request, RulesZeroed* out);
  // "COMMAND: no anchor ..." where the running rules lack a non-empty `anchor`, else "".
  std::string unknown_anchor(const std::string& command, const std::string& anchor) const;
  std::string states(const StatesRequest& request, StateList* out) const;
  std::string kill_states(const KillStates& request, Killed* out);
  std::string tables(const TablesRequest& request, TableList* out) const;
  void anchors(AnchorList* out) const;
  std::string load_anchor(const AnchorLoad& request, AnchorList* out);
  // Places the rules loaded into anchors (load_anchor) in a rule file parsed afresh, where the file
  // declares the anchor and does not give its rules itself. Returns the anchors it placed.
  std::vector<std::string> place_loaded_anchors(engine::rules::RuleFile& file);
  void sources(const SourcesRequest& request, SourceList* out) const;
  std::string kill_sources(const KillSources& request, SourcesKilled* out);
  std::string test_table(const TablesRequest& request, TableList* out) const;
  std::string edit_table(const TableEdit& request, TableList* out);
  // `tables show NAME -v`: each entry's counters (none but the time for a table without
  // `counters`) and when they were cleared.
  void fill_entry_stats(const engine::rules::Table& table, TableInfo* out) const;
  // `tables zero`: clears the counters of the entries named (all without a name), and counts them
  // as come now, as pfctl -T zero does (what `tables expire` reads).
  std::string zero_table(const TableEdit& request, TableList* out);
  // `tables expire`: removes the entries of `table` that came `seconds` ago or earlier; how many.
  uint32_t expire_table(engine::rules::Table& table, uint32_t seconds) const;
  // Notes when each entry of the loaded tables came: now for new ones, unchanged for the others;
  // and sends the peer the shared tables that changed. After every change of the loaded tables.
  void stamp_tables();
  // The shared tables whose entries differ from what the peer was last sent or sent itself.
  void share_changed_tables();
  // take_peer_table() but for counting its refusals.
  PeerTableResult replace_with_peer_table(const std::string& name,
                                          std::span<const engine::AgedTableEntry> entries);
  // The addresses rules naming interfaces resolve to (none without a source); empty, or why not.
  std::string read_interface_addresses(engine::rules::InterfaceAddresses& out) const;
  // Compiles `file` and publishes it; empty, or why it was refused. The rules keep the counters of
  // those of `counters_from` written alike, in the anchors `keeps_counters` names (all without it).
  // `notices`, where given, gets the compiler's warnings (rules that never decide).
  std::string publish(const engine::rules::RuleFile& file, const engine::rules::RuleSet* counters_from,
                      const std::function<bool(std::string_view anchor)>& keeps_counters = {},
                      std::vector<engine::rules::RuleError>* notices = nullptr);
  void stats(Stats* out) const;
  void settings(Settings* out) const;
  void health(Health* out) const;

  const Config& config_;
  engine::Engine& engine_;
  Clock now_;
  const DataPlane* data_plane_ = nullptr;
  SyncControl* sync_ = nullptr;
  FailoverControl* failover_ = nullptr;
  std::function<std::optional<std::string>()> health_probe_;
  std::function<engine::rules::InterfaceAddresses()> interface_addresses_;
  std::function<LoadResult()> reload_;
  std::optional<uint32_t> state_limit_;
  bool fail_open_;
  std::optional<bool> prerouting_hook_;  // unknown until the hooks are installed
  std::function<void(const engine::rules::RuleFile&)> fit_hooks_;
  std::vector<std::string> prerouting_matches_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::string rules_file_;
  std::atomic<bool> rules_loaded_{false};          // rules_file_ set: read by health() on any thread
  std::optional<engine::rules::RuleFile> loaded_;  // the running rules as parsed, table edits applied
  // The warnings of the running rules, as their last load (of the file or an anchor) found them: an
  // anchor load reports those it brought.
  std::vector<std::string> notices_;
  // The rules loaded into anchors, by path, as parsed (parse_anchor_rules): a reload places them again.
  std::map<std::string, engine::rules::RuleFile> anchor_rules_;
  // When each table entry came (loaded, added, or an overload's), by table: what `tables expire`
  // reads, as pf's table entries keep the time they were added.
  std::map<std::string, std::map<engine::TableEntry, engine::Millis>> table_added_;
  // The tables the pair shares, by name: the entries last sent to the peer or taken from it (none
  // until the table is first seen in the loaded rules).
  std::map<std::string, std::optional<std::set<engine::TableEntry>>> shared_;
  uint64_t overloads_refused_ = 0;
  uint64_t peer_tables_refused_ = 0;  // versions of shared tables from the peer not taken
  int64_t rules_loaded_unix_ms_ = 0;
  uint64_t reloads_ = 0;
  uint64_t reload_failures_ = 0;
};

}  // namespace pairwall::control
