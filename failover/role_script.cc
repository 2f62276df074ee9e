#include "failover/role_script.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "daemon/io/spawn.h"

namespace pairwall::failover {

std::string_view script_role_word(Role role) {
  switch (role) {
    case Role::Master:
      return "MASTER";
    case Role::Backup:
      return "BACKUP";
    case Role::Fault:
      return "FAULT";
    case Role::Init:
      return "STOP";
  }
  return "STOP";
}

RoleScript::RoleScript(std::string path, uint8_t vhid, std::chrono::milliseconds time_limit)
    : path_(std::move(path)), vhid_(vhid), time_limit_(time_limit) {}

void RoleScript::role_changed(Role role, std::string_view cause) {
  if (path_.empty()) return;
  Change change{role, std::string(cause)};
  if (running() && role != Role::Init) {
    waiting_ = std::move(change);
    return;
  }
  start(change);
}

void RoleScript::poll() {
  if (!running()) return;
  int status = 0;
  const pid_t done = waitpid(pid_, &status, WNOHANG);
  if (done == 0 || (done < 0 && errno == EINTR)) {
    if (!killed_ && std::chrono::steady_clock::now() - started_ >= time_limit_) {
      killed_ = true;
      ::kill(-pid_, SIGKILL);
      spdlog::warn("failover: notify {} still ran after {} s: killed, with what it started", running_for_,
                   std::chrono::duration_cast<std::chrono::seconds>(time_limit_).count());
    }
    return;
  }
  if (done < 0) {
    // ECHILD: SIGCHLD ignored has the kernel reap the script unasked; how it ended is unknown.
    spdlog::warn("failover: notify {}: its exit status is unknown (waitpid: {})", running_for_,
                 std::strerror(errno));
  } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    ++counters_.failures;
    spdlog::warn("failover: notify {} exited with status {}", running_for_, WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    ++counters_.failures;
    if (!killed_) spdlog::warn("failover: notify {} was killed by signal {}", running_for_, WTERMSIG(status));
  }
  pid_ = -1;
  if (waiting_ && waiting_->role != last_run_) start(*waiting_);
  waiting_.reset();
}

void RoleScript::start(const Change& change) {
  const std::string role(script_role_word(change.role));
  const std::string vhid = std::to_string(vhid_);
  // In a group of its own, so that a script past its time limit is killed with what it started.
  pid_t pid = -1;
  const int error =
      io::spawn({path_, role, vhid, change.cause}, io::SpawnOptions{.own_process_group = true}, &pid);
  ++counters_.runs;
  last_run_ = change.role;
  running_for_ = path_ + " " + role;
  if (error != 0) {
    ++counters_.failures;
    spdlog::error("failover: notify {}: cannot run it: {}", running_for_, std::strerror(error));
    return;
  }
  spdlog::info("failover: notify {} {} \"{}\" started (pid {})", running_for_, vhid, change.cause, pid);
  // STOP is not waited for: a script still running before it is left to its own exit.
  if (change.role != Role::Init) {
    pid_ = pid;
    started_ = std::chrono::steady_clock::now();
    killed_ = false;
  }
}

}  // namespace pairwall::failover
