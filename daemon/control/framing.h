// The control socket's frame: a 4-byte big-endian body length, then one serialized protobuf
// message (proto/control.proto documents the exchange). Shared by pairwalld and pairwallctl.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace google::protobuf {
class MessageLite;
}

namespace pairwall::control {

inline constexpr uint32_t kControlProtocolVersion = 1;
inline constexpr std::size_t kFrameHeaderBytes = 4;
// A request carries at most a table's new contents (`pairwallctl tables replace NAME -f FILE`):
// 16 MiB holds about 800,000 addresses.
inline constexpr std::size_t kMaxRequestBytes = 16u << 20;
inline constexpr std::size_t kMaxResponseBytes = 64u << 20;

// Appends the frame carrying `message` to `out`. Returns false (and leaves `out` as it was) when the
// body would exceed `max_body` bytes or cannot be serialized.
bool encode_frame(const google::protobuf::MessageLite& message, std::size_t max_body, std::string& out);

// Splits a byte stream into frame bodies. Feed it whatever the socket returned; next() yields each
// complete body in order. A length above the limit poisons the reader: the stream is out of step
// and nothing after it can be trusted.
class FrameReader {
 public:
  enum class Status : uint8_t { NeedMore, Frame, TooLarge };

  explicit FrameReader(std::size_t max_body) : max_body_(max_body) {}

  void feed(std::string_view bytes) { buffer_.append(bytes); }

  // Frame: `body` holds the next body. NeedMore: wait for more bytes. TooLarge: `length` says what
  // the peer announced; every later call returns TooLarge too.
  Status next(std::string& body);

  uint64_t announced_length() const { return announced_; }
  std::size_t buffered() const { return buffer_.size() - consumed_; }

 private:
  std::size_t max_body_;
  std::string buffer_;
  std::size_t consumed_ = 0;
  uint64_t announced_ = 0;
  bool poisoned_ = false;
};

// Parses a body into `message`. False when the bytes are not a valid message of that type.
bool decode_body(std::string_view body, google::protobuf::MessageLite& message);

}  // namespace pairwall::control
