#include "daemon/node.h"

#include <pthread.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <array>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "daemon/component_config.h"
#include "daemon/control/boot_epoch.h"
#include "daemon/control/dataplane.h"
#include "daemon/control/metrics.h"
#include "daemon/control/metrics_server.h"
#include "daemon/control/progress_watch.h"
#include "daemon/control/server.h"
#include "daemon/control/service.h"
#include "daemon/engine/engine.h"
#include "daemon/io/address_watch.h"
#include "daemon/io/flow_export.h"
#include "daemon/io/hooks.h"
#include "daemon/io/kernel_queue_stats.h"
#include "daemon/io/nfqueue.h"
#include "daemon/io/pcaplog.h"
#include "daemon/io/prerouting_matches.h"
#include "daemon/sync/sync_config.h"
#include "daemon/sync/sync_service.h"
#include "failover/failover_config.h"
#include "failover/failover_metrics.h"
#include "failover/failover_service.h"

namespace pairwall::node {
namespace {

namespace asio = boost::asio;
using std::chrono::steady_clock;

// A worker with packets waiting in its kernel queue and no progress for this long is stuck: the
// watchdog stops and `health` says so.
constexpr auto kStuckAfter = std::chrono::seconds(3);

// The settings a reload takes (Node::reload()); it warns of the others that changed.
constexpr control::Setting kTakenByReload[] = {
    {"rules", "file"},
    {"sync", "key_file"},
    {"sync", "accept_key_file"},
    {"failover", "key_file"},
    {"failover", "accept_key_file"},
    {"sync", "defer"},
    {"sync", "defer_timeout_ms"},
    {"log", "level"},
    {"log", "pcap_file"},
    {"log", "pcap_rotate_bytes"},
    {"log", "pcap_keep"},
    {"queue", "fail_open"},
    {"queue", "hooks"},
    {"queue", "exclude_interfaces"},
    {"queue", "gso"},
    {"queue", "maxlen"},
    {"queue", "rcvbuf_bytes"},
    {"engine", "state_limit"},
    {"metrics", "listen"},
    {"pflow", "collector"},
    {"pflow", "source"},
    {"pflow", "observation_domain"},
};
// And the sync link's, where sync runs (SyncService::move_link), as pfsync takes a new syncdev or
// syncpeer on a running interface.
constexpr control::Setting kTakenBySyncLink[] = {
    {"sync", "interface"}, {"sync", "address"}, {"sync", "peer"},
    {"sync", "group"},     {"sync", "port"},    {"sync", "ttl_security"},
};
// And the sync protocol's timing, limits, windows and datagram size there (SyncService::retune), and
// the tables the pair shares (ControlService::share_tables).
constexpr control::Setting kTakenBySyncTuning[] = {
    {"sync", "flush_interval_ms"},
    {"sync", "bulk_timeout_min_s"},
    {"sync", "pending_limit"},
    {"sync", "peer_node_id"},
    {"sync", "resend_window"},
    {"sync", "mtu"},
    {"sync", "tables"},
};
// And those the builtin election takes on a running group (FailoverService::reconfigure).
constexpr control::Setting kTakenByElection[] = {
    {"failover", "vhid"},           {"failover", "port"},
    {"failover", "group4"},         {"failover", "group6"},
    {"failover", "peers"},          {"failover", "advskew"},
    {"failover", "preempt"},        {"failover", "advbase_ms"},
    {"failover", "announce_count"}, {"failover", "announce_interval_ms"},
    {"failover", "vip_lease_s"},    {"failover", "vips"},
    {"failover", "notify"},         {"failover", "track_interfaces"},
};

engine::Millis monotonic_now() {
  // The clock the queue workers pass to Engine::process_batch() (nfqueue.h).
  return std::chrono::duration_cast<engine::Millis>(steady_clock::now().time_since_epoch());
}

void notify(const std::string& text) {
  sd_notify(0, text.c_str());
}

// What the hooks' pre-routing chain queues beyond this node, for `pairwallctl status`.
void show_prerouting_matches(control::ControlService& service, const io::HooksConfig& hooks) {
  std::vector<std::string> listed;
  for (const io::PreroutingMatch& m : hooks.prerouting_matches) listed.push_back(io::to_string(m));
  service.set_prerouting_matches(std::move(listed));
}

// The defer counters of every queue worker, added up.
struct DeferTotals {
  uint64_t held = 0;
  uint64_t holding = 0;
  uint64_t too_large = 0;
  uint64_t state_gone = 0;
  std::array<uint64_t, static_cast<std::size_t>(io::ReleaseCause::Count)> released{};
};

DeferTotals defer_totals(const io::NfQueue& queues) {
  DeferTotals t;
  for (std::size_t i = 0; i < queues.workers(); ++i) {
    const io::DeferCounters* d = queues.defer_counters(i);
    if (d == nullptr) continue;
    t.held += d->held.get();
    t.holding += queues.held(i);
    t.too_large += d->too_large.get();
    t.state_gone += d->state_gone.get();
    for (std::size_t k = 0; k < t.released.size(); ++k) t.released[k] += d->released[k].get();
  }
  return t;
}

// What the control plane reads from the queues: the engine workers' counters, each worker's queue
// counters, and the kernel's view of the same queues.
class QueueDataPlane final : public control::DataPlane {
 public:
  explicit QueueDataPlane(io::NfQueue& queues) : queues_(queues) {}

  std::vector<const engine::Worker*> workers() const override {
    std::vector<const engine::Worker*> out;
    for (std::size_t i = 0; i < queues_.workers(); ++i) out.push_back(&queues_.engine_worker(i));
    return out;
  }

  std::vector<control::QueueCounters> queues() const override {
    std::vector<io::KernelQueueStats> kernel;
    try {
      kernel = queues_.kernel_stats();
    } catch (const std::exception&) {
      // No /proc view (unusual): report what the workers counted.
    }
    std::vector<control::QueueCounters> out;
    for (std::size_t i = 0; i < queues_.workers(); ++i) {
      const auto& c = queues_.counters(i);
      control::QueueCounters q;
      q.queue = queues_.queue_of(i);
      q.packets = c.packets.get();
      q.bytes = c.bytes.get();
      if (auto k = io::find_queue(kernel, q.queue)) {
        q.drops = k->queue_dropped;
        q.overruns = k->user_dropped;
      }
      // ENOBUFS is how the worker sees socket overruns when the kernel's view is missing.
      if (q.overruns == 0) q.overruns = c.enobufs.get();
      q.verdict_errors = c.send_errors.get() + c.netlink_errors.get();
      q.uninspected = c.uninspected.get();
      q.max_len = queues_.socket(i).max_len();
      q.rcvbuf_bytes = static_cast<uint64_t>(queues_.socket(i).rcvbuf_bytes());
      out.push_back(q);
    }
    return out;
  }

 private:
  io::NfQueue& queues_;
};

// Samples every worker's progress and its kernel queue for the ProgressWatch.
std::vector<control::ProgressWatch::Sample> progress_samples(const io::NfQueue& queues) {
  std::vector<io::KernelQueueStats> kernel;
  bool have_kernel = true;
  try {
    kernel = queues.kernel_stats();
  } catch (const std::exception&) {
    have_kernel = false;  // no kernel view: idle and stuck look alike, so accuse nobody
  }
  std::vector<control::ProgressWatch::Sample> out;
  for (std::size_t i = 0; i < queues.workers(); ++i) {
    const auto& c = queues.counters(i);
    control::ProgressWatch::Sample s;
    s.queue = queues.queue_of(i);
    s.progress = c.packets.get() + c.polls.get() + c.recv_calls.get();
    if (have_kernel) {
      const auto k = io::find_queue(kernel, s.queue);
      s.queued = k ? k->queued : 0u;
    }
    out.push_back(s);
  }
  return out;
}

// The control socket on an io_context and a thread of its own. Requests are handled on the control
// loop, in order, but health and failover requests are answered on this thread
// (ControlService::handle_at_once()): keepalived's health check gives up after a second, and a
// rule compile holds the control loop for longer than that on a large rule set (a 200,000-entry
// table and 10,000 rules: 1.8 s), which in keepalived mode would hand the group to the backup at
// every such reload or table change.
class ControlSocketRunner {
 public:
  ControlSocketRunner() = default;
  ~ControlSocketRunner() { stop(); }
  ControlSocketRunner(const ControlSocketRunner&) = delete;
  ControlSocketRunner& operator=(const ControlSocketRunner&) = delete;

  asio::io_context& io() { return io_; }

  // `server` is on io() and outlives stop().
  void start(control::ControlServer& server) {
    server_ = &server;
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "pw-control");
      server_->start();
      io_.run();
    });
  }

  // The socket closed and the thread ended; requests already on the control loop are not answered.
  void stop() {
    if (!thread_.joinable()) return;
    asio::post(io_, [this] {
      server_->stop();
      io_.stop();
    });
    thread_.join();
  }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> keep_running_{io_.get_executor()};
  control::ControlServer* server_ = nullptr;
  std::thread thread_;
};

// The failover service on an io_context and a thread of its own, as the sync service has: its
// advertisements must leave on time whatever the control loop is busy with. A master silent for
// three advbase intervals hands its group to the backup, and the control loop can be held for
// seconds: by a `states` listing of a million entries, or a large rule set compiled (60,000 rules
// held it 2.9 s in test_failover_master_keeps_advertising_while_its_control_loop_is_busy.py).
class FailoverRunner {
 public:
  FailoverRunner(failover::FailoverConfig config, uint32_t node_id, failover::FailoverHooks hooks,
                 uint64_t boot_epoch)
      : service_(io_, std::move(config), node_id, std::move(hooks), boot_epoch) {}
  ~FailoverRunner() { stop(); }
  FailoverRunner(const FailoverRunner&) = delete;
  FailoverRunner& operator=(const FailoverRunner&) = delete;

  failover::FailoverService& service() { return service_; }

  // Throws as FailoverService::start() does, before the thread exists.
  void start() {
    service_.start();
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "pw-failover");
      io_.run();
    });
  }

  // The leaving advertisement and the VIPs released on the service's thread, then the thread ends.
  void stop() {
    if (!thread_.joinable()) {
      service_.stop();
      return;
    }
    asio::post(io_, [this] {
      service_.stop();
      io_.stop();
    });
    thread_.join();
  }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> keep_running_{io_.get_executor()};
  failover::FailoverService service_;
  std::thread thread_;
};

engine::EngineConfig engine_config(const control::Config& c, uint64_t boot_epoch) {
  engine::EngineConfig config;
  config.node_id = c.node.id;
  config.shards = c.engine.shards;
  config.first_state_counter = control::first_state_counter(boot_epoch);
  // A second's flows of a heavy churn of (pflow) states, 152 bytes each, reserved twice: address
  // space until (pflow) states go, and with or without [pflow] now, since a reload may add it.
  config.flow_log_capacity = 1 << 17;
  return config;
}

// [pflow], or nothing without a collector.
std::optional<io::FlowExportConfig> flow_export_config(const control::Config& c) {
  if (!c.pflow.enabled()) return std::nullopt;
  io::FlowExportConfig fc;
  fc.collector_host = c.pflow.host;
  fc.collector_port = c.pflow.port;
  fc.source = c.pflow.source;
  fc.observation_domain = c.pflow.observation_domain.value_or(c.node.id);
  return fc;
}

io::NfQueueConfig queue_config(const control::Config& c, const std::optional<sync::SyncConfig>& sync_config) {
  io::NfQueueConfig qc;
  qc.first_queue = c.queue.first;
  qc.queues = c.queue.count;
  qc.queue.max_len = c.queue.maxlen;
  qc.queue.fail_open = c.queue.fail_open;
  qc.queue.rcvbuf_bytes = static_cast<int>(c.queue.rcvbuf_bytes);
  qc.queue.batch_verdicts = c.queue.batch_verdicts;
  qc.queue.gso = c.queue.gso;
  qc.reject_config.mark = c.queue.mark;
  qc.queue.claim_mark = c.queue.mark;
  if (sync_config) {
    qc.defer.available = true;
    qc.defer.enabled = sync_config->defer;
    qc.defer.timeout = sync_config->defer_timeout;
  }
  return qc;
}

class Node {
 public:
  // `boot_epoch`: this start's, shared by sync and the advertisements, and the start of its state ids.
  Node(const control::Config& config, uint64_t boot_epoch)
      : c_(config),
        boot_epoch_(boot_epoch),
        engine_(engine_config(config, boot_epoch)),
        service_(config, engine_, monotonic_now),
        epoch_floor_(config.node.epoch_file, boot_epoch) {
    service_.set_interface_addresses(interface_addresses(config));
  }

  // Starts the node, serves until SIGTERM or SIGINT, stops it; returns the exit status. The loop's
  // thread takes the daemon's signals with `serving_mask`, once every other thread has started
  // (and inherited the mask that blocks them).
  int run(const sigset_t& serving_mask) {
    const auto loaded = service_.load_rules(c_.rules.file);
    if (!loaded.ok) {
      spdlog::error("{}", loaded.error);
      return 1;
    }
    for (const std::string& warning : loaded.warnings) spdlog::warn("{}", warning);
    spdlog::info("node {} ({}): {} rules from {}", c_.node.id, c_.node.name, engine_.rules()->size(),
                 c_.rules.file);
    if (!start()) return 1;
    add_metrics();
    serve();
    pthread_sigmask(SIG_SETMASK, &serving_mask, nullptr);
    // A handler that throws (a table rebuilt out of memory) is logged and the loop goes on: ending
    // here would drop every state and leave a fail-closed node's hooks with nothing behind them.
    for (;;) {
      try {
        loop_.run();
        break;
      } catch (const std::exception& e) {
        spdlog::error("event loop: {}: carried on", e.what());
      }
    }
    stop();
    return 0;
  }

 private:
  // The components, in the order of the file's head comment (node.h). False when one failed to
  // start: logged, and those started before it stopped.
  bool start() {
    try {
      start_control_server();
      metrics_ = c_.metrics;
      if (metrics_.enabled()) {
        metrics_server_ = std::make_unique<control::MetricsServer>(loop_, metrics_.host, metrics_.port,
                                                                   [this] { return registry_.render(); });
      }
      // Made without a file too, so that a reload may name one.
      io::PcapLogConfig pc;
      pc.path = c_.log.pcap_file;
      pc.max_file_bytes = c_.log.pcap_rotate_bytes;
      pc.files = c_.log.pcap_keep;
      pc.workers = c_.queue.count;
      pcap_ = std::make_unique<io::PcapLog>(pc);
      // pflow: the flows of (pflow) states, taken every second (on_expiry_tick()).
      if (const auto pflow = flow_export_config(c_))
        flow_exporter_ = std::make_unique<io::FlowExporter>(engine_.flows(), *pflow);
      std::optional<sync::SyncConfig> sync_config;
      if (c_.sync) sync_config = sync::parse_sync_config(*c_.sync, c_.file);
      const io::NfQueueConfig qc = queue_config(c_, sync_config);
      queues_ = std::make_unique<io::NfQueue>(engine_, qc, pcap_.get());
      // Started before the hooks so that the bulk request goes out as early as possible.
      std::vector<std::string> shared_tables;
      if (sync_config) {
        shared_tables = sync_config->tables;
        make_sync_service(std::move(*sync_config));
      }
      queues_->start();
      data_plane_ = std::make_unique<QueueDataPlane>(*queues_);
      service_.set_data_plane(data_plane_.get());
      service_.set_health_probe([this] { return watch_.stuck(); });
      if (sync_service_) {
        sync_service_->start();
        service_.set_sync(sync_service_.get());
        service_.share_tables(shared_tables);
        registry_.add("sync", [this](control::MetricWriter& w) { sync_service_->render_metrics(w); });
      }
      install_hooks();
      // Failover (failover/): started once the hooks filter, so that this node never holds the VIPs
      // without filtering behind them. Stopped before the hooks go (see stop()).
      if (c_.failover) start_failover();
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      if (failover_) failover_->stop();
      release_hooks();
      if (queues_) queues_->stop();
      if (sync_service_) sync_service_->stop();
      return false;
    }
    return true;
  }

  // Health and failover requests are answered on the control socket's thread, the others on this
  // loop (ControlSocketRunner).
  void start_control_server() {
    control::ControlDispatch dispatch;
    dispatch.immediate = [this](const control::Request& req, control::Response& resp) {
      return service_.handle_at_once(req, resp);
    };
    dispatch.handler_loop = &loop_;
    control_server_ = std::make_unique<control::ControlServer>(
        control_socket_.io(), c_.control.socket, c_.control.socket_mode,
        [this](const control::Request& req, control::Response& resp) {
          service_.handle(req, resp);
          if (req.has_rules_load()) {
            if (resp.ok()) {
              spdlog::info("rules loaded from {}: {} rules, {} states kept", resp.rules_loaded().path(),
                           resp.rules_loaded().rule_count(), resp.rules_loaded().states_kept());
              for (const std::string& warning : resp.rules_loaded().warnings()) spdlog::warn("{}", warning);
            } else {
              spdlog::warn("rules load refused, running set kept: {}", resp.error());
            }
          } else if (req.has_anchor_load() && resp.ok()) {
            for (const std::string& warning : resp.anchors().warnings()) spdlog::warn("{}", warning);
          } else if (req.has_flush_states() && resp.ok()) {
            spdlog::info("flushed {} states", resp.flushed().states());
          }
        },
        control::ControlTimeouts{}, std::move(dispatch));
  }

  // Sync (daemon/sync/): drains the workers' state change rings and applies the peer's records.
  // Each worker learns from its ring how much of it the peer has, for defer (on now or after a reload).
  void make_sync_service(sync::SyncConfig config) {
    sync_service_ = std::make_unique<sync::SyncService>(engine_, std::move(config), c_.node.id, boot_epoch_);
    for (std::size_t i = 0; i < queues_->workers(); ++i) {
      sync_service_->add_ring(queues_->engine_worker(i).events(), [this, i](uint64_t synced, bool peer_up) {
        queues_->on_synced(i, synced, peer_up);
      });
    }
    sync_service_->add_ring(engine_.control_events());
    sync_service_->set_events_lost([this] {
      uint64_t lost = engine_.control_events_lost();
      for (std::size_t i = 0; i < queues_->workers(); ++i) lost += queues_->engine_worker(i).events_lost();
      return lost;
    });
    queues_->set_sync_kick([service = sync_service_.get()] { service->kick(); });
    sync_service_->on_peer_table([this](const sync::SharedTable& table) {
      asio::post(loop_, [this, table] { take_peer_table(table); });
    });
    sync_service_->set_defer_status([this](control::SyncStatus::Defer* out) {
      const DeferTotals d = defer_totals(*queues_);
      out->set_held(d.held);
      out->set_holding(d.holding);
      out->set_too_large(d.too_large);
      for (std::size_t k = 0; k < d.released.size(); ++k) {
        (*out->mutable_released())[std::string(io::release_cause_name(static_cast<io::ReleaseCause>(k)))] =
            d.released[k];
      }
    });
  }

  void install_hooks() {
    io::HooksConfig initial = running_hooks_config(queue_, engine_.rules()->has_translations());
    if (initial.prerouting && service_.running_rules() != nullptr)
      initial.prerouting_matches = io::prerouting_matches(*service_.running_rules());
    hooks_ = std::make_unique<io::Hooks>(std::move(initial));
    hooks_->install();
    hooks_installed_ = true;
    show_prerouting_matches(service_, hooks_->config());
    // A later rule set with translation rules gets the pre-routing hook, and queued there the
    // packets not addressed to this node that its rules may rewrite: the hooks are replaced by a
    // set that has them, make-before-break (io::Hooks::install), on this loop, the one that
    // removes them at the end. Matches are only added while the daemon runs: the connections an
    // earlier set redirected still need their packets translated before routing.
    service_.set_prerouting_hook(hooks_->config().prerouting, [this](const engine::rules::RuleFile& file) {
      io::HooksConfig wanted = running_hooks_config(queue_, /*translations=*/true);
      wanted.prerouting_matches = io::prerouting_matches(file, hooks_->config().prerouting_matches);
      if (wanted == hooks_->config()) return;
      const bool hook_added = !hooks_->config().prerouting;
      auto replacement = std::make_unique<io::Hooks>(std::move(wanted));
      replacement->install();
      hooks_ = std::move(replacement);
      show_prerouting_matches(service_, hooks_->config());
      spdlog::info("hooks: pre-routing for translation {} (chain {}), {} matches beyond this node",
                   hook_added ? "added" : "changed", hooks_->config().chain,
                   hooks_->config().prerouting_matches.size());
    });
  }

  void start_failover() {
    failover::FailoverHooks fh;
    fh.engine_healthy = [this] { return !watch_.any_stuck(); };
    // Demoted until this node holds the peer's table (DESIGN.md: bulk resync on boot).
    if (sync_service_) fh.bulk_sync_complete = [this] { return sync_service_->bulk_done(); };
    failover_ = std::make_unique<FailoverRunner>(failover::parse_failover_config(*c_.failover, c_.file),
                                                 c_.node.id, std::move(fh), boot_epoch_);
    failover_->start();
    service_.set_failover(&failover_->service());
    failover::register_failover_metrics(registry_, failover_->service());
  }

  void add_metrics() {
    registry_.add("engine", [this](control::MetricWriter& w) {
      control::render_core_metrics(service_.snapshot(), w);
      service_.render_metrics(w);
    });
    registry_.add("pairwalld", [this](control::MetricWriter& w) { render_io_metrics(w); });
  }

  // What the queue workers, the pcap log, defer and the servers count.
  void render_io_metrics(control::MetricWriter& w) const {
    using T = control::MetricWriter::Type;
    uint64_t rst = 0;
    uint64_t icmp = 0;
    uint64_t limited = 0;
    uint64_t synproxy = 0;
    uint64_t send_errors = 0;
    uint64_t unscoped = 0;
    uint64_t not_eligible = 0;
    uint64_t malformed = 0;
    uint64_t routes_asked = 0;
    uint64_t routes_failed = 0;
    for (std::size_t i = 0; i < queues_->workers(); ++i) {
      routes_asked += queues_->router(i).asked();
      routes_failed += queues_->router(i).failed();
      if (const auto* r = queues_->reject_counters(i)) {
        rst += r->rst_sent.get();
        icmp += r->icmp_sent.get();
        limited += r->rate_limited.get();
        synproxy += r->synproxy_sent.get();
        send_errors += r->send_errors.get();
        unscoped += r->unscoped.get();
        not_eligible += r->not_eligible.get();
        malformed += r->malformed.get();
      }
    }
    w.family("pairwall_rejects_sent_total", T::Counter, "Replies sent for rejected packets.");
    w.sample({{"kind", "tcp_rst"}}, rst);
    w.sample({{"kind", "icmp"}}, icmp);
    w.family("pairwall_rejects_rate_limited_total", T::Counter,
             "Replies not sent because of the rate limit.");
    w.sample(limited);
    w.family("pairwall_rejects_unsent_total", T::Counter,
             "Replies and synproxy segments not sent: the kernel refused them (send_error), their "
             "link-local destination had no interface to be reached by (no_scope), nothing may answer "
             "the packet (not_eligible: an RST, an ICMP error, a later fragment, a multicast or "
             "broadcast destination, a wrong TCP checksum), or it did not parse (malformed).");
    w.sample({{"reason", "send_error"}}, send_errors);
    w.sample({{"reason", "no_scope"}}, unscoped);
    w.sample({{"reason", "not_eligible"}}, not_eligible);
    w.sample({{"reason", "malformed"}}, malformed);
    w.family("pairwall_route_lookups_total", T::Counter,
             "Questions to the kernel's routing tables: where a connection translated before routing "
             "(rdr) will leave, for its out pass's rules.");
    w.sample(routes_asked);
    w.family("pairwall_route_lookup_failures_total", T::Counter,
             "Route questions the kernel left unanswered: those connections met their in pass alone.");
    w.sample(routes_failed);
    w.family("pairwall_synproxy_segments_sent_total", T::Counter,
             "TCP segments synproxy state sent in the name of a connection's ends.");
    w.sample(synproxy);
    if (pcap_) {
      const auto s = pcap_->stats();
      w.family("pairwall_pcap_logged_total", T::Counter, "Packets written to the pcap log.");
      w.sample(s.written);
      w.family("pairwall_pcap_dropped_total", T::Counter, "Logged packets lost because a log ring was full.");
      w.sample(s.dropped);
      w.family("pairwall_pcap_write_errors_total", T::Counter,
               "Logged packets lost on their way to the file: none open, or a failed write (a full disk).");
      w.sample(s.write_errors);
      w.family("pairwall_pcap_rotations_total", T::Counter, "Pcap log files rotated (pcap_rotate_bytes).");
      w.sample(s.rotations);
    }
    if (sync_service_) {
      const DeferTotals d = defer_totals(*queues_);
      w.family("pairwall_defer_held_total", T::Counter,
               "Packets held until the sync peer acknowledged their states (defer).");
      w.sample(d.held);
      w.family("pairwall_defer_released_total", T::Counter,
               "Held packets let go, by cause: synced (the peer acknowledged), timeout, full (a newer "
               "packet needed the room), stopped (the peer stopped answering, or shutdown).");
      for (std::size_t k = 0; k < d.released.size(); ++k) {
        w.sample({{"cause", std::string(io::release_cause_name(static_cast<io::ReleaseCause>(k)))}},
                 d.released[k]);
      }
      w.family("pairwall_defer_too_large_total", T::Counter,
               "Rewritten packets too large to copy for holding: passed at once.");
      w.sample(d.too_large);
      w.family("pairwall_defer_dropped_total", T::Counter,
               "Held packets dropped when let go: their state was removed while they waited (a kill, "
               "a flush, an overload's flush), as pfsync drops its deferred packets then.");
      w.sample(d.state_gone);
      w.family("pairwall_defer_holding", T::Gauge, "Packets held now.");
      w.sample(d.holding);
    }
    w.family("pairwall_pflow_flows_total", T::Counter,
             "Flows of (pflow) states, by what became of them: sent to the [pflow] collector, lost in "
             "messages the socket refused, unsent (no [pflow] collector), or dropped for want of room.");
    w.sample({{"result", "sent"}}, flow_exporter_ ? flow_exporter_->flows_sent() : uint64_t{0});
    w.sample({{"result", "send_failed"}}, flow_exporter_ ? flow_exporter_->flows_lost() : uint64_t{0});
    w.sample({{"result", "unsent"}}, flows_unsent_);
    w.sample({{"result", "dropped"}}, engine_.flows().dropped());
    w.family("pairwall_pflow_messages_total", T::Counter, "IPFIX messages sent to the [pflow] collector.");
    w.sample(flow_exporter_ ? flow_exporter_->messages_sent() : uint64_t{0});
    w.family("pairwall_connections_refused_total", T::Counter,
             "Connections closed at once because their server had its most sessions open, by server: "
             "control (the socket pairwallctl and health checks use) or metrics.");
    w.sample({{"server", "control"}}, control_server_->refused());
    if (metrics_server_) w.sample({{"server", "metrics"}}, metrics_server_->refused());
    w.family("pairwall_worker_stuck", T::Gauge,
             "1 while a packet worker makes no progress with packets waiting.");
    w.sample(uint64_t{watch_.stuck() ? 1u : 0u});
  }

  // The control socket and /metrics open, READY=1, and the loop's own work set going.
  void serve() {
    control_socket_.start(*control_server_);
    if (metrics_server_) {
      metrics_server_->start();
      spdlog::info("metrics on http://{}:{}/metrics", metrics_.host, metrics_.port);
    }
    spdlog::info("filtering on queues {}..{} ({}, hooks {}{}), control socket {}", c_.queue.first,
                 c_.queue.first + c_.queue.count - 1, c_.queue.fail_open ? "fail-open" : "fail-closed",
                 c_.queue.hooks == control::HookSet::Forward ? "forward" : "forward+local",
                 hooks_->config().prerouting ? ", pre-routing for translation" : "", c_.control.socket);
    notify("READY=1\n" + status_line());
    service_.set_reload([this] { return reload("reload"); });
    wait_for_signal();
    expiry_timer_.expires_after(std::chrono::seconds(1));
    expiry_timer_.async_wait([this](const boost::system::error_code& ec) { on_expiry_tick(ec); });
    overload_timer_.expires_after(std::chrono::milliseconds(100));
    overload_timer_.async_wait([this](const boost::system::error_code& ec) { on_overload_tick(ec); });
    watch_addresses();
    if (sd_watchdog_enabled(0, &watchdog_usec_) > 0 && watchdog_usec_ > 0) feed_watchdog_later();
  }

  std::string status_line() {
    const auto s = service_.snapshot();
    return "STATUS=" + std::to_string(s.rules.size()) + " rules, " + std::to_string(s.states) + " states, " +
           std::to_string(s.packets) + " packets, " + std::to_string(s.drops()) + " dropped";
  }

  // A reload (SIGHUP, or the Reload request of `pairwalld --reload`, the unit's ExecReload) reads the
  // config again, as a restart would, and takes what it names now (kTakenByReload): the [rules] file
  // (even after `pairwallctl rules load` of another) with [engine] state_limit, the log level and
  // pcap log, the [queue] settings a running queue can change (its hooks, fail-open policy, length,
  // buffer and GSO), [sync] defer, the sync link and the rest of [sync] (kTakenBySyncLink,
  // kTakenBySyncTuning), [metrics] listen, [pflow], the sync and failover keys (key_file,
  // accept_key_file), so that a pair changes its keys without a restart, which would hand the group
  // over with the peer's states unsynced (README "Changing the keys"), and what the builtin
  // election changes on a running group as carp(4) takes it from ifconfig (kTakenByElection, the
  // VIPs among them). All or nothing: the keys are read and the VIPs and the state limit given to
  // the rules before they are compiled (and a pcap log's directory checked), and the rest taken
  // after they are published; what the kernel or the file system refuses then is told with the
  // answer. The other settings need a restart: those that differ from the running ones are warned
  // about with the rules' warnings. Nothing thrown on the way (a compile out of memory) may end the
  // daemon: the running set stays. `who` names the reload's cause in the log: "SIGHUP", or
  // "reload" for the request.
  control::ControlService::LoadResult reload(std::string_view who) {
    notify("RELOADING=1");
    control::ControlService::LoadResult result;
    bool addresses_changed = false;
    const std::optional<uint32_t> state_limit = service_.state_limit();
    try {
      const control::Config now = control::load_config(c_.file);
      validate_component_sections(now);  // a config that would not start is not half taken
      if (now.log.pcap_file != pcap_->config().path && !now.log.pcap_file.empty()) {
        if (std::string problem = io::PcapLog::path_problem(now.log.pcap_file); !problem.empty())
          throw std::runtime_error(now.file + ": [log] pcap_file: " + problem);
      }
      std::optional<sync::SyncConfig> sync_now;
      std::optional<failover::FailoverConfig> election;
      if (sync_service_ && now.sync) sync_now = sync::parse_sync_config(*now.sync, now.file);
      if (failover_ && now.failover) {
        election = failover::parse_failover_config(*now.failover, now.file);
        if (election->driver != failover::Driver::Builtin) election.reset();
      }
      std::vector<control::Setting> taken(std::begin(kTakenByReload), std::end(kTakenByReload));
      if (sync_now) {
        taken.insert(taken.end(), std::begin(kTakenBySyncLink), std::end(kTakenBySyncLink));
        taken.insert(taken.end(), std::begin(kTakenBySyncTuning), std::end(kTakenBySyncTuning));
      }
      if (election) {
        taken.insert(taken.end(), std::begin(kTakenByElection), std::end(kTakenByElection));
        if (election->vips != failover_->service().vips()) {
          service_.set_interface_addresses(interface_addresses(election->vips));
          addresses_changed = true;
        }
      }
      queues_->refresh_interfaces();
      service_.set_state_limit(now.engine.state_limit);
      result = service_.load_rules(now.rules.file);
      if (result.ok) {
        addresses_changed = false;
        for (std::string& untaken : control::settings_awaiting_restart(c_, now, taken))
          result.warnings.push_back(std::move(untaken));
        if (sync_now) sync_service_->set_keys(std::move(sync_now->key), std::move(sync_now->accept_key));
        if (election) {
          failover_->service().set_keys(election->key, election->accept_key);
          failover_->service().reconfigure(*election);
          exemptions_.take_adverts(*election);  // its port and groups, which the hooks leave unqueued
        }
        spdlog::info("{}: rules reloaded from {}: {} rules, {} states kept", who, now.rules.file,
                     result.rule_count, engine_.states().size());
        for (const std::string& warning : result.warnings) spdlog::warn("{}: {}", who, warning);
        if (sync_now || election) spdlog::info("{}: keys re-read from {}", who, now.file);
        if (sync_now) {
          take_defer(who, *sync_now);
          sync_service_->retune(*sync_now);
          service_.share_tables(sync_now->tables);
        }
        // What the kernel or the file system refuses now is told in the answer too. The sync link
        // moves before the hooks, which leave its interface unqueued.
        const std::string sync_link = sync_now ? take_sync_link(*sync_now) : std::string();
        for (std::string error : {sync_link, take_pcap_log(who, now.log), take_queue_limits(who, now.queue),
                                  take_hooks(who, now.queue), take_queue_flags(who, now.queue),
                                  take_metrics_listen(who, now.metrics), take_pflow(who, now)}) {
          if (!error.empty()) result.warnings.push_back(std::move(error));
        }
        take_log_level(who, now.log.level);
      }
    } catch (const std::exception& e) {
      result = {false, e.what(), 0, {}};
    }
    if (addresses_changed) service_.set_interface_addresses(interface_addresses(failover_->service().vips()));
    if (!result.ok) {
      service_.set_state_limit(state_limit);
      spdlog::warn("{}: rules reload refused, running rules and keys kept: {}", who, result.error);
    }
    notify("READY=1\n" + status_line());
    return result;
  }

  // A table the pair shares, whole as the peer holds it ([sync] tables).
  void take_peer_table(const sync::SharedTable& table) {
    const auto taken = service_.take_peer_table(table.name, table.entries);
    if (!taken.error.empty()) {
      spdlog::warn("sync: the peer's <{}> ({} entries) not taken: {}", table.name, table.entries.size(),
                   taken.error);
    } else if (taken.added != 0 || taken.deleted != 0) {
      spdlog::info("sync: <{}> taken from the peer: {} entries, {} added, {} deleted", table.name,
                   table.entries.size(), taken.added, taken.deleted);
    }
  }

  // pfsync's `ifconfig pfsync0 [-]defer`: packets held when it goes off still wait for their acks.
  void take_defer(std::string_view who, const sync::SyncConfig& next) {
    const bool was = queues_->defer_enabled();
    queues_->set_defer(next.defer, next.defer_timeout);
    sync_service_->set_defer(next.defer, next.defer_timeout);
    if (was != next.defer) {
      spdlog::info("{}: defer {} -> {}", who, was ? "on" : "off",
                   next.defer ? "on (" + std::to_string(next.defer_timeout.count()) + " ms)" : "off");
    }
  }

  // [sync] interface, address, peer or group, port and ttl_security (the sync service logs the
  // move, or what refused it). The interface the link runs on is the one the hooks leave unqueued.
  std::string take_sync_link(const sync::SyncConfig& next) {
    std::string error = sync_service_->move_link(next);
    exemptions_.sync_interface = sync_service_->link_interface();
    return error;
  }

  // A move the sync thread made after the reload stopped waiting for it: the hooks follow it
  // within a second.
  void follow_sync_link() {
    if (!sync_service_ || !hooks_) return;
    std::string running = sync_service_->link_interface();
    if (running == exemptions_.sync_interface) return;
    spdlog::info("sync: link now on {}, the hooks follow", running);
    exemptions_.sync_interface = std::move(running);
    (void)take_hooks("sync", queue_);  // which logs what the kernel refused
  }

  // pflogd's log file, moved, turned on or off: the records logged before go to the file they were
  // logged for. A file that cannot be created now is retried and reported as a failed write is.
  std::string take_pcap_log(std::string_view who, const control::LogConfig& next) {
    const std::string before = pcap_->config().path;
    const std::string error = pcap_->reconfigure(next.pcap_file, next.pcap_rotate_bytes, next.pcap_keep);
    if (before != next.pcap_file) {
      spdlog::info("{}: pcap log {} -> {}", who, before.empty() ? "off" : before,
                   next.pcap_file.empty() ? "off" : next.pcap_file);
    }
    if (!error.empty()) spdlog::error("{}: {}", who, error);
    return error;
  }

  // [metrics] listen, moved, turned on or off: a scraper's address changed without the restart that
  // would hand the group over. Scrapes under way finish; a server turned off stays, stopped, for
  // them (and for a later reload that turns it on again).
  std::string take_metrics_listen(std::string_view who, const control::MetricsConfig& next) {
    if (next.listen == metrics_.listen) return {};
    try {
      if (!next.enabled()) {
        if (metrics_server_) metrics_server_->stop();
      } else if (metrics_server_) {
        metrics_server_->listen_on(next.host, next.port);
      } else {
        metrics_server_ = std::make_unique<control::MetricsServer>(loop_, next.host, next.port,
                                                                   [this] { return registry_.render(); });
        metrics_server_->start();
      }
    } catch (const std::exception& e) {
      spdlog::error("{}: {}", who, e.what());
      return e.what();
    }
    spdlog::info("{}: metrics {} -> {}", who, metrics_.enabled() ? metrics_.listen : "off",
                 next.enabled() ? "http://" + next.listen + "/metrics" : "off");
    metrics_ = next;
    return {};
  }

  // [pflow]: the collector moved, turned on or off. A new exporter sends the templates again; one
  // that cannot open its socket leaves the running one.
  std::string take_pflow(std::string_view who, const control::Config& next) {
    const std::optional<io::FlowExportConfig> wanted = flow_export_config(next);
    const std::optional<io::FlowExportConfig> running =
        flow_exporter_ ? std::optional(flow_exporter_->config()) : std::nullopt;
    if (wanted == running) return {};
    try {
      flow_exporter_ = wanted ? std::make_unique<io::FlowExporter>(engine_.flows(), *wanted) : nullptr;
    } catch (const std::exception& e) {
      spdlog::error("{}: {}", who, e.what());
      return e.what();
    }
    spdlog::info("{}: pflow {} -> {}", who, running ? running->collector() : "off",
                 wanted ? wanted->collector() : "off");
    return {};
  }

  // The kernel's queue length and the sockets' receive buffers, raised where the queues overflow
  // under load without the restart that would hand the group over.
  std::string take_queue_limits(std::string_view who, const control::QueueConfig& next) {
    if (next.maxlen == queue_.maxlen && next.rcvbuf_bytes == queue_.rcvbuf_bytes) return {};
    const io::NfqSocket& first = queues_->socket(0);
    const uint32_t max_len = first.max_len();
    const int rcvbuf = first.rcvbuf_bytes();
    try {
      queues_->set_limits(next.maxlen, static_cast<int>(next.rcvbuf_bytes));
    } catch (const std::exception& e) {
      spdlog::error("{}: {}", who, e.what());
      return e.what();
    }
    queue_.maxlen = next.maxlen;
    queue_.rcvbuf_bytes = next.rcvbuf_bytes;
    if (max_len != first.max_len() || rcvbuf != first.rcvbuf_bytes()) {
      spdlog::info("{}: queues hold {} -> {} packets, receive buffer {} -> {} bytes", who, max_len,
                   first.max_len(), rcvbuf, first.rcvbuf_bytes());
    }
    return {};
  }

  // [queue] hooks, exclude_interfaces and fail_open: the hooks replaced make-before-break
  // (io::Hooks::install) with the pre-routing chain and its matches as they run, and with them the
  // policy that decides whether the hooks stay when the daemon stops.
  std::string take_hooks(std::string_view who, const control::QueueConfig& next) {
    control::QueueConfig wanted_queue = queue_;
    wanted_queue.hooks = next.hooks;
    wanted_queue.exclude_interfaces = next.exclude_interfaces;
    wanted_queue.fail_open = next.fail_open;
    io::HooksConfig wanted = running_hooks_config(wanted_queue, hooks_->config().prerouting);
    wanted.prerouting_matches = hooks_->config().prerouting_matches;
    if (wanted == hooks_->config()) return {};
    try {
      auto replacement = std::make_unique<io::Hooks>(std::move(wanted));
      replacement->install();
      hooks_ = std::move(replacement);
    } catch (const std::exception& e) {
      spdlog::error("{}: the hooks' settings not taken: {}", who, e.what());
      return std::string("[queue] hooks, exclude_interfaces and fail_open not taken: ") + e.what();
    }
    queue_ = std::move(wanted_queue);
    service_.set_fail_open(queue_.fail_open);
    show_prerouting_matches(service_, hooks_->config());
    const auto& excluded = hooks_->config().excluded_interfaces;
    spdlog::info("{}: hooks replaced (chain {}): {}, {}, {}{}", who, hooks_->config().chain,
                 queue_.hooks == control::HookSet::Forward ? "forward" : "forward+local",
                 queue_.fail_open ? "fail-open" : "fail-closed",
                 excluded.empty() ? "every interface queued" : "not queued on ", fmt::join(excluded, ", "));
    return {};
  }

  // The queues' flags: fail_open as the hooks now run with it (the kernel's policy for a full queue,
  // the workers' for a packet they cannot inspect), and gso.
  std::string take_queue_flags(std::string_view who, const control::QueueConfig& next) {
    if (queues_->socket(0).fail_open() == queue_.fail_open && next.gso == queue_.gso) return {};
    try {
      queues_->set_flags(queue_.fail_open, next.gso);
    } catch (const std::exception& e) {
      spdlog::error("{}: {}", who, e.what());
      return e.what();
    }
    if (next.gso != queue_.gso)
      spdlog::info("{}: gso {} -> {}", who, queue_.gso ? "on" : "off", next.gso ? "on" : "off");
    queue_.gso = next.gso;
    return {};
  }

  // The hooks for the [queue] settings as they run, and the sync link and the failover group's
  // advertisements as the running services use them.
  io::HooksConfig running_hooks_config(const control::QueueConfig& queue, bool translations) const {
    return hooks_config(queue, exemptions_, translations);
  }

  // A level more verbose than the running one is set before the line that tells of it, a less
  // verbose one after: either way the journal says what changed.
  static void take_log_level(std::string_view who, const std::string& level) {
    const std::shared_ptr<spdlog::logger> logger = spdlog::default_logger();
    const spdlog::level::level_enum next = spdlog::level::from_str(level);
    const spdlog::level::level_enum running = logger->level();
    if (next == running) return;
    if (next < running) logger->set_level(next);
    spdlog::info("{}: log level {} -> {}", who, spdlog::level::to_string_view(running),
                 spdlog::level::to_string_view(next));
    logger->set_level(next);
  }

  void wait_for_signal() {
    signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGHUP) {
        reload("SIGHUP");
        wait_for_signal();
        return;
      }
      spdlog::info("{}: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      notify("STOPPING=1");
      loop_.stop();
    });
  }

  // Expiry every second (pf purges every 10 s; ours is O(expired), so a short period is cheap and
  // keeps the table close to its true size). Without sync nobody else drains the state change
  // rings: drain them here so that they do not count as lost. The boot epoch file's floor is kept
  // ahead of the state ids made (a failed write is warned about, the daemon goes on).
  void on_expiry_tick(const boost::system::error_code& ec) {
    if (ec) return;
    engine_.expire(monotonic_now());
    if (flow_exporter_) {
      flow_exporter_->export_flows(monotonic_now(), std::chrono::system_clock::now());
    } else {
      // Without a collector (none named, or a reload took it out) they go, counted, rather than
      // wait to reach the next one late.
      engine_.flows().take(unsent_flows_);
      flows_unsent_ += unsent_flows_.size();
    }
    if (const std::string error = epoch_floor_.update(engine_.next_state_counter()); !error.empty())
      spdlog::warn("{}", error);
    follow_sync_link();
    if (!sync_service_) {
      engine::StateRecord record;
      for (std::size_t i = 0; i < queues_->workers(); ++i) {
        while (queues_->engine_worker(i).events().pop(record)) {
        }
      }
      while (engine_.control_events().pop(record)) {
      }
    }
    watch_.tick(steady_clock::now(), progress_samples(*queues_));
    if (pcap_) {
      for (const io::PcapLogEvent& e : pcap_->take_events()) {
        if (e.failing) {
          spdlog::error("{}", e.message);
        } else {
          spdlog::info("{}", e.message);
        }
      }
    }
    if (++ticks_ % 5 == 0) notify(status_line());
    expiry_timer_.expires_after(std::chrono::seconds(1));
    expiry_timer_.async_wait([this](const boost::system::error_code& e) { on_expiry_tick(e); });
  }

  // Sources over a rule's connection limits with `overload <table>`: pf inserts them at once; here
  // the workers queue them and the control loop adds them within 100 ms (each further
  // connection of theirs meanwhile is still refused by the limit). Each batch recompiles the
  // rules, which takes longer as tables grow (pairwall-check parses and compiles 199,000 entries
  // in 0.5 s): the next batch waits four times what this one took, so that a flood of offenders
  // holds the control loop a fifth of its time at most. Refusals are logged once per 10 s.
  void on_overload_tick(const boost::system::error_code& ec) {
    if (ec) return;
    const auto started = steady_clock::now();
    overloads_.clear();
    engine::SourceOverload o;
    for (std::size_t i = 0; i < queues_->workers(); ++i) {
      while (queues_->engine_worker(i).overloads().pop(o)) overloads_.push_back(o);
    }
    if (!overloads_.empty()) {
      control::ControlService::OverloadResult r;
      try {
        r = service_.apply_overloads(overloads_);
      } catch (const std::exception& e) {
        r.error = std::string("overload: tables kept: ") + e.what();
        r.refused = overloads_.size();
      }
      for (const std::string& line : r.added) spdlog::warn("overload: added {}", line);
      if (r.states_killed != 0) spdlog::warn("overload: {} states flushed", r.states_killed);
      refusals_unlogged_ += r.refused;
      if (!r.error.empty() && started - last_refusal_log_ >= std::chrono::seconds(10)) {
        spdlog::error("{} ({} sources not added since the last such message)", r.error, refusals_unlogged_);
        last_refusal_log_ = started;
        refusals_unlogged_ = 0;
      }
    }
    const auto took = steady_clock::now() - started;
    overload_timer_.expires_after(std::max<steady_clock::duration>(std::chrono::milliseconds(100), 4 * took));
    overload_timer_.async_wait([this](const boost::system::error_code& e) { on_overload_tick(e); });
  }

  // Interfaces named as addresses follow the host's addresses: after a burst of address events
  // settles (an interface brought up adds several at once), the tables made of them are set anew.
  // An interface renamed or removed: the workers map ifindexes to names anew.
  void watch_addresses() {
    address_watch_.emplace(
        loop_,
        [this] {
          address_settle_.expires_after(std::chrono::milliseconds(200));
          address_settle_.async_wait([this](const boost::system::error_code& ec) {
            if (ec) return;
            control::ControlService::RefreshResult r;
            try {
              r = service_.refresh_interface_addresses();
            } catch (const std::exception& e) {
              r.error = std::string("tables kept: ") + e.what();
            }
            for (const std::string& table : r.changed)
              spdlog::info("interface addresses changed: table {} set anew", table);
            if (r.broadcasts_changed)
              spdlog::info("interface addresses changed: the networks' broadcast addresses set anew");
            if (!r.error.empty()) spdlog::error("interface addresses changed: {}", r.error);
          });
        },
        [this] { queues_->refresh_interfaces(); });
    try {
      address_watch_->start();
    } catch (const std::exception& e) {
      spdlog::warn("interface addresses and names are read at rule loads only: {}", e.what());
    }
  }

  // The watchdog is fed from this loop only while no worker is stuck: a wedged worker (or a
  // wedged loop) lets systemd restart the daemon.
  void feed_watchdog_later() {
    watchdog_.expires_after(std::chrono::microseconds(watchdog_usec_ / 2));
    watchdog_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      if (const auto& why = watch_.stuck()) {
        spdlog::error("{}: not feeding the watchdog", *why);
        notify("STATUS=" + *why);
      } else {
        notify("WATCHDOG=1");
      }
      feed_watchdog_later();
    });
  }

  // When the daemon ends, however it ends (a signal, or a start that failed after the hooks went
  // in), a fail-closed node keeps its hooks: their queues, with no listener, drop what they are
  // given until the next daemon takes them over make-before-break, so that `systemctl restart`
  // passes nothing unfiltered. A fail-open node's would pass everything uninspected anyway.
  void release_hooks() {
    if (!hooks_installed_) return;
    if (!queue_.fail_open) {
      spdlog::info(
          "hooks kept (fail_open = false): nothing passes until a pairwalld listens again; "
          "pairwalld --remove-hooks opens the node");
      return;
    }
    try {
      hooks_->remove();
      hooks_installed_ = false;
      spdlog::info("hooks removed");
    } catch (const std::exception& e) {
      spdlog::error("removing hooks: {} (run pairwalld --remove-hooks)", e.what());
    }
  }

  void stop() {
    control_socket_.stop();
    // Failover: the leaving advertisement and the VIPs released while the hooks still filter.
    if (failover_) failover_->stop();
    release_hooks();
    queues_->stop();
    if (sync_service_) sync_service_->stop();
    if (metrics_server_) metrics_server_->stop();
    const auto s = service_.snapshot();
    spdlog::info("stopped: {} packets, {} dropped, {} states at exit", s.packets, s.drops(), s.states);
  }

  const control::Config& c_;
  const uint64_t boot_epoch_;
  engine::Engine engine_;
  control::ControlService service_;
  // Before the loop: requests queued on the loop hold sessions whose sockets are the control
  // socket's loop's, and must be freed while that loop exists.
  ControlSocketRunner control_socket_;
  asio::io_context loop_;
  // Registered before anything is installed: a SIGTERM during start-up waits for the loop
  // instead of killing the process with its hooks in place.
  asio::signal_set signals_{loop_, SIGTERM, SIGINT, SIGHUP};
  std::unique_ptr<control::ControlServer> control_server_;
  // The [metrics] settings the server runs with (a reload's, since one took them), and the server:
  // made at start or by the reload that first turns it on, kept, stopped, once turned off.
  control::MetricsConfig metrics_;
  std::unique_ptr<control::MetricsServer> metrics_server_;
  control::MetricsRegistry registry_;
  std::unique_ptr<io::PcapLog> pcap_;
  std::unique_ptr<io::FlowExporter> flow_exporter_;
  std::vector<engine::FlowRecord> unsent_flows_;
  uint64_t flows_unsent_ = 0;
  std::unique_ptr<io::NfQueue> queues_;
  std::unique_ptr<QueueDataPlane> data_plane_;
  control::ProgressWatch watch_{kStuckAfter};
  std::unique_ptr<io::Hooks> hooks_;
  bool hooks_installed_ = false;
  control::QueueConfig queue_ = c_.queue;  // [queue] as it runs: the config's, then what reloads took
  HookExemptions exemptions_ = hook_exemptions(c_);  // the sync link and advertisements as they run
  std::unique_ptr<sync::SyncService> sync_service_;
  std::unique_ptr<FailoverRunner> failover_;
  // The loop's own work (serve()).
  asio::steady_timer expiry_timer_{loop_};
  uint64_t ticks_ = 0;
  control::EpochFloor epoch_floor_;
  asio::steady_timer overload_timer_{loop_};
  std::vector<engine::SourceOverload> overloads_;
  steady_clock::time_point last_refusal_log_ = steady_clock::now() - std::chrono::seconds(10);
  std::size_t refusals_unlogged_ = 0;
  asio::steady_timer address_settle_{loop_};
  std::optional<io::AddressWatch> address_watch_;
  asio::steady_timer watchdog_{loop_};
  uint64_t watchdog_usec_ = 0;
};

}  // namespace

int run(const control::Config& config) {
  // The daemon's signals are taken by the loop's signal_set, whose handler the kernel may run on any
  // thread that does not block them, and Asio installs it without SA_RESTART: on a packet worker,
  // the sync or the failover thread it would break a blocking call with EINTR (the failover's
  // netlink exchange with the kernel among them). Threads inherit the mask of the thread that
  // starts them: the signals are blocked while start-up makes them, and let in on this thread alone
  // just before the loop runs (one that came meanwhile is then taken).
  sigset_t daemon_signals;
  sigemptyset(&daemon_signals);
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&daemon_signals, sig);
  sigset_t serving_mask;
  pthread_sigmask(SIG_BLOCK, &daemon_signals, &serving_mask);

  const control::BootEpoch epoch = control::take_boot_epoch(config.node.epoch_file, control::wall_clock_us());
  if (!epoch.warning.empty()) spdlog::warn("{}", epoch.warning);
  Node node(config, epoch.epoch);
  return node.run(serving_mask);
}

}  // namespace pairwall::node
