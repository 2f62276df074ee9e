// Logged packets to a pcap file in pf's pflog format, readable by `tcpdump -n -e -r FILE` (which
// prints "rule N/reason: block in on IFNAME: ...") and by Wireshark.
//
// File: pcap (magic a1b2c3d4, microseconds), LINKTYPE_PFLOG (117). Each record is a 64-byte pflog
// header followed by the packet from its IP header, cut at `snaplen`:
//
//   off size field       what pairwall writes
//     0   1  length      61: the header up to `pad`, as FreeBSD's PFLOG_REAL_HDRLEN (readers round
//                        it up to 64)
//     1   1  af          2 (IPv4) or 24 (IPv6): the BSD values every pflog reader knows
//     2   1  action      0 pass, 1 block (PF_PASS / PF_DROP); a reject is a block
//     3   1  reason      PFRES_* nearest to the engine's reason (pf_reason())
//     4  16  ifname      the interface of the pass that decided, NUL-padded
//    20  16  ruleset     the name of the deciding rule's anchor (the last part of its path; cut to
//                        15 characters), empty outside one
//    36   4  rulenr      the deciding rule's number, big-endian; 0xffffffff for none; in an anchor,
//                        the anchor's number where it stands
//    40   4  subrulenr   in an anchor, the rule's number in it, so that readers print "rule
//                        N.ANCHOR.M/"; otherwise 0xffffffff, and they print "rule N/"
//    44   4  uid         0xffffffff: no socket user (pf's UID_MAX)
//    48   4  pid         100000 in host byte order: none (pf's NO_PID)
//    52   4  rule_uid    0xffffffff
//    56   4  rule_pid    -1
//    60   1  dir         1 in, 2 out (PF_IN / PF_OUT)
//    61   2  pad         0 (OpenBSD's `rewritten` and `naf`: not rewritten)
//    63   1  pad         pairwall's own engine::Reason value (finer than PFRES)
//
// Workers never block, allocate or write files: log() copies the record into the worker's bounded
// ring (full: dropped and counted), and a writer thread drains the rings every flush interval,
// writes, flushes and rotates by size: PATH, PATH.1, ..., PATH.(files-1), the oldest removed.
//
// A log made without a path is off (enabled() false) until reconfigure() names one, so that a
// reload turns logging on, moves it or turns it off without a restart; its rings are allocated
// when it is first turned on.
#pragma once

#include <net/if.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "daemon/engine/address.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/reason.h"
#include "daemon/io/counter.h"

namespace pairwall::io {

inline constexpr uint32_t kLinktypePflog = 117;
inline constexpr std::size_t kPflogHeaderSize = 64;
inline constexpr std::size_t kPflogRulesetSize = 16;
inline constexpr std::size_t kPcapFileHeaderSize = 24;
inline constexpr std::size_t kPcapRecordHeaderSize = 16;

struct PcapLogConfig {
  std::string path;                       // empty: off
  uint64_t max_file_bytes = 64ull << 20;  // rotate before a file grows past this
  unsigned files = 4;                     // kept, the current one included
  uint32_t snaplen = 256;                 // packet bytes kept per record
  std::size_t workers = 1;                // one ring each
  std::size_t ring_slots = 4096;          // per worker
  std::chrono::milliseconds flush_interval{100};
};

// What the pflog header says about one logged packet.
struct LogMeta {
  engine::Family family = engine::Family::V4;
  bool pass = false;
  engine::Reason reason = engine::Reason::Match;
  uint32_t rule = UINT32_MAX;            // rules::kNoRule
  uint32_t subrule = UINT32_MAX;         // the rule's number in its anchor; `rule` is the anchor's
  char ruleset[kPflogRulesetSize] = {};  // the anchor's name, NUL-terminated
  bool outbound = false;
  char ifname[IF_NAMESIZE] = {};
};

// The record of one pass of a decided packet (pass 0 in on the arrival interface, 1 out on the
// departure one) that its verdict's `log` asks for, as pf logs it: that pass's rule, and whether
// that rule passed the packet. The caller fills in the interface name.
LogMeta pass_log_meta(const engine::Verdict& verdict, int pass, std::span<const uint8_t> packet) noexcept;

// The PFRES_* code closest to an engine reason.
uint8_t pf_reason(engine::Reason reason);

// The 24-byte pcap file header for LINKTYPE_PFLOG, in host byte order (readers detect it by the magic).
std::array<uint8_t, kPcapFileHeaderSize> pcap_file_header(uint32_t snaplen);

std::array<uint8_t, kPflogHeaderSize> encode_pflog_header(const LogMeta& meta);

struct PcapLogStats {
  uint64_t logged = 0;        // accepted into rings
  uint64_t dropped = 0;       // rings full
  uint64_t written = 0;       // records flushed whole to files
  uint64_t write_errors = 0;  // records lost: no file open, or a failed write (a full disk)
  uint64_t rotations = 0;
};

// A change in whether logged packets reach the file, for the daemon to log (pflogd's "Logging
// suspended" and "Logging resumed"): one when records start to be lost, with the first error, and
// one when they reach the file again, with how many were lost.
struct PcapLogEvent {
  bool failing = false;
  std::string message;
};

class PcapLog {
 public:
  // Opens (appending to nothing: a new file replaces an existing one after rotating it away)
  // and starts the writer. Throws std::runtime_error naming the path and the reason.
  explicit PcapLog(PcapLogConfig config);
  ~PcapLog();  // drains the rings, writes and closes
  PcapLog(const PcapLog&) = delete;
  PcapLog& operator=(const PcapLog&) = delete;

  // Whether packets are logged: a path is configured. Data plane, any thread.
  bool enabled() const noexcept { return enabled_.load(std::memory_order_acquire); }
  // Data plane, called only by worker `worker` (< config.workers). Never blocks or allocates.
  // `when` is the batch time the worker already read; the writer converts it to wall time.
  // While the log is off it does nothing and returns true.
  bool log(std::size_t worker, const LogMeta& meta, std::span<const uint8_t> packet,
           std::chrono::steady_clock::time_point when) noexcept;

  // A reload's [log] pcap_file, pcap_rotate_bytes and pcap_keep (any thread). The records logged
  // so far go to the file they were logged for. Another path closes that file and opens the new
  // one, rotating away a file already there as at start; an empty one turns logging off; the same
  // path keeps its file and takes the new limits from its next record. Returns an error message
  // (the new file cannot be created), empty on success; the log then retries it as after a failed
  // write, and counts the records it loses.
  std::string reconfigure(const std::string& path, uint64_t max_file_bytes, unsigned files);
  // Why a file at `path` could not be created (its directory is missing or not writable), empty
  // when it looks like it can: for refusing a reload before anything of it is taken.
  static std::string path_problem(const std::string& path);

  // Drains every ring and flushes the file now (tests, shutdown, `rotate` from the control socket).
  void flush();

  PcapLogStats stats() const;
  // The events since the last call, oldest first (any thread).
  std::vector<PcapLogEvent> take_events();
  const PcapLogConfig& config() const { return config_; }

 private:
  struct Slot;
  class Ring;

  void make_rings();
  void writer_loop();
  void drain_locked();
  void write_record(const Slot& slot, std::chrono::nanoseconds wall_offset);
  // Flushes the records written since the last flush; they count as written once that succeeds.
  void commit_records();
  // After a failed write, cuts the file back to the records flushed whole, and counts the others
  // lost.
  void discard_unflushed();
  // Both return an error message, empty on success.
  std::string open_file();
  std::string rotate();
  // Records are being lost for `error`; told once until records reach the file again.
  void failing(const std::string& error);
  void working();

  PcapLogConfig config_;
  // Sized at construction; the rings in it made when the log is first turned on, before enabled_.
  std::vector<std::unique_ptr<Ring>> rings_;
  std::atomic<bool> enabled_{false};
  std::atomic<bool> rings_made_{false};
  std::mutex file_mutex_;  // writer thread vs flush(); never taken by workers
  std::FILE* file_ = nullptr;
  uint64_t file_bytes_ = 0;     // what the file holds once its records are flushed
  uint64_t flushed_bytes_ = 0;  // whole records that reached the file
  uint64_t unflushed_records_ = 0;
  bool rotation_unfinished_ = false;  // PATH could not be moved aside: rotate before writing again
  Counter written_;
  Counter write_errors_;
  Counter rotations_;
  std::mutex events_mutex_;  // writer vs take_events(); the writer holds file_mutex_ too
  std::vector<PcapLogEvent> events_;
  bool failing_ = false;
  uint64_t errors_before_failing_ = 0;
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread writer_;
};

}  // namespace pairwall::io
