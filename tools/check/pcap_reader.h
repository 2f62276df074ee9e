// Reads pcap files, classic or pcapng (as Wireshark and dumpcap write them), and yields each
// packet's IP datagram, whatever the link type it was captured with.
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
  // A pcapng interface (its Interface Description Block): packet blocks name one by its number.
  struct Interface {
    uint32_t link_type = 0;
    uint32_t snaplen = 0;  // 0: none
    // Timestamps count units of 10^-exponent seconds, or 2^-exponent where binary.
    uint8_t exponent = 6;
    bool binary = false;
    int64_t offset_s = 0;  // if_tsoffset
  };

  std::optional<CapturedPacket> next_record();
  std::optional<CapturedPacket> next_block();
  // Reads `n` more bytes of the block being read, `before` read already; false (truncation() set,
  // unless the file ended cleanly between blocks) when the file ends first.
  bool read_block_bytes(std::vector<uint8_t>& out, std::size_t n, const char* what, std::size_t before = 0);
  void read_section_header(const std::vector<uint8_t>& body);
  void read_interface(const std::vector<uint8_t>& body, const std::string& where);  // where: for errors
  uint16_t u16(const uint8_t* p) const;
  uint32_t u32(const uint8_t* p) const;
  CapturedPacket packet_from(const Interface& iface, uint64_t timestamp, std::span<const uint8_t> frame,
                             uint32_t frame_bytes) const;

  std::ifstream in_;
  std::string path_;
  bool pcapng_ = false;
  bool swapped_ = false;
  bool nanoseconds_ = false;
  uint32_t link_type_ = 0;
  std::vector<Interface> interfaces_;  // pcapng: of the current section
  uint32_t blocks_ = 0;                // pcapng: blocks read, for errors that name one
  int64_t last_timestamp_us_ = 0;      // pcapng: a simple packet block has none of its own
  std::string truncation_;
};

}  // namespace pairwall::tools
