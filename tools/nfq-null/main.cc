// pairwall-nfq-null: accepts every queued packet through the same socket setup and verdict
// batching as pairwalld, without the engine. Its throughput is the ceiling of the NFQUEUE path
// on a machine; the difference to pairwalld is the engine's cost.
//
//   pairwall-nfq-null --queue N | --queues A:B [--no-batch] [--fail-open] [--no-gso]
//                     [--maxlen N] [--rcvbuf BYTES] [--recv-batch N] [--duration SECONDS]
//                     [--hooks [--chain NAME] [--bypass] [--exclude IF]... [--input]]
//
// --hooks installs pairwalld's iptables/ip6tables chain for the queue range (io::Hooks) once the
// queues are bound, and removes it when the listener stops.
//
// Prints "ready" on stderr once every queue is bound (and hooked), and one JSON object with the
// counters of each queue on stdout when it stops (SIGINT, SIGTERM, or after --duration).
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "daemon/io/hooks.h"
#include "daemon/io/kernel_queue_stats.h"
#include "daemon/io/nfq_socket.h"

namespace {

using pairwall::io::Decision;
using pairwall::io::NfqSocket;
using pairwall::io::QueueConfig;
using pairwall::io::QueuedPacket;

struct Options {
  uint16_t first = 0;
  uint16_t last = 0;
  bool have_queue = false;
  QueueConfig queue;
  double duration_s = 0;  // 0: until a signal
  bool hooks = false;
  pairwall::io::HooksConfig hooks_config;
};

[[noreturn]] void usage(const std::string& error) {
  if (!error.empty()) std::cerr << "pairwall-nfq-null: " << error << "\n";
  std::cerr
      << "usage: pairwall-nfq-null --queue N | --queues A:B [--no-batch] [--fail-open] [--no-gso]\n"
         "                         [--maxlen N] [--rcvbuf BYTES] [--recv-batch N] [--duration SECONDS]\n";
  std::exit(2);
}

template <typename T>
T number(std::string_view option, std::string_view text, T max) {
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value > static_cast<uint64_t>(max)) {
    usage(std::string(option) + " expects an integer from 0 to " + std::to_string(max) + ", got '" +
          std::string(text) + "'");
  }
  return static_cast<T>(value);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) usage(std::string(arg) + " needs a value");
      return argv[++i];
    };
    if (arg == "--queue") {
      o.first = o.last = number<uint16_t>(arg, value(), 65535);
      o.have_queue = true;
    } else if (arg == "--queues") {
      const std::string_view range = value();
      const auto colon = range.find(':');
      if (colon == std::string_view::npos) usage("--queues expects A:B, got '" + std::string(range) + "'");
      o.first = number<uint16_t>(arg, range.substr(0, colon), 65535);
      o.last = number<uint16_t>(arg, range.substr(colon + 1), 65535);
      if (o.last < o.first) usage("--queues A:B needs A <= B");
      o.have_queue = true;
    } else if (arg == "--no-batch") {
      o.queue.batch_verdicts = false;
    } else if (arg == "--fail-open") {
      o.queue.fail_open = true;
    } else if (arg == "--no-gso") {
      o.queue.gso = false;
    } else if (arg == "--maxlen") {
      o.queue.max_len = number<uint32_t>(arg, value(), UINT32_MAX);
    } else if (arg == "--rcvbuf") {
      o.queue.rcvbuf_bytes = number<int>(arg, value(), 1 << 30);
    } else if (arg == "--recv-batch") {
      o.queue.recv_batch = number<uint32_t>(arg, value(), 1024);
    } else if (arg == "--duration") {
      o.duration_s = number<uint32_t>(arg, value(), 86400);
    } else if (arg == "--hooks") {
      o.hooks = true;
    } else if (arg == "--chain") {
      o.hooks_config.chain = value();
    } else if (arg == "--bypass") {
      o.hooks_config.bypass = true;
    } else if (arg == "--exclude") {
      o.hooks_config.excluded_interfaces.emplace_back(value());
    } else if (arg == "--input") {
      o.hooks_config.input = true;
    } else if (arg == "--help" || arg == "-h") {
      usage("");
    } else {
      usage("unknown option '" + std::string(arg) + "'");
    }
  }
  if (!o.have_queue) usage("--queue or --queues is required");
  o.hooks_config.queue_first = o.first;
  o.hooks_config.queue_last = o.last;
  return o;
}

volatile sig_atomic_t g_quit = 0;

extern "C" void on_signal(int) {
  g_quit = 1;
}

void print_json(const std::vector<std::unique_ptr<NfqSocket>>& sockets, double seconds) {
  std::vector<pairwall::io::KernelQueueStats> kernel;
  try {
    kernel = pairwall::io::read_kernel_queue_stats();
  } catch (const std::exception&) {
  }
  // CPU time of the whole listener, user and system: the verdict syscalls are charged here too, so
  // this is the per-packet cost of the path, steadier than throughput on a loaded machine.
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double user_s = static_cast<double>(usage.ru_utime.tv_sec) + usage.ru_utime.tv_usec / 1e6;
  const double system_s = static_cast<double>(usage.ru_stime.tv_sec) + usage.ru_stime.tv_usec / 1e6;
  std::printf("{\"seconds\": %.3f, \"cpu_user_seconds\": %.3f, \"cpu_system_seconds\": %.3f, \"queues\": [",
              seconds, user_s, system_s);
  for (std::size_t i = 0; i < sockets.size(); ++i) {
    const auto& s = *sockets[i];
    const auto& c = s.counters();
    const auto k = pairwall::io::find_queue(kernel, s.queue());
    std::printf(
        "%s{\"queue\": %u, \"rcvbuf\": %d, \"rcvbuf_forced\": %s, \"batch\": %s, \"packets\": %llu, "
        "\"bytes\": %llu, \"recv_calls\": %llu, \"polls\": %llu, \"verdict_messages\": %llu, "
        "\"batch_verdicts\": %llu, \"send_calls\": %llu, \"enobufs\": %llu, \"recv_errors\": %llu, "
        "\"send_errors\": %llu, \"truncated\": %llu, \"oversize\": %llu, \"malformed\": %llu, "
        "\"netlink_errors\": %llu, \"accepted\": %llu, \"startup_repeats\": %llu, "
        "\"kernel_queue_dropped\": %llu, \"kernel_user_dropped\": %llu}",
        i == 0 ? "" : ", ", s.queue(), s.rcvbuf_bytes(), s.rcvbuf_forced() ? "true" : "false",
        s.config().batch_verdicts ? "true" : "false", static_cast<unsigned long long>(c.packets.get()),
        static_cast<unsigned long long>(c.bytes.get()), static_cast<unsigned long long>(c.recv_calls.get()),
        static_cast<unsigned long long>(c.polls.get()),
        static_cast<unsigned long long>(c.verdict_messages.get()),
        static_cast<unsigned long long>(c.batch_verdicts.get()),
        static_cast<unsigned long long>(c.send_calls.get()), static_cast<unsigned long long>(c.enobufs.get()),
        static_cast<unsigned long long>(c.recv_errors.get()),
        static_cast<unsigned long long>(c.send_errors.get()),
        static_cast<unsigned long long>(c.truncated.get()), static_cast<unsigned long long>(c.oversize.get()),
        static_cast<unsigned long long>(c.malformed.get()),
        static_cast<unsigned long long>(c.netlink_errors.get()),
        static_cast<unsigned long long>(c.accepted.get()),
        static_cast<unsigned long long>(c.startup_repeats.get()),
        static_cast<unsigned long long>(k ? k->queue_dropped : 0),
        static_cast<unsigned long long>(k ? k->user_dropped : 0));
  }
  std::printf("]}\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  std::atomic<bool> stop{false};
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::vector<std::unique_ptr<NfqSocket>> sockets;
  try {
    for (uint32_t q = options.first; q <= options.last; ++q) {
      QueueConfig config = options.queue;
      config.queue = static_cast<uint16_t>(q);
      sockets.push_back(std::make_unique<NfqSocket>(config));
    }
  } catch (const std::exception& e) {
    std::cerr << "pairwall-nfq-null: " << e.what() << "\n";
    return 1;
  }

  std::unique_ptr<pairwall::io::Hooks> hooks;
  if (options.hooks) {
    try {
      hooks = std::make_unique<pairwall::io::Hooks>(options.hooks_config);
      hooks->install();
    } catch (const std::exception& e) {
      std::cerr << "pairwall-nfq-null: " << e.what() << "\n";
      return 1;
    }
  }

  const auto started = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (auto& socket : sockets) {
    workers.emplace_back([&stop, s = socket.get()] {
      auto accept_all = [](std::span<QueuedPacket>, std::span<Decision> decisions,
                           std::chrono::steady_clock::time_point) noexcept {
        std::fill(decisions.begin(), decisions.end(), Decision::Accept);
      };
      s->run(stop, accept_all);
    });
  }
  std::cerr << "ready\n";

  // Unhook first, so that nothing is queued to workers that are about to stop.
  const auto deadline = started + std::chrono::duration<double>(options.duration_s);
  while (g_quit == 0 && (options.duration_s <= 0 || std::chrono::steady_clock::now() < deadline)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int status = 0;
  if (hooks) {
    try {
      hooks->remove();
    } catch (const std::exception& e) {
      std::cerr << "pairwall-nfq-null: " << e.what() << "\n";
      status = 1;
    }
  }
  stop.store(true);
  for (auto& w : workers) w.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  print_json(sockets, seconds);
  return status;
}
