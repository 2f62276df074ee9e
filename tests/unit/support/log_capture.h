// What the code under test logs, for tests that check a message is said, and how often.
#pragma once

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cstddef>
#include <memory>
#include <sstream>
#include <string>

namespace pairwall::test {

// The default logger writes to `out` while this lives, whichever way the test ends.
struct LogCapture {
  std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  explicit LogCapture(std::ostringstream& out) {
    spdlog::set_default_logger(
        std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out)));
  }
  ~LogCapture() { spdlog::set_default_logger(previous); }
};

// How many times `phrase` occurs in `text`.
inline std::size_t occurrences(const std::string& text, const std::string& phrase) {
  std::size_t n = 0;
  for (std::size_t at = text.find(phrase); at != std::string::npos; at = text.find(phrase, at + 1)) ++n;
  return n;
}

}  // namespace pairwall::test
