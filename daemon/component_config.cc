#include "daemon/component_config.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <vector>

#include "daemon/io/host_addresses.h"
#include "daemon/sync/sync_config.h"
#include "failover/advert_codec.h"
#include "failover/failover_config.h"

namespace pairwall::node {

void HookExemptions::take_adverts(const failover::FailoverConfig& group) {
  failover = group.driver;
  advert_port = group.port;
  group4 = group.group4;
  group6 = group.group6;
  const auto has_peer = [&](int family) {
    return std::any_of(group.peers.begin(), group.peers.end(),
                       [&](const failover::AdvertPeer& p) { return p.family == family; });
  };
  peer4 = has_peer(AF_INET);
  peer6 = has_peer(AF_INET6);
}

HookExemptions hook_exemptions(const control::Config& c) {
  HookExemptions e;
  if (c.sync) e.sync_interface = sync::parse_sync_config(*c.sync, c.file).interface;
  if (c.failover) e.take_adverts(failover::parse_failover_config(*c.failover, c.file));
  return e;
}

io::HooksConfig hooks_config(const control::QueueConfig& queue, const HookExemptions& exempt,
                             bool translations) {
  io::HooksConfig h;
  h.queue_first = queue.first;
  h.queue_last = static_cast<uint16_t>(queue.first + queue.count - 1);
  h.bypass = queue.fail_open;
  h.input = h.output = queue.hooks == control::HookSet::ForwardLocal;
  h.prerouting = translations;
  h.excluded_interfaces = queue.exclude_interfaces;
  // pf's customary `set skip on lo`: the node's own loopback traffic (control clients, metrics
  // scrapes) is never queued, neither on INPUT nor before routing.
  if (h.input || h.prerouting) h.excluded_interfaces.push_back("lo");
  // As pf's `set skip on $sync_if`: the node's own sync datagrams, and nothing else, cross the
  // dedicated sync link; queued with the node's own traffic, a rule set that forgot them would cut
  // the pair's sync. Before routing too: the datagrams to this node would meet the pre-routing
  // queue, and a stopped fail-closed node would drop them (and an operator's way in over that link).
  if ((h.input || h.output || h.prerouting) && !exempt.sync_interface.empty())
    h.excluded_interfaces.push_back(exempt.sync_interface);
  // And the failover group's advertisements, to and from this node, as pf's users must pass CARP:
  // a rule set that forgot them would make both nodes master.
  if ((h.input || h.output) && exempt.failover) {
    // Matched by their groups and by TTL 255, which every advertisement is sent with (RFC 5798
    // 5.1.1.3; the builtin election's receivers refuse any other): a forwarded datagram has lost
    // a hop by the time it meets the FORWARD hook, so forwarded traffic to the same group and port
    // still meets the rules, even where the configured group is one a multicast router forwards.
    constexpr auto advert_ttl = static_cast<uint8_t>(failover::kAdvertTtl);
    if (*exempt.failover == failover::Driver::Keepalived) {
      // VRRP (RFC 5798 5.1.1.3, TTL 255) to any address: keepalived's `unicast_peer` sends it to
      // the peer's own address, not to 224.0.0.18 / ff02::12.
      h.excluded_destinations.push_back({engine::Family::V4, 112, "", 0, advert_ttl});
      h.excluded_destinations.push_back({engine::Family::V6, 112, "", 0, advert_ttl});
    } else {
      char text[INET6_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, exempt.group4.data(), text, sizeof text);
      h.excluded_destinations.push_back({engine::Family::V4, 17, text, exempt.advert_port, advert_ttl});
      inet_ntop(AF_INET6, exempt.group6.data(), text, sizeof text);
      h.excluded_destinations.push_back({engine::Family::V6, 17, text, exempt.advert_port, advert_ttl});
      // To a peer (carppeer) they go to its own address, and come to whichever address this node
      // has on that link: any address, and TTL 255 alone keeps forwarded datagrams out.
      if (exempt.peer4)
        h.excluded_destinations.push_back({engine::Family::V4, 17, "", exempt.advert_port, advert_ttl});
      if (exempt.peer6)
        h.excluded_destinations.push_back({engine::Family::V6, 17, "", exempt.advert_port, advert_ttl});
    }
  }
  // SO_MARK of our own RST / ICMP replies, and the mark of a packet the engine claimed before
  // routing (translated there): with `hooks = "forward+local"` a reply is not filtered by the
  // daemon that sent it, and a claimed packet is not judged again after routing.
  h.bypass_mark = queue.mark;
  return h;
}

io::HooksConfig hooks_config(const control::Config& c, bool translations) {
  return hooks_config(c.queue, hook_exemptions(c), translations);
}

void validate_component_sections(const control::Config& c) {
  if (c.sync) (void)sync::parse_sync_config(*c.sync, c.file);
  if (c.failover) (void)failover::parse_failover_config(*c.failover, c.file);
}

std::function<engine::rules::InterfaceAddresses()> interface_addresses(const control::Config& c) {
  std::vector<failover::Vip> vips;
  if (c.failover) vips = failover::parse_failover_config(*c.failover, c.file).vips;
  return interface_addresses(std::move(vips));
}

std::function<engine::rules::InterfaceAddresses()> interface_addresses(std::vector<failover::Vip> vips) {
  return [vips = std::move(vips)] {
    engine::rules::InterfaceAddresses addresses = io::host_interface_addresses();
    for (const failover::Vip& v : vips) {
      engine::rules::InterfaceAddress a;
      a.family = v.family == AF_INET ? engine::Family::V4 : engine::Family::V6;
      a.address = a.family == engine::Family::V4 ? engine::IpAddress::from_v4_bytes(v.address.data())
                                                 : engine::IpAddress::from_v6_bytes(v.address.data());
      a.prefix_length = v.prefix_len;
      addresses[v.interface].push_back(a);
    }
    return addresses;
  };
}

}  // namespace pairwall::node
