#include "daemon/control/dataplane.h"

#include <string>
#include <utility>

#include "daemon/control/metrics.h"

namespace pairwall::control {

uint64_t CountersSnapshot::drops() const {
  uint64_t n = 0;
  for (std::size_t i = 0; i < reasons.size(); ++i) {
    if (!engine::is_pass(static_cast<engine::Reason>(i))) n += reasons[i];
  }
  return n;
}

namespace {

// A rule's place and counters as read now.
RuleCounters read_counters(uint32_t number, std::string text, const engine::rules::SourceLocation& location,
                           const engine::rules::RuleStats& stats) {
  RuleCounters c;
  c.number = number;
  c.text = std::move(text);
  c.location = location.file_and_line();
  c.evaluations = stats.evaluations.load(std::memory_order_relaxed);
  c.packets = stats.packets.load(std::memory_order_relaxed);
  c.bytes = stats.bytes.load(std::memory_order_relaxed);
  c.states_current = stats.states_current.load(std::memory_order_relaxed);
  c.states_created = stats.states_created.load(std::memory_order_relaxed);
  return c;
}

}  // namespace

CountersSnapshot take_snapshot(const engine::Engine& engine, const DataPlane* data_plane) {
  CountersSnapshot s;
  if (data_plane) {
    for (const engine::Worker* w : data_plane->workers()) {
      s.packets += w->packets();
      s.bytes += w->bytes();
      s.events_lost += w->events_lost();
      s.source_overloads += w->overloads_queued();
      s.source_overloads_lost += w->overloads_lost();
      for (std::size_t i = 0; i < engine::kSourceLimitKinds; ++i)
        s.source_limited[i] += w->source_limited(static_cast<engine::SourceLimitKind>(i));
      for (std::size_t i = 0; i < engine::kReasonCount; ++i) {
        s.reasons[i] += w->counters().get(static_cast<engine::Reason>(i));
      }
    }
    s.queues = data_plane->queues();
  }
  s.events_lost += engine.control_events_lost();
  s.states = engine.states().size();
  s.state_limit = engine.states().limit();
  s.timeout_scale = engine.timeout_scale();
  s.source_nodes = engine.sources().size();
  s.source_node_limit = engine.sources().limit();
  if (auto rules = engine.rules()) {
    s.rules_digest = rules->digest();
    s.rules.reserve(rules->size());
    for (std::size_t i = 0; i < rules->size(); ++i) {
      const auto& r = rules->rule(static_cast<uint32_t>(i));
      RuleCounters c = read_counters(r.number, r.text, r.location, *r.stats);
      c.anchor = r.anchor;
      c.label = r.label;
      s.rules.push_back(std::move(c));
    }
    for (const auto& t : rules->translation_rules())
      s.translations.push_back(read_counters(t.number, t.text, t.location, *t.stats));
    for (const auto& r : rules->scrub_listing())
      s.scrubs.push_back(read_counters(r.number, r.text, r.location, *r.stats));
  }
  return s;
}

void render_core_metrics(const CountersSnapshot& s, MetricWriter& out) {
  using T = MetricWriter::Type;
  out.family("pairwall_packets_total", T::Counter, "Packets the engine decided.");
  out.sample(s.packets);
  out.family("pairwall_bytes_total", T::Counter, "Bytes of the packets the engine decided.");
  out.sample(s.bytes);
  out.family("pairwall_verdicts_total", T::Counter,
             "Verdicts by reason: match, state, default_pass, after_routing and skipped passed; every "
             "other reason dropped.");
  for (std::size_t i = 0; i < engine::kReasonCount; ++i) {
    out.sample({{"reason", engine::reason_name(static_cast<engine::Reason>(i))}}, s.reasons[i]);
  }
  out.family("pairwall_states", T::Gauge, "Entries in the state table.");
  out.sample(s.states);
  out.family("pairwall_state_limit", T::Gauge, "Maximum entries in the state table.");
  out.sample(s.state_limit);
  out.family("pairwall_timeout_scale", T::Gauge,
             "Factor adaptive timeouts scaled every state timeout by at the last expiry run (1: fewer "
             "states than adaptive.start).");
  out.sample(s.timeout_scale);
  out.family("pairwall_source_nodes", T::Gauge,
             "Source addresses tracked for the max-src-* limits of the rules (pf's source nodes).");
  out.sample(s.source_nodes);
  out.family("pairwall_source_node_limit", T::Gauge, "Maximum source nodes (set limit src-nodes).");
  out.sample(s.source_node_limit);
  out.family("pairwall_source_limited_total", T::Counter,
             "New states refused and connections cut by each source limit of the rules (pf's limit "
             "counters); all of them are drops with reason src_limit.");
  {
    const char* const names[engine::kSourceLimitKinds] = {"max-src-states", "max-src-nodes", "max-src-conn",
                                                          "max-src-conn-rate"};
    for (std::size_t i = 0; i < engine::kSourceLimitKinds; ++i)
      out.sample({{"limit", names[i]}}, s.source_limited[i]);
  }
  out.family("pairwall_source_overloads_total", T::Counter,
             "Sources that went over a rule's max-src-conn or max-src-conn-rate where the rule says "
             "overload <table>: each queued to join the table.");
  out.sample(s.source_overloads);
  out.family("pairwall_source_overloads_lost_total", T::Counter,
             "Overloads dropped before the table saw them (a worker's overload ring full).");
  out.sample(s.source_overloads_lost);
  out.family("pairwall_state_events_lost_total", T::Counter,
             "State changes dropped before sync saw them (event ring full).");
  out.sample(s.events_lost);

  // Each rule's samples carry its `label`, where it has one, so that sum by (label) adds up the
  // rules an operator named alike (pfctl -s labels).
  auto rule_labels = [](const RuleCounters& r) {
    std::vector<std::pair<std::string, std::string>> labels{{"rule", std::to_string(r.number)}};
    if (!r.anchor.empty()) labels.emplace_back("anchor", r.anchor);
    if (!r.label.empty()) labels.emplace_back("label", r.label);
    return labels;
  };
  out.family("pairwall_rule_packets_total", T::Counter, "Packets matched by each rule or its states.");
  for (const auto& r : s.rules) out.sample(rule_labels(r), r.packets);
  out.family("pairwall_rule_bytes_total", T::Counter, "Bytes matched by each rule or its states.");
  for (const auto& r : s.rules) out.sample(rule_labels(r), r.bytes);
  out.family("pairwall_rule_evaluations_total", T::Counter, "Times each rule decided a packet.");
  for (const auto& r : s.rules) out.sample(rule_labels(r), r.evaluations);
  out.family("pairwall_rule_states", T::Gauge, "States currently held by each rule.");
  for (const auto& r : s.rules) out.sample(rule_labels(r), uint64_t{r.states_current});
  // Translation rules, by their own @N (pfctl -vs nat).
  const auto by_number = [](const RuleCounters& r) {
    return std::vector<std::pair<std::string, std::string>>{{"rule", std::to_string(r.number)}};
  };
  out.family("pairwall_translation_evaluations_total", T::Counter,
             "Packets each nat, rdr or binat rule matched first (an exemption's too).");
  for (const auto& r : s.translations) out.sample(by_number(r), r.evaluations);
  out.family("pairwall_translation_packets_total", T::Counter,
             "Packets of the connections each translation rule translated.");
  for (const auto& r : s.translations) out.sample(by_number(r), r.packets);
  out.family("pairwall_translation_bytes_total", T::Counter,
             "Bytes of the connections each translation rule translated.");
  for (const auto& r : s.translations) out.sample(by_number(r), r.bytes);
  out.family("pairwall_translation_states", T::Gauge, "States each translation rule translates now.");
  for (const auto& r : s.translations) out.sample(by_number(r), uint64_t{r.states_current});
  // Scrub rules, by their own @N: every packet a rule matched first on one of its passes, state
  // hits included, a `no scrub`'s too. Added by the workers once a queue batch, not per packet.
  out.family("pairwall_scrub_packets_total", T::Counter,
             "Packets each scrub rule matched first on a pass (a no scrub's too).");
  for (const auto& r : s.scrubs) out.sample(by_number(r), r.packets);
  out.family("pairwall_scrub_bytes_total", T::Counter, "Bytes of the packets each scrub rule matched first.");
  for (const auto& r : s.scrubs) out.sample(by_number(r), r.bytes);

  out.family("pairwall_queue_packets_total", T::Counter, "Packets received from each NFQUEUE.");
  for (const auto& q : s.queues) out.sample({{"queue", std::to_string(q.queue)}}, q.packets);
  out.family("pairwall_queue_drops_total", T::Counter,
             "Packets the kernel dropped because the queue was full.");
  for (const auto& q : s.queues) out.sample({{"queue", std::to_string(q.queue)}}, q.drops);
  out.family("pairwall_queue_overruns_total", T::Counter,
             "Packets lost because the netlink socket buffer overflowed.");
  for (const auto& q : s.queues) out.sample({{"queue", std::to_string(q.queue)}}, q.overruns);
  out.family("pairwall_queue_uninspected_total", T::Counter,
             "Packets settled by the fail-open policy without inspection (accepted with fail_open, "
             "dropped without): longer than the copy range, or not parsed.");
  for (const auto& q : s.queues) out.sample({{"queue", std::to_string(q.queue)}}, q.uninspected);
  out.family("pairwall_queue_verdict_errors_total", T::Counter, "Verdicts the kernel refused.");
  for (const auto& q : s.queues) out.sample({{"queue", std::to_string(q.queue)}}, q.verdict_errors);
  out.family("pairwall_queue_max_len", T::Gauge, "Packets the kernel holds for each queue ([queue] maxlen).");
  for (const auto& q : s.queues) out.sample({{"queue", std::to_string(q.queue)}}, uint64_t{q.max_len});
  out.family("pairwall_queue_rcvbuf_bytes", T::Gauge,
             "Each queue's netlink receive buffer, as the kernel reports it (twice [queue] rcvbuf_bytes).");
  for (const auto& q : s.queues) out.sample({{"queue", std::to_string(q.queue)}}, q.rcvbuf_bytes);
}

}  // namespace pairwall::control
