// pairwalld's configuration: /etc/pairwall/pairwall.toml.
//
// Every key is checked: an unknown key, a value of the wrong type or out of range refuses the whole
// file with one ConfigError line naming the file, the section and the key, so a typo never starts
// a firewall with a default the operator did not mean. The [sync] and [failover] sections belong
// to their components, which validate them with their own parsers; this file only carries them.
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/control/config_error.h"

namespace pairwall::control {

inline constexpr std::string_view kDefaultConfigPath = "/etc/pairwall/pairwall.toml";
inline constexpr std::string_view kDefaultControlSocket = "/run/pairwall/control.sock";
inline constexpr std::string_view kDefaultMetricsListen = "127.0.0.1:9477";

struct NodeConfig {
  uint32_t id = 0;   // required, 1..2^32-1; the creator id of this node's states
  std::string name;  // defaults to the host name
  // Remembers the last boot epoch so that it grows even when the clock went back across a restart
  // (control/boot_epoch.h). Empty: the wall clock alone.
  std::string epoch_file;
};

enum class HookSet : uint8_t {
  Forward,       // forwarded traffic only
  ForwardLocal,  // forwarded traffic and the node's own INPUT/OUTPUT
};

struct QueueConfig {
  uint16_t first = 0;
  uint16_t count = 1;  // 1..64 queues, one worker each, --queue-balance first:first+count-1
  // Fail-open: packets pass uninspected while no daemon listens or the queue is full
  // (--queue-bypass and NFQA_CFG_F_FAIL_OPEN). Fail-closed drops them.
  bool fail_open = false;
  uint32_t maxlen = 65536;            // kernel queue length; the default 1024 overflows near 0.1 Mpps
  uint32_t rcvbuf_bytes = 32u << 20;  // netlink socket buffer
  bool batch_verdicts = true;
  // Receive GSO packets whole (NFQA_CFG_F_GSO). Off, the kernel segments them before queueing and
  // TCP throughput falls about tenfold; off is for kernels or drivers where GSO misbehaves.
  bool gso = true;
  HookSet hooks = HookSet::Forward;
  std::vector<std::string> exclude_interfaces;  // never queued (e.g. the sync link)
  // The packet mark bit of the node's own replies (SO_MARK) and of packets claimed before routing:
  // the hooks let packets with it set through unqueued. One bit, clear of the marks other tools
  // on the node use (kube-proxy 0x4000 and 0x8000, for one).
  uint32_t mark = 0x40000000;
};

struct RulesConfig {
  std::string file;  // required; relative paths are resolved against the config file's directory
};

struct LogConfig {
  std::string level = "info";  // trace, debug, info, warn, error, critical, off
  std::string pcap_file;       // empty: packets of `log` rules are not written
  uint64_t pcap_rotate_bytes = 64ull << 20;
  uint32_t pcap_keep = 4;
};

struct ControlConfig {
  std::string socket = std::string(kDefaultControlSocket);
  uint32_t socket_mode = 0660;
};

struct MetricsConfig {
  std::string listen = std::string(kDefaultMetricsListen);  // "" disables the endpoint
  std::string host = "127.0.0.1";                           // parsed from listen
  uint16_t port = 9477;
  bool enabled() const { return !listen.empty(); }
};

// [pflow]: where the flows of the states whose rule says (pflow) go, as IPFIX over UDP (pflow(4)'s
// flowdst, flowsrc and pflowproto 10).
struct PflowConfig {
  std::string collector;  // "address:port"; "" (no [pflow]): the flows are counted, not sent
  std::string host;       // parsed from collector
  uint16_t port = 0;
  std::string source;                          // the address to send from; "": the kernel's choice
  std::optional<uint32_t> observation_domain;  // default: [node] id
  bool enabled() const { return !collector.empty(); }
};

struct EngineSection {
  uint32_t shards = 64;                 // power of two
  std::optional<uint32_t> state_limit;  // overrides the rule file's `set limit states`
};

struct Config {
  std::string file;  // as given; used in messages
  NodeConfig node;
  QueueConfig queue;
  RulesConfig rules;
  LogConfig log;
  ControlConfig control;
  MetricsConfig metrics;
  EngineSection engine;
  PflowConfig pflow;
  // Validated by pairwall::sync::parse_sync_config / pairwall::failover::parse_failover_config.
  std::optional<toml::table> sync;
  std::optional<toml::table> failover;
  toml::table document;  // the whole file as read, for settings_awaiting_restart()
};

// Parses and validates `text`; `file_name` appears in messages and anchors a relative rules path.
// Throws ConfigError.
Config parse_config(std::string_view text, const std::string& file_name);

// Reads `path` and parses it. Throws ConfigError (also when the file cannot be read).
Config load_config(const std::string& path);

// A key of a section: [section] key.
struct Setting {
  std::string_view section;
  std::string_view key;
  friend bool operator==(const Setting&, const Setting&) = default;
};

// What a reload to `next` leaves as `running` has it: the settings that differ but for those the
// reload takes (`taken`), one line each, naming the file, section and key ("pairwall.toml:
// [failover] vhid: warning: changed (1 -> 2), ..."). A reload that said nothing of them would pass
// for having taken them.
std::vector<std::string> settings_awaiting_restart(const Config& running, const Config& next,
                                                   std::span<const Setting> taken);

// "host:port" or "[v6]:port" -> host, port. Returns false when malformed.
bool split_host_port(std::string_view text, std::string& host, uint16_t& port);

}  // namespace pairwall::control
