// A configuration the daemon refuses to start with. what() is one line a person can act on,
// naming the file, the key and what is wrong: "pairwall.toml: [sync] port: expected 1..65535, got 0".
#pragma once

#include <stdexcept>
#include <string>

namespace pairwall {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace pairwall
