// Interface names as small integers. Rules name interfaces; packets arrive with kernel ifindexes
// that the I/O adapter maps to these ids once, so the packet path compares integers only.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace pairwall::engine {

// A Linux interface name as the kernel's dev_valid_name() takes one: IFNAMSIZ - 1 bytes at most,
// not "." or "..", and no '/', ':', or byte its isspace() takes for a space (lib/ctype.c: ' ',
// '\t' .. '\r', and 0xA0, Latin-1's no-break space, which is also a byte of some UTF-8 letters).
// Nor NUL, at which the kernel would read a shorter name than the one written. The configuration
// and the hooks check names alike: refused by the hooks alone, a name would pass `pairwalld
// --check` and then stop the start.
inline bool valid_interface_name(std::string_view name) {
  if (name.empty() || name.size() > 15 || name == "." || name == "..") return false;
  for (const char c : name) {
    const auto b = static_cast<unsigned char>(c);
    if (b == '/' || b == ':' || b == ' ' || (b >= '\t' && b <= '\r') || b == 0xa0 || b == '\0') return false;
  }
  return true;
}

using IfaceId = uint16_t;
inline constexpr IfaceId kNoIface = 0;  // "no interface": local delivery, or unknown

// Ids are never reused or removed, so a compiled rule set stays valid while interfaces come and go.
class InterfaceRegistry {
 public:
  InterfaceRegistry() { names_.emplace_back(); }

  IfaceId intern(std::string_view name) {
    std::lock_guard lock(mutex_);
    if (auto it = ids_.find(std::string(name)); it != ids_.end()) return it->second;
    const auto id = static_cast<IfaceId>(names_.size());
    names_.emplace_back(name);
    ids_.emplace(std::string(name), id);
    return id;
  }

  // As intern(), but a name not known yet is only taken while fewer than `limit` are: for names
  // that come from outside (a sync peer's), which must not use the id space up.
  std::optional<IfaceId> intern_within(std::string_view name, std::size_t limit) {
    std::lock_guard lock(mutex_);
    if (auto it = ids_.find(std::string(name)); it != ids_.end()) return it->second;
    if (names_.size() >= limit) return std::nullopt;
    const auto id = static_cast<IfaceId>(names_.size());
    names_.emplace_back(name);
    ids_.emplace(std::string(name), id);
    return id;
  }

  std::optional<IfaceId> find(std::string_view name) const {
    std::lock_guard lock(mutex_);
    if (auto it = ids_.find(std::string(name)); it != ids_.end()) return it->second;
    return std::nullopt;
  }

  std::string name(IfaceId id) const {
    std::lock_guard lock(mutex_);
    return id < names_.size() ? names_[id] : std::string();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, IfaceId> ids_;
};

}  // namespace pairwall::engine
