// A compiled, immutable rule set. Built aside by compile() and published with one atomic pointer
// swap (Engine::load_rules); packet workers only ever read it.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/engine/interfaces.h"
#include "daemon/engine/packet.h"
#include "daemon/engine/rules/ast.h"
#include "daemon/engine/rules/classifier.h"
#include "daemon/engine/rules/table_counters.h"
#include "daemon/engine/siphash.h"
#include "daemon/engine/source_table.h"
#include "daemon/engine/timeouts.h"

namespace pairwall::engine::rules {

// Per-rule counters, shared by the rule and the states it created (a state outlives a reload).
struct RuleStats {
  std::atomic<uint64_t> evaluations{0};  // packets that reached this rule's pass and matched
  std::atomic<uint64_t> packets{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint32_t> states_current{0};
  std::atomic<uint32_t> source_nodes{0};  // source addresses its states come from (max-src-nodes)
  std::atomic<uint64_t> states_created{0};
  // `once`: the rule has decided its one packet, and matches none after it.
  std::atomic<bool> spent{false};
  // `max-pkt-rate`: pf's threshold over the packets the rule decided (see packet_rate_over()), as
  // a count (x kRateUnit) in the top 32 bits over the time it was last raised (Millis / 16, low 32
  // bits): one word, so that the workers raise it with a compare-and-swap and no lock.
  std::atomic<uint64_t> packet_rate{0};
};

inline constexpr uint32_t kNoRuleNumber = UINT32_MAX;

// Whether a rule of the anchor at `path` ("" for the main rule set) stands in `anchor` or in an
// anchor within it; every rule stands in "".
inline bool in_anchor(std::string_view path, std::string_view anchor) noexcept {
  return anchor.empty() || path == anchor ||
         (path.size() > anchor.size() && path.starts_with(anchor) && path[anchor.size()] == '/');
}

// A rule's chance of matching a packet it describes, out of 2^32 (`probability`): a draw's top 32
// bits below it win. kCertain is every draw's.
inline constexpr uint64_t kCertain = uint64_t{1} << 32;

// xorshift64* (Vigna): a worker's draws (nat ports, random-id, `probability`). Unpredictable enough
// to an observer of one connection; not a CSPRNG.
inline uint64_t next_draw(uint64_t& state) noexcept {
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return state * 0x2545F4914F6CDD1DULL;
}

// pf's PF_THRESHOLD_MULT: a rate's count is kept in thousandths of a packet, to decay smoothly.
inline constexpr uint64_t kRateUnit = 1000;

// pf's max-pkt-rate threshold (pf_add_threshold, then pf_check_threshold): raises the rule's count
// (RuleStats::packet_rate) by one packet at `now`, after its decay in proportion to the time since it
// was last raised, and says whether it is then over `limit` packets in `seconds`. Lock-free: the
// workers of one rule raise one word together.
bool packet_rate_over(RuleStats& stats, uint32_t limit, uint32_t seconds, Millis now) noexcept;

// What a worker brings to the rules whose match depends on more than the packet: its draws
// (`probability`, a next_draw() state) and the time (`max-pkt-rate`). Evaluated without one
// (nullptr), such rules match every packet they describe, and none is counted or spent (`once`):
// the rules as a description, for benchmarks and tests.
struct DecisionContext {
  uint64_t* draws = nullptr;
  Millis now{0};
};

struct CompiledRule {
  uint32_t number = 0;  // @N, 0-based file order within its anchor (pfctl -a NAME -s rules)
  std::string anchor;   // the path of its anchor, empty in the main rule set
  uint32_t anchor_number = kNoRuleNumber;  // its anchor's @N where the anchor stands (pflog's rulenr)
  Action action = Action::Block;
  Direction direction = Direction::Any;  // `in`, `out`, or neither
  BlockReply reply = BlockReply::Drop;
  bool reply_rst_for_tcp = false;  // `block return`: RST for TCP, `reply` (ICMP) for the rest
  int16_t icmp_code = -1;          // return-icmp's code for IPv4 packets, -1: port unreachable
  int16_t icmp6_code = -1;         // and for IPv6 packets
  uint8_t rst_ttl = 0;             // return-rst's TTL (hop limit), 0: the rejector's
  bool log = false;                // log the packets this rule decides
  bool log_states = false;         // `log (all)`: and every packet of the states it creates
  bool quick = false;
  bool keep_state = true;
  uint32_t max_states = 0;
  bool no_sync = false;        // (no-sync): its states stay on this node (pfsync's no-sync)
  bool pflow = false;          // (pflow): its states' flows are exported when they go (FlowLog)
  bool sloppy = false;         // (sloppy): its TCP states are tracked without sequence windows
  bool if_bound = false;       // (if-bound), or `set state-policy if-bound`: see StateEntry::bound
  bool modulate = false;       // `modulate state`: its TCP states shift each end's sequence numbers
  bool synproxy = false;       // `synproxy state`: its TCP connections are proxied until established
  bool allow_opts = false;     // `allow-opts`: it, and its states, pass packets with IP options
  SourceLimits sources;        // max-src-*: counted per source address in the engine's SourceTable
  std::string overload_table;  // overload <table>: empty for none
  OverloadFlush overload_flush = OverloadFlush::None;
  Timeouts timeouts;              // global timeouts with this rule's overrides applied, as compiled
  uint32_t own_timeouts = 0;      // a bit per TimeoutClass the rule's state options set
  bool own_source_track = false;  // its state options set src.track (other than 0, which is the global one)
  SourceLocation location;
  std::string text;            // canonical one-line form for `rules show`
  std::string label;           // `label "..."`, or empty
  uint16_t tag = 0;            // `tag NAME`: NAME's number where a `tagged` of the set tests it, else 0
  uint64_t chance = kCertain;  // `probability P`
  bool once = false;           // `once`: it decides one packet, then matches no more
  uint32_t max_packets = 0;    // `max-pkt-rate N/S`: N, 0 for none
  uint32_t rate_seconds = 0;   // and S
  // Whether it may pass over a packet it describes (chance, once, max_packets): the candidate must
  // then be admitted (RuleSet::admits()).
  bool conditional = false;
  // Where pf's evaluation stops when this rule decides (an index of RuleSet::rule()): at a quick
  // rule, itself; within a quick anchor, that anchor's last rule; else past the last rule. The
  // match rules up to there have tagged the packet.
  uint32_t evaluated_until = UINT32_MAX;
  std::shared_ptr<RuleStats> stats = std::make_shared<RuleStats>();
  // Its source and destination tables that count per entry (`table <t> counters`).
  std::vector<CountedTable> counted_tables;

  // How long this rule's states of class `c` live, as pf's: the rule's own timeout where its state
  // options set one, else the running rule set's global one (`current`), which a reload that
  // changes `set timeout` changes for the states made before it too.
  Millis timeout(TimeoutClass c, const Timeouts& current) const {
    return own_timeouts & (1u << static_cast<unsigned>(c)) ? timeouts[c] : current[c];
  }
};

// The timeout of class `c` for a state `rule` created (nullptr: learned, or made by no rule).
inline Millis state_timeout(const CompiledRule* rule, TimeoutClass c, const Timeouts& current) {
  return rule != nullptr ? rule->timeout(c, current) : current[c];
}

// Normalization decided for one packet (merged from the first matching scrub rule).
struct ScrubAction {
  // The first matching rule's counters, a `no scrub`'s too (matched stays false); nullptr when no
  // rule matched. Counted by the worker (Worker::count_scrub), not here: the rule set is shared.
  RuleStats* counters = nullptr;
  bool matched = false;
  bool fragment_reassemble = false;
  bool reassemble_tcp = false;
  uint16_t max_mss = 0;
  uint8_t min_ttl = 0;
  bool random_id = false;
  bool no_df = false;
  std::optional<uint8_t> set_tos;
};

struct CompiledTranslation {
  TranslationRule::Kind kind = TranslationRule::Kind::Nat;
  bool negated = false;
  bool pass = false;  // `nat pass`: the pass it translates on skips the filter rules (pf)
  // The pool: one address or prefix (binat: its external prefix), or several: a list's, or the
  // prefixes that cover a table's addresses.
  std::vector<IpPrefix> targets;
  PoolType pool = PoolType::Bitmask;
  SipKey hash_key;  // source-hash
  // round-robin: connections given an address so far, shared by the workers; kept, as the rule's
  // counters, by a table's edit (a reload of the rules starts both afresh).
  std::shared_ptr<std::atomic<uint64_t>> turns = std::make_shared<std::atomic<uint64_t>>(0);
  // Where each target's turns end, counted from the first target's: a pool of several numbers
  // their addresses so (round-robin takes the turns in order, random and source-hash pick one),
  // and a turn finds its target by a binary search in a pool of a table's thousands.
  std::vector<uint64_t> turn_ends;
  bool static_port = false;  // nat: the source port stays; a connection it would collide with is refused
  uint16_t tag = 0;          // `tag NAME`: NAME's number where a `tagged` of the set tests it, else 0
  IpPrefix source;           // binat: the internal prefix, which the in pass maps its target back to
  uint16_t port_low = 0;     // 0: keep the port (nat: choose from the proxy range)
  uint16_t port_high = 0;
  // rdr onto a port range: the rule's own first port, which maps onto port_low (see rdr_port()).
  uint16_t rdr_port_base = 0;
  uint32_t number = 0;
  // The rule's counters, which its entries share (an rdr split by its ports, binat's two ways):
  // evaluations are the packets it matched first, a `no nat` included; packets, bytes and states
  // those of the connections it translated.
  std::shared_ptr<RuleStats> stats = std::make_shared<RuleStats>();

  // The turns a target gives: one to each of its addresses, up to 2^32 (an IPv6 /64 is not walked
  // to its end; its first 2^32 addresses are as good a pool as any).
  static uint64_t turns_of(const IpPrefix& target) {
    const unsigned host_bits = (target.family == Family::V4 ? 32u : 128u) - target.length;
    return uint64_t{1} << std::min(host_bits, 32u);
  }

  // Sets turn_ends from targets.
  void count_turns() {
    turn_ends.clear();
    uint64_t total = 0;
    for (const IpPrefix& p : targets) turn_ends.push_back(total += turns_of(p));
  }

  // rdr: where a connection dialled to `port` goes. Onto one port, to it; onto a range, as pf's,
  // the port's distance from rdr_port_base modulo the range's width, from port_low. A port below
  // the base (`port < N`, `!=`, `<>`) counts back from the range's end: pf's arithmetic would
  // leave the range.
  uint16_t rdr_port(uint16_t port) const {
    const int32_t width = int32_t{port_high} - port_low + 1;
    int32_t offset = (int32_t{port} - rdr_port_base) % width;
    if (offset < 0) offset += width;
    return static_cast<uint16_t>(port_low + offset);
  }
};

// A translation or scrub rule as `rules show` lists it (binat compiles to two CompiledTranslation).
struct ListedRule {
  uint32_t number = 0;  // 0-based file order among the translation (or scrub) rules
  std::string text;     // canonical one-line form
  SourceLocation location;
  // The rule's counters: a translation rule's CompiledTranslation::stats; a scrub rule's count the
  // packets it matched first (evaluations and packets alike, a `no scrub`'s too) and their bytes.
  std::shared_ptr<const RuleStats> stats;
};

inline constexpr uint32_t kNoRule = UINT32_MAX;

// An anchor as `rules show` lists it: a line of the rule set it stands in, before the rule at
// `position` (RuleSet::rule()), as pfctl -s rules lists `anchor "name"` among the rules.
struct AnchorListing {
  std::string path;
  std::string parent;     // the path of the anchor it stands in, empty for the main rule set
  uint32_t number = 0;    // its @N among the rules where it stands
  uint32_t position = 0;  // the index of the first rule after it in file order
  std::string text;       // `anchor "name" in on lan0 proto tcp`
  SourceLocation location;
};

// The filter rules 0 to count - 1 in file order, each of `anchors` (ordered by position, as
// RuleSet::anchors()) before the first rule after it, as pfctl -s rules lists them:
// on_anchor(const AnchorListing&) and on_rule(index).
template <typename OnAnchor, typename OnRule>
void list_in_file_order(const std::vector<AnchorListing>& anchors, std::size_t count, OnAnchor&& on_anchor,
                        OnRule&& on_rule) {
  std::size_t next_anchor = 0;
  for (std::size_t rule = 0; rule <= count; ++rule) {
    for (; next_anchor < anchors.size() && (rule == count || anchors[next_anchor].position <= rule);
         ++next_anchor)
      on_anchor(anchors[next_anchor]);
    if (rule < count) on_rule(rule);
  }
}

// How deep a rule of the anchor at `path` stands: 0 in the main rule set, 1 in "outer", 2 in
// "outer/inner", for listings that indent it.
inline std::size_t anchor_depth(std::string_view path) noexcept {
  return path.empty() ? 0 : 1 + static_cast<std::size_t>(std::count(path.begin(), path.end(), '/'));
}

class RuleSet {
 public:
  RuleSet();
  ~RuleSet();
  RuleSet(const RuleSet&) = delete;
  RuleSet& operator=(const RuleSet&) = delete;

  // pf semantics for one pass: the first matching `quick` rule, otherwise the last matching rule.
  // `direction` is In or Out; `iface` the interface of this pass. Returns kNoRule when nothing
  // matches. Cost does not grow with the number of rules (see classifier.h); it is one match per
  // segment (below), of which most rule sets have one. `tag`: what the packet carries into the pass
  // (a forwarded packet's out pass: what its in pass left); a rule's `tag` changes what later
  // rules of the pass see, as in pf.
  uint32_t evaluate(const PacketView& packet, Direction direction, IfaceId iface,
                    uint16_t tag = 0) const noexcept {
    return evaluate(MatchQuery{&packet, direction, iface, tag});
  }
  // The same for a query, which may say the packet's source failed the uRPF check. `context`: what
  // the rules with `probability`, `once` or `max-pkt-rate` decide by (DecisionContext). Kept out of
  // the query, whose size the classifier's batches feel (a pointer more: 10 rules -1.7 %).
  uint32_t evaluate(const MatchQuery& query, DecisionContext* context = nullptr) const noexcept;

  // Whether a filter rule tests tags (`tagged`): then a packet's out pass depends on its in pass's
  // outcome, and evaluate_passes() takes them in turn.
  bool uses_tagged() const noexcept { return filter_tests_tags_; }
  // Whether a packet's out pass must wait for its in pass: a filter rule tests tags, or one spends
  // (`once`) or counts (`max-pkt-rate`) what it decides, which a packet its in pass blocks never
  // reaches. evaluate_passes() and evaluate_passes_batch() take such passes in turn.
  bool out_pass_waits() const noexcept { return filter_tests_tags_ || filter_meters_; }
  // Whether a filter rule is `from urpf-failed`: then an in pass's query says whether the packet's
  // source failed the unicast reverse path check (MatchQuery::urpf_failed), which only the routing
  // tables can tell.
  bool uses_urpf() const noexcept { return filter_tests_urpf_; }
  // Whether a filter rule's source (side 0) or destination (side 1) is `[!] no-route`: then a
  // query says whether the routing tables have a route for that address of the pass's packet
  // (MatchQuery::src_no_route, dst_no_route).
  bool uses_no_route(int side) const noexcept { return filter_tests_no_route_[side]; }
  // Whether an out pass's translation rule (nat, binat) tests tags: then its lookup waits for the
  // tag the in pass's filter rules leave (evaluate_in()).
  bool out_translation_tests_tags() const noexcept { return out_translation_tests_tags_; }

  // One packet's passes, in then out (nullptr: a pass that meets no rules): the deciding rule of
  // each. `in->tag` is what the packet carries into its in pass; `out->tag` what an out
  // translation rule tagged it with, which replaces what the in pass left (0: it set none).
  // `in_decided`: the in pass's deciding rule where evaluate_in() found it already; `out->tag` is
  // then the out pass's tag, 0 included. Where a rule has `once` or `max-pkt-rate`, an out pass
  // whose in pass a block rule decided is not evaluated (kNoRule), as pf's packet never gets there.
  static constexpr uint32_t kUndecided = UINT32_MAX - 1;
  std::array<uint32_t, 2> evaluate_passes(const MatchQuery* in, const MatchQuery* out,
                                          uint32_t in_decided = kUndecided,
                                          DecisionContext* context = nullptr) const noexcept;
  // evaluate_passes() for packets[i] = {in, out} each, in_decided unknown: the in passes matched
  // together (evaluate_batch()), then the out passes with the tags the in passes left, into
  // decided[i]. A batch's lookups overlap where one at a time they would wait on each other.
  void evaluate_passes_batch(std::span<const std::array<const MatchQuery*, 2>> packets,
                             std::span<std::array<uint32_t, 2>> decided,
                             DecisionContext* context = nullptr) const noexcept;
  // The in pass alone: its deciding rule, and the tag the packet leaves it with.
  struct InPass {
    uint32_t deciding = kNoRule;
    uint16_t tag = 0;
  };
  InPass evaluate_in(const MatchQuery& in, DecisionContext* context = nullptr) const noexcept;

  // evaluate() for each query, out[i] for queries[i]; faster per packet than one call each, as the
  // lookups of a batch overlap their cache misses (Classifier::match_batch), where the batch is
  // large enough (Classifier::kBatchFloor).
  void evaluate_batch(std::span<const MatchQuery> queries, std::span<uint32_t> out,
                      DecisionContext* context = nullptr) const noexcept;

  // How many 64-rule words of the classifier evaluate() tests for this packet (see classifier.h):
  // for benchmarks and tests, not for the packet path.
  uint32_t words_tested(const PacketView& packet, Direction direction, IfaceId iface) const noexcept;

  // First matching scrub rule, merged into one action (matched=false when none applies, or the
  // first is a `no scrub`).
  ScrubAction scrub(const PacketView& packet, Direction direction, IfaceId iface) const noexcept;

  bool has_scrub() const noexcept { return scrub_classifier_ != nullptr; }
  bool has_translations() const noexcept { return !translations_.empty(); }
  // The nat/rdr/binat rule that decides this pass, or nullptr: as pf_get_translation asks, the
  // first match of binat (out) or rdr (in), and where that is none or an exemption (`no binat`,
  // `no rdr`), the first match of nat (out) or binat (in). `tag`, where given: what the packet
  // carries, which the rules' `tagged` test; on return, what the rules it matched tagged it with
  // (an exemption's `tag` too, as pf_match_translation's), else as it was.
  const CompiledTranslation* translation(const PacketView& packet, Direction direction, IfaceId iface,
                                         uint16_t* tag = nullptr) const noexcept;

  const std::vector<ListedRule>& translation_rules() const { return translation_listing_; }
  const std::vector<ListedRule>& scrub_listing() const { return scrub_listing_; }
  // translation()'s entries by index, for a state to name the rules that translated it.
  uint32_t translation_index(const CompiledTranslation* t) const noexcept {
    return static_cast<uint32_t>(t - translations_.data());
  }
  const CompiledTranslation& translation_entry(uint32_t index) const { return translations_[index]; }
  std::size_t translation_count() const { return translations_.size(); }
  const std::vector<AnchorListing>& anchors() const { return anchors_; }
  // The per-entry counters of the table `name` (`table <name> counters`), nullptr for a table
  // without them.
  const TableCounters* table_counters(std::string_view name) const noexcept;

  // pfctl -z: every rule's evaluations, packets and bytes (filter rules, the anchors' among them,
  // translation and scrub rules) set to zero, as the workers go on counting; the states counted
  // stay. With `anchor` (pfctl -a NAME -z), only the rules of that anchor and of the anchors in
  // it. Returns how many rules that is, as listed.
  std::size_t zero_counters(std::string_view anchor = {}) const noexcept;

  // By evaluate()'s result: the rules of the main rule set and its anchors in file order.
  const CompiledRule& rule(uint32_t index) const { return rules_[index]; }
  // Whether `r` is one of these rules (a state's creator may be a rule of an earlier set).
  bool holds(const CompiledRule* r) const noexcept {
    // std::less: pointers into different arrays are compared in its total order, not with `<`.
    const std::less<const CompiledRule*> before;
    return !rules_.empty() && !before(r, rules_.data()) && before(r, rules_.data() + rules_.size());
  }
  std::size_t size() const { return rules_.size(); }
  // The index rule() gives `r` at. Precondition: holds(r).
  uint32_t index_of(const CompiledRule* r) const noexcept { return static_cast<uint32_t>(r - rules_.data()); }

  // A digest of what this rule set decides and its settings (compile.cc says what it leaves out):
  // equal on two nodes that load the same rules, and sent to the peer with every keepalive.
  uint64_t digest() const noexcept { return digest_; }

  const Timeouts& timeouts() const { return timeouts_; }
  const AdaptiveTimeouts& adaptive_timeouts() const { return adaptive_timeouts_; }
  uint32_t state_limit() const { return state_limit_; }
  // `set fail-policy return` (RuleFile::Settings::fail_policy_return).
  bool fail_policy_return() const noexcept { return fail_policy_return_; }
  uint32_t source_node_limit() const { return source_node_limit_; }
  // `set skip on IFACE`: a pass on this interface is not filtered (pf: as if it were disabled
  // there). Interfaces first seen after the compile are not skipped.
  bool skips(IfaceId iface) const noexcept { return iface < skipped_.size() && skipped_[iface] != 0; }

  // Whether `address` is the directed broadcast address of one of the host's IPv4 networks (as
  // the rules were loaded with them, RuleFile::local_broadcasts).
  bool local_broadcast(Family family, const IpAddress& address) const noexcept;

 private:
  friend class Compiler;
  std::vector<CompiledRule> rules_;
  std::vector<AnchorListing> anchors_;
  Timeouts timeouts_ = Timeouts::defaults();
  AdaptiveTimeouts adaptive_timeouts_;
  std::vector<uint8_t> skipped_;            // by interface id
  std::vector<uint32_t> local_broadcasts_;  // sorted
  uint64_t digest_ = 0;
  uint32_t state_limit_ = 100'000;       // pf's default `set limit states`
  uint32_t source_node_limit_ = 10'000;  // pf's default `set limit src-nodes`
  bool fail_policy_return_ = false;
  // The filter rules in stretches of file order, each matched by a classifier of its own: within
  // one, no `tagged` can follow a `tag` of the same stretch in the same pass, so that its rules,
  // matched with the tag the packet carries into it, decide as pf's evaluation in file order does.
  // Most rule sets are one segment; one with `match in tag X` then `pass in tagged X` is two.
  struct Segment {
    uint32_t first = 0;  // the index in rules_ of its first rule
    std::unique_ptr<Classifier> classifier;
    // Where some rule tests tags: its rules with a `tag`, the last in file order first
    // (MatchOrder::Ranked), and their indexes in rules_, ascending.
    std::unique_ptr<Classifier> tags;
    std::vector<uint32_t> tag_rules;
  };
  std::vector<Segment> segments_;
  bool filter_tests_tags_ = false;
  bool filter_tests_urpf_ = false;
  bool filter_tests_no_route_[2] = {false, false};
  bool out_translation_tests_tags_ = false;
  bool filter_conditional_ = false;  // some filter rule is CompiledRule::conditional
  bool filter_meters_ = false;       // some filter rule has `once` or `max-pkt-rate`
  // Whether `rule`, a candidate that matches the packet, decides it: it wins its draw, is within
  // its packet rate (counting the packet), and, with `once`, has not decided a packet before.
  static bool admits(const CompiledRule& rule, DecisionContext& context) noexcept;
  // The rule of `segment` (its own index, as its classifier found it for `query`) that decides
  // once the conditional rules are admitted: `found`, or where it is not, the next in the
  // segment's order that matches and is.
  uint32_t admitted(const Segment& segment, const MatchQuery& query, uint32_t found,
                    DecisionContext* context) const noexcept;
  // Whether a packet whose in pass `in_deciding` decided (an index of rules_, or kNoRule) meets its
  // out pass's rules. Where a rule counts or spends what it decides, one the in pass blocks must
  // not, as pf's never gets there; elsewhere matching it anyway changes nothing, and
  // evaluate_batch() matches both passes together.
  bool reaches_out(uint32_t in_deciding) const noexcept {
    return !filter_meters_ || in_deciding == kNoRule || rules_[in_deciding].action != Action::Block;
  }
  // admitted() for each of queries[i] and found[i], where some rule is conditional.
  void admitted_batch(const Segment& segment, std::span<const MatchQuery> queries, uint32_t* found,
                      DecisionContext* context) const noexcept;
  // One pass through the segments in turn, each matched with the tag the ones before left.
  InPass pass(const MatchQuery& query, DecisionContext* context) const noexcept;
  // One pass for each of up to Classifier::kBatch queries, out[i] for queries[i], each segment's
  // lookups together; the tag left is worked out where tag_wanted[i] (nullptr: for none), else
  // out[i].tag is not the tag left.
  void pass_batch(std::span<const MatchQuery> queries, std::span<InPass> out, const bool* tag_wanted,
                  DecisionContext* context) const noexcept;
  // tag_after() for each of up to Classifier::kBatch passes where wanted[i], evaluated up to last[i]:
  // tags[i] holds the tag passes[i] carries into the segment, and on return the one it leaves with.
  void tags_after_batch(const Segment& segment, std::span<const MatchQuery> passes, const uint32_t* last,
                        const bool* wanted, uint16_t* tags) const noexcept;
  // The tag a packet carries after `segment`, evaluated up to the rule `last` (an index of rules_,
  // UINT32_MAX: all of it), that it began with `tag`: as pf's sticky tags, that of the last rule
  // with a `tag` it matched there (deciding or not: a match rule after the deciding one tags too),
  // else `tag`.
  uint16_t tag_after(const Segment& segment, const MatchQuery& pass, uint16_t tag,
                     uint32_t last) const noexcept;
  // tag_after() for the in pass of a set of one segment that `deciding` decided (kNoRule: no rule
  // matched): evaluated up to a deciding quick rule, or the end of the quick anchor that decided.
  uint16_t tag_after_in(const MatchQuery& in, uint32_t deciding) const noexcept;
  std::vector<std::unique_ptr<TableCounters>> table_counters_;  // the tables with `counters`
  // Scrub and translation rules are few and evaluated first-match; see compile.cc.
  std::vector<ScrubRule> scrub_rules_;
  std::vector<std::shared_ptr<RuleStats>> scrub_stats_;  // by scrub_rules_' index
  std::vector<CompiledTranslation> translations_;        // the first stage's entries, then the second's
  std::vector<ListedRule> translation_listing_;
  std::vector<ListedRule> scrub_listing_;
  std::unique_ptr<Classifier> scrub_classifier_;
  // Translation's two stages: binat out and rdr in; nat out and binat in.
  std::unique_ptr<Classifier> translation_classifier_[2];
  uint32_t second_stage_base_ = 0;  // the index in translations_ of the second stage's first entry
};

}  // namespace pairwall::engine::rules
