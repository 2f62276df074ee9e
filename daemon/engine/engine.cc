#include "daemon/engine/engine.h"

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include "daemon/engine/checksum.h"
#include "daemon/engine/packet.h"
#include "daemon/engine/pool.h"
#include "daemon/engine/tcp_track.h"
#include "daemon/engine/translate.h"

namespace pairwall::engine {
namespace {

// A state whose windows moved without a protocol change is re-announced to the peer at most this
// often; protocol changes (and inserts) go at once. Bounded sync load per connection.
constexpr Millis kSyncRefresh{1000};

// Overloads are drained every 100 ms; a worker meets at most one per refused connection.
constexpr std::size_t kOverloadRingCapacity = 1024;

SipKey hash_key_from(const EngineConfig& config) {
  if (config.hash_key[0] == 0 && config.hash_key[1] == 0) return random_sip_key();
  return SipKey{config.hash_key[0], config.hash_key[1]};
}

// Field by field into the key's place: `key = key_of(p)` had GCC build the copy's last eight
// bytes on the stack and store them over the end of the address before them, and the hash's
// loads of the key stalled on both (pairwall-bench engine --only state --seconds 0.5 --runs 3,
// three alternating invocations: state_lookup_mpps at 1k states 7.73-7.76 -> 8.53-8.58).
void set_key(StateKey& key, const PacketView& p) {
  key.addr[0] = p.src;
  key.addr[1] = p.dst;
  key.port[0] = p.src_port;
  key.port[1] = p.dst_port;
  key.family = p.family;
  key.proto = p.proto;
  key.link = kNoIface;
}

void write_ttl(std::span<uint8_t> bytes, Family family, uint8_t ttl) noexcept {
  uint8_t* ip = bytes.data();
  if (family == Family::V4) {
    const uint16_t old_word = load_be16(ip + 8);  // TTL and protocol
    ip[8] = ttl;
    checksum_replace16(ip + 10, old_word, load_be16(ip + 8));
  } else {
    ip[7] = ttl;  // the hop limit has no checksum
  }
}

// A packet that meets scrub rules on both its passes takes the stricter settings of the two.
void tighten(rules::ScrubAction& scrub, const rules::ScrubAction& other) {
  if (!other.matched) return;
  scrub.matched = true;
  scrub.min_ttl = std::max(scrub.min_ttl, other.min_ttl);
  if (other.max_mss != 0 && (scrub.max_mss == 0 || other.max_mss < scrub.max_mss))
    scrub.max_mss = other.max_mss;
  scrub.random_id = scrub.random_id || other.random_id;
  scrub.no_df = scrub.no_df || other.no_df;
  scrub.reassemble_tcp = scrub.reassemble_tcp || other.reassemble_tcp;
  // A TOS is no stricter than another: the out pass's, which pf applies last, wins.
  if (other.set_tos) scrub.set_tos = other.set_tos;
}

// Flag combinations no TCP stack sends (pf_normalize_tcp): scans and stack fingerprinting.
bool tcp_flags_valid(uint8_t flags) {
  using namespace tcpflag;
  if (flags & kSyn) {
    if (flags & (kRst | kFin)) return false;
  } else if (!(flags & (kAck | kRst))) {
    return false;
  }
  if (!(flags & kAck) && (flags & (kFin | kPsh | kUrg))) return false;
  return true;
}

// Whether `block return` may answer an ICMP message with an unreachable, as pf_test_rule decides:
// only a query or its reply (ICMP_INFOTYPE), and an ICMPv6 informational message other than a
// redirect. No error is sent about an error (RFC 1122 3.2.2, RFC 4443 2.4(e)): that is every
// ICMPv6 type below 128 (RFC 4443 2.1), and IPv4's conversion and security failures (types 31, 40)
// as much as its unreachables.
bool icmp_answerable(const PacketView& packet) {
  const uint8_t type = packet.icmp.type;
  if (packet.family == Family::V6) return type >= 128 && type != 137;
  return type == 0 || type == 8 || type == 9 || type == 10 || (type >= 13 && type <= 18);
}

// Lowers every MSS option of a TCP segment above `max_mss` to it, as pf_normalize_mss does: the
// parser keeps the last one, as Linux and BSD stacks do, but a receiver that reads the first of
// two would otherwise take a size the clamp was meant to forbid. Returns whether one changed.
bool clamp_mss(std::span<uint8_t> bytes, const PacketView& packet, uint16_t max_mss) {
  uint8_t* tcp = bytes.data() + packet.l4_offset;
  uint8_t* checksum = tcp + 16;
  const uint8_t* end = tcp + packet.tcp.header_length;
  bool changed = false;
  for (uint8_t* option = tcp + 20; option < end;) {
    if (*option == 0) break;  // end of options
    if (*option == 1) {       // no-operation
      ++option;
      continue;
    }
    // The parser checked every option's length.
    if (option[0] == 2 && option[1] == 4 && load_be16(option + 2) > max_mss) {
      const uint16_t old_mss = load_be16(option + 2);
      store_be16(option + 2, max_mss);
      const bool odd = ((option + 2 - tcp) & 1) != 0;
      checksum_replace16(checksum, as_summed(old_mss, odd), as_summed(max_mss, odd));
      changed = true;
    }
    option += option[1];
  }
  return changed;
}

// pf_normalize_tcp: an urgent pointer without URG means nothing to the receiver, but stacks
// that read it anyway tell themselves apart by it (fingerprinting), and one that honoured it
// would read data this node's state saw as ordinary. Returns whether it was cleared.
bool clear_stray_urgent_pointer(std::span<uint8_t> bytes, const PacketView& packet) {
  uint8_t* tcp = bytes.data() + packet.l4_offset;
  const uint16_t urgent = load_be16(tcp + 18);
  if ((packet.tcp.flags & tcpflag::kUrg) != 0 || urgent == 0) return false;
  store_be16(tcp + 18, 0);
  checksum_replace16(tcp + 16, urgent, 0);
  return true;
}

// pf_normalize_tcp: the reserved bits (RFC 9293 3.1) mean nothing to a receiver; passed on, they
// carry data past the rules, and a scanner sets them to tell stacks apart by the answer. The
// nibble's fourth bit is AE, Accurate ECN's, and stays: cleared in one direction only, it would
// garble the congestion counter the ends feed back (FreeBSD's pf keeps it too). Whether they were
// cleared.
bool clear_reserved_bits(std::span<uint8_t> bytes, const PacketView& packet) {
  constexpr uint8_t kReserved = 0x0e;  // of the byte the data offset heads
  uint8_t* tcp = bytes.data() + packet.l4_offset;
  if ((tcp[12] & kReserved) == 0) return false;
  const uint16_t old_word = load_be16(tcp + 12);  // with the flags: a 16-bit word of the sum
  tcp[12] &= static_cast<uint8_t>(~kReserved);
  checksum_replace16(tcp + 16, old_word, load_be16(tcp + 12));
  return true;
}

// Whether sync hears of the state: not when its rule said (no-sync).
bool synced(const StateEntry& entry) {
  return (entry.flags & stateflag::kNoSync) == 0;
}

// A synproxy state before its splice: the handshakes are this node's.
bool proxying(const StateEntry& entry) {
  return entry.proxy == Proxy::Initiator || entry.proxy == Proxy::Responder;
}

// The segment this node sends to a synproxy state's initiator in its responder's name (by the
// addresses the initiator used), or to the responder in the initiator's (by the addresses past
// any translation).
SegmentSpec to_initiator(const StateEntry& entry, uint32_t seq, uint32_t ack, uint8_t flags,
                         uint16_t window) {
  const StateKey& stack = entry.key(0);
  return {stack.family, stack.addr[1], stack.addr[0], stack.port[1], stack.port[0],
          seq,          ack,           flags,         window,        0};
}

SegmentSpec to_responder(const StateEntry& entry, uint32_t seq, uint32_t ack, uint8_t flags,
                         uint16_t window) {
  const StateKey& wire = entry.key(1);
  return {wire.family, wire.addr[0], wire.addr[1], wire.port[0], wire.port[1], seq, ack, flags, window, 0};
}

// The answer to a synproxy state's initiator's SYN: a SYN-ACK with its MSS and a zero window, as
// pf's, so that its handshake ACK carries no data; its window opens with the splice's ACK.
SegmentSpec proxy_synack(const StateEntry& entry) {
  SegmentSpec synack =
      to_initiator(entry, entry.proxy_isn[0], entry.peer[0].seqlo + 1, tcpflag::kSyn | tcpflag::kAck, 0);
  synack.mss = entry.peer[0].mss;
  return synack;
}

// pf_send_challenge_ack: the ACK that answers a SYN on an established state, in the name of the
// end the SYN was for, back to its sender by the addresses it used: the receiver's next sequence
// number as the sender knows it (shifted by modulate state), and the sender's.
SegmentSpec challenge_ack(const StateEntry& entry, int side, const PacketView& syn) {
  const uint32_t shift = (entry.flags & stateflag::kModulated) != 0 ? entry.seqdiff[1 - side] : 0;
  SegmentSpec ack;
  ack.family = syn.family;
  ack.src = syn.dst;
  ack.dst = syn.src;
  ack.src_port = syn.dst_port;
  ack.dst_port = syn.src_port;
  ack.seq = entry.peer[1 - side].seqlo + shift;
  ack.ack = entry.peer[side].seqlo;
  ack.flags = tcpflag::kAck;
  return ack;
}

// fe80::/10 (RFC 4291 2.5.6), and the interface- and link-local multicast groups (2.7).
bool link_local6(const IpAddress& a) {
  return (a.hi >> 54) == (0xfe80ull >> 6);
}
// 169.254/16 (RFC 3927) or fe80::/10.
bool link_local(Family family, const IpAddress& a) {
  return family == Family::V4 ? (a.v4_value() >> 16) == 0xa9fe : link_local6(a);
}
bool small_scope_group6(const IpAddress& a) {
  return (a.hi >> 56) == 0xff && ((a.hi >> 48) & 0xf) <= 2;
}

// Traffic that never leaves its link: link-local addresses (fe80::/10, 169.254/16), link- and
// interface-local multicast groups (ff01::/16, ff02::/16 and their kind; 224.0.0.0/24, which no
// router forwards, RFC 5771 4), and neighbor discovery and MLD whatever their addresses (RFC 4861,
// RFC 3810: hop limit 255 or 1). Translation rules pass it by, as Linux's NAT leaves the ND and MLD
// it does not track: `nat on wan0 inet6 from any` rewriting this node's own solicitations to the
// nat address would break address resolution on the link, a VRRP or CARP advertisement's source
// the peer's election.
bool link_scoped(const PacketView& p) {
  if (p.family == Family::V4) {
    return link_local(p.family, p.src) || link_local(p.family, p.dst) || (p.dst.v4_value() >> 8) == 0xe00000;
  }
  const bool nd_or_mld = p.proto == ipproto::kIcmp6 && (!p.is_fragment || p.is_first_fragment) &&
                         ((p.icmp.type >= 130 && p.icmp.type <= 137) || p.icmp.type == 143);
  return link_local6(p.src) || link_local6(p.dst) || small_scope_group6(p.dst) || nd_or_mld;
}

// The link a flow is bound to (StateKey::link): IPv6 to or from a link-local address, or to or from
// an interface- or link-local group, seen on the hooks of this node's own traffic, where the
// link is the interface it arrives on or leaves by. The kernel forwards none of it (RFC 4291 2.5.6),
// and a forwarded flow's two directions cross different interfaces: its key holds no link.
// Taken from the key's addresses, which for some ICMPv6 lookups are not the packet's own.
IfaceId link_of(const StateKey& key, const PacketMeta& meta) {
  if (key.family != Family::V6 || meta.hook == Hook::Forward) return kNoIface;
  if (!link_local6(key.addr[0]) && !link_local6(key.addr[1]) && !small_scope_group6(key.addr[0]) &&
      !small_scope_group6(key.addr[1]))
    return kNoIface;
  return meta.hook == Hook::Output ? meta.out_iface : meta.in_iface;
}

// ff02::1, the link's all-nodes group (RFC 4291 2.7.1).
constexpr IpAddress kAllNodesV6{0xff02000000000000ull, 1};

// A neighbor solicitation or advertisement with its target (RFC 4861 4.3, 4.4).
constexpr uint16_t kNeighborMessageLength = 24;

bool is_multicast_v6(const IpAddress& address) {
  return (address.hi >> 56) == 0xff;  // ff00::/8 (RFC 4291 2.7)
}

// The solicited-node multicast group of an IPv6 address (RFC 4291 2.7.1): ff02::1:ff00:0/104 and
// the address's low 24 bits.
IpAddress solicited_node_group(const IpAddress& address) {
  return {0xff02000000000000ull, 0x00000001ff000000ull | (address.lo & 0xffffff)};
}

// by_state()'s way out with a verdict made elsewhere.
bool decided(Verdict& out, const Verdict& verdict) {
  out = verdict;
  return true;
}

constexpr uint32_t kAllHostsGroup = 0xe0000001;  // 224.0.0.1

Verdict drop(Reason reason, uint32_t rule = rules::kNoRule) {
  Verdict v;
  v.action = Verdict::Action::Drop;
  v.reason = reason;
  v.rule = rule;
  return v;
}

// A drop logged on `pass` whatever the rules say, as pf forces the log of what parsing and
// normalization drop, and of IP options no rule or state allows (PFRES_IPOPTIONS).
Verdict logged_drop(Reason reason, int pass, uint32_t rule = rules::kNoRule,
                    const rules::CompiledRule* by_rule = nullptr) {
  Verdict v = drop(reason, rule);
  v.by_rule = by_rule;
  v.log = logpass::of(pass);
  return v;
}

bool options_refused(const PacketView& packet, const StateEntry& state) {
  return packet.has_ip_options && (state.flags & stateflag::kAllowOpts) == 0;
}

// The rule that made a state, while the rule set in force still holds it.
const rules::CompiledRule* creator_in(const StateEntry& state, const rules::RuleSet& rules) {
  return rules.holds(state.creator) ? state.creator : nullptr;
}

// The verdict of a packet its state passes, as pf's: the state's rule, and its log option.
// `pass`: the one it is logged on (one state covers both passes: the packet's first).
Verdict passed_by_state(const StateEntry& state, const rules::RuleSet& rules, bool rewritten, int pass) {
  Verdict v;
  v.action = Verdict::Action::Accept;
  v.reason = Reason::State;
  v.rule = state.rule;
  v.by_rule = creator_in(state, rules);
  v.state = state.id;
  if ((state.flags & stateflag::kLog) && state.creator != nullptr && state.creator->log_states)
    v.log = logpass::of(pass);
  v.rewritten = rewritten;
  return v;
}

// A packet's rule passes: `in` on the arrival interface (pass 0), then `out` on the departure
// interface (pass 1). A forwarded packet meets both, a local one only its own.
constexpr rules::Direction kPassDirection[2] = {rules::Direction::In, rules::Direction::Out};
constexpr uint8_t kNoQuery = UINT8_MAX;

bool has_pass(const PacketMeta& meta, int pass) {
  return pass == 0 ? meta.hook != Hook::Output : meta.hook == Hook::Forward || meta.hook == Hook::Output;
}

IfaceId pass_iface(const PacketMeta& meta, int pass) {
  return pass == 0 ? meta.in_iface : meta.out_iface;
}

// Whether a packet of a bound state's connection crosses the interfaces its state is bound to
// (StateEntry::bound): pf keeps an `if-bound` state per interface, and a packet on any other finds
// none there. `from_initiator`: the packet travels the way the connection's first packet did.
bool crosses_bound_interfaces(const StateEntry& state, bool from_initiator, const PacketMeta& meta) {
  for (int pass = 0; pass < 2; ++pass) {
    if (!has_pass(meta, pass)) continue;
    const IfaceId bound = state.bound[from_initiator ? pass : 1 - pass];
    if (bound != kNoIface && pass_iface(meta, pass) != bound) return false;
  }
  return true;
}

// What a packet (or a quote) that found a translated state by one of its keys becomes: the other
// key, turned the way the found one was.
StateKey counterpart(const StateTable::Handle& state) {
  const StateKey& other = state->key(1 - state.key_index());
  return state.reversed() ? other.reversed() : other;
}

// Whether a packet that found a translated state is in a form the translation lets through:
// packets from the initiator's side arrive with the stack key, replies with the wire key. An ICMP
// error's quote is of a packet that left in translation, so it is the other way round. The same
// connection in any other form has bypassed the translation.
bool translation_admits(const StateTable::Handle& state, bool quote) {
  if (!state->translated()) return true;
  const int arriving = state.reversed() ? 1 : 0;
  return state.key_index() == (quote ? 1 - arriving : arriving);
}

// Whether `state` was found by `key`, either way round (and not by a key that merely collides
// with a translation being set up).
bool found_by(const StateTable::Handle& state, const StateKey& key) {
  const StateKey& found = state->key(state.key_index());
  return found == key || found == key.reversed();
}

// Before routing the engine only takes on the connections that a translation rule rewrites; the
// rest is decided after routing, on the hooks that know where the packet goes.
bool claims(const PacketMeta& meta, bool translated) {
  return meta.hook != Hook::Prerouting || translated;
}

// The packets of a known connection that a translation makes the engine's before routing: those
// whose destination it rewrites (the replies to a nat address, rdr's and binat's inbound way), as
// claims() takes new connections. `packet` is the packet's own key.
bool rewrites_destination(const StateTable::Handle& state, const StateKey& packet) {
  if (!state->translated()) return false;
  const StateKey leaving = counterpart(state);
  return leaving.addr[1] != packet.addr[1] || leaving.port[1] != packet.port[1];
}

// Accepted here to be decided after routing, by the hooks that know where the packet goes.
Verdict after_routing(bool rewritten) {
  Verdict v;
  v.action = Verdict::Action::Accept;
  v.reason = Reason::AfterRouting;
  v.rewritten = rewritten;
  return v;
}

// pf's proxy port range for nat without `port`; echo ids take the whole id space.
constexpr uint16_t kNatPortLow = 50001;
constexpr uint16_t kNatPortHigh = 65535;
// Candidates tried for a nat source port before the connection is refused (TranslationFailed).
constexpr uint32_t kPortProbes = 512;
// Addresses of a random or round-robin nat pool tried, the first included, before the connection
// is refused: pf walks the whole pool, which for a large prefix would make one packet cost
// millions of lookups.
constexpr uint64_t kPoolAddressProbes = 16;

// An empty rule set: pf's implicit pass, default timeouts. Used until the first load.
std::shared_ptr<const rules::RuleSet> empty_rules() {
  return std::make_shared<const rules::RuleSet>();
}

}  // namespace

// ---- Worker -------------------------------------------------------------------------------

Worker::Worker(Engine& engine)
    : events_(engine.config().event_ring_capacity), overloads_(kOverloadRingCapacity) {
  // Seeded once (from the OS unless the configuration fixes the seed); the packet path then draws
  // without a system call or a lock.
  const uint64_t fixed = engine.config().random_seed;
  random_state_ = (fixed != 0 ? fixed : random_sip_key().k0) | 1;
  seqdiff_key_ = fixed != 0 ? SipKey{fixed, ~fixed} : random_sip_key();
}

uint32_t Worker::next_seqdiff() noexcept {
  for (;;) {
    const uint64_t count = ++seqdiff_count_;
    const auto seqdiff = static_cast<uint32_t>(siphash13(seqdiff_key_, &count, 1));
    if (seqdiff != 0) return seqdiff;
  }
}

uint64_t Worker::next_random64() noexcept {
  return rules::next_draw(random_state_);
}

uint16_t Worker::next_random16() noexcept {
  return static_cast<uint16_t>(next_random64() >> 48);
}

bool Worker::generate(const SegmentSpec& segment, Verdict& verdict) noexcept {
  if (outbox_used_ == outbox_.size()) return false;
  if (verdict.generated == 0) verdict.generated_first = static_cast<uint8_t>(outbox_used_);
  build_segment(segment, outbox_[outbox_used_++]);
  ++verdict.generated;
  return true;
}

void Worker::emit(const StateRecord& record) noexcept {
  if (!events_.push(record)) {
    events_lost_.store(events_lost_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
}

// ---- Engine -------------------------------------------------------------------------------

Engine::Engine(EngineConfig config)
    : config_(config),
      sources_(config.shards, hash_key_from(config), rules::RuleSet().source_node_limit()),
      flows_(config.flow_log_capacity),
      states_(config.shards, hash_key_from(config),
              config.initial_state_limit != 0 ? config.initial_state_limit : rules::RuleSet().state_limit(),
              &sources_),
      rules_(empty_rules()),
      next_state_counter_(std::max<uint64_t>(config.first_state_counter, 1)),
      control_events_(config.control_ring_capacity) {
  states_.set_flow_log(&flows_);
}

void Engine::load_rules(std::shared_ptr<const rules::RuleSet> rules, std::optional<uint32_t> state_limit) {
  // Outside rules_mutex_: set_limit() takes the shard locks, and apply() reads the rules while
  // holding one.
  states_.set_limit(state_limit.value_or(rules->state_limit()));
  sources_.set_limit(rules->source_node_limit());
  sources_.set_default_linger(rules->timeouts().source_track);
  std::lock_guard lock(rules_mutex_);
  rules_ = std::move(rules);
  rules_generation_.fetch_add(1, std::memory_order_release);
}

std::shared_ptr<const rules::RuleSet> Engine::rules() const {
  std::lock_guard lock(rules_mutex_);
  return rules_;
}

void Worker::flush_scrub_counts() noexcept {
  for (std::size_t i = 0; i < scrub_counted_; ++i) {
    const ScrubCount& c = scrub_counts_[i];
    c.counters->evaluations.fetch_add(c.packets, std::memory_order_relaxed);
    c.counters->packets.fetch_add(c.packets, std::memory_order_relaxed);
    c.counters->bytes.fetch_add(c.bytes, std::memory_order_relaxed);
  }
  scrub_counted_ = 0;
}

void Engine::refresh_rules(Worker& worker) const noexcept {
  const uint64_t generation = rules_generation_.load(std::memory_order_acquire);
  if (generation == worker.rules_generation_) return;
  std::lock_guard lock(rules_mutex_);
  worker.rules_ = rules_;
  worker.rules_generation_ = rules_generation_.load(std::memory_order_relaxed);
}

// A state keeps the timeouts its creating rule sets itself; for the others, and for states
// learned from the peer, it follows the running rule set's global ones (pf's pf_state_expires).
Millis Engine::timeout_of(const StateEntry& entry, TimeoutClass timeout,
                          const rules::RuleSet& current) noexcept {
  return rules::state_timeout(entry.creator, timeout, current.timeouts());
}

void Engine::emit_control(const StateRecord& record) noexcept {
  if (!control_events_.push(record)) {
    control_events_lost_.store(control_events_lost_.load(std::memory_order_relaxed) + 1,
                               std::memory_order_relaxed);
  }
}

StateRecord Engine::record_of(const StateEntry& entry, Millis now) const {
  return make_record(entry, now, *rules());
}

StateRecord Engine::make_record(const StateEntry& entry, Millis now, const rules::RuleSet& current) noexcept {
  StateRecord r;
  r.kind = StateRecord::Kind::Insert;
  r.id = entry.id;
  r.stack_key = entry.key(0);
  r.wire_key = entry.key(1);
  r.src = entry.peer[0];
  r.dst = entry.peer[1];
  r.timeout = entry.timeout;
  r.expires_in = std::max(Millis{0}, entry.last_seen + timeout_of(entry, entry.timeout, current) - now);
  r.age = std::max(Millis{0}, now - entry.created);
  r.rule = entry.rule;
  r.flags = entry.flags & ~stateflag::kSourceConnection;  // the peer keeps no source nodes
  if ((entry.flags & stateflag::kModulated) != 0) {
    r.seqdiff = {entry.seqdiff[0], entry.seqdiff[1]};
    r.proxy = entry.proxy;
    r.proxy_isn = {entry.proxy_isn[0], entry.proxy_isn[1]};
  }
  if (entry.scrub_tcp) {
    r.scrub_tcp = true;
    r.scrub = {entry.scrub[0], entry.scrub[1]};
  }
  r.bound = {entry.bound[0], entry.bound[1]};
  if (entry.creator_rules != nullptr && entry.creator_rules->holds(entry.creator)) {
    r.rules_digest = entry.creator_rules->digest();
    r.rule_index = entry.creator_rules->index_of(entry.creator);
    for (int pass = 0; pass < 2; ++pass) {
      if (entry.translators.get(pass) != TranslatorRefs::kNone)
        r.translation_index[pass] = entry.translators.get(pass);
    }
  }
  return r;
}

void Engine::emit_update(Worker& worker, StateEntry& entry, Millis now,
                         const rules::RuleSet& current) noexcept {
  if (!synced(entry)) return;
  entry.last_synced = now;
  StateRecord update = make_record(entry, now, current);
  update.kind = StateRecord::Kind::Update;
  worker.emit(update);
}

void Engine::emit_delete(Worker& worker, const StateEntry& entry) noexcept {
  if (!synced(entry)) return;
  StateRecord gone;
  gone.kind = StateRecord::Kind::Delete;
  gone.id = entry.id;
  worker.emit(gone);
}

// A packet parsed, with its state key, and the key's hash when it will be looked up by that key.
struct Engine::Parsed {
  PacketView packet;
  Reason parse = Reason::Internal;
  bool lookup = false;  // parsed, not a fragment, not an ICMP error (those look up the quote)
  StateKey key;
  uint64_t hash = 0;
  bool rewritten = false;  // normalization changed the packet bytes
  // The passes that meet the rules (scrub, translation, filter), decided by screen(): the
  // packet's own, less those on an interface `set skip` exempts; and by translate() for the out
  // pass of a connection translated before routing, which meets its scrub and filter rules but not
  // its nat.
  bool filtered[2] = {false, false};
  bool from_node = false;       // sent by this node itself (Hook::Output), set by screen()
  bool reassemble_tcp = false;  // a TCP packet a scrub rule said `reassemble tcp` of, set by screen()
};

// What the translation rules make of a new connection (translate()): the packet as each pass's
// filter rules see it, and the key it leaves with, which becomes the state's wire key.
struct Engine::Translation {
  const PacketView* seen[2] = {};      // pass 0 (in): after rdr; pass 1 (out): after rdr and nat
  std::optional<PacketView> after[2];  // the views a rule rewrote, only where one applied
  StateKey wire;                       // the packet's own key when nothing translates it
  bool translated = false;
  // Per pass, as pf's: false where that pass's `rdr pass` (in) or `nat pass` (out) lets it by
  // without its filter rules; the other pass still meets its own.
  bool filtered[2] = {true, true};
  // The out pass's nat rule, which chose the source port (ICMP query id) between port_low and
  // port_high, or kept the one there is; it may choose again.
  const rules::CompiledTranslation* nat = nullptr;
  // Per pass, the rule that translated it, which the state counts to (StateEntry::translators).
  const rules::CompiledTranslation* by[2] = {nullptr, nullptr};
  uint16_t port_low = 0;
  uint16_t port_high = 0;
  bool failed = false;  // no free source port: the connection is refused
  // The interface each pass's rules see: the packet's own, and before routing, for the out pass
  // of a connection translated there, the one the Router says it will leave by.
  IfaceId iface[2] = {kNoIface, kNoIface};
  // Tags (`tag`, `tagged`): what the in pass's translation rules tagged the packet with, and what
  // the out pass's did (0: none, the out pass carries what the in pass left). Where an out
  // translation rule tests tags, its lookup needed the in pass's filter rules' outcome first:
  // the in pass's deciding rule is then known here, and tag[1] is the out pass's tag, 0 or not.
  uint16_t tag[2] = {0, 0};
  uint32_t in_decided = rules::RuleSet::kUndecided;
  bool urpf_failed = false;  // the in pass's source failed the unicast reverse path check
  // Per pass, where a rule asks (`no-route`): the routing tables have no route for the source,
  // the destination of the packet as that pass sees it.
  bool src_no_route[2] = {false, false};
  bool dst_no_route[2] = {false, false};

  // The filter rules' query of a pass that meets them.
  rules::MatchQuery query(int pass, bool in_pass_meets_rules) const {
    uint16_t carried = tag[pass];
    // Where no filter rules of the in pass can change it, the out pass carries what the in pass's
    // translation left.
    if (pass == 1 && carried == 0 && !in_pass_meets_rules) carried = tag[0];
    rules::MatchQuery out{seen[pass], kPassDirection[pass], iface[pass], carried, pass == 0 && urpf_failed};
    out.src_no_route = src_no_route[pass];
    out.dst_no_route = dst_no_route[pass];
    out.received_on = iface[0];  // where it arrived: none where the node sent it
    return out;
  }
};

void Engine::prepare(std::span<uint8_t> bytes, const PacketMeta& meta, Parsed& parsed) const noexcept {
  parsed.parse = parse_packet(bytes, parsed.packet);
  parsed.lookup = false;
  parsed.rewritten = false;
  if (parsed.parse != Reason::Match) return;
  const PacketView& p = parsed.packet;
  set_key(parsed.key, p);
  parsed.key.link = link_of(parsed.key, meta);
  parsed.lookup = !p.is_fragment && !(p.is_icmp() && p.icmp.is_error);
  if (parsed.lookup) parsed.hash = states_.hash(parsed.key);
}

Verdict Engine::process(Worker& worker, std::span<uint8_t> bytes, const PacketMeta& meta,
                        Millis now) noexcept {
  worker.count_packet(bytes.size());
  refresh_rules(worker);
  worker.outbox_used_ = 0;
  Parsed parsed;
  prepare(bytes, meta, parsed);
  Verdict verdict = decide(worker, bytes, parsed, meta, now);
  finish(worker, bytes, parsed, meta, verdict);
  worker.flush_scrub_counts();
  return verdict;
}

// Every packet's last step: its reason counted, and a packet the engine rewrote whose transport
// checksum the kernel had left to finish made whole before it goes back, or for a GSO packet left
// as the partial sum the kernel's segmentation starts from (translate.h says why).
void Engine::finish(Worker& worker, std::span<uint8_t> bytes, const Parsed& parsed, const PacketMeta& meta,
                    Verdict& verdict) noexcept {
  if (verdict.rewritten && meta.checksum_partial && verdict.action == Verdict::Action::Accept) {
    if (meta.gso) {
      partial_transport_checksum(bytes, parsed.packet);
    } else {
      complete_transport_checksum(bytes, parsed.packet);
    }
  }
  // A skipped packet is not claimed either: past routing, its other pass may still be filtered.
  verdict.claimed = meta.hook == Hook::Prerouting && verdict.action == Verdict::Action::Accept &&
                    verdict.reason != Reason::AfterRouting && verdict.reason != Reason::Skipped;
  worker.counters_.add(verdict.reason);
}

// A group's passes meet the rules in one classifier batch.
static_assert(rules::Classifier::kBatch >= 2 * Engine::kPrefetchGroup);

void Engine::process_batch(Worker& worker, std::span<BatchPacket> batch, Millis now) noexcept {
  refresh_rules(worker);
  worker.outbox_used_ = 0;
  const rules::RuleSet& rules = *worker.rules_;
  rules::DecisionContext decision{&worker.random_state_, now};
  // Two groups in flight: while one is decided, the next one's buckets and then its entries are
  // on their way.
  Parsed parsed[2][kPrefetchGroup];
  uint8_t new_flows[kPrefetchGroup];
  // Constructed for new flows only: a group of state hits pays nothing for it.
  std::optional<Translation> translations[kPrefetchGroup];
  rules::MatchQuery queries[2 * kPrefetchGroup];
  uint32_t decided[2 * kPrefetchGroup];
  uint8_t pass_query[kPrefetchGroup][2];  // where each new flow's passes are in queries
  auto group_of = [&](std::size_t first) {
    return batch.subspan(first, std::min(kPrefetchGroup, batch.size() - first));
  };
  if (!batch.empty()) {
    start_lookups(group_of(0), parsed[0]);
    fetch_entries(group_of(0).size(), parsed[0]);
  }
  for (std::size_t first = 0, g = 0; first < batch.size(); first += kPrefetchGroup, ++g) {
    const std::span<BatchPacket> group = group_of(first);
    const std::size_t n = group.size();
    Parsed* const own = parsed[g & 1];
    const std::size_t next_first = first + kPrefetchGroup;
    Parsed* const next = next_first < batch.size() ? parsed[(g + 1) & 1] : nullptr;
    if (next != nullptr) start_lookups(group_of(next_first), next);

    // The states' verdicts; halfway, the next group's buckets have arrived and its entries are
    // asked for. The packets no state knows then meet the rules together
    // (RuleSet::evaluate_batch).
    std::size_t new_count = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (i == n / 2 && next != nullptr) fetch_entries(group_of(next_first).size(), next);
      BatchPacket& p = group[i];
      worker.count_packet(p.bytes.size());
      const std::optional<Verdict> screened = screen(worker, p.bytes, own[i], p.meta);
      if (screened) p.verdict = *screened;
      if (screened || by_state(worker, p.bytes, own[i], p.meta, now, p.verdict)) {
        finish(worker, p.bytes, own[i], p.meta, p.verdict);
      } else {
        new_flows[new_count++] = static_cast<uint8_t>(i);
      }
    }
    if (new_count == 0) continue;

    std::size_t query_count = 0;
    for (std::size_t k = 0; k < new_count; ++k) {
      const PacketMeta& meta = group[new_flows[k]].meta;
      Translation& translation = translations[k].emplace();
      translate(worker, group[new_flows[k]].bytes, own[new_flows[k]], meta, translation, now);
      for (int pass = 0; pass < 2; ++pass) {
        pass_query[k][pass] = kNoQuery;
        if (!own[new_flows[k]].filtered[pass] || !translation.filtered[pass] ||
            !claims(meta, translation.translated))
          continue;
        pass_query[k][pass] = static_cast<uint8_t>(query_count);
        queries[query_count++] = translation.query(pass, pass_query[k][0] != kNoQuery);
      }
    }
    if (!rules.out_pass_waits() && !rules.out_translation_tests_tags()) {
      rules.evaluate_batch({queries, query_count}, {decided, query_count}, &decision);
    } else if (!rules.out_translation_tests_tags()) {
      // A filter rule tests tags: the out passes wait for the tags the in passes leave.
      std::array<const rules::MatchQuery*, 2> packets[kPrefetchGroup];
      std::array<uint32_t, 2> passes[kPrefetchGroup];
      for (std::size_t k = 0; k < new_count; ++k) {
        for (int pass = 0; pass < 2; ++pass)
          packets[k][pass] = pass_query[k][pass] != kNoQuery ? &queries[pass_query[k][pass]] : nullptr;
      }
      rules.evaluate_passes_batch({packets, new_count}, {passes, new_count}, &decision);
      for (std::size_t k = 0; k < new_count; ++k) {
        for (int pass = 0; pass < 2; ++pass) {
          if (pass_query[k][pass] != kNoQuery) decided[pass_query[k][pass]] = passes[k][pass];
        }
      }
    } else {
      // An out pass's translation tested tags: translate() has matched the in passes already.
      for (std::size_t k = 0; k < new_count; ++k) {
        const uint8_t in = pass_query[k][0];
        const uint8_t out = pass_query[k][1];
        const auto passes = rules.evaluate_passes(in != kNoQuery ? &queries[in] : nullptr,
                                                  out != kNoQuery ? &queries[out] : nullptr,
                                                  translations[k]->in_decided, &decision);
        if (in != kNoQuery) decided[in] = passes[0];
        if (out != kNoQuery) decided[out] = passes[1];
      }
    }
    auto deciding = [&](std::size_t k, int pass) {
      return pass_query[k][pass] == kNoQuery ? rules::kNoRule : decided[pass_query[k][pass]];
    };
    bool created = false;
    for (std::size_t k = 0; k < new_count; ++k) {
      BatchPacket& p = group[new_flows[k]];
      const Parsed& flow = own[new_flows[k]];
      // In packet order, as process() would: a packet whose state an earlier one of the group
      // has just created belongs to that state, not to the rules.
      if (!created || !by_state(worker, p.bytes, flow, p.meta, now, p.verdict)) {
        p.verdict =
            by_rules(worker, p.bytes, flow, p.meta, *translations[k], {deciding(k, 0), deciding(k, 1)}, now);
      }
      created = created || p.verdict.state.counter != 0;
      finish(worker, p.bytes, flow, p.meta, p.verdict);
    }
  }
  worker.flush_scrub_counts();
}

// A group's first steps, each a sweep over the group so that the loads of one have time to
// arrive before the next needs them. Parsing and hashing come first, apart from the bucket
// prefetches: a prefetch that misses the TLB holds up retirement until its page walk is done,
// and interleaved with the parsing it left too few of them in flight at a time.
void Engine::start_lookups(std::span<BatchPacket> group, Parsed* parsed) const noexcept {
  for (std::size_t i = 0; i < group.size(); ++i) prepare(group[i].bytes, group[i].meta, parsed[i]);
  for (std::size_t i = 0; i < group.size(); ++i) {
    if (parsed[i].lookup) states_.prefetch_bucket(parsed[i].hash);
  }
}

void Engine::fetch_entries(std::size_t n, const Parsed* parsed) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    if (parsed[i].lookup) states_.prefetch_entry(parsed[i].hash);
  }
}

// One packet, top to bottom: parse (prepare()), normalize, state, rules, state creation.
Verdict Engine::decide(Worker& worker, std::span<uint8_t> bytes, Parsed& parsed, const PacketMeta& meta,
                       Millis now) noexcept {
  // One verdict, returned in place (by_state() says why).
  Verdict verdict;
  if (std::optional<Verdict> screened = screen(worker, bytes, parsed, meta)) {
    verdict = *screened;
  } else if (!by_state(worker, bytes, parsed, meta, now, verdict)) {
    const rules::RuleSet& rules = *worker.rules_;
    rules::DecisionContext decision{&worker.random_state_, now};
    Translation translation;
    translate(worker, bytes, parsed, meta, translation, now);
    rules::MatchQuery passes[2];
    const rules::MatchQuery* meets[2] = {nullptr, nullptr};  // the passes that meet the rules
    for (int pass = 0; pass < 2; ++pass) {
      if (!parsed.filtered[pass] || !translation.filtered[pass] || !claims(meta, translation.translated))
        continue;
      passes[pass] = translation.query(pass, meets[0] != nullptr);
      meets[pass] = &passes[pass];
    }
    verdict = by_rules(worker, bytes, parsed, meta, translation,
                       rules.evaluate_passes(meets[0], meets[1], translation.in_decided, &decision), now);
  }
  return verdict;
}

// The parse result and normalization: a verdict for packets dropped here. One exit per outcome,
// each with its reason, here and in the phases after.
std::optional<Verdict> Engine::screen(Worker& worker, std::span<uint8_t> bytes, Parsed& parsed,
                                      const PacketMeta& meta) const noexcept {
  const rules::RuleSet& rules = *worker.rules_;

  // 0. Skipped interfaces: a packet no pass of which meets the rules is not looked at (pf).
  for (int pass = 0; pass < 2; ++pass)
    parsed.filtered[pass] = has_pass(meta, pass) && !rules.skips(pass_iface(meta, pass));
  parsed.from_node = meta.hook == Hook::Output;
  if (!parsed.filtered[0] && !parsed.filtered[1]) {
    Verdict v;
    v.action = Verdict::Action::Accept;
    v.reason = Reason::Skipped;
    return v;
  }

  // What parsing and normalization drop is logged on the packet's first pass.
  const int first_pass = parsed.filtered[0] ? 0 : 1;
  const auto refuse = [first_pass](Reason reason) { return logged_drop(reason, first_pass); };

  // 1. Parse.
  if (parsed.parse != Reason::Match) return refuse(parsed.parse);
  PacketView& packet = parsed.packet;

  // 2. Normalize. The kernel reassembles fragments before the queue when defragmentation is
  // active; a fragment that still reaches us cannot be matched to ports, so it is dropped.
  if (packet.is_fragment) return refuse(Reason::Fragment);
  if (packet.is_tcp() && !tcp_flags_valid(packet.tcp.flags)) return refuse(Reason::BadTcpFlags);
  // RFC 1112 appendix I: IGMP to all hosts never leaves its link, so its TTL is 1. Another is a misuse of
  // the router alert IGMP may carry past the rules' allow-opts; pf drops it whatever they allow.
  if (packet.proto == ipproto::kIgmp && packet.family == Family::V4 && packet.ttl != 1 &&
      packet.dst.v4_value() == kAllHostsGroup)
    return refuse(Reason::IpOptions);
  if (mld_off_link(packet)) return refuse(Reason::IpOptions);
  // Scrub rules apply per pass like filter rules: a forwarded packet meets `scrub in` on its
  // arrival interface and `scrub out` on its departure interface; the stricter settings win.
  rules::ScrubAction scrub;
  if (parsed.filtered[0]) {
    scrub = rules.scrub(packet, rules::Direction::In, meta.in_iface);
    worker.count_scrub(scrub.counters, bytes.size());
  }
  if (parsed.filtered[1]) {
    const rules::ScrubAction out = rules.scrub(packet, rules::Direction::Out, meta.out_iface);
    worker.count_scrub(out.counters, bytes.size());
    tighten(scrub, out);
  }
  // pf_normalize_tcp_stateful's "multiple timestamps": which one would the ends read?
  parsed.reassemble_tcp = scrub.reassemble_tcp && packet.is_tcp();
  if (parsed.reassemble_tcp && packet.tcp.timestamps_repeated) return refuse(Reason::BadTimestamp);
  if (scrub.matched && normalize(worker, bytes, packet, scrub)) parsed.rewritten = true;

  return std::nullopt;
}

// Rewrites the packet as a matched scrub action says; whether it changed a byte.
bool Engine::normalize(Worker& worker, std::span<uint8_t> bytes, PacketView& packet,
                       const rules::ScrubAction& scrub) noexcept {
  bool rewritten = false;
  if (scrub.min_ttl != 0 && packet.ttl < scrub.min_ttl && !link_scoped(packet)) {
    // pf's min-ttl raises the TTL (hop limit), so that a packet cannot be aimed to expire past
    // the firewall but short of its destination (an evasion of what is seen here). Traffic that
    // never leaves its link has no such destination, and some of its receivers discard it unless
    // its TTL is the 1 it was sent with (MLD, RFC 2710 3; IGMP to all hosts, as screen() drops a
    // peer's): pf raises that too, and breaks group membership on the link.
    write_ttl(bytes, packet.family, scrub.min_ttl);
    packet.ttl = scrub.min_ttl;
    rewritten = true;
  }
  if (packet.family == Family::V4) {
    // IPv4 flags/fragment-offset word (bytes 6-7) and identification (bytes 4-5); the header
    // checksum (bytes 10-11) is never left to the kernel, so it is always updated.
    uint8_t* ip = bytes.data();
    // pf_normalize_ip leaves a whole datagram only DF: the reserved flag (RFC 791 3.1) means
    // nothing to a receiver, and passed on it carries a bit past the rules or tells stacks apart.
    const uint16_t old_word = load_be16(ip + 6);
    const auto new_word = static_cast<uint16_t>(old_word & ~(scrub.no_df ? 0xc000 : 0x8000));
    if (new_word != old_word) {
      store_be16(ip + 6, new_word);
      checksum_replace16(ip + 10, old_word, new_word);
      packet.dont_fragment = (new_word & 0x4000) != 0;
      rewritten = true;
    }
    if (scrub.random_id) {
      // pf's random-id: hide the sender's ID sequence (host counting, idle scans).
      const uint16_t old_id = load_be16(ip + 4);
      const uint16_t new_id = worker.next_random16();
      store_be16(ip + 4, new_id);
      checksum_replace16(ip + 10, old_id, new_id);
      rewritten = true;
    }
  }
  if (scrub.set_tos) {
    // pf's set-tos: the rule's DSCP (RFC 2474); the ECN field (RFC 3168) stays as the ends set it.
    constexpr uint8_t kEcn = 0x03;
    uint8_t* ip = bytes.data();
    if (packet.family == Family::V4) {
      const uint16_t old_word = load_be16(ip);  // version, header length and TOS
      ip[1] = static_cast<uint8_t>(*scrub.set_tos | (ip[1] & kEcn));
      if (load_be16(ip) != old_word) {
        checksum_replace16(ip + 10, old_word, load_be16(ip));
        rewritten = true;
      }
    } else {
      // The traffic class straddles the first two bytes (RFC 8200 3); no checksum covers it.
      const auto old_class = static_cast<uint8_t>((ip[0] & 0x0f) << 4 | ip[1] >> 4);
      const auto new_class = static_cast<uint8_t>(*scrub.set_tos | (old_class & kEcn));
      if (new_class != old_class) {
        ip[0] = static_cast<uint8_t>((ip[0] & 0xf0) | new_class >> 4);
        ip[1] = static_cast<uint8_t>((ip[1] & 0x0f) | new_class << 4);
        rewritten = true;
      }
    }
  }
  if (scrub.max_mss != 0 && packet.is_tcp() && packet.tcp.has_mss &&
      clamp_mss(bytes, packet, scrub.max_mss)) {
    packet.tcp.mss = std::min(packet.tcp.mss, scrub.max_mss);
    rewritten = true;
  }
  if (packet.is_tcp() && clear_stray_urgent_pointer(bytes, packet)) rewritten = true;
  if (packet.is_tcp() && clear_reserved_bits(bytes, packet)) rewritten = true;
  return rewritten;
}

// Where a packet this node decides before routing will leave, as the worker's Router says; kNoIface
// without one.
IfaceId Engine::egress_before_routing(Worker& worker, Family family, const IpAddress& src,
                                      const IpAddress& dst, const PacketMeta& meta, Millis now) noexcept {
  if (worker.router_ == nullptr) return kNoIface;
  return worker.router_->egress({family, src, dst, meta.in_link, meta.mark}, now);
}

// The scrub out of `out` for a packet before routing: matched as the packet will leave
// (`leaving`), applied to `packet`. Whether it changed a byte.
bool Engine::scrub_out_before_routing(Worker& worker, std::span<uint8_t> bytes, const PacketView& leaving,
                                      PacketView& packet, IfaceId out) noexcept {
  const rules::ScrubAction scrub = worker.rules_->scrub(leaving, rules::Direction::Out, out);
  worker.count_scrub(scrub.counters, bytes.size());
  return scrub.matched && normalize(worker, bytes, packet, scrub);
}

// A translated connection's later packet before routing, as translate() scrubs its first: the
// scrub out of the interface it will leave by.
void Engine::scrub_before_routing(Worker& worker, std::span<uint8_t> bytes, const PacketView& packet,
                                  const PacketMeta& meta, StateEntry& state, const StateKey& leaving,
                                  Millis now) noexcept {
  const rules::RuleSet& rules = *worker.rules_;
  if (!rules.has_scrub()) return;
  // Known since the connection's first packet. A state learned from the peer asks the Router at its
  // first packet here, and keeps the answer (asked again only while it is this node itself): the
  // Router keeps its answers per destination, and a question per packet would thrash them with
  // the replies of many inside hosts.
  if (state.leaves_by == kNoIface)
    state.leaves_by =
        egress_before_routing(worker, leaving.family, leaving.addr[0], leaving.addr[1], meta, now);
  const IfaceId out = state.leaves_by;
  if (out == kNoIface || rules.skips(out)) return;
  PacketView view = packet;
  view.src = leaving.addr[0];
  view.dst = leaving.addr[1];
  if (packet.is_tcp() || packet.is_udp()) {
    view.src_port = leaving.port[0];
    view.dst_port = leaving.port[1];
  }
  scrub_out_before_routing(worker, bytes, view, view, out);
}

namespace {

// The tracker a state asks for, for a packet that end `side` sent.
TrackResult track_by_state(StateEntry& entry, int side, const PacketView& packet) noexcept {
  PeerTracking& sender = entry.peer[side];
  PeerTracking& receiver = entry.peer[1 - side];
  if ((entry.flags & stateflag::kSloppy) != 0) return track_sloppy(sender, receiver, packet, entry.timeout);
  if (entry.adopted) return track_packet(sender, receiver, packet, entry.timeout);
  return adopt_packet(sender, receiver, packet, entry.timeout);
}

}  // namespace

// Out of line, so that only modulated states pay for a copy of the view.
[[gnu::noinline]] TrackResult Engine::track_modulated(Worker& worker, StateEntry& entry, int side,
                                                      const PacketView& packet) noexcept {
  uint32_t& own = entry.seqdiff[side];
  const uint32_t other = entry.seqdiff[1 - side];
  // Both offsets are drawn with the state (see by_rules()); only a state inserted by a peer that
  // draws the responder's on its SYN-ACK, as pf does, arrives without one, and gets it here. (A
  // synproxy state's offsets follow from the ends' numbers, and may be 0.)
  if (own == 0 && other != 0 && (packet.tcp.flags & tcpflag::kSyn) != 0 && entry.proxy == Proxy::None)
    own = worker.next_seqdiff();
  if (other == 0 || (packet.tcp.flags & tcpflag::kAck) == 0) return track_by_state(entry, side, packet);
  PacketView own_numbers = packet;
  own_numbers.tcp.ack -= other;
  return track_by_state(entry, side, own_numbers);
}

bool Engine::modulate(std::span<uint8_t> bytes, const StateEntry& entry, int side,
                      const PacketView& packet) noexcept {
  const uint32_t own = entry.seqdiff[side];
  const uint32_t other = (packet.tcp.flags & tcpflag::kAck) != 0 ? entry.seqdiff[1 - side] : 0;
  if (own == 0 && other == 0) return false;
  modulate_segment(bytes, packet, own, other);
  return true;
}

namespace {

// What a segment's echo lost on its way here: the receiver's timestamp offset. A SYN's echo is 0
// and means nothing (RFC 7323 3.2); pf leaves every 0 as it is.
uint32_t echo_shift(const StateEntry& entry, int side, const PacketView& packet) {
  return packet.tcp.ts_echo != 0 ? entry.scrub[1 - side].ts_mod : 0;
}

}  // namespace

Reason Engine::scrub_check(StateEntry& entry, int side, const PacketView& packet, Millis now) noexcept {
  // pf_normalize_tcp_stateful's "multiple timestamps": which one would the ends read?
  if (packet.tcp.timestamps_repeated) return Reason::BadTimestamp;
  return check_timestamps(entry.watch[side], entry.watch[1 - side], packet,
                          packet.tcp.ts_echo - echo_shift(entry, side, packet),
                          tcp_state_established(entry.peer[0], entry.peer[1]), entry.created, now);
}

bool Engine::scrub_segment(std::span<uint8_t> bytes, StateEntry& entry, int side, const PacketView& packet,
                           Millis now) noexcept {
  const uint32_t echo_sub = echo_shift(entry, side, packet);
  watch_segment(entry.watch[side], packet, packet.tcp.ts_echo - echo_sub, entry.created, now);
  TcpScrub& own = entry.scrub[side];
  bool rewritten = false;
  // Traffic of one link keeps its TTL, as min-ttl leaves it (normalize()).
  if (packet.ttl > own.ttl) {
    own.ttl = packet.ttl;
  } else if (packet.ttl < own.ttl && !link_scoped(packet)) {
    write_ttl(bytes, packet.family, own.ttl);
    rewritten = true;
  }
  if (packet.tcp.has_timestamps) {
    // Some stacks send a value of 0 until the handshake is done: pf leaves it as it is, as an echo of 0.
    const uint32_t value_add = packet.tcp.ts_value != 0 ? own.ts_mod : 0;
    if (value_add != 0 || echo_sub != 0) {
      modulate_timestamps(bytes, packet, value_add, echo_sub);
      rewritten = true;
    }
  }
  return rewritten;
}

// pf_synproxy: the initiator's SYN was answered when the state was made (by_rules()); its
// handshake ACK opens the connection to the responder, and the responder's SYN-ACK splices the two.
// Retransmissions drive it: a repeated SYN is answered again, and a repeated handshake ACK sends
// the SYN to the responder again. Anything else is dropped, as are the ACKs themselves: the ends
// only ever meet each other's packets once both are established.
[[gnu::noinline]] Verdict Engine::proxy_handshake(Worker& worker, StateTable::Handle& state, int side,
                                                  const PacketView& packet, Millis now) noexcept {
  using namespace tcpflag;
  StateEntry& entry = *state;
  const rules::RuleSet& rules = *worker.rules_;
  PeerTracking& initiator = entry.peer[0];
  PeerTracking& responder = entry.peer[1];
  const uint32_t isn = initiator.seqlo;  // the initiator's SYN's
  const TcpInfo& th = packet.tcp;
  const uint8_t handshake_flags = th.flags & (kSyn | kAck | kRst | kFin);
  Verdict v = drop(Reason::Synproxy, entry.rule);
  v.by_rule = rules.holds(entry.creator) ? entry.creator : nullptr;
  v.state = entry.id;
  auto send = [&](const SegmentSpec& segment) {
    entry.adopted = true;  // this node's traffic now, whoever began the handshake
    if (!worker.generate(segment, v)) v.reason = Reason::Memory;
  };

  if (side == 0) {
    if (entry.proxy == Proxy::Initiator && handshake_flags == kSyn && th.seq == isn) {
      send(proxy_synack(entry));  // its SYN again: the SYN-ACK was lost
      return v;
    }
    if (handshake_flags != kAck || th.seq != isn + 1 || th.ack != entry.proxy_isn[0] + 1) return v;
    if (entry.proxy == Proxy::Initiator && !connection_counted(worker, entry, now)) {
      // pf_synproxy's pf_src_connlimit: the client's handshake is complete, and the connection
      // that goes over max-src-conn or its rate ends here, before the server hears of it.
      emit_delete(worker, entry);
      states_.erase(state);
      v.reason = Reason::SourceLimit;
      return v;
    }
    if (entry.proxy == Proxy::Initiator) {
      entry.proxy = Proxy::Responder;
      entry.proxy_isn[1] = worker.next_seqdiff();
      initiator.max_win = std::max<uint32_t>(th.window, 1);  // unscaled: no scaling was agreed
      states_.touch(state, TimeoutClass::TcpOpening, timeout_of(entry, TimeoutClass::TcpOpening, rules), now);
      emit_update(worker, entry, now, rules);
    }
    // A zero window again (pf's): the responder's first data waits for the splice's ACK.
    SegmentSpec syn = to_responder(entry, entry.proxy_isn[1], 0, kSyn, 0);
    syn.mss = initiator.mss;
    send(syn);
    return v;
  }

  // From the responder, only its SYN-ACK to this node's SYN.
  if (entry.proxy != Proxy::Responder || handshake_flags != (kSyn | kAck) || th.ack != entry.proxy_isn[1] + 1)
    return v;
  const uint32_t responder_isn = th.seq;
  responder.max_win = std::max<uint32_t>(th.window, 1);
  if (th.has_mss) responder.mss = th.mss;
  // Each end keeps its own numbers; the node shifts them into the other's, as modulate state does.
  entry.seqdiff[0] = entry.proxy_isn[1] - isn;
  entry.seqdiff[1] = entry.proxy_isn[0] - responder_isn;
  for (PeerTracking* end : {&initiator, &responder}) {
    end->wscale = 0;
    end->state = static_cast<uint8_t>(TcpState::Established);
  }
  initiator.seqlo = isn + 1;
  initiator.seqhi = isn + 1 + responder.max_win;
  responder.seqlo = responder_isn + 1;
  responder.seqhi = responder_isn + 1 + initiator.max_win;
  entry.proxy = Proxy::Spliced;
  if (entry.source != nullptr && !connection_admitted(worker, state, now)) {
    // Counted on the client's ACK above; only a state whose ACK another node saw (a merged
    // update) is counted here, and the responder's half-open connection times out.
    emit_delete(worker, entry);
    states_.erase(state);
    v.reason = Reason::SourceLimit;
    return v;
  }
  send(to_responder(entry, entry.proxy_isn[1] + 1, responder_isn + 1, kAck,
                    static_cast<uint16_t>(std::min<uint32_t>(initiator.max_win, UINT16_MAX))));
  send(to_initiator(entry, entry.proxy_isn[0] + 1, isn + 1, kAck,
                    static_cast<uint16_t>(std::min<uint32_t>(responder.max_win, UINT16_MAX))));
  states_.touch(state, TimeoutClass::TcpEstablished, timeout_of(entry, TimeoutClass::TcpEstablished, rules),
                now);
  emit_update(worker, entry, now, rules);
  return v;
}

// 3. State lookup: the verdict of the packet's state, or nothing for a packet no state knows. An
// ICMP error belongs to the state of the packet it quotes.
bool Engine::by_state(Worker& worker, std::span<uint8_t> bytes, const Parsed& parsed, const PacketMeta& meta,
                      Millis now, Verdict& verdict) noexcept {
  const rules::RuleSet& rules = *worker.rules_;
  const PacketView& packet = parsed.packet;
  const bool rewritten = parsed.rewritten;
  const int pass = parsed.filtered[0] ? 0 : 1;  // the packet's first, which logs it
  if (packet.is_icmp() && packet.icmp.is_error) {
    PacketView quoted;
    const auto inner =
        std::span<const uint8_t>(bytes).subspan(packet.icmp.quoted_offset, packet.payload_length);
    if (parse_quoted_packet(inner, quoted) == Reason::Match && quoted.family == packet.family) {
      StateKey qkey;
      set_key(qkey, quoted);
      qkey.link = link_of(qkey, meta);
      if (auto state = states_.find(qkey, states_.hash(qkey))) {
        // This node's own errors about a packet it had not translated yet (the kernel checks the
        // TTL and the path MTU before the forward hook) quote it as its sender sent it, and go
        // back to that sender as they are: path MTU discovery through a nat depends on them.
        const bool untranslated_quote =
            parsed.from_node && state->translated() && translation_admits(state, false);
        if (!untranslated_quote && !translation_admits(state, true))
          return decided(verdict, drop(Reason::StateMismatch, state->rule));
        if (options_refused(packet, *state))
          return decided(verdict,
                         logged_drop(Reason::IpOptions, pass, state->rule, creator_in(*state, rules)));
        // The error travels back toward the quoted packet's sender (pf_test_state_icmp checks
        // the direction the same way): one addressed to the quoted packet's destination did not
        // come from that packet's path.
        if (packet.dst != quoted.src) return decided(verdict, drop(Reason::StateMismatch, state->rule));
        const bool from_initiator = !state.reversed();
        // The error travels against the packet it quotes.
        if (state->if_bound() && !crosses_bound_interfaces(*state, !from_initiator, meta))
          return decided(verdict, drop(Reason::StateInterface, state->rule));
        PeerTracking& sender = state->peer[from_initiator ? 0 : 1];
        PeerTracking& receiver = state->peer[from_initiator ? 1 : 0];
        // A modulated segment is quoted as it left this node, shifted: in the sender's own
        // numbers again, it is checked, and so it goes back. This node's own errors raised before
        // its forward hook quote the segment as its sender sent it, in the sender's own numbers.
        const bool quotes_tcp_header = quoted.is_tcp() && (!quoted.is_fragment || quoted.is_first_fragment);
        uint32_t seqdiff =
            (state->flags & stateflag::kModulated) != 0 && quotes_tcp_header && !untranslated_quote
                ? state->seqdiff[from_initiator ? 0 : 1]
                : 0;
        // A sloppy state tracks no window to hold the quote against (pf skips it too).
        if (quoted.is_tcp() && sender.seqlo != 0 && (state->flags & stateflag::kSloppy) == 0) {
          const uint32_t dws =
              (sender.wscale && receiver.wscale) ? receiver.wscale & PeerTracking::kScaleMask : 0;
          const auto in_window = [&](uint32_t seq) {
            return seq_geq(sender.seqhi, seq) && seq_geq(seq, sender.seqlo - (receiver.max_win << dws));
          };
          if (!in_window(quoted.tcp.seq - seqdiff)) {
            // Without a translation to tell them apart, this node's errors from before and after
            // its forward hook (a neighbour that does not answer) are told apart by the window.
            if (!parsed.from_node || seqdiff == 0 || !in_window(quoted.tcp.seq))
              return decided(verdict, drop(Reason::BadSeq, state->rule));
            seqdiff = 0;
          }
        }
        // Counted like any packet the state passes (pf_counters_inc), in the direction the error
        // travels: back to the quoted packet's sender.
        const int travels = from_initiator ? 1 : 0;
        ++state->packets[travels];
        state->bytes[travels] += bytes.size();
        verdict = passed_by_state(*state, rules, rewritten, pass);
        if (state->translated() && !untranslated_quote) {
          // The quote is of the packet as the error's sender saw it, on the far side of the
          // translation: it, and the error's destination, take this side's addresses.
          rewrite_icmp_error(bytes, packet, quoted, counterpart(state));
          verdict.rewritten = true;
        }
        if (seqdiff != 0) {
          demodulate_icmp_quote(bytes, packet, quoted, seqdiff);
          verdict.rewritten = true;
        }
        return true;
      }
    }
    // No state: the error is judged by the rules like any ICMP packet (pf does the same).
  } else {
    StateTable::Handle state = states_.find(parsed.key, parsed.hash);
    if (!state && packet.family == Family::V6 && packet.is_icmp() && packet.icmp.is_reply &&
        packet.icmp.type != 136) {
      // A request sent to all nodes of a link (ping ff02::1) is answered by each from its own
      // address: pf looks its state up by that group in place of the reply's source
      // (pf_icmp_state_lookup's multicast retry).
      StateKey answer = parsed.key;
      answer.addr[0] = kAllNodesV6;
      answer.link = link_of(answer, meta);
      state = states_.find(answer, states_.hash(answer));
    } else if (!state && packet.family == Family::V6 && packet.is_icmp() && packet.icmp.type == 136 &&
               packet.l4_length >= kNeighborMessageLength) {
      // A neighbor advertisement answers the solicitation of its target (RFC 4861 7.2.4), which
      // may not be the address it comes from (a proxy's answer, 7.2.8), sent to the target itself
      // or to its solicited-node group (7.2.2); the answer to one from the unspecified address
      // (duplicate address detection, RFC 4862 5.4.3) goes to all nodes. pf keys the
      // advertisement by its target and by the unspecified address for a multicast destination
      // (pf_state_key_addr_setup).
      StateKey answer = parsed.key;
      answer.addr[0] = IpAddress::from_v6_bytes(bytes.data() + packet.l4_offset + 8);
      if (is_multicast_v6(packet.dst)) answer.addr[1] = IpAddress{};
      const IpAddress target = answer.addr[0];
      answer.link = link_of(answer, meta);
      if (answer != parsed.key) state = states_.find(answer, states_.hash(answer));
      if (!state) {
        answer.addr[0] = solicited_node_group(target);
        answer.link = link_of(answer, meta);
        state = states_.find(answer, states_.hash(answer));
      }
    }
    if (state) {
      // Any other connection's packet met before routing (the pre-routing chain queues a superset
      // of what the rules may rewrite) is decided after it, where its out pass is known and a
      // source that nat rewrites is not one the kernel's source validation judges.
      if (meta.hook == Hook::Prerouting && !rewrites_destination(state, parsed.key))
        return decided(verdict, after_routing(rewritten));
      if (!translation_admits(state, false))
        return decided(verdict, drop(Reason::StateMismatch, state->rule));
      if (options_refused(packet, *state))
        return decided(verdict, logged_drop(Reason::IpOptions, pass, state->rule, creator_in(*state, rules)));
      const bool from_initiator = !state.reversed();
      if (state->if_bound() && !crosses_bound_interfaces(*state, from_initiator, meta))
        return decided(verdict, drop(Reason::StateInterface, state->rule));
      // An ICMP identifier equal to its request's type (echo id 8) reads the same as ports either
      // way: the far end's own request would match the state in reverse as the reply does, and
      // pass unfiltered. Such a state is taken for a request's, as nearly every one is: requests
      // travel with it, replies against it (pf_icmp_state_lookup's direction check).
      if (packet.is_icmp() && packet.src_port == packet.dst_port && packet.icmp.is_reply == from_initiator)
        return decided(verdict, drop(Reason::StateMismatch, state->rule));
      PeerTracking& sender = state->peer[from_initiator ? 0 : 1];
      PeerTracking& receiver = state->peer[from_initiator ? 1 : 0];
      const bool syn_only =
          packet.is_tcp() && (packet.tcp.flags & (tcpflag::kSyn | tcpflag::kAck)) == tcpflag::kSyn;
      if (syn_only && tcp_state_reusable(sender, receiver)) {
        // Port reuse after a close: the old state gives way to a new connection, whichever end
        // opens it, as pf_test_state_tcp lets it. Tracked by the old state, the other end's SYN
        // was refused until the state expired, or within its windows passed past the rules.
        emit_delete(worker, *state);
        states_.erase(state, FlowEnd::EndOfFlow);
      } else if (syn_only && tcp_state_established(sender, receiver)) {
        // A SYN on an established connection, most often from an end that rebooted and connects
        // again from the same port (an NFS client's): pf_test_state answers it with the ACK its
        // receiver would send (RFC 5961 4.2), which a live end ignores and a rebooted one answers
        // with a reset that frees the ports for its next SYN. Refused without an answer, the
        // rebooted end stayed out until the state expired, a day on.
        Verdict v = drop(Reason::StateMismatch, state->rule);
        if (!worker.generate(challenge_ack(*state, from_initiator ? 0 : 1, packet), v))
          v.reason = Reason::Memory;
        return decided(verdict, v);
      } else {
        const int side = from_initiator ? 0 : 1;
        const bool scrubbed = state->scrub_tcp && packet.is_tcp();
        if (scrubbed) {
          const Reason checked = scrub_check(*state, side, packet, now);
          if (checked != Reason::State) return decided(verdict, drop(checked, state->rule));
        }
        const bool modulated = (state->flags & stateflag::kModulated) != 0 && packet.is_tcp();
        if (modulated && proxying(*state))
          return decided(verdict, proxy_handshake(worker, state, side, packet, now));
        const TrackResult track =
            modulated ? track_modulated(worker, *state, side, packet) : track_by_state(*state, side, packet);
        if (track.reason != Reason::State) return decided(verdict, drop(track.reason, state->rule));
        state->adopted = true;
        ++state->packets[side];
        state->bytes[side] += bytes.size();
        if (track.protocol_state_changed && state->source != nullptr &&
            !connection_admitted(worker, state, now)) {
          // pf_src_connlimit: the connection that goes over max-src-conn or its rate ends here.
          emit_delete(worker, *state);
          const uint32_t rule = state->rule;
          states_.erase(state);
          return decided(verdict, drop(Reason::SourceLimit, rule));
        }
        const bool class_changed = track.timeout != state->timeout;
        if (track.refresh || class_changed)
          states_.touch(state, track.timeout, timeout_of(*state, track.timeout, rules), now);
        if (track.protocol_state_changed || class_changed ||
            (track.refresh && now - state->last_synced >= kSyncRefresh))
          emit_update(worker, *state, now, rules);
        verdict = passed_by_state(*state, rules, rewritten, pass);
        if (state->translated()) {
          const StateKey leaving = counterpart(state);
          if (meta.hook == Hook::Prerouting)
            scrub_before_routing(worker, bytes, packet, meta, *state, leaving, now);
          rewrite_packet(bytes, packet, leaving);
          verdict.rewritten = true;
        }
        if (modulated && modulate(bytes, *state, side, packet)) verdict.rewritten = true;
        if (scrubbed && scrub_segment(bytes, *state, side, packet, now)) verdict.rewritten = true;
        return true;
      }
    }
  }

  return false;
}

// 4a. Translation of a connection no state knows (pf's nat/rdr/binat, first match per pass): rdr
// (and binat inbound) on the in pass rewrites the destination, nat (and binat outbound) on the
// out pass the source, and each pass's filter rules see the packet as translated so far. Nothing
// is written to the packet until it has passed and its state exists (by_rules()).
// `translation` comes default-constructed.
void Engine::translate(Worker& worker, std::span<uint8_t> bytes, Parsed& parsed, const PacketMeta& meta,
                       Translation& translation, Millis now) noexcept {
  const rules::RuleSet& rules = *worker.rules_;
  const PacketView& packet = parsed.packet;
  translation.seen[0] = translation.seen[1] = &packet;
  translation.wire = parsed.key;
  translation.iface[0] = meta.in_iface;
  translation.iface[1] = meta.out_iface;
  // Asked once a new connection, before any rule (an out nat's `tagged` may need the in pass's).
  translation.urpf_failed =
      parsed.filtered[0] && rules.uses_urpf() && reverse_path_fails(worker, packet, meta, now);
  // `no-route`, where a rule asks, of the packet as pass `first` and the ones after it see it: asked
  // once a pass's view is settled (the in pass's after rdr, the out pass's after nat). The out pass
  // sees what the in pass saw until a nat rewrites it.
  const auto test_routes = [&](int first) {
    for (int pass = first; pass < 2; ++pass) {
      if (!parsed.filtered[pass]) continue;
      if (pass == 1 && parsed.filtered[0] && translation.seen[1] == translation.seen[0]) {
        translation.src_no_route[1] = translation.src_no_route[0];
        translation.dst_no_route[1] = translation.dst_no_route[0];
        continue;
      }
      const PacketView& seen = *translation.seen[pass];
      if (rules.uses_no_route(0))
        translation.src_no_route[pass] = unroutable(worker, seen.family, seen.src, meta, now);
      if (rules.uses_no_route(1))
        translation.dst_no_route[pass] = unroutable(worker, seen.family, seen.dst, meta, now);
    }
  };
  // An ICMP error starts nothing: it belongs to the state of the packet it quotes.
  if (!rules.has_translations() || (packet.is_icmp() && packet.icmp.is_error) || link_scoped(packet)) {
    test_routes(0);
    return;
  }
  const bool ports = packet.is_tcp() || packet.is_udp();
  // An echo request's identifier may change, as pf's does; other queries keep theirs, as pf_get_sport
  // leaves them ("Don't try to modify non-echo ICMP"), and a reply's stays.
  const bool query_id = packet.is_icmp() && packet.icmp.is_query && !packet.icmp.is_reply &&
                        packet.icmp.type == (packet.family == Family::V4 ? 8 : 128);
  // The random value a `random` pool draws from; other pools draw nothing, and leave the worker's
  // generator to the IP ids and source ports it serves.
  const auto pool_draw = [&worker](const rules::CompiledTranslation& rule) {
    return rule.pool == rules::PoolType::Random ? worker.next_random64() : 0;
  };

  // pf's evaluations of a translation rule: the packets it matched first, its exemptions' too.
  const auto evaluated = [](const rules::CompiledTranslation* rule) {
    if (rule != nullptr) rule->stats->evaluations.fetch_add(1, std::memory_order_relaxed);
  };

  if (parsed.filtered[0]) {
    const rules::CompiledTranslation* rule =
        rules.translation(packet, rules::Direction::In, meta.in_iface, &translation.tag[0]);
    evaluated(rule);
    if (rule != nullptr && !rule->negated && rule->targets.empty()) {
      translation.failed = true;  // `-> (em0)` while em0 has no address
      return;
    }
    if (rule != nullptr && !rule->negated) {
      PacketView& seen = translation.after[0].emplace(packet);
      translation.seen[0] = translation.seen[1] = &seen;
      if (rule->kind == rules::TranslationRule::Kind::Binat) {
        seen.dst = graft(rule->source, packet.dst);
      } else {
        seen.dst = pool_address(*rule, packet.src, packet.dst, pool_draw(*rule));
        if (ports && rule->port_low != 0) {
          seen.dst_port = rule->rdr_port(packet.dst_port);
        }
      }
      translation.translated = true;
      translation.filtered[0] = !rule->pass;
      translation.by[0] = rule;
    }
  }
  test_routes(0);

  if (parsed.filtered[1]) {
    const PacketView& arriving = *translation.seen[0];
    // A nat or binat that tests tags sees what the in pass's filter rules left, as pf's does;
    // where none tests them, what the packet carries here changes nothing.
    uint16_t carried = 0;
    if (rules.out_translation_tests_tags()) {
      carried = translation.tag[0];
      if (parsed.filtered[0] && translation.filtered[0]) {
        rules::DecisionContext decision{&worker.random_state_, now};
        const rules::RuleSet::InPass in = rules.evaluate_in(translation.query(0, true), &decision);
        translation.in_decided = in.deciding;
        carried = in.tag;
      }
    }
    const uint16_t before = carried;
    const rules::CompiledTranslation* rule =
        rules.translation(arriving, rules::Direction::Out, meta.out_iface, &carried);
    evaluated(rule);
    // Where the in pass was matched here, the out pass's tag is settled, and not asked again.
    if (carried != before || translation.in_decided != rules::RuleSet::kUndecided)
      translation.tag[1] = carried;
    if (rule != nullptr && !rule->negated && rule->targets.empty()) {
      translation.failed = true;
      return;
    }
    if (rule != nullptr && !rule->negated) {
      PacketView& seen = translation.after[1].emplace(arriving);
      translation.seen[1] = &seen;
      seen.src = rule->kind == rules::TranslationRule::Kind::Binat
                     ? graft(rule->targets.front(), arriving.src)
                     : pool_address(*rule, arriving.src, arriving.src, pool_draw(*rule));
      if (rule->kind == rules::TranslationRule::Kind::Nat) {
        translation.nat = rule;
        if (rule->static_port || !(ports || query_id)) {
          // The one port it may have: a connection whose port is taken is refused. Without a port
          // to choose (GRE, ESP), the address alone tells a connection from another to the same
          // peer, and where it is taken the pool may offer its next one, as pf_get_sport does.
          translation.port_low = translation.port_high = arriving.src_port;
        } else {
          translation.port_low = ports ? (rule->port_low != 0 ? rule->port_low : kNatPortLow) : 1;
          translation.port_high = ports ? (rule->port_low != 0 ? rule->port_high : kNatPortHigh) : UINT16_MAX;
        }
      }
      translation.translated = true;
      translation.filtered[1] = !rule->pass;
      translation.by[1] = rule;
      test_routes(1);
    }
  }
  if (!translation.translated) return;

  StateKey& wire = translation.wire;
  set_key(wire, *translation.seen[1]);
  if (translation.nat != nullptr) {
    // ICMP keeps its query id where it can; ports are drawn, as pf's proxy ports are. Where they
    // have run out for the pool's address, a random or round-robin pool offers its next ones
    // (pf_get_sport): a busy server takes more than one outside address's ports.
    if (!choose_source_port(worker, wire, translation.port_low, translation.port_high, query_id)) {
      const uint64_t others = std::min(kPoolAddressProbes - 1, pool_alternatives(*translation.nat));
      bool found = false;
      for (uint64_t i = 0; i < others && !found; ++i) {
        wire.addr[0] = next_pool_address(*translation.nat, wire.addr[0]);
        translation.after[1]->src = wire.addr[0];
        found = choose_source_port(worker, wire, translation.port_low, translation.port_high, query_id);
      }
      if (!found) {
        translation.failed = true;
        return;
      }
    }
    translation.after[1]->src_port = wire.port[0];
    translation.after[1]->dst_port = wire.port[1];
  }
  // A rule that maps the packet onto its own key (this node's traffic from the nat address, its
  // port kept) translates nothing, as pf_get_translation returns no translation then: the packet
  // meets the filter rules of both passes (a `nat pass` skips them only for what it translates)
  // and gets no state they do not give it.
  if (wire == parsed.key) {
    translation.translated = false;
    translation.filtered[0] = translation.filtered[1] = true;
    translation.nat = nullptr;
    translation.seen[0] = translation.seen[1] = &packet;
    return;
  }

  // Before routing, the out pass is on the interface the translated packet will leave by: its
  // scrub and filter rules apply to the connection too, as pf's do, matched as the packet will
  // leave. Its nat does not apply there (the out pass was not filtered when it was looked up
  // above): a source rewritten before routing is one the kernel's source validation then judges,
  // and this node's own address is a martian to it.
  if (meta.hook == Hook::Prerouting) {
    const PacketView& leaving = *translation.seen[0];
    const IfaceId out = egress_before_routing(worker, leaving.family, leaving.src, leaving.dst, meta, now);
    if (out != kNoIface && !rules.skips(out)) {
      translation.iface[1] = out;
      parsed.filtered[1] = true;
      if (scrub_out_before_routing(worker, bytes, leaving, parsed.packet, out)) parsed.rewritten = true;
    }
  }
}

// pf's urpf-failed (pf_routable() with the arrival interface): no path of the route back to the
// packet's source leaves by the interface it arrived on (a multipath route's every path counts), or
// there is none (the source is one of this node's own addresses, or unroutable). A link-local source passes,
// as its route is its link's, which no table tells apart; and so does every source where no Router answers
// (pairwall-check's replays without one).
bool Engine::reverse_path_fails(Worker& worker, const PacketView& packet, const PacketMeta& meta,
                                Millis now) noexcept {
  if (worker.router_ == nullptr) return false;
  if (link_local(packet.family, packet.src)) return false;
  const RouteQuery back{packet.family, IpAddress{}, packet.src, 0, meta.mark, /*every_path=*/true};
  return !worker.router_->route(back, now).leaves_by(meta.in_iface);
}

// Turns the drop `v` into a reject where `reply` answers this packet: `block return`
// (`rst_for_tcp`) answers TCP with a reset and the rest with an unreachable; a reset only ever
// answers TCP, and nothing answers a reset (RFC 9293 3.10.7.1), ICMP other than a query
// (icmp_answerable()), or a packet to or from one of the host's networks' broadcast addresses
// (RFC 1122 3.2.2, 4.2.3.10): every host there would hear the answer, and a broadcast NetBIOS name
// query would draw one from this node each time. (The I/O adapter leaves the limited broadcast
// and multicast unanswered.) Returns whether it answers.
bool Engine::answer(Verdict& v, rules::BlockReply reply, bool rst_for_tcp, const PacketView& packet,
                    const rules::RuleSet& rules) noexcept {
  if (rst_for_tcp) reply = packet.is_tcp() ? rules::BlockReply::ReturnRst : rules::BlockReply::ReturnIcmp;
  if (reply == rules::BlockReply::ReturnRst && !packet.is_tcp()) reply = rules::BlockReply::Drop;
  if (reply == rules::BlockReply::Drop) return false;
  // Asked only of a packet a reply would answer: a plain block's drops pay for none of it.
  const bool unanswerable = (packet.is_icmp() && !icmp_answerable(packet)) ||
                            (packet.is_tcp() && (packet.tcp.flags & tcpflag::kRst)) ||
                            rules.local_broadcast(packet.family, packet.dst) ||
                            rules.local_broadcast(packet.family, packet.src);
  if (unanswerable) return false;
  v.action = Verdict::Action::Reject;
  v.reply = reply;
  return true;
}

// pf's no-route (pf_routable() without an interface): the routing tables have no route for
// `address`, asked as `ip route get ADDRESS mark M` asks. A link-local address has its link's, as
// pf takes scoped addresses to; and where no Router answers (pairwall-check's replays), every
// address has one.
bool Engine::unroutable(Worker& worker, Family family, const IpAddress& address, const PacketMeta& meta,
                        Millis now) noexcept {
  if (worker.router_ == nullptr) return false;
  if (link_local(family, address)) return false;
  return !worker.router_->route(RouteQuery{family, IpAddress{}, address, 0, meta.mark}, now).exists;
}

// A source port (for ICMP, a query id) in [low, high] with which `wire` is no state's key, tried
// from `wire`'s own when `keep_own`, else from a random one (pf_get_sport). On success it is in
// `wire`; false when kPortProbes candidates were all taken.
bool Engine::choose_source_port(Worker& worker, StateKey& wire, uint16_t low, uint16_t high,
                                bool keep_own) noexcept {
  const uint32_t span = uint32_t{high} - low + 1;
  const auto random_offset = [&worker, span] { return static_cast<uint32_t>(worker.next_random64() % span); };
  const uint32_t start =
      keep_own && wire.port[0] >= low && wire.port[0] <= high ? wire.port[0] - low : random_offset();
  // A range of no more ports than the probes is walked whole, in order, as pf walks any. A larger
  // one is probed at random: walks of kPortProbes from random starts would pile the taken ports into
  // runs longer than a walk (linear probing's clustering), and refuse connections with a tenth of
  // the range still free. Random probes find a free port wherever the taken ones lie, all but
  // surely while a few hundredths of the range are free.
  const bool walk = span <= kPortProbes;
  for (uint32_t i = 0; i < std::min(span, kPortProbes); ++i) {
    const uint32_t offset = i == 0 ? start : walk ? (start + i) % span : random_offset();
    const auto port = static_cast<uint16_t>(low + offset);
    wire.port[0] = port;
    if (!states_.find(wire, states_.hash(wire))) return true;
  }
  return false;
}

// 4b. Rules: `in` on the arrival interface, then `out` on the departure interface, each pass
// decided by `deciding` (kNoRule: no rule matched); then 5., the state, and the translation.
Verdict Engine::by_rules(Worker& worker, std::span<uint8_t> bytes, const Parsed& parsed,
                         const PacketMeta& meta, Translation& translation, std::array<uint32_t, 2> deciding,
                         Millis now) noexcept {
  const rules::RuleSet& rules = *worker.rules_;
  const PacketView& packet = parsed.packet;
  const bool rewritten = parsed.rewritten;
  if (!claims(meta, translation.translated)) return after_routing(rewritten);
  // A drop on the out pass of a packet the in pass had passed: the in pass's rule logs that, as pf's
  // pass in logs before its pass out drops.
  const auto log_in_pass = [&](Verdict& v) {
    if (!parsed.filtered[0] || deciding[0] == rules::kNoRule || !rules.rule(deciding[0]).log) return;
    v.log |= logpass::kIn;
    v.in_log_rule = &rules.rule(deciding[0]);
  };
  for (int pass = 0; pass < 2; ++pass) {
    if (!parsed.filtered[pass]) continue;
    const uint32_t r = deciding[pass];
    if (r == rules::kNoRule) continue;
    const rules::CompiledRule& rule = rules.rule(r);
    rule.stats->evaluations.fetch_add(1, std::memory_order_relaxed);
    rule.stats->packets.fetch_add(1, std::memory_order_relaxed);
    rule.stats->bytes.fetch_add(bytes.size(), std::memory_order_relaxed);
    if (!rule.counted_tables.empty()) {
      const PacketView& seen = *translation.seen[pass];
      rules::count_in_tables(rule.counted_tables, seen.family, seen.src, seen.dst,
                             rules::counted_as(pass == 1, rule.action == rules::Action::Pass), 1,
                             bytes.size());
    }
    if (rule.action == rules::Action::Block) {
      Verdict v = drop(Reason::RuleBlock, rule.number);
      v.by_rule = &rule;
      if (rule.log) v.log = logpass::of(pass);
      if (pass == 1) log_in_pass(v);
      if (pass == 1 && meta.out_iface == kNoIface) v.routed_out = translation.iface[1];
      if (answer(v, rule.reply, rule.reply_rst_for_tcp, packet, rules)) {
        if (v.reply == rules::BlockReply::ReturnIcmp)
          v.reply_code = packet.family == Family::V4 ? rule.icmp_code : rule.icmp6_code;
        if (v.reply == rules::BlockReply::ReturnRst) v.reply_ttl = rule.rst_ttl;
      }
      return v;
    }
  }

  // `set fail-policy return`: what a pass rule let by and this node could not take is answered as
  // `block return` answers (pf's PF_DROP with the fail-policy's reply).
  const auto failed = [&](Verdict d) {
    if (rules.fail_policy_return()) answer(d, rules::BlockReply::ReturnIcmp, true, packet, rules);
    return d;
  };
  if (translation.failed) return failed(drop(Reason::TranslationFailed));

  // As pf: IP options pass only where every pass's rule says allow-opts (the default pass, and a
  // `nat pass` no filter rule saw, allow none). A state remembers whether they did.
  bool allow_opts = true;
  for (int pass = 0; pass < 2; ++pass) {
    if (!parsed.filtered[pass]) continue;
    const uint32_t r = deciding[pass];
    if (r != rules::kNoRule && rules.rule(r).allow_opts) continue;
    allow_opts = false;
    if (packet.has_ip_options) {
      Verdict v = r == rules::kNoRule
                      ? logged_drop(Reason::IpOptions, pass)
                      : logged_drop(Reason::IpOptions, pass, rules.rule(r).number, &rules.rule(r));
      if (pass == 1) log_in_pass(v);
      return v;
    }
  }

  // The state is created by the first pass rule that keeps state (the in pass before the out).
  // `modulate state` holds from either: where pf keeps a second state for the out pass, that one
  // shifts the numbers of what leaves by the out interface, as this connection's one state does
  // between its ends (`pass out on $ext_if modulate state` behind a plain `pass in`).
  const rules::CompiledRule* creator = nullptr;
  bool modulating_rule = false;
  for (uint32_t r : deciding) {
    if (r == rules::kNoRule || !rules.rule(r).keep_state) continue;
    if (creator == nullptr) creator = &rules.rule(r);
    modulating_rule = modulating_rule || rules.rule(r).modulate;
  }
  Verdict v;
  v.action = Verdict::Action::Accept;
  v.rewritten = rewritten;
  const uint32_t passed_by = deciding[0] != rules::kNoRule ? deciding[0] : deciding[1];
  // A `nat pass` / `rdr pass` rule decided a packet no filter rule saw.
  const bool passed_by_translation = !translation.filtered[0] || !translation.filtered[1];
  v.reason = passed_by == rules::kNoRule && !passed_by_translation ? Reason::DefaultPass : Reason::Match;
  if (passed_by != rules::kNoRule) {
    v.by_rule = &rules.rule(passed_by);
    v.rule = v.by_rule->number;
  }
  // Each pass's rule logs on its own (pf logs the in and the out pass apart).
  for (int pass = 0; pass < 2; ++pass) {
    const uint32_t r = parsed.filtered[pass] ? deciding[pass] : rules::kNoRule;
    if (r == rules::kNoRule || !rules.rule(r).log) continue;
    v.log |= logpass::of(pass);
    if (r != passed_by) v.out_log_rule = &rules.rule(r);
  }
  if (parsed.filtered[1] && meta.out_iface == kNoIface) v.routed_out = translation.iface[1];
  const bool stateless_icmp = packet.is_icmp() && (packet.icmp.is_error || packet.icmp.keeps_no_state);
  // A translated connection always has a state: its replies are translated back by it (pf
  // creates one for nat whatever the filter rule says). Without a rule that keeps state it takes
  // the rule set's timeouts.
  if ((creator == nullptr && !translation.translated) || stateless_icmp) return v;

  // 5. Create the state.
  const uint32_t creating_rule = creator != nullptr ? creator->number : rules::kNoRule;
  // A state refused: pf_test_rule() has logged the packet of a `log` rule before
  // pf_create_state() tries, so that the log still holds a connection a limit turned away.
  const auto refused = [&](Reason reason) {
    Verdict d = drop(reason, creating_rule);
    d.by_rule = v.by_rule;
    d.log = v.log;
    d.out_log_rule = v.out_log_rule;
    return failed(d);
  };
  if (creator != nullptr && creator->max_states != 0 &&
      creator->stats->states_current.load(std::memory_order_relaxed) >= creator->max_states) {
    return refused(Reason::RuleStateLimit);
  }
  PeerTracking src;
  PeerTracking dst;
  const TimeoutClass timeout = track_first_packet(src, dst, packet);
  const Millis duration = rules::state_timeout(creator, timeout, rules.timeouts());
  const StateId id{config_.node_id, next_state_counter_.fetch_add(1, std::memory_order_relaxed)};
  StateTable::CreateStatus status;
  StateTable::Handle state;
  for (int attempt = 0;; ++attempt) {
    state = states_.create(parsed.key, translation.wire, id, timeout, duration, now, status);
    if (status != StateTable::CreateStatus::Exists || !state) break;
    const bool same_connection = found_by(state, parsed.key);
    state.release();
    if (same_connection) {
      // Another worker (or the peer) created this connection's state a moment ago: this packet is
      // the connection's second, and that state tracks it like any later one (its reply's window,
      // its UDP side, its counts), or the state refuses it. Found again rather than judged through
      // create()'s handle: that one holds the shards of this packet's keys, not necessarily of the
      // found state's wire key, which erasing or requeueing it touches (a rare race: one lookup more).
      Verdict judged;
      if (by_state(worker, bytes, parsed, meta, now, judged)) return judged;
      // That state has gone again (expired, or gave way to a new connection on its ports).
      if (attempt == 3) return refused(Reason::Internal);
      continue;
    }
    // Only the wire key exists: the nat source port chosen for this connection was taken since
    // (by another worker, or a peer's state). Choose again, a few times.
    if (translation.nat == nullptr || attempt == 3 ||
        !choose_source_port(worker, translation.wire, translation.port_low, translation.port_high, false)) {
      return refused(Reason::TranslationFailed);
    }
  }
  switch (status) {
    case StateTable::CreateStatus::Created:
      if (creator != nullptr && creator->sources.tracks()) {
        const Reason source_refused = admit_source(worker, state, *creator, packet);
        if (source_refused != Reason::State) {
          states_.erase(state);
          return refused(source_refused);
        }
      }
      break;
    case StateTable::CreateStatus::Exists:  // without a handle: the loop above handled the others
      return refused(Reason::Internal);
    case StateTable::CreateStatus::Full:
      return refused(Reason::StateLimit);
    case StateTable::CreateStatus::NoMemory:
      return refused(Reason::Memory);
  }
  state->peer[0] = src;
  state->peer[1] = dst;
  state->rule = creating_rule;
  // `if-bound`: each pass whose rule keeps state bound binds it to that pass's interface (pf's
  // state for that pass, on that interface).
  for (int pass = 0; pass < 2; ++pass) {
    const uint32_t r = parsed.filtered[pass] ? deciding[pass] : rules::kNoRule;
    if (r == rules::kNoRule || !rules.rule(r).if_bound || translation.iface[pass] == kNoIface) continue;
    state->bound[pass] = translation.iface[pass];
  }
  if (meta.hook == Hook::Prerouting) {
    if (parsed.filtered[1]) state->leaves_by = translation.iface[1];  // rdr'd: the Router's
  } else if (translation.translated) {
    state->leaves_by = meta.in_iface;  // nat'd: its replies go back where it came from
  }
  state->packets[0] = 1;
  state->bytes[0] = bytes.size();
  // Also on a translated connection's state that no rule keeps: its rules' allow-opts holds.
  if (allow_opts) state->flags |= stateflag::kAllowOpts;
  // A link's own flow stays on this node: the peer has link-local addresses of its own, and its
  // interface numbers are not this node's.
  if (parsed.key.link != kNoIface) state->flags |= stateflag::kNoSync;
  if (creator != nullptr) {
    states_.attach_creator(state, creator, worker.rules_);
    if (creator->log_states) state->flags |= stateflag::kLog;
    if (creator->no_sync) state->flags |= stateflag::kNoSync;
    if (creator->sloppy) state->flags |= stateflag::kSloppy;
    // Only a connection seen from its SYN is modulated: one picked up in mid-stream (`flags any`)
    // has numbers both ends already agree on. The responder's offset is drawn now too, not on its
    // SYN-ACK as pf draws it, so that the insert carries both: a master that dies after passing
    // the SYN-ACK but before its update reached the peer leaves the peer shifting the responder's
    // numbers as the initiator already saw them.
    if (config_.modulation && modulating_rule && packet.is_tcp() &&
        (packet.tcp.flags & (tcpflag::kSyn | tcpflag::kAck)) == tcpflag::kSyn) {
      state->flags |= stateflag::kModulated;
      state->seqdiff[0] = worker.next_seqdiff();
      state->seqdiff[1] = worker.next_seqdiff();
    }
    // `synproxy state`: this node answers the SYN; the responder hears of the connection once the
    // initiator has completed the handshake (proxy_handshake()).
    if (config_.synproxy && creator->synproxy && packet.is_tcp() &&
        (packet.tcp.flags & (tcpflag::kSyn | tcpflag::kAck)) == tcpflag::kSyn) {
      state->flags |= stateflag::kModulated;
      state->proxy = Proxy::Initiator;
      state->proxy_isn[0] = worker.next_seqdiff();
    }
  }
  if (translation.translated) count_translators(state, translation, worker.rules_, bytes.size());
  // `scrub reassemble tcp`: the state normalizes every segment of its connection from here on. Only
  // a connection seen from its SYN has its timestamps shifted: in one picked up in mid-stream, each
  // end already holds the other's (RFC 7323 5.3), and a jump back would make it drop all that
  // follow. Both offsets are drawn now, for the insert to carry (as modulate state's above).
  if (parsed.reassemble_tcp) {
    state->scrub_tcp = true;
    state->scrub[0].ttl = packet.ttl;
    if (config_.modulation && packet.tcp.has_timestamps &&
        (packet.tcp.flags & (tcpflag::kSyn | tcpflag::kAck)) == tcpflag::kSyn) {
      state->scrub[0].ts_mod = worker.next_seqdiff();
      state->scrub[1].ts_mod = worker.next_seqdiff();
    }
  }
  state->last_synced = now;
  if (creator != nullptr) creator->stats->states_created.fetch_add(1, std::memory_order_relaxed);
  if (synced(*state)) {
    worker.emit(make_record(*state, now, rules));
    v.synced_insert = true;
  }
  v.state = state->id;
  if (state->proxy == Proxy::Initiator) {
    Verdict answered = drop(Reason::Synproxy, creating_rule);
    answered.by_rule = v.by_rule;
    answered.log = v.log;
    answered.out_log_rule = v.out_log_rule;
    answered.state = state->id;
    if (!worker.generate(proxy_synack(*state), answered)) answered.reason = Reason::Memory;
    return answered;
  }
  if (translation.translated) {
    rewrite_packet(bytes, packet, translation.wire);
    v.rewritten = true;
  }
  if ((state->flags & stateflag::kModulated) != 0 && modulate(bytes, *state, 0, packet)) v.rewritten = true;
  if (state->scrub_tcp && scrub_segment(bytes, *state, 0, packet, now)) v.rewritten = true;
  return v;
}

// Makes the rules that translated a new state's connection count it, and its first packet, as the
// creator counts it (pf counts a state's packets to its nat rule as to its filter rule).
// `rules`: the worker's, in which translate() matched them.
void Engine::count_translators(StateTable::Handle& state, const Translation& translation,
                               const std::shared_ptr<const rules::RuleSet>& rules,
                               std::size_t bytes) noexcept {
  TranslatorRefs refs;
  for (int pass = 0; pass < 2; ++pass) {
    if (translation.by[pass] != nullptr) refs.set(pass, rules->translation_index(translation.by[pass]));
  }
  states_.attach_translators(state, refs, rules);
  for (int pass = 0; pass < 2; ++pass) {
    const rules::CompiledTranslation* rule = translation.by[pass];
    if (rule == nullptr ||
        (pass == 1 && translation.by[0] != nullptr && translation.by[0]->stats == rule->stats))
      continue;
    rule->stats->packets.fetch_add(1, std::memory_order_relaxed);
    rule->stats->bytes.fetch_add(bytes, std::memory_order_relaxed);
    rule->stats->states_created.fetch_add(1, std::memory_order_relaxed);
  }
}

// Whose node a state of `creator` counts in: the rule's own, or with `source-track global` the one
// every such rule shares.
SourceOwner Engine::source_owner(const rules::CompiledRule& creator) noexcept {
  if (creator.sources.global) return SourceOwner{};
  return SourceOwner{creator.stats.get(), &creator.stats->source_nodes, creator.number, creator.stats};
}

// Counts a new state in its source node (pf's pf_insert_src_node and max-src-states); State when
// admitted, else the reason to refuse it.
Reason Engine::admit_source(Worker& worker, StateTable::Handle& state, const rules::CompiledRule& creator,
                            const PacketView& packet) noexcept {
  const SourceLimits& limits = creator.sources;
  SourceNode* node = nullptr;
  switch (sources_.admit(limits, source_owner(creator), packet.family, packet.src, node)) {
    case SourceTable::Admission::Admitted:
      states_.attach_source(state, node);
      return Reason::State;
    case SourceTable::Admission::TableFull:
      return Reason::SourceNodeLimit;
    case SourceTable::Admission::NodesLimit:
      worker.count_source_limited(SourceLimitKind::Nodes);
      return Reason::SourceLimit;
    case SourceTable::Admission::StatesLimit:
      worker.count_source_limited(SourceLimitKind::States);
      return Reason::SourceLimit;
    case SourceTable::Admission::NoMemory:
      break;
  }
  return Reason::Memory;
}

// A state learned from the peer counts in its source's node as it does on its creator, so that
// after a failover the max-src-* limits go on from what each source holds instead of starting
// afresh (pfsync carries no source nodes). The creator decided: nothing learned is refused, and
// short of a node (the node table full) the state goes on uncounted.
void Engine::learn_source(StateTable::Handle& state, const rules::CompiledRule& creator) noexcept {
  SourceLimits counted_only = creator.sources;
  counted_only.max_src_states = 0;
  counted_only.max_src_nodes = 0;
  SourceNode* node = nullptr;
  const StateKey& key = state->key(0);
  if (sources_.admit(counted_only, source_owner(creator), key.family, key.addr[0], node) ==
      SourceTable::Admission::Admitted)
    states_.attach_source(state, node);
}

// A tracked connection whose handshake the peer saw complete counts in its source node, once, as
// connection_counted() counts one seen here; but it is neither refused nor counted in the rate:
// when it completed is the peer's to know, and counted now, a bulk's many connections of one
// source would look like a flood.
void Engine::learn_connection(StateEntry& entry) noexcept {
  if (entry.source == nullptr || (entry.flags & stateflag::kSourceConnection) != 0 ||
      entry.key(0).proto != ipproto::kTcp || !handshake_completed(entry))
    return;
  entry.flags |= stateflag::kSourceConnection;
  sources_.established(entry.source, SourceLimits{}, Millis{0});
}

// A tracked TCP connection whose handshake just completed: does its source stay within the
// creating rule's max-src-conn and max-src-conn-rate? Counted once per state. A reset that ends
// the handshake (a closed port's RST|ACK to the SYN, a scanner's RST after the SYN-ACK) takes both
// ends past Established at once, but completes nothing: pf_src_connlimit is not reached then.
bool Engine::connection_admitted(Worker& worker, StateTable::Handle& state, Millis now) noexcept {
  if (!handshake_completed(*state)) return true;
  return connection_counted(worker, *state, now);
}

bool Engine::handshake_completed(const StateEntry& entry) noexcept {
  const auto completed = [](const PeerTracking& end) {
    return end.state >= static_cast<uint8_t>(TcpState::Established) &&
           end.state < static_cast<uint8_t>(TcpState::TimeWait);
  };
  return completed(entry.peer[0]) && completed(entry.peer[1]);
}

// Counts the state's connection in its source node, once, and queues the overload of a source
// that goes over its creating rule's max-src-conn or max-src-conn-rate; false for such a source.
// Counted whatever the rule limits, as pf_src_connlimit counts it: a node `source-track global`
// shares holds the connections of every rule, and a rule's max-src-conn counts them all.
bool Engine::connection_counted(Worker& worker, StateEntry& entry, Millis now) noexcept {
  const rules::CompiledRule* rule = entry.creator;
  if ((entry.flags & stateflag::kSourceConnection) || entry.source == nullptr || rule == nullptr) return true;
  entry.flags |= stateflag::kSourceConnection;
  const SourceTable::ConnectionCheck check = sources_.established(entry.source, rule->sources, now);
  if (check.within()) return true;
  if (check.over_conn) worker.count_source_limited(SourceLimitKind::Conn);
  if (check.over_rate) worker.count_source_limited(SourceLimitKind::ConnRate);
  if (!rule->overload_table.empty()) {
    SourceOverload overload;
    rule->overload_table.copy(overload.table.data(), overload.table.size() - 1);
    overload.rule = rule->number;
    overload.family = entry.key(0).family;
    overload.address = entry.key(0).addr[0];
    overload.owner = rule->stats.get();
    overload.flush = rule->overload_flush;
    auto& counter = worker.overloads_.push(overload) ? worker.overloads_queued_ : worker.overloads_lost_;
    counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  return false;
}

std::size_t Engine::expire(Millis now) {
  const std::shared_ptr<const rules::RuleSet> current = rules();
  if (current->timeouts().values != filed_timeouts_.values) {
    // A reload changed `set timeout`: idle states follow it too, as pf's (see timeout_of()).
    states_.refile(now, [&current](const StateEntry& e) { return timeout_of(e, e.timeout, *current); });
    filed_timeouts_ = current->timeouts();
  }
  const double scale = current->adaptive_timeouts().scale(states_.size(), states_.limit());
  timeout_scale_.store(scale, std::memory_order_relaxed);
  // After the states, so that the source nodes their removal leaves idle are dated by this pass.
  const std::size_t expired = states_.expire(
      now,
      [this](const StateEntry& e) {
        if (e.id.creator == config_.node_id && synced(e)) {
          StateRecord gone;
          gone.kind = StateRecord::Kind::Delete;
          gone.id = e.id;
          emit_control(gone);
        }
      },
      scale);
  sources_.expire(now);
  return expired;
}

std::size_t Engine::zero_rule_counters(std::string_view anchor) {
  states_.mark_counted(
      [anchor](const StateEntry& e) {
        return anchor.empty() || (e.creator != nullptr && rules::in_anchor(e.creator->anchor, anchor));
      },
      /*translators_zeroed=*/anchor.empty());
  return rules()->zero_counters(anchor);
}

std::size_t Engine::flush_states() {
  const std::size_t n = states_.clear(nullptr);
  StateRecord clear;
  clear.kind = StateRecord::Kind::Clear;
  clear.id.creator = config_.node_id;
  emit_control(clear);
  return n;
}

std::size_t Engine::kill_states(const std::function<bool(const StateEntry&)>& match) {
  return remove_states_if(match, [this](const StateEntry& e) {
    if (!synced(e)) return;
    StateRecord gone;
    gone.kind = StateRecord::Kind::Delete;
    gone.id = e.id;
    emit_control(gone);
  });
}

Engine::SourcesKilled Engine::kill_sources(const std::function<bool(const SourceNode&)>& choose) {
  // The states first: a node is only freed once nothing holds it.
  const StateTable::SourcesDetached detached = states_.detach_sources(choose);
  return SourcesKilled{detached.nodes_freed + sources_.kill(choose), detached.states};
}

std::size_t Engine::remove_states_if(const std::function<bool(const StateEntry&)>& choose,
                                     const std::function<void(const StateEntry&)>& on_removed) {
  // Chosen under the shard locks, removed by id afterwards: a removal takes the locks of both of
  // an entry's keys, which for_each() cannot while it holds one shard's.
  std::vector<StateId> chosen;
  states_.for_each([&](const StateEntry& e) {
    if (choose(e)) chosen.push_back(e.id);
  });
  std::size_t removed = 0;
  for (const StateId& id : chosen) {
    auto state = states_.find_by_id(id);
    // Looked at again under its lock: a packet may have changed it since, or it is gone.
    if (!state || !choose(*state)) continue;
    on_removed(*state);
    states_.erase(state);
    ++removed;
  }
  return removed;
}

bool Engine::apply(const StateRecord& record, Millis now) {
  switch (record.kind) {
    case StateRecord::Kind::Clear:
      // The peer flushed its table: its own states go here too, and only they, as pfsync_in_clr
      // removes the flusher's (creatorid) alone. This node's live connections stay, so that a flush
      // on the backup does not cut the master off from every connection it carries. A clear that
      // names no node is a whole table's.
      if (record.id.creator == 0) {
        states_.clear(nullptr);
      } else {
        remove_states_if(
            [creator = record.id.creator](const StateEntry& e) { return e.id.creator == creator; },
            [](const StateEntry&) {});
      }
      return true;
    case StateRecord::Kind::Delete: {
      auto state = states_.find_by_id(record.id);
      if (!state) return false;
      states_.erase(state);
      return true;
    }
    case StateRecord::Kind::Insert:
    case StateRecord::Kind::Update:
      break;
  }

  auto state = states_.find_by_id(record.id);
  if (!state && record.kind == StateRecord::Kind::Update) return false;  // the insert has not arrived
  const std::shared_ptr<const rules::RuleSet> current = rules();
  const Timeouts timeouts = current->timeouts();
  bool moved = true;  // the record brought something the entry did not have
  if (!state) {
    // One of the states this node created since it started, and holds no more, was removed here
    // (killed, cut at a source limit, flushed, replaced on its ports, expired): a copy of it that
    // the peer made before it heard of that (a bulk or a resync crossing the delete) would bring
    // back a connection this node ended. Those of an earlier start are taken back as ever.
    if (record.id.creator == config_.node_id && record.id.counter >= config_.first_state_counter &&
        record.id.counter < next_state_counter_.load(std::memory_order_relaxed)) {
      return false;
    }
    // The creator's rule, where this node runs the same rule set: the state lives by its timeouts
    // here too, before and after this node takes the connection over (with the global ones, a
    // rule's longer timeout would end an idle connection on this node that the creator keeps).
    const rules::CompiledRule* creator = nullptr;
    if (record.rules_digest != 0 && record.rules_digest == current->digest() &&
        record.rule_index < current->size() && current->rule(record.rule_index).keep_state) {
      creator = &current->rule(record.rule_index);
    }
    // The record says how long the state has left; on our clock that is an older "last seen".
    const Millis duration = rules::state_timeout(creator, record.timeout, timeouts);
    const Millis last_seen = now + std::min(record.expires_in, duration) - duration;
    StateTable::CreateStatus status;
    const auto create = [&] {
      return states_.create(record.stack_key, record.wire_key, record.id, record.timeout, duration, last_seen,
                            status);
    };
    state = create();
    // Exists without an entry: the one that held the key went between the table's two looks (a
    // worker removed it), and the key is free again.
    if (status == StateTable::CreateStatus::Exists && !state) state = create();
    if (status == StateTable::CreateStatus::Exists && state && state->id.creator == record.id.creator &&
        state->id.counter < record.id.counter) {
      // The creator's newer state on a key its older one held (the port used again): the creator
      // holds one state a key, so the older one is gone there, its delete still on the way behind
      // this insert. Kept, the older would turn the newer away until a resync.
      states_.erase(state, FlowEnd::EndOfFlow);
      state = create();
    }
    if (status != StateTable::CreateStatus::Created) {
      // Exists: the same connection under another id (both nodes saw its first packet); the
      // local entry stands. Full / NoMemory: counted by the caller.
      return false;
    }
    state->peer[0] = record.src;
    state->peer[1] = record.dst;
    // Born when the creator made it, not when this node heard of it: its age, and its flow's start
    // when this node exports it, are the connection's (pfsync_state_import's creation).
    state->created = now - record.age;
    state->rule = record.rule;
    state->flags = static_cast<uint8_t>((record.flags & ~stateflag::kTranslated) | stateflag::kFromPeer |
                                        (state->flags & stateflag::kTranslated));
    state->adopted = false;
    state->seqdiff[0] = record.seqdiff[0];
    state->seqdiff[1] = record.seqdiff[1];
    state->proxy = record.proxy;
    state->proxy_isn[0] = record.proxy_isn[0];
    state->proxy_isn[1] = record.proxy_isn[1];
    state->scrub_tcp = record.scrub_tcp && state->key(0).proto == ipproto::kTcp;
    state->scrub[0] = record.scrub[0];
    state->scrub[1] = record.scrub[1];
    state->bound[0] = record.bound[0];
    state->bound[1] = record.bound[1];
    if (creator != nullptr) {
      states_.attach_creator(state, creator, current);
      // Its translation rules, by the same rule set's numbers: the connection's packets count to
      // them here as on the creator, before and after this node takes it over.
      TranslatorRefs refs;
      for (int pass = 0; pass < 2; ++pass) {
        if (record.translation_index[pass] < current->translation_count())
          refs.set(pass, record.translation_index[pass]);
      }
      if (refs.any()) states_.attach_translators(state, refs, current);
      if (creator->sources.tracks()) learn_source(state, *creator);
    }
  } else {
    // Merge: sequence numbers and protocol states only move forward.
    const PeerTracking had[2] = {state->peer[0], state->peer[1]};
    const Proxy had_proxy = state->proxy;
    const uint32_t had_seqdiff[2] = {state->seqdiff[0], state->seqdiff[1]};
    const uint32_t had_isn[2] = {state->proxy_isn[0], state->proxy_isn[1]};
    PeerTracking* local[2] = {&state->peer[0], &state->peer[1]};
    const PeerTracking* remote[2] = {&record.src, &record.dst};
    for (int i = 0; i < 2; ++i) {
      PeerTracking& l = *local[i];
      const PeerTracking& r = *remote[i];
      if (r.state > l.state) {
        // The peer saw this end progress further: its tracking is newer as a whole. Comparing field
        // by field would keep placeholders (seqhi 1 before an end has sent anything) against a
        // sequence number more than 2^31 away (pfsync_upd_tcp decides on the states first too).
        l = r;
        continue;
      }
      if (l.seqlo == 0 || seq_gt(r.seqlo, l.seqlo)) l.seqlo = r.seqlo;
      if (l.seqhi == 0 || seq_gt(r.seqhi, l.seqhi)) l.seqhi = r.seqhi;
      l.max_win = std::max(l.max_win, r.max_win);
      if (l.wscale == 0) l.wscale = r.wscale;
      if (l.mss == 0) l.mss = r.mss;
      l.state = std::max(l.state, r.state);
    }
    // An end's offset, once drawn, never changes: only one not yet known here is taken. So with
    // the initial sequence numbers of a synproxy state, whose handshakes only move forward.
    for (int i = 0; i < 2; ++i) {
      if (state->seqdiff[i] == 0) state->seqdiff[i] = record.seqdiff[i];
      if (state->proxy_isn[i] == 0) state->proxy_isn[i] = record.proxy_isn[i];
      // As pfsync_state_import's scrub: a TTL only rises, a timestamp offset never changes. And as
      // pf_state_peer_ntoh's, the timestamps' watch starts again: the ends went on while the peer
      // carried them, and an echo of a value only the peer saw would be refused as never sent.
      if (state->scrub[i].ts_mod == 0) state->scrub[i].ts_mod = record.scrub[i].ts_mod;
      state->scrub[i].ttl = std::max(state->scrub[i].ttl, record.scrub[i].ttl);
      state->watch[i].flags &= TimestampWatch::kStamped;
    }
    state->proxy = std::max(state->proxy, record.proxy);
    moved = !(state->peer[0] == had[0]) || !(state->peer[1] == had[1]) || state->proxy != had_proxy ||
            state->seqdiff[0] != had_seqdiff[0] || state->seqdiff[1] != had_seqdiff[1] ||
            state->proxy_isn[0] != had_isn[0] || state->proxy_isn[1] != had_isn[1];
    // The peer carried the connection since this node last did (a failback): its windows now lag
    // the connection as a learned state's do, and this node's next packet of it re-anchors them.
    if (moved) state->adopted = false;
  }
  state->named_at = peer_sequence_;
  learn_connection(*state);
  // An update names no key: the entry's own says whether the class follows the TCP states, which
  // only move forward, rather than the record's, which a late update may have taken earlier. The
  // states do not tell tcp.first from tcp.opening: a state nothing came after its first packet of,
  // by the record and here, is the former.
  TimeoutClass timeout = record.timeout;
  if (state->key(0).proto == ipproto::kTcp) {
    timeout = tcp_timeout_class(state->peer[0], state->peer[1]);
    if (timeout == TimeoutClass::TcpOpening && record.timeout == TimeoutClass::TcpFirst &&
        state->timeout == TimeoutClass::TcpFirst)
      timeout = TimeoutClass::TcpFirst;
  }
  const Millis duration = timeout_of(*state, timeout, *current);
  // The record says how long the state has left; express that as "last seen" on our clock.
  const Millis last_seen = now + std::min(record.expires_in, duration) - duration;
  // A record older than the entry (held up behind later ones, or from before this node's own
  // packets met the state): filed, its timeout class (a UDP flow's udp.single where the entry knows
  // both ends spoke) would shorten the state's life.
  if (!moved && last_seen <= state->last_seen) return false;
  states_.file_learned(state, timeout, duration, last_seen, now);
  return true;
}

std::size_t Engine::remove_peer_states_unnamed_since(uint32_t peer, uint64_t sequence) {
  return remove_states_if(
      [&](const StateEntry& e) { return e.id.creator == peer && !e.adopted && e.named_at < sequence; },
      [](const StateEntry&) {});
}

void Engine::snapshot(Millis now, const std::function<void(const StateRecord&)>& sink) const {
  const auto current = rules();
  states_.for_each([&](const StateEntry& e) {
    if (synced(e)) sink(make_record(e, now, *current));
  });
}

}  // namespace pairwall::engine
