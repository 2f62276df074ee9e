#include "tools/check/pcap_reader.h"

#include <algorithm>
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

// pcapng (draft-ietf-opsawg-pcapng): the block types read; others are skipped.
constexpr uint32_t kSectionHeader = 0x0a0d0d0a;  // a palindrome: the same in either byte order
constexpr uint32_t kByteOrderMagic = 0x1a2b3c4d;
constexpr uint32_t kInterfaceDescription = 1;
constexpr uint32_t kObsoletePacket = 2;
constexpr uint32_t kSimplePacket = 3;
constexpr uint32_t kEnhancedPacket = 6;
constexpr uint16_t kOptionTimestampResolution = 9;  // if_tsresol
constexpr uint16_t kOptionTimestampOffset = 14;     // if_tsoffset
constexpr uint32_t kMaxCaptured = 1u << 20;
constexpr uint32_t kMaxBlock = 16u << 20;

uint32_t bswap32(uint32_t v) {
  return __builtin_bswap32(v);
}

// AF_INET, and AF_INET6 as Linux (10), NetBSD and OpenBSD (24), FreeBSD (28) and macOS (30) number it.
bool is_ip_family(uint32_t family) {
  return family == 2 || family == 10 || family == 24 || family == 28 || family == 30;
}

bool supported_link_type(uint32_t link_type) {
  switch (link_type) {
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
      return true;
    default:
      return false;
  }
}

std::span<const uint8_t> strip_link_layer(std::span<const uint8_t> frame, uint32_t link_type) {
  std::size_t offset = 0;
  uint16_t ethertype = 0;
  switch (link_type) {
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
      const uint32_t family = link_type != kLinkNull || be < 0x10000 ? be : bswap32(be);
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
  const bool whole = static_cast<bool>(in_.read(reinterpret_cast<char*>(header.data()), sizeof header));
  // A directory opens like a file and fails to read (EISDIR): not a short capture.
  if (in_.bad() && errno != 0) throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
  const bool pcapng = in_.gcount() >= 4 && header[0] == kSectionHeader;
  if (!whole && !pcapng) throw std::runtime_error(path + ": too short for a pcap header");
  if (pcapng) {
    // pcapng: read block by block from the first, its section header (next_block()).
    pcapng_ = true;
    in_.clear();
    in_.seekg(0);
    return;
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
    default:
      throw std::runtime_error(path + ": not a pcap file (bad magic)");
  }
  // The link type is the low 16 bits; the bits above may announce an FCS at each frame's end
  // (which the IP datagram's own length leaves out, as it does Ethernet padding).
  link_type_ = (swapped_ ? bswap32(header[5]) : header[5]) & 0xffff;
  if (!supported_link_type(link_type_))
    throw std::runtime_error(path + ": unsupported link type " + std::to_string(link_type_));
}

std::optional<CapturedPacket> PcapReader::next() {
  return pcapng_ ? next_block() : next_record();
}

std::optional<CapturedPacket> PcapReader::next_record() {
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
  if (caplen > kMaxCaptured) throw std::runtime_error(path_ + ": record larger than 1 MiB, file corrupt");
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
  const auto ip = strip_link_layer(frame, link_type_);
  packet.ip.assign(ip.begin(), ip.end());
  return packet;
}

uint16_t PcapReader::u16(const uint8_t* p) const {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return swapped_ ? __builtin_bswap16(v) : v;
}

uint32_t PcapReader::u32(const uint8_t* p) const {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return swapped_ ? bswap32(v) : v;
}

bool PcapReader::read_block_bytes(std::vector<uint8_t>& out, std::size_t n, const char* what,
                                  std::size_t before) {
  out.resize(n);
  if (in_.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n))) return true;
  if (in_.gcount() != 0 || before != 0) {
    truncation_ = std::string("the last ") + what + " is cut short (" +
                  std::to_string(before + static_cast<std::size_t>(in_.gcount())) + " of " +
                  std::to_string(before + n) + " bytes)";
  }
  return false;
}

std::optional<CapturedPacket> PcapReader::next_block() {
  std::vector<uint8_t> head;
  std::vector<uint8_t> body;
  for (;;) {
    if (!read_block_bytes(head, 8, "block header")) return std::nullopt;
    const std::string where = path_ + ": pcapng block " + std::to_string(++blocks_);
    // The section header's type reads alike in either byte order; another block's is in the
    // section's.
    const uint32_t type = u32(head.data());
    if (type == kSectionHeader) {
      // A section says its byte order after its length: read it first, then the length.
      std::vector<uint8_t> magic;
      if (!read_block_bytes(magic, 4, "section header", head.size())) return std::nullopt;
      uint32_t order;
      std::memcpy(&order, magic.data(), sizeof order);
      if (order != kByteOrderMagic && order != bswap32(kByteOrderMagic))
        throw std::runtime_error(where + ": a section header with a bad byte-order magic, file corrupt");
      swapped_ = order != kByteOrderMagic;
      head.insert(head.end(), magic.begin(), magic.end());
    }
    const uint32_t total = u32(head.data() + 4);
    if (total < head.size() + 4 || total % 4 != 0 || total > kMaxBlock)
      throw std::runtime_error(where + " is " + std::to_string(total) + " bytes long, file corrupt");
    if (!read_block_bytes(body, total - head.size(), "block", head.size())) return std::nullopt;
    if (u32(body.data() + body.size() - 4) != total)
      throw std::runtime_error(where + ": its two lengths differ, file corrupt");
    body.resize(body.size() - 4);
    switch (type) {
      case kSectionHeader:
        read_section_header(body);
        continue;
      case kInterfaceDescription:
        read_interface(body, where);
        continue;
      case kEnhancedPacket:
      case kObsoletePacket: {
        if (body.size() < 20) throw std::runtime_error(where + ": a packet block too short, file corrupt");
        const bool enhanced = type == kEnhancedPacket;
        const uint32_t id = enhanced ? u32(body.data()) : u16(body.data());
        const uint64_t timestamp = uint64_t{u32(body.data() + 4)} << 32 | u32(body.data() + 8);
        const uint32_t caplen = u32(body.data() + 12);
        const uint32_t frame_bytes = u32(body.data() + 16);
        if (caplen > kMaxCaptured || caplen > body.size() - 20)
          throw std::runtime_error(where + ": a packet of " + std::to_string(caplen) +
                                   " bytes runs past its block, file corrupt");
        if (id >= interfaces_.size()) {
          throw std::runtime_error(where + ": a packet on interface " + std::to_string(id) +
                                   ", which no interface block described");
        }
        CapturedPacket packet = packet_from(interfaces_[id], timestamp,
                                            std::span<const uint8_t>(body).subspan(20, caplen), frame_bytes);
        last_timestamp_us_ = packet.timestamp_us;
        return packet;
      }
      case kSimplePacket: {
        // Interface 0's, without a timestamp: it keeps the previous packet's.
        if (body.size() < 4) throw std::runtime_error(where + ": a packet block too short, file corrupt");
        if (interfaces_.empty())
          throw std::runtime_error(where + ": a packet on interface 0, which no interface block described");
        const Interface& iface = interfaces_[0];
        const uint32_t frame_bytes = u32(body.data());
        uint32_t caplen = std::min<uint32_t>(frame_bytes, static_cast<uint32_t>(body.size() - 4));
        if (iface.snaplen != 0) caplen = std::min(caplen, iface.snaplen);
        if (caplen > kMaxCaptured)
          throw std::runtime_error(where + ": a packet larger than 1 MiB, file corrupt");
        CapturedPacket packet =
            packet_from(iface, 0, std::span<const uint8_t>(body).subspan(4, caplen), frame_bytes);
        packet.timestamp_us = last_timestamp_us_;
        return packet;
      }
      default:
        continue;  // name resolution, statistics, secrets, custom blocks
    }
  }
}

void PcapReader::read_section_header(const std::vector<uint8_t>& body) {
  // After the byte-order magic: version, section length, options.
  if (body.size() < 12) throw std::runtime_error(path_ + ": a pcapng section header too short, file corrupt");
  const uint16_t major = u16(body.data());
  if (major != 1) {
    throw std::runtime_error(path_ + ": pcapng version " + std::to_string(major) + "." +
                             std::to_string(u16(body.data() + 2)) + " is not supported (1.x is)");
  }
  interfaces_.clear();  // a section's interfaces are numbered from 0 again
}

void PcapReader::read_interface(const std::vector<uint8_t>& body, const std::string& where) {
  if (body.size() < 8) throw std::runtime_error(where + ": an interface block too short, file corrupt");
  Interface iface;
  iface.link_type = u16(body.data());
  iface.snaplen = u32(body.data() + 4);
  if (!supported_link_type(iface.link_type)) {
    throw std::runtime_error(where + ": interface " + std::to_string(interfaces_.size()) +
                             " has unsupported link type " + std::to_string(iface.link_type));
  }
  for (std::size_t at = 8; at + 4 <= body.size();) {
    const uint16_t code = u16(body.data() + at);
    const uint16_t length = u16(body.data() + at + 2);
    if (code == 0) break;  // opt_endofopt
    if (at + 4 + length > body.size())
      throw std::runtime_error(where + ": an option runs past its block, file corrupt");
    const uint8_t* value = body.data() + at + 4;
    if (code == kOptionTimestampResolution && length == 1) {
      iface.binary = (value[0] & 0x80) != 0;
      iface.exponent = value[0] & 0x7f;
      if (iface.exponent > (iface.binary ? 63 : 18)) {
        throw std::runtime_error(where + ": a timestamp resolution of " +
                                 std::string(iface.binary ? "2" : "10") + "^-" +
                                 std::to_string(iface.exponent) + " s is not supported");
      }
    } else if (code == kOptionTimestampOffset && length == 8) {
      uint64_t offset;
      std::memcpy(&offset, value, sizeof offset);
      iface.offset_s = static_cast<int64_t>(swapped_ ? __builtin_bswap64(offset) : offset);
    }
    at += 4 + (std::size_t{length} + 3) / 4 * 4;
  }
  interfaces_.push_back(iface);
}

CapturedPacket PcapReader::packet_from(const Interface& iface, uint64_t timestamp,
                                       std::span<const uint8_t> frame, uint32_t frame_bytes) const {
  CapturedPacket packet;
  __extension__ using Wide = unsigned __int128;
  uint64_t us = 0;
  if (iface.binary) {
    us = static_cast<uint64_t>((Wide{timestamp} * 1'000'000) >> iface.exponent);
  } else if (iface.exponent <= 6) {
    uint64_t scale = 1;
    for (int i = iface.exponent; i < 6; ++i) scale *= 10;
    us = timestamp * scale;
  } else {
    uint64_t scale = 1;
    for (int i = 6; i < iface.exponent; ++i) scale *= 10;
    us = timestamp / scale;
  }
  // Unsigned: a corrupt file's offset wraps rather than overflows.
  packet.timestamp_us = static_cast<int64_t>(us + static_cast<uint64_t>(iface.offset_s) * 1'000'000u);
  packet.captured_bytes = static_cast<uint32_t>(frame.size());
  packet.frame_bytes = frame_bytes;
  const auto ip = strip_link_layer(frame, iface.link_type);
  packet.ip.assign(ip.begin(), ip.end());
  return packet;
}

}  // namespace pairwall::tools
