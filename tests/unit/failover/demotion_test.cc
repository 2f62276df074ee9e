#include "failover/demotion.h"

#include <catch2/catch.hpp>

namespace pf = pairwall::failover;
using pf::DemoteReason;

TEST_CASE("demotion: the sum of active reasons, each named", "[demotion]") {
  pf::Demotion d;
  CHECK(d.total() == 0);
  CHECK(d.reasons().empty());
  d.set(DemoteReason::BulkSync, true);
  CHECK(d.total() == pf::kBulkSyncDemotion);
  d.set(DemoteReason::Carrier, true);
  d.set(DemoteReason::Carrier, true);  // idempotent: a reason counts once
  CHECK(d.total() == pf::kBulkSyncDemotion + pf::kCarrierDemotion);
  d.demote(5);
  CHECK(d.total() == pf::kBulkSyncDemotion + pf::kCarrierDemotion + 5);
  const auto reasons = d.reasons();
  REQUIRE(reasons.size() == 3);
  CHECK(reasons[0] == "bulk sync incomplete (+16)");
  CHECK(reasons[1] == "VIP interface without carrier (+64)");
  CHECK(reasons[2] == "admin (+5)");
  d.set(DemoteReason::BulkSync, false);
  d.set(DemoteReason::Carrier, false);
  CHECK(d.total() == 5);
}

TEST_CASE("demotion: promote never goes below zero nor cancels automatic reasons", "[demotion]") {
  pf::Demotion d;
  d.set(DemoteReason::Engine, true);
  d.demote(3);
  d.promote(10);
  CHECK(d.admin() == 0);
  CHECK(d.total() == pf::kEngineDemotion);
  d.set(DemoteReason::Admin, true);  // only demote()/promote() move the admin part
  CHECK(d.total() == pf::kEngineDemotion);
  CHECK(d.active(DemoteReason::Engine));
  CHECK_FALSE(d.active(DemoteReason::Admin));
}

TEST_CASE("demotion: saturates below the leaving value", "[demotion]") {
  pf::Demotion d;
  d.demote(UINT32_MAX);
  d.demote(UINT32_MAX);
  d.set(DemoteReason::Engine, true);
  CHECK(d.total() == pf::kMaxDemotion);
  CHECK(d.total() < UINT32_MAX);
}
