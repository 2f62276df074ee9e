// Which address a nat or rdr rule gives a new connection, by the rule's pool type (pf_map_addr).
// The state keeps what was chosen, so a choice is made once per connection and never has to be
// made alike on the peer; only source-hash, whose key both nodes derive from the rule, does.
#pragma once

#include <cstdint>

#include "daemon/engine/address.h"
#include "daemon/engine/rules/ruleset.h"

namespace pairwall::engine {

// `address` is the one the rule rewrites (nat: the source, rdr: the destination), `source` the
// packet's source (source-hash's input for both), `draw` a random value for `random`.
IpAddress pool_address(const rules::CompiledTranslation& rule, const IpAddress& source,
                       const IpAddress& address, uint64_t draw) noexcept;

// The addresses a nat rule whose ports have run out on `current` may fall back to, as pf_get_sport
// does for random and round-robin pools: how many the pool holds besides `current` (0 for the
// other pool types, which map a connection to one address), and the next of them. round-robin
// takes the next turn; random the next address of its prefix, wrapping round within it, or of a
// list's or table's addresses, after the last the first.
uint64_t pool_alternatives(const rules::CompiledTranslation& rule) noexcept;
IpAddress next_pool_address(const rules::CompiledTranslation& rule, const IpAddress& current) noexcept;

}  // namespace pairwall::engine
