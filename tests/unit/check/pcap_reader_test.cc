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

namespace {

// A pcapng file (draft-ietf-opsawg-pcapng) in either byte order, block by block.
struct Pcapng {
  bool big_endian = false;
  Bytes bytes;

  void put(Bytes& out, uint64_t v, int size) const {
    for (int i = 0; i < size; ++i) {
      const int shift = 8 * (big_endian ? size - 1 - i : i);
      out.push_back(static_cast<uint8_t>(v >> shift));
    }
  }
  Pcapng& block(uint32_t type, Bytes body) {
    while (body.size() % 4 != 0) body.push_back(0);
    const auto total = static_cast<uint32_t>(body.size() + 12);
    put(bytes, type, 4);
    put(bytes, total, 4);
    bytes.insert(bytes.end(), body.begin(), body.end());
    put(bytes, total, 4);
    return *this;
  }
  Pcapng& section(uint16_t major = 1) {
    Bytes body;
    put(body, 0x1a2b3c4d, 4);
    put(body, major, 2);
    put(body, 0, 2);
    put(body, ~uint64_t{0}, 8);  // section length unknown
    return block(0x0a0d0d0a, body);
  }
  // tsresol: if_tsresol's byte, 0 for none (microseconds).
  Pcapng& interface(uint16_t link_type, uint8_t tsresol = 0, uint32_t snaplen = 0) {
    Bytes body;
    put(body, link_type, 2);
    put(body, 0, 2);
    put(body, snaplen, 4);
    if (tsresol != 0) {
      put(body, 9, 2);
      put(body, 1, 2);
      body.insert(body.end(), {tsresol, 0, 0, 0});
    }
    put(body, 0, 4);  // opt_endofopt
    return block(1, body);
  }
  Pcapng& packet(uint32_t interface, uint64_t timestamp, const Bytes& frame, uint32_t frame_bytes = 0) {
    Bytes body;
    put(body, interface, 4);
    put(body, timestamp >> 32, 4);
    put(body, timestamp & 0xffffffff, 4);
    put(body, frame.size(), 4);
    put(body, frame_bytes != 0 ? frame_bytes : frame.size(), 4);
    body.insert(body.end(), frame.begin(), frame.end());
    return block(6, body);
  }
  Pcapng& simple_packet(const Bytes& frame) {
    Bytes body;
    put(body, frame.size(), 4);
    body.insert(body.end(), frame.begin(), frame.end());
    return block(3, body);
  }
};

Bytes ethernet(const Bytes& ip) {
  Bytes frame = {2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00};
  frame.insert(frame.end(), ip.begin(), ip.end());
  return frame;
}

}  // namespace

// What Wireshark and dumpcap write: interfaces of their own link types and timestamp
// resolutions, blocks the replay has no use for, packets without a timestamp.
TEST_CASE("pcap reader: pcapng, in either byte order, interface by interface", "[check]") {
  for (const bool big_endian : {false, true}) {
    INFO((big_endian ? "big-endian" : "little-endian"));
    Pcapng file;
    file.big_endian = big_endian;
    file.section()
        .interface(1)                              // Ethernet, microseconds
        .block(4, Bytes(12, 0))                    // name resolution: skipped
        .packet(0, 1'500'000, ethernet(kUdp))      // 1.5 s
        .interface(101, 9)                         // raw IP, nanoseconds
        .packet(1, 2'000'000'123'456, kUdp, 1500)  // 2000.000123456 s; 1,500 bytes on the wire
        .interface(228, 0x80 | 10)                 // IPv4, 2^-10 s
        .packet(2, 3 * 1024, kUdp)                 // 3 s
        .simple_packet(ethernet(kUdp))             // interface 0's, the time of the one before
        .block(5, Bytes(24, 0));                   // interface statistics: skipped
    Capture capture(file.bytes);
    PcapReader reader(capture.path);
    const auto first = reader.next();
    REQUIRE(first);
    CHECK(first->timestamp_us == 1'500'000);
    CHECK(first->ip == kUdp);
    CHECK(first->captured_bytes == kUdp.size() + 14);
    const auto second = reader.next();
    REQUIRE(second);
    CHECK(second->timestamp_us == 2'000'000'123);
    CHECK(second->ip == kUdp);
    CHECK(second->frame_bytes == 1500);
    const auto third = reader.next();
    REQUIRE(third);
    CHECK(third->timestamp_us == 3'000'000);
    const auto fourth = reader.next();
    REQUIRE(fourth);
    CHECK(fourth->ip == kUdp);
    CHECK(fourth->timestamp_us == 3'000'000);
    CHECK_FALSE(reader.next());
    CHECK(reader.truncation().empty());
  }
}

TEST_CASE("pcap reader: a pcapng file cut short or broken says where", "[check]") {
  // Cut in the last block, as a capture copied while dumpcap still wrote it: the packets before it.
  Pcapng file;
  file.section().interface(101).packet(0, 1, kUdp).packet(0, 2, kUdp);
  Bytes cut(file.bytes.begin(), file.bytes.end() - 10);
  Capture truncated(cut);
  PcapReader reader(truncated.path);
  REQUIRE(reader.next());
  CHECK_FALSE(reader.next());
  CHECK(reader.truncation() == "the last block is cut short (50 of 60 bytes)");

  auto error_of = [](const Bytes& bytes) {
    Capture capture(bytes);
    try {
      PcapReader broken(capture.path);
      while (broken.next()) {
      }
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      return what.substr(what.find(": ") + 2);
    }
    return std::string("(read)");
  };
  CHECK(error_of(Pcapng{}.section().packet(0, 1, kUdp).bytes) ==
        "pcapng block 2: a packet on interface 0, which no interface block described");
  CHECK(error_of(Pcapng{}.section().interface(147).bytes) ==
        "pcapng block 2: interface 0 has unsupported link type 147");
  CHECK(error_of(Pcapng{}.section(2).bytes) == "pcapng version 2.0 is not supported (1.x is)");
  // A new section numbers its interfaces from 0 again, and describes its own.
  CHECK(error_of(Pcapng{}.section().interface(101).packet(0, 1, kUdp).section().packet(0, 1, kUdp).bytes) ==
        "pcapng block 5: a packet on interface 0, which no interface block described");
  Bytes lengths = Pcapng{}.section().interface(101).bytes;
  lengths[lengths.size() - 1] = 0x7f;  // the interface block's trailing length
  CHECK(error_of(lengths) == "pcapng block 2: its two lengths differ, file corrupt");
  Bytes odd = Pcapng{}.section().interface(101).bytes;
  odd[28 + 4] = 21;  // the interface block's length: not a multiple of 4
  CHECK(error_of(odd) == "pcapng block 2 is 21 bytes long, file corrupt");
}
