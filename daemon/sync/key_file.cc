#include "daemon/sync/key_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "daemon/control/config_error.h"
#include "daemon/control/key_file_check.h"

namespace pairwall::sync {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::vector<uint8_t> load_key_file(const std::string& path, const std::string& context) {
  auto fail = [&](const std::string& what) { throw ConfigError(context + ": " + path + ": " + what); };
  int error = 0;
  if (const std::string problem = control::key_file_problem(path, kMaxKeyFileBytes, error); !problem.empty())
    fail(problem);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  std::string trimmed = text;
  while (!trimmed.empty() && std::strchr(" \t\r\n", trimmed.back()) != nullptr) trimmed.pop_back();
  bool all_hex = !trimmed.empty();
  for (char c : trimmed) all_hex = all_hex && hex_value(c) >= 0;
  if (all_hex) {
    // Hex is how keys are usually made (openssl rand -hex 32); a wrong length is a typo that
    // would otherwise become a different raw key and fail every tag at run time.
    if (trimmed.size() % 2 != 0) fail("odd number of hex digits (" + std::to_string(trimmed.size()) + ")");
    if (trimmed.size() < 2 * kMinKeyBytes) {
      fail(std::to_string(trimmed.size()) + " hex digits, need at least " + std::to_string(2 * kMinKeyBytes) +
           " (" + std::to_string(kMinKeyBytes) + " bytes): openssl rand -hex 32");
    }
    std::vector<uint8_t> key(trimmed.size() / 2);
    for (std::size_t i = 0; i < key.size(); ++i) {
      key[i] = static_cast<uint8_t>(hex_value(trimmed[2 * i]) << 4 | hex_value(trimmed[2 * i + 1]));
    }
    return key;
  }
  if (text.size() < kMinKeyBytes) {
    fail(std::to_string(text.size()) + " bytes, need at least " + std::to_string(kMinKeyBytes) +
         ": openssl rand -hex 32 > " + path);
  }
  return std::vector<uint8_t>(text.begin(), text.end());
}

}  // namespace pairwall::sync
