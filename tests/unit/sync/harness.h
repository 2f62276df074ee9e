// Test doubles for the sync protocol: a state table behaving like the engine's (windows never
// move backwards, updates need the state), a lossy link with delay, reordering and duplication,
// and a pair of protocol instances joined by it, with time driven by hand.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "daemon/sync/protocol.h"

namespace pairwall::sync::test {

using engine::StateId;
using engine::StateRecord;

inline std::vector<uint8_t> test_key(uint8_t fill = 0x5a) {
  return std::vector<uint8_t>(32, fill);
}

// Sequence-number "after" (RFC 1982 serial arithmetic), as the engine compares TCP windows.
inline bool seq_after(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) > 0;
}

class FakeStore : public StateStore {
 public:
  std::map<StateId, StateRecord> states;
  uint64_t applied = 0;
  // As the engine keeps them: the peer's sequence that last named a state, and the peer's states
  // this node's own packets have met.
  uint64_t peer_sequence = 0;
  std::map<StateId, uint64_t> named;
  std::set<StateId> seen_locally;
  uint64_t digest = 0;  // of the rules this node runs, as rules_digest() says

  uint64_t rules_digest() const override { return digest; }

  // Where set, the store keeps if-bound states, its interfaces numbered by it.
  pairwall::engine::InterfaceRegistry* registry = nullptr;
  pairwall::engine::InterfaceRegistry* interfaces() override { return registry; }

  ApplyResult apply(const StateRecord& r, Micros) override {
    using Kind = StateRecord::Kind;
    switch (r.kind) {
      case Kind::Clear:
        states.clear();
        return ApplyResult::Applied;
      case Kind::Delete:
        return states.erase(r.id) != 0 ? ApplyResult::Applied : ApplyResult::Unknown;
      case Kind::Insert: {
        named[r.id] = peer_sequence;
        auto it = states.find(r.id);
        if (it == states.end()) {
          StateRecord copy = r;
          copy.kind = Kind::Insert;
          states.emplace(r.id, copy);
          ++applied;
          return ApplyResult::Applied;
        }
        return merge(it->second, r) ? ApplyResult::Applied : ApplyResult::Stale;
      }
      case Kind::Update: {
        auto it = states.find(r.id);
        if (it == states.end()) return ApplyResult::Unknown;
        named[r.id] = peer_sequence;
        return merge(it->second, r) ? ApplyResult::Applied : ApplyResult::Stale;
      }
    }
    return ApplyResult::Failed;
  }

  bool current(const StateId& id, Micros, StateRecord& out) override {
    auto it = states.find(id);
    if (it == states.end()) return false;
    out = it->second;
    out.kind = StateRecord::Kind::Insert;
    return true;
  }

  void collect_ids(std::vector<StateId>& out) override {
    for (const auto& [id, r] : states) out.push_back(id);
  }

  void set_peer_sequence(uint64_t sequence) override { peer_sequence = sequence; }

  std::size_t remove_peer_states_unnamed_since(uint32_t peer, uint64_t sequence) override {
    std::size_t removed = 0;
    for (auto it = states.begin(); it != states.end();) {
      const bool unnamed =
          it->first.creator == peer && named[it->first] < sequence && !seen_locally.count(it->first);
      it = unnamed ? states.erase(it) : std::next(it);
      removed += unnamed;
    }
    return removed;
  }

  // Local change: what the engine does to its own table before emitting the record.
  void local(const StateRecord& r) {
    using Kind = StateRecord::Kind;
    if (r.kind == Kind::Delete) {
      states.erase(r.id);
    } else if (r.kind == Kind::Clear) {
      states.clear();
    } else {
      StateRecord& s = states[r.id];
      if (r.kind == Kind::Update) seen_locally.insert(r.id);
      if (r.kind == Kind::Insert) {
        s = r;
      } else {
        s.src = r.src;
        s.dst = r.dst;
        s.timeout = r.timeout;
      }
      s.kind = Kind::Insert;
    }
  }

 private:
  static bool merge_peer(engine::PeerTracking& have, const engine::PeerTracking& in) {
    bool changed = false;
    if (seq_after(in.seqlo, have.seqlo)) have.seqlo = in.seqlo, changed = true;
    if (seq_after(in.seqhi, have.seqhi)) have.seqhi = in.seqhi, changed = true;
    if (in.max_win > have.max_win) have.max_win = in.max_win, changed = true;
    if (in.state > have.state) have.state = in.state, changed = true;
    return changed;
  }
  static bool merge(StateRecord& have, const StateRecord& in) {
    const bool a = merge_peer(have.src, in.src);
    const bool b = merge_peer(have.dst, in.dst);
    if (a || b) have.timeout = in.timeout;
    return a || b;
  }
};

inline StateRecord make_insert(uint32_t creator, uint64_t counter, bool v6 = false) {
  StateRecord r;
  r.kind = StateRecord::Kind::Insert;
  r.id = {creator, counter};
  r.stack_key.family = v6 ? engine::Family::V6 : engine::Family::V4;
  r.stack_key.proto = 6;
  if (v6) {
    r.stack_key.addr[0] = {0x20010db800000000ULL, counter};
    r.stack_key.addr[1] = {0x20010db800000001ULL, creator};
  } else {
    r.stack_key.addr[0] = engine::IpAddress::v4(0x0a010000u | static_cast<uint32_t>(counter & 0xffff));
    r.stack_key.addr[1] = engine::IpAddress::v4(0xc0000200u | creator);
  }
  r.stack_key.port[0] = static_cast<uint16_t>(1024 + counter % 60000);
  r.stack_key.port[1] = 443;
  r.wire_key = r.stack_key;
  r.src = {static_cast<uint32_t>(counter * 7919),
           static_cast<uint32_t>(counter * 7919 + 65535),
           65535,
           0x87,
           static_cast<uint8_t>(engine::TcpState::SynSent),
           1460};
  r.dst = {0, 0, 0, 0, static_cast<uint8_t>(engine::TcpState::Listen), 0};
  r.timeout = engine::TimeoutClass::TcpFirst;
  r.expires_in = engine::Millis{30'000};
  r.rule = 3;
  return r;
}

// One direction of the link.
class Link {
 public:
  double loss = 0;
  double duplicate = 0;
  Micros delay{100};
  Micros jitter{0};  // uniform extra delay: reorders datagrams closer than this
  // A bottleneck: bytes per microsecond (0: unlimited) and how many datagrams may wait for it
  // before the link drops (a router queue, or the peer's socket buffer).
  double bytes_per_us = 0;
  std::size_t queue_limit = 0;
  uint64_t queue_drops = 0;
  bool up = true;
  uint64_t sent = 0;
  uint64_t dropped = 0;
  std::vector<std::vector<uint8_t>> captured;  // every datagram offered, for replay tests
  bool capture = false;
  std::function<bool(std::span<const uint8_t>)> drop_if;  // loses exactly the datagrams it picks

  explicit Link(uint32_t seed) : rng_(seed) {}

  void send(std::span<const uint8_t> d, Micros now) {
    ++sent;
    if (capture) captured.emplace_back(d.begin(), d.end());
    if (!up || chance(loss) || (drop_if && drop_if(d))) {
      ++dropped;
      return;
    }
    Micros depart = now;
    if (bytes_per_us > 0) {
      while (!departures_.empty() && departures_.front() <= now) departures_.pop_front();
      if (queue_limit != 0 && departures_.size() >= queue_limit) {
        ++dropped;
        ++queue_drops;
        return;
      }
      depart = std::max(now, busy_until_) +
               Micros{static_cast<int64_t>(static_cast<double>(d.size()) / bytes_per_us)};
      busy_until_ = depart;
      departures_.push_back(depart);
    }
    queue(d, depart);
    if (chance(duplicate)) queue(d, depart);
  }

  // Delivers everything due at `now`, in arrival-time order.
  template <typename F>
  void deliver(Micros now, F&& f) {
    std::stable_sort(q_.begin(), q_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    while (!q_.empty() && q_.front().first <= now) {
      auto bytes = std::move(q_.front().second);
      q_.pop_front();
      f(std::span<const uint8_t>(bytes));
    }
  }

  Micros next_arrival() const {
    Micros t = Micros::max();
    for (const auto& e : q_) t = std::min(t, e.first);
    return t;
  }
  bool empty() const { return q_.empty(); }

 private:
  bool chance(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  void queue(std::span<const uint8_t> d, Micros now) {
    Micros at = now + delay;
    if (jitter.count() > 0) at += Micros{std::uniform_int_distribution<int64_t>(0, jitter.count())(rng_)};
    q_.emplace_back(at, std::vector<uint8_t>(d.begin(), d.end()));
  }

  std::mt19937_64 rng_;
  std::deque<std::pair<Micros, std::vector<uint8_t>>> q_;
  std::deque<Micros> departures_;
  Micros busy_until_{0};
};

// Whether a datagram (sealed with the test key) carries a message `wanted` accepts.
template <typename Wanted>
bool carries(std::span<const uint8_t> d, Wanted wanted) {
  Authenticator auth(test_key());
  Header h;
  std::span<const uint8_t> payload;
  DropReason why{};
  wire::Batch batch;
  if (!open(d, auth, h, payload, why) ||
      !batch.ParseFromArray(payload.data(), static_cast<int>(payload.size())))
    return false;
  return std::any_of(batch.messages().begin(), batch.messages().end(), wanted);
}

// Node A (id 1) and node B (id 2), each with its table and protocol, joined by two links.
struct Pair {
  ProtocolConfig config_a;
  ProtocolConfig config_b;
  FakeStore store_a;
  FakeStore store_b;
  Link a_to_b{11};
  Link b_to_a{22};
  Micros now{1'000'000};
  std::unique_ptr<SyncProtocol> a;
  std::unique_ptr<SyncProtocol> b;

  static ProtocolConfig base_config(uint32_t id) {
    ProtocolConfig c;
    c.node_id = id;
    c.epoch = 1000 + id;
    c.max_datagram = 1452;
    return c;
  }

  Pair() : config_a(base_config(1)), config_b(base_config(2)) {}

  void start() {
    a = std::make_unique<SyncProtocol>(config_a, test_key(), store_a, now);
    b = std::make_unique<SyncProtocol>(config_b, test_key(), store_b, now);
  }

  void restart_b(uint64_t epoch) {
    config_b.epoch = epoch;
    store_b.states.clear();
    b = std::make_unique<SyncProtocol>(config_b, test_key(), store_b, now);
  }

  // A local change on A or B: applied to its table, handed to its protocol.
  void change(bool on_a, const StateRecord& r) {
    (on_a ? store_a : store_b).local(r);
    (on_a ? a : b)->enqueue(r, now);
  }

  // One step: deliver what is due, poll both.
  void step() {
    a_to_b.deliver(now, [&](std::span<const uint8_t> d) { b->receive(d, kLinkTtl, now); });
    b_to_a.deliver(now, [&](std::span<const uint8_t> d) { a->receive(d, kLinkTtl, now); });
    a->poll(now, [&](std::span<const uint8_t> d) {
      a_to_b.send(d, now);
      return true;
    });
    b->poll(now, [&](std::span<const uint8_t> d) {
      b_to_a.send(d, now);
      return true;
    });
  }

  // Runs for `duration` in steps of `tick` (or sooner to the next event).
  void run(Micros duration, Micros tick = Micros{100}) {
    const Micros end = now + duration;
    while (now < end) {
      step();
      Micros next = std::min({now + tick, a->next_deadline(now), b->next_deadline(now), a_to_b.next_arrival(),
                              b_to_a.next_arrival(), end});
      now = std::max(next, now + Micros{1});
    }
  }

  bool tables_agree() const { return same(store_a, store_b); }

  static bool same(const FakeStore& x, const FakeStore& y) {
    if (x.states.size() != y.states.size()) return false;
    for (const auto& [id, r] : x.states) {
      auto it = y.states.find(id);
      if (it == y.states.end()) return false;
      if (!(it->second.src == r.src) || !(it->second.dst == r.dst)) return false;
      if (!(it->second.stack_key == r.stack_key) || !(it->second.wire_key == r.wire_key)) return false;
    }
    return true;
  }
};

}  // namespace pairwall::sync::test
