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
  std::vector<uint8_t> ip;      // starts at the IPv4/IPv6 header; empty for non-IP frames
  uint32_t captured_bytes = 0;  // of the frame, as recorded
  uint32_t frame_bytes = 0;     // as it was on the wire: more when the capture's snaplen cut it
};

// Why the node would never see `packet` as the capture holds it, or nullptr to replay it: the
// capture's snaplen cut it ("cut_by_snaplen", wherever the cut fell, within the link header too,
// but for a cut that took only the frame's trailer past the whole datagram: padding, an FCS),
// it is not IP ("not_ip"), or it is a fragment, which the kernel reassembles before the queue
// ("fragment_reassembled_by_kernel").
const char* skip_reason(const CapturedPacket& packet, bool fragment);

class PcapReader {
 public:
  // Throws std::runtime_error naming the file and what is wrong with it.
  explicit PcapReader(const std::string& path);

  // The next packet, or nullopt at the end. A truncated last record (a capture copied while
  // tcpdump still wrote it) ends the file, and truncation() then says so.
  std::optional<CapturedPacket> next();

  // What was cut short at the end of the file ("" when nothing was).
  const std::string& truncation() const { return truncation_; }

 private:
  std::span<const uint8_t> strip_link_layer(std::span<const uint8_t> frame) const;

  std::ifstream in_;
  std::string path_;
  bool swapped_ = false;
  bool nanoseconds_ = false;
  uint32_t link_type_ = 0;
  std::string truncation_;
};

}  // namespace pairwall::tools
