// Prometheus metrics of the failover group, collected from a snapshot at scrape time.
#pragma once

#include "daemon/control/metrics.h"
#include "failover/failover_service.h"

namespace pairwall::failover {

// Writes the pairwall_failover_* families for `s`.
void write_failover_metrics(control::MetricWriter& out, const FailoverSnapshot& s);

// Registers a collector that snapshots `service` on every scrape; `service` must outlive `registry`
// or be removed from it first.
void register_failover_metrics(control::MetricsRegistry& registry, const FailoverService& service);

}  // namespace pairwall::failover
