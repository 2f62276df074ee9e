// Which packets not addressed to this node a rule set's translation rules may rewrite before
// routing, as the pre-routing chain queues them (hooks.h): the inbound ways of rdr and binat. A
// transparent redirect (`rdr on $int_if proto tcp to any port 80 -> $proxy`) must be decided there:
// routed first, its packet would leave by the route of the address it was sent to.
#pragma once

#include <vector>

#include "daemon/engine/rules/ast.h"
#include "daemon/io/hooks.h"

namespace pairwall::io {

// A superset of each rule's match in iptables' terms: one match per arrival interface, protocol and
// destination prefix it lists, its destination ports where a single range says them; what iptables
// cannot say (negations, tables, port lists) is left out, and so are destinations that are this
// node's own (`to (em0)`), which the chain queues anyway. No nat rule appears: it rewrites the
// source, after routing. After `kept` (what an earlier rule set needed), without duplicates, in
// rule order.
//
// Every packet before routing walks the chain's rules in turn, so past kMaxPreroutingMatches the
// matches widen (destinations and ports left out, then interfaces, then protocols) until they fit.
inline constexpr std::size_t kMaxPreroutingMatches = 64;
std::vector<PreroutingMatch> prerouting_matches(const engine::rules::RuleFile& file,
                                                std::vector<PreroutingMatch> kept = {});

}  // namespace pairwall::io
