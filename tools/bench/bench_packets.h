// Shared by the engine-level benchmarks: a minimal IPv4/TCP packet rewritten in place, and a
// rule set compiled from text. The engine does not verify checksums (the kernel did), so the
// benchmarks change addresses, ports and flags without recomputing them.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>

#include "daemon/engine/engine.h"
#include "daemon/engine/packet.h"
#include "daemon/engine/rules/compile.h"
#include "daemon/engine/rules/parser.h"

namespace pairwall::bench {

struct TcpTemplate {
  uint8_t bytes[40] = {};

  TcpTemplate() {
    bytes[0] = 0x45;
    bytes[3] = 40;
    bytes[8] = 64;
    bytes[9] = engine::ipproto::kTcp;
    bytes[32] = 5 << 4;
    bytes[34] = 0xff;  // window 65535
    bytes[35] = 0xff;
  }
  static void put16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v >> 8);
    p[1] = static_cast<uint8_t>(v);
  }
  static void put32(uint8_t* p, uint32_t v) {
    put16(p, static_cast<uint16_t>(v >> 16));
    put16(p + 2, static_cast<uint16_t>(v));
  }
  void set(uint32_t src, uint16_t sport, uint32_t dst, uint16_t dport, uint8_t flags, uint32_t seq,
           uint32_t ack) {
    put32(bytes + 12, src);
    put32(bytes + 16, dst);
    put16(bytes + 20, sport);
    put16(bytes + 22, dport);
    put32(bytes + 24, seq);
    put32(bytes + 28, ack);
    bytes[33] = flags;
  }
};

inline constexpr uint32_t kBenchServer = 0xc0000250;  // 192.0.2.80
inline constexpr uint32_t kBenchClientBase = 0x0a000000;

// Parses and compiles `text` against `engine`'s interfaces; throws on any error.
inline std::shared_ptr<const engine::rules::RuleSet> compile_rules_text(const std::string& text,
                                                                        engine::Engine& engine) {
  auto parsed = engine::rules::parse_rules(text, "bench.conf");
  if (auto* e = std::get_if<engine::rules::RuleError>(&parsed)) throw std::runtime_error(e->to_string());
  auto compiled = engine::rules::compile(std::get<engine::rules::RuleFile>(parsed), engine.interfaces());
  if (auto* e = std::get_if<engine::rules::RuleError>(&compiled)) throw std::runtime_error(e->to_string());
  return std::get<std::shared_ptr<const engine::rules::RuleSet>>(compiled);
}

}  // namespace pairwall::bench
