// libFuzzer target for the whole engine on sequences of packets (preset "fuzz"): a forwarding
// firewall with nat, rdr and their pools, binat, scrub, `modulate state`, `synproxy state`, source
// limits and a small state limit, fed packets from both sides, alone and in batches, while its
// clock moves, states expire and the control plane reloads, flushes, kills and sends bulks; what
// it reports for the peer is applied to a second engine, as sync would. Where fuzz_packet tries
// the parser and each rewrite on one packet, this one reaches what only a sequence reaches: TCP
// windows and their states, replies and ICMP errors translated back by a state, limits, expiry.
//
//   ninja -C build-fuzz fuzz_engine && mkdir -p /tmp/engine &&
//   build-fuzz/bin/fuzz_engine -max_total_time=60 /tmp/engine tests/fuzz/corpus/engine
//
// Input: records of one control byte, a 16-bit big-endian length and that many packet bytes.
//   bits 0-2  where the packet is seen: meta_for() below; 7, not a packet but a control
//             operation (reload, flush, kill, bulk to the peer: control() below)
//   bit 3     decided alone by process() (the batch so far first), else queued for process_batch()
//   bits 4-5  the clock before it: unchanged, +1 ms, +1 s, +16 min (past every timeout the rule set
//             names or leaves at pf's default, the longest tcp.closing's 15 min)
//   bit 6     its checksums made valid first (IPv4 header, an ICMP error's quoted one, transport)
//   bit 7     queued with the transport checksum left for the kernel (CHECKSUM_PARTIAL)
//
// Checked, besides what the sanitizers watch: an accepted packet the engine did not say it rewrote
// is unchanged; one it rewrote still parses, and each checksum that was valid is valid again (an
// ICMP error's quoted IPv4 header's too; a partial one, complete); every packet is counted under
// exactly one reason; every packet the engine makes (synproxy's segments) parses as TCP with valid
// checksums, and comes with a dropped packet; and once the clock passes every timeout, expiry
// leaves both tables empty.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "daemon/engine/engine.h"
#include "daemon/engine/rules/compile.h"
#include "daemon/engine/rules/parser.h"
#include "tests/unit/support/packet_builder.h"

namespace pe = pairwall::engine;

namespace {

constexpr const char* kRules = R"(
table <bad> counters { 192.0.2.66, 2001:db8:bad::/48, !2001:db8:bad:1::/64 }
table <servers> counters { 10.1.0.80/31 }
table <abusers> persist
set limit { states 48, src-nodes 16 }
set timeout { tcp.established 600, udp.first 20, udp.multiple 60 }
no scrub in from 10.1.0.99 to any
scrub on lan0 proto tcp from 10.1.0.0/16 to any max-mss 1400 min-ttl 2 random-id no-df reassemble tcp
scrub in all max-mss 1400 min-ttl 2 random-id no-df
scrub out on wan0 all set-tos af21
nat on wan0 proto { tcp udp } from 10.1.0.0/16 to any -> 203.0.113.1 port 40000
nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1
nat on wan0 inet6 from 2001:db8:1::/48 to any -> 2001:db8:ff::/64 source-hash
rdr on wan0 proto tcp to 203.0.113.1 port 80 -> { 10.1.0.80, 10.1.0.81 } port 8080
rdr on wan0 proto udp to 203.0.113.1 port 5000:5010 -> 10.1.0.53 port 53
binat on wan0 from 10.1.0.5 to any -> 203.0.113.5
block return log all
block in quick from <bad>
block in quick from <abusers>
block in quick log from urpf-failed
block out quick on wan0 to no-route
pass in on lan0 all keep state (max-src-states 24, max-src-conn 12, max-src-conn-rate 40/5, overload <abusers> flush)
pass in on lan0 proto tcp to port 80 modulate state
pass in on lan0 proto tcp to port 22 flags S/SA keep state (sloppy)
pass in on lan0 proto tcp to port 8443 synproxy state
pass out on wan0 all
pass in on wan0 proto tcp to <servers> port 8080 flags S/SA modulate state
pass in on wan0 proto udp to 10.1.0.53 port 53 keep state (no-sync)
pass in on wan0 to 10.1.0.5
pass in on wan0 inet6 proto icmp6 all
pass in proto icmp all icmp-type echoreq
block in quick on lan0 proto udp to port 9 probability 30%
block out quick on wan0 proto tcp to port 25 received-on ! lan0
pass out quick on wan0 proto udp to port 123 once
pass in on wan0 inet6 proto icmp6 all max-pkt-rate 50/2
block in quick on lan0 proto udp to port 7 tos af11
)";

// What a reload switches to and back from: other limits (below the states the first may hold),
// other translations and timeouts, rules with other numbers, while the first set's states live on.
constexpr const char* kReloadedRules = R"(
set limit states 32
set timeout { tcp.established 300, udp.multiple 30 }
scrub in all max-mss 1200
nat on wan0 proto udp from 10.1.0.0/16 to any -> 203.0.113.16/28 port 40000:40001 random
nat on wan0 from 10.1.0.0/16 to any -> { 203.0.113.9, 203.0.113.12/30 } static-port
block all
pass in on lan0 proto tcp modulate state
pass in on lan0 proto { udp icmp } keep state
pass out on wan0 all keep state (max 16)
pass in on wan0 proto tcp to 10.1.0.80 port 8080
pass in on wan0 proto tcp to 10.1.0.80 port 8443 synproxy state
)";

constexpr pe::Millis kStart{1'000'000};
constexpr pe::Millis kSteps[4] = {pe::Millis{0}, pe::Millis{1}, pe::Millis{1'000}, pe::Millis{960'000}};
constexpr std::size_t kMaxBatch = 64;

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_engine: %s\n", what);
  std::abort();
}

std::shared_ptr<const pe::rules::RuleSet> compile(const char* text) {
  pe::InterfaceRegistry interfaces;
  interfaces.intern("lan0");
  interfaces.intern("wan0");
  auto parsed = pe::rules::parse_rules(text, "fuzz.conf");
  if (auto* e = std::get_if<pe::rules::RuleError>(&parsed)) require(false, e->to_string().c_str());
  auto compiled = pe::rules::compile(std::get<pe::rules::RuleFile>(parsed), interfaces);
  if (auto* e = std::get_if<pe::rules::RuleError>(&compiled)) require(false, e->to_string().c_str());
  return std::get<std::shared_ptr<const pe::rules::RuleSet>>(compiled);
}

// The two rule sets above, compiled once: compiling one (65,536 ports into classes) costs far
// more than a run, and a compiled rule set is immutable. Their per-rule state counts are shared by
// the runs; every run leaves them at zero (checked).
const std::shared_ptr<const pe::rules::RuleSet>& compiled_rules(bool reloaded = false) {
  static const std::shared_ptr<const pe::rules::RuleSet> first = compile(kRules);
  static const std::shared_ptr<const pe::rules::RuleSet> second = compile(kReloadedRules);
  return reloaded ? second : first;
}

// Routes for `from urpf-failed` and `no-route`, by the address's last byte: lan0, wan0, or none;
// wan0's by both links to a question for every path (a multipath route).
struct ByteRoutes : pe::Router {
  pe::IfaceId lan = 0;
  pe::IfaceId wan = 0;
  pe::Route route(const pe::RouteQuery& q, pe::Millis) noexcept override {
    const uint8_t last = static_cast<uint8_t>(q.dst.lo);
    if (last % 3 == 2) return {};
    pe::Route r{last % 3 == 0 ? lan : wan, true};
    if (q.every_path && r.egress == wan) r.other_paths[0] = lan;
    return r;
  }
};

// One firewall: lan0 inside, wan0 outside (interned in the order the rule set was compiled with).
struct Node {
  explicit Node(uint32_t id) : engine(config(id)), worker(engine) {
    lan = engine.interfaces().intern("lan0");
    wan = engine.interfaces().intern("wan0");
    routes.lan = lan;
    routes.wan = wan;
    worker.set_router(&routes);
    engine.load_rules(compiled_rules());
  }

  static pe::EngineConfig config(uint32_t id) {
    pe::EngineConfig c;
    c.node_id = id;
    c.shards = 4;
    c.event_ring_capacity = 1024;
    c.control_ring_capacity = 1024;
    // The rule set's sizes: with the defaults (pf's 100,000 states, 65,536 records) a run took 65 ms,
    // with these 2.6 to 3 (fuzz_engine -runs=300 on one seed: 787 and 910 ms).
    c.initial_state_limit = 48;
    c.hash_key[0] = 0x0123456789abcdef;
    c.hash_key[1] = id;
    c.random_seed = 0x5eed + id;  // a failure must replay
    return c;
  }

  uint64_t counted() const {
    uint64_t n = 0;
    for (std::size_t r = 0; r < pe::kReasonCount; ++r) n += worker.counters().get(static_cast<pe::Reason>(r));
    return n;
  }

  pe::Engine engine;
  pe::Worker worker;
  ByteRoutes routes;
  pe::IfaceId lan = 0;
  pe::IfaceId wan = 0;
  bool reloaded = false;  // running the second rule set
};

pe::PacketMeta meta_for(const Node& node, uint8_t path, bool partial) {
  switch (path & 7) {
    case 0:
    case 6:
      return {pe::Hook::Forward, node.lan, node.wan, partial};
    case 1:
      return {pe::Hook::Forward, node.wan, node.lan, partial};
    case 2:
      return {pe::Hook::Prerouting, node.wan, pe::kNoIface, partial};
    case 3:
      return {pe::Hook::Prerouting, node.lan, pe::kNoIface, partial};
    case 4:
      return {pe::Hook::Input, node.wan, pe::kNoIface, partial};
    default:
      return {pe::Hook::Output, pe::kNoIface, node.wan, partial};
  }
}

// Checksums are recomputed whole by the test builder's RFC 1071 sum, not by the engine's
// incremental code that is under test.
using pairwall::test::checksum_add;
using pairwall::test::checksum_finish;

// Where the transport checksum field is, or 0 when the packet's has none that can be checked
// (a fragment's covers bytes that are not here).
std::size_t transport_checksum_at(const pe::PacketView& v) {
  if (v.is_fragment) return 0;
  std::size_t at = 0;
  if (v.is_tcp()) at = 16;
  if (v.is_udp()) at = 6;
  if (v.is_icmp()) at = 2;
  return at != 0 && at + 2 <= v.l4_length ? at : 0;
}

uint32_t transport_sum(std::span<const uint8_t> p, const pe::PacketView& v) {
  uint32_t sum = 0;
  if (v.proto != pe::ipproto::kIcmp) {
    const bool v4 = v.family == pe::Family::V4;
    sum = checksum_add(sum, p.data() + (v4 ? 12 : 8), v4 ? 8 : 32);  // source and destination
    sum += v.proto;
    sum += v.l4_length;
  }
  return checksum_add(sum, p.data() + v.l4_offset, v.l4_length);
}

bool ip_header_valid(std::span<const uint8_t> p, const pe::PacketView& v) {
  return v.family != pe::Family::V4 || checksum_finish(checksum_add(0, p.data(), (p[0] & 15u) * 4)) == 0;
}

uint16_t transport_field(std::span<const uint8_t> p, const pe::PacketView& v) {
  const std::size_t at = transport_checksum_at(v);
  return static_cast<uint16_t>(p[v.l4_offset + at] << 8 | p[v.l4_offset + at + 1]);
}

// Valid, and for UDP present: a zero field means "no checksum" in IPv4 and is invalid in IPv6.
bool transport_valid(std::span<const uint8_t> p, const pe::PacketView& v) {
  return transport_checksum_at(v) != 0 && (!v.is_udp() || transport_field(p, v) != 0) &&
         checksum_finish(transport_sum(p, v)) == 0;
}

// Where the IPv4 header an ICMP error quotes starts, when the quote holds all of it; else 0.
std::size_t quoted_ipv4_header(std::span<const uint8_t> p, const pe::PacketView& v) {
  if (!v.is_icmp() || !v.icmp.is_error || v.family != pe::Family::V4) return 0;
  const std::size_t at = v.icmp.quoted_offset;
  if (at + 20 > p.size() || (p[at] >> 4) != 4) return 0;
  return at + (p[at] & 15u) * 4 <= p.size() ? at : 0;
}

bool quoted_header_valid(std::span<const uint8_t> p, const pe::PacketView& v) {
  const std::size_t at = quoted_ipv4_header(p, v);
  return at != 0 && checksum_finish(checksum_add(0, p.data() + at, (p[at] & 15u) * 4)) == 0;
}

void make_ipv4_header_valid(uint8_t* header) {
  header[10] = header[11] = 0;
  const uint16_t c = checksum_finish(checksum_add(0, header, (header[0] & 15u) * 4));
  header[10] = static_cast<uint8_t>(c >> 8);
  header[11] = static_cast<uint8_t>(c);
}

// The IPv4 header's, an ICMP error's quoted IPv4 header's, then the transport checksum (which
// covers the quote).
void make_checksums_valid(std::span<uint8_t> p) {
  pe::PacketView v;
  if (pe::parse_packet(p, v) != pe::Reason::Match) return;
  if (v.family == pe::Family::V4) make_ipv4_header_valid(p.data());
  if (const std::size_t quote = quoted_ipv4_header(p, v); quote != 0)
    make_ipv4_header_valid(p.data() + quote);
  const std::size_t at = transport_checksum_at(v);
  if (at == 0) return;
  uint8_t* field = p.data() + v.l4_offset + at;
  field[0] = field[1] = 0;
  uint16_t c = checksum_finish(transport_sum(p, v));
  if (c == 0 && v.is_udp()) c = 0xffff;
  field[0] = static_cast<uint8_t>(c >> 8);
  field[1] = static_cast<uint8_t>(c);
}

// A packet as it went in, and what must hold of it once decided.
struct Sent {
  std::vector<uint8_t> before;
  bool parsed = false;
  bool header_valid = false;
  bool transport_valid = false;
  bool quoted_header_valid = false;  // an ICMP error's quoted IPv4 header
  bool partial = false;
};

Sent remember(std::span<const uint8_t> p, bool partial) {
  Sent s{std::vector<uint8_t>(p.begin(), p.end()), false, false, false, false, partial};
  pe::PacketView v;
  s.parsed = pe::parse_packet(p, v) == pe::Reason::Match;
  if (s.parsed) {
    s.header_valid = ip_header_valid(p, v);
    s.transport_valid = transport_valid(p, v);
    s.quoted_header_valid = quoted_header_valid(p, v);
  }
  return s;
}

// Says which packet broke what, and aborts.
[[noreturn]] void fail(const char* what, std::size_t index, const pe::Verdict& verdict,
                       std::span<const uint8_t> before, std::span<const uint8_t> after) {
  std::fprintf(stderr, "fuzz_engine: packet %zu (action %d, reason %s, rule %u): %s\n", index,
               static_cast<int>(verdict.action), std::string(pe::reason_name(verdict.reason)).c_str(),
               verdict.rule, what);
  for (std::size_t i = 0; i < before.size(); ++i) {
    std::fprintf(stderr, "%02x%s", before[i], i < after.size() && after[i] != before[i] ? "*" : " ");
    if (i % 16 == 15) std::fprintf(stderr, "\n");
  }
  std::fprintf(stderr, "\n(before; * where the bytes after differ)\n");
  std::abort();
}

void check(const Sent& sent, std::size_t index, std::span<const uint8_t> after, const pe::Verdict& verdict) {
  auto require = [&](bool ok, const char* what) {
    if (!ok) fail(what, index, verdict, sent.before, after);
  };
  require(after.size() == sent.before.size(), "a packet changed its size");
  // Only an accepted packet's bytes go back to the kernel (normalization may have changed a
  // dropped one's, as pf's scrub changes the packet it then blocks).
  if (verdict.action != pe::Verdict::Action::Accept) return;
  if (!verdict.rewritten) {
    require(std::equal(after.begin(), after.end(), sent.before.begin()),
            "an accepted packet was changed without the verdict saying so");
    return;
  }
  require(sent.parsed, "a packet that does not parse was rewritten");
  pe::PacketView v;
  require(pe::parse_packet(after, v) == pe::Reason::Match, "a rewritten packet no longer parses");
  if (sent.header_valid) require(ip_header_valid(after, v), "a rewrite broke a valid IPv4 header checksum");
  if (sent.quoted_header_valid) {
    require(quoted_header_valid(after, v), "a rewrite broke a valid checksum of a quoted IPv4 header");
  }
  if (sent.partial && transport_checksum_at(v) != 0) {
    require(transport_valid(after, v), "a rewritten partial-checksum packet was not completed");
  } else if (sent.transport_valid) {
    require(transport_valid(after, v), "a rewrite broke a valid transport checksum");
  }
}

// The packets a verdict made for sending: whole TCP segments with every checksum valid.
void check_generated(const pe::Worker& worker, const Sent& sent, std::size_t index,
                     std::span<const uint8_t> after, const pe::Verdict& verdict) {
  for (const pe::GeneratedPacket& made : worker.generated(verdict)) {
    auto require = [&](bool ok, const char* what) {
      if (!ok) fail(what, index, verdict, sent.before, after);
    };
    require(verdict.action == pe::Verdict::Action::Drop, "a packet that made others was not dropped");
    pe::PacketView v;
    require(pe::parse_packet(made.datagram(), v) == pe::Reason::Match, "a made packet does not parse");
    require(v.is_tcp() && v.payload_length == 0, "a made packet is not a bare TCP segment");
    require(ip_header_valid(made.datagram(), v), "a made packet's IPv4 header checksum is wrong");
    require(transport_valid(made.datagram(), v), "a made packet's TCP checksum is wrong");
    require(v.dst == made.destination && v.family == made.family,
            "a made packet goes elsewhere than it says");
  }
}

// The peer applies what this node reports, as sync would (here without the wire).
void replicate(Node& from, Node& to, pe::Millis now) {
  pe::StateRecord record;
  while (from.worker.events().pop(record)) to.engine.apply(record, now);
  while (from.engine.control_events().pop(record)) to.engine.apply(record, now);
}

// A record seen at kControl is not a packet but what the control plane does meanwhile, chosen by
// its first byte: a reload to the other rule set, a flush, a kill of the states whose initiator's
// port has the parity of the second byte, or a bulk of every state to the peer.
constexpr uint8_t kControl = 7;

void control(Node& node, Node& peer, std::span<const uint8_t> op, pe::Millis now) {
  if (op.empty()) return;
  switch (op[0] & 3) {
    case 0:
      node.reloaded = !node.reloaded;
      node.engine.load_rules(compiled_rules(node.reloaded));
      break;
    case 1:
      node.engine.flush_states();
      break;
    case 2: {
      const unsigned parity = op.size() > 1 ? op[1] & 1u : 0u;
      node.engine.kill_states(
          [parity](const pe::StateEntry& e) { return (e.key(0).port[0] & 1u) == parity; });
      break;
    }
    default:
      node.engine.snapshot(now, [&](const pe::StateRecord& record) { peer.engine.apply(record, now); });
      break;
  }
  replicate(node, peer, now);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Node node(1);
  Node peer(2);
  pe::Millis now = kStart;
  uint64_t processed = 0;

  std::vector<std::vector<uint8_t>> bytes;
  std::vector<Sent> sent;
  std::vector<pe::BatchPacket> batch;
  bytes.reserve(kMaxBatch);
  auto run_batch = [&] {
    if (batch.empty()) return;
    node.engine.process_batch(node.worker, batch, now);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      check(sent[i], processed + i, batch[i].bytes, batch[i].verdict);
      check_generated(node.worker, sent[i], processed + i, batch[i].bytes, batch[i].verdict);
    }
    processed += batch.size();
    batch.clear();
    sent.clear();
    bytes.clear();
    replicate(node, peer, now);
  };

  std::size_t at = 0;
  while (at + 3 <= size) {
    const uint8_t control_byte = data[at];
    const std::size_t length =
        std::min<std::size_t>(static_cast<std::size_t>(data[at + 1] << 8 | data[at + 2]), size - at - 3);
    std::vector<uint8_t> packet(data + at + 3, data + at + 3 + length);
    at += 3 + length;

    const pe::Millis step = kSteps[(control_byte >> 4) & 3];
    if (step.count() >= 1'000) {
      run_batch();
      now += step;
      node.engine.expire(now);
      peer.engine.expire(now);
      replicate(node, peer, now);
    } else {
      now += step;
    }
    if ((control_byte & 7) == kControl) {
      run_batch();
      control(node, peer, packet, now);
      continue;
    }
    if ((control_byte & 0x40) != 0) make_checksums_valid(packet);
    const bool partial = (control_byte & 0x80) != 0;
    const pe::PacketMeta meta = meta_for(node, control_byte, partial);

    if ((control_byte & 0x08) != 0) {
      run_batch();
      const Sent before = remember(packet, partial);
      const pe::Verdict verdict = node.engine.process(node.worker, packet, meta, now);
      check(before, processed, packet, verdict);
      check_generated(node.worker, before, processed, packet, verdict);
      ++processed;
      replicate(node, peer, now);
    } else {
      sent.push_back(remember(packet, partial));
      bytes.push_back(std::move(packet));
      batch.push_back({bytes.back(), meta, {}});
      if (batch.size() == kMaxBatch) run_batch();
    }
  }
  run_batch();

  require(node.counted() == processed, "a packet was not counted under exactly one reason");
  // Past every timeout, nothing is left, on either node.
  now += pe::Millis{24 * 3600 * 1000};
  node.engine.expire(now);
  replicate(node, peer, now);
  peer.engine.expire(now);
  require(node.engine.states().size() == 0, "states outlived every timeout");
  require(peer.engine.states().size() == 0, "the peer's states outlived every timeout");
  for (const bool reloaded : {false, true}) {
    const pe::rules::RuleSet& rules = *compiled_rules(reloaded);
    for (std::size_t r = 0; r < rules.size(); ++r) {
      require(rules.rule(static_cast<uint32_t>(r)).stats->states_current.load() == 0,
              "a rule still counts states that are gone");
    }
    for (const pe::rules::ListedRule& t : rules.translation_rules()) {
      require(t.stats->states_current.load() == 0, "a translation rule still counts states that are gone");
    }
  }
  return 0;
}
