// Starting a helper program from a daemon that runs threads: posix_spawnp (fork + exec without a
// shell), stdin from /dev/null, none of the daemon's descriptors beyond stdout and stderr (an
// iptables still waiting for the xtables lock when the daemon is killed would otherwise keep its
// control and metrics listeners bound), and none of the signals its threads block (the mask
// survives exec, and a child would not stop at a SIGTERM).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace pairwall::io {

struct SpawnOptions {
  int output_fd = -1;              // the child's stdout and stderr; -1: the daemon's own
  bool own_process_group = false;  // so that a kill of -pid reaches what the child starts
};

// Starts argv[0] (a name without '/' is looked up in PATH) with `argv`. Returns 0 and sets *pid, or
// an errno value.
int spawn(const std::vector<std::string>& argv, const SpawnOptions& options, pid_t* pid);

}  // namespace pairwall::io
