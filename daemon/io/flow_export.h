// pflow(4): the flows the engine left for the states whose rule says (pflow) (engine/flow_log.h),
// sent to a collector as IPFIX (RFC 7011) over UDP, as `ifconfig pflow0 flowdst ADDR:PORT
// pflowproto 10` sends pf's.
//
// A flow is two data records, one a direction, as pflow writes them: the initiator's packets, its
// addresses as they arrived and, in the post-NAT fields, as they left translated; then the reply's,
// as it arrived and as it left translated back (the same addresses twice without a translation).
// Two templates, 256 for IPv4 flows and 257 for IPv6 ones, of these information elements:
//
//   IE (v4/v6)  name (IANA)                                 bytes v4/v6
//     8 / 27    sourceIPv{4,6}Address                         4 / 16
//    12 / 28    destinationIPv{4,6}Address                    4 / 16
//   225 / 281   postNATSourceIPv{4,6}Address                  4 / 16
//   226 / 282   postNATDestinationIPv{4,6}Address             4 / 16
//     7         sourceTransportPort                           2
//    11         destinationTransportPort                      2
//   227         postNAPTSourceTransportPort                   2
//   228         postNAPTDestinationTransportPort              2
//     4         protocolIdentifier                            1
//     2         packetDeltaCount                              8
//     1         octetDeltaCount                               8
//   152         flowStartMilliseconds                         8
//   153         flowEndMilliseconds (the direction's flow's last packet, the state's)  8
//   136         flowEndReason (engine::FlowEnd)               1
//
// Ports are TCP's and UDP's; 0 for every other protocol. The templates go in the first message and
// again at least every kTemplateInterval (pflow's PFLOW_TMPL_TIMEOUT, 30 s): over UDP a collector
// that starts later learns them then (RFC 7011 8.4).
#pragma once

#include <boost/asio/ip/udp.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "daemon/engine/flow_log.h"

namespace pairwall::io {

inline constexpr uint16_t kIpfixVersion = 10;
inline constexpr uint16_t kTemplateV4 = 256;
inline constexpr uint16_t kTemplateV6 = 257;
inline constexpr std::chrono::seconds kTemplateInterval{30};

struct IpfixMessage {
  std::vector<uint8_t> bytes;
  std::size_t flows = 0;  // the flows it carries, two data records each
};

// IPFIX messages from flows: pure, so that the tests read what it writes.
class IpfixWriter {
 public:
  // `max_message`: the most bytes a message may take (the path MTU less the IP and UDP headers).
  IpfixWriter(uint32_t observation_domain, std::size_t max_message);

  // The messages that carry `flows`, each within max_message; the first starts with the template
  // set when `templates`. `wall_offset_ms`: what turns the engine's clock into milliseconds since
  // the epoch; `export_time`: seconds since the epoch. Each message's sequence number counts the
  // data records of the messages before it.
  std::vector<IpfixMessage> write(std::span<const engine::FlowRecord> flows, int64_t wall_offset_ms,
                                  uint32_t export_time, bool templates);

  uint32_t sequence() const noexcept { return sequence_; }

 private:
  uint32_t domain_;
  std::size_t max_message_;
  uint32_t sequence_ = 0;  // data records written so far (RFC 7011 3.1: modulo 2^32)
};

struct FlowExportConfig {
  std::string collector_host;
  uint16_t collector_port = 0;
  std::string source;  // "": the kernel's choice
  uint32_t observation_domain = 0;

  std::string collector() const;  // "host:port", "[v6]:port"
  friend bool operator==(const FlowExportConfig&, const FlowExportConfig&) = default;
};

// The socket and the writer: takes the engine's flows and sends them, from the node's loop.
class FlowExporter {
 public:
  // Opens the socket toward the collector. Throws std::runtime_error naming the collector and what
  // failed (a source address of the wrong family). A collector without a route, or a source the
  // node does not hold (yet), costs the messages sent meanwhile, counted as send errors.
  FlowExporter(engine::FlowLog& log, FlowExportConfig config);
  ~FlowExporter();
  FlowExporter(const FlowExporter&) = delete;
  FlowExporter& operator=(const FlowExporter&) = delete;

  // Sends what the log holds. `engine_now`: the engine's clock, `wall_now`: the system clock, both
  // now. Called every second.
  void export_flows(engine::Millis engine_now, std::chrono::system_clock::time_point wall_now);

  const FlowExportConfig& config() const noexcept { return config_; }
  uint64_t flows_sent() const noexcept { return flows_sent_; }
  uint64_t messages_sent() const noexcept { return messages_sent_; }
  uint64_t send_errors() const noexcept { return send_errors_; }
  uint64_t flows_lost() const noexcept { return flows_lost_; }  // in messages the socket refused

 private:
  engine::FlowLog& log_;
  FlowExportConfig config_;
  IpfixWriter writer_;
  int fd_ = -1;
  boost::asio::ip::udp::endpoint collector_;
  std::vector<engine::FlowRecord> taken_;
  std::optional<engine::Millis> templates_sent_;  // the engine's clock, as export_flows() is given it
  uint64_t flows_sent_ = 0;
  uint64_t messages_sent_ = 0;
  uint64_t send_errors_ = 0;
  uint64_t flows_lost_ = 0;
};

}  // namespace pairwall::io
