// One firewall node as pairwalld runs it (DESIGN.md "One node, one process"):
//
//   start:  config -> engine + rules -> control socket, metrics -> queues bound -> hooks installed
//           -> READY=1. Queues are bound before the hooks send packets to them, so that even a
//           fail-closed node never drops packets for want of a listener while it starts.
//   run:    packet workers (one thread per queue) decide; the sync service and the failover service
//           each run on a thread of their own; the calling thread runs the Asio loop: control
//           socket, /metrics, signals, expiry every second, the systemd watchdog.
//   stop:   SIGTERM/SIGINT: a fail-open node's hooks removed first (nothing new is queued; a
//           fail-closed node keeps them, see Node::release_hooks), then the workers send the
//           verdicts they owe and exit, then the control socket goes.
#pragma once

#include "daemon/control/config.h"

namespace pairwall::node {

// Runs the node until SIGTERM or SIGINT; returns the process's exit status (1: it did not start,
// the reason logged).
int run(const control::Config& config);

}  // namespace pairwall::node
