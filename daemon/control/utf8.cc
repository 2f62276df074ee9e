#include "daemon/control/utf8.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <vector>

namespace pairwall::control {

std::size_t utf8_sequence(std::string_view s) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto tail = [&](std::size_t i) { return i < s.size() && (b(i) & 0xc0) == 0x80; };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) return tail(1) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    if (!tail(1) || !tail(2)) return 0;
    if ((c == 0xe0 && b(1) < 0xa0) || (c == 0xed && b(1) > 0x9f)) return 0;
    return 3;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    if (!tail(1) || !tail(2) || !tail(3)) return 0;
    if ((c == 0xf0 && b(1) < 0x90) || (c == 0xf4 && b(1) > 0x8f)) return 0;
    return 4;
  }
  return 0;
}

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s.substr(i));
    if (n == 0) {
      out += "\xef\xbf\xbd";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

void make_strings_valid_utf8(google::protobuf::Message& message) {
  namespace pb = google::protobuf;
  const pb::Reflection* reflection = message.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  std::string scratch;
  for (const pb::FieldDescriptor* f : fields) {
    if (f->type() == pb::FieldDescriptor::TYPE_STRING) {
      if (f->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(message, f); ++i) {
          const std::string& v = reflection->GetRepeatedStringReference(message, f, i, &scratch);
          if (!valid_utf8(v)) reflection->SetRepeatedString(&message, f, i, to_valid_utf8(v));
        }
      } else {
        const std::string& v = reflection->GetStringReference(message, f, &scratch);
        if (!valid_utf8(v)) reflection->SetString(&message, f, to_valid_utf8(v));
      }
    } else if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      // Map fields are repeated entry messages: their string keys and values are fixed here too.
      if (f->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(message, f); ++i)
          make_strings_valid_utf8(*reflection->MutableRepeatedMessage(&message, f, i));
      } else {
        make_strings_valid_utf8(*reflection->MutableMessage(&message, f));
      }
    }
  }
}

}  // namespace pairwall::control
