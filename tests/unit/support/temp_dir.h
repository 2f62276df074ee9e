// A fresh directory under the system's temporary directory, removed with everything in it when
// the object goes out of scope. The name carries the process id and the object's address, so that
// tests running at once (ctest -j, two objects in one test) never share one.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

namespace pairwall::test {

struct TempDir {
  std::filesystem::path path;

  explicit TempDir(const std::string& tag) {
    path =
        std::filesystem::temp_directory_path() / ("pairwall-" + tag + "-" + std::to_string(::getpid()) + "-" +
                                                  std::to_string(reinterpret_cast<std::uintptr_t>(this)));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace pairwall::test
