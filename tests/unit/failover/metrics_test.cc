#include <catch2/catch.hpp>
#include <string>

#include "failover/failover_metrics.h"

namespace pf = pairwall::failover;

TEST_CASE("failover metrics: role, demotion by reason, rejects by reason", "[metrics]") {
  pf::FailoverSnapshot s;
  s.vhid = 7;
  s.role = pf::Role::Backup;
  s.demotion = 80;
  s.demotion_by_reason[static_cast<std::size_t>(pf::DemoteReason::BulkSync)] = 16;
  s.demotion_by_reason[static_cast<std::size_t>(pf::DemoteReason::Carrier)] = 64;
  s.last_heard_ms_ago = 250;
  s.master_node_id = 1;
  s.links = {{"lan0", true}, {"lan1", false}};
  s.rejects[static_cast<std::size_t>(pf::Reject::BadTag)] = 3;
  s.transitions_total = 2;
  s.counters.adverts_accepted = 42;
  pairwall::control::MetricWriter w;
  pf::write_failover_metrics(w, s);
  const std::string text = w.text();
  INFO(text);
  for (const char* line : {
           "pairwall_failover_role{vhid=\"7\",driver=\"builtin\",role=\"backup\"} 1\n",
           "pairwall_failover_role{vhid=\"7\",driver=\"builtin\",role=\"master\"} 0\n",
           "pairwall_failover_demotion{vhid=\"7\"} 80\n",
           "pairwall_failover_demotion_reason{vhid=\"7\",reason=\"bulk_sync\"} 16\n",
           "pairwall_failover_demotion_reason{vhid=\"7\",reason=\"carrier\"} 64\n",
           "pairwall_failover_demotion_reason{vhid=\"7\",reason=\"admin\"} 0\n",
           "pairwall_failover_carrier{vhid=\"7\",interface=\"lan1\"} 0\n",
           "pairwall_failover_master_node_id{vhid=\"7\"} 1\n",
           "pairwall_failover_last_heard_seconds{vhid=\"7\"} 0.25\n",
           "pairwall_failover_adverts_rejected_total{vhid=\"7\",reason=\"bad_tag\"} 3\n",
           "pairwall_failover_adverts_rejected_total{vhid=\"7\",reason=\"replay\"} 0\n",
           "pairwall_failover_transitions_total{vhid=\"7\"} 2\n",
           "pairwall_failover_adverts_accepted_total{vhid=\"7\"} 42\n",
           "# TYPE pairwall_failover_adverts_rejected_total counter\n",
       }) {
    CHECK(text.find(line) != std::string::npos);
  }
}

// In keepalived mode keepalived holds the VIPs: a gauge that always read 0 on its master would say
// the group is served by no one.
TEST_CASE("failover metrics: VIPs held by the builtin election only, health checks in keepalived mode",
          "[metrics]") {
  for (const auto driver : {pf::Driver::Builtin, pf::Driver::Keepalived}) {
    const bool keepalived = driver == pf::Driver::Keepalived;
    INFO((keepalived ? "keepalived" : "builtin"));
    pf::FailoverSnapshot s;
    s.vhid = 7;
    s.driver = driver;
    s.role = pf::Role::Master;
    s.vips_held = !keepalived;
    pairwall::control::MetricWriter w;
    pf::write_failover_metrics(w, s);
    const std::string text = w.text();
    CHECK((text.find("pairwall_failover_vips_held{vhid=\"7\"} 1\n") != std::string::npos) == !keepalived);
    CHECK((text.find("pairwall_failover_vips_held") != std::string::npos) == !keepalived);
    CHECK((text.find("pairwall_failover_health_checked_seconds") != std::string::npos) == keepalived);
  }
}

// pairwalld hears no advertisement in keepalived mode (keepalived does): a gauge that always read
// -1, never, on both nodes would say neither hears a master.
TEST_CASE("failover metrics: the last advertisement heard by the builtin election only", "[metrics]") {
  for (const auto driver : {pf::Driver::Builtin, pf::Driver::Keepalived}) {
    const bool keepalived = driver == pf::Driver::Keepalived;
    INFO((keepalived ? "keepalived" : "builtin"));
    pf::FailoverSnapshot s;
    s.driver = driver;
    s.role = pf::Role::Backup;
    s.last_heard_ms_ago = keepalived ? -1 : 300;
    pairwall::control::MetricWriter w;
    pf::write_failover_metrics(w, s);
    CHECK((w.text().find("pairwall_failover_last_heard_seconds") != std::string::npos) == !keepalived);
  }
}
