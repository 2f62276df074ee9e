// The daemon's own iptables/ip6tables chain that sends packets to its queues.
//
//   filter FORWARD (and optionally INPUT, OUTPUT):  -j PAIRWALL        (inserted first)
//   PAIRWALL:  -m mark --mark M/M -j RETURN       our own RST / ICMP replies (bypass_mark)
//              -i IF -j RETURN, -o IF -j RETURN    excluded interfaces (sync link, ...)
//              -p P -d A [--dport N] [-m ttl --ttl-eq T] -j RETURN
//                                                  excluded destinations (failover advertisements)
//              -j NFQUEUE --queue-balance A:B [--queue-bypass]   (--queue-num A for one queue)
//
//   with `prerouting` (the rule set translates destinations), per family as well:
//   mangle PREROUTING:  -j PAIRWALL                        (inserted first; installed after the filter jumps)
//   PAIRWALL (mangle):  -m mark --mark M/M -j RETURN
//                       -i IF -j RETURN                    excluded interfaces (no -o before routing)
//                       -m addrtype --dst-type LOCAL -j NFQUEUE ...   (same queues and bypass)
//                       [-i IF] [-p P] [-d A] [--dport N[:M]] -j NFQUEUE ...   prerouting_matches
//
// Destination translation (replies to a nat address, rdr, binat inbound) must happen before the
// kernel routes the packet: routed, it goes where its old destination sends it, and a reply to a
// nat address that is this node's own is delivered locally. So packets addressed to this node are
// queued in mangle PREROUTING; a packet the engine claims there comes back with M set, and the
// filter chain's first rule lets it by after routing instead of judging it twice. Hence M must be
// non-zero with `prerouting`. A translation rule may also rewrite packets not addressed to this
// node (a transparent rdr to a proxy, a binat address the node routes but does not hold): those
// are queued there by what the rules name (prerouting_matches), and what the engine does not
// claim is queued again after routing.
//
// --queue-balance spreads flows over the queues by a hash of the addresses (the same flow always
// reaches the same worker); --queue-cpu-fanout is not used, as it would split a flow's two
// directions across workers by the CPU that received them. Without --queue-bypass, packets are
// dropped while no pairwalld listens; with it they pass uninspected.
//
// Fragments: the kernel reassembles IPv4/IPv6 fragments before the filter table only while
// something in the network namespace has enabled nf_defrag (conntrack, the socket match, TPROXY).
// A plain NFQUEUE rule does not. Hooks can enable it without conntrack through an always-RETURN
// socket-match rule in a chain of the filter table that nothing jumps to (`defrag`, see hooks.cc);
// otherwise the engine sees the fragments themselves and drops them with reason `fragment`.
//
// Commands run through fork/exec (no shell) with -w, so a concurrent iptables waits for the lock
// instead of failing. The command lists are pure functions, tested without a kernel.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/engine/address.h"

namespace pairwall::io {

// Datagrams to one address and port never queued, whatever the rules say: a failover group's
// advertisements, which a rule set that forgot them would cut (two masters).
struct ExcludedDestination {
  engine::Family family = engine::Family::V4;
  uint8_t protocol = 17;
  std::string address;  // numeric, e.g. "224.0.0.18"; empty: any, for a protocol with a TTL alone
  uint16_t port = 0;    // TCP and UDP only, and then required
  uint8_t ttl = 0;      // non-zero: only datagrams with this TTL (IPv6: hop limit)
  bool operator==(const ExcludedDestination&) const = default;
};

// Packets not addressed to this node that a translation rule may rewrite before routing, as
// iptables can say it: a superset of what the rule matches (what it cannot say is left out).
struct PreroutingMatch {
  engine::Family family = engine::Family::V4;
  std::string interface;    // arrival interface; empty: any
  uint8_t protocol = 0;     // 0: any
  std::string destination;  // numeric "address/length"; empty: any
  uint16_t port_first = 0;  // destination ports, TCP or UDP only; 0: any
  uint16_t port_last = 0;
  bool operator==(const PreroutingMatch&) const = default;
};

// As pf would write the match: "inet on lan0 proto 6 to 192.0.2.0/24 port 5000:5100".
std::string to_string(const PreroutingMatch& match);

struct HooksConfig {
  std::string chain = "PAIRWALL";
  uint16_t queue_first = 0;
  uint16_t queue_last = 0;
  bool bypass = false;  // --queue-bypass: pass packets uninspected while no listener is bound
  bool input = false;   // also queue traffic to this host
  bool output = false;  // also queue traffic from this host
  std::vector<std::string> excluded_interfaces;
  std::vector<ExcludedDestination> excluded_destinations;  // each in its family's chain only
  uint32_t bypass_mark = 0;                                // 0: no mark rule
  bool defrag = true;       // enable reassembly before the queue (a socket match, no conntrack)
  bool prerouting = false;  // also queue packets to this host before routing (mangle); needs bypass_mark
  std::vector<PreroutingMatch> prerouting_matches;  // and these, with `prerouting`, each in its family's
  bool ipv4 = true;
  bool ipv6 = true;
  std::string iptables = "iptables";
  std::string ip6tables = "ip6tables";
  bool operator==(const HooksConfig&) const = default;
};

class HooksError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using Command = std::vector<std::string>;

struct CommandResult {
  int exit_code = -1;  // -1: could not be started, or ended by a signal
  std::string output;  // stdout and stderr, trimmed
};

using CommandRunner = std::function<CommandResult(const Command&)>;

// Runs argv[0] from PATH with fork/execvp, no shell; captures its output.
CommandResult run_command(const Command& argv);

std::string to_string(const Command& command);

// Throws HooksError naming the offending field when the configuration cannot be installed.
void validate(const HooksConfig& config);

// Creates the chain, its rules, the defrag rule and the jumps, in that order; with `prerouting`,
// then the mangle chain, its rules and its PREROUTING jump.
std::vector<Command> install_commands(const HooksConfig& config, engine::Family family);

// Building blocks of removal (a procedure: it asks before it deletes).
Command chain_exists_command(const HooksConfig& config, engine::Family family);
Command delete_jump_command(const HooksConfig& config, engine::Family family, const std::string& builtin);
Command flush_chain_command(const HooksConfig& config, engine::Family family);
Command delete_chain_command(const HooksConfig& config, engine::Family family);
Command defrag_exists_command(const HooksConfig& config, engine::Family family);
Command flush_defrag_command(const HooksConfig& config, engine::Family family);
Command delete_defrag_command(const HooksConfig& config, engine::Family family);
// The mangle chain of `prerouting` and its PREROUTING jump, asked for whatever the config says.
Command prerouting_exists_command(const HooksConfig& config, engine::Family family);
Command delete_prerouting_jump_command(const HooksConfig& config, engine::Family family);
Command flush_prerouting_command(const HooksConfig& config, engine::Family family);
Command delete_prerouting_command(const HooksConfig& config, engine::Family family);

class Hooks {
 public:
  explicit Hooks(HooksConfig config, CommandRunner runner = run_command);

  // Installs, replacing an earlier run's hooks without a moment in which none are in place. On
  // failure throws HooksError with the command, its exit code and its output, having left complete
  // hooks where there were any (a fresh install that fails removes what it added).
  void install();

  // Removes the pre-routing jump and chain (whether or not this config has `prerouting`: a killed
  // daemon's must go too), then the filter jumps, the chain and the defrag rule, and the same of a
  // replacement a killed run left half done. Idempotent: absent pieces are fine; a command that
  // fails for another reason throws HooksError.
  void remove();

  const HooksConfig& config() const { return config_; }

 private:
  struct Staged {};
  Hooks(HooksConfig config, CommandRunner runner, Staged);
  Hooks staged() const;  // the hooks a replacement installs first, under the chain name + "-next"
  bool installed();      // the filter chain exists in a family this config hooks
  void install_fresh();
  void remove_own();
  void remove_family(engine::Family family);
  void remove_prerouting(engine::Family family);
  bool absent_or_fail(const Command& command);
  // Deletes every copy of the jump that `command` deletes one at a time.
  void delete_jumps(const Command& command, engine::Family family, const std::string& builtin,
                    const char* table);
  void run_checked(const Command& command);

  HooksConfig config_;
  CommandRunner runner_;
};

}  // namespace pairwall::io
