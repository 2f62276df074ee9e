// Kernel ifindex -> engine interface id and name, per worker. The first packet seen on an
// interface resolves it (if_indextoname + InterfaceRegistry::intern, which lock and allocate);
// every later packet is an array read. Each worker owns its cache, so nothing is shared on the
// packet path.
#pragma once

#include <net/if.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "daemon/engine/interfaces.h"
#include "daemon/io/counter.h"

namespace pairwall::io {

struct CachedIface {
  engine::IfaceId id = engine::kNoIface;
  char name[IF_NAMESIZE] = {};  // NUL-terminated; empty for kNoIface
  bool resolved = false;
};

// Writes the name of `ifindex` and returns true, or returns false when no interface has it.
using IfindexResolver = std::function<bool(uint32_t ifindex, char (&name)[IF_NAMESIZE])>;

// if_indextoname(3) in the calling thread's network namespace.
bool resolve_ifindex(uint32_t ifindex, char (&name)[IF_NAMESIZE]);

class IfindexCache {
 public:
  // Ifindexes below this are cached in a directly indexed array; the rare larger ones in a small
  // table searched linearly, and past its size resolved on every packet (counted as uncached).
  static constexpr uint32_t kDirectLimit = 1 << 16;
  static constexpr std::size_t kOverflowSlots = 64;

  explicit IfindexCache(engine::InterfaceRegistry& registry, IfindexResolver resolver = resolve_ifindex);

  // The interface for `ifindex`; 0 (no interface) and unresolvable indexes give an entry with id
  // kNoIface. The reference is valid until the next lookup() or clear().
  const CachedIface& lookup(uint32_t ifindex) noexcept;

  // The name of an interface a lookup() has resolved, by its id ("" for one it has not): a scan,
  // for the rare packet whose interface is known by id alone (an out pass decided before routing).
  const char* name_of(engine::IfaceId id) const noexcept;

  // Forgets every mapping: after an interface was renamed, or deleted and its index reused.
  void clear() noexcept;

  uint64_t misses() const { return misses_.get(); }      // resolutions performed
  uint64_t failures() const { return failures_.get(); }  // indexes that did not resolve
  uint64_t uncached() const { return uncached_.get(); }  // resolved but not kept

 private:
  bool resolve(uint32_t ifindex, CachedIface& out) noexcept;

  engine::InterfaceRegistry& registry_;
  IfindexResolver resolver_;
  std::vector<CachedIface> direct_;
  struct Overflow {
    uint32_t ifindex = 0;
    CachedIface iface;
  };
  std::vector<Overflow> overflow_;
  const CachedIface none_{};
  CachedIface scratch_;  // unresolved or uncached results
  Counter misses_;
  Counter failures_;
  Counter uncached_;
};

}  // namespace pairwall::io
