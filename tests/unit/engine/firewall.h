// The engine tests' firewall: one Engine and Worker with lan0 inside (clients) and wan0 outside
// (servers), forwarding between them, fed crafted packets. The last packet stays readable, as the
// engine may have rewritten it.
#pragma once

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "daemon/engine/engine.h"
#include "daemon/engine/rules/compile.h"
#include "daemon/engine/rules/parser.h"
#include "tests/unit/support/packet_builder.h"

namespace pairwall::test {

inline engine::EngineConfig test_config(uint32_t node = 1) {
  engine::EngineConfig c;
  c.node_id = node;
  c.shards = 8;
  c.event_ring_capacity = 1024;
  c.hash_key[0] = 0x1234;
  c.hash_key[1] = 0x5678;
  // Fixed draws (offsets, ports), so that a failure replays: random ones let a modulate offset
  // fall, once in some hundred runs, within the window a test expects it to leave.
  c.random_seed = 0x5eed0000 + node;
  return c;
}

struct Firewall {
  explicit Firewall(const std::string& rule_text, uint32_t node = 1)
      : Firewall(rule_text, test_config(node)) {}
  Firewall(const std::string& rule_text, const engine::EngineConfig& config)
      : engine(config), worker(engine) {
    lan = engine.interfaces().intern("lan0");
    wan = engine.interfaces().intern("wan0");
    load(rule_text);
  }

  void load(const std::string& text) {
    auto parsed = engine::rules::parse_rules(text, "test.conf");
    if (auto* e = std::get_if<engine::rules::RuleError>(&parsed)) FAIL(e->to_string());
    auto compiled = engine::rules::compile(std::get<engine::rules::RuleFile>(parsed), engine.interfaces());
    if (auto* e = std::get_if<engine::rules::RuleError>(&compiled)) FAIL(e->to_string());
    engine.load_rules(std::get<std::shared_ptr<const engine::rules::RuleSet>>(compiled));
  }

  // lan0 -> wan0 (client to server) and wan0 -> lan0 (server to client), forwarded.
  // `checksum_partial`: queued with the transport checksum left for the kernel to finish.
  engine::Verdict out(Bytes p, bool checksum_partial = false) {
    return run(std::move(p), engine::PacketMeta{engine::Hook::Forward, lan, wan, checksum_partial});
  }
  engine::Verdict in(Bytes p) {
    return run(std::move(p), engine::PacketMeta{engine::Hook::Forward, wan, lan, false});
  }
  engine::Verdict run(Bytes p, const engine::PacketMeta& meta) {
    last_packet = std::move(p);
    return engine.process(worker, last_packet, meta, now);
  }

  std::vector<engine::StateRecord> drain() {
    std::vector<engine::StateRecord> out;
    engine::StateRecord r;
    while (worker.events().pop(r)) out.push_back(r);
    return out;
  }

  // The records `peer` emitted, applied here as the sync service applies them; every one taken.
  void learn_from(Firewall& peer) {
    for (const engine::StateRecord& r : peer.drain()) REQUIRE(engine.apply(r, now));
  }

  engine::Engine engine;
  engine::Worker worker;
  engine::IfaceId lan = 0;
  engine::IfaceId wan = 0;
  engine::Millis now{1'000};
  Bytes last_packet;
};

}  // namespace pairwall::test
