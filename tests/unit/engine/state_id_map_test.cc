// StateIdMap: open addressing with backward-shift deletion, against std::map.
#include "daemon/engine/state_id_map.h"

#include <catch2/catch.hpp>
#include <map>
#include <random>

using namespace pairwall::engine;

TEST_CASE("the state id map agrees with a map through growth and deletions", "[engine][state_id_map]") {
  StateIdMap index;
  std::map<StateId, uint64_t> model;
  std::mt19937_64 rng(3);
  for (int step = 0; step < 200'000; ++step) {
    const StateId id{static_cast<uint32_t>(rng() % 3), rng() % 5000};
    if (rng() % 3 == 0) {
      index.erase(id);
      model.erase(id);
    } else if (model.count(id) == 0) {
      index.insert(id, static_cast<uint64_t>(step));
      model[id] = static_cast<uint64_t>(step);
    }
    if (step % 20000 == 0) {
      REQUIRE(index.size() == model.size());
      for (const auto& [k, v] : model) {
        const uint64_t* got = index.find(k);
        REQUIRE(got != nullptr);
        REQUIRE(*got == v);
      }
    }
  }
  for (uint32_t c = 0; c < 3; ++c) {
    for (uint64_t n = 0; n < 5000; ++n) {
      CHECK((index.find({c, n}) != nullptr) == (model.count({c, n}) == 1));
      CHECK(index.contains({c, n}) == (model.count({c, n}) == 1));
    }
  }
}
