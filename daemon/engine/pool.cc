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

// The addresses round-robin takes from one pool entry: all of them, up to 2^32 (an IPv6 /64 is
// not walked to its end; its first 2^32 addresses are as good a pool as any).
uint64_t turn_count(const IpPrefix& p) {
  const unsigned host_bits = (p.family == Family::V4 ? 32u : 128u) - p.length;
  return uint64_t{1} << std::min(host_bits, 32u);
}

uint64_t turn_total(const rules::CompiledTranslation& rule) {
  uint64_t total = 0;
  for (const IpPrefix& p : rule.targets) total += turn_count(p);
  return total;
}

IpAddress round_robin(const rules::CompiledTranslation& rule) {
  const uint64_t total = turn_total(rule);
  uint64_t turn = rule.turns->fetch_add(1, std::memory_order_relaxed) % total;
  for (const IpPrefix& p : rule.targets) {
    if (turn < turn_count(p)) return narrow(wide(p.address) + turn);
    turn -= turn_count(p);
  }
  return rule.targets.front().address;  // not reached: turn < total
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
      return turn_total(rule) - 1;
    case rules::PoolType::Random:
      return turn_count(rule.targets.front()) - 1;
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
