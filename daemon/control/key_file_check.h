// What the sync and failover key files have in common: a key anyone on the node can read
// authenticates nothing, and reading a FIFO or a device as one would block or exhaust memory.
#pragma once

#include <cstddef>
#include <string>

namespace pairwall::control {

// Why `path` cannot hold a key: it cannot be read (`error` is then its errno, and the reason
// strerror's), is not a regular file, is open to other users, or is larger than `max_bytes`.
// Empty when it can.
std::string key_file_problem(const std::string& path, std::size_t max_bytes, int& error);

}  // namespace pairwall::control
