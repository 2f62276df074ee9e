// NfQueue with the real engine and the real kernel, in a private network namespace: a forked
// child unshares its network namespace, hooks OUTPUT to a queue, and sends loopback traffic that
// the rule set passes, rejects with an ICMP unreachable, rejects with a TCP RST, and logs.
//
// Needs root (CAP_NET_ADMIN, CAP_NET_RAW) and iptables; without root it says so and checks nothing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/engine/engine.h"
#include "daemon/engine/rules/compile.h"
#include "daemon/engine/rules/parser.h"
#include "daemon/io/hooks.h"
#include "daemon/io/nfqueue.h"
#include "daemon/io/pcaplog.h"

namespace pairwall::io {
namespace {

namespace fs = std::filesystem;

constexpr uint16_t kQueue = 7;
constexpr uint32_t kReplyMark = 0x100;

// Rule 0 rejects UDP to port 9 with an ICMP and logs it; rule 1 resets TCP to port 10 (both
// families).
constexpr const char* kRules =
    "block return-icmp out log quick proto udp from any to any port 9\n"
    "block return-rst out quick proto tcp from any to any port 10\n"
    "pass out all\n";

// An IPv6 loopback connection attempt; returns the connect() errno (0 on success).
int connect6(uint16_t port, int& fd) {
  fd = socket(AF_INET6, SOCK_STREAM, 0);
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(port);
  a.sin6_addr = in6addr_loopback;
  return connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 ? 0 : errno;
}

void set_timeouts(int fd) {
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int bound_socket(int type, uint16_t port) {
  const int fd = socket(AF_INET, type, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return -1;
  if (type == SOCK_STREAM && listen(fd, 4) != 0) return -1;
  set_timeouts(fd);  // accept() and recv() give up too: a broken queue fails the scenario, not hangs it
  return fd;
}

int connected_socket(int type, uint16_t port, int& error) {
  const int fd = socket(AF_INET, type, 0);
  set_timeouts(fd);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  error = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 ? 0 : errno;
  return fd;
}

// Compiles `rules` into `engine`. Returns "" or what went wrong.
std::string load(engine::Engine& engine, const char* rules) {
  auto parsed = engine::rules::parse_rules(rules, "test.rules");
  if (auto* e = std::get_if<engine::rules::RuleError>(&parsed)) return "rules: " + e->to_string();
  auto compiled = engine::rules::compile(std::get<engine::rules::RuleFile>(parsed), engine.interfaces());
  if (auto* e = std::get_if<engine::rules::RuleError>(&compiled)) return "rules: " + e->to_string();
  engine.load_rules(std::get<std::shared_ptr<const engine::rules::RuleSet>>(compiled));
  return {};
}

// Runs in the child, in its own network namespace. Returns "" or what went wrong.
std::string scenario(const fs::path& dir) {
  engine::Engine engine;
  if (std::string e = load(engine, kRules); !e.empty()) return e;

  PcapLogConfig pc;
  pc.path = (dir / "pflog.pcap").string();
  pc.flush_interval = std::chrono::hours(1);
  PcapLog log(pc);

  NfQueueConfig qc;
  qc.first_queue = kQueue;
  qc.reject_config.mark = kReplyMark;
  NfQueue queues(engine, qc, &log);
  queues.start();

  HooksConfig hc;
  hc.queue_first = hc.queue_last = kQueue;
  hc.output = true;
  hc.bypass_mark = kReplyMark;
  hc.defrag = false;
  Hooks hooks(hc);
  hooks.install();

  std::string failure;
  auto expect = [&failure](bool ok, const std::string& what) {
    if (!ok && failure.empty()) failure = what;
  };

  // Passed: a TCP connection to port 11 carries data both ways.
  const int listener = bound_socket(SOCK_STREAM, 11);
  expect(listener >= 0, "bind port 11");
  int error = 0;
  const int client = connected_socket(SOCK_STREAM, 11, error);
  expect(error == 0, std::string("connect to the passed port: ") + std::strerror(error));
  const int server = accept(listener, nullptr, nullptr);
  expect(server >= 0, std::string("accept on the passed port: ") + std::strerror(errno));
  set_timeouts(server);
  std::vector<char> data(100000, 'p');
  expect(send(client, data.data(), data.size(), 0) == static_cast<ssize_t>(data.size()), "send 100 kB");
  std::size_t got = 0;
  char buf[65536];
  while (got < data.size()) {
    const ssize_t n = recv(server, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  expect(got == data.size(), "the passed connection delivered " + std::to_string(got) + " of 100000 bytes");

  // return-icmp: a UDP socket sees ECONNREFUSED although a listener is bound, so the ICMP is ours.
  const int udp_listener = bound_socket(SOCK_DGRAM, 9);
  expect(udp_listener >= 0, "bind udp 9");
  const int udp = connected_socket(SOCK_DGRAM, 9, error);
  expect(send(udp, "x", 1, 0) == 1, "udp send");
  const ssize_t udp_result = recv(udp, buf, sizeof(buf), 0);
  expect(udp_result < 0 && errno == ECONNREFUSED,
         std::string("UDP to the return-icmp port: ") + (udp_result < 0 ? std::strerror(errno) : "a reply"));

  // return-rst: connect() to a listening port fails with ECONNREFUSED (a dropped SYN would time
  // out instead).
  const int rst_listener = bound_socket(SOCK_STREAM, 10);
  expect(rst_listener >= 0, "bind port 10");
  const int refused = connected_socket(SOCK_STREAM, 10, error);
  expect(error == ECONNREFUSED, std::string("connect to the return-rst port: ") + std::strerror(error));

  // The same over IPv6: the RST leaves through the IPv6 raw socket with its header included.
  const int listener6 = socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 any6{};
  any6.sin6_family = AF_INET6;
  any6.sin6_port = htons(10);
  any6.sin6_addr = in6addr_loopback;
  expect(bind(listener6, reinterpret_cast<sockaddr*>(&any6), sizeof(any6)) == 0 && listen(listener6, 4) == 0,
         "bind [::1]:10");
  int refused6 = -1;
  const int error6 = connect6(10, refused6);
  expect(error6 == ECONNREFUSED, std::string("connect to [::1]:10: ") + std::strerror(error6));

  hooks.remove();
  queues.stop();
  for (int fd : {listener, client, server, udp_listener, udp, rst_listener, refused, listener6, refused6})
    close(fd);

  const auto& c = queues.counters(0);
  const auto* r = queues.reject_counters(0);
  expect(c.packets.get() >= 8, "packets queued: " + std::to_string(c.packets.get()));
  expect(c.dropped.get() >= 2, "dropped: " + std::to_string(c.dropped.get()));
  expect(c.accepted.get() >= 6, "accepted: " + std::to_string(c.accepted.get()));
  expect(c.send_errors.get() == 0 && c.netlink_errors.get() == 0, "verdict errors");
  expect(r != nullptr && r->icmp_sent.get() == 1, "one ICMP sent");
  expect(r != nullptr && r->rst_sent.get() == 2, "two RSTs sent, IPv4 and IPv6");

  log.flush();
  std::ifstream in(pc.path, std::ios::binary);
  std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // One record: the UDP datagram to port 9, blocked by rule 0, outbound on lo.
  expect(file.size() == kPcapFileHeaderSize + kPcapRecordHeaderSize + kPflogHeaderSize + 29,
         "pcap size " + std::to_string(file.size()));
  if (file.size() >= kPcapFileHeaderSize + kPcapRecordHeaderSize + kPflogHeaderSize) {
    const uint8_t* h = file.data() + kPcapFileHeaderSize + kPcapRecordHeaderSize;
    expect(h[2] == 1, "logged as block");
    expect(h[36] == 0 && h[37] == 0 && h[38] == 0 && h[39] == 0, "logged rule 0");
    expect(h[60] == 2, "logged outbound");
    expect(std::string(reinterpret_cast<const char*>(h + 4)) == "lo", "logged on lo");
  }
  if (!failure.empty() && r != nullptr) {
    failure += " (queued " + std::to_string(c.packets.get()) + ", dropped " +
               std::to_string(c.dropped.get()) + ", icmp sent " + std::to_string(r->icmp_sent.get()) +
               ", rst sent " + std::to_string(r->rst_sent.get()) + ", not eligible " +
               std::to_string(r->not_eligible.get()) + ", send errors " +
               std::to_string(r->send_errors.get()) + ")";
  }
  return failure;
}

// Runs `body` in a forked child (which unshares its network namespace) and returns what it
// said: "ok", or what went wrong. A child still running after 120 s is killed.
std::string run_scenario(std::string (*body)(const fs::path&)) {
  char tmpl[] = "/tmp/pairwall-nfqueue-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return std::string("mkdtemp: ") + std::strerror(errno);
  const fs::path dir = tmpl;

  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return std::string("pipe: ") + std::strerror(errno);
  const pid_t pid = fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) {
    close(pipe_fds[0]);
    std::string result;
    try {
      if (unshare(CLONE_NEWNET) != 0) {
        result = std::string("unshare: ") + std::strerror(errno);
      } else if (run_command({"ip", "link", "set", "lo", "up"}).exit_code != 0) {
        result = "cannot bring lo up";
      } else {
        result = body(dir);
      }
    } catch (const std::exception& e) {
      result = std::string("exception: ") + e.what();
    }
    if (result.empty()) result = "ok";
    [[maybe_unused]] const auto n = write(pipe_fds[1], result.data(), result.size());
    _exit(0);
  }
  close(pipe_fds[1]);
  // The child's result, or a verdict of its own after a deadline: a wedged child is killed.
  std::string result;
  char buf[1024];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{pipe_fds[0], POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      kill(pid, SIGKILL);
      result = "the scenario did not finish within 120 s: " + result;
      break;
    }
    const ssize_t n = read(pipe_fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    result.append(buf, static_cast<std::size_t>(n));
  }
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  fs::remove_all(dir);
  if (!WIFEXITED(status)) return "the scenario's child did not exit: " + result;
  return result;
}

// Whether this machine can run the kernel scenarios; says why not when it cannot.
bool kernel_scenarios_possible() {
  if (geteuid() != 0) {
    WARN("not root: the kernel scenario needs a network namespace, NFQUEUE and raw sockets");
    return false;
  }
  if (run_command({"iptables", "--version"}).exit_code != 0) {
    WARN("iptables is not installed: the kernel scenario cannot hook a queue");
    return false;
  }
  return true;
}

// UDP datagrams of 100 and 1,000 bytes over loopback through a queue that copies 300 bytes of
// each packet: the short one is judged and passed, the long one cannot be and is settled by the
// fail-open policy (here: closed), never accepted unseen.
std::string truncated_scenario(const fs::path&) {
  engine::Engine engine;
  if (std::string e = load(engine, "pass out all\n"); !e.empty()) return e;
  NfQueueConfig qc;
  qc.first_queue = kQueue;
  qc.reject = false;
  qc.queue.copy_range = 300;
  NfQueue queues(engine, qc);
  queues.start();
  HooksConfig hc;
  hc.queue_first = hc.queue_last = kQueue;
  hc.output = true;
  hc.defrag = false;
  Hooks hooks(hc);
  hooks.install();

  std::string failure;
  const int listener = bound_socket(SOCK_DGRAM, 12);
  int error = 0;
  const int sender = connected_socket(SOCK_DGRAM, 12, error);
  const std::vector<char> shorter(100, 's');
  const std::vector<char> longer(1000, 'l');
  char buf[2048];
  if (listener < 0 || error != 0) failure = "udp sockets";
  if (failure.empty() && send(sender, longer.data(), longer.size(), 0) != 1000) failure = "send 1000 bytes";
  if (failure.empty() && send(sender, shorter.data(), shorter.size(), 0) != 100) failure = "send 100 bytes";
  // The first datagram to arrive is the short one: the long one went before it and was dropped.
  const ssize_t n = failure.empty() ? recv(listener, buf, sizeof(buf), 0) : -1;
  if (failure.empty() && n != 100)
    failure = "received " + std::to_string(n) + " bytes first, not the short datagram's 100";

  hooks.remove();
  queues.stop();
  close(listener);
  close(sender);
  const auto& c = queues.counters(0);
  if (failure.empty() && (c.truncated.get() != 1 || c.uninspected.get() != 1 || c.accepted.get() != 1)) {
    failure = "truncated " + std::to_string(c.truncated.get()) + ", uninspected " +
              std::to_string(c.uninspected.get()) + ", accepted " + std::to_string(c.accepted.get()) +
              " (want 1, 1, 1)";
  }
  return failure;
}

TEST_CASE("NfQueue passes, rejects and logs real loopback traffic in a private namespace", "[kernel]") {
  if (!kernel_scenarios_possible()) return;
  CHECK(run_scenario(scenario) == "ok");
}

TEST_CASE("NfQueue settles a packet longer than its copy range by the fail-open policy", "[kernel]") {
  if (!kernel_scenarios_possible()) return;
  CHECK(run_scenario(truncated_scenario) == "ok");
}

}  // namespace
}  // namespace pairwall::io
