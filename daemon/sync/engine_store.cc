#include "daemon/sync/engine_store.h"

#include "daemon/sync/records.h"

namespace pairwall::sync {

ApplyResult EngineStore::apply(const engine::StateRecord& record, Micros now) {
  using Kind = engine::StateRecord::Kind;
  if (record.kind == Kind::Update || record.kind == Kind::Insert) {
    auto handle = engine_.states().find_by_id(record.id);
    // An update names no protocol, and Engine::apply merges whatever it carries: a UDP end in a
    // TCP state, or a TCP timeout, would stay in the entry (decode_update could only check TCP's
    // wider range). An insert of an id held under other keys is another connection (its creator
    // used the id again): merged, its windows and states would replace this one's. pf refuses
    // such an insert too (pf_state_insert's id collision).
    if (handle && (record.kind == Kind::Update
                       ? !fits_protocol(handle->key(0).proto, record)
                       : !(handle->key(0) == record.stack_key && handle->key(1) == record.wire_key))) {
      return ApplyResult::Invalid;
    }
  }
  if (engine_.apply(record, engine_time(now))) return ApplyResult::Applied;
  // Engine::apply says only "not applied"; tell the protocol why, it answers each differently.
  if (record.kind == Kind::Update || record.kind == Kind::Delete) {
    if (!engine_.states().find_by_id(record.id)) return ApplyResult::Unknown;
    // Held, and it brought nothing newer (a delete of a held state always applies).
    if (record.kind == Kind::Update) return ApplyResult::Stale;
  }
  auto& states = engine_.states();
  if (record.kind != Kind::Insert) return ApplyResult::Failed;
  // Held, under this id (a bulk or a resync sent it again, and it brought nothing newer) or under
  // another (both nodes saw its first packet): the local entry stands, however full the table is.
  // Each lookup's handle, which holds its entry's locks, is let go before the next.
  const auto held_by_id = [&states](const engine::StateId& id) {
    return static_cast<bool>(states.find_by_id(id));
  };
  const auto held = [&states](const engine::StateKey& key) {
    return static_cast<bool>(states.find(key, states.hash(key)));
  };
  if (held_by_id(record.id) || held(record.stack_key) || held(record.wire_key)) return ApplyResult::Stale;
  // Or the state is one this node created and removed since: the removal stands. Only a table
  // without room is a failure.
  return states.size() < states.limit() ? ApplyResult::Stale : ApplyResult::Failed;
}

bool EngineStore::current(const engine::StateId& id, Micros now, engine::StateRecord& out) {
  auto handle = engine_.states().find_by_id(id);
  if (!handle) return false;
  out = engine_.record_of(*handle, engine_time(now));
  return true;
}

void EngineStore::collect_ids(std::vector<engine::StateId>& out) {
  out.reserve(out.size() + engine_.states().size());
  engine_.states().for_each([&out](const engine::StateEntry& e) { out.push_back(e.id); });
}

}  // namespace pairwall::sync
