// libFuzzer target for the sync datagram path (preset "fuzz"): frame checks, anti-replay, the
// protobuf payload, record validation and their application to a real engine's state table.
//   ninja -C build-fuzz fuzz_sync && build-fuzz/bin/fuzz_sync -max_total_time=60 /tmp/sync
//   tests/fuzz/corpus/sync
// The first byte picks the mode: even, the rest is a datagram as received (almost all fail at the
// tag); odd, the rest is header and payload, sealed with the key, so that everything behind the
// HMAC is reached as a peer with the key but broken code would reach it. With bit 1 set too, the
// sender is the expected peer, whose epoch the node has taken (answered challenge and all) before
// the datagram comes.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "daemon/engine/engine.h"
#include "daemon/sync/engine_store.h"
#include "daemon/sync/protocol.h"
#include "daemon/sync/wire.h"

namespace ps = pairwall::sync;

namespace {

const std::vector<uint8_t> kKey(32, 0x5a);
const ps::Micros kNow{3'600'000'000};

std::vector<uint8_t> sealed(const ps::Header& h, const ps::wire::Batch& batch) {
  const std::string payload = batch.SerializeAsString();
  std::vector<uint8_t> out(ps::kOverhead + payload.size());
  static ps::Authenticator auth(kKey);
  ps::seal(h, std::span(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()), auth, out);
  return out;
}

// Makes `node` take node 1's `epoch` as its peer's, as a live peer would: its first datagram draws
// the node's challenge, its keepalive answers it (both with transmission counter 1).
void prove_peer(ps::SyncProtocol& node, uint64_t epoch) {
  ps::Header h;
  h.node_id = 1;
  h.epoch = epoch;
  h.xmit = 1;
  h.send_base = 1;
  node.receive(sealed(h, {}), ps::kLinkTtl, kNow);
  uint64_t challenge = 0;
  node.poll(kNow, [&](std::span<const uint8_t> d) {
    static ps::Authenticator auth(kKey);
    ps::Header reply;
    std::span<const uint8_t> payload;
    ps::DropReason why{};
    ps::wire::Batch batch;
    if (ps::open(d, auth, reply, payload, why) &&
        batch.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
      for (const auto& m : batch.messages())
        if (m.has_keepalive() && m.keepalive().challenge() != 0) challenge = m.keepalive().challenge();
    }
    return true;
  });
  ps::wire::Batch answer;
  answer.add_messages()->mutable_keepalive()->set_answer(challenge);
  node.receive(sealed(h, answer), ps::kLinkTtl, kNow);
  if (node.counters().epochs_proven != 1) __builtin_trap();  // the harness's own premise
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // One table for the whole run, as a node keeps its table while datagrams come and go.
  static pairwall::engine::Engine engine;
  static ps::EngineStore store(engine);
  static ps::Authenticator auth(kKey);
  if (size == 0) return 0;

  std::vector<uint8_t> datagram(data + 1, data + size);
  ps::Header h;
  const bool from_proven_peer = (data[0] & 3) == 3 && datagram.size() >= ps::kHeaderSize;
  if ((data[0] & 1) && datagram.size() >= ps::kHeaderSize) {
    h = ps::read_header(datagram.data());
    if (data[0] & 2) h.node_id = 1;  // mostly the peer this node expects, not a stranger
    h.version = ps::kVersion;
    const std::span<const uint8_t> payload(datagram.data() + ps::kHeaderSize,
                                           datagram.size() - ps::kHeaderSize);
    std::vector<uint8_t> sealed(datagram.size() + ps::kTagSize);
    if (ps::seal(h, payload, auth, sealed) != sealed.size()) return 0;  // payload over the limit
    datagram = std::move(sealed);
  }

  ps::ProtocolConfig config;
  config.node_id = 2;
  config.epoch = 1002;
  // A protocol is built for every input: a small receive window keeps that cheap, and holding,
  // sliding and dropping past the window work alike at any size.
  config.receive_window = 64;
  ps::SyncProtocol node(config, kKey, store, kNow);
  if (from_proven_peer) prove_peer(node, h.epoch);
  const ps::SyncCounters before = node.counters();
  node.receive(datagram, ps::kLinkTtl, kNow);
  node.poll(kNow, [](std::span<const uint8_t>) { return true; });
  // One datagram: at most one frame check fails it, and a failed one is not also received. (A
  // received one may still have its content dropped, as malformed or as meant for this node's
  // earlier boot, or be held until the sequences before it come.)
  const auto& c = node.counters();
  uint64_t frame_drops = 0;
  for (std::size_t i = 0; i < c.drops.size(); ++i)
    if (i != static_cast<std::size_t>(ps::DropReason::MalformedPayload) &&
        i != static_cast<std::size_t>(ps::DropReason::EarlierBoot))
      frame_drops += c.drops[i] - before.drops[i];
  const uint64_t received = c.datagrams_received - before.datagrams_received;
  if (frame_drops > 1 || received > 1 || (frame_drops == 1 && received == 1)) __builtin_trap();
  return 0;
}
