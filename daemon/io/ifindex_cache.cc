#include "daemon/io/ifindex_cache.h"

#include <cstring>
#include <new>
#include <string_view>

namespace pairwall::io {

bool resolve_ifindex(uint32_t ifindex, char (&name)[IF_NAMESIZE]) {
  return if_indextoname(ifindex, name) != nullptr;
}

IfindexCache::IfindexCache(engine::InterfaceRegistry& registry, IfindexResolver resolver)
    : registry_(registry), resolver_(std::move(resolver)) {
  direct_.reserve(64);
  overflow_.reserve(kOverflowSlots);
}

bool IfindexCache::resolve(uint32_t ifindex, CachedIface& out) noexcept {
  misses_.add();
  char name[IF_NAMESIZE] = {};
  try {
    if (!resolver_(ifindex, name)) {
      failures_.add();
      return false;
    }
    name[IF_NAMESIZE - 1] = '\0';
    out.id = registry_.intern(std::string_view(name));
  } catch (const std::exception&) {
    failures_.add();
    return false;
  }
  std::memcpy(out.name, name, sizeof(name));
  out.resolved = true;
  return true;
}

const CachedIface& IfindexCache::lookup(uint32_t ifindex) noexcept {
  if (ifindex == 0) return none_;
  if (ifindex < kDirectLimit) {
    if (ifindex < direct_.size() && direct_[ifindex].resolved) return direct_[ifindex];
    scratch_ = CachedIface{};
    if (!resolve(ifindex, scratch_)) return scratch_;
    try {
      if (ifindex >= direct_.size()) direct_.resize(ifindex + 1);
    } catch (const std::bad_alloc&) {
      uncached_.add();
      return scratch_;
    }
    direct_[ifindex] = scratch_;
    return direct_[ifindex];
  }
  for (auto& slot : overflow_) {
    if (slot.ifindex == ifindex) return slot.iface;
  }
  scratch_ = CachedIface{};
  if (!resolve(ifindex, scratch_)) return scratch_;
  if (overflow_.size() < kOverflowSlots) {  // capacity reserved: no allocation here
    overflow_.push_back({ifindex, scratch_});
    return overflow_.back().iface;
  }
  uncached_.add();
  return scratch_;
}

const char* IfindexCache::name_of(engine::IfaceId id) const noexcept {
  if (id == engine::kNoIface) return none_.name;
  for (const CachedIface& entry : direct_) {
    if (entry.resolved && entry.id == id) return entry.name;
  }
  for (const Overflow& slot : overflow_) {
    if (slot.iface.id == id) return slot.iface.name;
  }
  return none_.name;
}

void IfindexCache::clear() noexcept {
  for (auto& entry : direct_) entry = CachedIface{};
  overflow_.clear();
}

}  // namespace pairwall::io
