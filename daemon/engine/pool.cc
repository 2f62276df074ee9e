#include "daemon/engine/pool.h"

#include <algorithm>

#include "daemon/engine/translate.h"

namespace pairwall::engine {
namespace {

__extension__ typedef unsigned __int128 Wide;

Wide wide(const IpAddress& a) {
  return (static_cast<Wide>(a.hi) << 64) | a.lo;
}
IpAddress narrow(Wide w) {
  return {static_cast<uint64_t>(w >> 64), static_cast<uint64_t>(w)};
}

// The prefix's host bits as a mask.
Wide host_mask(const IpPrefix& p) {
  return wide(p.last()) ^ wide(p.address);
}

// A pool of several targets (a list, or a table's addresses) numbers its addresses in turns, target
// after target: the address of `turn` (below the total), found by a binary search.
IpAddress turn_address(const rules::CompiledTranslation& rule, uint64_t turn) {
  const std::vector<uint64_t>& ends = rule.turn_ends;
  const auto index =
      static_cast<std::size_t>(std::upper_bound(ends.begin(), ends.end(), turn) - ends.begin());
  const uint64_t first = index == 0 ? 0 : ends[index - 1];
  return narrow(wide(rule.targets[index].address) + (turn - first));
}

// The turn of `address` in such a pool (the last where none holds it, so that the next is the
// first). A walk over the targets: only a nat whose ports ran out on an address asks.
uint64_t turn_of(const rules::CompiledTranslation& rule, const IpAddress& address) {
  for (std::size_t i = 0; i < rule.targets.size(); ++i) {
    const IpPrefix& target = rule.targets[i];
    const Wide offset = wide(address) - wide(target.address);
    if (target.contains(target.family, address) && offset < rules::CompiledTranslation::turns_of(target))
      return (i == 0 ? 0 : rule.turn_ends[i - 1]) + static_cast<uint64_t>(offset);
  }
  return rule.turn_ends.back() - 1;
}

uint64_t total_turns(const rules::CompiledTranslation& rule) {
  return rule.turn_ends.back();
}

IpAddress round_robin(const rules::CompiledTranslation& rule) {
  return turn_address(rule, rule.turns->fetch_add(1, std::memory_order_relaxed) % total_turns(rule));
}

// source-hash's 128 bits of `source`, keyed alike on both nodes.
Wide source_hash(const rules::CompiledTranslation& rule, const IpAddress& source) {
  const uint64_t words[2][3] = {{source.hi, source.lo, 0}, {source.hi, source.lo, 1}};
  return (static_cast<Wide>(siphash13(rule.hash_key, words[1], 3)) << 64) |
         siphash13(rule.hash_key, words[0], 3);
}

}  // namespace

IpAddress pool_address(const rules::CompiledTranslation& rule, const IpAddress& source,
                       const IpAddress& address, uint64_t draw) noexcept {
  const IpPrefix& pool = rule.targets.front();
  const bool several = rule.targets.size() > 1;
  switch (rule.pool) {
    case rules::PoolType::Bitmask:
      return graft(pool, address);
    case rules::PoolType::Random: {
      if (several) return turn_address(rule, draw % total_turns(rule));
      // The draw fills the low host bits, a mix of it the high ones (of an IPv6 prefix up to /63).
      const Wide bits = (static_cast<Wide>(draw * 0x9E3779B97F4A7C15ULL) << 64) | draw;
      return narrow(wide(pool.address) | (bits & host_mask(pool)));
    }
    case rules::PoolType::SourceHash: {
      const Wide hash = source_hash(rule, source);
      if (several) return turn_address(rule, static_cast<uint64_t>(hash) % total_turns(rule));
      return narrow(wide(pool.address) | (hash & host_mask(pool)));
    }
    case rules::PoolType::RoundRobin:
      return round_robin(rule);
  }
  return pool.address;
}

uint64_t pool_alternatives(const rules::CompiledTranslation& rule) noexcept {
  switch (rule.pool) {
    case rules::PoolType::RoundRobin:
    case rules::PoolType::Random:
      return total_turns(rule) - 1;  // a prefix's addresses past its first 2^32 are not offered
    case rules::PoolType::Bitmask:
    case rules::PoolType::SourceHash:
      return 0;
  }
  return 0;
}

IpAddress next_pool_address(const rules::CompiledTranslation& rule, const IpAddress& current) noexcept {
  if (rule.pool == rules::PoolType::RoundRobin) return round_robin(rule);
  if (rule.targets.size() > 1) return turn_address(rule, (turn_of(rule, current) + 1) % total_turns(rule));
  const IpPrefix& pool = rule.targets.front();
  const Wide host = host_mask(pool);
  return narrow((wide(current) & ~host) | ((wide(current) + 1) & host));
}

}  // namespace pairwall::engine
