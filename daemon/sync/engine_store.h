// The protocol's view of the local state table: engine::Engine behind sync::StateStore.
#pragma once

#include "daemon/engine/engine.h"
#include "daemon/sync/store.h"

namespace pairwall::sync {

// The protocol's clock (steady, microseconds) and the engine's (steady, milliseconds) share the
// same epoch: steady_clock's, as the packet workers use.
inline engine::Millis engine_time(Micros now) {
  return std::chrono::duration_cast<engine::Millis>(now);
}

class EngineStore final : public StateStore {
 public:
  explicit EngineStore(engine::Engine& engine) : engine_(engine) {}

  ApplyResult apply(const engine::StateRecord& record, Micros now) override;
  bool current(const engine::StateId& id, Micros now, engine::StateRecord& out) override;
  void collect_ids(std::vector<engine::StateId>& out) override;
  void set_peer_sequence(uint64_t sequence) override { engine_.set_peer_sequence(sequence); }
  std::size_t remove_peer_states_unnamed_since(uint32_t peer, uint64_t sequence) override {
    return engine_.remove_peer_states_unnamed_since(peer, sequence);
  }
  uint64_t rules_digest() const override { return engine_.rules()->digest(); }
  engine::InterfaceRegistry* interfaces() override { return &engine_.interfaces(); }

 private:
  engine::Engine& engine_;
};

}  // namespace pairwall::sync
