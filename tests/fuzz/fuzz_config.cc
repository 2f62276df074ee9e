// libFuzzer target for pairwalld's configuration: any byte string is a Config, its [sync] and
// [failover] sections accepted by their components' parsers as start-up checks them, or one
// ConfigError line naming the file; never a crash, a hang, another exception or a sanitizer report.
// The key files the seeds name are made beside the configuration at start, so that the fuzzer
// gets past them into the sections' other keys.
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include "daemon/control/config.h"
#include "daemon/control/config_error.h"
#include "daemon/sync/sync_config.h"
#include "failover/failover_config.h"

namespace {

constexpr const char* kDirectory = "/tmp/pairwall-fuzz-config";
const std::string kFile = std::string(kDirectory) + "/pairwall.toml";

// A key of 64 hex digits, `digit` repeated: each file its own, as the parsers require of a key and
// the key accepted beside it.
void write_key(const char* name, char digit) {
  const std::string path = std::string(kDirectory) + "/" + name;
  std::ofstream(path, std::ios::binary) << std::string(64, digit) << "\n";
  ::chmod(path.c_str(), 0600);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::mkdir(kDirectory, 0700);
  write_key("sync.key", '1');
  write_key("sync.key.new", '2');
  write_key("failover.key", '3');
  write_key("failover.key.new", '4');
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const pairwall::control::Config config = pairwall::control::parse_config(text, kFile);
    if (config.sync) (void)pairwall::sync::parse_sync_config(*config.sync, config.file);
    if (config.failover) (void)pairwall::failover::parse_failover_config(*config.failover, config.file);
  } catch (const pairwall::ConfigError& e) {
    const std::string_view why = e.what();
    if (why.find('\n') != std::string_view::npos || why.find("pairwall.toml") == std::string_view::npos)
      std::abort();
  }
  return 0;
}
