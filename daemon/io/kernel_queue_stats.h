// The kernel's own view of NFQUEUE instances, from /proc/net/netfilter/nfnetlink_queue (per
// network namespace). The two drop columns are the losses userspace cannot see on its socket:
// `queue_dropped` — the queue held queue_maxlen packets already; `user_dropped` — the netlink
// socket's receive buffer was full. With NFQA_CFG_F_FAIL_OPEN those packets are accepted
// uninspected instead, and the kernel counts neither.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pairwall::io {

struct KernelQueueStats {
  uint16_t queue = 0;
  uint32_t peer_portid = 0;  // the netlink socket bound to the queue
  uint32_t queued = 0;       // packets waiting for a verdict right now
  uint8_t copy_mode = 0;
  uint32_t copy_range = 0;
  uint64_t queue_dropped = 0;
  uint64_t user_dropped = 0;
  uint32_t id_sequence = 0;  // last packet id handed out
};

inline constexpr const char* kKernelQueueStatsPath = "/proc/net/netfilter/nfnetlink_queue";

// Parses the file's text; lines that do not have the expected columns are skipped.
std::vector<KernelQueueStats> parse_kernel_queue_stats(std::string_view text);

// Reads and parses the file. An empty result means no queue is bound (the file is empty then).
// Throws std::runtime_error when the file cannot be read (nfnetlink_queue not in the kernel).
std::vector<KernelQueueStats> read_kernel_queue_stats(const std::string& path = kKernelQueueStatsPath);

std::optional<KernelQueueStats> find_queue(const std::vector<KernelQueueStats>& all, uint16_t queue);

}  // namespace pairwall::io
