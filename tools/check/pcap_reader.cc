#include "tools/check/pcap_reader.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "daemon/engine/checksum.h"

namespace pairwall::tools {
namespace {

// LINKTYPE_* values from the tcpdump.org link-layer header registry.
constexpr uint32_t kLinkNull = 0;
constexpr uint32_t kLinkEthernet = 1;
// Raw IP as old libpcap wrote DLT_RAW's own value: 12 on most systems, 14 on OpenBSD. OpenBSD,
// which writes its DLTs' own values, has DLT_LOOP at 12 (lo0, tun, gif, wg).
constexpr uint32_t kLinkRawDlt = 12;
constexpr uint32_t kLinkRawDltOpenBsd = 14;
constexpr uint32_t kLinkRaw = 101;
constexpr uint32_t kLinkLoop = 108;
constexpr uint32_t kLinkLinuxSll = 113;
constexpr uint32_t kLinkIpv4 = 228;
constexpr uint32_t kLinkIpv6 = 229;
constexpr uint32_t kLinkLinuxSll2 = 276;

uint32_t bswap32(uint32_t v) {
  return __builtin_bswap32(v);
}

// AF_INET, and AF_INET6 as Linux (10), NetBSD and OpenBSD (24), FreeBSD (28) and macOS (30) number it.
bool is_ip_family(uint32_t family) {
  return family == 2 || family == 10 || family == 24 || family == 28 || family == 30;
}

// Whether `ip` holds the whole datagram its header's length field gives. False where that field
// does not give its end (0: a GSO packet past 64 KiB, an IPv6 jumbogram; less than a header) or
// cannot be read.
bool datagram_whole(const std::vector<uint8_t>& ip) {
  std::size_t length = 0;
  if (ip.size() >= 20 && (ip[0] >> 4) == 4) length = engine::load_be16(&ip[2]);
  if (ip.size() >= 40 && (ip[0] >> 4) == 6 && engine::load_be16(&ip[4]) != 0)
    length = 40 + engine::load_be16(&ip[4]);
  return length >= 20 && ip.size() >= length;
}

}  // namespace

const char* skip_reason(const CapturedPacket& packet, bool fragment) {
  // A cut past the datagram's end took only the frame's trailer (Ethernet padding, an FCS).
  if (packet.frame_bytes > packet.captured_bytes && !datagram_whole(packet.ip)) return "cut_by_snaplen";
  if (packet.ip.empty()) return "not_ip";
  if (fragment) return "fragment_reassembled_by_kernel";
  return nullptr;
}

PcapReader::PcapReader(const std::string& path) : in_(path, std::ios::binary), path_(path) {
  if (!in_) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  std::array<uint32_t, 6> header{};
  errno = 0;
  if (!in_.read(reinterpret_cast<char*>(header.data()), sizeof header)) {
    // A directory opens like a file and fails to read (EISDIR): not a short capture.
    if (in_.bad() && errno != 0) throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
    throw std::runtime_error(path + ": too short for a pcap header");
  }
  switch (header[0]) {
    case 0xa1b2c3d4:
      break;
    case 0xd4c3b2a1:
      swapped_ = true;
      break;
    case 0xa1b23c4d:
      nanoseconds_ = true;
      break;
    case 0x4d3cb2a1:
      swapped_ = nanoseconds_ = true;
      break;
    case 0x0a0d0d0a:
      throw std::runtime_error(path + ": pcapng is not supported; convert with `editcap -F pcap`");
    default:
      throw std::runtime_error(path + ": not a pcap file (bad magic)");
  }
  // The link type is the low 16 bits; the bits above may announce an FCS at each frame's end
  // (which the IP datagram's own length leaves out, as it does Ethernet padding).
  link_type_ = (swapped_ ? bswap32(header[5]) : header[5]) & 0xffff;
  switch (link_type_) {
    case kLinkNull:
    case kLinkEthernet:
    case kLinkRawDlt:
    case kLinkRawDltOpenBsd:
    case kLinkRaw:
    case kLinkLoop:
    case kLinkLinuxSll:
    case kLinkIpv4:
    case kLinkIpv6:
    case kLinkLinuxSll2:
      break;
    default:
      throw std::runtime_error(path + ": unsupported link type " + std::to_string(link_type_));
  }
}

std::optional<CapturedPacket> PcapReader::next() {
  std::array<uint32_t, 4> record{};
  if (!in_.read(reinterpret_cast<char*>(record.data()), sizeof record)) {
    if (in_.gcount() != 0) {
      truncation_ = "the last record header is cut short (" + std::to_string(in_.gcount()) + " of " +
                    std::to_string(sizeof record) + " bytes)";
    }
    return std::nullopt;
  }
  if (swapped_)
    for (auto& v : record) v = bswap32(v);
  const uint32_t caplen = record[2];
  if (caplen > (1u << 20)) throw std::runtime_error(path_ + ": record larger than 1 MiB, file corrupt");
  std::vector<uint8_t> frame(caplen);
  if (!in_.read(reinterpret_cast<char*>(frame.data()), caplen)) {
    truncation_ = "the last record is cut short (" + std::to_string(in_.gcount()) + " of " +
                  std::to_string(caplen) + " bytes)";
    return std::nullopt;
  }
  CapturedPacket packet;
  packet.timestamp_us = int64_t{record[0]} * 1'000'000 + (nanoseconds_ ? record[1] / 1000 : record[1]);
  packet.captured_bytes = caplen;
  packet.frame_bytes = record[3];
  const auto ip = strip_link_layer(frame);
  packet.ip.assign(ip.begin(), ip.end());
  return packet;
}

std::span<const uint8_t> PcapReader::strip_link_layer(std::span<const uint8_t> frame) const {
  std::size_t offset = 0;
  uint16_t ethertype = 0;
  switch (link_type_) {
    case kLinkRawDlt:
      // A raw datagram begins with its version; OpenBSD's DLT_LOOP frame with a zero byte, the
      // first of the address family in network order.
      if (frame.empty() || frame[0] != 0) return frame;
      [[fallthrough]];
    case kLinkNull:
    case kLinkLoop: {
      // The address family: DLT_LOOP's in network order, DLT_NULL's in the capturing host's byte
      // order, which the file does not say (families are small numbers, read the other way huge).
      if (frame.size() < 4) return {};
      const uint32_t be = engine::load_be32(&frame[0]);
      const uint32_t family = link_type_ != kLinkNull || be < 0x10000 ? be : bswap32(be);
      if (!is_ip_family(family)) return {};
      offset = 4;
      break;
    }
    case kLinkRawDltOpenBsd:
    case kLinkRaw:
    case kLinkIpv4:
    case kLinkIpv6:
      return frame;
    case kLinkEthernet:
      if (frame.size() < 14) return {};
      ethertype = engine::load_be16(&frame[12]);
      offset = 14;
      // VLAN tags, as libpcap's `vlan` knows them: 802.1Q, 802.1ad, and the older QinQ 0x9100.
      while ((ethertype == 0x8100 || ethertype == 0x88a8 || ethertype == 0x9100) &&
             frame.size() >= offset + 4) {
        ethertype = engine::load_be16(&frame[offset + 2]);
        offset += 4;
      }
      if (ethertype != 0x0800 && ethertype != 0x86dd) return {};
      break;
    case kLinkLinuxSll:
      if (frame.size() < 16) return {};
      ethertype = engine::load_be16(&frame[14]);
      if (ethertype != 0x0800 && ethertype != 0x86dd) return {};
      offset = 16;
      break;
    case kLinkLinuxSll2:
      if (frame.size() < 20) return {};
      ethertype = engine::load_be16(&frame[0]);
      if (ethertype != 0x0800 && ethertype != 0x86dd) return {};
      offset = 20;
      break;
    default:
      return {};
  }
  if (frame.size() <= offset) return {};
  return frame.subspan(offset);
}

}  // namespace pairwall::tools
