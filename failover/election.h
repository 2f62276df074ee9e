// The CARP-like election of one failover group, as a pure state machine: no sockets, no clock,
// no logging. The service feeds it events with the time they happened and carries out the
// Actions it returns; tests drive two of them against each other with a fake clock.
//
// Timing (OpenBSD carp(4), DESIGN.md "Failover"):
//   a master advertises every   advbase + advskew/256 * advbase
//   a backup declares it down   3 * (the master's advertised interval) + own advskew/256 * own advbase
//                               (before it has heard a master: 3 * own advbase + own skew)
// Ranking: lower (demotion, advskew, node id) is better. The tuple is total as long as node ids
// differ, so two nodes that hear each other always agree on the winner.
//
// Who takes over from whom:
//   - a master that hears a better master steps down, preempt or not: this is what ends a split
//     brain within one advertisement of the better node;
//   - a backup with preempt takes over from a master it ranks above on (demotion, advskew); a tie
//     there is not preempted, whatever the node ids;
//   - a backup without preempt takes over only from a master with a higher demotion than its own.
//     Demotion means "this node cannot serve well" (a VIP interface without carrier, an engine not
//     serving its queue, an incomplete bulk sync, maintenance), so a healthier node always takes
//     the group; preempt only governs advskew, i.e. taste, as in carp(4) where demotion is what
//     moves a group between healthy nodes;
//   - a backup decides both on the master's advertisements as they arrive, never on a change of
//     its own rank alone: the master's rank may be changing at the same moment, unheard yet;
//   - a master leaving cleanly sends one last advertisement flagged `leaving`; a backup that hears
//     it becomes master at once instead of waiting out the master-down interval.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pairwall::failover {

// Microseconds since an arbitrary monotonic epoch chosen by the caller. Microseconds because
// advskew/256 of a 100 ms advbase is not a whole number of milliseconds.
using Time = std::chrono::microseconds;
inline constexpr Time kNever = Time::max();

enum class Role : uint8_t { Init, Backup, Master, Fault };
std::string_view role_name(Role role);

// Why a transition happened; logged, shown by `pairwallctl failover status`.
enum class Cause : uint8_t {
  Start,         // INIT -> BACKUP: the service started
  MasterDown,    // BACKUP -> MASTER: no advertisement for the master-down interval
  PeerLeaving,   // BACKUP -> MASTER: the master announced a clean shutdown
  Preempt,       // BACKUP -> MASTER: preempt on, and we rank above the master
  PeerDemoted,   // BACKUP -> MASTER: the master is more demoted than we are
  PeerBetter,    // MASTER -> BACKUP: a better master was heard (also ends a split brain)
  Fault,         // -> FAULT: no VIP interface has carrier
  FaultCleared,  // FAULT -> BACKUP
  Shutdown,      // -> INIT: the service is stopping
  External,      // keepalived mode: the role its notify script reported
};
std::string_view cause_name(Cause cause);

inline constexpr uint8_t kMaxAdvskew = 254;
inline constexpr uint32_t kMinAdvbaseMs = 10;
inline constexpr uint32_t kMaxAdvbaseMs = 255'000;  // carp(4)'s advbase is at most 255 s
// A leaving master advertises these so that no implementation ranks it above anyone.
inline constexpr uint8_t kLeavingAdvskew = 255;
inline constexpr uint32_t kLeavingDemotion = UINT32_MAX;

struct Rank {
  uint32_t demotion = 0;
  uint8_t advskew = 0;
  uint32_t node_id = 0;
  friend auto operator<=>(const Rank&, const Rank&) = default;
};
// True when `a` wins over `b`.
inline bool ranks_above(const Rank& a, const Rank& b) {
  return a < b;
}

// What an authenticated advertisement told us; the codec has already checked vhid and replay.
struct PeerAdvert {
  uint32_t node_id = 0;
  Time advbase{0};
  uint8_t advskew = 0;
  uint32_t demotion = 0;
  bool leaving = false;
};

struct ElectionConfig {
  uint32_t node_id = 0;
  Time advbase = std::chrono::seconds(1);
  uint8_t advskew = 0;  // 0..kMaxAdvskew
  bool preempt = true;
};

// What the caller must do after an event, in this order: release, acquire, send, announce.
// send_advert always sends advert() as it is after the event.
struct Actions {
  bool release_vips = false;  // remove the VIPs (we are no longer master)
  bool acquire_vips = false;  // add the VIPs (we just became master)
  bool send_advert = false;   // send advert() now on every VIP interface
  bool announce = false;      // start a gratuitous ARP / unsolicited NA burst for every VIP

  Actions& operator|=(const Actions& o) {
    release_vips |= o.release_vips;
    acquire_vips |= o.acquire_vips;
    send_advert |= o.send_advert;
    announce |= o.announce;
    return *this;
  }
  bool any() const { return release_vips || acquire_vips || send_advert || announce; }
};

struct Transition {
  Time at{0};
  Role from = Role::Init;
  Role to = Role::Init;
  Cause cause = Cause::Start;
  uint32_t peer = 0;  // the node whose advertisement caused it, 0 when none
};

// The last transitions, oldest first, in a fixed ring so status never allocates.
class TransitionLog {
 public:
  static constexpr std::size_t kCapacity = 32;
  void record(const Transition& t);
  std::size_t size() const { return count_ < kCapacity ? count_ : kCapacity; }
  const Transition& operator[](std::size_t i) const;  // 0 = oldest kept
  uint64_t total() const { return count_; }
  const Transition* last() const { return count_ ? &(*this)[size() - 1] : nullptr; }

 private:
  std::array<Transition, kCapacity> ring_{};
  uint64_t count_ = 0;
};

// The fields of our next advertisement.
struct OwnAdvert {
  Time advbase{0};
  uint8_t advskew = 0;
  uint32_t demotion = 0;
  bool leaving = false;
};

// What a node advertising every `advbase` says as it leaves the group.
inline OwnAdvert leaving_advert(Time advbase) {
  return OwnAdvert{advbase, kLeavingAdvskew, kLeavingDemotion, true};
}

struct PeerSeen {
  uint32_t node_id = 0;
  Time at{0};
  Rank rank;
  Time interval{0};  // the peer's advertisement interval
  bool leaving = false;
};

class Election {
 public:
  explicit Election(const ElectionConfig& config);

  // INIT -> BACKUP (or FAULT) and arm the master-down timer.
  Actions start(Time now, bool fault);
  Actions on_advert(Time now, const PeerAdvert& advert);
  // Call when now >= deadline(); calling it early is harmless.
  Actions on_timer(Time now);
  Actions set_demotion(Time now, uint32_t demotion);
  // carp(4)'s `ifconfig carpN advskew N [-]preempt` on a running group (a reload): a master
  // advertises its new skew at once, so that a backup it now ranks below preempts it on this
  // advertisement (with preempt); a backup ranks itself anew on the master's next advertisement,
  // as after set_demotion(), and waits out the master-down interval of its new skew from then on.
  Actions set_preference(Time now, uint8_t advskew, bool preempt);
  // carp(4)'s `ifconfig carpN advbase N` on a running group (a reload). A master advertises the
  // new interval at once: a backup waits out three of the intervals it last heard, and a master
  // that went from 100 ms to 1 s and stayed silent until its next advertisement would be declared
  // down. A backup's own advbase counts in its master-down interval through its skew, and alone
  // before it has heard a master: its timer is shortened to the new interval where that ends
  // sooner, never lengthened (a master it hears re-arms it anyway).
  Actions set_advbase(Time now, Time advbase);
  // Fault: no VIP interface of the group has carrier; we can serve nothing, so we step out.
  Actions set_fault(Time now, bool fault);
  // Clean shutdown: a master sends one leaving advertisement and releases. Ends in INIT.
  Actions shutdown(Time now);
  // keepalived mode: an external VRRP implementation decides; we only record and act on VIPs
  // when asked to own them (never: keepalived owns its virtual_ipaddress).
  void force_role(Time now, Role role);

  // When on_timer() must next be called; kNever when nothing is pending.
  Time deadline() const;

  Role role() const { return role_; }
  uint32_t demotion() const { return demotion_; }
  const ElectionConfig& config() const { return config_; }
  Rank rank() const { return Rank{demotion_, config_.advskew, config_.node_id}; }
  OwnAdvert advert() const;
  Time interval() const { return interval_of(config_.advbase, config_.advskew); }
  // The master-down interval in force now (depends on the last master heard).
  Time master_down_interval() const;
  const std::optional<PeerSeen>& peer() const { return peer_; }
  const TransitionLog& transitions() const { return log_; }
  // Advertisements from a worse master heard while we were master: a split brain we ended, or
  // the farewell of a master we just preempted. Each was answered with an advertisement and an
  // announcement.
  uint64_t worse_masters() const { return worse_masters_; }
  // Advertisements carrying our own node id from another sender: a misconfiguration.
  uint64_t node_id_conflicts() const { return node_id_conflicts_; }

  static Time interval_of(Time advbase, uint8_t advskew) { return advbase + advbase * advskew / 256; }

 private:
  Actions become(Time now, Role to, Cause cause, uint32_t peer);
  bool should_take_over(const Rank& master) const;

  ElectionConfig config_;
  Role role_ = Role::Init;
  uint32_t demotion_ = 0;
  bool leaving_ = false;
  Time next_advert_ = kNever;
  Time master_down_at_ = kNever;
  std::optional<PeerSeen> peer_;
  TransitionLog log_;
  uint64_t worse_masters_ = 0;
  uint64_t node_id_conflicts_ = 0;
  bool fault_ = false;
};

}  // namespace pairwall::failover
