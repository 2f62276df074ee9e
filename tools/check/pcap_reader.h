// Reads classic pcap files (not pcapng) and yields each packet's IP datagram, whatever the link
// type tcpdump captured it with.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace pairwall::tools {

struct CapturedPacket {
  int64_t timestamp_us = 0;
  std::vector<uint8_t> ip;  // starts at the IPv4/IPv6 header; empty for non-IP frames
};

class PcapReader {
 public:
  // Throws std::runtime_error naming the file and what is wrong with it.
  explicit PcapReader(const std::string& path);

  // The next packet, or nullopt at the end. A truncated last record ends the file.
  std::optional<CapturedPacket> next();

 private:
  std::span<const uint8_t> strip_link_layer(std::span<const uint8_t> frame) const;

  std::ifstream in_;
  std::string path_;
  bool swapped_ = false;
  bool nanoseconds_ = false;
  uint32_t link_type_ = 0;
};

}  // namespace pairwall::tools
