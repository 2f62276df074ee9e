// When the VIPs are renewed, and retried after a failed add or removal: sequences of outcomes on a
// fake clock.
#include "failover/vip_upkeep.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <vector>

namespace pairwall::failover {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr Time at(int64_t ms) {
  return milliseconds(ms);
}

struct Step {
  enum Kind { Add, Remove } kind;
  Time t;
  bool failed;
};

struct Row {
  const char* what;
  uint32_t lease_s;
  std::vector<Step> steps;
  Time next;  // after the steps
  VipWork work;
};

TEST_CASE("VipUpkeep: renewals, and retries of what failed", "[vips]") {
  const Row rows[] = {
      {"permanent, added: added again in a while", 0, {{Step::Add, at(0), false}}, at(5000), VipWork::Add},
      {"permanent, the add failed", 0, {{Step::Add, at(0), true}}, at(1000), VipWork::Add},
      {"permanent, the retried add failed again",
       0,
       {{Step::Add, at(0), true}, {Step::Add, at(1000), true}},
       at(2000),
       VipWork::Add},
      {"permanent, the retried add succeeded",
       0,
       {{Step::Add, at(0), true}, {Step::Add, at(1000), false}},
       at(6000),
       VipWork::Add},
      {"leased, added", 6, {{Step::Add, at(0), false}}, at(2000), VipWork::Add},
      {"leased, the add failed: sooner than the renewal",
       6,
       {{Step::Add, at(0), true}},
       at(1000),
       VipWork::Add},
      {"short lease, the add failed: at the renewal cadence",
       1,
       {{Step::Add, at(0), true}},
       at(500),
       VipWork::Add},
      {"removed", 0, {{Step::Add, at(0), false}, {Step::Remove, at(100), false}}, kNever, VipWork::None},
      {"permanent, the removal failed",
       0,
       {{Step::Add, at(0), false}, {Step::Remove, at(100), true}},
       at(1100),
       VipWork::Remove},
      {"leased, the removal failed",
       6,
       {{Step::Add, at(0), false}, {Step::Remove, at(100), true}},
       at(1100),
       VipWork::Remove},
      {"the leftovers at start could not be removed",
       0,
       {{Step::Remove, at(0), true}},
       at(1000),
       VipWork::Remove},
      {"the retried removal succeeded",
       0,
       {{Step::Remove, at(0), true}, {Step::Remove, at(1000), false}},
       kNever,
       VipWork::None},
      {"taking over while a removal is retried",
       0,
       {{Step::Remove, at(0), true}, {Step::Add, at(500), false}},
       at(5500),
       VipWork::Add},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    VipUpkeep u(row.lease_s);
    for (const Step& s : row.steps) {
      if (s.kind == Step::Add) {
        u.added(s.t, s.failed);
      } else {
        u.removed(s.t, s.failed);
      }
    }
    CHECK(u.next() == row.next);
    CHECK(u.retrying() == row.steps.back().failed);
    if (row.next != kNever) {
      CHECK(u.due(row.next - Time(1)) == VipWork::None);
      CHECK(u.due(row.next) == row.work);
    } else {
      CHECK(u.due(at(1'000'000'000)) == VipWork::None);
    }
  }
}

// A VIP that another program removed (a network manager reconfiguring the link, `ip addr flush`)
// comes back at the next renewal; a permanent one has no lease to renew, and must come back too.
TEST_CASE("VipUpkeep: a master adds permanent VIPs again now and then", "[vips]") {
  VipUpkeep u(0);
  u.added(at(0), false);
  CHECK(u.next() == at(0) + VipUpkeep::kPermanentRenewal);
  CHECK(u.due(at(0) + VipUpkeep::kPermanentRenewal) == VipWork::Add);
  CHECK_FALSE(u.retrying());
  u.removed(at(100), false);  // stepped down: nothing more
  CHECK(u.next() == kNever);
}

}  // namespace
}  // namespace pairwall::failover
