// Why the engine decided what it decided. Every verdict carries one reason and every reason has a
// counter, so that nothing is dropped silently (pf's PFRES_* with more resolution).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

namespace pairwall::engine {

enum class Reason : uint8_t {
  // Passed.
  Match,         // a pass rule decided
  State,         // an existing state matched
  DefaultPass,   // no rule matched (pf's implicit pass)
  AfterRouting,  // before routing, no state or translation claimed it: decided by the hooks after
  Skipped,       // every pass of the packet is on a `set skip` interface: not inspected
  // Malformed input.
  Short,             // fewer bytes than a header claims
  BadIpVersion,      // not 4 or 6, or the version disagrees with the queue's family
  BadIpHeader,       // IHL < 5, total length inconsistent, bad IPv4 option lengths, too many AHs
  BadIpv6Extension,  // extension header chain runs past the packet or repeats illegally, or a malformed
                     // option
  BadOffset,         // fragment offset/length makes no sense (overlap past 65535, tiny first fragment)
  BadTcpHeader,      // data offset < 5 or past the packet
  BadTcpOptions,     // an option length that runs past the header
  BadUdpHeader,      // UDP length field disagrees with the packet
  BadIcmp,           // ICMP too short for its type, an error quoting a malformed packet, or
                     // neighbor discovery with a hop limit other than 255 (sent from off the link)
  // Normalization (scrub).
  Fragment,     // a fragment the engine was not allowed to pass
  BadTcpFlags,  // a flag combination no stack sends (SYN+FIN, SYN+RST, none, ...)
  IpOptions,    // IP options (packet.h, has_ip_options) that no `allow-opts` let by
  // Rules.
  RuleBlock,  // a block rule decided
  // States.
  StateMismatch,      // a packet that fits a state's key but not its protocol state (e.g. SYN on an
                      // established state, an ICMP error travelling the same way as the packet it
                      // quotes instead of back to that packet's sender, a translated
                      // connection's packet in the form it only has past the translation)
  StateInterface,     // a packet of an `if-bound` state's connection on an interface the state is not
                      // bound to
  BadSeq,             // TCP sequence/ack outside the windows both ends advertised
  BadTimestamp,       // scrub reassemble tcp: two timestamp options, or timestamps RFC 7323 rules out
  Synproxy,           // a handshake packet of `synproxy state`: answered by this node or held back
  StateLimit,         // the state table is full (set limit states)
  RuleStateLimit,     // the rule's own (max N) is reached
  SourceLimit,        // the source address is at its rule's max-src-states, max-src-nodes,
                      // max-src-conn or max-src-conn-rate
  SourceNodeLimit,    // the source node table is full (set limit src-nodes)
  TranslationFailed,  // nat found no free source port (or ICMP query id) for a new connection, or
                      // a `-> (em0)` rule's interface has no address yet
  Memory,             // a pool could not provide memory
  Internal,           // a path that should not happen; counted so that it is seen if it does
  Count
};

inline constexpr std::size_t kReasonCount = static_cast<std::size_t>(Reason::Count);

constexpr bool is_pass(Reason r) {
  return r == Reason::Match || r == Reason::State || r == Reason::DefaultPass || r == Reason::AfterRouting ||
         r == Reason::Skipped;
}

// Stable snake_case name used in metrics, JSON and the CLI.
std::string_view reason_name(Reason r);

// Counters written by exactly one worker thread and read by any: relaxed load+store, no locked
// read-modify-write on the packet path.
class ReasonCounters {
 public:
  void add(Reason r, uint64_t n = 1) noexcept {
    auto& c = counts_[static_cast<std::size_t>(r)];
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  uint64_t get(Reason r) const noexcept {
    return counts_[static_cast<std::size_t>(r)].load(std::memory_order_relaxed);
  }

 private:
  std::array<std::atomic<uint64_t>, kReasonCount> counts_{};
};

}  // namespace pairwall::engine
