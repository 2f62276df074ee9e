#include "failover/demotion.h"

#include <algorithm>

namespace pairwall::failover {
namespace {

uint32_t weight(DemoteReason reason) {
  switch (reason) {
    case DemoteReason::BulkSync:
      return kBulkSyncDemotion;
    case DemoteReason::Carrier:
      return kCarrierDemotion;
    case DemoteReason::Engine:
      return kEngineDemotion;
    case DemoteReason::AdvertSend:
      return kAdvertSendDemotion;
    case DemoteReason::TrackedLink:
      return kTrackedLinkDemotion;
    case DemoteReason::Admin:
      break;
  }
  return 0;
}

}  // namespace

const char* demote_reason_name(DemoteReason reason) {
  switch (reason) {
    case DemoteReason::BulkSync:
      return "bulk sync incomplete";
    case DemoteReason::Carrier:
      return "VIP interface without carrier";
    case DemoteReason::Engine:
      return "engine unhealthy";
    case DemoteReason::AdvertSend:
      return "advertisements not leaving";
    case DemoteReason::Admin:
      return "admin";
    case DemoteReason::TrackedLink:
      return "tracked interface without carrier";
  }
  return "unknown";
}

const char* demote_reason_key(DemoteReason reason) {
  switch (reason) {
    case DemoteReason::BulkSync:
      return "bulk_sync";
    case DemoteReason::Carrier:
      return "carrier";
    case DemoteReason::Engine:
      return "engine";
    case DemoteReason::AdvertSend:
      return "advert_send";
    case DemoteReason::Admin:
      return "admin";
    case DemoteReason::TrackedLink:
      return "tracked_link";
  }
  return "unknown";
}

bool AdvertSendRecord::record(bool left) {
  // Counts the outcomes that would change the verdict; one of the other kind starts over.
  in_a_row_ = left == failing_ ? in_a_row_ + 1 : 0;
  if (in_a_row_ >= (failing_ ? kSuccessesToClear : kFailuresToFail)) {
    failing_ = !failing_;
    in_a_row_ = 0;
  }
  return failing_;
}

uint32_t Demotion::contribution(DemoteReason reason) const {
  if (!active(reason)) return 0;
  return reason == DemoteReason::Admin ? admin_ : weight(reason);
}

void Demotion::set(DemoteReason reason, bool active) {
  if (reason == DemoteReason::Admin) return;  // moved by demote()/promote() only
  active_[static_cast<std::size_t>(reason)] = active;
}

bool Demotion::active(DemoteReason reason) const {
  if (reason == DemoteReason::Admin) return admin_ > 0;
  return active_[static_cast<std::size_t>(reason)];
}

void Demotion::demote(uint32_t amount) {
  admin_ = std::min<uint64_t>(uint64_t{admin_} + amount, kMaxDemotion);
}

void Demotion::promote(uint32_t amount) {
  admin_ = amount >= admin_ ? 0 : admin_ - amount;
}

uint32_t Demotion::total() const {
  uint64_t sum = admin_;
  for (std::size_t i = 0; i < kDemoteReasonCount; ++i) {
    if (active_[i]) sum += weight(static_cast<DemoteReason>(i));
  }
  return static_cast<uint32_t>(std::min<uint64_t>(sum, kMaxDemotion));
}

std::vector<std::string> Demotion::reasons() const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < kDemoteReasonCount; ++i) {
    const auto r = static_cast<DemoteReason>(i);
    if (active(r)) {
      out.push_back(std::string(demote_reason_name(r)) + " (+" + std::to_string(contribution(r)) + ")");
    }
  }
  return out;
}

}  // namespace pairwall::failover
