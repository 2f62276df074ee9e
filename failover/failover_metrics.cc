#include "failover/failover_metrics.h"

#include <string>

namespace pairwall::failover {

void write_failover_metrics(control::MetricWriter& out, const FailoverSnapshot& s) {
  using Type = control::MetricWriter::Type;
  const std::string vhid = std::to_string(s.vhid);
  const char* driver = s.driver == Driver::Builtin ? "builtin" : "keepalived";

  out.family("pairwall_failover_role", Type::Gauge,
             "1 for the role this node holds in the group, 0 for the others");
  for (const Role r : {Role::Init, Role::Backup, Role::Master, Role::Fault}) {
    out.sample({{"vhid", vhid}, {"driver", driver}, {"role", role_name(r)}}, uint64_t{s.role == r});
  }
  out.family("pairwall_failover_demotion", Type::Gauge,
             "Demotion counter advertised to the peer (lower wins)");
  out.sample({{"vhid", vhid}}, uint64_t{s.demotion});
  out.family("pairwall_failover_demotion_reason", Type::Gauge,
             "What each reason adds to the demotion counter");
  for (std::size_t i = 0; i < kDemoteReasonCount; ++i) {
    out.sample({{"vhid", vhid}, {"reason", demote_reason_key(static_cast<DemoteReason>(i))}},
               uint64_t{s.demotion_by_reason[i]});
  }
  if (s.driver == Driver::Builtin) {  // keepalived's own are in keepalived.conf
    out.family("pairwall_failover_advskew", Type::Gauge, "Configured advskew");
    out.sample({{"vhid", vhid}}, uint64_t{s.advskew});
    out.family("pairwall_failover_advbase_seconds", Type::Gauge, "Configured advertisement base interval");
    out.sample({{"vhid", vhid}}, s.advbase_ms / 1000.0);
  }
  out.family("pairwall_failover_master_node_id", Type::Gauge,
             "Node id of the master as this node sees it, 0 none");
  out.sample({{"vhid", vhid}}, uint64_t{s.master_node_id});
  if (s.driver == Driver::Builtin) {  // keepalived hears the advertisements there, not pairwalld
    out.family("pairwall_failover_last_heard_seconds", Type::Gauge,
               "Seconds since the last valid advertisement from a peer, -1 never");
    out.sample({{"vhid", vhid}},
               s.last_heard_ms_ago < 0 ? -1.0 : static_cast<double>(s.last_heard_ms_ago) / 1000.0);
  }
  if (s.driver == Driver::Keepalived) {
    out.family("pairwall_failover_health_checked_seconds", Type::Gauge,
               "Seconds since keepalived's vrrp_script (or any health check) last asked, -1 never");
    out.sample({{"vhid", vhid}},
               s.health_checked_ms_ago < 0 ? -1.0 : static_cast<double>(s.health_checked_ms_ago) / 1000.0);
  }
  if (s.driver != Driver::Keepalived) {  // there keepalived holds the VIPs, and says so itself
    out.family("pairwall_failover_vips_held", Type::Gauge, "1 while this node holds the group's VIPs");
    out.sample({{"vhid", vhid}}, uint64_t{s.vips_held});
  }
  out.family("pairwall_failover_carrier", Type::Gauge,
             "1 while a watched interface (one with VIPs, or tracked) has carrier");
  for (const auto& l : s.links) out.sample({{"vhid", vhid}, {"interface", l.name}}, uint64_t{l.carrier});

  out.family("pairwall_failover_transitions_total", Type::Counter, "Role changes since start");
  out.sample({{"vhid", vhid}}, s.transitions_total);
  out.family("pairwall_failover_adverts_rejected_total", Type::Counter, "Advertisements rejected, by reason");
  for (std::size_t i = 0; i < kRejectCount; ++i) {
    out.sample({{"vhid", vhid}, {"reason", reject_name(static_cast<Reject>(i))}}, s.rejects[i]);
  }
  const auto& c = s.counters;
  const std::pair<const char*, uint64_t> counters[] = {
      {"adverts_sent", c.adverts_sent},
      {"advert_send_errors", c.advert_send_errors},
      {"adverts_accepted", c.adverts_accepted},
      {"adverts_on_accept_key", c.adverts_on_accept_key},
      {"announcements", c.announcements},
      {"announce_errors", c.announce_errors},
      {"vip_renewals", c.vip_renewals},
      {"vip_retries", c.vip_retries},
      {"vip_errors", c.vip_errors},
      {"worse_masters_heard", c.worse_masters},
      {"node_id_conflicts", c.node_id_conflicts},
      {"link_resyncs", c.link_resyncs},
      {"advert_socket_retries", c.advert_socket_retries},
      {"notify_runs", c.notify_runs},
      {"notify_failures", c.notify_failures},
  };
  for (const auto& [name, value] : counters) {
    const std::string family = std::string("pairwall_failover_") + name + "_total";
    out.family(family, Type::Counter, "See failover/failover_service.h FailoverCounters");
    out.sample({{"vhid", vhid}}, value);
  }
}

void register_failover_metrics(control::MetricsRegistry& registry, const FailoverService& service) {
  registry.add("failover",
               [&service](control::MetricWriter& out) { write_failover_metrics(out, service.snapshot()); });
}

}  // namespace pairwall::failover
