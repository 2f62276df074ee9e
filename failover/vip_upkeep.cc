#include "failover/vip_upkeep.h"

#include <algorithm>

namespace pairwall::failover {

Time VipUpkeep::renew_interval() const {
  if (lease_s_ == 0) return kPermanentRenewal;
  // Three renewals per lease: two may fail before the kernel drops the VIPs.
  return std::max<Time>(std::chrono::seconds(lease_s_) / 3, std::chrono::milliseconds(500));
}

void VipUpkeep::added(Time t, bool failed) {
  held_ = true;
  failed_ = failed;
  const Time interval = failed ? std::min(kRetryInterval, renew_interval()) : renew_interval();
  next_ = interval == kNever ? kNever : t + interval;
}

void VipUpkeep::removed(Time t, bool failed) {
  held_ = false;
  failed_ = failed;
  next_ = failed ? t + kRetryInterval : kNever;
}

VipWork VipUpkeep::due(Time t) const {
  if (t < next_) return VipWork::None;
  return held_ ? VipWork::Add : VipWork::Remove;
}

}  // namespace pairwall::failover
