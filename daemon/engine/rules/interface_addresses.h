// Interface names in address positions, as pf reads them: `em0` is the addresses the interface has,
// `em0:network` the networks they lie in, and `self` every address of the host. The engine stays
// free of I/O: the caller brings the host's addresses (daemon/io/host_addresses.h reads them), and
// each such element becomes a const table of them, named after it ("em0:addresses", "em0:network",
// "self:addresses"), which `pairwallctl tables show` lists. Those tables follow the addresses as
// they change (refresh_interface_tables(); pf does so for `(em0)` only, which is read here as
// `em0` but for one thing, as pf's: only `(em0)` may have no address when the rules load); in a
// table's `{ }` list (`table <mine> { self, !em1 }`) they join its entries as they are when the
// rules load.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/engine/address.h"
#include "daemon/engine/rules/ast.h"
#include "daemon/engine/rules/parser.h"

namespace pairwall::engine::rules {

struct InterfaceAddress {
  Family family = Family::V4;
  IpAddress address;
  uint8_t prefix_length = 32;  // of the network the address lies in
};

// Every interface of the host by name, those without an address included.
using InterfaceAddresses = std::map<std::string, std::vector<InterfaceAddress>>;

// The table an interface element reads.
std::string interface_table_name(const AddressElement& element);

// Turns every interface element of `file`'s rules into a read of its table, adding the tables, and
// the interface entries of its tables into entries; a translation rule's `-> em0` becomes the
// interface's first address of the rule's family (`-> (em0) round-robin`: all of them, in turn).
// An interface the host does not have, or one without an address (of that family), is a RuleError
// at the element, unless written `(em0)`: then its table starts empty, and a nat or rdr rule
// loads without a target (TranslationRule::target_pending), as current pf loads `(tun0)` before
// tun0 exists. Each `(em0)` of an interface the host does not have yet is a notice, "warning: ..."
// at the element (a typo would otherwise match nothing unseen), added to `notices` where given.
// Tables an earlier call made are kept as they are: resolving a file again resolves only what was
// added to it since.
std::optional<RuleError> resolve_interfaces(RuleFile& file, const InterfaceAddresses& addresses,
                                            std::vector<RuleError>* notices = nullptr);

// Sets the tables resolve_interfaces() made, and the translation addresses it set, to the addresses
// now, and returns the names of those that changed. An interface that lost its addresses, or is
// gone, leaves its table empty and its translation address as it was.
std::vector<std::string> refresh_interface_tables(RuleFile& file, const InterfaceAddresses& addresses);

// Sets RuleFile::local_broadcasts to the directed broadcast addresses of `addresses`' IPv4
// networks (those of /30 and wider: a /31 or /32 has none, RFC 3021), and returns whether they
// changed. resolve_interfaces() sets them too.
bool refresh_local_broadcasts(RuleFile& file, const InterfaceAddresses& addresses);

}  // namespace pairwall::engine::rules
