// Prometheus text exposition (format 0.0.4) and the registry components add their collectors to.
//
// Collectors run on the control thread when /metrics is scraped and read counters the data plane
// already keeps; nothing is done per packet for metrics.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pairwall::control {

using Label = std::pair<std::string_view, std::string_view>;

class MetricWriter {
 public:
  enum class Type : uint8_t { Counter, Gauge };

  // Starts a family: "# HELP" and "# TYPE" lines. Samples that follow belong to it. A family
  // started again later (two collectors exporting the same name) continues the first one: the
  // format wants one TYPE line and all samples of a family together, or the scrape is rejected.
  void family(std::string_view name, Type type, std::string_view help);
  void sample(std::initializer_list<Label> labels, double value);
  void sample(std::initializer_list<Label> labels, uint64_t value);
  void sample(const std::vector<std::pair<std::string, std::string>>& labels, uint64_t value);
  void sample(double value) { sample({}, value); }
  void sample(uint64_t value) { sample(std::initializer_list<Label>{}, value); }

  // The exposition, families in the order they were first started.
  std::string text() const;

  // A metric or label name matches [a-zA-Z_:][a-zA-Z0-9_:]* (labels: no ':').
  static bool valid_name(std::string_view name, bool label = false);
  // Label values escape backslash, double quote and newline; a byte that starts no valid UTF-8
  // sequence is written as U+FFFD.
  static void append_escaped(std::string& out, std::string_view value);

 private:
  struct Family {
    std::string name;
    std::string text;  // HELP, TYPE, then the samples
  };
  std::string& begin_sample();

  std::vector<Family> families_;
  std::size_t current_ = 0;
};

using Collector = std::function<void(MetricWriter&)>;

// Components register collectors at start-up (sync, failover, the engine's counters) and the
// HTTP responder renders them all on each scrape, in registration order.
class MetricsRegistry {
 public:
  void add(std::string component, Collector collector);
  std::string render() const;
  std::size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<std::string, Collector>> collectors_;
};

}  // namespace pairwall::control
