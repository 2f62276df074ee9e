// What pairwalld's components take from its configuration beyond their own sections: shared by
// the running node (node.h) and the one-shot commands (main.cc), so that both read it alike.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "daemon/control/config.h"
#include "daemon/engine/rules/interface_addresses.h"
#include "daemon/io/hooks.h"
#include "failover/failover_config.h"

namespace pairwall::node {

// What the hooks leave to the kernel beside [queue] exclude_interfaces: the sync link, and the
// failover group's advertisements. A running node keeps its own, as its services run them (a
// reload may move either), so that it never reads the config's sections, nor their key files,
// again for its hooks.
struct HookExemptions {
  std::string sync_interface;  // empty: no [sync]
  // Without a value: no [failover]. Builtin: its UDP to group4 / group6 on advert_port, and to any
  // address in a family some link has a peer in (the peer's, or this node's own from the peer);
  // keepalived: VRRP to any address.
  std::optional<failover::Driver> failover;
  uint16_t advert_port = 0;
  std::array<uint8_t, 4> group4{};
  std::array<uint8_t, 16> group6{};
  bool peer4 = false;
  bool peer6 = false;

  // The failover group's, from its config.
  void take_adverts(const failover::FailoverConfig& group);
};
// The exemptions `config` names (its [sync] and [failover] sections parsed, key files read).
HookExemptions hook_exemptions(const control::Config& config);

// The packet hooks for `queue` and `exempt`. `translations`: the rule set has nat/rdr/binat rules,
// which need the pre-routing hook (hooks.h): the one loaded at start, or a later one that brings
// the first (ControlService::publish).
io::HooksConfig hooks_config(const control::QueueConfig& queue, const HookExemptions& exempt,
                             bool translations);
// The same for `config`'s [queue] and exemptions, for the one-shot commands.
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
