#include "failover/election.h"

#include <algorithm>
#include <tuple>

namespace pairwall::failover {

std::string_view role_name(Role role) {
  switch (role) {
    case Role::Init:
      return "init";
    case Role::Backup:
      return "backup";
    case Role::Master:
      return "master";
    case Role::Fault:
      return "fault";
  }
  return "unknown";
}

std::string_view cause_name(Cause cause) {
  switch (cause) {
    case Cause::Start:
      return "start";
    case Cause::MasterDown:
      return "master down";
    case Cause::PeerLeaving:
      return "master left cleanly";
    case Cause::Preempt:
      return "preempt";
    case Cause::PeerDemoted:
      return "master more demoted";
    case Cause::PeerBetter:
      return "better master heard";
    case Cause::Fault:
      return "no VIP interface has carrier";
    case Cause::FaultCleared:
      return "carrier back";
    case Cause::Shutdown:
      return "shutdown";
    case Cause::External:
      return "external driver";
  }
  return "unknown";
}

void TransitionLog::record(const Transition& t) {
  ring_[count_ % kCapacity] = t;
  ++count_;
}

const Transition& TransitionLog::operator[](std::size_t i) const {
  const uint64_t first = count_ < kCapacity ? 0 : count_ - kCapacity;
  return ring_[(first + i) % kCapacity];
}

Election::Election(const ElectionConfig& config) : config_(config) {
  if (config_.advskew > kMaxAdvskew) config_.advskew = kMaxAdvskew;
}

OwnAdvert Election::advert() const {
  if (leaving_) return leaving_advert(config_.advbase);
  return OwnAdvert{config_.advbase, config_.advskew, demotion_, false};
}

Time Election::master_down_interval() const {
  const Time own_skew = config_.advbase * config_.advskew / 256;
  // RFC 5798 6.1 learns Master_Adv_Interval from the master's adverts; so do we. Before the first
  // (at start) there is only our own advbase, and a master advertising less often than three of
  // them plus our skew is not waited for: hence one advbase on both nodes (README).
  if (peer_ && !peer_->leaving) return 3 * peer_->interval + own_skew;
  return 3 * config_.advbase + own_skew;
}

Time Election::deadline() const {
  switch (role_) {
    case Role::Master:
      return next_advert_;
    case Role::Backup:
      return master_down_at_;
    case Role::Init:
    case Role::Fault:
      break;
  }
  return kNever;
}

Actions Election::become(Time now, Role to, Cause cause, uint32_t peer) {
  Actions a;
  const Role from = role_;
  if (from == to) return a;
  role_ = to;
  log_.record(Transition{now, from, to, cause, peer});
  if (from == Role::Master) a.release_vips = true;
  next_advert_ = kNever;
  master_down_at_ = kNever;
  switch (to) {
    case Role::Master:
      a.acquire_vips = true;
      a.send_advert = true;
      a.announce = true;
      next_advert_ = now + interval();
      break;
    case Role::Backup:
      master_down_at_ = now + master_down_interval();
      break;
    case Role::Init:
    case Role::Fault:
      break;
  }
  return a;
}

bool Election::should_take_over(const Rank& master) const {
  // The node id only decides between two masters (a split brain). Preempting on it would move a
  // group between equally configured nodes each time the lower id restarts: carp(4) preempts only
  // a master that advertises slower, VRRP (RFC 5798 6.4.2) only one of lower priority.
  if (config_.preempt)
    return std::tie(demotion_, config_.advskew) < std::tie(master.demotion, master.advskew);
  return demotion_ < master.demotion;
}

Actions Election::start(Time now, bool fault) {
  fault_ = fault;
  leaving_ = false;
  if (role_ != Role::Init) return {};
  return fault ? become(now, Role::Fault, Cause::Fault, 0) : become(now, Role::Backup, Cause::Start, 0);
}

Actions Election::on_advert(Time now, const PeerAdvert& advert) {
  if (advert.node_id == config_.node_id) {
    ++node_id_conflicts_;
    return {};
  }
  const Rank theirs{advert.demotion, advert.advskew, advert.node_id};
  peer_ = PeerSeen{advert.node_id, now, theirs, interval_of(advert.advbase, advert.advskew), advert.leaving};

  switch (role_) {
    case Role::Init:
    case Role::Fault:
      return {};
    case Role::Backup:
      if (advert.leaving) return become(now, Role::Master, Cause::PeerLeaving, advert.node_id);
      if (should_take_over(theirs)) {
        const Cause why = demotion_ < theirs.demotion ? Cause::PeerDemoted : Cause::Preempt;
        return become(now, Role::Master, why, advert.node_id);
      }
      master_down_at_ = now + master_down_interval();
      return {};
    case Role::Master:
      if (advert.leaving) return {};
      if (ranks_above(theirs, rank())) {
        // One last advertisement as we step down: if the better node did not know we were
        // master (a healed split brain), it learns it now and re-announces the VIPs, pulling
        // back the ARP/ND caches our own announcements had moved.
        Actions a = become(now, Role::Backup, Cause::PeerBetter, advert.node_id);
        a.send_advert = true;
        return a;
      }
      // Two masters and we win: tell the other one now rather than at our next interval, and
      // pull the LAN's ARP/ND caches back to us in case its announcements moved them.
      ++worse_masters_;
      next_advert_ = now + interval();
      return Actions{.send_advert = true, .announce = true};
  }
  return {};
}

Actions Election::on_timer(Time now) {
  switch (role_) {
    case Role::Master:
      if (now < next_advert_) return {};
      next_advert_ = now + interval();
      return Actions{.send_advert = true};
    case Role::Backup:
      if (now < master_down_at_) return {};
      return become(now, Role::Master, Cause::MasterDown, 0);
    case Role::Init:
    case Role::Fault:
      break;
  }
  return {};
}

Actions Election::set_demotion(Time now, uint32_t demotion) {
  if (demotion == demotion_) return {};
  demotion_ = demotion;
  switch (role_) {
    case Role::Master:
      // The backup re-ranks us on this advertisement instead of the next one.
      next_advert_ = now + interval();
      return Actions{.send_advert = true};
    case Role::Backup:
      // The master's next advertisement decides (on_advert), as in carp(4), not the rank it last
      // advertised: that may be changing too. Two nodes that boot together end their bulk syncs
      // together, and a backup that took over on the master's last rank, still demoted by its
      // own bulk, would move the group for nothing.
      return {};
    case Role::Init:
    case Role::Fault:
      break;
  }
  return {};
}

Actions Election::set_preference(Time now, uint8_t advskew, bool preempt) {
  advskew = std::min(advskew, kMaxAdvskew);  // 255 is a leaving master's
  const bool skew_changed = advskew != config_.advskew;
  config_.advskew = advskew;
  config_.preempt = preempt;
  if (role_ != Role::Master || !skew_changed) return {};
  next_advert_ = now + interval();
  return Actions{.send_advert = true};
}

Actions Election::set_advbase(Time now, Time advbase) {
  if (advbase == config_.advbase) return {};
  config_.advbase = advbase;
  switch (role_) {
    case Role::Master:
      next_advert_ = now + interval();
      return Actions{.send_advert = true};
    case Role::Backup:
      master_down_at_ = std::min(master_down_at_, now + master_down_interval());
      return {};
    case Role::Init:
    case Role::Fault:
      break;
  }
  return {};
}

Actions Election::set_fault(Time now, bool fault) {
  if (fault == fault_) return {};
  fault_ = fault;
  if (role_ == Role::Init) return {};
  if (fault) return become(now, Role::Fault, Cause::Fault, 0);
  return become(now, Role::Backup, Cause::FaultCleared, 0);
}

Actions Election::shutdown(Time now) {
  Actions a;
  if (role_ == Role::Master) {
    leaving_ = true;
    a.send_advert = true;
  }
  a |= become(now, Role::Init, Cause::Shutdown, 0);
  return a;
}

void Election::force_role(Time now, Role role) {
  become(now, role, Cause::External, 0);
  // The external driver advertises and times out masters; we must not.
  next_advert_ = kNever;
  master_down_at_ = kNever;
}

}  // namespace pairwall::failover
