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

// The addresses of a random pool's prefix it draws from again: up to 2^32 (as round-robin's
// turns, CompiledTranslation::count_turns()).
uint64_t address_count(const IpPrefix& p) {
  const unsigned host_bits = (p.family == Family::V4 ? 32u : 128u) - p.length;
  return uint64_t{1} << std::min(host_bits, 32u);
}

// The next turn's address: the target whose turns hold it, found by a binary search.
IpAddress round_robin(const rules::CompiledTranslation& rule) {
  const std::vector<uint64_t>& ends = rule.turn_ends;
  const uint64_t turn = rule.turns->fetch_add(1, std::memory_order_relaxed) % ends.back();
  const auto at = std::upper_bound(ends.begin(), ends.end(), turn);
  const auto index = static_cast<std::size_t>(at - ends.begin());
  const uint64_t first = index == 0 ? 0 : ends[index - 1];
  return narrow(wide(rule.targets[index].address) + (turn - first));
}

}  // namespace

IpAddress pool_address(const rules::CompiledTranslation& rule, const IpAddress& source,
                       const IpAddress& address, uint64_t draw) noexcept {
  const IpPrefix& pool = rule.targets.front();
  switch (rule.pool) {
    case rules::PoolType::Bitmask:
      return graft(pool, address);
    case rules::PoolType::Random: {
      // The draw fills the low host bits, a mix of it the high ones (of an IPv6 prefix up to /63).
      const Wide bits = (static_cast<Wide>(draw * 0x9E3779B97F4A7C15ULL) << 64) | draw;
      return narrow(wide(pool.address) | (bits & host_mask(pool)));
    }
    case rules::PoolType::SourceHash: {
      const uint64_t words[2][3] = {{source.hi, source.lo, 0}, {source.hi, source.lo, 1}};
      const Wide hash = (static_cast<Wide>(siphash13(rule.hash_key, words[1], 3)) << 64) |
                        siphash13(rule.hash_key, words[0], 3);
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
      return rule.turn_ends.back() - 1;
    case rules::PoolType::Random:
      return address_count(rule.targets.front()) - 1;
    case rules::PoolType::Bitmask:
    case rules::PoolType::SourceHash:
      return 0;
  }
  return 0;
}

IpAddress next_pool_address(const rules::CompiledTranslation& rule, const IpAddress& current) noexcept {
  if (rule.pool == rules::PoolType::RoundRobin) return round_robin(rule);
  const IpPrefix& pool = rule.targets.front();
  const Wide host = host_mask(pool);
  return narrow((wide(current) & ~host) | ((wide(current) + 1) & host));
}

}  // namespace pairwall::engine
