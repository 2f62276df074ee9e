// The demotion counter of a failover group: the sum of the reasons this node should not be master
// right now. Advertised in every advertisement and ranked before advskew, so the healthier node
// of the pair holds the group (carp(4)'s carpdemote, with the reasons kept apart so status can say
// why).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace pairwall::failover {

enum class DemoteReason : uint8_t {
  BulkSync,     // the bulk resync from the peer has not ended: our state table is incomplete
  Carrier,      // a VIP interface has no carrier: as master we would black-hole that side
  Engine,       // the packet engine is not serving its queues
  AdvertSend,   // our advertisements left on no interface, three in a row (AdvertSendRecord)
  Admin,        // raised by hand (`pairwallctl failover demote N`), e.g. for maintenance
  TrackedLink,  // a tracked interface ([failover] track_interfaces) has no carrier: an uplink is gone
};
inline constexpr std::size_t kDemoteReasonCount = 6;
const char* demote_reason_name(DemoteReason reason);
const char* demote_reason_key(DemoteReason reason);  // snake_case, for metrics labels

// Weights of the automatic reasons. A node that cannot pass traffic on one side (carrier, engine)
// ranks below one that passes everything but would reset connections it has not synced yet.
inline constexpr uint32_t kCarrierDemotion = 64;
inline constexpr uint32_t kTrackedLinkDemotion = 64;
inline constexpr uint32_t kEngineDemotion = 64;
inline constexpr uint32_t kBulkSyncDemotion = 16;
// A master that cannot advertise passes traffic, but the backup, hearing nothing, takes the group:
// below a node that advertises, so that it steps down on hearing it, yet above one with a VIP
// interface without carrier or an engine not serving, which it may still take over from.
inline constexpr uint32_t kAdvertSendDemotion = 32;
// The sum stays below the value a leaving master advertises.
inline constexpr uint32_t kMaxDemotion = UINT32_MAX / 2;

// Whether our advertisements leave, as carp(4) judges its own (CARP_SENDAD_MAX_ERRORS,
// CARP_SENDAD_MIN_SUCCESS): failing once three in a row went out on no interface, and again fine
// once three in a row went out. A backup sends none, so a node stays failing until it is master
// again and advertises: forgotten at the step-down, a node with better rank and preempt would
// take the group back at once and lose it again three advertisements later, for ever.
class AdvertSendRecord {
 public:
  static constexpr uint32_t kFailuresToFail = 3;
  static constexpr uint32_t kSuccessesToClear = 3;

  // One advertisement; `left`: it was sent on at least one interface. Returns failing().
  bool record(bool left);
  bool failing() const { return failing_; }

 private:
  uint32_t in_a_row_ = 0;  // failures while not failing, successes while failing
  bool failing_ = false;
};

class Demotion {
 public:
  // Automatic reasons are on or off; their weight is fixed.
  void set(DemoteReason reason, bool active);
  bool active(DemoteReason reason) const;
  // The administrative part moves by hand and never below zero (carp(4) semantics). demote()
  // saturates at kMaxDemotion.
  void demote(uint32_t amount);
  void promote(uint32_t amount);
  uint32_t admin() const { return admin_; }

  uint32_t total() const;
  // What `reason` adds to the total now (0 when inactive).
  uint32_t contribution(DemoteReason reason) const;
  // One entry per active reason, e.g. "bulk sync incomplete (+16)", "admin (+5)".
  std::vector<std::string> reasons() const;

 private:
  std::array<bool, kDemoteReasonCount> active_{};
  uint32_t admin_ = 0;
};

}  // namespace pairwall::failover
