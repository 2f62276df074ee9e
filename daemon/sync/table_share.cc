#include "daemon/sync/table_share.h"

#include <algorithm>

#include "daemon/sync/records.h"

namespace pairwall::sync {
namespace {

using engine::Family;

// pf's PF_TABLE_NAME_SIZE less its terminator (engine::rules::kTableNameSize).
constexpr std::size_t kMaxNameLength = 31;

bool valid_name(const std::string& name) {
  return !name.empty() && name.size() <= kMaxNameLength &&
         std::all_of(name.begin(), name.end(), [](char c) { return c > ' ' && c < 0x7f; });
}

bool host_bits_clear(const engine::IpPrefix& p) {
  const unsigned width = p.family == Family::V4 ? 32 : 128;
  const unsigned host = width - p.length;
  if (p.family == Family::V4) return host == 0 || (p.address.v4_value() & ((uint64_t{1} << host) - 1)) == 0;
  const uint64_t lo_mask = host >= 64 ? ~uint64_t{0} : host == 0 ? 0 : (uint64_t{1} << host) - 1;
  const uint64_t hi_mask = host <= 64 ? 0 : host == 128 ? ~uint64_t{0} : (uint64_t{1} << (host - 64)) - 1;
  return (p.address.lo & lo_mask) == 0 && (p.address.hi & hi_mask) == 0;
}

bool decode_entry(const wire::TableEntry& in, engine::AgedTableEntry& out) {
  const Family family = in.address().size() == 4 ? Family::V4 : Family::V6;
  if (!decode_address(family, in.address(), out.entry.prefix.address)) return false;
  if (in.prefix() > (family == Family::V4 ? 32u : 128u)) return false;
  out.entry.prefix.family = family;
  out.entry.prefix.length = static_cast<uint8_t>(in.prefix());
  out.entry.negated = in.negated();
  out.age_s = in.age_s();
  return host_bits_clear(out.entry.prefix);
}

uint32_t aged(uint32_t age_s, Micros held_for) {
  const uint64_t age = uint64_t{age_s} + static_cast<uint64_t>(held_for.count() / 1'000'000);
  return static_cast<uint32_t>(std::min<uint64_t>(age, UINT32_MAX));
}

}  // namespace

void TableShare::set_local(SharedTable table, Micros now) {
  Held& held = held_[table.name];
  held.entries = std::move(table.entries);
  held.taken = now;
  held.due = held.last_sent == Micros::min() ? now : std::max(now, held.last_sent + kResendGap);
}

void TableShare::send_all(Micros now) {
  for (auto& [name, held] : held_) held.due = now;
}

Micros TableShare::next_due() const noexcept {
  Micros due = Micros::max();
  for (const auto& [name, held] : held_) due = std::min(due, held.due);
  return due;
}

std::size_t TableShare::take_due(Micros now, std::size_t budget, std::deque<wire::Message>& out) {
  std::size_t tables = 0;
  for (auto& table : held_) {
    // Named apart: clang 14 cannot capture a structured binding in the lambda below.
    const std::string& name = table.first;
    Held& held = table.second;
    if (held.due > now) continue;
    held.due = Micros::max();
    held.last_sent = now;
    const uint64_t version = next_version_++;
    const std::size_t first = out.size();
    wire::TableChunk* chunk = nullptr;
    std::size_t room = 0;
    // A chunk's fields but its entries take at most this many bytes (name, version, index,
    // count), and its message's framing in the batch a few more.
    const std::size_t fixed = name.size() + 2 + 11 + 6 + 6 + 8;
    auto open = [&] {
      chunk = out.emplace_back().mutable_table_chunk();
      chunk->set_table(name);
      chunk->set_version(version);
      chunk->set_index(static_cast<uint32_t>(out.size() - 1 - first));
      room = budget > fixed ? budget - fixed : 0;
    };
    open();
    wire::TableEntry entry;
    for (const engine::AgedTableEntry& e : held.entries) {
      const engine::IpPrefix& p = e.entry.prefix;
      encode_address(p.family, p.address, entry.mutable_address());
      entry.set_prefix(p.length);
      entry.set_negated(e.entry.negated);
      entry.set_age_s(aged(e.age_s, now - held.taken));
      const std::size_t size = entry.ByteSizeLong();
      const std::size_t cost = 1 + (size < 128 ? 1 : 2) + size;
      if (cost > room && chunk->entries_size() > 0) open();
      *chunk->add_entries() = entry;
      room -= std::min(room, cost);
    }
    const auto count = static_cast<uint32_t>(out.size() - first);
    for (std::size_t i = first; i < out.size(); ++i) out[i].mutable_table_chunk()->set_count(count);
    ++tables;
  }
  return tables;
}

TableShare::Chunk TableShare::receive(const wire::TableChunk& chunk, Micros now, SharedTable& table) {
  if (!valid_name(chunk.table()) || chunk.version() == 0 || chunk.count() == 0 ||
      chunk.count() > kMaxChunks || chunk.index() >= chunk.count())
    return Chunk::Malformed;
  auto it = incoming_.find(chunk.table());
  if (it == incoming_.end()) {
    if (incoming_.size() >= kMaxTables) return Chunk::Malformed;
    it = incoming_.emplace(chunk.table(), Incoming{}).first;
  }
  Incoming& in = it->second;
  if (chunk.version() <= in.taken || chunk.version() < in.version) return Chunk::Stale;
  if (chunk.version() > in.version) {
    in.version = chunk.version();
    in.got.assign(chunk.count(), false);
    in.missing = chunk.count();
    in.entries.clear();
  }
  if (chunk.count() != in.got.size()) return Chunk::Malformed;
  if (in.got[chunk.index()]) return Chunk::Stale;
  if (in.entries.size() + static_cast<std::size_t>(chunk.entries_size()) > kMaxEntries)
    return Chunk::Malformed;
  const std::size_t before = in.entries.size();
  for (const wire::TableEntry& e : chunk.entries()) {
    if (!decode_entry(e, in.entries.emplace_back())) {
      in.entries.resize(before);
      return Chunk::Malformed;
    }
  }
  in.got[chunk.index()] = true;
  if (--in.missing != 0) return Chunk::Partial;

  in.taken = in.version;
  table.name = chunk.table();
  table.entries = std::move(in.entries);
  in.entries = {};
  in.got = {};
  // What the peer sent is what this node holds now (a change of its own waiting to go is
  // superseded), and what it gives a peer that restarts.
  Held& held = held_[table.name];
  held.entries = table.entries;
  held.taken = now;
  held.due = Micros::max();
  return Chunk::Complete;
}

}  // namespace pairwall::sync
