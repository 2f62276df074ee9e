// The batching decision as a table: decisions in, verdict messages out, in order.
#include "daemon/io/verdict_plan.h"

#include <catch2/catch.hpp>
#include <vector>

namespace pairwall::io {
namespace {

constexpr auto A = Decision::Accept;
constexpr auto R = Decision::AcceptRewritten;
constexpr auto D = Decision::Drop;
constexpr auto C = Decision::AcceptClaimed;
constexpr auto RC = Decision::AcceptRewrittenClaimed;

VerdictOp single_accept(uint32_t id) {
  return {VerdictOp::Kind::Single, id, true, false};
}
VerdictOp batch_accept(uint32_t id) {
  return {VerdictOp::Kind::Batch, id, true, false};
}
VerdictOp drop(uint32_t id) {
  return {VerdictOp::Kind::Single, id, false, false};
}
VerdictOp rewritten(uint32_t id) {
  return {VerdictOp::Kind::Single, id, true, true};
}
VerdictOp claimed(uint32_t id, bool with_payload) {
  return {VerdictOp::Kind::Single, id, true, with_payload, true};
}

// Decides ids first_id, first_id + 1, ... and flushes at the end, as one receive batch does.
std::vector<VerdictOp> plan(bool batch, uint32_t first_id, const std::vector<Decision>& decisions) {
  VerdictPlanner planner(batch);
  std::vector<VerdictOp> out;
  auto take = [&](const VerdictSteps& steps) {
    for (uint8_t i = 0; i < steps.count; ++i) out.push_back(steps.ops[i]);
  };
  uint32_t id = first_id;
  for (const Decision d : decisions) take(planner.add(id++, d));
  take(planner.flush());
  CHECK_FALSE(planner.pending());
  return out;
}

TEST_CASE("batched verdicts: runs of accepts collapse, drops and rewrites stand alone", "[verdict]") {
  struct Row {
    const char* name;
    std::vector<Decision> decisions;
    std::vector<VerdictOp> want;
  };
  const std::vector<Row> rows = {
      {"nothing", {}, {}},
      {"one accept is a plain verdict", {A}, {single_accept(1)}},
      {"accepts collapse to the highest id", {A, A, A, A}, {batch_accept(4)}},
      {"a drop ends the run before it", {A, A, D, A, A}, {batch_accept(2), drop(3), batch_accept(5)}},
      {"a drop first", {D, A, A}, {drop(1), batch_accept(3)}},
      {"drops only", {D, D}, {drop(1), drop(2)}},
      {"a rewrite carries its payload alone",
       {A, A, R, A},
       {batch_accept(2), rewritten(3), single_accept(4)}},
      {"rewrite then drop", {R, D}, {rewritten(1), drop(2)}},
      {"accept between drops", {D, A, D}, {drop(1), single_accept(2), drop(3)}},
      {"trailing drop after a long run", {A, A, A, A, A, A, A, D}, {batch_accept(7), drop(8)}},
      {"a claimed accept carries its mark alone",
       {A, A, C, A, RC},
       {batch_accept(2), claimed(3, false), single_accept(4), claimed(5, true)}},
  };
  for (const auto& row : rows) {
    SECTION(row.name) {
      CHECK(plan(true, 1, row.decisions) == row.want);
    }
  }
}

TEST_CASE("unbatched verdicts: one message per packet, in order", "[verdict]") {
  CHECK(plan(false, 10, {A, A, D, R, A}) == std::vector<VerdictOp>{single_accept(10), single_accept(11),
                                                                   drop(12), rewritten(13),
                                                                   single_accept(14)});
}

TEST_CASE("a batch never covers a packet that must be dropped", "[verdict]") {
  // Property over every sequence of 6 decisions: replaying the messages as the kernel applies
  // them (a batch settles every unsettled id up to its own) gives each packet its own decision.
  for (uint32_t code = 0; code < 729; ++code) {
    std::vector<Decision> ds;
    for (uint32_t c = code, i = 0; i < 6; ++i, c /= 3) ds.push_back(static_cast<Decision>(c % 3));
    const auto ops = plan(true, 100, ds);
    std::vector<int> settled(6, -1);  // -1 unsettled, 0 drop, 1 accept, 2 accept rewritten
    for (const auto& op : ops) {
      const uint32_t index = op.id - 100;
      REQUIRE(index < 6);
      if (op.kind == VerdictOp::Kind::Batch) {
        for (uint32_t i = 0; i <= index; ++i) {
          if (settled[i] == -1) settled[i] = 1;
        }
      } else {
        REQUIRE(settled[index] == -1);
        settled[index] = op.accept ? (op.with_payload ? 2 : 1) : 0;
      }
    }
    for (std::size_t i = 0; i < 6; ++i) {
      const int want = ds[i] == D ? 0 : (ds[i] == R ? 2 : 1);
      REQUIRE(settled[i] == want);
    }
  }
}

TEST_CASE("a claimed verdict carries the packet's own mark, other verdicts none", "[verdict]") {
  VerdictPlanner planner(true);
  VerdictSteps steps = planner.add(1, C, 0x105);
  REQUIRE(steps.count == 1);
  CHECK(steps.ops[0].mark == 0x105);
  steps = planner.add(2, D, 0x105);
  REQUIRE(steps.count == 1);
  CHECK(steps.ops[0].mark == 0);
}

TEST_CASE("the run carries across add() calls until flush", "[verdict]") {
  VerdictPlanner planner(true);
  CHECK(planner.add(1, A).count == 0);
  CHECK(planner.add(2, A).count == 0);
  CHECK(planner.pending());
  const VerdictSteps steps = planner.flush();
  REQUIRE(steps.count == 1);
  CHECK(steps.ops[0] == batch_accept(2));
  CHECK(planner.flush().count == 0);
}

TEST_CASE("a held packet ends the run before it, and no batch settles it while held", "[verdict][defer]") {
  VerdictPlanner planner(true);
  std::vector<VerdictOp> out;
  auto take = [&](const VerdictSteps& steps) {
    for (uint8_t i = 0; i < steps.count; ++i) out.push_back(steps.ops[i]);
  };
  take(planner.add(1, A));
  take(planner.add(2, A));
  take(planner.hold());  // id 3 held
  take(planner.add(4, A));
  take(planner.add(5, A));
  take(planner.flush());
  CHECK(out == std::vector<VerdictOp>{batch_accept(2), single_accept(4), single_accept(5)});
  CHECK(planner.held() == 1);
  planner.released();  // id 3's verdict went out
  out.clear();
  take(planner.add(6, A));
  take(planner.add(7, A));
  take(planner.flush());
  CHECK(out == std::vector<VerdictOp>{batch_accept(7)});
}

}  // namespace
}  // namespace pairwall::io
