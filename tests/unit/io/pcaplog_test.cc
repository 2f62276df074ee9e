// Writes pflog records, reads the files back byte by byte.
#include "daemon/io/pcaplog.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/io/hooks.h"
#include "tests/unit/support/packet_builder.h"

namespace pairwall::io {
namespace {

namespace fs = std::filesystem;
using test::Bytes;
using test::PacketBuilder;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/pairwall-pcaplog-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { fs::remove_all(path); }
};

uint32_t le32(const Bytes& b, std::size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
uint32_t be32(const Bytes& b, std::size_t at) {
  return static_cast<uint32_t>(b[at] << 24 | b[at + 1] << 16 | b[at + 2] << 8 | b[at + 3]);
}

struct Record {
  uint32_t ts_sec, ts_usec, incl_len, orig_len;
  Bytes data;
};

struct PcapFile {
  uint32_t linktype = 0;
  uint32_t snaplen = 0;
  std::vector<Record> records;
};

PcapFile read_pcap(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  Bytes b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(b.size() >= 24);
  REQUIRE(le32(b, 0) == 0xa1b2c3d4);  // written in host order: this host is little-endian
  CHECK(b[4] == 2);
  CHECK(b[6] == 4);
  PcapFile f;
  f.snaplen = le32(b, 16);
  f.linktype = le32(b, 20);
  std::size_t at = 24;
  while (at < b.size()) {
    REQUIRE(at + 16 <= b.size());
    Record r{le32(b, at), le32(b, at + 4), le32(b, at + 8), le32(b, at + 12), {}};
    at += 16;
    REQUIRE(at + r.incl_len <= b.size());
    r.data.assign(b.begin() + static_cast<long>(at), b.begin() + static_cast<long>(at + r.incl_len));
    at += r.incl_len;
    f.records.push_back(std::move(r));
  }
  return f;
}

LogMeta meta(engine::Family family, bool pass, engine::Reason reason, uint32_t rule, bool outbound,
             const char* ifname) {
  LogMeta m;
  m.family = family;
  m.pass = pass;
  m.reason = reason;
  m.rule = rule;
  m.outbound = outbound;
  std::strncpy(m.ifname, ifname, sizeof(m.ifname) - 1);
  return m;
}

TEST_CASE("pflog header fields", "[pcaplog]") {
  const auto h = encode_pflog_header(
      meta(engine::Family::V6, false, engine::Reason::BadSeq, 0x01020304, true, "veth-ext"));
  CHECK(h[0] == 61);
  CHECK(h[1] == 24);  // BSD AF_INET6
  CHECK(h[2] == 1);   // PF_DROP
  CHECK(h[3] == 10);  // PFRES_BADSTATE
  CHECK(std::string(reinterpret_cast<const char*>(h.data() + 4)) == "veth-ext");
  CHECK(h[20] == 0);  // no ruleset
  CHECK((h[36] == 1 && h[37] == 2 && h[38] == 3 && h[39] == 4));
  CHECK((h[40] == 0xff && h[43] == 0xff));  // subrulenr: none
  CHECK(h[60] == 2);                        // PF_OUT
  CHECK(h[63] == static_cast<uint8_t>(engine::Reason::BadSeq));

  const auto v4 = encode_pflog_header(meta(engine::Family::V4, true, engine::Reason::Match, 5, false, ""));
  CHECK(v4[1] == 2);
  CHECK(v4[2] == 0);
  CHECK(v4[60] == 1);

  // A rule in an anchor: the anchor's number, its name and the rule's number in it, as pf logs it
  // (tcpdump prints "rule 5.ftp-proxy.2/"); a name longer than the field is cut.
  LogMeta in_anchor = meta(engine::Family::V4, true, engine::Reason::Match, 5, false, "lan0");
  in_anchor.subrule = 2;
  std::strcpy(in_anchor.ruleset, "ftp-proxy");
  const auto a = encode_pflog_header(in_anchor);
  CHECK(std::string(reinterpret_cast<const char*>(a.data() + 20)) == "ftp-proxy");
  CHECK((a[36] == 0 && a[39] == 5));
  CHECK((a[40] == 0 && a[43] == 2));
  std::memset(in_anchor.ruleset, 'x', sizeof(in_anchor.ruleset));  // no NUL: at most 15 are written
  CHECK(encode_pflog_header(in_anchor)[35] == 0);
}

// OpenBSD's tcpdump -v reads byte 61 as `rewritten` and then prints the translated addresses that
// follow its longer header ("[rewritten: src ?, dst ?]" here), and prints uid and pid unless pid is
// NO_PID, which pflog_packet() writes for a packet no socket lookup was made for.
TEST_CASE("pflog header: not rewritten, and no pid, as pf writes them", "[pcaplog]") {
  for (const engine::Reason reason :
       {engine::Reason::RuleBlock, engine::Reason::BadSeq, engine::Reason::Match}) {
    const auto h = encode_pflog_header(meta(engine::Family::V4, false, reason, 1, false, "lan0"));
    CHECK(h[61] == 0);                                         // rewritten (OpenBSD), pad (FreeBSD)
    CHECK(h[62] == 0);                                         // naf
    CHECK(be32(Bytes(h.begin(), h.end()), 44) == 0xffffffff);  // uid: UID_MAX
    CHECK(le32(Bytes(h.begin(), h.end()), 48) == 100000);      // pid: NO_PID, in host order
  }
}

TEST_CASE("engine reasons map to the nearest pf reason", "[pcaplog]") {
  using engine::Reason;
  CHECK(pf_reason(Reason::RuleBlock) == 0);
  CHECK(pf_reason(Reason::BadOffset) == 1);
  CHECK(pf_reason(Reason::Fragment) == 2);
  CHECK(pf_reason(Reason::Short) == 3);
  CHECK(pf_reason(Reason::BadTcpFlags) == 4);
  CHECK(pf_reason(Reason::Memory) == 5);
  CHECK(pf_reason(Reason::StateMismatch) == 10);
  CHECK(pf_reason(Reason::BadTimestamp) == 6);
  CHECK(pf_reason(Reason::RuleStateLimit) == 12);
}

// `set limit states` is the hard limit of pf's state pool: pf_create_state() finds pool_get()
// empty and says PFRES_MEMORY, which pfctl -si counts as "memory"; PFRES_MAXSTATES is a rule's
// own (max N).
TEST_CASE("a full state table is logged as memory, a rule's max as state-limit, as pf logs them",
          "[pcaplog]") {
  CHECK(pf_reason(engine::Reason::StateLimit) == 5);
  CHECK(pf_reason(engine::Reason::RuleStateLimit) == 12);
}

// pf_setup_pdesc() and pf_walk_header() drop a header whose own length fields do not fit the
// packet (IP header length, TCP data offset, UDP length, a zero port) as PFRES_SHORT, and
// pflog says "3(short)" for them.
TEST_CASE("a transport or IP header whose lengths do not fit is logged as short, as pf logs it",
          "[pcaplog]") {
  using engine::Reason;
  CHECK(pf_reason(Reason::BadIpHeader) == 3);
  CHECK(pf_reason(Reason::BadTcpHeader) == 3);
  CHECK(pf_reason(Reason::BadUdpHeader) == 3);
}

TEST_CASE("each logged pass gets its own rule, direction and action", "[pcaplog]") {
  using engine::Reason;
  using engine::Verdict;
  engine::rules::CompiledRule pass_in;
  pass_in.number = 3;
  pass_in.action = engine::rules::Action::Pass;
  engine::rules::CompiledRule block_out;
  block_out.number = 7;
  engine::rules::CompiledRule anchored;
  anchored.number = 1;
  anchored.anchor = "ext/ssh";
  anchored.anchor_number = 12;
  const Bytes v6 = PacketBuilder().ipv6("2001:db8::1", "2001:db8::2").udp(1, 2).build();
  // A verdict as the engine makes it: `by` decided, and its number is the verdict's.
  const auto verdict = [](Verdict::Action action, Reason reason, const engine::rules::CompiledRule* by) {
    Verdict v;
    v.action = action;
    v.reason = reason;
    v.by_rule = by;
    if (by != nullptr) v.rule = by->number;
    return v;
  };

  SECTION("a packet the in pass passed and the out pass blocked: pass in, block out") {
    Verdict v = verdict(Verdict::Action::Drop, Reason::RuleBlock, &block_out);
    v.in_log_rule = &pass_in;
    const LogMeta in = pass_log_meta(v, 0, v6);
    CHECK(in.family == engine::Family::V6);
    CHECK_FALSE(in.outbound);
    CHECK(in.pass);
    CHECK(in.reason == Reason::Match);
    CHECK(in.rule == 3);
    const LogMeta out = pass_log_meta(v, 1, v6);
    CHECK(out.outbound);
    CHECK_FALSE(out.pass);
    CHECK(out.reason == Reason::RuleBlock);
    CHECK(out.rule == 7);
  }
  SECTION("an accepted packet: the out pass's own rule where it is not the deciding one") {
    Verdict v = verdict(Verdict::Action::Accept, Reason::Match, &pass_in);
    v.out_log_rule = &anchored;
    const LogMeta in = pass_log_meta(v, 0, {});
    CHECK(in.family == engine::Family::V4);
    CHECK(in.pass);
    CHECK(in.rule == 3);
    CHECK(in.subrule == UINT32_MAX);
    const LogMeta out = pass_log_meta(v, 1, {});
    CHECK(out.pass);
    CHECK(out.rule == 12);
    CHECK(out.subrule == 1);
    // The anchor's own name, as pflog_packet() writes ruleset->anchor->name: "rule 12.ssh.1/".
    CHECK(std::string(out.ruleset) == "ssh");
  }
  SECTION("a nested anchor whose path is longer than the field is named whole by its own name") {
    engine::rules::CompiledRule deep;
    deep.number = 2;
    deep.anchor = "ftp-proxy/12345.1";
    deep.anchor_number = 0;
    const LogMeta m = pass_log_meta(verdict(Verdict::Action::Accept, Reason::Match, &deep), 0, {});
    CHECK(m.rule == 0);
    CHECK(m.subrule == 2);
    CHECK(std::string(m.ruleset) == "12345.1");
  }
  SECTION("a SYN synproxy answers is logged as passed, as pf's, each pass with its own rule") {
    engine::rules::CompiledRule proxy_out;
    proxy_out.number = 9;
    proxy_out.action = engine::rules::Action::Pass;
    Verdict v = verdict(Verdict::Action::Drop, Reason::Synproxy, &pass_in);
    v.rule = proxy_out.number;  // the out pass's `synproxy state` made the state
    v.out_log_rule = &proxy_out;
    const LogMeta in = pass_log_meta(v, 0, {});
    CHECK(in.pass);
    CHECK(in.reason == Reason::Match);
    CHECK(in.rule == 3);
    const LogMeta out = pass_log_meta(v, 1, {});
    CHECK(out.pass);
    CHECK(out.rule == 9);
  }
  SECTION("a drop without a rule (a malformed packet) keeps its reason") {
    const LogMeta m = pass_log_meta(verdict(Verdict::Action::Drop, Reason::Short, nullptr), 0, {});
    CHECK_FALSE(m.pass);
    CHECK(m.reason == Reason::Short);
    CHECK(m.rule == engine::rules::kNoRule);
  }
}

TEST_CASE("logged packets are written with their pflog header and cut at snaplen", "[pcaplog]") {
  TempDir dir;
  PcapLogConfig c;
  c.path = (dir.path / "pflog.pcap").string();
  c.snaplen = 64;
  c.workers = 2;
  c.flush_interval = std::chrono::hours(1);  // only flush() writes
  const Bytes small = PacketBuilder().ipv4("192.0.2.1", "198.51.100.2").tcp(1234, 80).build();
  const Bytes large = PacketBuilder().ipv6("2001:db8::1", "2001:db8::2").udp(53, 53).payload(500).build();
  const auto t0 = std::chrono::steady_clock::now();
  const auto wall_before = std::chrono::system_clock::now();
  {
    PcapLog log(c);
    CHECK(
        log.log(0, meta(engine::Family::V4, false, engine::Reason::RuleBlock, 3, false, "lan0"), small, t0));
    CHECK(log.log(1, meta(engine::Family::V6, true, engine::Reason::Match, 9, true, "wan0"), large,
                  t0 + std::chrono::milliseconds(1500)));
    CHECK_FALSE(log.log(2, meta(engine::Family::V4, true, engine::Reason::Match, 0, false, ""), small, t0));
    log.flush();
    CHECK(log.stats().written == 2);
    CHECK(log.stats().logged == 2);
  }
  const PcapFile f = read_pcap(c.path);
  CHECK(f.linktype == 117);
  CHECK(f.snaplen == 64 + 64);
  REQUIRE(f.records.size() == 2);

  const Record& a = f.records[0];
  CHECK(a.incl_len == 64 + small.size());
  CHECK(a.orig_len == 64 + small.size());
  CHECK(a.data[2] == 1);  // block
  CHECK(be32(a.data, 36) == 3);
  CHECK(std::string(reinterpret_cast<const char*>(a.data.data() + 4)) == "lan0");
  CHECK(Bytes(a.data.begin() + 64, a.data.end()) == small);
  const auto wall = std::chrono::system_clock::to_time_t(wall_before);
  CHECK(a.ts_sec >= static_cast<uint32_t>(wall) - 1);
  CHECK(a.ts_sec <= static_cast<uint32_t>(wall) + 5);

  const Record& b = f.records[1];
  CHECK(b.incl_len == 64 + 64);  // cut at snaplen
  CHECK(b.orig_len == 64 + large.size());
  CHECK(b.data[1] == 24);
  CHECK(b.data[60] == 2);
  CHECK(Bytes(b.data.begin() + 64, b.data.end()) == Bytes(large.begin(), large.begin() + 64));
  // 1.5 s later on the steady clock is 1.5 s later in the file.
  const int64_t delta_us =
      (static_cast<int64_t>(b.ts_sec) - a.ts_sec) * 1000000 + (static_cast<int64_t>(b.ts_usec) - a.ts_usec);
  CHECK(delta_us == 1500000);
}

TEST_CASE("tcpdump reads the file and prints rule, action, direction and interface", "[pcaplog]") {
  if (run_command({"tcpdump", "--version"}).exit_code != 0) {
    WARN("tcpdump is not installed: the file format is checked byte by byte above, not by tcpdump");
    return;
  }
  TempDir dir;
  PcapLogConfig c;
  c.path = (dir.path / "t.pcap").string();
  c.flush_interval = std::chrono::hours(1);
  {
    PcapLog log(c);
    const auto now = std::chrono::steady_clock::now();
    log.log(0, meta(engine::Family::V4, false, engine::Reason::RuleBlock, 3, false, "lan0"),
            PacketBuilder().ipv4("192.0.2.1", "198.51.100.2").tcp(1234, 80).build(), now);
    log.log(0, meta(engine::Family::V6, true, engine::Reason::Match, 12, true, "wan0"),
            PacketBuilder().ipv6("2001:db8::1", "2001:db8::2").udp(5353, 53).payload(20).build(), now);
    log.flush();
  }
  const CommandResult r = run_command({"tcpdump", "-n", "-e", "-r", c.path});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("rule 3/") && Catch::Contains("block in on lan0") &&
                           Catch::Contains("192.0.2.1.1234 > 198.51.100.2.80"));
  CHECK_THAT(r.output, Catch::Contains("rule 12/") && Catch::Contains("pass out on wan0") &&
                           Catch::Contains("2001:db8::1.5353 > 2001:db8::2.53"));
}

TEST_CASE("a full ring drops and counts instead of blocking", "[pcaplog]") {
  TempDir dir;
  PcapLogConfig c;
  c.path = (dir.path / "p.pcap").string();
  c.ring_slots = 8;
  c.flush_interval = std::chrono::hours(1);
  PcapLog log(c);
  const Bytes p = PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").udp(1, 2).build();
  int accepted = 0;
  for (int i = 0; i < 20; ++i) {
    accepted += log.log(0, meta(engine::Family::V4, true, engine::Reason::Match, 1, false, "x"), p,
                        std::chrono::steady_clock::now())
                    ? 1
                    : 0;
  }
  CHECK(accepted == 8);
  CHECK(log.stats().dropped == 12);
  log.flush();
  CHECK(log.stats().written == 8);
  // Drained: room again.
  CHECK(log.log(0, meta(engine::Family::V4, true, engine::Reason::Match, 1, false, "x"), p,
                std::chrono::steady_clock::now()));
}

TEST_CASE("files rotate by size and only N are kept", "[pcaplog]") {
  TempDir dir;
  PcapLogConfig c;
  c.path = (dir.path / "r.pcap").string();
  c.snaplen = 100;
  c.files = 3;
  const Bytes p = PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").udp(1, 2).payload(72).build();  // 100 bytes
  const std::size_t record = kPcapRecordHeaderSize + kPflogHeaderSize + p.size();
  c.max_file_bytes = 24 + 4 * record;  // four records per file
  c.flush_interval = std::chrono::hours(1);
  {
    PcapLog log(c);
    for (uint32_t i = 0; i < 18; ++i) {
      REQUIRE(log.log(0, meta(engine::Family::V4, true, engine::Reason::Match, i, false, "x"), p,
                      std::chrono::steady_clock::now()));
      if (i % 3 == 2) log.flush();
    }
    log.flush();
    CHECK(log.stats().rotations == 4);  // 18 records: files of 4,4,4,4,2
  }
  const PcapFile current = read_pcap(c.path);
  const PcapFile previous = read_pcap(c.path + ".1");
  const PcapFile oldest = read_pcap(c.path + ".2");
  CHECK_FALSE(fs::exists(c.path + ".3"));
  REQUIRE(current.records.size() == 2);
  REQUIRE(previous.records.size() == 4);
  REQUIRE(oldest.records.size() == 4);
  // Rule numbers tell the order: the newest file holds the last records.
  CHECK(be32(current.records[0].data, 36) == 16);
  CHECK(be32(previous.records[0].data, 36) == 12);
  CHECK(be32(oldest.records[0].data, 36) == 8);
}

// A full disk, as the file size limit makes one: a write that crosses the limit stops there, as one
// onto a full file system stops where the space ends, and the next fails.
struct DiskFullAt {
  rlimit saved{};
  void (*saved_handler)(int) = SIG_DFL;
  explicit DiskFullAt(rlim_t bytes) {
    REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    saved_handler = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG rather than the signal
    const rlimit full{bytes, saved.rlim_max};
    REQUIRE(setrlimit(RLIMIT_FSIZE, &full) == 0);
  }
  ~DiskFullAt() {
    setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, saved_handler);
  }
};

TEST_CASE("a full disk costs the records of the failed write, and the file stays readable", "[pcaplog]") {
  TempDir dir;
  PcapLogConfig c;
  c.path = (dir.path / "full.pcap").string();
  c.snaplen = 100;
  c.flush_interval = std::chrono::hours(1);
  const Bytes p = PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").udp(1, 2).payload(72).build();  // 100 bytes
  const std::size_t record = kPcapRecordHeaderSize + kPflogHeaderSize + p.size();
  auto log_rule = [&](PcapLog& log, uint32_t rule) {
    REQUIRE(log.log(0, meta(engine::Family::V4, true, engine::Reason::Match, rule, false, "x"), p,
                    std::chrono::steady_clock::now()));
  };
  {
    PcapLog log(c);
    log_rule(log, 1);
    log.flush();
    {
      // Room for a record and a half: the second record would be torn.
      const DiskFullAt full(kPcapFileHeaderSize + record + record + record / 2);
      log_rule(log, 2);
      log_rule(log, 3);
      log_rule(log, 4);
      log.flush();
    }
    CHECK(log.stats().write_errors == 3);
    // Room again: later records follow the last whole one.
    log_rule(log, 5);
    log.flush();
    CHECK(log.stats().written == 2);
  }
  const PcapFile f = read_pcap(c.path);
  std::vector<uint32_t> rules;
  for (const Record& r : f.records) rules.push_back(be32(r.data, 36));
  CHECK(rules == std::vector<uint32_t>{1, 5});
}

// pflogd says "Logging suspended" once when its file fails and "Logging resumed" once it works
// again; the records lost in between are counted, not told one by one.
TEST_CASE("a log file that cannot be written is reported once, and again once records reach it",
          "[pcaplog]") {
  TempDir dir;
  const fs::path logs = dir.path / "logs";
  fs::create_directory(logs);
  PcapLogConfig c;
  c.path = (logs / "gone.pcap").string();
  c.snaplen = 100;
  c.flush_interval = std::chrono::hours(1);
  const Bytes p = PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").udp(1, 2).payload(72).build();    // 100 bytes
  c.max_file_bytes = kPcapFileHeaderSize + kPcapRecordHeaderSize + kPflogHeaderSize + p.size();  // one each
  PcapLog log(c);
  auto log_one = [&] {
    REQUIRE(log.log(0, meta(engine::Family::V4, true, engine::Reason::Match, 1, false, "x"), p,
                    std::chrono::steady_clock::now()));
  };
  log_one();
  log.flush();
  CHECK(log.take_events().empty());

  fs::remove_all(logs);  // the next record rotates, and the new file cannot be made
  log_one();
  log_one();
  log.flush();
  log_one();
  log.flush();
  CHECK(log.stats().write_errors == 3);
  std::vector<PcapLogEvent> events = log.take_events();
  REQUIRE(events.size() == 1);
  CHECK(events[0].failing);
  CHECK_THAT(events[0].message, Catch::Contains(c.path) && Catch::Contains("No such file or directory"));

  fs::create_directory(logs);
  log_one();
  log.flush();
  CHECK(log.stats().written == 2);
  events = log.take_events();
  REQUIRE(events.size() == 1);
  CHECK_FALSE(events[0].failing);
  CHECK_THAT(events[0].message, Catch::Contains(c.path) && Catch::Contains("3 logged packets lost"));
  CHECK(log.take_events().empty());
}

// A rotation that cannot move the file aside (its directory no longer writable by the daemon, or
// here a directory where PATH.1 goes) must not open the file again in its place: that empties it
// of the records it holds, counted as written.
TEST_CASE("a file that cannot be rotated away keeps its records", "[pcaplog]") {
  TempDir dir;
  PcapLogConfig c;
  c.path = (dir.path / "stuck.pcap").string();
  c.snaplen = 100;
  c.files = 2;
  c.flush_interval = std::chrono::hours(1);
  const Bytes p = PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").udp(1, 2).payload(72).build();    // 100 bytes
  c.max_file_bytes = kPcapFileHeaderSize + kPcapRecordHeaderSize + kPflogHeaderSize + p.size();  // one each
  std::vector<PcapLogEvent> events;
  {
    PcapLog log(c);
    auto log_rule = [&](uint32_t rule) {
      REQUIRE(log.log(0, meta(engine::Family::V4, true, engine::Reason::Match, rule, false, "x"), p,
                      std::chrono::steady_clock::now()));
      log.flush();
    };
    log_rule(1);
    fs::create_directories(c.path + ".1/in-the-way");
    log_rule(2);  // the rotation fails: 2 is lost, 1 stays
    CHECK(log.stats().write_errors == 1);
    CHECK(read_pcap(c.path).records.size() == 1);
    fs::remove_all(c.path + ".1");
    log_rule(3);  // the rotation is made again before anything is written
    CHECK(log.stats().written == 2);
    CHECK(log.stats().rotations == 1);
    events = log.take_events();
  }
  REQUIRE(events.size() == 2);
  CHECK_THAT(events[0].message, Catch::Contains("cannot rotate") && Catch::Contains(c.path + ".1"));
  std::vector<uint32_t> previous;
  for (const Record& r : read_pcap(c.path + ".1").records) previous.push_back(be32(r.data, 36));
  CHECK(previous == std::vector<uint32_t>{1});
  std::vector<uint32_t> current;
  for (const Record& r : read_pcap(c.path).records) current.push_back(be32(r.data, 36));
  CHECK(current == std::vector<uint32_t>{3});
}

TEST_CASE("a file left by an earlier run is rotated away, not overwritten", "[pcaplog]") {
  TempDir dir;
  PcapLogConfig c;
  c.path = (dir.path / "keep.pcap").string();
  std::ofstream(c.path) << "earlier";
  { PcapLog log(c); }
  std::ifstream earlier(c.path + ".1");
  std::string text;
  earlier >> text;
  CHECK(text == "earlier");
  CHECK(read_pcap(c.path).records.empty());
}

TEST_CASE("an unwritable path is an error naming it", "[pcaplog]") {
  PcapLogConfig c;
  c.path = "/nonexistent-dir/pflog.pcap";
  CHECK_THROWS_WITH(PcapLog(c),
                    Catch::Contains("/nonexistent-dir/pflog.pcap") && Catch::Contains("directory"));
}

TEST_CASE("a reload turns the log on, moves it, keeps it, and turns it off", "[pcaplog]") {
  TempDir dir;
  PcapLogConfig c;  // no path: off
  c.flush_interval = std::chrono::hours(1);
  const std::string first = (dir.path / "first.pcap").string();
  const std::string second = (dir.path / "second.pcap").string();
  const Bytes p = PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").udp(1, 2).build();
  auto log_rule = [&](PcapLog& log, uint32_t rule) {
    return log.log(0, meta(engine::Family::V4, true, engine::Reason::Match, rule, false, "x"), p,
                   std::chrono::steady_clock::now());
  };
  auto rules_in = [](const std::string& path) {
    std::vector<uint32_t> rules;
    for (const Record& r : read_pcap(path).records) rules.push_back(be32(r.data, 36));
    return rules;
  };
  PcapLog log(c);
  CHECK_FALSE(log.enabled());
  CHECK(log_rule(log, 1));  // nothing to log, nothing lost
  log.flush();
  CHECK(log.stats().logged == 0);
  CHECK(log.stats().write_errors == 0);

  CHECK(log.reconfigure(first, c.max_file_bytes, c.files).empty());
  CHECK(log.enabled());
  CHECK(log_rule(log, 2));
  // Moved: the record logged before goes to the first file, the later ones to the second.
  CHECK(log.reconfigure(second, c.max_file_bytes, c.files).empty());
  CHECK(log_rule(log, 3));
  log.flush();
  CHECK(rules_in(first) == std::vector<uint32_t>{2});
  CHECK(rules_in(second) == std::vector<uint32_t>{3});

  // The same path with other limits keeps its file and its records.
  CHECK(log.reconfigure(second, c.max_file_bytes / 2, 2).empty());
  CHECK(log_rule(log, 4));
  log.flush();
  CHECK(rules_in(second) == std::vector<uint32_t>{3, 4});
  CHECK_FALSE(fs::exists(second + ".1"));

  // Off: nothing more is written, and what was logged before reached the file.
  CHECK(log_rule(log, 5));
  CHECK(log.reconfigure("", c.max_file_bytes, c.files).empty());
  CHECK_FALSE(log.enabled());
  CHECK(log_rule(log, 6));
  log.flush();
  CHECK(rules_in(second) == std::vector<uint32_t>{3, 4, 5});
  CHECK(log.stats().written == 4);
  CHECK(log.stats().write_errors == 0);

  // Back on at a path where a file already is: rotated away, as at start.
  CHECK(log.reconfigure(first, c.max_file_bytes, c.files).empty());
  CHECK(log_rule(log, 7));
  log.flush();
  CHECK(rules_in(first) == std::vector<uint32_t>{7});
  CHECK(rules_in(first + ".1") == std::vector<uint32_t>{2});
}

TEST_CASE("a log moved and turned off and on while a worker logs loses no record unaccounted", "[pcaplog]") {
  TempDir dir;
  PcapLogConfig c;
  c.path = (dir.path / "a.pcap").string();
  c.files = 1000;  // every file kept, to count their records
  c.flush_interval = std::chrono::milliseconds(1);
  const Bytes p = PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").udp(1, 2).build();
  PcapLog log(c);
  std::atomic<bool> done{false};
  std::thread worker([&] {
    for (uint32_t i = 0; !done.load(); ++i) {
      log.log(0, meta(engine::Family::V4, true, engine::Reason::Match, i, false, "x"), p,
              std::chrono::steady_clock::now());
    }
  });
  const std::string paths[] = {(dir.path / "b.pcap").string(), "", c.path, (dir.path / "c.pcap").string()};
  for (int round = 0; round < 40; ++round) {
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    log.reconfigure(paths[round % 4], c.max_file_bytes, c.files);
  }
  done = true;
  worker.join();
  log.flush();
  const PcapLogStats s = log.stats();
  CHECK(s.logged > 0);
  CHECK(s.logged == s.written + s.write_errors);
  uint64_t in_files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path))
    in_files += read_pcap(entry.path()).records.size();
  CHECK(in_files == s.written);
}

TEST_CASE("a reload to a path that cannot be created says why, and logging resumes once it can be",
          "[pcaplog]") {
  TempDir dir;
  PcapLogConfig c;
  c.path = (dir.path / "a.pcap").string();
  c.flush_interval = std::chrono::hours(1);
  const fs::path later = dir.path / "later";
  const std::string moved = (later / "b.pcap").string();
  CHECK_THAT(PcapLog::path_problem(moved),
             Catch::Contains(later.string()) && Catch::Contains("not a directory"));
  CHECK(PcapLog::path_problem(c.path).empty());
  PcapLog log(c);
  const std::string error = log.reconfigure(moved, c.max_file_bytes, c.files);
  CHECK_THAT(error, Catch::Contains(moved));
  const Bytes p = PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").udp(1, 2).build();
  REQUIRE(log.log(0, meta(engine::Family::V4, true, engine::Reason::Match, 1, false, "x"), p,
                  std::chrono::steady_clock::now()));
  log.flush();
  CHECK(log.stats().write_errors == 1);
  fs::create_directory(later);
  REQUIRE(log.log(0, meta(engine::Family::V4, true, engine::Reason::Match, 2, false, "x"), p,
                  std::chrono::steady_clock::now()));
  log.flush();
  CHECK(log.stats().written == 1);
  REQUIRE(read_pcap(moved).records.size() == 1);
  CHECK(be32(read_pcap(moved).records[0].data, 36) == 2);
}

}  // namespace
}  // namespace pairwall::io
