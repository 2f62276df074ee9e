// The host's interfaces and their addresses, for rules that name interfaces in address positions
// (engine/rules/interface_addresses.h): read once per rule load, as pfctl reads them.
#pragma once

#include "daemon/engine/rules/interface_addresses.h"

namespace pairwall::io {

// Every interface (those without an address too) with its IPv4 and IPv6 addresses, by
// getifaddrs(3). IPv6 link-local addresses are left out: every link has fe80::/64, so
// `em0:network` would take in every other link's neighbours. Throws std::system_error when the
// kernel cannot be asked.
engine::rules::InterfaceAddresses host_interface_addresses();

}  // namespace pairwall::io
