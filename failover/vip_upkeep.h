// When the service next adds or removes its VIPs, between the election's decisions: a master
// renews the lease about every lease/3 (a permanent VIP every kPermanentRenewal) and retries an
// add that failed; a backup retries a removal that failed. A permanent VIP (vip_lease_s = -1) has
// no lease to run out: without these retries one whose add failed at the takeover would be missing
// for as long as the node is master, and one whose removal failed would stay on the backup, both
// answering for it, for ever. Pure, like the election: the service does the netlink work and
// reports each outcome here.
#pragma once

#include <chrono>
#include <cstdint>

#include "failover/election.h"

namespace pairwall::failover {

enum class VipWork : uint8_t { None, Add, Remove };

class VipUpkeep {
 public:
  // A failed add or removal is tried again after this, or at the renewal cadence if sooner: often
  // enough that a VIP comes back soon after what kept it out, seldom enough not to flood netlink
  // and the journal.
  static constexpr Time kRetryInterval = std::chrono::seconds(1);
  // A permanent VIP has no lease to renew, but is added again at this cadence while held, as a
  // leased one is at each renewal: one that another program removed (a network manager
  // reconfiguring the link, `ip addr flush`) comes back within seconds instead of never.
  static constexpr Time kPermanentRenewal = std::chrono::seconds(5);

  explicit VipUpkeep(uint32_t lease_s) : lease_s_(lease_s) {}

  // Every VIP added (takeover, renewal or retry) at `t`; `failed`: one or more were not.
  void added(Time t, bool failed);
  // Every VIP removed (stepping down, the leftovers at start, or a retry) at `t`.
  void removed(Time t, bool failed);

  // What is due at `t`: renewing or retrying the add while the VIPs are to be held, retrying the
  // removal while they are not.
  VipWork due(Time t) const;
  // A reload's lease: the renewal cadence follows it from the next add on.
  void set_lease(uint32_t lease_s) { lease_s_ = lease_s; }
  Time next() const { return next_; }  // kNever: nothing until the election decides again
  bool retrying() const { return failed_; }

 private:
  Time renew_interval() const;

  uint32_t lease_s_;  // 0: permanent
  bool held_ = false;
  bool failed_ = false;
  Time next_ = kNever;
};

}  // namespace pairwall::failover
