// UTF-8 where a format takes nothing else (Prometheus label values, protobuf string fields) but
// the text comes from files and the system, which may hold any bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace google::protobuf {
class Message;
}

namespace pairwall::control {

// The length of the well-formed UTF-8 sequence `s` starts with (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0.
std::size_t utf8_sequence(std::string_view s);

bool valid_utf8(std::string_view s);

// `s` with each byte that starts no valid sequence replaced by U+FFFD, as a decoder shows it.
std::string to_valid_utf8(std::string_view s);

// Makes every string field of `message`, its sub-messages included, valid UTF-8 (to_valid_utf8).
void make_strings_valid_utf8(google::protobuf::Message& message);

}  // namespace pairwall::control
