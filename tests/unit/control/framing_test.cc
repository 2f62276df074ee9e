// The control socket's frame: round trips, split and coalesced reads, and the frames a daemon
// must refuse (oversized, garbage).
#include "daemon/control/framing.h"

#include <catch2/catch.hpp>
#include <string>

#include "proto/control.pb.h"

using namespace pairwall::control;

namespace {

Request rules_load(const std::string& path) {
  Request r;
  r.set_version(kControlProtocolVersion);
  r.mutable_rules_load()->set_path(path);
  return r;
}

std::string header(uint32_t n) {
  return std::string{static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                     static_cast<char>(n)};
}

}  // namespace

TEST_CASE("framing: encode writes a big-endian length then the body", "[framing]") {
  const Request r = rules_load("/etc/pairwall/pf.conf");
  std::string frame;
  REQUIRE(encode_frame(r, kMaxRequestBytes, frame));
  const std::string body = r.SerializeAsString();
  REQUIRE(frame.size() == 4 + body.size());
  CHECK(frame.substr(0, 4) == header(static_cast<uint32_t>(body.size())));
  CHECK(frame.substr(4) == body);
}

TEST_CASE("framing: encode appends, and refuses a body over the limit without touching out", "[framing]") {
  std::string frame = "prefix";
  const Request big = rules_load(std::string(200, 'p'));
  CHECK_FALSE(encode_frame(big, 100, frame));
  CHECK(frame == "prefix");
  CHECK(encode_frame(big, 1000, frame));
  CHECK(frame.substr(0, 6) == "prefix");
}

TEST_CASE("framing: decode round trip, byte by byte and coalesced", "[framing]") {
  std::string stream;
  for (int i = 0; i < 3; ++i)
    REQUIRE(encode_frame(rules_load("/f" + std::to_string(i)), kMaxRequestBytes, stream));
  Request empty;  // a zero-length body is a valid frame
  REQUIRE(encode_frame(empty, kMaxRequestBytes, stream));

  SECTION("one byte at a time") {
    FrameReader reader(kMaxRequestBytes);
    std::vector<std::string> bodies;
    std::string body;
    for (char c : stream) {
      reader.feed(std::string_view(&c, 1));
      while (reader.next(body) == FrameReader::Status::Frame) bodies.push_back(body);
    }
    REQUIRE(bodies.size() == 4);
    for (int i = 0; i < 3; ++i) {
      Request r;
      REQUIRE(decode_body(bodies[static_cast<std::size_t>(i)], r));
      CHECK(r.rules_load().path() == "/f" + std::to_string(i));
    }
    CHECK(bodies[3].empty());
    CHECK(reader.buffered() == 0);
  }
  SECTION("all at once") {
    FrameReader reader(kMaxRequestBytes);
    reader.feed(stream);
    std::string body;
    int n = 0;
    while (reader.next(body) == FrameReader::Status::Frame) ++n;
    CHECK(n == 4);
    CHECK(reader.next(body) == FrameReader::Status::NeedMore);
  }
}

TEST_CASE("framing: a partial header or body waits for more", "[framing]") {
  FrameReader reader(kMaxRequestBytes);
  std::string body;
  reader.feed(header(10).substr(0, 3));
  CHECK(reader.next(body) == FrameReader::Status::NeedMore);
  reader.feed(header(10).substr(3) + "12345");
  CHECK(reader.next(body) == FrameReader::Status::NeedMore);
  reader.feed("67890");
  CHECK(reader.next(body) == FrameReader::Status::Frame);
  CHECK(body == "1234567890");
}

TEST_CASE("framing: an oversized length poisons the reader", "[framing]") {
  FrameReader reader(kMaxRequestBytes);
  std::string body;
  reader.feed(header(static_cast<uint32_t>(kMaxRequestBytes) + 1));
  CHECK(reader.next(body) == FrameReader::Status::TooLarge);
  CHECK(reader.announced_length() == kMaxRequestBytes + 1);
  // Whatever follows is not trusted, even a valid frame.
  std::string good;
  REQUIRE(encode_frame(rules_load("/x"), kMaxRequestBytes, good));
  reader.feed(good);
  CHECK(reader.next(body) == FrameReader::Status::TooLarge);

  FrameReader huge(kMaxRequestBytes);
  huge.feed(header(0xffffffffu));
  CHECK(huge.next(body) == FrameReader::Status::TooLarge);
  CHECK(huge.announced_length() == 0xffffffffu);

  FrameReader exact(16);
  exact.feed(header(16) + std::string(16, '\0'));
  CHECK(exact.next(body) == FrameReader::Status::Frame);
}

TEST_CASE("framing: garbage bodies do not decode as a Request", "[framing]") {
  Request r;
  // Field 1 (version) declared as a length-delimited field running past the end.
  CHECK_FALSE(decode_body(std::string("\x0a\x50", 2), r));
  // A truncated varint.
  CHECK_FALSE(decode_body(std::string("\x08\xff\xff", 3), r));
  // Field number 0 is invalid.
  CHECK_FALSE(decode_body(std::string("\x00\x01", 2), r));
  // End-group without start-group.
  CHECK_FALSE(decode_body(std::string("\x0c", 1), r));
  // A nested message whose contents are themselves garbage.
  CHECK_FALSE(decode_body(std::string("\x5a\x02\x0a\x50", 4), r));
  // Text is not protobuf.
  CHECK_FALSE(decode_body("GET /metrics HTTP/1.0\r\n\r\n", r));
}

TEST_CASE("framing: a valid body without a command decodes but carries no command", "[framing]") {
  Request r;
  REQUIRE(decode_body("", r));
  CHECK(r.command_case() == Request::COMMAND_NOT_SET);
  // Unknown fields from a newer client are skipped, as protobuf does.
  REQUIRE(decode_body(std::string("\xf8\x3f\x01", 3), r));
  CHECK(r.command_case() == Request::COMMAND_NOT_SET);
}
