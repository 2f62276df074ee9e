// The rule file as parsed: what the operator wrote, with where they wrote it. The compiler
// (compile.h) turns this into the structure the packet path evaluates; nothing here is read per
// packet. Macros are expanded by the parser; tables stay named so rules can share them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/engine/address.h"

namespace pairwall::engine::rules {

struct SourceLocation {
  std::string file;
  uint32_t line = 0;    // 1-based
  uint32_t column = 0;  // 1-based

  std::string file_and_line() const { return file + ":" + std::to_string(line); }
};

// One element of an address list: `any`, a prefix, a `<table>`, or an interface's addresses (`em0`)
// or networks (`em0:network`); each may be negated. An address spec with no elements means `any`.
// A spec matches when any element matches (pf expands lists into one rule per element; the union
// is the same). Interface elements are resolved to tables when the rules load
// (resolve_interfaces()); the classifier never sees one.
struct AddressElement {
  // Range: pf's `10.0.0.1 - 10.0.0.50`, from `prefix` (a host) to `last`, both included.
  enum class Kind : uint8_t { Any, Prefix, Table, Interface, Range };
  Kind kind = Kind::Any;
  bool negated = false;
  IpPrefix prefix;
  IpAddress last;         // Range
  std::string table;      // Table; Interface: the interface's name
  bool networks = false;  // Interface: `:network`
  // Interface: written `(em0)`, pf's dynamic form, which may stand for no address yet (a DHCP
  // link before its lease); `em0` needs one when the rules load, as pfctl's does.
  bool dynamic = false;
  SourceLocation location;
};

// pf port operators: `port 80`, `port != 80`, `port < 1024`, `port <= `, `>`, `>=`,
// `port 1000:2000` (inclusive), `port 1000 >< 2000` (exclusive), `port 1000 <> 2000` (outside).
struct PortMatch {
  enum class Op : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, RangeInclusive, RangeExclusive, Outside };
  Op op = Op::Eq;
  uint16_t low = 0;
  uint16_t high = 0;  // only for the two-operand operators
  friend bool operator==(const PortMatch&, const PortMatch&) = default;
};

// pf's `no-route` in place of an endpoint's addresses (filter rules only): an address the routing
// tables have no route for; `! no-route`, one they have.
enum class RouteTest : uint8_t { None, NoRoute, Routed };

struct Endpoint {
  std::vector<AddressElement> addresses;  // empty: any
  std::vector<PortMatch> ports;           // empty: any port; a list matches if any element does
  // pf's `from urpf-failed` (filter rules only, `addresses` then empty): a source address whose
  // route does not leave by the interface the packet arrived on (unicast reverse path forwarding).
  bool urpf_failed = false;
  RouteTest route = RouteTest::None;  // not None: `addresses` is empty
};

// `flags S/SA`: (tcp_flags & mask) == set. `flags any` is the absence of a FlagsMatch (and, on a
// filter rule, FilterRule::flags_any).
struct FlagsMatch {
  uint8_t set = 0;
  uint8_t mask = 0;
  friend bool operator==(const FlagsMatch&, const FlagsMatch&) = default;
};

// `icmp-type echoreq`, `icmp-type unreach code 3`, `icmp6-type 128`.
struct IcmpTypeMatch {
  uint8_t type = 0;
  int16_t code = -1;  // -1: any code
  friend bool operator==(const IcmpTypeMatch&, const IcmpTypeMatch&) = default;
};

// Match: pf's match rule, which never decides; the tag it carries goes with the packets it matches.
enum class Action : uint8_t { Pass, Block, Match };
enum class BlockReply : uint8_t { Drop, ReturnRst, ReturnIcmp };
// pf's names of the destination unreachable codes (ICMP type 3, ICMPv6 type 1) a rule may return.
inline constexpr std::string_view kIcmpUnreachCodes[] = {
    "net-unr",  "host-unr",      "proto-unr",   "port-unr",     "needfrag",    "srcfail",
    "net-unk",  "host-unk",      "isolate",     "net-prohib",   "host-prohib", "net-tos",
    "host-tos", "filter-prohib", "host-preced", "cutoff-preced"};
inline constexpr std::string_view kIcmp6UnreachCodes[] = {"noroute-unr", "admin-unr", "beyond-unr",
                                                          "addr-unr", "port-unr"};
enum class Direction : uint8_t { Any, In, Out };
// pf's `log` logs the packets the rule decides, the one that creates a state included; `log (all)`
// also every packet that later matches that state.
enum class LogMode : uint8_t { None, First, All };

// pf's PF_TABLE_NAME_SIZE: table names are at most one less, so that `overload` can hand one to
// the daemon in a fixed array.
inline constexpr std::size_t kTableNameSize = 32;

// `overload <table> flush [global]`: which states of an overloading source to kill.
enum class OverloadFlush : uint8_t { None, Rule, Global };

struct StateOptions {
  bool keep_state = true;   // pf: pass keeps state unless `no state`
  uint32_t max_states = 0;  // (max N); 0 = no per-rule limit
  bool no_sync = false;     // (no-sync): the states are not sent to the sync peer
  bool pflow = false;       // (pflow): each state's flow is exported when the state goes (pflow(4))
  bool sloppy = false;      // (sloppy): TCP states track flags only, no sequence windows
  bool modulate = false;    // `modulate state`: TCP states shift each end's sequence numbers
  bool synproxy = false;    // `synproxy state`: this node completes a TCP handshake before the server sees it
  // (if-bound) true, (floating) false; unsaid: `set state-policy` decides.
  std::optional<bool> if_bound;
  // Source tracking; 0 = no limit.
  uint32_t max_src_states = 0;     // (max-src-states N): states per source address
  uint32_t max_src_nodes = 0;      // (max-src-nodes N): source addresses with states
  uint32_t max_src_conn = 0;       // (max-src-conn N): established TCP connections per source
  uint32_t max_src_conn_rate = 0;  // (max-src-conn-rate N/S): new connections per S seconds
  uint32_t max_src_conn_rate_seconds = 0;
  bool source_track_global = false;  // (source-track global): one count per address for all such rules
  std::string overload_table;        // (overload <t>): a source over max-src-conn(-rate) joins <t>
  SourceLocation overload_location;
  OverloadFlush overload_flush = OverloadFlush::None;
  std::map<std::string, uint32_t> timeouts;  // per-rule timeout overrides, seconds
};

struct InterfaceMatch {
  std::string name;
  bool negated = false;
};

struct FilterRule {
  SourceLocation location;
  Action action = Action::Block;
  BlockReply reply = BlockReply::Drop;
  // `block return` (pf's PFRULE_RETURN): reply is ReturnIcmp and this is set, so TCP gets an RST
  // and everything else an ICMP unreachable. A consumer that ignores it still rejects TCP.
  bool reply_rst_for_tcp = false;
  bool reply_given = false;  // drop or a return written: `set block-policy` does not apply
  // `return-icmp(CODE[, CODE6])`, `return-icmp6(CODE6)`: the unreachable's code for IPv4 and IPv6
  // packets; -1 leaves it to the rejector (port unreachable, as pf's default).
  int16_t icmp_code = -1;
  int16_t icmp6_code = -1;
  uint8_t rst_ttl = 0;  // `return-rst (ttl N)`: the reset's TTL; 0 leaves it to the rejector
  Direction direction = Direction::Any;
  LogMode log = LogMode::None;
  bool quick = false;
  std::vector<InterfaceMatch> interfaces;  // empty: any interface; list matches if any does
  std::optional<Family> family;            // inet / inet6
  std::vector<uint8_t> protocols;          // empty: any protocol
  Endpoint from;
  Endpoint to;
  // Unset on a pass rule that keeps state and can match TCP: pf's default, `flags S/SA` for TCP
  // packets (a connection's state starts from its SYN), unless the rule says `flags any`.
  std::optional<FlagsMatch> flags;
  bool flags_any = false;                 // `flags any` written: no default
  std::vector<IcmpTypeMatch> icmp_types;  // for ICMP (icmp-type) or ICMPv6 (icmp6-type)
  bool icmp6_types = false;               // true when icmp_types came from icmp6-type
  StateOptions state;
  // `keep state`, `no state` or the like written: `set state-defaults` does not apply.
  bool state_given = false;
  bool allow_opts = false;        // `allow-opts`: the rule (and its states) pass packets with IP options
  std::string label;              // `label "web"`: names the rule's counters (pfctl -s labels, metrics)
  SourceLocation label_location;  // of the label's text, for its macros' errors
  // `tag NAME`: a packet this rule matches carries NAME on (sticky, as pf's: the last matching rule
  // with a tag sets it, deciding or not), into a forwarded packet's out pass. `[!] tagged NAME`: the
  // rule matches only packets that carry (do not carry) NAME.
  std::string tag;
  std::string tagged;
  bool tagged_negated = false;
  SourceLocation tagged_location;  // of the tag's name after `tagged`
  // `received-on IF` (or a list, or `! IF`): the interface the packet arrived on, which an out rule
  // otherwise cannot see; a packet the node sent itself was received on none.
  std::vector<InterfaceMatch> received_on;
  // `tos T`: only packets whose DSCP (PacketView::tos) is T, pf's match on the TOS byte.
  std::optional<uint8_t> tos;
  // `probability 20%` (or `0.2`): the rule matches a packet it describes with this chance, drawn
  // afresh for each packet (pf's arc4random); a packet it passes over goes on to the next rules.
  double probability = 1.0;
  // `once`: the rule decides one packet, then matches none (pf's one-shot rule, as ftp-proxy's
  // anchors use it; the states that packet made live on).
  bool once = false;
  // `max-pkt-rate N/S`: the rule stops matching while the packets it decided come faster than N in
  // S seconds (pf's decaying threshold); the packets it passes over go on to the next rules.
  uint32_t max_pkt_rate = 0;
  uint32_t max_pkt_rate_seconds = 0;
  std::string anchor;  // the path of the anchor holding the rule; empty in the main rule set
};

// `anchor "name" [in|out] [quick] [on IF] [inet|inet6] [proto P] [{ rules }]`: a named rule set
// evaluated where the anchor stands, for the packets that match the anchor's own terms (pf's
// anchors). Its rules are filter rules whose `anchor` is its path; they stand together in
// RuleFile::filter_rules from `position`, anchors within it included. A quick rule in an anchor is
// final for the whole evaluation; a quick anchor ends the evaluation where any of its rules
// matched. pf's `anchor "x" from ... to ...` is not supported.
struct Anchor {
  SourceLocation location;
  std::string path;       // "name", or "outer/name" for an anchor inside another
  std::string parent;     // the enclosing anchor's path, empty for the main rule set
  uint32_t position = 0;  // index in filter_rules of its first rule (where they would stand)
  bool quick = false;
  Direction direction = Direction::Any;
  std::vector<InterfaceMatch> interfaces;
  std::optional<Family> family;
  std::vector<uint8_t> protocols;
  // Its rules are the file's (`{ ... }` or `load anchor`): a reload of the file sets them. The
  // rules of any other anchor are loaded into the running rule set (pairwallctl anchors load) and
  // kept across reloads.
  bool file_defines_rules = false;
};

// How a translation rule picks an address from its pool (pf's pool types; pf_map_addr).
enum class PoolType : uint8_t {
  Bitmask,     // the pool prefix's network bits over the packet's address (one prefix)
  Random,      // any address of the prefix, drawn per connection
  SourceHash,  // an address of the prefix chosen by a keyed hash of the source address
  RoundRobin,  // the pool's addresses in turn, entry after entry
};

// The pool type as pf.conf writes it.
inline const char* pool_type_name(PoolType type) {
  static constexpr const char* kNames[] = {"bitmask", "random", "source-hash", "round-robin"};
  return kNames[static_cast<int>(type)];
}

// `nat on IF from SRC to DST -> ADDR [port P]`, `rdr on IF proto P to DST port P -> ADDR [port P]`,
// `binat on IF from INT to any -> EXT`; a nat or rdr target may be a pool, `-> { ADDR, ... }` or
// `-> <table>`, followed by a pool type, and nat may keep the source port (`static-port`).
struct TranslationRule {
  enum class Kind : uint8_t { Nat, Rdr, Binat };
  SourceLocation location;
  Kind kind = Kind::Nat;
  bool negate_translation = false;  // `no nat ...`: exempt matching packets
  bool pass = false;                // `nat pass ...`: the pass it translates on skips the filter rules
  std::vector<InterfaceMatch> interfaces;
  std::optional<Family> family;
  std::vector<uint8_t> protocols;
  Endpoint from;
  Endpoint to;
  // As a filter rule's, before `->`: `tag NAME` marks the packets it matches (an exemption's too,
  // as pf_match_translation tags them), for the filter rules after it; `[!] tagged NAME` matches
  // by what an earlier pass or stage left (nat: the in pass's filter rules).
  std::string tag;
  std::string tagged;
  bool tagged_negated = false;
  SourceLocation tagged_location;
  // The addresses or prefixes after `->`: one, or a list `{ ... }`, which round-robin walks.
  std::vector<IpPrefix> targets;
  std::optional<PortMatch> target_port;  // `port P` or `port P:Q` after the target
  bool target_port_follows = false;      // `port P:*`: rdr maps a destination range onto P and up
  std::optional<PoolType> pool;          // as written; compile() says what none means
  // After `source-hash`: `0x` and 32 hex digits, or the text of `key "text"`; empty: the
  // built-in key.
  std::string hash_key;
  bool hash_key_is_text = false;
  bool static_port = false;  // nat: the source port stays, and a taken one refuses the connection
  // `-> em0` or `-> (em0)`: the interface's address of the rule's family, which
  // resolve_interfaces() sets as the one target and refresh_interface_tables() keeps current.
  std::string target_interface;
  // `-> (em0)`: the interface may have no such address yet; until it has, the rule's packets are
  // dropped (TranslationFailed), as pf drops a translation its dynamic address cannot serve.
  bool target_dynamic = false;
  // Set by resolve_interfaces() where a dynamic target found no address: the rule loads without one.
  bool target_pending = false;
  // `-> <name>`: the table's addresses of the rule's family are the pool; compile() reads them
  // from the table as it stands, so that each change of the table gives the pool its entries.
  std::string target_table;
  SourceLocation target_location;
};

// `scrub [in|out] [on IF] [all|from..to] [fragment reassemble] [reassemble tcp] [max-mss N]
// [min-ttl N] [random-id] [no-df] [set-tos T]`, or `no scrub [in|out] [on IF] [all|from..to]`.
struct ScrubRule {
  SourceLocation location;
  bool negated = false;  // `no scrub`: what it matches first is left as it is
  Direction direction = Direction::Any;
  std::vector<InterfaceMatch> interfaces;
  std::optional<Family> family;
  std::vector<uint8_t> protocols;  // empty: any protocol
  Endpoint from;
  Endpoint to;
  bool fragment_reassemble = false;
  // `reassemble tcp`: the TCP states the rule's packets create normalize their connections' later
  // segments too (pf's pf_normalize_tcp_stateful; Engine::scrub_segment()).
  bool reassemble_tcp = false;
  uint16_t max_mss = 0;  // 0: leave MSS alone
  uint8_t min_ttl = 0;   // 0: no minimum
  bool random_id = false;
  bool no_df = false;
  std::optional<uint8_t> set_tos;  // the TOS (traffic class) less its ECN bits, which stay the packet's
};

// `file "PATH"` in a table definition: the file's entries join the table's (pf's table files).
struct TableFile {
  SourceLocation location;  // of the path, for errors reading it
  std::string path;         // as written; relative paths are the rule file's directory's
};

struct Table {
  SourceLocation location;
  std::string name;
  bool is_const = false;  // `const`: its entries cannot change while the rules run
  bool counters = false;  // `counters`: packets and bytes are counted per entry (TableCounters)
  std::vector<IpPrefix> entries;
  std::vector<IpPrefix> negated_entries;  // `!10.1.2.0/24` inside a table: excluded
  std::vector<TableFile> files;           // read by parse_rules_file(), not by parse_rules()
  // `{ em0, !em1:network, self }`: interface entries, whose addresses resolve_interfaces() adds to
  // the entries (and then clears this).
  std::vector<AddressElement> interfaces;
  // A `{ }` list or a file names the table's entries: loading the rules sets the table to them.
  // Without either (`table <bruteforce> persist`) a reload keeps the running table's entries, as
  // pfctl -f keeps a table it defines without addresses.
  bool lists_entries = false;

  std::size_t entry_count() const { return entries.size() + negated_entries.size(); }
};

// pf's default `set limit table-entries`.
inline constexpr uint32_t kDefaultTableEntryLimit = 200'000;

struct Settings {
  std::optional<uint32_t> limit_states;
  std::optional<uint32_t> limit_frags;
  std::optional<uint32_t> limit_src_nodes;
  std::optional<uint32_t> limit_table_entries;  // all tables' entries together, exceptions included
  std::map<std::string, uint32_t> timeouts;     // `set timeout { tcp.established 86400, ... }`, seconds
  std::map<std::string, SourceLocation> timeout_locations;  // adaptive.start and .end's too
  std::optional<uint32_t> adaptive_start;                   // `set timeout adaptive.start N`, states
  std::optional<uint32_t> adaptive_end;
  bool block_policy_return = false;  // `set block-policy return`: a plain `block` is `block return`
  // `set fail-policy return`: a connection a pass rule lets by and this node cannot take (no
  // state, source node or translation for it) is answered as `block return` answers.
  bool fail_policy_return = false;
  // `set state-policy if-bound`: the states of pass rules that say neither (if-bound) nor
  // (floating) are bound to the interfaces their connection crosses.
  bool states_if_bound = false;
  // `set state-defaults ...`: the state options of the pass rules that write no state of their own.
  std::optional<StateOptions> state_defaults;
  SourceLocation state_defaults_location;
  std::vector<std::string> skip_interfaces;  // `set skip on { lo ... }`: passes there are not filtered
  // `set keepcounters`: a reload keeps the counters of the rules written alike in the running set
  // (each list's, in each anchor), where they would otherwise start at zero.
  bool keep_counters = false;

  uint32_t table_entry_limit() const { return limit_table_entries.value_or(kDefaultTableEntryLimit); }
};

struct RuleFile {
  std::string file;
  Settings settings;
  std::vector<Table> tables;
  std::vector<ScrubRule> scrub_rules;
  std::vector<TranslationRule> translation_rules;
  std::vector<FilterRule> filter_rules;  // in file order, anchors' rules where the anchors stand
  std::vector<Anchor> anchors;           // in the order they were declared
  // The directed broadcast addresses of the host's IPv4 networks, sorted (resolve_interfaces() and
  // refresh_local_broadcasts() set them): what is sent to one is no host's alone, and no reject
  // answers it (RuleSet::local_broadcast()).
  std::vector<uint32_t> local_broadcasts;

  // What counts against `set limit table-entries`: every table's entries, exceptions included.
  uint64_t table_entries() const {
    uint64_t total = 0;
    for (const Table& t : tables) total += t.entry_count();
    return total;
  }
};

}  // namespace pairwall::engine::rules
