// PcapReader as pairwall-check replays captures: link layers stripped to the IP datagram, and files
// it cannot read refused with what is wrong.
#include "tools/check/pcap_reader.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/unit/support/temp_dir.h"

using pairwall::tools::CapturedPacket;
using pairwall::tools::PcapReader;

namespace {

using Bytes = std::vector<uint8_t>;

// A UDP datagram, 10.0.0.1:53 -> 10.0.0.2:53.
const Bytes kUdp = {0x45, 0x00, 0x00, 0x1c, 0x00, 0x01, 0x00, 0x00, 0x40, 0x11, 0xf9, 0xcf, 0x0a, 0x00,
                    0x00, 0x01, 0x0a, 0x00, 0x00, 0x02, 0x00, 0x35, 0x00, 0x35, 0x00, 0x08, 0x00, 0xff};

void put32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));  // little-endian
}

Bytes file_header(uint32_t link_type) {
  Bytes out;
  put32(out, 0xa1b2c3d4);
  put32(out, 2 | (4u << 16));  // version 2.4
  put32(out, 0);               // thiszone
  put32(out, 0);               // sigfigs
  put32(out, 65535);           // snaplen
  put32(out, link_type);
  return out;
}

void add_record(Bytes& out, const Bytes& frame) {
  put32(out, 1);
  put32(out, 0);
  put32(out, static_cast<uint32_t>(frame.size()));
  put32(out, static_cast<uint32_t>(frame.size()));
  out.insert(out.end(), frame.begin(), frame.end());
}

struct Capture {
  pairwall::test::TempDir dir{"pcap-reader-test"};
  std::string path = (dir.path / "capture.pcap").string();

  explicit Capture(const Bytes& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
};

// The one record of a capture holding `frame` under `link_type`, as the reader reads it back.
std::optional<CapturedPacket> read_single(uint32_t link_type, const Bytes& frame) {
  Bytes bytes = file_header(link_type);
  add_record(bytes, frame);
  Capture capture(bytes);
  PcapReader reader(capture.path);
  return reader.next();
}

}  // namespace

// Old libpcap wrote DLT_RAW's value into the file: 12 on most systems, 14 on OpenBSD (the
// tcpdump.org registry lists both as raw IP; LINKTYPE_RAW 101 came later).
TEST_CASE("pcap reader: raw IP under DLT_RAW's platform values 12 and 14", "[check]") {
  for (const uint32_t link_type : {101u, 12u, 14u}) {
    INFO("link type " << link_type);
    Bytes bytes = file_header(link_type);
    add_record(bytes, kUdp);
    Capture capture(bytes);
    PcapReader reader(capture.path);
    const auto packet = reader.next();
    REQUIRE(packet);
    CHECK(packet->ip == kUdp);
    CHECK_FALSE(reader.next());
  }
}

// OpenBSD writes a DLT's own value into its captures, and its DLT_LOOP (lo0, tun, gif, wg) is 12:
// frames there begin with the address family in network order, where raw IP's begin with the
// datagram's version.
TEST_CASE("pcap reader: link type 12 as OpenBSD's loopback, told by the frame", "[check]") {
  struct Case {
    Bytes head;
    bool ip;
  };
  const Case cases[] = {{{}, true}, {{0, 0, 0, 2}, true}, {{0, 0, 0, 24}, true}, {{0, 0, 0, 7}, false}};
  for (const auto& c : cases) {
    INFO("header of " << c.head.size() << " bytes");
    Bytes frame = c.head;
    frame.insert(frame.end(), kUdp.begin(), kUdp.end());
    const auto packet = read_single(12, frame);
    REQUIRE(packet);
    CHECK(packet->ip == (c.ip ? kUdp : Bytes{}));
  }
}

// The link type is the field's low 16 bits; above them a capture may say that its frames end with
// their FCS (bit 26, and its length in 16-bit words in bits 28-31), as libpcap reads it.
TEST_CASE("pcap reader: a link type field that announces an FCS", "[check]") {
  Bytes frame(12, 0);
  frame.push_back(0x08);
  frame.push_back(0x00);
  frame.insert(frame.end(), kUdp.begin(), kUdp.end());
  frame.insert(frame.end(), {0xde, 0xad, 0xbe, 0xef});  // the FCS
  const auto packet = read_single(0x24000001, frame);   // 2 words of FCS, Ethernet
  REQUIRE(packet);
  REQUIRE(packet->ip.size() >= kUdp.size());
  CHECK(Bytes(packet->ip.begin(), packet->ip.begin() + static_cast<std::ptrdiff_t>(kUdp.size())) == kUdp);
}

// A file that cannot be read is named with the system's reason, not taken for a short capture.
TEST_CASE("pcap reader: what cannot be read says why", "[check]") {
  pairwall::test::TempDir dir("pcap-reader-test");
  const std::string missing = (dir.path / "missing.pcap").string();
  CHECK_THROWS_WITH(PcapReader(missing), missing + ": cannot open: No such file or directory");
  CHECK_THROWS_WITH(PcapReader(dir.path.string()), dir.path.string() + ": cannot read: Is a directory");
}

// DLT_NULL's 4-byte header is the address family in the capturing host's byte order, DLT_LOOP's
// in network order; IPv6's value differs between systems (10 Linux, 24 NetBSD and OpenBSD, 28 FreeBSD, 30
// macOS). A frame of another family is not IP.
TEST_CASE("pcap reader: loopback frames by their address family", "[check]") {
  struct Case {
    uint32_t link_type;
    Bytes family;
    bool ip;
  };
  const Case cases[] = {
      {0, {2, 0, 0, 0}, true},    {0, {0, 0, 0, 2}, true},    {0, {30, 0, 0, 0}, true},
      {0, {0, 0, 0, 24}, true},   {0, {28, 0, 0, 0}, true},   {0, {10, 0, 0, 0}, true},
      {0, {7, 0, 0, 0}, false},   {0, {0, 0, 0, 7}, false},   {108, {0, 0, 0, 2}, true},
      {108, {0, 0, 0, 24}, true}, {108, {0, 0, 0, 7}, false},
  };
  for (const auto& c : cases) {
    INFO("link type " << c.link_type << ", family bytes " << int{c.family[0]} << " " << int{c.family[3]});
    Bytes frame = c.family;
    frame.insert(frame.end(), kUdp.begin(), kUdp.end());
    const auto packet = read_single(c.link_type, frame);
    REQUIRE(packet);
    CHECK(packet->ip == (c.ip ? kUdp : Bytes{}));
  }
}

// A record the snaplen cut is named for that wherever the cut fell: within the link header (or
// a record of no bytes) it is no sign that the frame was not IP.
TEST_CASE("pcap reader: why a record is not replayed", "[check]") {
  using pairwall::tools::CapturedPacket;
  using pairwall::tools::skip_reason;
  CapturedPacket whole{.timestamp_us = 0, .ip = kUdp, .captured_bytes = 42, .frame_bytes = 42};
  CHECK(skip_reason(whole, false) == nullptr);
  CHECK(std::string(skip_reason(whole, true)) == "fragment_reassembled_by_kernel");
  CapturedPacket cut_in_ip{.timestamp_us = 0,
                           .ip = Bytes(kUdp.begin(), kUdp.begin() + 20),
                           .captured_bytes = 34,
                           .frame_bytes = 42};
  CHECK(std::string(skip_reason(cut_in_ip, false)) == "cut_by_snaplen");
  CapturedPacket cut_in_link{.timestamp_us = 0, .ip = {}, .captured_bytes = 10, .frame_bytes = 42};
  CHECK(std::string(skip_reason(cut_in_link, false)) == "cut_by_snaplen");
  CapturedPacket nothing_kept{.timestamp_us = 0, .ip = {}, .captured_bytes = 0, .frame_bytes = 60};
  CHECK(std::string(skip_reason(nothing_kept, false)) == "cut_by_snaplen");
  CapturedPacket arp{.timestamp_us = 0, .ip = {}, .captured_bytes = 60, .frame_bytes = 60};
  CHECK(std::string(skip_reason(arp, false)) == "not_ip");

  // As read from an Ethernet capture with a 10-byte snaplen.
  Bytes bytes = file_header(1);
  put32(bytes, 1);
  put32(bytes, 0);
  put32(bytes, 10);
  put32(bytes, 42);
  bytes.insert(bytes.end(), 10, 0);
  Capture capture(bytes);
  PcapReader reader(capture.path);
  const auto packet = reader.next();
  REQUIRE(packet);
  CHECK(std::string(skip_reason(*packet, false)) == "cut_by_snaplen");
}

// The bytes a snaplen cut may be the link's trailer alone, past the datagram's own length: the
// padding of a short Ethernet frame, or its FCS. The node sees that datagram whole.
TEST_CASE("pcap reader: a cut that only takes the frame's padding or FCS leaves the datagram whole",
          "[check]") {
  using pairwall::tools::skip_reason;
  // kUdp (28 bytes) in a 60-byte Ethernet frame, the capture's snaplen 42 or 50.
  for (const uint32_t snaplen : {42u, 50u}) {
    INFO("snaplen " << snaplen);
    Bytes frame(12, 0);
    frame.insert(frame.end(), {0x08, 0x00});
    frame.insert(frame.end(), kUdp.begin(), kUdp.end());
    frame.resize(60, 0);
    Bytes bytes = file_header(1);
    put32(bytes, 1);
    put32(bytes, 0);
    put32(bytes, snaplen);
    put32(bytes, 60);
    bytes.insert(bytes.end(), frame.begin(), frame.begin() + snaplen);
    Capture capture(bytes);
    PcapReader reader(capture.path);
    const auto packet = reader.next();
    REQUIRE(packet);
    CHECK(skip_reason(*packet, false) == nullptr);
  }
  // One byte of the datagram itself cut: not whole.
  pairwall::tools::CapturedPacket cut{
      .timestamp_us = 0, .ip = Bytes(kUdp.begin(), kUdp.end() - 1), .captured_bytes = 41, .frame_bytes = 60};
  CHECK(std::string(skip_reason(cut, false)) == "cut_by_snaplen");
  // An IPv6 datagram whole by its payload length, the frame's FCS cut.
  Bytes v6 = {0x60, 0, 0, 0, 0, 8, 17, 64};
  v6.resize(40, 1);
  v6.insert(v6.end(), {0, 53, 0, 53, 0, 8, 0, 0});
  pairwall::tools::CapturedPacket fcs_cut{
      .timestamp_us = 0, .ip = v6, .captured_bytes = 62, .frame_bytes = 66};
  CHECK(skip_reason(fcs_cut, false) == nullptr);
  // A length field that does not give the datagram's end (0: a GSO packet larger than 64 KiB) says
  // nothing: the frame's own lengths decide.
  Bytes no_length = kUdp;
  no_length[2] = no_length[3] = 0;
  pairwall::tools::CapturedPacket unknown{
      .timestamp_us = 0, .ip = no_length, .captured_bytes = 42, .frame_bytes = 60};
  CHECK(std::string(skip_reason(unknown, false)) == "cut_by_snaplen");
}

// VLAN tags before the ethertype, as libpcap's `vlan` reads them: 802.1Q (0x8100), 802.1ad
// (0x88a8) and the older QinQ TPID 0x9100, one or stacked.
TEST_CASE("pcap reader: Ethernet frames behind VLAN tags", "[check]") {
  const std::vector<Bytes> tags = {
      {},
      {0x81, 0x00, 0x00, 0x05},
      {0x88, 0xa8, 0x00, 0x05, 0x81, 0x00, 0x00, 0x06},
      {0x91, 0x00, 0x00, 0x05, 0x81, 0x00, 0x00, 0x06},
      {0x91, 0x00, 0x00, 0x05},
  };
  for (const auto& tag : tags) {
    INFO("tags of " << tag.size() << " bytes, first " << (tag.empty() ? 0 : int{tag[0]}));
    Bytes frame(12, 0);
    frame.insert(frame.end(), tag.begin(), tag.end());
    frame.insert(frame.end(), {0x08, 0x00});
    frame.insert(frame.end(), kUdp.begin(), kUdp.end());
    const auto packet = read_single(1, frame);
    REQUIRE(packet);
    CHECK(packet->ip == kUdp);
  }
}
