// The election core driven as a pair (or more) of nodes on a fake clock with a fake advertisement
// channel: scenarios are tables of timed events with the roles and transition times expected.
#include "failover/election.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "failover/demotion.h"

namespace pf = pairwall::failover;
using pf::Role;
using namespace std::chrono_literals;

namespace {

constexpr pf::Time kLatency = 1ms;  // one advertisement's trip through the fake channel

struct NodeSpec {
  uint32_t id;
  uint8_t advskew;
  bool preempt;
};

struct SimNode {
  NodeSpec spec;
  pf::Time advbase;
  std::optional<pf::Election> election;
  bool alive = false;
  bool holds_vips = false;  // what the kernel would hold; a killed node keeps them
  uint64_t adverts_sent = 0;
  uint64_t announces = 0;
};

// N nodes, a channel that delivers every advertisement to every other live node after kLatency
// unless the direction is cut, and a clock that jumps from one deadline to the next.
class Sim {
 public:
  Sim(pf::Time advbase, std::vector<NodeSpec> specs) {
    for (const auto& s : specs) nodes_.push_back(SimNode{s, advbase, std::nullopt});
  }

  pf::Time now() const { return now_; }
  SimNode& node(std::size_t i) { return nodes_.at(i); }
  Role role(std::size_t i) const { return nodes_.at(i).alive ? nodes_.at(i).election->role() : Role::Init; }
  const pf::Election& election(std::size_t i) const { return *nodes_.at(i).election; }

  void start(std::size_t i, uint32_t demotion = 0) {
    auto& n = nodes_.at(i);
    n.election.emplace(pf::ElectionConfig{n.spec.id, n.advbase, n.spec.advskew, n.spec.preempt});
    n.alive = true;
    // The service releases leftovers from an earlier life before it starts (VIPs of a killed run).
    n.holds_vips = false;
    apply(i, n.election->set_demotion(now_, demotion));
    apply(i, n.election->start(now_, false));
  }
  void kill(std::size_t i) { nodes_.at(i).alive = false; }  // kill -9: no goodbye, VIPs stay
  void shutdown(std::size_t i) {
    apply(i, nodes_.at(i).election->shutdown(now_));
    nodes_.at(i).alive = false;
  }
  void demote(std::size_t i, uint32_t demotion) {
    apply(i, nodes_.at(i).election->set_demotion(now_, demotion));
  }
  void fault(std::size_t i, bool f) { apply(i, nodes_.at(i).election->set_fault(now_, f)); }
  void set_preference(std::size_t i, uint8_t advskew, bool preempt) {
    apply(i, nodes_.at(i).election->set_preference(now_, advskew, preempt));
  }
  void set_advbase(std::size_t i, pf::Time advbase) {
    apply(i, nodes_.at(i).election->set_advbase(now_, advbase));
  }
  void cut(std::size_t from, std::size_t to) { cut_.insert({from, to}); }
  void heal() { cut_.clear(); }

  // Advances to `until`, delivering adverts and firing timers in time order.
  void run_until(pf::Time until) {
    for (;;) {
      pf::Time next = pf::kNever;
      for (const auto& f : flight_) next = std::min(next, f.at);
      for (const auto& n : nodes_) {
        if (n.alive) next = std::min(next, n.election->deadline());
      }
      if (next > until) break;
      now_ = next;
      std::vector<InFlight> due;
      auto it =
          std::partition(flight_.begin(), flight_.end(), [&](const InFlight& f) { return f.at > now_; });
      due.assign(it, flight_.end());
      flight_.erase(it, flight_.end());
      for (const auto& f : due) {
        if (nodes_[f.to].alive) apply(f.to, nodes_[f.to].election->on_advert(now_, f.advert));
      }
      for (std::size_t i = 0; i < nodes_.size(); ++i) {
        if (nodes_[i].alive && nodes_[i].election->deadline() <= now_) {
          apply(i, nodes_[i].election->on_timer(now_));
        }
      }
    }
    now_ = until;
  }
  void run_for(pf::Time d) { run_until(now_ + d); }

  // When node i last became `to` (kNever if it never did).
  pf::Time became(std::size_t i, Role to) const {
    const auto& log = nodes_.at(i).election->transitions();
    for (std::size_t k = log.size(); k-- > 0;) {
      if (log[k].to == to) return log[k].at;
    }
    return pf::kNever;
  }
  std::size_t masters() const {
    std::size_t m = 0;
    for (std::size_t i = 0; i < nodes_.size(); ++i) m += role(i) == Role::Master;
    return m;
  }

 private:
  struct InFlight {
    pf::Time at;
    std::size_t to;
    pf::PeerAdvert advert;
  };

  void apply(std::size_t i, const pf::Actions& a) {
    auto& n = nodes_[i];
    if (a.release_vips) n.holds_vips = false;
    if (a.acquire_vips) n.holds_vips = true;
    if (a.announce) ++n.announces;
    if (!a.send_advert) return;
    ++n.adverts_sent;
    const pf::OwnAdvert own = n.election->advert();
    const pf::PeerAdvert wire{n.spec.id, own.advbase, own.advskew, own.demotion, own.leaving};
    for (std::size_t j = 0; j < nodes_.size(); ++j) {
      if (j != i && !cut_.contains({i, j})) flight_.push_back(InFlight{now_ + kLatency, j, wire});
    }
  }

  pf::Time now_{0};
  std::vector<SimNode> nodes_;
  std::vector<InFlight> flight_;
  std::set<std::pair<std::size_t, std::size_t>> cut_;
};

pf::Time skew_time(pf::Time advbase, uint8_t skew) {
  return advbase * skew / 256;
}

// A at advskew 0 is master, B at advskew 100 backup, with the time A took the group.
Sim steady_pair(pf::Time advbase, bool preempt_a = true, bool preempt_b = true) {
  Sim sim(advbase, {{1, 0, preempt_a}, {2, 100, preempt_b}});
  sim.start(0);
  sim.start(1);
  sim.run_for(10 * advbase);
  return sim;
}

}  // namespace

TEST_CASE("rank: lower (demotion, advskew, node id) wins, total and symmetric", "[election]") {
  const std::vector<uint32_t> demotions{0, 1, 16, 64, pf::kLeavingDemotion};
  const std::vector<uint8_t> skews{0, 1, 100, 254, 255};
  const std::vector<uint32_t> ids{1, 2, 7};
  std::vector<pf::Rank> all;
  for (auto d : demotions) {
    for (auto s : skews) {
      for (auto id : ids) all.push_back(pf::Rank{d, s, id});
    }
  }
  for (const auto& a : all) {
    for (const auto& b : all) {
      if (a.node_id == b.node_id) continue;
      // Exactly one of the two wins: both nodes reach the same verdict from either side.
      CHECK(pf::ranks_above(a, b) != pf::ranks_above(b, a));
      if (a.demotion != b.demotion) CHECK(pf::ranks_above(a, b) == (a.demotion < b.demotion));
    }
  }
  CHECK(pf::ranks_above({0, 100, 9}, {1, 0, 1}));
  CHECK(pf::ranks_above({0, 0, 2}, {0, 1, 1}));
  CHECK(pf::ranks_above({3, 7, 1}, {3, 7, 2}));
}

TEST_CASE("interval and master-down interval follow carp(4)", "[election]") {
  struct Row {
    pf::Time advbase;
    uint8_t skew;
    pf::Time interval;
    pf::Time master_down;
  };
  const std::vector<Row> rows{
      {1s, 0, 1s, 3s},
      {1s, 100, 1'390'625us, 3'390'625us},
      {100ms, 0, 100ms, 300ms},
      {100ms, 100, 139'062us, 339'062us},
      {200ms, 254, 398'437us, 798'437us},
  };
  for (const auto& r : rows) {
    pf::Election e({1, r.advbase, r.skew, false});
    CHECK(e.interval() == r.interval);
    CHECK(e.master_down_interval() == r.master_down);
  }
}

TEST_CASE("startup: the better node becomes master, the other stays backup", "[election]") {
  struct Row {
    pf::Time advbase;
    uint8_t skew_a, skew_b;
    std::size_t winner;
    pf::Time master_at;  // when the winner takes the group
  };
  const std::vector<Row> rows{
      {1s, 0, 100, 0, 3s},
      {1s, 100, 0, 1, 3s},
      {100ms, 0, 100, 0, 300ms},
      {100ms, 50, 50, 0, 300ms + skew_time(100ms, 50)},  // tie on skew: node id 1 wins
  };
  for (const auto& r : rows) {
    Sim sim(r.advbase, {{1, r.skew_a, false}, {2, r.skew_b, false}});
    sim.start(0);
    sim.start(1);
    sim.run_for(20 * r.advbase);
    const std::size_t loser = 1 - r.winner;
    CHECK(sim.role(r.winner) == Role::Master);
    CHECK(sim.role(loser) == Role::Backup);
    CHECK(sim.node(r.winner).holds_vips);
    CHECK_FALSE(sim.node(loser).holds_vips);
    CHECK(sim.became(r.winner, Role::Master) == r.master_at);
  }
}

TEST_CASE("equal skews starting together: both time out, the higher node id steps down at once",
          "[election]") {
  Sim sim(1s, {{1, 0, false}, {2, 0, false}});
  sim.start(0);
  sim.start(1);
  sim.run_for(3s + kLatency);
  CHECK(sim.masters() == 1);
  CHECK(sim.role(0) == Role::Master);
  CHECK(sim.role(1) == Role::Backup);
  CHECK(sim.became(1, Role::Backup) == 3s + kLatency);
  CHECK_FALSE(sim.node(1).holds_vips);
  CHECK(sim.election(0).worse_masters() == 1);
}

TEST_CASE("kill -9 of the master: the backup takes over after 3 intervals plus its skew", "[election]") {
  for (const pf::Time advbase : {pf::Time{1s}, pf::Time{100ms}, pf::Time{20ms}}) {
    Sim sim = steady_pair(advbase);
    REQUIRE(sim.role(0) == Role::Master);
    const pf::Time last_advert = sim.now() - (sim.now() - sim.became(0, Role::Master)) % advbase;
    const pf::Time kill_at = sim.now();
    sim.kill(0);
    sim.run_for(10 * advbase);
    CHECK(sim.role(1) == Role::Master);
    CHECK(sim.node(1).holds_vips);
    // The backup's timer was re-armed by the last advertisement it heard.
    const pf::Time expected = last_advert + kLatency + 3 * advbase + skew_time(advbase, 100);
    CHECK(sim.became(1, Role::Master) == expected);
    CHECK(sim.became(1, Role::Master) - kill_at <= 3 * advbase + skew_time(advbase, 100) + kLatency);
    CHECK(sim.election(1).transitions().last()->cause == pf::Cause::MasterDown);
  }
}

TEST_CASE("restart of the better node: preempt decides, and only after its bulk sync", "[election]") {
  struct Row {
    bool preempt;
    Role a_after_bulk;
    Role b_after_bulk;
  };
  for (const auto& r :
       std::vector<Row>{{true, Role::Master, Role::Backup}, {false, Role::Backup, Role::Master}}) {
    Sim sim = steady_pair(1s, r.preempt, r.preempt);
    sim.kill(0);
    sim.run_for(10s);
    REQUIRE(sim.role(1) == Role::Master);
    // A comes back with an incomplete state table: demoted, it must not take the group.
    sim.start(0, 16);
    sim.run_for(30s);
    CHECK(sim.role(0) == Role::Backup);
    CHECK(sim.role(1) == Role::Master);
    const pf::Time bulk_done = sim.now();
    sim.demote(0, 0);
    sim.run_for(5s);
    CHECK(sim.role(0) == r.a_after_bulk);
    CHECK(sim.role(1) == r.b_after_bulk);
    CHECK(sim.masters() == 1);
    if (r.preempt) {
      // On B's next advertisement after the demotion change; B steps down on A's first advert.
      CHECK(sim.became(0, Role::Master) > bulk_done);
      CHECK(sim.became(0, Role::Master) <= bulk_done + 1s + skew_time(1s, 100) + kLatency);
      CHECK(sim.became(1, Role::Backup) == sim.became(0, Role::Master) + kLatency);
      CHECK(sim.election(0).transitions().last()->cause == pf::Cause::Preempt);
    }
  }
}

TEST_CASE("a demoted master hands the group over, preempt or not", "[election]") {
  for (const bool preempt : {true, false}) {
    Sim sim = steady_pair(1s, preempt, preempt);
    const pf::Time link_down = sim.now();
    sim.demote(0, 64);  // a VIP interface lost carrier
    sim.run_for(1ms);
    CHECK(sim.role(1) == Role::Master);
    CHECK(sim.became(1, Role::Master) == link_down + kLatency);
    CHECK(sim.election(1).transitions().last()->cause == pf::Cause::PeerDemoted);
    sim.run_for(1ms);
    CHECK(sim.role(0) == Role::Backup);
    CHECK_FALSE(sim.node(0).holds_vips);
    // Carrier back: A takes the group back only with preempt.
    sim.demote(0, 0);
    sim.run_for(10s);
    CHECK(sim.role(0) == (preempt ? Role::Master : Role::Backup));
    CHECK(sim.masters() == 1);
  }
}

TEST_CASE("a demoted backup does not take over from a healthy master, even with preempt", "[election]") {
  Sim sim(1s, {{1, 100, true}, {2, 0, true}});
  sim.start(0);
  sim.run_for(5s);
  REQUIRE(sim.role(0) == Role::Master);
  sim.start(1, 16);  // better advskew, but bulk sync incomplete
  sim.run_for(20s);
  CHECK(sim.role(0) == Role::Master);
  CHECK(sim.role(1) == Role::Backup);
  const pf::Time bulk_done = sim.now();
  sim.demote(1, 0);
  sim.run_for(1s + skew_time(1s, 100) + kLatency);  // the master's next advertisement
  CHECK(sim.role(1) == Role::Master);
  CHECK(sim.became(1, Role::Master) > bulk_done);
  sim.run_for(1ms);
  CHECK(sim.role(0) == Role::Backup);
}

TEST_CASE("two nodes that end their bulk syncs together: the backup keeps to the master's new rank",
          "[election]") {
  // A booted alone and became master while its bulk sync (with no peer to answer) kept it
  // demoted; B booted before that ended. The two bulks end together, B's first: B must take the
  // master's rank from its next advertisement, which A sends as soon as its own demotion ends.
  for (const bool preempt : {false, true}) {
    Sim sim(1s, {{1, 0, preempt}, {2, 100, preempt}});
    sim.start(0, 16);
    sim.run_for(5s);
    REQUIRE(sim.role(0) == Role::Master);
    sim.start(1, 16);
    sim.run_for(2500ms);
    REQUIRE(sim.role(1) == Role::Backup);
    REQUIRE(sim.election(1).peer()->rank.demotion == 16);
    sim.demote(1, 0);
    sim.run_for(20ms);
    sim.demote(0, 0);
    sim.run_for(10s);
    CHECK(sim.role(0) == Role::Master);
    CHECK(sim.role(1) == Role::Backup);
    CHECK(sim.became(1, Role::Master) == pf::kNever);
  }
}

TEST_CASE("preempt with equal advskew: the lower node id coming back does not take the group", "[election]") {
  Sim sim(1s, {{1, 0, true}, {2, 0, true}});
  sim.start(0);
  sim.start(1);
  sim.run_for(10s);
  REQUIRE(sim.role(0) == Role::Master);
  sim.kill(0);
  sim.run_for(10s);
  REQUIRE(sim.role(1) == Role::Master);
  const pf::Time took = sim.became(1, Role::Master);
  // Back with the same advskew, first demoted (bulk sync), then not: neither its first advert
  // heard nor its demotion lifted is a reason to move the group again.
  sim.start(0, 16);
  sim.run_for(5s);
  sim.demote(0, 0);
  sim.run_for(20s);
  CHECK(sim.role(0) == Role::Backup);
  CHECK(sim.role(1) == Role::Master);
  CHECK(sim.became(1, Role::Master) == took);
  CHECK_FALSE(sim.node(0).holds_vips);
  // A better advskew is still preempted on.
  Sim better(1s, {{1, 0, true}, {2, 100, true}});
  better.start(1);
  better.run_for(10s);
  better.start(0);
  better.run_for(5s);
  CHECK(better.role(0) == Role::Master);
  CHECK(better.role(1) == Role::Backup);
}

TEST_CASE("split brain: cut both ways, both masters; healed within one interval", "[election]") {
  struct Row {
    pf::Time advbase;
    pf::Time cut_for;
  };
  // The cut must outlast the master-down interval (3.39 s at advbase 1 s) for B to take over.
  for (const auto& r : std::vector<Row>{{1s, 5s}, {100ms, 3s}, {1s, 10s}, {20ms, 100ms}}) {
    Sim sim = steady_pair(r.advbase);
    sim.cut(0, 1);
    sim.cut(1, 0);
    sim.run_for(r.cut_for);
    CHECK(sim.masters() == 2);
    CHECK(sim.node(0).holds_vips);
    CHECK(sim.node(1).holds_vips);
    const pf::Time heal_at = sim.now();
    const uint64_t announces_a = sim.node(0).announces;
    sim.heal();
    // Whichever of them advertises first, the worse one is backup within one of A's intervals.
    sim.run_for(sim.election(0).interval() + 2 * kLatency);
    CHECK(sim.masters() == 1);
    CHECK(sim.role(0) == Role::Master);
    CHECK(sim.role(1) == Role::Backup);
    CHECK_FALSE(sim.node(1).holds_vips);
    CHECK(sim.became(1, Role::Backup) - heal_at <= sim.election(0).interval() + 2 * kLatency);
    // A heard B's advertisement as master and re-announced the VIPs to undo B's announcements.
    CHECK(sim.node(0).announces > announces_a);
    sim.run_for(20 * r.advbase);
    CHECK(sim.masters() == 1);
  }
}

TEST_CASE("one-way cut: the backup that cannot hear the master takes over and is put back", "[election]") {
  Sim sim = steady_pair(1s);
  sim.cut(0, 1);  // B cannot hear A; A still hears B
  sim.run_for(5s);
  // B became master after 3.39 s of silence; A heard B's first advert and, ranking above, stayed
  // master and answered at once; B cannot hear that, so it stays master until the cut heals.
  CHECK(sim.role(0) == Role::Master);
  CHECK(sim.role(1) == Role::Master);
  CHECK(sim.election(0).worse_masters() > 0);
  sim.heal();
  sim.run_for(2s);
  CHECK(sim.masters() == 1);
  CHECK(sim.role(0) == Role::Master);
}

TEST_CASE("clean shutdown: the leaving advertisement hands over at once", "[election]") {
  for (const pf::Time advbase : {pf::Time{1s}, pf::Time{100ms}}) {
    Sim sim = steady_pair(advbase);
    const uint64_t sent = sim.node(0).adverts_sent;
    const pf::Time stop_at = sim.now();
    sim.shutdown(0);
    CHECK(sim.node(0).adverts_sent == sent + 1);
    CHECK_FALSE(sim.node(0).holds_vips);
    sim.run_for(5ms);
    CHECK(sim.role(1) == Role::Master);
    CHECK(sim.became(1, Role::Master) == stop_at + kLatency);
    CHECK(sim.election(1).transitions().last()->cause == pf::Cause::PeerLeaving);
  }
}

TEST_CASE("leaving advertisement: ranks below everyone; a master ignores it", "[election]") {
  pf::Election e({1, 1s, 0, false});
  e.start(pf::Time{0}, false);
  e.on_timer(3s);
  REQUIRE(e.role() == Role::Master);
  const auto a = e.on_advert(4s, {2, 1s, pf::kLeavingAdvskew, pf::kLeavingDemotion, true});
  CHECK_FALSE(a.any());
  CHECK(e.role() == Role::Master);
  const auto out = e.shutdown(5s);
  CHECK(out.send_advert);
  CHECK(out.release_vips);
  CHECK(e.advert().leaving);
  CHECK(e.advert().advskew == pf::kLeavingAdvskew);
  CHECK(e.advert().demotion == pf::kLeavingDemotion);
  CHECK(e.role() == Role::Init);
}

TEST_CASE("fault: no carrier anywhere releases the group; carrier back returns to backup", "[election]") {
  Sim sim = steady_pair(1s);
  const pf::Time fault_at = sim.now();
  sim.fault(0, true);
  CHECK(sim.role(0) == Role::Fault);
  CHECK_FALSE(sim.node(0).holds_vips);
  sim.run_for(10s);
  CHECK(sim.role(1) == Role::Master);
  CHECK(sim.became(1, Role::Master) <= fault_at + 3s + skew_time(1s, 100) + kLatency);
  sim.fault(0, false);
  sim.run_for(10s);
  CHECK(sim.role(0) == Role::Master);  // preempt on in steady_pair
  CHECK(sim.role(1) == Role::Backup);
}

TEST_CASE("the backup learns the master's interval instead of timing out a slower master", "[election]") {
  // B is configured ten times faster than A; it must time A out on A's interval, not its own.
  pf::Election b({2, 100ms, 0, false});
  pf::Time t = 5s;
  b.start(t, false);
  CHECK(b.master_down_interval() == 300ms);
  for (int i = 0; i < 10; ++i) {
    b.on_advert(t, {1, 1s, 0, 0, false});
    t += 1s;
    b.on_timer(t - 1ms);
    CHECK(b.role() == Role::Backup);
  }
  CHECK(b.master_down_interval() == 3s);
  const pf::Time down_at = t - 1s + 3s;
  CHECK(b.deadline() == down_at);
  b.on_timer(down_at - 1us);
  CHECK(b.role() == Role::Backup);
  b.on_timer(down_at);
  CHECK(b.role() == Role::Master);
}

TEST_CASE("an advertisement carrying our own node id is counted and ignored", "[election]") {
  pf::Election e({1, 1s, 0, false});
  e.start(pf::Time{0}, false);
  const auto a = e.on_advert(1s, {1, 1s, 0, 0, true});
  CHECK_FALSE(a.any());
  CHECK(e.role() == Role::Backup);
  CHECK(e.node_id_conflicts() == 1);
}

TEST_CASE("transitions are recorded with time and cause in a bounded ring", "[election]") {
  pf::Election e({1, 100ms, 0, true});
  pf::Time t{0};
  e.start(t, false);
  for (int i = 0; i < 40; ++i) {
    t += 1s;
    e.on_timer(t);  // backup -> master (master down)
    t += 1ms;
    e.on_advert(t, {2, 100ms, 0, 0, false});  // node 2 ranks below us: we stay master
    e.on_advert(t, {3, 100ms, pf::kLeavingAdvskew, pf::kLeavingDemotion, true});  // ignored by a master
    t += 1ms;
    e.set_fault(t, true);
    t += 1ms;
    e.set_fault(t, false);
  }
  const auto& log = e.transitions();
  CHECK(log.total() == 1 + 40 * 3);
  REQUIRE(log.size() == pf::TransitionLog::kCapacity);
  for (std::size_t i = 1; i < log.size(); ++i) CHECK(log[i - 1].at <= log[i].at);
  CHECK(log[log.size() - 1].to == Role::Backup);
  CHECK(log[log.size() - 1].cause == pf::Cause::FaultCleared);
  CHECK(log[log.size() - 2].to == Role::Fault);
  CHECK(log[log.size() - 3].cause == pf::Cause::MasterDown);
}

TEST_CASE("keepalived mode: the role is forced, nothing is timed or advertised", "[election]") {
  pf::Election e({1, 100ms, 0, false});
  e.force_role(1s, Role::Master);
  CHECK(e.role() == Role::Master);
  CHECK(e.deadline() == pf::kNever);
  CHECK_FALSE(e.on_timer(10s).any());
  e.force_role(2s, Role::Backup);
  CHECK(e.deadline() == pf::kNever);
  CHECK(e.transitions().total() == 2);
  CHECK(e.transitions().last()->cause == pf::Cause::External);
}

TEST_CASE("after a fault the backup does not take over on a rank the master held before it", "[election]") {
  // lan1's switch restarts: both nodes lose it (64 each), the group stays on A. Then B loses lan0
  // too (fault) and hears nothing while A's lan1 comes back and A advertises demotion 0. B's
  // carrier returns one link after the other: back to backup on lan0, undemoted on lan1 a moment
  // later, before A's next advertisement. The demotion B last heard from A (64) is no longer A's.
  Sim sim = steady_pair(1s, false, false);
  sim.demote(1, 64);
  sim.demote(0, 64);
  sim.run_for(10ms);
  REQUIRE(sim.role(0) == Role::Master);
  REQUIRE(sim.role(1) == Role::Backup);
  const uint64_t a_transitions = sim.election(0).transitions().total();
  sim.cut(0, 1);
  sim.cut(1, 0);
  sim.fault(1, true);
  sim.run_for(500ms);
  sim.demote(0, 0);
  sim.run_for(10ms);
  sim.heal();
  sim.fault(1, false);
  sim.run_for(10ms);
  sim.demote(1, 0);
  sim.run_for(10s);
  // The group never moved: B waited for A's next advertisement, which it cannot take over from.
  CHECK(sim.became(1, Role::Master) == pf::kNever);
  CHECK(sim.election(0).transitions().total() == a_transitions);
  CHECK(sim.role(0) == Role::Master);
  CHECK(sim.role(1) == Role::Backup);
  CHECK(sim.election(1).peer()->rank.demotion == 0);
}

TEST_CASE("a master whose advertisements do not leave hands over once it is demoted for it", "[election]") {
  for (const bool demoted : {false, true}) {
    INFO((demoted ? "demoted, as the service does after three lost" : "not demoted"));
    Sim sim = steady_pair(1s);
    sim.cut(0, 1);  // A's advertisements leave on no interface; it still hears B
    if (demoted) sim.demote(0, pf::kAdvertSendDemotion);
    sim.run_for(10s);
    // B heard nothing and took the group; A, better ranked, keeps it too unless demoted.
    CHECK(sim.role(1) == Role::Master);
    CHECK(sim.masters() == (demoted ? 1u : 2u));
    CHECK(sim.node(0).holds_vips == !demoted);
  }
}

TEST_CASE("advskew changed on a running master: a backup with preempt takes the group at once",
          "[election]") {
  for (const bool preempt : {true, false}) {
    Sim sim = steady_pair(1s, true, preempt);
    REQUIRE(sim.role(0) == Role::Master);
    const pf::Time changed = sim.now();
    const uint64_t adverts = sim.node(0).adverts_sent;
    sim.set_preference(0, 200, true);  // maintenance: A now ranks below B's 100
    CHECK(sim.node(0).adverts_sent == adverts + 1);
    CHECK(sim.election(0).advert().advskew == 200);
    CHECK(sim.election(0).interval() == 1s + skew_time(1s, 200));
    sim.run_for(2ms);
    if (preempt) {
      CHECK(sim.role(1) == Role::Master);
      CHECK(sim.became(1, Role::Master) == changed + kLatency);
      CHECK(sim.election(1).transitions().last()->cause == pf::Cause::Preempt);
      CHECK(sim.role(0) == Role::Backup);
    } else {
      // preempt governs advskew: without it B waits for A to fail or to be demoted.
      sim.run_for(20s);
      CHECK(sim.role(0) == Role::Master);
      CHECK(sim.role(1) == Role::Backup);
    }
    CHECK(sim.masters() == 1);
  }
}

TEST_CASE("advskew and preempt changed on a backup: it takes the group on the master's next advertisement",
          "[election]") {
  Sim sim = steady_pair(1s, true, false);
  REQUIRE(sim.role(1) == Role::Backup);
  const pf::Time changed = sim.now();
  sim.set_preference(1, 0, false);  // equal skew: the lower node id keeps the group, no preempt anyway
  sim.run_for(5s);
  CHECK(sim.role(0) == Role::Master);
  CHECK(sim.node(1).adverts_sent == 0);  // a backup says nothing of it
  sim.set_preference(0, 50, true);
  sim.run_for(5s);
  CHECK(sim.role(0) == Role::Master);  // B ranks above A now, but has no preempt
  sim.set_preference(1, 0, true);
  sim.run_for(1s + skew_time(1s, 50) + kLatency);
  CHECK(sim.role(1) == Role::Master);
  CHECK(sim.became(1, Role::Master) > changed);
  CHECK(sim.election(1).transitions().last()->cause == pf::Cause::Preempt);
  sim.run_for(1ms);
  CHECK(sim.role(0) == Role::Backup);
  CHECK(sim.masters() == 1);
  // Out of range: 255 is a leaving master's skew, never a running one's.
  sim.set_preference(1, 255, true);
  CHECK(sim.election(1).advert().advskew == pf::kMaxAdvskew);
}

TEST_CASE("advbase raised on a running master: it says so at once, and the backup waits for the new interval",
          "[election]") {
  Sim sim = steady_pair(100ms);
  REQUIRE(sim.role(0) == Role::Master);
  const pf::Time changed = sim.now();
  const uint64_t adverts = sim.node(0).adverts_sent;
  sim.set_advbase(0, 1s);
  CHECK(sim.node(0).adverts_sent == adverts + 1);
  CHECK(sim.election(0).advert().advbase == 1s);
  sim.run_for(kLatency);
  // B now waits three of A's new intervals: A's next advertisement comes 1 s on, well within them.
  CHECK(sim.election(1).master_down_interval() == 3s + skew_time(100ms, 100));
  sim.run_for(10s);
  CHECK(sim.role(0) == Role::Master);
  CHECK(sim.role(1) == Role::Backup);
  CHECK(sim.node(0).adverts_sent == adverts + 1 + 10);
  // Killed, A is declared down after three of its new intervals and B's skew.
  const pf::Time last_advert = changed + 10s;
  sim.kill(0);
  sim.run_for(5s);
  CHECK(sim.became(1, Role::Master) == last_advert + kLatency + 3s + skew_time(100ms, 100));
}

TEST_CASE("advbase lowered on a running master: adverts come faster, and a kill is seen sooner",
          "[election]") {
  Sim sim = steady_pair(1s);
  REQUIRE(sim.role(0) == Role::Master);
  const pf::Time changed = sim.now();
  const uint64_t adverts = sim.node(0).adverts_sent;
  sim.set_advbase(0, 100ms);
  sim.run_for(1s);
  CHECK(sim.node(0).adverts_sent == adverts + 1 + 10);
  CHECK(sim.election(1).master_down_interval() == 300ms + skew_time(1s, 100));
  sim.kill(0);
  sim.run_for(2s);
  CHECK(sim.role(1) == Role::Master);
  CHECK(sim.became(1, Role::Master) == changed + 1s + kLatency + 300ms + skew_time(1s, 100));
}

TEST_CASE(
    "advbase changed on a backup: its skew's share follows, and a backup alone no longer waits the old one",
    "[election]") {
  Sim sim(255s, {{1, 0, true}, {2, 128, true}});
  sim.start(1);  // B alone: no master heard, it would wait 3 * 255 s and half of 255 s
  sim.run_for(1s);
  REQUIRE(sim.role(1) == Role::Backup);
  const pf::Time changed = sim.now();
  sim.set_advbase(1, 1s);
  CHECK(sim.node(1).adverts_sent == 0);  // a backup says nothing of it
  CHECK(sim.election(1).master_down_interval() == 3s + 500ms);
  sim.run_for(10s);
  CHECK(sim.role(1) == Role::Master);
  CHECK(sim.became(1, Role::Master) == changed + 3s + 500ms);
  // Raised again, it keeps the deadline it has: a master it hears re-arms the timer anyway.
  Sim pair = steady_pair(1s);
  const pf::Time deadline = pair.election(1).deadline();
  pair.set_advbase(1, 10s);
  CHECK(pair.election(1).deadline() == deadline);
  CHECK(pair.election(1).master_down_interval() == 3s + skew_time(10s, 100));
}
