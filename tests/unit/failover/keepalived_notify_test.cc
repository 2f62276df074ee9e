// packaging/keepalived/pairwall-notify.sh as keepalived runs it (vrrp_notify_fifo_script): the
// lines keepalived writes into the FIFO, and what reaches pairwalld and the log. pairwallctl and
// logger are stand-ins that record their arguments.
#include <sys/stat.h>

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

// Feeds `lines` through a FIFO to the notify script, as keepalived does, and waits until it exits.
void run_fifo(const fs::path& dir, const std::string& lines) {
  REQUIRE(::mkfifo((dir / "notify.fifo").c_str(), 0600) == 0);
  std::ofstream(dir / "lines") << lines;
  const std::string script = std::string(PAIRWALL_SOURCE_DIR) + "/packaging/keepalived/pairwall-notify.sh";
  // Each side bounded in time: a script that never opened the FIFO must fail the test, not hang it.
  write_script(dir / "run",
               "cd \"$(dirname \"$0\")\"\nPATH=\"$PWD:$PATH\" timeout 10 sh '" + script +
                   "' -c ./pairwallctl notify.fifo &\ntimeout 10 sh -c 'cat lines > notify.fifo'\n"
                   "wait\n");
  REQUIRE(std::system(("sh '" + (dir / "run").string() + "'").c_str()) == 0);
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
