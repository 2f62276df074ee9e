#include "daemon/io/ifindex_cache.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <string>

#include "daemon/engine/interfaces.h"

namespace pairwall::io {
namespace {

struct FakeLinks {
  std::map<uint32_t, std::string> names;
  int calls = 0;
  IfindexResolver resolver() {
    return [this](uint32_t ifindex, char(&out)[IF_NAMESIZE]) {
      ++calls;
      auto it = names.find(ifindex);
      if (it == names.end()) return false;
      std::strncpy(out, it->second.c_str(), IF_NAMESIZE - 1);
      return true;
    };
  }
};

TEST_CASE("an ifindex is resolved once, then read from the cache", "[ifindex]") {
  engine::InterfaceRegistry registry;
  const engine::IfaceId preexisting = registry.intern("wan0");
  FakeLinks links;
  links.names = {{2, "lan0"}, {7, "wan0"}};
  IfindexCache cache(registry, links.resolver());

  const CachedIface lan = cache.lookup(2);
  CHECK(lan.resolved);
  CHECK(std::string(lan.name) == "lan0");
  CHECK(lan.id == registry.find("lan0"));
  CHECK(cache.lookup(7).id == preexisting);  // rules compiled earlier name the same id
  CHECK(links.calls == 2);
  for (int i = 0; i < 100; ++i) {
    CHECK(cache.lookup(2).id == lan.id);
    CHECK(cache.lookup(7).id == preexisting);
  }
  CHECK(links.calls == 2);
  CHECK(cache.misses() == 2);
}

TEST_CASE("ifindex 0 is no interface and costs nothing", "[ifindex]") {
  engine::InterfaceRegistry registry;
  FakeLinks links;
  IfindexCache cache(registry, links.resolver());
  CHECK(cache.lookup(0).id == engine::kNoIface);
  CHECK_FALSE(cache.lookup(0).resolved);
  CHECK(links.calls == 0);
}

TEST_CASE("an unknown ifindex is not cached, so it resolves once it exists", "[ifindex]") {
  engine::InterfaceRegistry registry;
  FakeLinks links;
  IfindexCache cache(registry, links.resolver());
  CHECK(cache.lookup(5).id == engine::kNoIface);
  CHECK(cache.failures() == 1);
  links.names[5] = "new0";
  CHECK(std::string(cache.lookup(5).name) == "new0");
  CHECK(cache.lookup(5).id != engine::kNoIface);
}

TEST_CASE("clear() forgets renamed interfaces", "[ifindex]") {
  engine::InterfaceRegistry registry;
  FakeLinks links;
  links.names = {{3, "old0"}};
  IfindexCache cache(registry, links.resolver());
  const auto old_id = cache.lookup(3).id;
  links.names[3] = "renamed0";
  CHECK(cache.lookup(3).id == old_id);  // cached until told
  cache.clear();
  const CachedIface renamed = cache.lookup(3);
  CHECK(std::string(renamed.name) == "renamed0");
  CHECK(renamed.id != old_id);
}

TEST_CASE("large ifindexes use the overflow table, then resolve uncached", "[ifindex]") {
  engine::InterfaceRegistry registry;
  FakeLinks links;
  for (uint32_t i = 0; i <= IfindexCache::kOverflowSlots; ++i) {
    links.names[IfindexCache::kDirectLimit + i] = "big" + std::to_string(i);
  }
  IfindexCache cache(registry, links.resolver());
  for (uint32_t i = 0; i <= IfindexCache::kOverflowSlots; ++i) {
    CHECK(std::string(cache.lookup(IfindexCache::kDirectLimit + i).name) == "big" + std::to_string(i));
  }
  const int calls = links.calls;
  CHECK(cache.lookup(IfindexCache::kDirectLimit).id == registry.find("big0"));  // kept
  CHECK(links.calls == calls);
  const uint32_t last = IfindexCache::kDirectLimit + IfindexCache::kOverflowSlots;
  CHECK(cache.lookup(last).id == registry.find("big" + std::to_string(IfindexCache::kOverflowSlots)));
  CHECK(links.calls == calls + 1);  // the table is full: resolved again
  CHECK(cache.uncached() >= 1);
}

TEST_CASE("a resolved interface's name is found by its id", "[ifindex]") {
  engine::InterfaceRegistry registry;
  FakeLinks links;
  links.names = {{2, "lan0"}, {IfindexCache::kDirectLimit + 1, "big0"}};
  IfindexCache cache(registry, links.resolver());
  const engine::IfaceId lan = cache.lookup(2).id;
  const engine::IfaceId big = cache.lookup(IfindexCache::kDirectLimit + 1).id;
  const engine::IfaceId unseen = registry.intern("wan0");
  CHECK(std::string(cache.name_of(lan)) == "lan0");
  CHECK(std::string(cache.name_of(big)) == "big0");
  CHECK(std::string(cache.name_of(unseen)).empty());
  CHECK(std::string(cache.name_of(engine::kNoIface)).empty());
  cache.clear();
  CHECK(std::string(cache.name_of(lan)).empty());
}

TEST_CASE("the real resolver knows the loopback interface", "[ifindex]") {
  char name[IF_NAMESIZE] = {};
  REQUIRE(resolve_ifindex(if_nametoindex("lo"), name));
  CHECK(std::string(name) == "lo");
  CHECK_FALSE(resolve_ifindex(0x7ffffff0, name));
}

}  // namespace
}  // namespace pairwall::io
