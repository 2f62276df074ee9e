// RoleScript with a real script: it appends its arguments to a file, sleeps while a "slow" file
// exists, and exits with the status a "status" file holds.
#include "failover/role_script.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "tests/unit/support/temp_dir.h"

namespace pairwall::failover {
namespace {

using namespace std::chrono_literals;

struct Script {
  test::TempDir dir{"role-script"};
  std::filesystem::path path = dir.path / "notify.sh";

  Script() {
    std::ofstream(path) << "#!/bin/sh\n"
                           "here=$(dirname \"$0\")\n"
                           "echo \"$1 $2 $3\" >> \"$here/calls\"\n"
                           "[ -e \"$here/slow\" ] && sleep 0.3\n"
                           "if [ -e \"$here/hang\" ]; then sleep 30 & echo $! > \"$here/child\"; wait; fi\n"
                           "exit $(cat \"$here/status\" 2>/dev/null || echo 0)\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  }
  std::string calls() const {
    std::ifstream in(dir.path / "calls");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  void set(const char* name, const std::string& content) const { std::ofstream(dir.path / name) << content; }
  void clear(const char* name) const { std::filesystem::remove(dir.path / name); }
};

// Polls `script` until `done` or 5 s have passed.
template <typename Done>
void poll_until(RoleScript& script, Done done) {
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (!done() && std::chrono::steady_clock::now() < until) {
    script.poll();
    std::this_thread::sleep_for(5ms);
  }
}

TEST_CASE("RoleScript: SCRIPT ROLE VHID CAUSE, one at a time, the changes during one folded into the last",
          "[role_script]") {
  Script s;
  RoleScript script(s.path.string(), 7);
  script.role_changed(Role::Backup, "start");
  poll_until(script, [&] { return !script.running(); });
  CHECK(s.calls() == "BACKUP 7 start\n");

  // While MASTER's script runs, BACKUP then FAULT: FAULT alone runs once it has exited.
  s.set("slow", "");
  script.role_changed(Role::Master, "master down");
  script.role_changed(Role::Backup, "peer better");
  script.role_changed(Role::Fault, "fault");
  std::this_thread::sleep_for(100ms);
  script.poll();
  CHECK(s.calls() == "BACKUP 7 start\nMASTER 7 master down\n");
  poll_until(script, [&] { return s.calls().ends_with("FAULT 7 fault\n") && !script.running(); });
  CHECK(s.calls() == "BACKUP 7 start\nMASTER 7 master down\nFAULT 7 fault\n");

  // Back to the role it last ran for by the time it exits: not run again.
  script.role_changed(Role::Backup, "fault cleared");
  script.role_changed(Role::Master, "preempt");
  script.role_changed(Role::Backup, "peer better");
  poll_until(script, [&] { return !script.running(); });
  s.clear("slow");
  CHECK(s.calls() == "BACKUP 7 start\nMASTER 7 master down\nFAULT 7 fault\nBACKUP 7 fault cleared\n");
  CHECK(script.counters().runs == 4);
  CHECK(script.counters().failures == 0);
}

TEST_CASE("RoleScript: STOP runs at once, even while another script runs", "[role_script]") {
  Script s;
  s.set("slow", "");
  RoleScript script(s.path.string(), 1);
  script.role_changed(Role::Master, "master down");
  script.role_changed(Role::Init, "shutdown");
  poll_until(script, [&] { return s.calls().find("STOP") != std::string::npos; });
  CHECK(script.running());  // MASTER's still sleeps
  CHECK(s.calls().find("STOP 1 shutdown\n") != std::string::npos);
  poll_until(script, [&] { return !script.running(); });
  CHECK(script.counters().runs == 2);
}

TEST_CASE("RoleScript: a script that fails, or cannot run, is counted and does not hold the next",
          "[role_script]") {
  Script s;
  s.set("status", "3");
  RoleScript script(s.path.string(), 1);
  script.role_changed(Role::Backup, "start");
  poll_until(script, [&] { return !script.running(); });
  CHECK(script.counters().failures == 1);

  script.set_path((s.dir.path / "missing.sh").string());
  script.role_changed(Role::Master, "master down");
  CHECK_FALSE(script.running());
  CHECK(script.counters().failures == 2);

  script.set_path(s.path.string());
  s.clear("status");
  script.role_changed(Role::Backup, "peer better");
  poll_until(script, [&] { return !script.running(); });
  CHECK(s.calls() == "BACKUP 1 start\nBACKUP 1 peer better\n");
  CHECK(script.counters().runs == 3);
  CHECK(script.counters().failures == 2);

  // No script: nothing runs.
  script.set_path("");
  script.role_changed(Role::Master, "preempt");
  CHECK(script.counters().runs == 3);
}

// Whether process `pid` has ended (gone, or a zombie its new parent has yet to reap).
bool ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const auto state = text.rfind(") ");
  return text.empty() || (state != std::string::npos && text[state + 2] == 'Z');
}

TEST_CASE("RoleScript: a script past its time limit is killed with what it started, and the next runs",
          "[role_script]") {
  Script s;
  s.set("hang", "");
  RoleScript script(s.path.string(), 1, 200ms);
  script.role_changed(Role::Master, "master down");
  script.role_changed(Role::Backup, "better master heard");
  poll_until(script, [&] { return std::filesystem::exists(s.dir.path / "child"); });
  std::ifstream child_file(s.dir.path / "child");
  pid_t child = 0;
  child_file >> child;
  REQUIRE(child > 0);
  s.clear("hang");
  poll_until(script, [&] { return s.calls().find("BACKUP") != std::string::npos && !script.running(); });
  CHECK(s.calls() == "MASTER 1 master down\nBACKUP 1 better master heard\n");
  CHECK(script.counters().failures == 1);
  poll_until(script, [&] { return ended(child); });
  CHECK(ended(child));
}

}  // namespace
}  // namespace pairwall::failover
