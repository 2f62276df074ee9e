#include "tools/bench/state_bench.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "daemon/engine/engine.h"
#include "daemon/engine/rules/compile.h"
#include "daemon/engine/rules/parser.h"
#include "tools/bench/bench_packets.h"
#include "tools/bench/pass_timing.h"

namespace pairwall::bench {
namespace {

using namespace pairwall::engine;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kServer = kBenchServer;
constexpr uint32_t kClientBase = kBenchClientBase;

uint32_t client_of(uint32_t flow) {
  return kClientBase + (flow >> 8);
}
uint16_t port_of(uint32_t flow) {
  return static_cast<uint16_t>(10000 + (flow & 0xff));
}

// Datagrams per recvmmsg in the daemon (io::QueueConfig::recv_batch).
constexpr std::size_t kBenchBatch = 64;

EngineConfig bench_config() {
  EngineConfig c;
  c.event_ring_capacity = 1 << 10;  // the benchmark drains nothing; lost records are only counted
  return c;
}

// Packets per timed pass (pass_timing.h). Each pass hits states the passes before it did not
// (the random order runs through a million flows), so at a million states every pass misses the
// caches alike.
constexpr uint32_t kPassPackets = 4096;

struct LookupPoint {
  double single_mpps = 0;
  double batch_mpps = 0;
};

// Completes a handshake for `flows` connections, then sends pure ACKs on random flows: one
// process() call per packet, then process_batch() on batches of kBenchBatch packets.
LookupPoint lookup_mpps(uint32_t flows, double seconds) {
  Engine engine(bench_config());
  engine.load_rules(
      compile_rules_text("set limit states " + std::to_string(flows + 1000) + "\npass all\n", engine));
  Worker worker(engine);
  const PacketMeta out{Hook::Forward, engine.interfaces().intern("lan0"), engine.interfaces().intern("wan0"),
                       false};
  const PacketMeta in{Hook::Forward, out.out_iface, out.in_iface, false};
  TcpTemplate t;
  const Millis now{1000};
  for (uint32_t f = 0; f < flows; ++f) {
    t.set(client_of(f), port_of(f), kServer, 80, tcpflag::kSyn, 1000, 0);
    engine.process(worker, t.bytes, out, now);
    t.set(kServer, 80, client_of(f), port_of(f), tcpflag::kSyn | tcpflag::kAck, 5000, 1001);
    engine.process(worker, t.bytes, in, now);
    t.set(client_of(f), port_of(f), kServer, 80, tcpflag::kAck, 1001, 5001);
    if (engine.process(worker, t.bytes, out, now).reason != Reason::State) {
      throw std::runtime_error("state bench: handshake did not establish");
    }
  }
  if (engine.states().size() != flows) throw std::runtime_error("state bench: wrong state count");

  // Random order fixed in advance so the generator is not measured.
  std::vector<uint32_t> order(1 << 20);
  std::mt19937 rng(42);
  for (auto& o : order) o = static_cast<uint32_t>(rng() % flows);

  LookupPoint point;
  uint64_t packets = 0;
  uint64_t hits = 0;
  point.single_mpps = fastest_pass_mpps(kPassPackets, seconds, [&] {
    for (uint32_t i = 0; i < kPassPackets; ++i) {
      const uint32_t f = order[packets & (order.size() - 1)];
      t.set(client_of(f), port_of(f), kServer, 80, tcpflag::kAck, 1001, 5001);
      hits += engine.process(worker, t.bytes, out, now).reason == Reason::State;
      ++packets;
    }
  });
  if (hits != packets) throw std::runtime_error("state bench: a hit packet missed its state");

  // The same traffic as the daemon's receive loop hands it over: a batch per recvmmsg.
  std::vector<TcpTemplate> buffers(kBenchBatch);
  std::vector<BatchPacket> batch(kBenchBatch);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    batch[i].bytes = buffers[i].bytes;
    batch[i].meta = out;
  }
  packets = 0;
  hits = 0;
  point.batch_mpps = fastest_pass_mpps(kPassPackets, seconds, [&] {
    for (uint32_t round = 0; round < kPassPackets / kBenchBatch; ++round) {
      for (TcpTemplate& b : buffers) {
        const uint32_t f = order[packets++ & (order.size() - 1)];
        b.set(client_of(f), port_of(f), kServer, 80, tcpflag::kAck, 1001, 5001);
      }
      engine.process_batch(worker, batch, now);
      for (const BatchPacket& p : batch) hits += p.verdict.reason == Reason::State;
    }
  });
  if (hits != packets) throw std::runtime_error("state bench: a batched hit packet missed its state");
  return point;
}

// New connections (SYN) with unique tuples; states expire after 1 s of engine time, which runs
// 100x faster than wall time here so expiry works throughout. With `synproxy`, the rule answers
// each SYN itself: a state and a SYN-ACK each, what a flood of SYNs costs the node.
double create_per_s(double seconds, bool synproxy) {
  Engine engine(bench_config());
  engine.load_rules(
      compile_rules_text(std::string("set limit states 2000000\nset timeout tcp.first 1\npass all") +
                             (synproxy ? " synproxy state\n" : "\n"),
                         engine));
  Worker worker(engine);
  const PacketMeta out{Hook::Forward, engine.interfaces().intern("lan0"), engine.interfaces().intern("wan0"),
                       false};
  TcpTemplate t;
  uint64_t created = 0;
  uint64_t flow = 0;
  Millis now{1000};
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    for (int i = 0; i < 1000; ++i, ++flow) {
      t.set(kClientBase + static_cast<uint32_t>(flow >> 16), static_cast<uint16_t>(flow), kServer, 80,
            tcpflag::kSyn, 1000, 0);
      const Verdict v = engine.process(worker, t.bytes, out, now);
      created += synproxy ? v.reason == Reason::Synproxy && v.generated == 1 : v.reason == Reason::Match;
    }
    now += Millis{10};
    engine.expire(now);
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(created) / elapsed;
}

}  // namespace

StateBenchResult run_state_bench(const std::vector<uint32_t>& state_counts, double seconds) {
  StateBenchResult result;
  for (uint32_t n : state_counts) {
    const LookupPoint p = lookup_mpps(n, seconds);
    result.lookup_mpps[n] = p.batch_mpps;
    result.lookup_single_mpps[n] = p.single_mpps;
  }
  result.create_per_s = create_per_s(seconds, false);
  result.synproxy_syn_per_s = create_per_s(seconds, true);
  if (!result.lookup_mpps.empty()) {
    // The largest table: the cost of a hit where it is highest, not the cache-resident best case.
    result.ns_per_packet_hit_states = result.lookup_mpps.rbegin()->first;
    result.ns_per_packet_hit = 1e3 / result.lookup_mpps.rbegin()->second;
    result.ns_per_packet_hit_single = 1e3 / result.lookup_single_mpps.rbegin()->second;
  }
  return result;
}

}  // namespace pairwall::bench
