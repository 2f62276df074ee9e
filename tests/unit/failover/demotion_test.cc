#include "failover/demotion.h"

#include <catch2/catch.hpp>
#include <vector>

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

TEST_CASE("demotion: advertisements that leave on no interface, three in a row, as carp(4)", "[demotion]") {
  struct Row {
    const char* what;
    std::vector<bool> left;  // one per advertisement
    bool failing;
  };
  const std::vector<Row> rows{
      {"every one left", {true, true, true, true}, false},
      {"two lost", {false, false}, false},
      {"three lost", {false, false, false}, true},
      {"three lost, not in a row", {false, false, true, false, true, false}, false},
      {"three lost, then two left", {false, false, false, true, true}, true},
      {"three lost, then three left", {false, false, false, true, true, true}, false},
      {"three lost, then three left, not in a row", {false, false, false, true, true, false, true}, true},
      {"lost again after it cleared", {false, false, false, true, true, true, false, false, false}, true},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    pf::AdvertSendRecord r;
    bool failing = false;
    for (const bool left : row.left) failing = r.record(left);
    CHECK(failing == row.failing);
    CHECK(r.failing() == row.failing);
  }
  pf::Demotion d;
  d.set(DemoteReason::AdvertSend, true);
  CHECK(d.total() == pf::kAdvertSendDemotion);
  REQUIRE(d.reasons().size() == 1);
  CHECK(d.reasons()[0] == "advertisements not leaving (+32)");
  // Below a node that advertises; above one that cannot pass traffic on a side.
  CHECK(pf::kAdvertSendDemotion > pf::kBulkSyncDemotion);
  CHECK(pf::kAdvertSendDemotion < pf::kCarrierDemotion);
  CHECK(pf::kAdvertSendDemotion < pf::kEngineDemotion);
}
