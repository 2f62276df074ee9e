// packaging/keepalived/pairwall-notify.sh as keepalived runs it (vrrp_notify_fifo_script): the
// lines keepalived writes into the FIFO, and what reaches pairwalld and the log. pairwallctl and
// logger are stand-ins that record their arguments.
#include <sys/stat.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/unit/support/temp_dir.h"

namespace fs = std::filesystem;

namespace {

void write_script(const fs::path& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body;
  fs::permissions(path, fs::perms::owner_all);
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

const std::string kScript = std::string(PAIRWALL_SOURCE_DIR) + "/packaging/keepalived/pairwall-notify.sh";

// Feeds `lines` through a FIFO to the notify script, run with `options`, as keepalived does, and
// waits until it exits. With `hold_until`, the FIFO stays open after the lines until that file is
// not empty (at most 5 s): what the script starts in the background has then run, before the end
// of its input makes it exit.
void run_fifo(const fs::path& dir, const std::string& lines, const std::string& options = "",
              const std::string& hold_until = "") {
  REQUIRE(::mkfifo((dir / "notify.fifo").c_str(), 0600) == 0);
  std::ofstream(dir / "lines") << lines;
  const std::string hold = hold_until.empty() ? ""
                                              : "; i=0; while [ ! -s " + hold_until +
                                                    " ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done";
  // Each side bounded in time: a script that never opened the FIFO must fail the test, not hang it.
  write_script(dir / "run", "cd \"$(dirname \"$0\")\"\nPATH=\"$PWD:$PATH\" timeout 10 sh '" + kScript + "' " +
                                options + " -c ./pairwallctl notify.fifo &\ntimeout 10 sh -c '(cat lines" +
                                hold +
                                ") > notify.fifo'\n"
                                "wait\n");
  REQUIRE(std::system(("sh '" + (dir / "run").string() + "'").c_str()) == 0);
}

// Runs the notify script once with `args`, as keepalived runs a per-instance `notify` script.
void run_notify(const fs::path& dir, const std::string& args) {
  REQUIRE(std::system(("cd '" + dir.string() + "' && PATH=\"$PWD:$PATH\" timeout 10 sh '" + kScript +
                       "' -c ./pairwallctl " + args)
                          .c_str()) == 0);
}

// The track file the shipped configurations name, and that they track it in every instance.
const std::string kTrackFile = "/run/keepalived-pairwall-demotion";

void check_tracks_the_file(const std::string& conf) {
  CHECK(conf.find("track_file pairwall_demotion {\n  file \"" + kTrackFile + "\"\n  weight -1\n") !=
        std::string::npos);
  std::size_t instances = 0;
  for (std::size_t at = conf.find("\nvrrp_instance "); at != std::string::npos;
       at = conf.find("\nvrrp_instance ", at + 1))
    ++instances;
  std::size_t tracking = 0;
  for (std::size_t at = conf.find("  track_file {\n    pairwall_demotion\n"); at != std::string::npos;
       at = conf.find("  track_file {\n    pairwall_demotion\n", at + 1))
    ++tracking;
  CHECK(instances > 0);
  CHECK(tracking == instances);
}

}  // namespace

TEST_CASE("keepalived notify: events within a state tell pairwalld nothing and log nothing", "[keepalived]") {
  pairwall::test::TempDir dir("keepalived-notify");
  write_script(dir.path / "pairwallctl", "echo \"$*\" >> \"$(dirname \"$0\")/ctl.log\"\n");
  write_script(dir.path / "logger", "echo \"$*\" >> \"$(dirname \"$0\")/logger.log\"\n");
  run_fifo(dir.path,
           "INSTANCE \"pairwall\" MASTER 100\n"
           // A master hearing a lower priority (the other side of a healed partition) and a
           // tracked script moving the priority: the role stays as it is.
           "INSTANCE \"pairwall\" MASTER_RX_LOWER_PRI 100\n"
           "INSTANCE \"pairwall\" MASTER_PRIORITY 50\n"
           "INSTANCE \"pairwall\" BACKUP_PRIORITY 50\n"
           "INSTANCE \"pairwall\" BACKUP 50\n"
           "INSTANCE \"pairwall\" FAULT 50\n");
  CHECK(read_all(dir.path / "ctl.log") ==
        "failover set-role master\nfailover set-role backup\nfailover set-role fault\n");
  CHECK(read_all(dir.path / "logger.log").empty());
}

TEST_CASE("keepalived notify: changes of other instances and of sync groups leave the role alone",
          "[keepalived]") {
  pairwall::test::TempDir dir("keepalived-notify");
  write_script(dir.path / "pairwallctl", "echo \"$*\" >> \"$(dirname \"$0\")/ctl.log\"\n");
  write_script(dir.path / "logger", "echo \"$*\" >> \"$(dirname \"$0\")/logger.log\"\n");
  // keepalived writes every instance's and group's changes into the one vrrp_notify_fifo.
  run_fifo(dir.path,
           "INSTANCE \"pairwall\" BACKUP 100\n"
           "INSTANCE \"dmz\" MASTER 200\n"
           "GROUP \"edge\" MASTER\n"
           "INSTANCE \"pairwall\" MASTER 100\n"
           "INSTANCE \"dmz\" FAULT 200\n"
           "INSTANCE \"dmz\" BACKUP 200\n",
           "-i pairwall");
  CHECK(read_all(dir.path / "ctl.log") == "failover set-role backup\nfailover set-role master\n");
  // Once per name, so that an -i naming no instance shows in the log; a group's with the way to
  // follow it.
  CHECK(read_all(dir.path / "logger.log") ==
        "-t pairwall-notify keepalived INSTANCE dmz is not instance pairwall (-i): its changes are not "
        "passed on\n"
        "-t pairwall-notify keepalived GROUP edge is not instance pairwall (-i): its changes are not passed "
        "on; if pairwalld's VIPs are instances of this sync group, follow the group (-g edge)\n");

  // The same as a per-instance `notify` script.
  fs::remove(dir.path / "ctl.log");
  run_notify(dir.path, "-i pairwall INSTANCE dmz MASTER 200");
  run_notify(dir.path, "-i pairwall GROUP pairwall FAULT 100");
  CHECK_FALSE(fs::exists(dir.path / "ctl.log"));
  run_notify(dir.path, "-i pairwall INSTANCE pairwall FAULT 100");
  CHECK(read_all(dir.path / "ctl.log") == "failover set-role fault\n");
}

// A firewall's VIPs are often instances of one vrrp_sync_group (one per link), whose state is the
// one that holds all of them: -g follows the group's lines, and its instances' leave the role alone
// (keepalived's later sources leave out an instance's line when the group made the change).
TEST_CASE("keepalived notify: -g follows a sync group, whose instances' lines leave the role alone",
          "[keepalived]") {
  pairwall::test::TempDir dir("keepalived-notify");
  write_script(dir.path / "pairwallctl", "echo \"$*\" >> \"$(dirname \"$0\")/ctl.log\"\n");
  write_script(dir.path / "logger", "echo \"$*\" >> \"$(dirname \"$0\")/logger.log\"\n");
  // keepalived's lines for a group of two instances, outside and inside, that goes master and back,
  // then stops (vrrp_notify.c: the instances' STOP lines first, then the group's).
  run_fifo(dir.path,
           "INSTANCE \"outside\" BACKUP 100\n"
           "INSTANCE \"inside\" BACKUP 100\n"
           "GROUP \"fw\" BACKUP 0\n"
           "GROUP \"fw\" MASTER 0\n"
           "GROUP \"fw\" BACKUP 0\n"
           "GROUP \"other\" MASTER 0\n"
           "INSTANCE \"outside\" STOP 100\n"
           "INSTANCE \"inside\" STOP 100\n"
           "GROUP \"fw\" STOP 0\n",
           "-g fw");
  CHECK(read_all(dir.path / "ctl.log") ==
        "failover set-role backup\nfailover set-role master\nfailover set-role backup\n"
        "failover set-role backup\n");
  // The group's instances say nothing amiss; another group's name is logged once.
  CHECK(read_all(dir.path / "logger.log") ==
        "-t pairwall-notify keepalived GROUP other is not group fw (-g): its changes are not passed on\n");

  // The same as a group's `notify` script.
  fs::remove(dir.path / "ctl.log");
  run_notify(dir.path, "-g fw INSTANCE outside MASTER 100");
  CHECK_FALSE(fs::exists(dir.path / "ctl.log"));
  run_notify(dir.path, "-g fw GROUP fw FAULT 0");
  CHECK(read_all(dir.path / "ctl.log") == "failover set-role fault\n");
  // pairwalld follows one: an instance or a group.
  CHECK(std::system(("cd '" + dir.path.string() + "' && PATH=\"$PWD:$PATH\" sh '" + kScript +
                     "' -c ./pairwallctl -i outside -g fw GROUP fw MASTER 0 2>/dev/null")
                        .c_str()) != 0);
  CHECK(read_all(dir.path / "ctl.log") == "failover set-role fault\n");
}

TEST_CASE("keepalived notify: the shipped keepalived.conf follows its own vrrp_instance", "[keepalived]") {
  const std::string conf = read_all(fs::path(PAIRWALL_SOURCE_DIR) / "packaging/keepalived/keepalived.conf");
  const std::string instance_key = "\nvrrp_instance ";
  const std::size_t at = conf.find(instance_key);
  REQUIRE(at != std::string::npos);
  const std::size_t name_at = at + instance_key.size();
  const std::string instance = conf.substr(name_at, conf.find(' ', name_at) - name_at);
  // Exactly one instance: the script follows one.
  CHECK(conf.find(instance_key, name_at) == std::string::npos);
  CHECK(conf.find("vrrp_notify_fifo_script \"/usr/lib/pairwall/pairwall-notify.sh -i " + instance + " -t " +
                  kTrackFile + "\"") != std::string::npos);
  check_tracks_the_file(conf);
}

TEST_CASE("keepalived notify: the shipped keepalived-sync-group.conf follows its own sync group",
          "[keepalived]") {
  const std::string conf =
      read_all(fs::path(PAIRWALL_SOURCE_DIR) / "packaging/keepalived/keepalived-sync-group.conf");
  const std::string group_key = "\nvrrp_sync_group ";
  const std::size_t at = conf.find(group_key);
  REQUIRE(at != std::string::npos);
  const std::size_t name_at = at + group_key.size();
  const std::string group = conf.substr(name_at, conf.find(' ', name_at) - name_at);
  CHECK(conf.find(group_key, name_at) == std::string::npos);
  CHECK(conf.find("vrrp_notify_fifo_script \"/usr/lib/pairwall/pairwall-notify.sh -g " + group + " -t " +
                  kTrackFile + "\"") != std::string::npos);
  CHECK(conf.find("sync_group_tracking_weight") != std::string::npos);
  check_tracks_the_file(conf);
}

TEST_CASE("keepalived notify: a keepalived stopping says STOP after its SIGTERM, and pairwalld hears it",
          "[keepalived]") {
  pairwall::test::TempDir dir("keepalived-notify");
  write_script(dir.path / "pairwallctl", "echo \"$*\" >> \"$(dirname \"$0\")/ctl.log\"\n");
  write_script(dir.path / "logger", "echo \"$*\" >> \"$(dirname \"$0\")/logger.log\"\n");
  REQUIRE(::mkfifo((dir.path / "notify.fifo").c_str(), 0600) == 0);
  // keepalived's shutdown (vrrp_terminate_phase1): SIGTERM to its scripts, the FIFO script among
  // them, then a STOP line per instance, then about a second later the FIFO closes. The script is
  // killed if it has not exited by then: it must exit after its instance's STOP, the FIFO still open.
  write_script(dir.path / "run",
               "cd \"$(dirname \"$0\")\"\n"
               "PATH=\"$PWD:$PATH\" timeout -s KILL 5 sh '" +
                   kScript +
                   "' -c ./pairwallctl notify.fifo &\n"
                   "pid=$!\n"
                   "exec 3>notify.fifo\n"
                   "echo 'INSTANCE \"pairwall\" MASTER 100' >&3\n"
                   "i=0; while [ ! -s ctl.log ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done\n"
                   "kill -TERM $pid\n"
                   "sleep 0.2\n"
                   "(echo 'INSTANCE \"pairwall\" STOP 100' >&3) 2>/dev/null\n"
                   "wait $pid\n"
                   "echo $? > status\n"
                   "exec 3>&-\n");
  REQUIRE(std::system(("timeout 20 sh '" + (dir.path / "run").string() + "'").c_str()) == 0);
  CHECK(read_all(dir.path / "ctl.log") == "failover set-role master\nfailover set-role backup\n");
  CHECK(read_all(dir.path / "status") == "0\n");
}

TEST_CASE("keepalived notify: a pairwalld not answering holds later changes up for seconds, not minutes",
          "[keepalived]") {
  pairwall::test::TempDir dir("keepalived-notify");
  // A daemon that accepts and never answers: pairwallctl would wait 30 s for each of the tries.
  write_script(dir.path / "pairwallctl",
               "echo \"$*\" >> \"$(dirname \"$0\")/ctl.log\"\n"
               "case \"$*\" in *master*) exec sleep 60 ;; esac\n");
  write_script(dir.path / "logger", "echo \"$*\" >> \"$(dirname \"$0\")/logger.log\"\n");
  REQUIRE(::mkfifo((dir.path / "notify.fifo").c_str(), 0600) == 0);
  std::ofstream(dir.path / "lines") << "INSTANCE \"pairwall\" MASTER 100\n"
                                       "INSTANCE \"pairwall\" BACKUP 100\n";
  // The script ignores TERM (keepalived's shutdown): only KILL bounds the test.
  write_script(
      dir.path / "run",
      "cd \"$(dirname \"$0\")\"\nPATH=\"$PWD:$PATH\" timeout -s KILL 15 sh '" + kScript +
          "' -c ./pairwallctl notify.fifo 2>stderr &\npid=$!\ntimeout 10 sh -c 'cat lines > notify.fifo'\n"
          "wait $pid\necho $? > status\n");
  REQUIRE(std::system(("sh '" + (dir.path / "run").string() + "'").c_str()) == 0);
  CHECK(read_all(dir.path / "status") == "0\n");
  const std::string ctl = read_all(dir.path / "ctl.log");
  CHECK(ctl.find("failover set-role master\n") == 0);
  CHECK(ctl.substr(ctl.rfind("failover set-role ")) == "failover set-role backup\n");
  CHECK(read_all(dir.path / "logger.log") ==
        "-t pairwall-notify keepalived instance pairwall is MASTER but pairwalld was not told: no answer "
        "within 2 s\n");
}

// keepalived sends its scripts' output to /dev/null: a script it runs with the wrong arguments (a
// notify_master line, which passes none, a FIFO path that is no FIFO) must say so in the log.
TEST_CASE("keepalived notify: a wrong invocation is logged, not only written to stderr", "[keepalived]") {
  pairwall::test::TempDir dir("keepalived-notify");
  write_script(dir.path / "pairwallctl", "echo \"$*\" >> \"$(dirname \"$0\")/ctl.log\"\n");
  write_script(dir.path / "logger", "echo \"$*\" >> \"$(dirname \"$0\")/logger.log\"\n");
  std::ofstream(dir.path / "not-a-fifo") << "";
  const auto run = [&](const std::string& args) {
    fs::remove(dir.path / "logger.log");
    const int status = std::system(("cd '" + dir.path.string() + "' && PATH=\"$PWD:$PATH\" timeout 10 sh '" +
                                    kScript + "' -c ./pairwallctl " + args + " 2>/dev/null")
                                       .c_str());
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 2);
    return read_all(dir.path / "logger.log");
  };
  const std::string usage =
      "usage: " + kScript +
      " [-i INSTANCE | -g GROUP] [-s SOCKET] [-c PAIRWALLCTL] [-t FILE] FIFO | TYPE NAME STATE PRIORITY";
  CHECK(run("") ==
        "-t pairwall-notify called with no arguments (notify_master and its kind pass none: use "
        "notify or vrrp_notify_fifo_script); " +
            usage + "\n");
  CHECK(run("not-a-fifo") == "-t pairwall-notify not-a-fifo is not a FIFO; " + usage + "\n");
  CHECK(run("INSTANCE pairwall") ==
        "-t pairwall-notify called with 2 arguments (INSTANCE pairwall); " + usage + "\n");
  CHECK(run("-x INSTANCE pairwall MASTER 100") == "-t pairwall-notify unknown option; " + usage + "\n");
  CHECK(run("-t demotion INSTANCE pairwall MASTER 100") ==
        "-t pairwall-notify -t goes with a FIFO (vrrp_notify_fifo_script); " + usage + "\n");
  CHECK_FALSE(fs::exists(dir.path / "ctl.log"));
}

// The track file's keeper runs for as long as the script does: started before the first line,
// gone when the script exits.
TEST_CASE("keepalived notify: -t keeps pairwallctl failover track-file running while the script runs",
          "[keepalived]") {
  pairwall::test::TempDir dir("keepalived-notify");
  // The stand-in notes its start and its pid, and otherwise waits as the real one does.
  write_script(dir.path / "pairwallctl",
               "cd \"$(dirname \"$0\")\"\n"
               "case \"$*\" in *track-file*) echo \"$*\" >> tracker.log; echo $$ > tracker.pid; exec sleep "
               "60 ;; esac\n"
               "echo \"$*\" >> ctl.log\n");
  write_script(dir.path / "logger", "echo \"$*\" >> \"$(dirname \"$0\")/logger.log\"\n");
  run_fifo(dir.path, "INSTANCE \"pairwall\" MASTER 100\n", "-s ctl.sock -t demotion", "tracker.pid");
  CHECK(read_all(dir.path / "tracker.log") == "-s ctl.sock failover track-file demotion\n");
  CHECK(read_all(dir.path / "ctl.log") == "-s ctl.sock failover set-role master\n");
  std::string pid = read_all(dir.path / "tracker.pid");
  pid = pid.substr(0, pid.find('\n'));
  REQUIRE_FALSE(pid.empty());
  // Gone with the script (the stand-in has no parent-death signal: the script's own kill).
  CHECK(std::system(("i=0; while kill -0 " + pid +
                     " 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done; "
                     "! kill -0 " +
                     pid + " 2>/dev/null")
                        .c_str()) == 0);
}
