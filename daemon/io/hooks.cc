#include "daemon/io/hooks.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "daemon/engine/interfaces.h"
#include "daemon/io/spawn.h"

namespace pairwall::io {
namespace {

constexpr const char* kBuiltins[] = {"FORWARD", "INPUT", "OUTPUT"};
// Chain names are limited to 28 characters (XT_EXTENSION_MAXNAMELEN - 1); the defrag chain adds
// its suffix, and a replacement being installed (Hooks::install) its own.
constexpr std::string_view kDefragSuffix = "_DEFRAG";
constexpr std::string_view kNextSuffix = "-next";
constexpr std::size_t kMaxChain = 28 - kDefragSuffix.size() - kNextSuffix.size();
// A jump is deleted one copy at a time; a crashed run leaves at most one per start, so this many
// means something else keeps adding them.
constexpr int kMaxJumpCopies = 32;

const std::string& binary(const HooksConfig& config, engine::Family family) {
  return family == engine::Family::V4 ? config.iptables : config.ip6tables;
}

Command base(const HooksConfig& config, engine::Family family, const char* table = "filter") {
  // -w 10: wait up to 10 s for the xtables lock held by another iptables, rather than fail.
  return {binary(config, family), "-w", "10", "-t", table};
}

Command mangle(const HooksConfig& config, engine::Family family) {
  return base(config, family, "mangle");
}

Command with(Command command, std::initializer_list<std::string> args) {
  command.insert(command.end(), args.begin(), args.end());
  return command;
}

// `rule` followed by the NFQUEUE target of `config`'s queues.
Command queue_rule(const HooksConfig& config, Command rule) {
  rule = with(std::move(rule), {"-j", "NFQUEUE"});
  if (config.queue_first == config.queue_last) {
    rule = with(std::move(rule), {"--queue-num", std::to_string(config.queue_first)});
  } else {
    rule = with(std::move(rule), {"--queue-balance", std::to_string(config.queue_first) + ":" +
                                                         std::to_string(config.queue_last)});
  }
  if (config.bypass) rule = with(std::move(rule), {"--queue-bypass"});
  return rule;
}

Command mark_return(const HooksConfig& config, const Command& b) {
  const std::string mark = std::to_string(config.bypass_mark);
  return with(b, {"-A", config.chain, "-m", "mark", "--mark", mark + "/" + mark, "-j", "RETURN"});
}

std::string defrag_chain(const HooksConfig& config) {
  return config.chain + std::string(kDefragSuffix);
}

std::string family_name(engine::Family family) {
  return family == engine::Family::V4 ? "IPv4" : "IPv6";
}

}  // namespace

std::string to_string(const PreroutingMatch& match) {
  std::string out = match.family == engine::Family::V4 ? "inet" : "inet6";
  if (!match.interface.empty()) out += " on " + match.interface;
  if (match.protocol != 0) out += " proto " + std::to_string(match.protocol);
  out += " to " + (match.destination.empty() ? std::string("any") : match.destination);
  if (match.port_first != 0) {
    out += " port " + std::to_string(match.port_first);
    if (match.port_last != match.port_first) out += ":" + std::to_string(match.port_last);
  }
  return out;
}

std::string to_string(const Command& command) {
  std::string out;
  for (const auto& arg : command) {
    if (!out.empty()) out += ' ';
    out += arg;
  }
  return out;
}

CommandResult run_command(const Command& argv) {
  CommandResult result;
  if (argv.empty()) return result;
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    result.output = std::string("cannot create a pipe: ") + std::strerror(errno);
    return result;
  }
  pid_t pid = -1;
  const int spawn_error = spawn(argv, SpawnOptions{.output_fd = pipe_fds[1]}, &pid);
  close(pipe_fds[1]);
  if (spawn_error != 0) {
    close(pipe_fds[0]);
    result.output = "cannot run " + argv[0] + ": " + std::strerror(spawn_error);
    return result;
  }
  char buf[4096];
  for (;;) {
    const ssize_t n = read(pipe_fds[0], buf, sizeof(buf));
    if (n > 0) {
      if (result.output.size() < 65536) result.output.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  close(pipe_fds[0]);
  int status = 0;
  pid_t waited = -1;
  while ((waited = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (waited < 0) {
    // ECHILD: SIGCHLD ignored (a disposition exec keeps) has the kernel reap the child unasked.
    // Whatever it did is unknown, and taken for success, a failed command would pass for done.
    result.output = "cannot learn the exit status of " + argv[0] + " (waitpid: " + std::strerror(errno) +
                    "; is SIGCHLD ignored?)";
    return result;
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  while (!result.output.empty() && std::isspace(static_cast<unsigned char>(result.output.back()))) {
    result.output.pop_back();
  }
  return result;
}

void validate(const HooksConfig& config) {
  if (config.chain.empty() || config.chain.size() > kMaxChain) {
    throw HooksError("hooks: chain name '" + config.chain + "' must have 1 to " + std::to_string(kMaxChain) +
                     " characters");
  }
  for (const char c : config.chain) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') {
      throw HooksError("hooks: chain name '" + config.chain +
                       "' may only contain letters, digits, '_' and '-'");
    }
  }
  // iptables would read it as an option.
  if (config.chain.front() == '-') {
    throw HooksError("hooks: chain name '" + config.chain + "' may not start with '-'");
  }
  // Removal flushes the chain it names (and its replacement's install removes the old one): a
  // built-in chain of the filter or mangle table would lose the operator's rules.
  for (const char* builtin : {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}) {
    if (config.chain == builtin) {
      throw HooksError("hooks: chain name '" + config.chain +
                       "' is a built-in chain's; name a chain of its own");
    }
  }
  if (config.queue_last < config.queue_first) {
    throw HooksError("hooks: queue range " + std::to_string(config.queue_first) + ":" +
                     std::to_string(config.queue_last) + " ends before it starts");
  }
  // As the configuration checks them; iptables reads every byte as given (argv, no shell), a
  // trailing '+' as its wildcard.
  for (const auto& name : config.excluded_interfaces) {
    if (!engine::valid_interface_name(name)) {
      throw HooksError("hooks: excluded interface '" + name +
                       "' is not a valid interface name (1-15 characters, no spaces, '/' or ':')");
    }
  }
  for (const ExcludedDestination& d : config.excluded_destinations) {
    std::array<uint8_t, 16> bytes{};
    const int af = d.family == engine::Family::V4 ? AF_INET : AF_INET6;
    const bool ports = d.protocol == 6 || d.protocol == 17;
    // Any destination only with a TTL: at TTL 255 nothing forwarded matches (a hop is gone before
    // the FORWARD hook), so this node's own alone do.
    const bool any = d.address.empty() && d.ttl != 0;
    if ((!any && inet_pton(af, d.address.c_str(), bytes.data()) != 1) || (d.port == 0) == ports) {
      throw HooksError("hooks: excluded destination '" + d.address + "' port " + std::to_string(d.port) +
                       " is not a numeric address of its family, or any address with a TTL, with a port "
                       "for TCP and UDP alone");
    }
  }
  for (const PreroutingMatch& match : config.prerouting_matches) {
    const auto refuse = [&](const std::string& why) {
      std::string what = "hooks: pre-routing match";
      if (!match.interface.empty()) what += " on '" + match.interface + "'";
      if (!match.destination.empty()) what += " to '" + match.destination + "'";
      throw HooksError(what + ": " + why);
    };
    if (!match.interface.empty() && !engine::valid_interface_name(match.interface))
      refuse("not a valid interface name (1-15 characters, no spaces, '/' or ':')");
    if (!match.destination.empty()) {
      const std::size_t slash = match.destination.find('/');
      std::array<uint8_t, 16> bytes{};
      const int af = match.family == engine::Family::V4 ? AF_INET : AF_INET6;
      const unsigned max_length = match.family == engine::Family::V4 ? 32 : 128;
      const std::string length = slash == std::string::npos ? "" : match.destination.substr(slash + 1);
      if (slash == std::string::npos ||
          inet_pton(af, match.destination.substr(0, slash).c_str(), bytes.data()) != 1 || length.empty() ||
          length.size() > 3 || length.find_first_not_of("0123456789") != std::string::npos ||
          std::stoul(length) > max_length) {
        refuse("not a numeric address/length of its family");
      }
    }
    const bool ports = match.protocol == 6 || match.protocol == 17;
    if (match.port_first != 0 && (!ports || match.port_last < match.port_first))
      refuse("destination ports need TCP or UDP and a range in order");
  }
  if (!config.ipv4 && !config.ipv6) throw HooksError("hooks: neither IPv4 nor IPv6 is enabled");
  if (config.prerouting && config.bypass_mark == 0) {
    throw HooksError(
        "hooks: prerouting needs a non-zero bypass_mark: it is how the filter chain lets by "
        "the packets already judged before routing");
  }
}

std::vector<Command> install_commands(const HooksConfig& config, engine::Family family) {
  const Command b = base(config, family);
  const std::string& chain = config.chain;
  std::vector<Command> out;
  out.push_back(with(b, {"-N", chain}));
  if (config.bypass_mark != 0) out.push_back(mark_return(config, b));
  for (const auto& name : config.excluded_interfaces) {
    out.push_back(with(b, {"-A", chain, "-i", name, "-j", "RETURN"}));
    out.push_back(with(b, {"-A", chain, "-o", name, "-j", "RETURN"}));
  }
  for (const ExcludedDestination& d : config.excluded_destinations) {
    if (d.family != family) continue;
    Command rule = with(b, {"-A", chain, "-p", std::to_string(d.protocol)});
    if (!d.address.empty()) rule = with(std::move(rule), {"-d", d.address});
    if (d.port != 0) rule = with(std::move(rule), {"--dport", std::to_string(d.port)});
    if (d.ttl != 0) {
      rule = family == engine::Family::V4
                 ? with(std::move(rule), {"-m", "ttl", "--ttl-eq", std::to_string(d.ttl)})
                 : with(std::move(rule), {"-m", "hl", "--hl-eq", std::to_string(d.ttl)});
    }
    out.push_back(with(std::move(rule), {"-j", "RETURN"}));
  }
  out.push_back(queue_rule(config, with(b, {"-A", chain})));
  if (config.defrag) {
    // Loading a socket match enables nf_defrag for the namespace (xt_socket's checkentry), with
    // no conntrack. The chain is never jumped to, so the match itself never runs.
    out.push_back(with(b, {"-N", defrag_chain(config)}));
    out.push_back(with(b, {"-A", defrag_chain(config), "-m", "socket", "-j", "RETURN"}));
  }
  // Jumps last: the chain is complete before the first packet enters it.
  out.push_back(with(b, {"-I", "FORWARD", "1", "-j", chain}));
  if (config.input) out.push_back(with(b, {"-I", "INPUT", "1", "-j", chain}));
  if (config.output) out.push_back(with(b, {"-I", "OUTPUT", "1", "-j", chain}));
  if (config.prerouting) {
    // The same chain name in the mangle table. No -o: the route is not chosen yet. addrtype LOCAL
    // (the kernel's local routing table) takes the node's own addresses, VIPs included, and leaves
    // the forwarded traffic to FORWARD. Its jump comes last, like the filter ones.
    const Command m = mangle(config, family);
    out.push_back(with(m, {"-N", chain}));
    out.push_back(mark_return(config, m));
    for (const auto& name : config.excluded_interfaces) {
      out.push_back(with(m, {"-A", chain, "-i", name, "-j", "RETURN"}));
    }
    out.push_back(queue_rule(config, with(m, {"-A", chain, "-m", "addrtype", "--dst-type", "LOCAL"})));
    for (const PreroutingMatch& match : config.prerouting_matches) {
      if (match.family != family) continue;
      Command rule = with(m, {"-A", chain});
      if (!match.interface.empty()) rule = with(std::move(rule), {"-i", match.interface});
      if (match.protocol != 0) rule = with(std::move(rule), {"-p", std::to_string(match.protocol)});
      if (!match.destination.empty()) rule = with(std::move(rule), {"-d", match.destination});
      if (match.port_first != 0) {
        const std::string ports =
            match.port_first == match.port_last
                ? std::to_string(match.port_first)
                : std::to_string(match.port_first) + ":" + std::to_string(match.port_last);
        rule = with(std::move(rule), {"--dport", ports});
      }
      out.push_back(queue_rule(config, std::move(rule)));
    }
    out.push_back(with(m, {"-I", "PREROUTING", "1", "-j", chain}));
  }
  return out;
}

Command chain_exists_command(const HooksConfig& config, engine::Family family) {
  return with(base(config, family), {"-S", config.chain});
}

Command delete_jump_command(const HooksConfig& config, engine::Family family, const std::string& builtin) {
  return with(base(config, family), {"-D", builtin, "-j", config.chain});
}

Command flush_chain_command(const HooksConfig& config, engine::Family family) {
  return with(base(config, family), {"-F", config.chain});
}

Command delete_chain_command(const HooksConfig& config, engine::Family family) {
  return with(base(config, family), {"-X", config.chain});
}

Command defrag_exists_command(const HooksConfig& config, engine::Family family) {
  return with(base(config, family), {"-S", defrag_chain(config)});
}

Command flush_defrag_command(const HooksConfig& config, engine::Family family) {
  return with(base(config, family), {"-F", defrag_chain(config)});
}

Command delete_defrag_command(const HooksConfig& config, engine::Family family) {
  return with(base(config, family), {"-X", defrag_chain(config)});
}

Command prerouting_exists_command(const HooksConfig& config, engine::Family family) {
  return with(mangle(config, family), {"-S", config.chain});
}

Command delete_prerouting_jump_command(const HooksConfig& config, engine::Family family) {
  return with(mangle(config, family), {"-D", "PREROUTING", "-j", config.chain});
}

Command flush_prerouting_command(const HooksConfig& config, engine::Family family) {
  return with(mangle(config, family), {"-F", config.chain});
}

Command delete_prerouting_command(const HooksConfig& config, engine::Family family) {
  return with(mangle(config, family), {"-X", config.chain});
}

Hooks::Hooks(HooksConfig config, CommandRunner runner)
    : config_(std::move(config)), runner_(std::move(runner)) {
  validate(config_);
}

// A validated config's staged copy, whose longer name validate() would refuse.
Hooks::Hooks(HooksConfig config, CommandRunner runner, Staged)
    : config_(std::move(config)), runner_(std::move(runner)) {}

namespace {

[[noreturn]] void fail(const Command& command, const CommandResult& r) {
  std::string message = "hooks: '" + to_string(command) + "' ";
  if (r.exit_code < 0) {
    message += "could not run";
  } else {
    message += "failed with exit code " + std::to_string(r.exit_code);
  }
  if (!r.output.empty()) message += ": " + r.output;
  if (r.exit_code == 127 || (r.exit_code < 0 && r.output.rfind("cannot run ", 0) == 0)) {
    message += " (is " + command.front() + " installed and in PATH?)";
  } else if (r.output.find("ermission denied") != std::string::npos) {
    message += " (needs CAP_NET_ADMIN)";
  } else if (r.output.find("addrtype") != std::string::npos) {
    message += " (does this kernel have the addrtype match?)";
  } else if (r.output.find("NFQUEUE") != std::string::npos || r.output.find("socket") != std::string::npos) {
    message += " (does this kernel have the NFQUEUE target and the socket match?)";
  }
  throw HooksError(message);
}

}  // namespace

void Hooks::run_checked(const Command& command) {
  const CommandResult r = runner_(command);
  if (r.exit_code != 0) fail(command, r);
}

// Exit code 1 is iptables' "no such chain / rule"; anything else is a real failure.
bool Hooks::absent_or_fail(const Command& command) {
  const CommandResult r = runner_(command);
  if (r.exit_code == 0) return false;
  if (r.exit_code == 1) return true;
  fail(command, r);
}

void Hooks::delete_jumps(const Command& command, engine::Family family, const std::string& builtin,
                         const char* table) {
  int copies = 0;
  while (!absent_or_fail(command)) {
    if (++copies == kMaxJumpCopies) {
      throw HooksError("hooks: more than " + std::to_string(kMaxJumpCopies) + " jumps from " + builtin +
                       " to " + config_.chain + " in the " + family_name(family) + " " + table +
                       " table; is another process adding them?");
    }
  }
}

void Hooks::remove_prerouting(engine::Family family) {
  const Command exists = prerouting_exists_command(config_, family);
  const CommandResult r = runner_(exists);
  if (r.exit_code == 1) return;
  // iptables-legacy cannot open a mangle table that the kernel lacks and may not load (a container
  // without iptable_mangle): nothing of ours can be in it, and a node without NAT must still stop.
  if (r.exit_code == 3 && r.output.find("Table does not exist") != std::string::npos) return;
  if (r.exit_code != 0) fail(exists, r);
  delete_jumps(delete_prerouting_jump_command(config_, family), family, "PREROUTING", "mangle");
  run_checked(flush_prerouting_command(config_, family));
  run_checked(delete_prerouting_command(config_, family));
}

void Hooks::remove_family(engine::Family family) {
  // The reverse of install: the pre-routing jump went in last.
  remove_prerouting(family);
  if (!absent_or_fail(chain_exists_command(config_, family))) {
    for (const char* builtin : kBuiltins) {
      delete_jumps(delete_jump_command(config_, family, builtin), family, builtin, "filter");
    }
    run_checked(flush_chain_command(config_, family));
    run_checked(delete_chain_command(config_, family));
  }
  if (!absent_or_fail(defrag_exists_command(config_, family))) {
    run_checked(flush_defrag_command(config_, family));
    run_checked(delete_defrag_command(config_, family));
  }
}

void Hooks::remove() {
  remove_own();
  staged().remove_own();  // a replacement a killed run left half done
}

void Hooks::remove_own() {
  if (config_.ipv4) remove_family(engine::Family::V4);
  if (config_.ipv6) remove_family(engine::Family::V6);
}

bool Hooks::installed() {
  for (const auto family : {engine::Family::V4, engine::Family::V6}) {
    if (family == engine::Family::V4 ? !config_.ipv4 : !config_.ipv6) continue;
    if (!absent_or_fail(chain_exists_command(config_, family))) return true;
  }
  return false;
}

Hooks Hooks::staged() const {
  HooksConfig next = config_;
  next.chain = config_.chain + std::string(kNextSuffix);
  return Hooks(std::move(next), runner_, Staged{});
}

// Installs this config's hooks; on failure removes what it added, and only that.
void Hooks::install_fresh() {
  try {
    for (const auto family : {engine::Family::V4, engine::Family::V6}) {
      if (family == engine::Family::V4 ? !config_.ipv4 : !config_.ipv6) continue;
      for (const auto& command : install_commands(config_, family)) run_checked(command);
    }
  } catch (const HooksError&) {
    try {
      remove_own();
    } catch (const HooksError&) {
      // The first error is the one to act on; the rollback's is secondary.
    }
    throw;
  }
}

// The hooks a daemon left (a fail-closed node keeps them whenever its daemon ends, see pairwalld's
// release_hooks) are replaced make-before-break: the new chains and their jumps go in ahead of the old ones,
// then the old ones go, and the new take their names. Every packet meets one complete chain throughout;
// removing first would let the traffic of the whole replacement through unfiltered. A failure at
// any step leaves complete hooks in place (the old, the new, or both), never none.
void Hooks::install() {
  Hooks next = staged();
  const bool old_present = installed();
  if (!old_present && !next.installed()) {
    remove_own();  // a pre-routing chain without the filter chain, say
    install_fresh();
    return;
  }
  if (!old_present) {
    // A run killed while renaming left only the staged hooks, complete: ours go in ahead of them.
    install_fresh();
    next.remove_own();
    return;
  }
  next.remove_own();  // a staged copy a killed run left; the old hooks still filter meanwhile
  next.install_fresh();
  remove_own();
  for (const auto family : {engine::Family::V4, engine::Family::V6}) {
    if (family == engine::Family::V4 ? !config_.ipv4 : !config_.ipv6) continue;
    const Command filter = base(config_, family);
    run_checked(with(filter, {"-E", next.config_.chain, config_.chain}));
    if (config_.defrag) run_checked(with(filter, {"-E", defrag_chain(next.config_), defrag_chain(config_)}));
    if (config_.prerouting)
      run_checked(with(mangle(config_, family), {"-E", next.config_.chain, config_.chain}));
  }
}

}  // namespace pairwall::io
