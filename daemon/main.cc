// pairwalld: one firewall node (DESIGN.md "One node, one process"). This file reads the command
// line and runs what it asks for: the node itself (node.h), or one of the one-shot commands that
// check its configuration or handle its hooks while no daemon runs.
//
//   pairwalld [-c CONFIG] [-f]   run
//   pairwalld --check            validate the configuration and the rule file, then exit
//   pairwalld --reload           have the running daemon reload and wait for it (ExecReload), exit
//   pairwalld --cleanup          release what a stopped instance left behind (ExecStopPost), exit
//   pairwalld --install-hooks    put the hooks in place before any daemon listens (boot), exit
//   pairwalld --remove-hooks     remove the hooks while no daemon listens, exit
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "daemon/component_config.h"
#include "daemon/control/boot_epoch.h"
#include "daemon/control/client.h"
#include "daemon/control/config.h"
#include "daemon/control/server.h"
#include "daemon/engine/rules/compile.h"
#include "daemon/io/hooks.h"
#include "daemon/node.h"
#include "failover/failover_config.h"
#include "failover/leaving.h"
#include "failover/vips.h"

namespace {

using namespace pairwall;
using node::hooks_config;
using node::interface_addresses;
using node::validate_component_sections;

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
    for (const std::string& warning : loaded.warnings())
      std::fprintf(stderr, "pairwalld: %s\n", warning.c_str());
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

// Sends the leaving advertisement a killed daemon could not (failover/leaving.h), so that its
// backup takes the group now instead of after the master-down interval. Under an epoch of its own,
// taken as a start takes one: above the dead daemon's, and below the next start's. A failure only
// costs that interval, and is warned about.
void leave_group(const control::Config& c, const failover::FailoverConfig& group) {
  const control::BootEpoch epoch = control::take_boot_epoch(c.node.epoch_file, control::wall_clock_us());
  if (!epoch.warning.empty()) spdlog::warn("cleanup: {}", epoch.warning);
  const failover::LeavingResult left = failover::send_leaving_adverts(group, c.node.id, epoch.epoch);
  for (const std::string& e : left.errors) spdlog::warn("cleanup: {}", e);
  spdlog::info("cleanup: leaving advertisement sent on {} of {} channels", left.sent, left.channels);
}

// Releases what a stopped daemon leaves behind, each part even when another fails: its hooks, and
// the VIPs of a builtin failover group, whose backup is then told the node left. Run by systemd
// after every stop (ExecStopPost, which sets SERVICE_RESULT), a fail-closed node keeps its hooks
// however the daemon ended, as the daemon itself does (Node::release_hooks in node.cc): their
// queues, with no daemon to read them, drop what they are given until a daemon listens again, where
// removing them would let every packet through uninspected until the restart. Run by hand, it
// removes them: the operator opens the node.
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
    const failover::FailoverConfig group = failover::parse_failover_config(*c.failover, c.file);
    std::vector<std::string> errors;
    const auto removed = failover::release_vips_from_config(group, &errors);
    for (const auto& e : errors) spdlog::error("cleanup: {}", e);
    spdlog::info("cleanup: {} failover VIPs removed", removed);
    if (!errors.empty()) status = 1;
    if (group.driver == failover::Driver::Builtin) leave_group(c, group);
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
  return node::run(config);
}
