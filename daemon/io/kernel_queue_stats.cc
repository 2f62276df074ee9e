#include "daemon/io/kernel_queue_stats.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace pairwall::io {

std::vector<KernelQueueStats> parse_kernel_queue_stats(std::string_view text) {
  std::vector<KernelQueueStats> out;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    uint64_t queue = 0, portid = 0, queued = 0, mode = 0, range = 0, qdrop = 0, udrop = 0, seq = 0;
    // Columns: queue, peer portid, queued, copy mode, copy range, queue dropped, user dropped,
    // id sequence, and a constant 1 (kernel net/netfilter/nfnetlink_queue.c, seq_show).
    if (!(fields >> queue >> portid >> queued >> mode >> range >> qdrop >> udrop >> seq)) continue;
    if (queue > UINT16_MAX) continue;
    KernelQueueStats s;
    s.queue = static_cast<uint16_t>(queue);
    s.peer_portid = static_cast<uint32_t>(portid);
    s.queued = static_cast<uint32_t>(queued);
    s.copy_mode = static_cast<uint8_t>(mode);
    s.copy_range = static_cast<uint32_t>(range);
    s.queue_dropped = qdrop;
    s.user_dropped = udrop;
    s.id_sequence = static_cast<uint32_t>(seq);
    out.push_back(s);
  }
  return out;
}

std::vector<KernelQueueStats> read_kernel_queue_stats(const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno) +
                             " (is nfnetlink_queue built into this kernel?)");
  }
  std::stringstream text;
  text << file.rdbuf();
  return parse_kernel_queue_stats(text.str());
}

std::optional<KernelQueueStats> find_queue(const std::vector<KernelQueueStats>& all, uint16_t queue) {
  for (const auto& s : all) {
    if (s.queue == queue) return s;
  }
  return std::nullopt;
}

}  // namespace pairwall::io
