// pairwallctl as an operator runs it: the built binary against a control server on a temporary
// socket, which records what reached it.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/control/framing.h"
#include "daemon/control/server.h"

using namespace pairwall::control;

namespace {

struct Run {
  int status = -1;     // the exit status
  std::string output;  // standard output and error
};

// `input` is its standard input, whole (it fits in a pipe's buffer), or with `stdin_path` that
// file; with `stdout_path`, standard output goes to that file and `output` holds standard error alone.
Run run_ctl(const std::vector<std::string>& args, const std::string& input = {},
            const char* stdout_path = nullptr, const char* stdin_path = nullptr) {
  int pipe_fds[2];
  int input_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  REQUIRE(::pipe(input_fds) == 0);
  REQUIRE(::write(input_fds[1], input.data(), input.size()) == static_cast<ssize_t>(input.size()));
  ::close(input_fds[1]);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(stdin_path != nullptr ? ::open(stdin_path, O_RDONLY) : input_fds[0], STDIN_FILENO);
    ::dup2(stdout_path != nullptr ? ::open(stdout_path, O_WRONLY) : pipe_fds[1], STDOUT_FILENO);
    ::dup2(pipe_fds[1], STDERR_FILENO);
    ::close(input_fds[0]);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    std::vector<char*> argv{const_cast<char*>(PAIRWALLCTL)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(PAIRWALLCTL, argv.data());
    ::_exit(127);
  }
  ::close(input_fds[0]);
  ::close(pipe_fds[1]);
  Run run;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0) break;
    run.output.append(buf, static_cast<std::size_t>(n));
  }
  ::close(pipe_fds[0]);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  run.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
  return run;
}

// A control server that answers every request with ok and counts them.
struct Daemon {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pairwall-ctl-cli-test-" + std::to_string(getpid()));
  std::string path = (dir / "control.sock").string();
  boost::asio::io_context io;
  std::unique_ptr<ControlServer> server;
  std::thread thread;
  std::mutex mutex;
  std::vector<Request> recorded;

  Daemon() {
    std::filesystem::remove_all(dir);
    server = std::make_unique<ControlServer>(io, path, 0600, [this](const Request& req, Response& resp) {
      std::lock_guard lock(mutex);
      recorded.push_back(req);
      resp.set_version(kControlProtocolVersion);
      resp.set_ok(true);
    });
    server->start();
    thread = std::thread([this] { io.run(); });
  }
  // A copy of what the server's thread recorded, taken once pairwallctl has exited. The socket
  // already orders the two threads; the lock says so to a race detector, which does not see
  // through sockets.
  std::vector<Request> requests() {
    std::lock_guard lock(mutex);
    return recorded;
  }
  ~Daemon() {
    boost::asio::post(io, [this] { server->stop(); });
    io.stop();
    thread.join();
    server.reset();
    std::filesystem::remove_all(dir);
  }
};

}  // namespace

// pfctl -t NAME -T show -v and -T zero [ADDR...].
TEST_CASE("pairwallctl: tables show NAME -v asks for the entries' counters, tables zero clears them",
          "[ctl]") {
  Daemon d;
  CHECK(run_ctl({"-s", d.path, "tables", "show", "bad", "-v"}).status == 0);
  CHECK(run_ctl({"-s", d.path, "tables", "show", "bad"}).status == 0);
  CHECK(run_ctl({"-s", d.path, "tables", "zero", "bad", "10.0.0.0/8", "!10.0.0.9"}).status == 0);
  const std::vector<Request> requests = d.requests();
  REQUIRE(requests.size() == 3);
  CHECK(requests[0].tables().name() == "bad");
  CHECK(requests[0].tables().verbose());
  CHECK_FALSE(requests[1].tables().verbose());
  CHECK(requests[2].table_edit().name() == "bad");
  CHECK(requests[2].table_edit().op() == pairwall::control::TableEdit::ZERO);
  const auto& named = requests[2].table_edit().addresses();
  CHECK(std::vector<std::string>(named.begin(), named.end()) ==
        std::vector<std::string>{"10.0.0.0/8", "!10.0.0.9"});

  const Run misplaced = run_ctl({"-s", d.path, "tables", "-v"});
  CHECK(misplaced.status == 2);
  CHECK(misplaced.output.substr(0, misplaced.output.find('\n')) ==
        "pairwallctl: -v goes with 'tables show NAME'");
  const Run unnamed = run_ctl({"-s", d.path, "tables", "zero"});
  CHECK(unnamed.status == 2);
  CHECK(unnamed.output.substr(0, unnamed.output.find('\n')) == "pairwallctl: tables zero: name the table");
  CHECK(d.requests().size() == 3);
}

// A directory opens like a file and reads as nothing: sent on, `tables replace` would empty the
// table.
TEST_CASE("pairwallctl: -f naming what cannot be read sends nothing", "[ctl]") {
  Daemon d;
  const std::string feed = (d.dir / "feed").string();
  std::filesystem::create_directories(feed);
  for (const std::string op : {"replace", "add", "delete"}) {
    INFO(op);
    const Run r = run_ctl({"-s", d.path, "tables", op, "blocked", "-f", feed});
    CHECK(r.status == 2);
    CHECK(r.output == "pairwallctl: -f " + feed + ": Is a directory\n");
  }
  CHECK(d.requests().empty());

  // A readable file still goes through.
  std::ofstream(feed + ".txt") << "192.0.2.1 # one\n198.51.100.0/24\n";
  const Run ok = run_ctl({"-s", d.path, "tables", "replace", "blocked", "-f", feed + ".txt"});
  CHECK(ok.status == 0);
  REQUIRE(d.requests().size() == 1);
  CHECK(d.requests()[0].table_edit().addresses_size() == 2);
}

// A feed piped in, as `fetch-feed | pfctl -t feed -T replace -f -` (pfr_buf_load() reads
// standard input for "-").
TEST_CASE("pairwallctl: tables -f - reads the addresses from standard input", "[ctl]") {
  Daemon d;
  const Run ok = run_ctl({"-s", d.path, "tables", "replace", "feed", "-f", "-"},
                         "192.0.2.1 # one\n!198.51.100.7\n2001:db8::/32\n");
  CHECK(ok.status == 0);
  REQUIRE(d.requests().size() == 1);
  const std::vector<Request> requests = d.requests();
  const auto& sent = requests[0].table_edit().addresses();
  CHECK(std::vector<std::string>(sent.begin(), sent.end()) ==
        std::vector<std::string>{"192.0.2.1/32", "!198.51.100.7/32", "2001:db8::/32"});

  // A bad entry is named by its line and column in standard input, and nothing is sent.
  const Run bad = run_ctl({"-s", d.path, "tables", "add", "feed", "-f", "-"}, "192.0.2.1\n  example.com\n");
  CHECK(bad.status == 2);
  CHECK(bad.output ==
        "pairwallctl: (standard input):2:3: expected an address or prefix (e.g. 10.0.0.1, 2001:db8::/32, "
        "!10.0.0.0/8), got 'example.com'\n");
  CHECK(d.requests().size() == 1);
}

// pfctl -t NAME -T test -f FILE: the addresses to test from a file (a log's list of sources).
TEST_CASE("pairwallctl: tables test -f FILE tests the addresses of the file", "[ctl]") {
  Daemon d;
  const Run tested = run_ctl({"-s", d.path, "tables", "test", "blocked", "-f", "-"},
                             "192.0.2.1 # a source\n2001:db8::7\n192.0.2.2/32\n");
  // The fake daemon matches none of them: a miss, 2.
  CHECK(tested.status == 2);
  REQUIRE(d.requests().size() == 1);
  const std::vector<Request> requests = d.requests();
  const auto& sent = requests[0].tables().test();
  CHECK(std::vector<std::string>(sent.begin(), sent.end()) ==
        std::vector<std::string>{"192.0.2.1", "2001:db8::7", "192.0.2.2"});
  CHECK(d.requests()[0].tables().name() == "blocked");

  const Run both =
      run_ctl({"-s", d.path, "tables", "test", "blocked", "192.0.2.9", "-f", "-"}, "192.0.2.1\n");
  CHECK(both.status == 2);
  CHECK(both.output.substr(0, both.output.find('\n')) ==
        "pairwallctl: tables test: addresses or -f FILE, not both");
  const Run none = run_ctl({"-s", d.path, "tables", "test", "blocked", "-f", "-"}, "# nothing today\n");
  CHECK(none.status == 2);
  CHECK(none.output == "pairwallctl: tables test: -f -: no address\n");
  CHECK(d.requests().size() == 1);
}

// A directory opens like a file and reads as nothing: taken for empty rules, `anchors load NAME -f -
// < DIR` emptied the anchor.
TEST_CASE("pairwallctl: -f - that cannot be read sends nothing", "[ctl]") {
  Daemon d;
  const std::string dir = d.dir.string();
  for (const std::vector<std::string>& words : {std::vector<std::string>{"anchors", "load", "web"},
                                                std::vector<std::string>{"tables", "replace", "feed"}}) {
    INFO(words[0]);
    std::vector<std::string> args{"-s", d.path};
    args.insert(args.end(), words.begin(), words.end());
    args.insert(args.end(), {"-f", "-"});
    const Run r = run_ctl(args, {}, nullptr, dir.c_str());
    CHECK(r.status == 2);
    CHECK(r.output == "pairwallctl: -f -: Is a directory\n");
  }
  CHECK(d.requests().empty());
  const Run ok = run_ctl({"-s", d.path, "anchors", "load", "web", "-f", "-"}, "pass in all\n");
  CHECK(ok.status == 0);
  REQUIRE(d.requests().size() == 1);
  CHECK(d.requests()[0].anchor_load().text() == "pass in all\n");
  CHECK(d.requests()[0].anchor_load().path() == "(standard input)");
}

// `pairwallctl states --json > file` on a full disk: a script must not take a cut-off answer for a
// whole one.
TEST_CASE("pairwallctl: output it cannot write is an error, exit 1", "[ctl]") {
  Daemon d;
  const Run full = run_ctl({"-s", d.path, "--json", "states"}, {}, "/dev/full");
  CHECK(full.status == 1);
  CHECK(full.output == "pairwallctl: cannot write the output: No space left on device\n");
  CHECK(run_ctl({"-s", d.path, "states"}, {}, "/dev/null").status == 0);
  // A health check's status is its answer: a full disk is not a failing firewall.
  CHECK(run_ctl({"-s", d.path, "health"}, {}, "/dev/full").status == 0);
  CHECK(run_ctl({"-s", d.path, "tables", "test", "t", "192.0.2.1"}, {}, "/dev/full").status == 2);
}

// Relative to the daemon's directory (/ under systemd), "pf.conf" is another file, which may exist.
TEST_CASE("pairwallctl: rules load sends an absolute path, even for a file it cannot find", "[ctl]") {
  Daemon d;
  const std::string cwd = std::filesystem::current_path().string();
  REQUIRE(run_ctl({"-s", d.path, "rules", "load", "no/such-pf.conf"}).status == 0);
  REQUIRE(run_ctl({"-s", d.path, "rules", "load", "/nonexistent/pf.conf"}).status == 0);
  REQUIRE(d.requests().size() == 2);
  CHECK(d.requests()[0].rules_load().path() == cwd + "/no/such-pf.conf");
  CHECK(d.requests()[1].rules_load().path() == "/nonexistent/pf.conf");
}

TEST_CASE("pairwallctl: label, from and to go with the other terms of a state filter", "[ctl]") {
  Daemon d;
  REQUIRE(run_ctl({"-s", d.path, "states", "kill", "label", "web", "proto", "udp"}).status == 0);
  REQUIRE(d.requests().size() == 1);
  const std::vector<Request> killed = d.requests();
  const auto& f = killed[0].kill_states().filter();
  CHECK(f.label() == "web");
  CHECK(f.proto() == 17);
  CHECK(f.address().empty());
  REQUIRE(run_ctl({"-s", d.path, "states", "from", "10.0.0.1", "to", "10.9.0.0/16", "port", "80"}).status ==
          0);
  REQUIRE(d.requests().size() == 2);
  const std::vector<Request> listed = d.requests();
  const auto& g = listed[1].states().filter();
  CHECK(g.from() == "10.0.0.1");
  CHECK(g.to() == "10.9.0.0/16");
  CHECK(g.port() == 80);
  CHECK(g.address().empty());
  REQUIRE(run_ctl({"-s", d.path, "states", "kill", "on", "wan0"}).status == 0);
  REQUIRE(d.requests().size() == 3);
  CHECK(d.requests()[2].kill_states().filter().interface() == "wan0");
}

TEST_CASE("pairwallctl: rules zero sends RulesZero, with at most one anchor", "[ctl]") {
  Daemon d;
  REQUIRE(run_ctl({"-s", d.path, "rules", "zero"}).status == 0);
  REQUIRE(run_ctl({"-s", d.path, "rules", "zero", "ssh/guard"}).status == 0);
  REQUIRE(d.requests().size() == 2);
  CHECK(d.requests()[0].has_rules_zero());
  CHECK(d.requests()[0].rules_zero().anchor().empty());
  CHECK(d.requests()[1].rules_zero().anchor() == "ssh/guard");
  CHECK(run_ctl({"-s", d.path, "rules", "zero", "a", "b"}).status == 2);
  CHECK(d.requests().size() == 2);
}

TEST_CASE("pairwallctl: reload sends the Reload request and takes no arguments", "[ctl]") {
  Daemon d;
  REQUIRE(run_ctl({"-s", d.path, "reload"}).status == 0);
  REQUIRE(d.requests().size() == 1);
  CHECK(d.requests()[0].has_reload());
  CHECK(run_ctl({"-s", d.path, "reload", "pf.conf"}).status != 0);
  CHECK(d.requests().size() == 1);
}

TEST_CASE("pairwallctl: sources kill names one address or prefix, flush sources none", "[ctl]") {
  Daemon d;
  REQUIRE(run_ctl({"-s", d.path, "sources", "kill", "10.0.1.0/24"}).status == 0);
  REQUIRE(run_ctl({"-s", d.path, "flush", "sources"}).status == 0);
  REQUIRE(d.requests().size() == 2);
  REQUIRE(d.requests()[0].has_kill_sources());
  CHECK(d.requests()[0].kill_sources().address() == "10.0.1.0/24");
  REQUIRE(d.requests()[1].has_kill_sources());
  CHECK(d.requests()[1].kill_sources().address().empty());
  // Killing every node takes the explicit command: a forgotten address does not mean all.
  const Run none = run_ctl({"-s", d.path, "sources", "kill"});
  CHECK(none.status == 2);
  CHECK(none.output.find("sources kill: name one ADDRESS or PREFIX (every node: flush sources)") !=
        std::string::npos);
  CHECK(run_ctl({"-s", d.path, "sources", "kill", "10.0.0.1", "10.0.0.2"}).status == 2);
  CHECK(run_ctl({"-s", d.path, "--limit", "5", "sources", "kill", "10.0.0.1"}).status == 2);
  CHECK(d.requests().size() == 2);
}

// A filter holds one port, one proto, one id: a second would replace the first unseen, and the
// operator would kill or list other states than the ones written.
TEST_CASE("pairwallctl: a state filter's term given twice is refused, nothing sent", "[ctl]") {
  Daemon d;
  struct Case {
    std::vector<std::string> args;
    std::string first_line;
  };
  const std::vector<Case> cases = {
      {{"states", "port", "80", "port", "81"},
       "pairwallctl: states: 'port' given twice (a filter takes one of each)"},
      {{"states", "kill", "proto", "tcp", "10.0.0.1", "proto", "udp"},
       "pairwallctl: states kill: 'proto' given twice (a filter takes one of each)"},
      {{"states", "id", "1:2", "id", "1:3"},
       "pairwallctl: states: 'id' given twice (a filter takes one of each)"},
      {{"states", "label", "web", "label", "ssh"},
       "pairwallctl: states: 'label' given twice (a filter takes one of each)"},
      {{"states", "kill", "label", ""}, "pairwallctl: states kill: label: name one"},
      {{"states", "from", "10.0.0.1", "from", "10.0.0.2"},
       "pairwallctl: states: 'from' given twice (a filter takes one of each)"},
      {{"states", "kill", "to"},
       "pairwallctl: states kill: unexpected 'to' (filter: ADDRESS, port N, proto P, id C:N, label NAME, "
       "from ADDRESS, to ADDRESS, on IF)"},
      {{"states", "on", "lan0", "on", "wan0"},
       "pairwallctl: states: 'on' given twice (a filter takes one of each)"},
      {{"states", "port", "0"}, "pairwallctl: port: expected a number 1..65535, got '0'"},
      {{"states", "port", "http"}, "pairwallctl: port: expected a number 1..65535, got 'http'"},
  };
  for (const Case& c : cases) {
    INFO(c.args[0] << " " << c.args[1] << " " << c.args[2]);
    std::vector<std::string> args{"-s", d.path};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const Run r = run_ctl(args);
    CHECK(r.status == 2);
    CHECK(r.output.substr(0, r.output.find('\n')) == c.first_line);
  }
  CHECK(d.requests().empty());
  REQUIRE(run_ctl({"-s", d.path, "states", "port", "80", "proto", "tcp", "10.0.0.1"}).status == 0);
  REQUIRE(d.requests().size() == 1);
  CHECK(d.requests()[0].states().filter().port() == 80);
}
