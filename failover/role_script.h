// The operator's script run at each role change of the builtin election ([failover] notify), as
// keepalived runs its notify script and FreeBSD's devd or OpenBSD's ifstated run theirs when a
// carp interface changes state: `SCRIPT ROLE VHID CAUSE`, ROLE one of MASTER, BACKUP and FAULT
// (keepalived's words), or STOP when the service stops; CAUSE as the transition log says it
// ("master down", "better master heard", ...). Its output goes where the daemon's does.
//
// Nothing here waits for a script: an advertisement must not wait for one. One runs at a time, so
// that a script sees the roles in the order the node took them, and the changes that come while it
// runs are folded into one: when it exits, the script runs again for the role the node has then,
// unless that is the role it last ran for. STOP is not held back: the daemon is about to exit. A
// script still running after its time limit is killed, with what it started (its process group):
// one that hangs must not keep the next roles from being told.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "failover/election.h"

namespace pairwall::failover {

class RoleScript {
 public:
  struct Counters {
    uint64_t runs = 0;      // scripts started
    uint64_t failures = 0;  // not started, ended other than with exit status 0, or killed for its time
  };

  static constexpr std::chrono::milliseconds kTimeLimit{60'000};

  // `path` empty: no script.
  RoleScript(std::string path, uint8_t vhid, std::chrono::milliseconds time_limit = kTimeLimit);
  // A script still running is left to finish on its own.
  ~RoleScript() = default;
  RoleScript(const RoleScript&) = delete;
  RoleScript& operator=(const RoleScript&) = delete;

  // A reload's script, from the next change on.
  void set_path(std::string path) { path_ = std::move(path); }
  // A reload's vhid, told to the scripts from the next change on.
  void set_vhid(uint8_t vhid) { vhid_ = vhid; }
  // The node took `role` (Init: the service stops) for `cause`.
  void role_changed(Role role, std::string_view cause);
  // Learns whether the running script has exited, and starts the one waiting if so. Call it every
  // few tens of milliseconds.
  void poll();

  bool running() const { return pid_ > 0; }
  const Counters& counters() const { return counters_; }

 private:
  struct Change {
    Role role;
    std::string cause;
  };
  void start(const Change& change);

  std::string path_;
  uint8_t vhid_;
  const std::chrono::milliseconds time_limit_;
  pid_t pid_ = -1;
  std::chrono::steady_clock::time_point started_;
  bool killed_ = false;      // for running past the time limit
  std::string running_for_;  // "SCRIPT ROLE", for the log
  std::optional<Change> waiting_;
  std::optional<Role> last_run_;
  Counters counters_;
};

// The word a script is given for `role`: MASTER, BACKUP, FAULT, or STOP for Init.
std::string_view script_role_word(Role role);

}  // namespace pairwall::failover
