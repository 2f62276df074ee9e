// pairwalld: one firewall node (DESIGN.md "One node, one process").
//
//   start:  config -> engine + rules -> control socket, metrics -> queues bound -> hooks installed
//           -> READY=1. Queues are bound before the hooks send packets to them, so that even a
//           fail-closed node never drops packets for want of a listener while it starts.
//   run:    packet workers (one thread per queue) decide; the sync service and the failover service
//           each run on a thread of their own; this thread runs the Asio loop: control socket,
//           /metrics, signals, expiry every second, the systemd watchdog.
//   stop:   SIGTERM/SIGINT: a fail-open node's hooks removed first (nothing new is queued; a
//           fail-closed node keeps them, see release_hooks), then the workers send the verdicts
//           they owe and exit, then the control socket goes.
//
//   pairwalld [-c CONFIG] [-f]   run
//   pairwalld --check            validate the configuration and the rule file, then exit
//   pairwalld --reload           have the running daemon reload and wait for it (ExecReload), exit
//   pairwalld --cleanup          release what a stopped instance left behind (ExecStopPost), exit
//   pairwalld --install-hooks    put the hooks in place before any daemon listens (boot), exit
//   pairwalld --remove-hooks     remove the hooks while no daemon listens, exit
#include <arpa/inet.h>
#include <pthread.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <array>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/control/boot_epoch.h"
#include "daemon/control/client.h"
#include "daemon/control/config.h"
#include "daemon/control/dataplane.h"
#include "daemon/control/metrics.h"
#include "daemon/control/metrics_server.h"
#include "daemon/control/progress_watch.h"
#include "daemon/control/server.h"
#include "daemon/control/service.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/rules/compile.h"
#include "daemon/io/address_watch.h"
#include "daemon/io/hooks.h"
#include "daemon/io/host_addresses.h"
#include "daemon/io/kernel_queue_stats.h"
#include "daemon/io/nfqueue.h"
#include "daemon/io/pcaplog.h"
#include "daemon/io/prerouting_matches.h"
#include "daemon/sync/sync_config.h"
#include "daemon/sync/sync_service.h"
#include "failover/advert_codec.h"
#include "failover/failover_config.h"
#include "failover/failover_metrics.h"
#include "failover/failover_service.h"
#include "failover/vips.h"

namespace {

using namespace pairwall;
namespace asio = boost::asio;
using std::chrono::steady_clock;

// A worker with packets waiting in its kernel queue and no progress for this long is stuck: the
// watchdog stops and `health` says so.
constexpr auto kStuckAfter = std::chrono::seconds(3);

constexpr const char* kUsage =
    R"(usage: pairwalld [-c CONFIG] [-f] [--check | --reload | --cleanup | --install-hooks | --remove-hooks]

  -c CONFIG        configuration file (default /etc/pairwall/pairwall.toml)
  -f               log to stderr (foreground); without it, to syslog unless started by systemd
  --check          validate the configuration and the rule file, print a summary, exit
  --reload         have the running pairwalld reload (as SIGHUP) and wait for the outcome: exit 0
                   once it runs the configured rules, 1 with the reason when it refused them
  --cleanup        remove the packet hooks and failover VIPs a stopped pairwalld left behind, exit
                   (as the unit's ExecStopPost: a fail-closed node's hooks are kept)
  --install-hooks  install the packet hooks before any pairwalld listens (early at boot), exit
  --remove-hooks   remove the packet hooks while no pairwalld listens, exit
)";

struct Options {
  std::string config = std::string(control::kDefaultConfigPath);
  bool foreground = false;
  bool check = false;
  bool reload = false;
  bool cleanup = false;
  bool install_hooks = false;
  bool remove_hooks = false;
};

engine::Millis monotonic_now() {
  // The clock the queue workers pass to Engine::process_batch() (nfqueue.h).
  return std::chrono::duration_cast<engine::Millis>(steady_clock::now().time_since_epoch());
}

// "<3>" and friends: journald reads a syslog priority prefix on each stderr line (sd-daemon(3)).
class PriorityFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    static constexpr const char* kPrefix[] = {"<7>", "<7>", "<6>", "<4>", "<3>", "<2>", "<6>"};
    const char* p = kPrefix[static_cast<int>(msg.level)];
    dest.append(p, p + 3);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<PriorityFlag>(); }
};

void setup_logging(bool foreground, const std::string& level) {
  const bool journal = std::getenv("JOURNAL_STREAM") != nullptr;
  std::shared_ptr<spdlog::logger> logger;
  if (journal) {
    // The journal timestamps each line itself.
    logger = std::make_shared<spdlog::logger>("pairwalld", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<PriorityFlag>('*').set_pattern("%*%v");
    logger->set_formatter(std::move(formatter));
  } else if (foreground) {
    logger = std::make_shared<spdlog::logger>("pairwalld", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  } else {
    logger = std::make_shared<spdlog::logger>(
        "pairwalld", std::make_shared<spdlog::sinks::syslog_sink_mt>("pairwalld", LOG_PID, LOG_DAEMON, true));
    logger->set_pattern("%v");
  }
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

// `translations`: the rule set has nat/rdr/binat rules, which need the pre-routing hook (hooks.h):
// the one loaded at start, or a later one that brings the first (ControlService::publish).
io::HooksConfig hooks_config(const control::Config& c, bool translations) {
  io::HooksConfig h;
  h.queue_first = c.queue.first;
  h.queue_last = static_cast<uint16_t>(c.queue.first + c.queue.count - 1);
  h.bypass = c.queue.fail_open;
  h.input = h.output = c.queue.hooks == control::HookSet::ForwardLocal;
  h.prerouting = translations;
  h.excluded_interfaces = c.queue.exclude_interfaces;
  // pf's customary `set skip on lo`: the node's own loopback traffic (control clients, metrics
  // scrapes) is never queued, neither on INPUT nor before routing.
  if (h.input || h.prerouting) h.excluded_interfaces.push_back("lo");
  // As pf's `set skip on $sync_if`: the node's own sync datagrams, and nothing else, cross the
  // dedicated sync link; queued with the node's own traffic, a rule set that forgot them would cut
  // the pair's sync. Before routing too: the datagrams to this node would meet the pre-routing
  // queue, and a stopped fail-closed node would drop them (and an operator's way in over that link).
  if ((h.input || h.output || h.prerouting) && c.sync)
    h.excluded_interfaces.push_back(sync::parse_sync_config(*c.sync, c.file).interface);
  // And the failover group's advertisements, to and from this node, as pf's users must pass CARP:
  // a rule set that forgot them would make both nodes master.
  if ((h.input || h.output) && c.failover) {
    const failover::FailoverConfig f = failover::parse_failover_config(*c.failover, c.file);
    // Matched by their groups and by TTL 255, which every advertisement is sent with (RFC 5798
    // 5.1.1.3; the builtin election's receivers refuse any other): a forwarded datagram has lost
    // a hop by the time it meets the FORWARD hook, so forwarded traffic to the same group and port
    // still meets the rules, even where the configured group is one a multicast router forwards.
    constexpr auto advert_ttl = static_cast<uint8_t>(failover::kAdvertTtl);
    if (f.driver == failover::Driver::Keepalived) {
      // VRRP (RFC 5798 5.1.1.3, TTL 255) to any address: keepalived's `unicast_peer` sends it to
      // the peer's own address, not to 224.0.0.18 / ff02::12.
      h.excluded_destinations.push_back({engine::Family::V4, 112, "", 0, advert_ttl});
      h.excluded_destinations.push_back({engine::Family::V6, 112, "", 0, advert_ttl});
    } else {
      char text[INET6_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, f.group4.data(), text, sizeof text);
      h.excluded_destinations.push_back({engine::Family::V4, 17, text, f.port, advert_ttl});
      inet_ntop(AF_INET6, f.group6.data(), text, sizeof text);
      h.excluded_destinations.push_back({engine::Family::V6, 17, text, f.port, advert_ttl});
    }
  }
  // SO_MARK of our own RST / ICMP replies, and the mark of a packet the engine claimed before
  // routing (translated there): with `hooks = "forward+local"` a reply is not filtered by the
  // daemon that sent it, and a claimed packet is not judged again after routing.
  h.bypass_mark = c.queue.mark;
  return h;
}

// What the hooks' pre-routing chain queues beyond this node, for `pairwallctl status`.
void show_prerouting_matches(control::ControlService& service, const io::HooksConfig& hooks) {
  std::vector<std::string> listed;
  for (const io::PreroutingMatch& m : hooks.prerouting_matches) listed.push_back(io::to_string(m));
  service.set_prerouting_matches(std::move(listed));
}

// The sections other components own: validated here so that --check and start-up refuse them
// with the same one-line message.
void validate_component_sections(const control::Config& c) {
  if (c.sync) (void)sync::parse_sync_config(*c.sync, c.file);
  if (c.failover) (void)failover::parse_failover_config(*c.failover, c.file);
}

// Where rules that name interfaces as addresses get the host's addresses. The failover's virtual
// addresses count as their interfaces' on both nodes, held or not, so that both load the same rules.
std::function<engine::rules::InterfaceAddresses()> interface_addresses(const control::Config& c) {
  std::vector<failover::Vip> vips;
  if (c.failover) vips = failover::parse_failover_config(*c.failover, c.file).vips;
  return [vips] {
    engine::rules::InterfaceAddresses addresses = io::host_interface_addresses();
    for (const failover::Vip& v : vips) {
      engine::rules::InterfaceAddress a;
      a.family = v.family == AF_INET ? engine::Family::V4 : engine::Family::V6;
      a.address = a.family == engine::Family::V4 ? engine::IpAddress::from_v4_bytes(v.address.data())
                                                 : engine::IpAddress::from_v6_bytes(v.address.data());
      a.prefix_length = v.prefix_len;
      addresses[v.interface].push_back(a);
    }
    return addresses;
  };
}

int check(const control::Config& c) {
  engine::InterfaceRegistry interfaces;
  engine::rules::InterfaceAddresses addresses;
  try {
    addresses = interface_addresses(c)();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pairwalld: cannot read the interfaces' addresses: %s\n", e.what());
    return 1;
  }
  std::vector<engine::rules::RuleError> notices;
  auto compiled = engine::rules::load_rules_file(c.rules.file, interfaces, addresses, &notices);
  if (auto* e = std::get_if<engine::rules::RuleError>(&compiled)) {
    std::fprintf(stderr, "pairwalld: %s\n", e->to_string().c_str());
    return 1;
  }
  for (const auto& notice : notices) std::fprintf(stderr, "pairwalld: %s\n", notice.to_string().c_str());
  const auto& rules = std::get<std::shared_ptr<const engine::rules::RuleSet>>(compiled);
  std::printf("%s: ok (node %u \"%s\", queues %u..%u, %s)\n%s: ok (%zu rules, state limit %u)\n",
              c.file.c_str(), c.node.id, c.node.name.c_str(), c.queue.first,
              c.queue.first + c.queue.count - 1, c.queue.fail_open ? "fail-open" : "fail-closed",
              c.rules.file.c_str(), rules->size(),
              c.engine.state_limit ? *c.engine.state_limit : rules->state_limit());
  return 0;
}

// Asks the running daemon to reload (the Reload request: config, rule file, keys) and waits for it,
// so that `systemctl reload` (ExecReload) ends when the new rules run and fails when they were
// refused, with the reason, where a signal would return at once whatever became of the reload.
int request_reload(const control::Config& c) {
  try {
    // A compile of a large rule set with large tables takes seconds; this waits for it.
    control::ControlClient client(c.control.socket, std::chrono::minutes(5));
    control::Request request;
    request.mutable_reload();
    const control::Response response = client.call(request);
    if (!response.ok()) {
      std::fprintf(stderr, "pairwalld: reload refused, the running rules and keys stay: %s\n",
                   response.error().c_str());
      return 1;
    }
    const auto& loaded = response.rules_loaded();
    std::printf("pairwalld: rules reloaded from %s: %u rules, %llu states kept\n", loaded.path().c_str(),
                loaded.rule_count(), static_cast<unsigned long long>(loaded.states_kept()));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pairwalld: reload: %s\n", e.what());
    return 1;
  }
}

// Whether a daemon answers on the control socket, said as an error: its hooks and VIPs are in use,
// and removing them would leave it filtering nothing.
bool refused_while_running(const control::Config& c, std::string_view who) {
  if (!control::socket_answers(c.control.socket)) return false;
  spdlog::error("{}: a pairwalld answers on {}: stop it first (systemctl stop pairwalld)", who,
                c.control.socket);
  return true;
}

// Removes the hooks (both families, the pre-routing chain whether or not this config would install
// it).
int remove_hooks(const control::Config& c, std::string_view who) {
  try {
    io::Hooks(hooks_config(c, /*translations=*/false)).remove();
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", who, e.what());
    return 1;
  }
  spdlog::info("{}: hooks removed (chain {}){}", who, io::HooksConfig{}.chain,
               c.queue.fail_open ? "" : ": the node forwards unfiltered until a pairwalld listens");
  return 0;
}

// Releases what a stopped daemon leaves behind, each part even when another fails: its hooks, and
// the VIPs of a builtin failover group. Run by systemd after every stop (ExecStopPost, which sets
// SERVICE_RESULT), a fail-closed node keeps its hooks however the daemon ended, as the daemon
// itself does (release_hooks in run()): their queues, with no daemon to read them, drop what they
// are given until a daemon listens again, where removing them would let every packet through
// uninspected until the restart. Run by hand, it removes them: the operator opens the node.
int cleanup(const control::Config& c) {
  if (refused_while_running(c, "cleanup")) return 1;
  int status = 0;
  const char* result = std::getenv("SERVICE_RESULT");
  if (result != nullptr && !c.queue.fail_open) {
    spdlog::info(
        "cleanup: the daemon ended ({}): hooks kept, so that nothing passes unfiltered (fail_open = "
        "false) until a daemon listens again; pairwalld --remove-hooks opens the node",
        result);
  } else {
    status = remove_hooks(c, "cleanup");
  }
  // Failover (failover/): a killed master's VIPs stay in the kernel until their lease ends;
  // remove them now.
  if (c.failover) {
    std::vector<std::string> errors;
    const auto removed =
        failover::release_vips_from_config(failover::parse_failover_config(*c.failover, c.file), &errors);
    for (const auto& e : errors) spdlog::error("cleanup: {}", e);
    spdlog::info("cleanup: {} failover VIPs removed", removed);
    if (!errors.empty()) status = 1;
  }
  return status;
}

// The hooks alone, early at boot (pairwall-hooks.service, before any interface is configured): a
// fail-closed node's queues, with no listener yet, drop what they are given until pairwalld starts
// and takes the hooks over (make-before-break, io::Hooks::install). Without them the node would
// forward unfiltered from the moment its interfaces came up until then.
int install_hooks(const control::Config& c) {
  if (control::socket_answers(c.control.socket)) {
    spdlog::info("install-hooks: a pairwalld answers on {}: its hooks are in place", c.control.socket);
    return 0;
  }
  try {
    // Without the pre-routing chain, which the rules decide: the daemon adds it when it takes over.
    io::Hooks(hooks_config(c, /*translations=*/false)).install();
  } catch (const std::exception& e) {
    spdlog::error("install-hooks: {}", e.what());
    return 1;
  }
  spdlog::info(
      "install-hooks: hooks installed (chain {}); {} until pairwalld listens", io::HooksConfig{}.chain,
      c.queue.fail_open ? "packets pass uninspected (fail_open = true)" : "forwarded packets are dropped");
  return 0;
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

void notify(const std::string& text) {
  sd_notify(0, text.c_str());
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

int run(const control::Config& c) {
  // The daemon's signals are taken by the loop's signal_set, whose handler the kernel may run on any
  // thread that does not block them, and Asio installs it without SA_RESTART: on a packet worker,
  // the sync or the failover thread it would break a blocking call with EINTR (the failover's
  // netlink exchange with the kernel among them). Threads inherit the mask of the thread that
  // starts them: the signals are blocked while start-up makes them, and let in on this thread alone
  // just before the loop runs (one that came meanwhile is then taken).
  sigset_t daemon_signals;
  sigemptyset(&daemon_signals);
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&daemon_signals, sig);
  sigset_t start_mask;
  pthread_sigmask(SIG_BLOCK, &daemon_signals, &start_mask);

  // One epoch for this start, shared by sync and the advertisements, and the start of its state ids.
  const control::BootEpoch epoch = control::take_boot_epoch(c.node.epoch_file, control::wall_clock_us());
  if (!epoch.warning.empty()) spdlog::warn("{}", epoch.warning);
  const uint64_t boot_epoch = epoch.epoch;

  engine::EngineConfig engine_config;
  engine_config.node_id = c.node.id;
  engine_config.shards = c.engine.shards;
  engine_config.first_state_counter = control::first_state_counter(boot_epoch);
  engine::Engine engine(engine_config);

  control::ControlService service(c, engine, monotonic_now);
  service.set_interface_addresses(interface_addresses(c));
  const auto loaded = service.load_rules(c.rules.file);
  if (!loaded.ok) {
    spdlog::error("{}", loaded.error);
    return 1;
  }
  for (const std::string& warning : loaded.warnings) spdlog::warn("{}", warning);
  spdlog::info("node {} ({}): {} rules from {}", c.node.id, c.node.name, engine.rules()->size(),
               c.rules.file);

  // Declared before the loop: requests queued on the loop hold sessions whose sockets are the
  // control socket's loop's, and must be freed while that loop exists.
  ControlSocketRunner control_socket;
  asio::io_context loop;
  // Registered before anything is installed: a SIGTERM during start-up waits for the loop
  // instead of killing the process with its hooks in place.
  asio::signal_set signals(loop, SIGTERM, SIGINT, SIGHUP);
  std::unique_ptr<control::ControlServer> control_server;
  std::unique_ptr<control::MetricsServer> metrics_server;
  control::MetricsRegistry registry;
  std::unique_ptr<io::PcapLog> pcap;
  std::unique_ptr<io::NfQueue> queues;
  std::unique_ptr<QueueDataPlane> data_plane;
  control::ProgressWatch watch(kStuckAfter);
  std::unique_ptr<io::Hooks> hooks;
  bool hooks_installed = false;
  std::unique_ptr<sync::SyncService> sync_service;
  bool defer_enabled = false;
  std::unique_ptr<FailoverRunner> failover;
  // When the daemon ends, however it ends (a signal, or a start that failed after the hooks went
  // in), a fail-closed node keeps its hooks: their queues, with no listener, drop what they are
  // given until the next daemon takes them over make-before-break, so that `systemctl restart`
  // passes nothing unfiltered. A fail-open node's would pass everything uninspected anyway.
  auto release_hooks = [&] {
    if (!hooks_installed) return;
    if (!c.queue.fail_open) {
      spdlog::info(
          "hooks kept (fail_open = false): nothing passes until a pairwalld listens again; "
          "pairwalld --remove-hooks opens the node");
      return;
    }
    try {
      hooks->remove();
      hooks_installed = false;
      spdlog::info("hooks removed");
    } catch (const std::exception& e) {
      spdlog::error("removing hooks: {} (run pairwalld --remove-hooks)", e.what());
    }
  };

  try {
    control::ControlDispatch dispatch;
    dispatch.immediate = [&service](const control::Request& req, control::Response& resp) {
      return service.handle_at_once(req, resp);
    };
    dispatch.handler_loop = &loop;
    control_server = std::make_unique<control::ControlServer>(
        control_socket.io(), c.control.socket, c.control.socket_mode,
        [&](const control::Request& req, control::Response& resp) {
          service.handle(req, resp);
          if (req.has_rules_load()) {
            if (resp.ok()) {
              spdlog::info("rules loaded from {}: {} rules, {} states kept", resp.rules_loaded().path(),
                           resp.rules_loaded().rule_count(), resp.rules_loaded().states_kept());
              for (const std::string& warning : resp.rules_loaded().warnings()) spdlog::warn("{}", warning);
            } else {
              spdlog::warn("rules load refused, running set kept: {}", resp.error());
            }
          } else if (req.has_flush_states() && resp.ok()) {
            spdlog::info("flushed {} states", resp.flushed().states());
          }
        },
        control::ControlTimeouts{}, std::move(dispatch));
    if (c.metrics.enabled()) {
      metrics_server = std::make_unique<control::MetricsServer>(loop, c.metrics.host, c.metrics.port,
                                                                [&registry] { return registry.render(); });
    }
    if (!c.log.pcap_file.empty()) {
      io::PcapLogConfig pc;
      pc.path = c.log.pcap_file;
      pc.max_file_bytes = c.log.pcap_rotate_bytes;
      pc.files = c.log.pcap_keep;
      pc.workers = c.queue.count;
      pcap = std::make_unique<io::PcapLog>(pc);
    }

    std::optional<sync::SyncConfig> sync_config;
    if (c.sync) sync_config = sync::parse_sync_config(*c.sync, c.file);

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
    if (sync_config && sync_config->defer) {
      qc.defer.enabled = true;
      qc.defer.timeout = sync_config->defer_timeout;
      defer_enabled = true;
    }
    queues = std::make_unique<io::NfQueue>(engine, qc, pcap.get());

    // Sync (daemon/sync/): drains the workers' state change rings and applies the peer's records;
    // started before the hooks so that the bulk request goes out as early as possible. With
    // defer, each worker learns from its ring how much of it the peer has.
    if (sync_config) {
      sync_service =
          std::make_unique<sync::SyncService>(engine, std::move(*sync_config), c.node.id, boot_epoch);
      for (std::size_t i = 0; i < queues->workers(); ++i) {
        sync::SyncService::SyncedFn on_synced;
        if (qc.defer.enabled) {
          on_synced = [&queues, i](uint64_t synced, bool peer_up) { queues->on_synced(i, synced, peer_up); };
        }
        sync_service->add_ring(queues->engine_worker(i).events(), std::move(on_synced));
      }
      sync_service->add_ring(engine.control_events());
      sync_service->set_events_lost([&engine, &queues] {
        uint64_t lost = engine.control_events_lost();
        for (std::size_t i = 0; i < queues->workers(); ++i) lost += queues->engine_worker(i).events_lost();
        return lost;
      });
      if (qc.defer.enabled) {
        queues->set_sync_kick([service = sync_service.get()] { service->kick(); });
        sync_service->set_defer_status([&queues](control::SyncStatus::Defer* out) {
          const DeferTotals d = defer_totals(*queues);
          out->set_held(d.held);
          out->set_holding(d.holding);
          out->set_too_large(d.too_large);
          for (std::size_t k = 0; k < d.released.size(); ++k) {
            (*out->mutable_released())[std::string(
                io::release_cause_name(static_cast<io::ReleaseCause>(k)))] = d.released[k];
          }
        });
      }
    }
    queues->start();
    data_plane = std::make_unique<QueueDataPlane>(*queues);
    service.set_data_plane(data_plane.get());
    service.set_health_probe([&watch] { return watch.stuck(); });
    if (sync_service) {
      sync_service->start();
      service.set_sync(sync_service.get());
      registry.add("sync", [&sync_service](control::MetricWriter& w) { sync_service->render_metrics(w); });
    }

    io::HooksConfig initial = hooks_config(c, engine.rules()->has_translations());
    if (initial.prerouting && service.running_rules() != nullptr)
      initial.prerouting_matches = io::prerouting_matches(*service.running_rules());
    hooks = std::make_unique<io::Hooks>(std::move(initial));
    hooks->install();
    hooks_installed = true;
    show_prerouting_matches(service, hooks->config());
    // A later rule set with translation rules gets the pre-routing hook, and queued there the
    // packets not addressed to this node that its rules may rewrite: the hooks are replaced by a
    // set that has them, make-before-break (io::Hooks::install), on this loop, the one that
    // removes them at the end. Matches are only added while the daemon runs: the connections an
    // earlier set redirected still need their packets translated before routing.
    service.set_prerouting_hook(hooks->config().prerouting, [&](const engine::rules::RuleFile& file) {
      io::HooksConfig wanted = hooks_config(c, /*translations=*/true);
      wanted.prerouting_matches = io::prerouting_matches(file, hooks->config().prerouting_matches);
      if (wanted == hooks->config()) return;
      const bool hook_added = !hooks->config().prerouting;
      auto replacement = std::make_unique<io::Hooks>(std::move(wanted));
      replacement->install();
      hooks = std::move(replacement);
      show_prerouting_matches(service, hooks->config());
      spdlog::info("hooks: pre-routing for translation {} (chain {}), {} matches beyond this node",
                   hook_added ? "added" : "changed", hooks->config().chain,
                   hooks->config().prerouting_matches.size());
    });

    // Failover (failover/): started once the hooks filter, so that this node never holds the VIPs
    // without filtering behind them. Stopped before the hooks go (see after loop.run()).
    if (c.failover) {
      failover::FailoverHooks fh;
      fh.engine_healthy = [&watch] { return !watch.any_stuck(); };
      // Demoted until this node holds the peer's table (DESIGN.md: bulk resync on boot).
      if (sync_service) fh.bulk_sync_complete = [&sync_service] { return sync_service->bulk_done(); };
      failover = std::make_unique<FailoverRunner>(failover::parse_failover_config(*c.failover, c.file),
                                                  c.node.id, std::move(fh), boot_epoch);
      failover->start();
      service.set_failover(&failover->service());
      failover::register_failover_metrics(registry, failover->service());
    }
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    if (failover) failover->stop();
    release_hooks();
    if (queues) queues->stop();
    if (sync_service) sync_service->stop();
    return 1;
  }

  registry.add("engine", [&](control::MetricWriter& w) {
    control::render_core_metrics(service.snapshot(), w);
    service.render_metrics(w);
  });
  registry.add("pairwalld", [&](control::MetricWriter& w) {
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
    for (std::size_t i = 0; i < queues->workers(); ++i) {
      routes_asked += queues->router(i).asked();
      routes_failed += queues->router(i).failed();
      if (const auto* r = queues->reject_counters(i)) {
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
    if (pcap) {
      const auto s = pcap->stats();
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
    if (defer_enabled) {
      const DeferTotals d = defer_totals(*queues);
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
    w.family("pairwall_connections_refused_total", T::Counter,
             "Connections closed at once because their server had its most sessions open, by server: "
             "control (the socket pairwallctl and health checks use) or metrics.");
    w.sample({{"server", "control"}}, control_server->refused());
    if (metrics_server) w.sample({{"server", "metrics"}}, metrics_server->refused());
    w.family("pairwall_worker_stuck", T::Gauge,
             "1 while a packet worker makes no progress with packets waiting.");
    w.sample(uint64_t{watch.stuck() ? 1u : 0u});
  });

  control_socket.start(*control_server);
  if (metrics_server) {
    metrics_server->start();
    spdlog::info("metrics on http://{}:{}/metrics", c.metrics.host, c.metrics.port);
  }
  spdlog::info("filtering on queues {}..{} ({}, hooks {}{}), control socket {}", c.queue.first,
               c.queue.first + c.queue.count - 1, c.queue.fail_open ? "fail-open" : "fail-closed",
               c.queue.hooks == control::HookSet::Forward ? "forward" : "forward+local",
               hooks->config().prerouting ? ", pre-routing for translation" : "", c.control.socket);

  auto status_line = [&] {
    const auto s = service.snapshot();
    return "STATUS=" + std::to_string(s.rules.size()) + " rules, " + std::to_string(s.states) + " states, " +
           std::to_string(s.packets) + " packets, " + std::to_string(s.drops()) + " dropped";
  };
  notify("READY=1\n" + status_line());

  // A reload (SIGHUP, or the Reload request of `pairwalld --reload`, the unit's ExecReload) reads
  // the config again, as a restart would, and takes what it names now: the [rules] file (even after
  // `pairwallctl rules load` of another) and the sync and failover keys (key_file,
  // accept_key_file), so that a pair changes its keys without a restart, which would hand the
  // group over with the peer's states unsynced (README "Changing the keys"). All or nothing: the
  // keys are read before the rules are compiled and taken after they are published. The other
  // settings need a restart. Nothing thrown on the way (a compile out of memory) may end the
  // daemon: the running set stays.
  // `who` names the reload's cause in the log: "SIGHUP", or "reload" for the request.
  auto reload = [&](std::string_view who) -> control::ControlService::LoadResult {
    notify("RELOADING=1");
    control::ControlService::LoadResult result;
    try {
      const control::Config now = control::load_config(c.file);
      validate_component_sections(now);  // a config that would not start is not half taken
      std::optional<sync::SyncConfig> sync_keys;
      std::optional<failover::FailoverConfig> failover_keys;
      if (sync_service && now.sync) sync_keys = sync::parse_sync_config(*now.sync, now.file);
      if (failover && now.failover) {
        failover_keys = failover::parse_failover_config(*now.failover, now.file);
        if (failover_keys->driver != failover::Driver::Builtin) failover_keys.reset();
      }
      queues->refresh_interfaces();
      result = service.load_rules(now.rules.file);
      if (result.ok) {
        if (sync_keys) sync_service->set_keys(std::move(sync_keys->key), std::move(sync_keys->accept_key));
        if (failover_keys) {
          failover->service().set_keys(std::move(failover_keys->key), std::move(failover_keys->accept_key));
        }
        spdlog::info("{}: rules reloaded from {}: {} rules, {} states kept", who, now.rules.file,
                     result.rule_count, engine.states().size());
        for (const std::string& warning : result.warnings) spdlog::warn("{}: {}", who, warning);
        if (sync_keys || failover_keys) spdlog::info("{}: keys re-read from {}", who, now.file);
      }
    } catch (const std::exception& e) {
      result = {false, e.what(), 0, {}};
    }
    if (!result.ok)
      spdlog::warn("{}: rules reload refused, running rules and keys kept: {}", who, result.error);
    notify("READY=1\n" + status_line());
    return result;
  };
  service.set_reload([reload] { return reload("reload"); });

  // Signals.
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        if (sig == SIGHUP) {
          reload("SIGHUP");
          signals.async_wait(on_signal);
          return;
        }
        spdlog::info("{}: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        notify("STOPPING=1");
        loop.stop();
      };
  signals.async_wait(on_signal);

  // Expiry every second (pf purges every 10 s; ours is O(expired), so a short period is cheap and
  // keeps the table close to its true size). Without sync nobody else drains the state change
  // rings: drain them here so that they do not count as lost. The boot epoch file's floor is kept
  // ahead of the state ids made (a failed write is warned about, the daemon goes on).
  asio::steady_timer tick(loop);
  uint64_t ticks = 0;
  control::EpochFloor epoch_floor(c.node.epoch_file, boot_epoch);
  std::function<void(const boost::system::error_code&)> on_tick = [&](const boost::system::error_code& ec) {
    if (ec) return;
    engine.expire(monotonic_now());
    if (const std::string error = epoch_floor.update(engine.next_state_counter()); !error.empty())
      spdlog::warn("{}", error);
    if (!sync_service) {
      engine::StateRecord record;
      for (std::size_t i = 0; i < queues->workers(); ++i) {
        while (queues->engine_worker(i).events().pop(record)) {
        }
      }
      while (engine.control_events().pop(record)) {
      }
    }
    watch.tick(steady_clock::now(), progress_samples(*queues));
    if (pcap) {
      for (const io::PcapLogEvent& e : pcap->take_events()) {
        if (e.failing) {
          spdlog::error("{}", e.message);
        } else {
          spdlog::info("{}", e.message);
        }
      }
    }
    if (++ticks % 5 == 0) notify(status_line());
    tick.expires_after(std::chrono::seconds(1));
    tick.async_wait(on_tick);
  };
  tick.expires_after(std::chrono::seconds(1));
  tick.async_wait(on_tick);

  // Sources over a rule's connection limits with `overload <table>`: pf inserts them at once; here
  // the workers queue them and the control loop adds them within 100 ms (each further
  // connection of theirs meanwhile is still refused by the limit). Each batch recompiles the
  // rules, which takes longer as tables grow (pairwall-check parses and compiles 199,000 entries
  // in 0.5 s): the next batch waits four times what this one took, so that a flood of offenders
  // holds the control loop a fifth of its time at most. Refusals are logged once per 10 s.
  asio::steady_timer overload_tick(loop);
  std::vector<engine::SourceOverload> overloads;
  auto last_refusal_log = std::chrono::steady_clock::now() - std::chrono::seconds(10);
  std::size_t refusals_unlogged = 0;
  std::function<void(const boost::system::error_code&)> on_overload_tick =
      [&](const boost::system::error_code& ec) {
        if (ec) return;
        const auto started = std::chrono::steady_clock::now();
        overloads.clear();
        engine::SourceOverload o;
        for (std::size_t i = 0; i < queues->workers(); ++i) {
          while (queues->engine_worker(i).overloads().pop(o)) overloads.push_back(o);
        }
        if (!overloads.empty()) {
          control::ControlService::OverloadResult r;
          try {
            r = service.apply_overloads(overloads);
          } catch (const std::exception& e) {
            r.error = std::string("overload: tables kept: ") + e.what();
            r.refused = overloads.size();
          }
          for (const std::string& line : r.added) spdlog::warn("overload: added {}", line);
          if (r.states_killed != 0) spdlog::warn("overload: {} states flushed", r.states_killed);
          refusals_unlogged += r.refused;
          if (!r.error.empty() && started - last_refusal_log >= std::chrono::seconds(10)) {
            spdlog::error("{} ({} sources not added since the last such message)", r.error,
                          refusals_unlogged);
            last_refusal_log = started;
            refusals_unlogged = 0;
          }
        }
        const auto took = std::chrono::steady_clock::now() - started;
        overload_tick.expires_after(
            std::max<std::chrono::steady_clock::duration>(std::chrono::milliseconds(100), 4 * took));
        overload_tick.async_wait(on_overload_tick);
      };
  overload_tick.expires_after(std::chrono::milliseconds(100));
  overload_tick.async_wait(on_overload_tick);

  // Interfaces named as addresses follow the host's addresses: after a burst of address events
  // settles (an interface brought up adds several at once), the tables made of them are set anew.
  // An interface renamed or removed: the workers map ifindexes to names anew.
  asio::steady_timer address_settle(loop);
  io::AddressWatch address_watch(
      loop,
      [&] {
        address_settle.expires_after(std::chrono::milliseconds(200));
        address_settle.async_wait([&](const boost::system::error_code& ec) {
          if (ec) return;
          control::ControlService::RefreshResult r;
          try {
            r = service.refresh_interface_addresses();
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
      [&] { queues->refresh_interfaces(); });
  try {
    address_watch.start();
  } catch (const std::exception& e) {
    spdlog::warn("interface addresses and names are read at rule loads only: {}", e.what());
  }

  // The watchdog is fed from this loop only while no worker is stuck: a wedged worker (or a
  // wedged loop) lets systemd restart the daemon.
  asio::steady_timer watchdog(loop);
  uint64_t watchdog_usec = 0;
  std::function<void(const boost::system::error_code&)> on_watchdog =
      [&](const boost::system::error_code& ec) {
        if (ec) return;
        if (const auto& why = watch.stuck()) {
          spdlog::error("{}: not feeding the watchdog", *why);
          notify("STATUS=" + *why);
        } else {
          notify("WATCHDOG=1");
        }
        watchdog.expires_after(std::chrono::microseconds(watchdog_usec / 2));
        watchdog.async_wait(on_watchdog);
      };
  if (sd_watchdog_enabled(0, &watchdog_usec) > 0 && watchdog_usec > 0) {
    watchdog.expires_after(std::chrono::microseconds(watchdog_usec / 2));
    watchdog.async_wait(on_watchdog);
  }

  pthread_sigmask(SIG_SETMASK, &start_mask, nullptr);
  // A handler that throws (a table rebuilt out of memory) is logged and the loop goes on: ending
  // here would drop every state and leave a fail-closed node's hooks with nothing behind them.
  for (;;) {
    try {
      loop.run();
      break;
    } catch (const std::exception& e) {
      spdlog::error("event loop: {}: carried on", e.what());
    }
  }

  control_socket.stop();
  // Failover: the leaving advertisement and the VIPs released while the hooks still filter.
  if (failover) failover->stop();
  release_hooks();
  queues->stop();
  if (sync_service) sync_service->stop();
  if (metrics_server) metrics_server->stop();
  const auto s = service.snapshot();
  spdlog::info("stopped: {} packets, {} dropped, {} states at exit", s.packets, s.drops(), s.states);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-c" && i + 1 < argc) {
      opt.config = argv[++i];
    } else if (a == "-f") {
      opt.foreground = true;
    } else if (a == "--check") {
      opt.check = true;
    } else if (a == "--reload") {
      opt.reload = true;
    } else if (a == "--cleanup") {
      opt.cleanup = true;
    } else if (a == "--install-hooks") {
      opt.install_hooks = true;
    } else if (a == "--remove-hooks") {
      opt.remove_hooks = true;
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "pairwalld: unknown argument '%s'\n\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (int{opt.check} + int{opt.reload} + int{opt.cleanup} + int{opt.install_hooks} + int{opt.remove_hooks} >
      1) {
    std::fprintf(stderr,
                 "pairwalld: --check, --reload, --cleanup, --install-hooks and --remove-hooks exclude each "
                 "other\n");
    return 2;
  }

  control::Config config;
  bool config_broken = false;
  try {
    config = control::load_config(opt.config);
    validate_component_sections(config);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "pairwalld: %s\n", e.what());
    if (!opt.remove_hooks && !opt.install_hooks) return 1;
    // A broken configuration is the usual reason a restart failed and left a fail-closed node's
    // hooks in place: the way to open the node must not depend on it. The hooks' names are fixed;
    // only the control socket checked for a running daemon falls back to its default. At boot, it
    // must not leave the node forwarding unfiltered, with no daemon to start either: the defaults'
    // hooks are fail-closed, as OpenBSD's rc loads a default-deny rule set that stays when pf.conf
    // does not load; its exit status still says the configuration failed.
    std::fprintf(stderr, "pairwalld: %s the hooks by their default names all the same\n",
                 opt.remove_hooks ? "removing" : "installing fail-closed");
    config = control::Config{};
    config_broken = true;
  }
  if (opt.check) return check(config);
  if (opt.reload) return request_reload(config);

  setup_logging(opt.foreground || opt.cleanup || opt.install_hooks || opt.remove_hooks, config.log.level);
  if (opt.cleanup) return cleanup(config);
  if (opt.install_hooks) return install_hooks(config) != 0 || config_broken ? 1 : 0;
  if (opt.remove_hooks)
    return refused_while_running(config, "remove-hooks") ? 1 : remove_hooks(config, "remove-hooks");
  return run(config);
}
