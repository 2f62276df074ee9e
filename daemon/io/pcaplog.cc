#include "daemon/io/pcaplog.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string_view>
#include <utility>

namespace pairwall::io {
namespace {

// pf's values (OpenBSD sys/net/pfvar.h); tcpdump and Wireshark name them.
constexpr uint8_t kPfPass = 0;
constexpr uint8_t kPfDrop = 1;
constexpr uint8_t kPfIn = 1;
constexpr uint8_t kPfOut = 2;
constexpr uint8_t kPfresMatch = 0;
constexpr uint8_t kPfresBadOffset = 1;
constexpr uint8_t kPfresFragment = 2;
constexpr uint8_t kPfresShort = 3;
constexpr uint8_t kPfresNormalize = 4;
constexpr uint8_t kPfresMemory = 5;
constexpr uint8_t kPfresTimestamp = 6;
constexpr uint8_t kPfresIpOptions = 8;
constexpr uint8_t kPfresStateMismatch = 10;
constexpr uint8_t kPfresStateLimit = 12;
constexpr uint8_t kPfresSourceLimit = 13;
constexpr uint8_t kPfresSynproxy = 14;
constexpr uint8_t kPfresTranslate = 15;
// BSD address family numbers, which pflog readers expect whatever the writing system.
constexpr uint8_t kBsdAfInet = 2;
constexpr uint8_t kBsdAfInet6 = 24;
constexpr uint8_t kPflogRealLength = 61;
// pflog_packet()'s pid for a packet no socket lookup was made for (NO_PID, sys/proc.h).
constexpr uint32_t kNoPid = 100000;

void put32be(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

}  // namespace

LogMeta pass_log_meta(const engine::Verdict& verdict, int pass, std::span<const uint8_t> packet) noexcept {
  LogMeta m;
  // A malformed packet is logged too: it may be empty.
  m.family = !packet.empty() && (packet[0] >> 4) == 6 ? engine::Family::V6 : engine::Family::V4;
  m.outbound = pass == 1;
  const engine::rules::CompiledRule* rule = verdict.by_rule;
  if (pass == 0 && verdict.in_log_rule != nullptr) rule = verdict.in_log_rule;
  if (pass == 1 && verdict.out_log_rule != nullptr) rule = verdict.out_log_rule;
  // The verdict's own number stands for a drop without a rule, and for a state whose rule the rule
  // set in force no longer holds.
  m.rule = rule != nullptr ? rule->number : verdict.rule;
  m.pass = verdict.action == engine::Verdict::Action::Accept;
  m.reason = verdict.reason;
  // This pass's rule passed a packet that is dropped all the same: another pass's rule blocked
  // it, or synproxy answered it (pf logs the SYN as passed, then drops it).
  if (!m.pass && (rule != verdict.by_rule || verdict.reason == engine::Reason::Synproxy)) {
    m.pass = true;
    m.reason = engine::Reason::Match;
  }
  if (rule != nullptr && !rule->anchor.empty()) {
    m.rule = rule->anchor_number;
    m.subrule = rule->number;
    // The anchor's own name, as pflog_packet() writes it: with `rule` its number where it stands,
    // it names the anchor, which its path, cut to the field's 15 characters, may not.
    const std::string_view path = rule->anchor;
    path.substr(path.rfind('/') + 1).copy(m.ruleset, sizeof(m.ruleset) - 1);
  }
  return m;
}

uint8_t pf_reason(engine::Reason reason) {
  using engine::Reason;
  switch (reason) {
    case Reason::Match:
    case Reason::State:
    case Reason::DefaultPass:
    case Reason::AfterRouting:
    case Reason::Skipped:
    case Reason::RuleBlock:
      return kPfresMatch;
    case Reason::BadOffset:
      return kPfresBadOffset;
    case Reason::Fragment:
      return kPfresFragment;
    case Reason::Short:
    // A header whose own length fields do not fit the packet (IHL, TCP data offset, UDP length) or
    // a zero port: pf_setup_pdesc() and pf_walk_header() drop these as PFRES_SHORT.
    case Reason::BadIpHeader:
    case Reason::BadTcpHeader:
    case Reason::BadUdpHeader:
      return kPfresShort;
    case Reason::StateMismatch:
    case Reason::StateInterface:
    case Reason::BadSeq:
      return kPfresStateMismatch;
    // `set limit states` bounds pf's state pool: pf_create_state() finds pool_get() empty.
    case Reason::StateLimit:
    case Reason::Memory:
      return kPfresMemory;
    case Reason::RuleStateLimit:
      return kPfresStateLimit;
    case Reason::SourceLimit:
    case Reason::SourceNodeLimit:
      return kPfresSourceLimit;
    case Reason::Synproxy:
      return kPfresSynproxy;
    case Reason::TranslationFailed:
      return kPfresTranslate;
    case Reason::BadTimestamp:
      return kPfresTimestamp;
    case Reason::IpOptions:
      return kPfresIpOptions;
    case Reason::BadIpVersion:
    case Reason::BadIpv6Extension:
    case Reason::BadTcpOptions:
    case Reason::BadIcmp:
    case Reason::BadTcpFlags:
    case Reason::Internal:
    case Reason::Count:
      break;
  }
  return kPfresNormalize;
}

std::array<uint8_t, kPcapFileHeaderSize> pcap_file_header(uint32_t snaplen) {
  struct {
    uint32_t magic = 0xa1b2c3d4;
    uint16_t major = 2;
    uint16_t minor = 4;
    int32_t thiszone = 0;
    uint32_t sigfigs = 0;
    uint32_t snaplen;
    uint32_t linktype = kLinktypePflog;
  } h;
  h.snaplen = snaplen;
  static_assert(sizeof(h) == kPcapFileHeaderSize);
  return std::bit_cast<std::array<uint8_t, kPcapFileHeaderSize>>(h);
}

std::array<uint8_t, kPflogHeaderSize> encode_pflog_header(const LogMeta& meta) {
  std::array<uint8_t, kPflogHeaderSize> h{};
  h[0] = kPflogRealLength;
  h[1] = meta.family == engine::Family::V4 ? kBsdAfInet : kBsdAfInet6;
  h[2] = meta.pass ? kPfPass : kPfDrop;
  h[3] = pf_reason(meta.reason);
  std::memcpy(h.data() + 4, meta.ifname, strnlen(meta.ifname, IF_NAMESIZE - 1));
  std::memcpy(h.data() + 20, meta.ruleset, strnlen(meta.ruleset, kPflogRulesetSize - 1));
  put32be(h.data() + 36, meta.rule);
  put32be(h.data() + 40, meta.subrule);
  put32be(h.data() + 44, UINT32_MAX);
  // pflog_packet() writes the ids in host byte order (the rule numbers in network order), as this
  // file's own headers are.
  std::memcpy(h.data() + 48, &kNoPid, sizeof(kNoPid));
  put32be(h.data() + 52, UINT32_MAX);
  put32be(h.data() + 56, UINT32_MAX);
  h[60] = meta.outbound ? kPfOut : kPfIn;
  // Bytes 61 and 62 are OpenBSD's `rewritten` and `naf`, whose translated addresses would follow
  // past this header: left 0. The last pad byte is pad on every system.
  h[63] = static_cast<uint8_t>(meta.reason);
  return h;
}

struct PcapLog::Slot {
  LogMeta meta;
  uint32_t length = 0;
  uint32_t captured = 0;
  int64_t steady_ns = 0;
};

// Single producer (one worker), single consumer (the writer, under file_mutex_). Slots hold the
// metadata and up to snaplen bytes, so a push is two copies and two atomic operations.
class PcapLog::Ring {
 public:
  Ring(std::size_t slots, uint32_t snaplen)
      : mask_(std::bit_ceil(std::max<std::size_t>(slots, 2)) - 1),
        snaplen_(snaplen),
        slots_(mask_ + 1),
        data_((mask_ + 1) * snaplen) {}

  bool push(const LogMeta& meta, std::span<const uint8_t> packet, int64_t steady_ns) noexcept {
    const std::size_t head = head_.load(std::memory_order_relaxed);
    if (head - tail_.load(std::memory_order_acquire) > mask_) {
      dropped.add();
      return false;
    }
    const std::size_t i = head & mask_;
    Slot& slot = slots_[i];
    slot.meta = meta;
    slot.length = static_cast<uint32_t>(packet.size());
    slot.captured = static_cast<uint32_t>(std::min<std::size_t>(packet.size(), snaplen_));
    slot.steady_ns = steady_ns;
    std::memcpy(data_.data() + i * snaplen_, packet.data(), slot.captured);
    head_.store(head + 1, std::memory_order_release);
    logged.add();
    return true;
  }

  template <typename F>
  void drain(F&& consume) {
    std::size_t tail = tail_.load(std::memory_order_relaxed);
    const std::size_t head = head_.load(std::memory_order_acquire);
    for (; tail != head; ++tail) {
      const std::size_t i = tail & mask_;
      consume(slots_[i], data_.data() + i * snaplen_);
    }
    tail_.store(tail, std::memory_order_release);
  }

  Counter logged;
  Counter dropped;

 private:
  const std::size_t mask_;
  const uint32_t snaplen_;
  std::vector<Slot> slots_;
  std::vector<uint8_t> data_;
  alignas(64) std::atomic<std::size_t> head_{0};
  alignas(64) std::atomic<std::size_t> tail_{0};
};

namespace {

void check_file_size(uint64_t max_file_bytes, uint32_t snaplen) {
  const uint64_t smallest = kPcapFileHeaderSize + kPcapRecordHeaderSize + kPflogHeaderSize + snaplen;
  if (max_file_bytes < smallest) {
    throw std::runtime_error("pcap log: max file size " + std::to_string(max_file_bytes) +
                             " bytes cannot hold one record of snaplen " + std::to_string(snaplen) +
                             "; use at least " + std::to_string(smallest));
  }
}

}  // namespace

PcapLog::PcapLog(PcapLogConfig config) : config_(std::move(config)) {
  if (config_.files == 0) config_.files = 1;
  if (config_.snaplen == 0) config_.snaplen = 96;
  if (config_.workers == 0) config_.workers = 1;
  check_file_size(config_.max_file_bytes, config_.snaplen);
  rings_.resize(config_.workers);
  if (!config_.path.empty()) {
    std::lock_guard lock(file_mutex_);
    // An existing file from an earlier run becomes PATH.1.
    if (const std::string error = rotate(); !error.empty()) throw std::runtime_error(error);
    make_rings();
    enabled_.store(true, std::memory_order_release);
  }
  writer_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "pw-pcaplog");
    writer_loop();
  });
}

PcapLog::~PcapLog() {
  {
    std::lock_guard lock(wake_mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  writer_.join();
  std::lock_guard lock(file_mutex_);
  drain_locked();
  if (file_ != nullptr) std::fclose(file_);
}

void PcapLog::make_rings() {
  if (rings_made_.load(std::memory_order_relaxed)) return;
  for (auto& ring : rings_) ring = std::make_unique<Ring>(config_.ring_slots, config_.snaplen);
  rings_made_.store(true, std::memory_order_release);
}

std::string PcapLog::reconfigure(const std::string& path, uint64_t max_file_bytes, unsigned files) {
  check_file_size(max_file_bytes, config_.snaplen);
  std::lock_guard lock(file_mutex_);
  config_.max_file_bytes = max_file_bytes;
  config_.files = std::max(files, 1u);
  if (path == config_.path) return {};
  // Turned off, nothing logged after this reaches a ring; moved, the log stays on throughout, and
  // what the workers log after this drain goes to the new file.
  if (path.empty()) enabled_.store(false, std::memory_order_release);
  drain_locked();  // what was logged so far, to the file it was logged for
  if (file_ != nullptr) {
    std::fclose(file_);
    file_ = nullptr;
  }
  rotation_unfinished_ = false;
  {
    std::lock_guard events(events_mutex_);
    failing_ = false;  // the old file's trouble is not the new one's
  }
  config_.path = path;
  if (path.empty()) return {};
  make_rings();
  std::string error = rotate();
  if (!error.empty()) failing(error);
  enabled_.store(true, std::memory_order_release);
  return error;
}

std::string PcapLog::path_problem(const std::string& path) {
  const std::filesystem::path file(path);
  const std::filesystem::path directory = file.has_parent_path() ? file.parent_path() : ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec)) {
    return "pcap log: cannot create " + path + ": " + directory.string() + " is not a directory";
  }
  if (::access(directory.c_str(), W_OK) != 0) {
    return "pcap log: cannot create " + path + ": " + directory.string() + ": " + std::strerror(errno);
  }
  return {};
}

bool PcapLog::log(std::size_t worker, const LogMeta& meta, std::span<const uint8_t> packet,
                  std::chrono::steady_clock::time_point when) noexcept {
  if (!enabled()) return true;
  if (worker >= rings_.size()) return false;
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch()).count();
  return rings_[worker]->push(meta, packet, ns);
}

void PcapLog::flush() {
  std::lock_guard lock(file_mutex_);
  drain_locked();
}

PcapLogStats PcapLog::stats() const {
  PcapLogStats s;
  if (!rings_made_.load(std::memory_order_acquire)) return s;
  for (const auto& ring : rings_) {
    s.logged += ring->logged.get();
    s.dropped += ring->dropped.get();
  }
  s.written = written_.get();
  s.write_errors = write_errors_.get();
  s.rotations = rotations_.get();
  return s;
}

void PcapLog::writer_loop() {
  std::unique_lock wake_lock(wake_mutex_);
  while (!stopping_) {
    wake_.wait_for(wake_lock, config_.flush_interval, [this] { return stopping_; });
    wake_lock.unlock();
    {
      std::lock_guard lock(file_mutex_);
      drain_locked();
    }
    wake_lock.lock();
  }
}

void PcapLog::drain_locked() {
  // Workers stamp packets with the steady clock; the file wants wall time.
  const auto wall_offset = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::system_clock::now().time_since_epoch() -
      std::chrono::steady_clock::now().time_since_epoch());
  if (!rings_made_.load(std::memory_order_relaxed)) return;
  if (file_ == nullptr && !config_.path.empty()) {  // retry after a failed rotation
    const std::string error = rotation_unfinished_ ? rotate() : open_file();
    if (!error.empty()) failing(error);
  }
  for (auto& ring : rings_) {
    ring->drain([&](const Slot& slot, const uint8_t* data) {
      if (file_ == nullptr) {
        write_errors_.add();
        return;
      }
      const uint64_t size = kPcapRecordHeaderSize + kPflogHeaderSize + slot.captured;
      // A failed rotation leaves no file open: records are counted as errors until the next one.
      if (file_bytes_ + size > config_.max_file_bytes) {
        commit_records();  // the full file's last records, whole before it is closed
        if (const std::string error = rotate(); !error.empty()) failing(error);
      }
      if (file_ == nullptr) {
        write_errors_.add();
        return;
      }
      const int64_t wall_ns = slot.steady_ns + wall_offset.count();
      const uint32_t record[4] = {static_cast<uint32_t>(wall_ns / 1000000000),
                                  static_cast<uint32_t>((wall_ns % 1000000000) / 1000),
                                  static_cast<uint32_t>(kPflogHeaderSize + slot.captured),
                                  static_cast<uint32_t>(kPflogHeaderSize + slot.length)};
      const auto pflog = encode_pflog_header(slot.meta);
      const bool ok = std::fwrite(record, sizeof(record), 1, file_) == 1 &&
                      std::fwrite(pflog.data(), pflog.size(), 1, file_) == 1 &&
                      (slot.captured == 0 || std::fwrite(data, slot.captured, 1, file_) == 1);
      if (!ok) {
        failing("pcap log: cannot write " + config_.path + ": " + std::strerror(errno));
        write_errors_.add();
        discard_unflushed();
        return;
      }
      file_bytes_ += size;
      ++unflushed_records_;
    });
  }
  commit_records();
}

void PcapLog::commit_records() {
  if (file_ == nullptr || unflushed_records_ == 0) return;
  if (std::fflush(file_) != 0) {
    failing("pcap log: cannot write " + config_.path + ": " + std::strerror(errno));
    discard_unflushed();
    return;
  }
  written_.add(unflushed_records_);
  unflushed_records_ = 0;
  flushed_bytes_ = file_bytes_;
  working();
}

void PcapLog::failing(const std::string& error) {
  std::lock_guard lock(events_mutex_);
  if (failing_) return;
  failing_ = true;
  // The record being lost now is counted after this call, and so among this run's.
  errors_before_failing_ = write_errors_.get();
  events_.push_back({true, error + "; logged packets are lost until it can be written"});
}

void PcapLog::working() {
  std::lock_guard lock(events_mutex_);
  if (!failing_) return;
  failing_ = false;
  events_.push_back({false, "pcap log: writing " + config_.path + " again; " +
                                std::to_string(write_errors_.get() - errors_before_failing_) +
                                " logged packets lost"});
}

std::vector<PcapLogEvent> PcapLog::take_events() {
  std::lock_guard lock(events_mutex_);
  return std::exchange(events_, {});
}

void PcapLog::discard_unflushed() {
  // A write that failed part way (a full disk) may have left part of a record at the file's end,
  // and every record written after it would be read from the wrong offset: nothing after the
  // first torn record is readable. So the file goes back to its last whole record.
  write_errors_.add(unflushed_records_);
  unflushed_records_ = 0;
  // The stream closes on a copy of its descriptor, so that whatever it still writes as it closes
  // is cut as well.
  const int fd = ::fcntl(::fileno(file_), F_DUPFD_CLOEXEC, 0);
  std::fclose(file_);
  file_ = nullptr;
  if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(flushed_bytes_)) == 0) file_ = ::fdopen(fd, "ab");
  if (file_ == nullptr) {
    if (fd >= 0) ::close(fd);
    // The file cannot be mended: a new one, rather than records after a torn one.
    if (const std::string error = rotate(); !error.empty()) failing(error);
    return;
  }
  file_bytes_ = flushed_bytes_;
}

std::string PcapLog::open_file() {
  file_ = std::fopen(config_.path.c_str(), "wbe");
  if (file_ == nullptr) {
    return "pcap log: cannot create " + config_.path + ": " + std::strerror(errno) +
           " (does the directory exist and is it writable?)";
  }
  const auto header = pcap_file_header(config_.snaplen + kPflogHeaderSize);
  if (std::fwrite(header.data(), header.size(), 1, file_) != 1 || std::fflush(file_) != 0) {
    const int err = errno;
    std::fclose(file_);
    file_ = nullptr;
    return "pcap log: cannot write " + config_.path + ": " + std::strerror(err);
  }
  file_bytes_ = flushed_bytes_ = kPcapFileHeaderSize;
  unflushed_records_ = 0;
  return {};
}

std::string PcapLog::rotate() {
  if (file_ != nullptr) {
    std::fclose(file_);
    file_ = nullptr;
  }
  std::error_code ec;
  if (config_.files > 1 && std::filesystem::exists(config_.path, ec)) {
    // PATH.(n-2) -> PATH.(n-1), ..., PATH -> PATH.1; rename(2) replaces the oldest.
    for (unsigned i = config_.files - 1; i >= 1; --i) {
      const std::string from = i == 1 ? config_.path : config_.path + "." + std::to_string(i - 1);
      const std::string to = config_.path + "." + std::to_string(i);
      // A missing PATH.k is fine. PATH that stays, opened again in place, would lose the records
      // it holds, counted as written.
      if (std::rename(from.c_str(), to.c_str()) != 0 && i == 1 && errno != ENOENT) {
        rotation_unfinished_ = true;
        return "pcap log: cannot rotate " + from + " to " + to + ": " + std::strerror(errno);
      }
    }
    rotations_.add();
  }
  rotation_unfinished_ = false;
  return open_file();
}

}  // namespace pairwall::io
