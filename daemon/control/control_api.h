// What sync and failover expose to the control socket. Their owners implement these and main()
// registers them with the ControlService when the sections are configured.
//
// Every call comes from the control thread (the daemon's Asio loop); an implementation whose state
// lives on another thread synchronizes inside the call. Calls must not block for long: the same
// loop feeds the systemd watchdog.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/engine/address.h"
#include "proto/control.pb.h"

namespace pairwall::control {

class SyncControl {
 public:
  virtual ~SyncControl() = default;
  // Fills every field of `status` it knows; `enabled` is set by the caller.
  virtual void fill_status(SyncStatus* status) = 0;
  // Asks the peer for its whole table (pairwallctl sync resync). "" once asked, otherwise why not.
  virtual std::string request_resync() = 0;
  // A table the pair shares ([sync] tables) changed on this node: its entries now, to send whole.
  virtual void share_table(const std::string& name, std::vector<engine::AgedTableEntry> entries) = 0;
};

class FailoverControl {
 public:
  struct HealthResult {
    bool healthy = true;
    std::string reason;  // why not, for `pairwallctl health` and keepalived's track_script
  };

  virtual ~FailoverControl() = default;
  virtual void fill_status(FailoverStatus* status) = 0;
  // Each returns "" on success, otherwise a message for the operator.
  virtual std::string demote(uint32_t amount) = 0;
  virtual std::string promote(uint32_t amount) = 0;
  virtual std::string set_role(FailoverStatus::Role role) = 0;
  virtual HealthResult healthy() = 0;
};

}  // namespace pairwall::control
