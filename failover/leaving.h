// The leaving advertisement of a node whose daemon could not send its own. A master that stops
// cleanly sends one (Election::shutdown) and its backup takes the group at once; one that is killed
// or crashes sends nothing, and its backup waits out the master-down interval (three advertisement
// intervals and its skew). `pairwalld --cleanup`, which systemd runs after the daemon ends however
// it ended (the unit's ExecStopPost), sends it in the dead daemon's stead.
//
// Sent whatever the dead daemon's role was, which nothing records: a master that hears its peer
// leave stays master, and a backup that hears it takes over, as it would at the end of the
// interval with no master heard.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "failover/failover_config.h"

namespace pairwall::failover {

struct LeavingResult {
  std::size_t sent = 0;      // advertisement channels it left on
  std::size_t channels = 0;  // channels tried
  std::vector<std::string> errors;
};

// Signs one leaving advertisement of node `node_id` with the group's key and sends it on each of
// the group's advertisement channels. `boot_epoch` must be above every epoch the dead daemon
// advertised under (a fresh control::take_boot_epoch()): the peer refuses anything older as a
// replay. Nothing is sent for a group keepalived runs.
LeavingResult send_leaving_adverts(const FailoverConfig& config, uint32_t node_id, uint64_t boot_epoch);

}  // namespace pairwall::failover
