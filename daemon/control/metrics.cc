#include "daemon/control/metrics.h"

#include <charconv>
#include <cmath>

#include "daemon/control/utf8.h"

namespace pairwall::control {

bool MetricWriter::valid_name(std::string_view name, bool label) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!label && c == ':');
    const bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

void MetricWriter::append_escaped(std::string& out, std::string_view value) {
  for (std::size_t i = 0; i < value.size();) {
    const char c = value[i];
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (const std::size_t n = utf8_sequence(value.substr(i)); n != 0) {
          out.append(value.substr(i, n));
          i += n;
          continue;
        }
        // Prometheus refuses the whole scrape over one label value that is not UTF-8, and a rule's
        // label may hold any bytes but control characters (Latin-1 in an old rule file): each byte
        // that starts no valid sequence becomes U+FFFD, as a decoder shows it.
        out += "\xef\xbf\xbd";
    }
    ++i;
  }
}

void MetricWriter::family(std::string_view name, Type type, std::string_view help) {
  for (std::size_t i = 0; i < families_.size(); ++i) {
    if (families_[i].name == name) {
      current_ = i;
      return;
    }
  }
  current_ = families_.size();
  auto& f = families_.emplace_back();
  f.name = std::string(name);
  f.text += "# HELP ";
  f.text += name;
  f.text += ' ';
  // HELP text escapes only backslash and newline.
  for (char c : help) {
    if (c == '\\') {
      f.text += "\\\\";
    } else if (c == '\n') {
      f.text += "\\n";
    } else {
      f.text += c;
    }
  }
  f.text += "\n# TYPE ";
  f.text += name;
  f.text += type == Type::Counter ? " counter\n" : " gauge\n";
}

std::string& MetricWriter::begin_sample() {
  // A sample before any family() is a programming error; give it a family of its own name-less
  // kind rather than corrupting another family.
  if (families_.empty()) families_.push_back({"", ""});
  auto& f = families_[current_];
  f.text += f.name;
  return f.text;
}

namespace {

// A sample's labels, `{name="value",...}` (nothing without labels), and the space before its value.
template <typename Labels>
void append_labels(std::string& out, const Labels& labels) {
  bool first = true;
  for (const auto& [name, value] : labels) {
    out += first ? '{' : ',';
    out += name;
    out += "=\"";
    MetricWriter::append_escaped(out, value);
    out += '"';
    first = false;
  }
  if (!first) out += '}';
  out += ' ';
}

}  // namespace

void MetricWriter::sample(std::initializer_list<Label> labels, uint64_t value) {
  std::string& out = begin_sample();
  append_labels(out, labels);
  out += std::to_string(value);
  out += '\n';
}

void MetricWriter::sample(const std::vector<std::pair<std::string, std::string>>& labels, uint64_t value) {
  std::string& out = begin_sample();
  append_labels(out, labels);
  out += std::to_string(value);
  out += '\n';
}

void MetricWriter::sample(std::initializer_list<Label> labels, double value) {
  std::string& out = begin_sample();
  append_labels(out, labels);
  if (std::isnan(value)) {
    out += "NaN";
  } else if (std::isinf(value)) {
    out += value > 0 ? "+Inf" : "-Inf";
  } else {
    // Shortest form that reads back to the same double.
    char buf[32];
    const auto result = std::to_chars(buf, buf + sizeof buf, value);
    out.append(buf, result.ptr);
  }
  out += '\n';
}

std::string MetricWriter::text() const {
  std::string out;
  for (const auto& f : families_) out += f.text;
  return out;
}

void MetricsRegistry::add(std::string component, Collector collector) {
  std::lock_guard lock(mutex_);
  collectors_.emplace_back(std::move(component), std::move(collector));
}

std::string MetricsRegistry::render() const {
  std::lock_guard lock(mutex_);
  MetricWriter writer;
  for (const auto& [component, collect] : collectors_) collect(writer);
  return writer.text();
}

std::size_t MetricsRegistry::size() const {
  std::lock_guard lock(mutex_);
  return collectors_.size();
}

}  // namespace pairwall::control
