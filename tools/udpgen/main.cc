// pairwall-udpgen: a bounded UDP packet generator and sink for throughput and latency
// measurements through a firewall. sendmmsg/recvmmsg in batches, many flows (source addresses x
// source ports), each datagram carrying its sequence number and send time (CLOCK_MONOTONIC is
// shared by every network namespace on the host, so one-way latency is measurable).
//
//   pairwall-udpgen send --dst ADDR --port P [--src ADDR[,ADDR...]] [--flows N] [--size BYTES]
//                        [--rate PPS] --duration SECONDS
//   pairwall-udpgen recv --port P --duration SECONDS [--idle SECONDS]
//
// Both print one JSON object when done. `send` never exceeds --duration; `recv` stops after
// --duration or after --idle seconds without a packet once traffic has started.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int kBatch = 64;
constexpr std::size_t kMaxSize = 1472;

struct Payload {
  uint64_t sequence;
  uint64_t sent_ns;
};

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "pairwall-udpgen: %s\n", message.c_str());
  std::exit(2);
}

struct Endpoint {
  sockaddr_storage address{};
  socklen_t length = 0;
  int family = AF_INET;
};

Endpoint endpoint(const std::string& text, uint16_t port) {
  Endpoint e;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&e.address);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&e.address);
  if (inet_pton(AF_INET, text.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    e.length = sizeof(sockaddr_in);
    e.family = AF_INET;
  } else if (inet_pton(AF_INET6, text.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    e.length = sizeof(sockaddr_in6);
    e.family = AF_INET6;
  } else {
    die("not an IP address: '" + text + "'");
  }
  return e;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const auto comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

struct Args {
  std::string mode;
  std::string dst;
  std::vector<std::string> src;
  uint16_t port = 0;
  int flows = 16;
  std::size_t size = 64;  // bytes on the wire at the IP layer (IPv4: 20 + 8 + payload)
  double rate = 0;        // packets/s, 0 = as fast as possible
  double duration = 0;
  double idle = 1.0;
};

Args parse(int argc, char** argv) {
  if (argc < 2) die("usage: pairwall-udpgen send|recv [options] (see the source header)");
  Args a;
  a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) die(k + " needs a value");
    const std::string v = argv[++i];
    try {
      if (k == "--dst")
        a.dst = v;
      else if (k == "--src")
        a.src = split(v);
      else if (k == "--port")
        a.port = static_cast<uint16_t>(std::stoul(v));
      else if (k == "--flows")
        a.flows = std::stoi(v);
      else if (k == "--size")
        a.size = std::stoul(v);
      else if (k == "--rate")
        a.rate = std::stod(v);
      else if (k == "--duration")
        a.duration = std::stod(v);
      else if (k == "--idle")
        a.idle = std::stod(v);
      else
        die("unknown option " + k);
    } catch (const std::logic_error&) {
      die(k + ": bad value '" + v + "'");
    }
  }
  if (a.port == 0) die("--port is required");
  if (a.duration <= 0 || a.duration > 3600) die("--duration must be in (0, 3600] seconds");
  if (a.flows < 1 || a.flows > 4096) die("--flows must be in 1..4096");
  return a;
}

int send_mode(const Args& a) {
  if (a.dst.empty()) die("--dst is required");
  const Endpoint dst = endpoint(a.dst, a.port);
  const std::size_t header = dst.family == AF_INET ? 28 : 48;
  if (a.size < header + sizeof(Payload) || a.size > kMaxSize + header) die("--size out of range");
  const std::size_t payload_size = a.size - header;

  // One socket per flow: each has its own source port (and source address, round robin).
  std::vector<int> sockets;
  for (int f = 0; f < a.flows; ++f) {
    const int fd = socket(dst.family, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    if (fd < 0) die(std::string("socket: ") + std::strerror(errno));
    if (!a.src.empty()) {
      const Endpoint src = endpoint(a.src[static_cast<std::size_t>(f) % a.src.size()], 0);
      if (bind(fd, reinterpret_cast<const sockaddr*>(&src.address), src.length) != 0) {
        die("bind " + a.src[static_cast<std::size_t>(f) % a.src.size()] + ": " + std::strerror(errno));
      }
    }
    if (connect(fd, reinterpret_cast<const sockaddr*>(&dst.address), dst.length) != 0) {
      die(std::string("connect: ") + std::strerror(errno));
    }
    sockets.push_back(fd);
  }

  std::vector<std::array<uint8_t, kMaxSize>> buffers(kBatch);
  std::array<iovec, kBatch> iov{};
  std::array<mmsghdr, kBatch> msgs{};
  for (int i = 0; i < kBatch; ++i) {
    buffers[i].fill(0);
    iov[i] = iovec{buffers[i].data(), payload_size};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }

  const uint64_t start = now_ns();
  const uint64_t end = start + static_cast<uint64_t>(a.duration * 1e9);
  uint64_t sent = 0;
  uint64_t would_block = 0;
  std::size_t flow = 0;
  for (uint64_t t = start; t < end; t = now_ns()) {
    if (a.rate > 0) {
      const uint64_t allowed = static_cast<uint64_t>(static_cast<double>(t - start) * a.rate / 1e9);
      if (sent >= allowed) continue;  // busy pacing: precise at high rates, bounded by `end`
    }
    const uint64_t stamp = now_ns();
    for (int i = 0; i < kBatch; ++i) {
      const Payload p{sent + static_cast<uint64_t>(i), stamp};
      std::memcpy(buffers[i].data(), &p, sizeof p);
    }
    const int n = sendmmsg(sockets[flow], msgs.data(), kBatch, 0);
    flow = (flow + 1) % sockets.size();
    if (n > 0) {
      sent += static_cast<uint64_t>(n);
    } else if (errno == EAGAIN || errno == ENOBUFS) {
      ++would_block;
    } else {
      die(std::string("sendmmsg: ") + std::strerror(errno));
    }
  }
  const double elapsed = static_cast<double>(now_ns() - start) / 1e9;
  std::printf(
      "{\"sent\": %llu, \"seconds\": %.3f, \"pps\": %.0f, \"flows\": %d, \"size\": %zu, \"send_blocked\": "
      "%llu}\n",
      static_cast<unsigned long long>(sent), elapsed, static_cast<double>(sent) / elapsed, a.flows, a.size,
      static_cast<unsigned long long>(would_block));
  for (int fd : sockets) close(fd);
  return 0;
}

int recv_mode(const Args& a) {
  const bool v6 = !a.dst.empty() && a.dst.find(':') != std::string::npos;
  const Endpoint local = endpoint(a.dst.empty() ? "0.0.0.0" : a.dst, a.port);
  const int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) die(std::string("socket: ") + std::strerror(errno));
  const int buffer = 32 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof buffer) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
  }
  if (bind(fd, reinterpret_cast<const sockaddr*>(&local.address), local.length) != 0) {
    die(std::string("bind: ") + std::strerror(errno));
  }
  timeval tv{0, 100'000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

  std::vector<std::array<uint8_t, kMaxSize>> buffers(kBatch);
  std::array<iovec, kBatch> iov{};
  std::array<mmsghdr, kBatch> msgs{};
  for (int i = 0; i < kBatch; ++i) {
    iov[i] = iovec{buffers[i].data(), kMaxSize};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  // Latency histogram in 1 us buckets up to 100 ms; beyond goes to the last bucket.
  std::vector<uint64_t> histogram(100'001, 0);
  uint64_t received = 0;
  uint64_t first_ns = 0;
  uint64_t last_ns = 0;
  const uint64_t start = now_ns();
  const uint64_t end = start + static_cast<uint64_t>(a.duration * 1e9);
  for (;;) {
    const uint64_t t = now_ns();
    if (t >= end) break;
    if (received > 0 && t - last_ns > static_cast<uint64_t>(a.idle * 1e9)) break;
    const int n = recvmmsg(fd, msgs.data(), kBatch, MSG_WAITFORONE, nullptr);
    if (n <= 0) continue;
    const uint64_t arrival = now_ns();
    if (received == 0) first_ns = arrival;
    last_ns = arrival;
    for (int i = 0; i < n; ++i) {
      if (msgs[i].msg_len < sizeof(Payload)) continue;
      Payload p;
      std::memcpy(&p, buffers[i].data(), sizeof p);
      const uint64_t us = arrival > p.sent_ns ? (arrival - p.sent_ns) / 1000 : 0;
      ++histogram[std::min<uint64_t>(us, histogram.size() - 1)];
      ++received;
    }
  }
  auto percentile = [&](double q) -> double {
    const uint64_t target = static_cast<uint64_t>(q * static_cast<double>(received));
    uint64_t seen = 0;
    for (std::size_t i = 0; i < histogram.size(); ++i) {
      seen += histogram[i];
      if (seen > target) return static_cast<double>(i);
    }
    return static_cast<double>(histogram.size() - 1);
  };
  const double active = received > 1 ? static_cast<double>(last_ns - first_ns) / 1e9 : 0;
  std::printf(
      "{\"received\": %llu, \"active_seconds\": %.3f, \"pps\": %.0f, \"latency_us_p50\": %.0f, "
      "\"latency_us_p99\": %.0f}\n",
      static_cast<unsigned long long>(received), active,
      active > 0 ? static_cast<double>(received) / active : 0.0, percentile(0.5), percentile(0.99));
  close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.mode == "send") return send_mode(a);
  if (a.mode == "recv") return recv_mode(a);
  die("mode must be send or recv");
}
