#include "daemon/engine/siphash.h"

#include <sys/random.h>

#include <stdexcept>

namespace pairwall::engine {

SipKey random_sip_key() {
  SipKey key;
  if (getrandom(&key, sizeof key, 0) != static_cast<ssize_t>(sizeof key)) {
    throw std::runtime_error("getrandom failed: cannot seed the state table hash");
  }
  return key;
}

}  // namespace pairwall::engine
