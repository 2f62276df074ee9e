// The host's interfaces and their addresses, for rules that name interfaces in address positions
// (engine/rules/interface_addresses.h): read once per rule load, as pfctl reads them.
#pragma once

#include <ifaddrs.h>

#include "daemon/engine/rules/interface_addresses.h"

namespace pairwall::io {

// Every interface (those without an address too) with its IPv4 and IPv6 addresses, by
// getifaddrs(3). IPv6 link-local addresses are left out: every link has fe80::/64, so
// `em0:network` would take in every other link's neighbours. Throws std::system_error when the
// kernel cannot be asked.
engine::rules::InterfaceAddresses host_interface_addresses();

// The same from a getifaddrs(3) list. An IPv4 address is listed under its label, which for the
// aliases of ifconfig's days ("eth0:1": ifupdown's `eth0:0` stanzas, keepalived's and others'
// `label`) is the interface's name, a colon and more: no interface name holds a colon, so the
// address is the interface's before it, as pf counts every address an interface has.
engine::rules::InterfaceAddresses interface_addresses_of(const ifaddrs* list);

}  // namespace pairwall::io
