#include "tools/bench/sync_bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/udp.hpp>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <variant>
#include <vector>

#include "daemon/engine/engine.h"
#include "daemon/engine/rules/compile.h"
#include "daemon/engine/rules/parser.h"
#include "daemon/sync/protocol.h"
#include "daemon/sync/sync_service.h"
#include "tools/bench/bench_packets.h"

namespace pairwall::bench {
namespace {

using namespace pairwall::engine;
using Clock = std::chrono::steady_clock;

using Tcp = TcpTemplate;
constexpr uint32_t kServer = kBenchServer;
constexpr uint32_t kClientBase = kBenchClientBase;

Millis now_ms() {
  return std::chrono::duration_cast<Millis>(Clock::now().time_since_epoch());
}
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

uint16_t free_port() {
  boost::asio::io_context io;
  boost::asio::ip::udp::socket s(io, boost::asio::ip::udp::endpoint(boost::asio::ip::udp::v4(), 0));
  return s.local_endpoint().port();
}

// One node: an engine with permissive rules and long timeouts, its workers, its sync service.
struct Node {
  std::unique_ptr<Engine> engine;
  std::vector<std::unique_ptr<Worker>> workers;
  std::unique_ptr<sync::SyncService> sync;
  PacketMeta out;
  PacketMeta in;

  Node(uint32_t id, std::size_t worker_count) {
    EngineConfig c;
    c.node_id = id;
    engine = std::make_unique<Engine>(c);
    engine->load_rules(compile_rules_text(
        "set limit states 3000000\nset timeout { tcp.first 3600, tcp.opening 3600 }\npass all\n", *engine));
    for (std::size_t i = 0; i < worker_count; ++i) workers.push_back(std::make_unique<Worker>(*engine));
    out = {Hook::Forward, engine->interfaces().intern("lan0"), engine->interfaces().intern("wan0"), false};
    in = {Hook::Forward, out.out_iface, out.in_iface, false};
  }

  void start_sync(const std::string& self, const std::string& peer, uint16_t port) {
    sync::SyncConfig c;
    c.interface = "lo";
    c.address = self;
    c.peer = peer;
    c.port = port;
    c.key = std::vector<uint8_t>(32, 0x5a);
    c.mtu = 1500;  // as on an Ethernet sync link, not loopback's 64 KiB
    sync = std::make_unique<sync::SyncService>(*engine, c, engine->config().node_id);
    for (auto& w : workers) sync->add_ring(w->events());
    sync->add_ring(engine->control_events());
    sync->start();
  }

  // A new connection's first packet: creates a state (flow numbers are unique per run).
  bool syn(Worker& w, uint64_t flow) {
    Tcp t;
    t.set(kClientBase + static_cast<uint32_t>(flow >> 16), static_cast<uint16_t>(flow), kServer, 80,
          tcpflag::kSyn, 1000, 0);
    return engine->process(w, t.bytes, out, now_ms()).reason == Reason::Match;
  }
  // The server's answer: a TCP state change on the state `flow` made.
  bool syn_ack(Worker& w, uint64_t flow) {
    Tcp t;
    t.set(kServer, 80, kClientBase + static_cast<uint32_t>(flow >> 16), static_cast<uint16_t>(flow),
          tcpflag::kSyn | tcpflag::kAck, 50000, 1001);
    return engine->process(w, t.bytes, in, now_ms()).reason == Reason::State;
  }
};

StateKey key_of(uint64_t flow) {
  StateKey k;
  k.family = Family::V4;
  k.proto = ipproto::kTcp;
  k.addr[0] = IpAddress::v4(kClientBase + static_cast<uint32_t>(flow >> 16));
  k.addr[1] = IpAddress::v4(kServer);
  k.port[0] = static_cast<uint16_t>(flow);
  k.port[1] = 80;
  return k;
}

// B's view of flow's responder side, or -1 when B does not have the state.
int peer_state_on(Engine& e, uint64_t flow) {
  const StateKey k = key_of(flow);
  auto h = e.states().find(k, e.states().hash(k));
  return h ? h->peer[1].state : -1;
}

template <typename F>
bool wait_for(F&& done, double seconds) {
  const auto start = Clock::now();
  while (since(start) < seconds) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return done();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

// Sustained replication: one worker makes states as fast as A's sync drains them (it waits when
// its ring is half full, so nothing is lost), B applies them.
void sustained(double seconds, SyncBenchResult& r) {
  Node a(1, 1);
  Node b(2, 0);
  const uint16_t port = free_port();
  a.start_sync("127.0.0.1", "127.0.0.2", port);
  b.start_sync("127.0.0.2", "127.0.0.1", port);
  if (!wait_for([&] { return a.sync->bulk_done() && b.sync->bulk_done(); }, 10)) {
    throw std::runtime_error("sync bench: the two nodes did not pair up");
  }
  Worker& w = *a.workers[0];
  const std::size_t high = w.events().capacity() / 2;
  uint64_t created = 0;
  const auto start = Clock::now();
  while (since(start) < seconds) {
    for (int i = 0; i < 256; ++i) {
      while (w.events().size_approx() > high) std::this_thread::yield();
      created += a.syn(w, created + 1);
    }
  }
  if (!wait_for([&] { return b.engine->states().size() >= created; }, 60)) {
    r.lost += created - b.engine->states().size();
  }
  r.states_synced = created;
  r.states_synced_per_s = static_cast<double>(b.engine->states().size()) / since(start);
  r.lost += w.events_lost();
  a.sync->stop();
  b.sync->stop();
}

// Latency of single changes while another worker creates 20,000 states/s in the background.
void latency(double seconds, SyncBenchResult& r) {
  Node a(1, 2);
  Node b(2, 0);
  const uint16_t port = free_port();
  a.start_sync("127.0.0.1", "127.0.0.2", port);
  b.start_sync("127.0.0.2", "127.0.0.1", port);
  if (!wait_for([&] { return a.sync->bulk_done() && b.sync->bulk_done(); }, 10)) {
    throw std::runtime_error("sync bench: the two nodes did not pair up");
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> background{0};
  std::thread load([&] {
    Worker& w = *a.workers[1];
    const auto start = Clock::now();
    uint64_t n = 0;
    while (!stop.load()) {
      background += a.syn(w, (uint64_t{1} << 40) + n++);
      const auto due = start + std::chrono::microseconds(n * 50);
      std::this_thread::sleep_until(due);
    }
  });
  Worker& w = *a.workers[0];
  std::vector<double> inserts;
  std::vector<double> updates;
  const auto start = Clock::now();
  for (uint64_t flow = 1; since(start) < seconds || inserts.size() < 200; ++flow) {
    auto t0 = Clock::now();
    a.syn(w, flow);
    if (!wait_for([&] { return peer_state_on(*b.engine, flow) >= 0; }, 5)) {
      ++r.lost;
      continue;
    }
    inserts.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    const int before = peer_state_on(*b.engine, flow);
    t0 = Clock::now();
    a.syn_ack(w, flow);
    if (!wait_for([&] { return peer_state_on(*b.engine, flow) != before; }, 5)) {
      ++r.lost;
      continue;
    }
    updates.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  stop = true;
  load.join();
  r.insert_latency_ms_p50 = percentile(inserts, 0.5);
  r.insert_latency_ms_p99 = percentile(inserts, 0.99);
  r.update_latency_ms_p50 = percentile(updates, 0.5);
  r.update_latency_ms_p99 = percentile(updates, 0.99);
  const uint64_t expect = background.load() + inserts.size() + r.lost;
  if (!wait_for([&] { return b.engine->states().size() >= expect; }, 30))
    r.lost += expect - b.engine->states().size();
  a.sync->stop();
  b.sync->stop();
}

// A holds `count` states; B starts with an empty table and asks for them all.
void bulk(uint32_t count, SyncBenchResult& r) {
  Node a(1, 1);
  Node b(2, 0);
  Worker& w = *a.workers[0];
  for (uint64_t f = 1; a.engine->states().size() < count; ++f) {
    a.syn(w, f);
    StateRecord drop;
    while (w.events().pop(drop)) {
    }
  }
  const uint16_t port = free_port();
  a.start_sync("127.0.0.1", "127.0.0.2", port);
  const auto start = Clock::now();
  b.start_sync("127.0.0.2", "127.0.0.1", port);
  if (!wait_for([&] { return b.sync->bulk_done(); }, 600))
    throw std::runtime_error("sync bench: bulk did not end");
  r.bulk_seconds = since(start);
  r.bulk_states = b.engine->states().size();
  r.bulk_states_per_s = static_cast<double>(r.bulk_states) / r.bulk_seconds;
  if (r.bulk_states < count) r.lost += count - r.bulk_states;
  if (b.sync->status().bulk_state != sync::BulkState::Done)
    throw std::runtime_error("sync bench: bulk timed out");
  a.sync->stop();
  b.sync->stop();
}

// The peer's side reduced to the protocol: it authenticates, orders, acks and counts every record,
// but applies nothing, so that the node under test is measured without the peer's table work on
// its CPUs (on a real pair that work happens on the other machine).
class SinkPeer {
 public:
  SinkPeer(const std::string& self, const std::string& peer, uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    const int big = 4 << 20;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
    // The node under test takes its acks only from the link ([sync] ttl_security).
    const int ttl = sync::kLinkTtl;
    ::setsockopt(fd_, IPPROTO_IP, IP_TTL, &ttl, sizeof ttl);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_port = htons(port);
    ::inet_pton(AF_INET, self.c_str(), &local.sin_addr);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
      throw std::runtime_error("sync bench: sink peer cannot bind");
    }
    peer_.sin_family = AF_INET;
    peer_.sin_port = htons(port);
    ::inet_pton(AF_INET, peer.c_str(), &peer_.sin_addr);
    sync::ProtocolConfig c;
    c.node_id = 2;
    c.epoch = static_cast<uint64_t>(now_us().count());
    c.max_datagram = 1472;
    c.request_bulk_at_start = false;
    c.ttl_security = false;  // recv() does not report the TTL
    protocol_ = std::make_unique<sync::SyncProtocol>(c, std::vector<uint8_t>(32, 0x5a), store_, now_us());
    thread_ = std::thread([this] { run(); });
  }
  ~SinkPeer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  uint64_t records() const { return store_.applied.load(); }

 private:
  struct CountingStore : sync::StateStore {
    std::atomic<uint64_t> applied{0};
    sync::ApplyResult apply(const StateRecord&, sync::Micros) override {
      applied.fetch_add(1, std::memory_order_relaxed);
      return sync::ApplyResult::Applied;
    }
    bool current(const StateId&, sync::Micros, StateRecord&) override { return false; }
    void collect_ids(std::vector<StateId>&) override {}
    void set_peer_sequence(uint64_t) override {}
    std::size_t remove_peer_states_unnamed_since(uint32_t, uint64_t) override { return 0; }
  };
  static sync::Micros now_us() {
    return std::chrono::duration_cast<sync::Micros>(Clock::now().time_since_epoch());
  }
  void run() {
    std::vector<uint8_t> buf(65536);
    while (!stop_.load()) {
      pollfd p{fd_, POLLIN, 0};
      ::poll(&p, 1, 1);
      for (int i = 0; i < 256; ++i) {
        const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
        if (n <= 0) break;
        protocol_->receive(std::span<const uint8_t>(buf.data(), static_cast<std::size_t>(n)), -1, now_us());
      }
      protocol_->poll(now_us(), [this](std::span<const uint8_t> d) {
        return ::sendto(fd_, d.data(), d.size(), 0, reinterpret_cast<const sockaddr*>(&peer_),
                        sizeof peer_) == static_cast<ssize_t>(d.size());
      });
    }
  }

  int fd_ = -1;
  sockaddr_in peer_{};
  CountingStore store_;
  std::unique_ptr<sync::SyncProtocol> protocol_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One worker making states as fast as it can for `seconds`, with sync on (shipping every state to
// B, which runs on the same two CPUs here, unlike a real pair) or off (its ring drained and
// discarded, as pairwalld does without [sync]).
enum class Peer : uint8_t { None, Engine, Sink };

double create_rate(Peer peer, double seconds, SyncBenchResult& r) {
  const bool with_sync = peer != Peer::None;
  Node a(1, 1);
  Node b(2, 0);
  const uint16_t port = free_port();
  std::atomic<bool> stop{false};
  std::thread drainer;
  Worker& w = *a.workers[0];
  std::unique_ptr<SinkPeer> sink;
  if (peer == Peer::Engine) {
    a.start_sync("127.0.0.1", "127.0.0.2", port);
    b.start_sync("127.0.0.2", "127.0.0.1", port);
    if (!wait_for([&] { return a.sync->bulk_done() && b.sync->bulk_done(); }, 10)) {
      throw std::runtime_error("sync bench: the two nodes did not pair up");
    }
  } else if (peer == Peer::Sink) {
    sink = std::make_unique<SinkPeer>("127.0.0.2", "127.0.0.1", port);
    a.start_sync("127.0.0.1", "127.0.0.2", port);
    if (!wait_for([&] { return a.sync->bulk_done(); }, 10))
      throw std::runtime_error("sync bench: no sink peer");
  } else {
    drainer = std::thread([&] {
      StateRecord rec;
      while (!stop.load()) {
        while (w.events().pop(rec)) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  // With sync the worker never outruns it (it waits while its ring is half full): the rate is the
  // one at which every new state also reaches the peer.
  const std::size_t high = w.events().capacity() / 2;
  uint64_t created = 0;
  const auto start = Clock::now();
  while (since(start) < seconds) {
    for (int i = 0; i < 256; ++i) {
      while (with_sync && w.events().size_approx() > high) std::this_thread::yield();
      created += a.syn(w, created + 1);
    }
  }
  const double rate = static_cast<double>(created) / since(start);
  if (with_sync) {
    auto arrived = [&] { return peer == Peer::Sink ? sink->records() : b.engine->states().size(); };
    if (!wait_for([&] { return arrived() >= created; }, 60)) r.lost += created - arrived();
    r.lost += w.events_lost();
    a.sync->stop();
    if (b.sync) b.sync->stop();
  } else {
    stop = true;
    drainer.join();
  }
  return rate;
}

}  // namespace

void sync_keys(double seconds, int runs, Json& out) {
  const SyncBenchResult r = run_sync_bench(seconds, 1'000'000, runs);
  out["states_synced_per_s"] = r.states_synced_per_s;
  out["bulk_states_per_s"] = r.bulk_states_per_s;
  out["bulk_states"] = r.bulk_states;
  out["bulk_seconds"] = r.bulk_seconds;
  out["create_rate_ratio"] = r.create_rate_ratio;
  out["create_per_s_sync_off"] = r.create_per_s_sync_off;
  out["create_per_s_sync_on"] = r.create_per_s_sync_on;
  out["create_rate_ratio_shared_cpu"] = r.create_rate_ratio_shared_cpu;
  out["create_per_s_sync_on_shared_cpu"] = r.create_per_s_sync_on_shared;
  out["update_latency_ms_p50"] = r.update_latency_ms_p50;
  out["update_latency_ms_p99"] = r.update_latency_ms_p99;
  out["insert_latency_ms_p50"] = r.insert_latency_ms_p50;
  out["insert_latency_ms_p99"] = r.insert_latency_ms_p99;
  out["lost"] = r.lost;
}

SyncBenchResult run_sync_bench(double seconds, uint32_t bulk_states, int runs) {
  if (::geteuid() != 0) throw std::runtime_error("sync bench: needs root (the sync socket binds to lo)");
  SyncBenchResult r;
  sustained(std::max(seconds, 2.0), r);
  latency(std::max(seconds, 2.0), r);
  bulk(bulk_states, r);
  std::vector<double> off;
  std::vector<double> on;
  std::vector<double> shared;
  for (int i = 0; i < runs; ++i) {
    off.push_back(create_rate(Peer::None, seconds, r));
    on.push_back(create_rate(Peer::Sink, seconds, r));
    shared.push_back(create_rate(Peer::Engine, seconds, r));
  }
  r.create_per_s_sync_off = percentile(off, 0.5);
  r.create_per_s_sync_on = percentile(on, 0.5);
  r.create_per_s_sync_on_shared = percentile(shared, 0.5);
  r.create_rate_ratio = r.create_per_s_sync_on / r.create_per_s_sync_off;
  r.create_rate_ratio_shared_cpu = r.create_per_s_sync_on_shared / r.create_per_s_sync_off;
  return r;
}

}  // namespace pairwall::bench
