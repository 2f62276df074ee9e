// What pairwalld's components take from its configuration beyond their own sections: shared by
// the running node (node.h) and the one-shot commands (main.cc), so that both read it alike.
#pragma once

#include <functional>
#include <vector>

#include "daemon/control/config.h"
#include "daemon/engine/rules/interface_addresses.h"
#include "daemon/io/hooks.h"
#include "failover/failover_config.h"

namespace pairwall::node {

// The packet hooks for `config`. `translations`: the rule set has nat/rdr/binat rules, which need
// the pre-routing hook (hooks.h): the one loaded at start, or a later one that brings the first
// (ControlService::publish).
io::HooksConfig hooks_config(const control::Config& config, bool translations);

// The sections other components own: validated here so that --check, start-up and a reload refuse
// them with the same one-line message. Throws ConfigError.
void validate_component_sections(const control::Config& config);

// Where rules that name interfaces as addresses get the host's addresses. The failover's virtual
// addresses count as their interfaces' on both nodes, held or not, so that both load the same rules.
std::function<engine::rules::InterfaceAddresses()> interface_addresses(const control::Config& config);
// The same with the VIPs a reload gave the group.
std::function<engine::rules::InterfaceAddresses()> interface_addresses(std::vector<failover::Vip> vips);

}  // namespace pairwall::node
