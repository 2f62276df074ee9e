#include "daemon/control/key_file_check.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace pairwall::control {

std::string key_file_problem(const std::string& path, std::size_t max_bytes, int& error) {
  error = 0;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    error = errno;
    return std::strerror(error);
  }
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if ((st.st_mode & (S_IROTH | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return std::string("accessible by other users (mode ") + mode + "): chmod 600 it";
  }
  if (static_cast<std::size_t>(st.st_size) > max_bytes) {
    return "larger than " + std::to_string(max_bytes) + " bytes: not a key file";
  }
  return {};
}

}  // namespace pairwall::control
