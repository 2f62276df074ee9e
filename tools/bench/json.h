// The little JSON the benchmarks print: objects (members kept in insertion order), integers and
// floating-point numbers. Keys are plain identifiers and numbers, so no string escaping is needed.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace pairwall::bench {

class Json {
 public:
  Json() = default;
  Json(double v) : kind_(Kind::Real), real_(v) {}          // NOLINT: implicit on purpose
  Json(uint64_t v) : kind_(Kind::Integer), integer_(v) {}  // NOLINT
  Json(uint32_t v) : kind_(Kind::Integer), integer_(v) {}  // NOLINT

  // The member `key` of an object, created (as an empty object) if absent.
  Json& operator[](const std::string& key) {
    for (auto& [k, v] : members_) {
      if (k == key) return v;
    }
    return members_.emplace_back(key, Json()).second;
  }

  bool is_object() const { return kind_ == Kind::Object; }
  const std::vector<std::pair<std::string, Json>>& members() const { return members_; }

  std::string scalar_text() const {
    if (kind_ == Kind::Integer) return std::to_string(integer_);
    if (!std::isfinite(real_)) return "null";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", real_);
    return buf;
  }

  std::string dump() const {
    if (kind_ != Kind::Object) return scalar_text();
    std::string out = "{";
    for (std::size_t i = 0; i < members_.size(); ++i) {
      out += (i ? ", \"" : "\"") + members_[i].first + "\": " + members_[i].second.dump();
    }
    return out + "}";
  }

 private:
  enum class Kind : uint8_t { Object, Integer, Real };
  Kind kind_ = Kind::Object;
  double real_ = 0;
  uint64_t integer_ = 0;
  std::vector<std::pair<std::string, Json>> members_;
};

}  // namespace pairwall::bench
