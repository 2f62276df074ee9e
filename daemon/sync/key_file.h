// The shared sync key: a file of at least 32 raw bytes, or of hex digits (64 or more, even;
// trailing whitespace ignored) that decode to at least 32 bytes. The file must not be readable
// or writable by others: a key anyone on the node can read authenticates nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pairwall::sync {

inline constexpr std::size_t kMinKeyBytes = 32;  // HMAC-SHA256's output size, RFC 2104 section 3
inline constexpr std::size_t kMaxKeyFileBytes = 4096;

// Throws ConfigError("<context>: <what is wrong with path>") when the file is missing, not a
// regular file, accessible by others, too short, too long, or malformed hex. `context` names the
// setting, e.g. "pairwall.toml: [sync] key_file".
std::vector<uint8_t> load_key_file(const std::string& path, const std::string& context);

}  // namespace pairwall::sync
