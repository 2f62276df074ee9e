#include "daemon/control/framing.h"

#include <google/protobuf/message_lite.h>

#include <limits>

namespace pairwall::control {

bool encode_frame(const google::protobuf::MessageLite& message, std::size_t max_body, std::string& out) {
  const std::size_t size = message.ByteSizeLong();
  if (size > max_body || size > std::numeric_limits<uint32_t>::max()) return false;
  const std::size_t start = out.size();
  out.resize(start + kFrameHeaderBytes);
  const auto n = static_cast<uint32_t>(size);
  out[start + 0] = static_cast<char>(n >> 24);
  out[start + 1] = static_cast<char>(n >> 16);
  out[start + 2] = static_cast<char>(n >> 8);
  out[start + 3] = static_cast<char>(n);
  if (!message.AppendToString(&out)) {
    out.resize(start);
    return false;
  }
  return true;
}

FrameReader::Status FrameReader::next(std::string& body) {
  if (poisoned_) return Status::TooLarge;
  const std::size_t available = buffer_.size() - consumed_;
  if (available < kFrameHeaderBytes) return Status::NeedMore;
  const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + consumed_);
  const uint32_t length = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
  if (length > max_body_) {
    announced_ = length;
    poisoned_ = true;
    buffer_.clear();
    consumed_ = 0;
    return Status::TooLarge;
  }
  if (available - kFrameHeaderBytes < length) return Status::NeedMore;
  body.assign(buffer_, consumed_ + kFrameHeaderBytes, length);
  consumed_ += kFrameHeaderBytes + length;
  // Compact once the consumed prefix dominates, so a long-lived connection does not grow the buffer.
  if (consumed_ == buffer_.size()) {
    buffer_.clear();
    consumed_ = 0;
  } else if (consumed_ > 4096 && consumed_ * 2 > buffer_.size()) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  return Status::Frame;
}

bool decode_body(std::string_view body, google::protobuf::MessageLite& message) {
  if (body.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) return false;
  return message.ParseFromArray(body.data(), static_cast<int>(body.size()));
}

}  // namespace pairwall::control
