#include "daemon/io/flow_export.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "daemon/engine/checksum.h"

namespace pairwall::io {
namespace {

using udp = boost::asio::ip::udp;

constexpr std::size_t kMessageHeader = 16;
constexpr std::size_t kSetHeader = 4;
constexpr uint16_t kTemplateSetId = 2;

struct Field {
  uint16_t v4;
  uint16_t v6;
  uint16_t v4_bytes;
  uint16_t v6_bytes;
};
// The templates' fields, in the order of the records' (flow_export.h).
constexpr Field kFields[] = {
    {8, 27, 4, 16}, {12, 28, 4, 16},  {225, 281, 4, 16}, {226, 282, 4, 16}, {7, 7, 2, 2},
    {11, 11, 2, 2}, {227, 227, 2, 2}, {228, 228, 2, 2},  {4, 4, 1, 1},      {2, 2, 8, 8},
    {1, 1, 8, 8},   {152, 152, 8, 8}, {153, 153, 8, 8},  {136, 136, 1, 1},
};
constexpr std::size_t kFieldCount = std::size(kFields);

constexpr std::size_t record_bytes(bool v6) {
  std::size_t n = 0;
  for (const Field& f : kFields) n += v6 ? f.v6_bytes : f.v4_bytes;
  return n;
}
constexpr std::size_t kTemplateSetBytes = kSetHeader + 2 * (4 + 4 * kFieldCount);

// `n` more bytes at the end of `out`, to write with the engine's big-endian stores.
uint8_t* grow(std::vector<uint8_t>& out, std::size_t n) {
  out.resize(out.size() + n);
  return out.data() + out.size() - n;
}
void put16(std::vector<uint8_t>& out, uint16_t v) {
  engine::store_be16(grow(out, 2), v);
}
void put32(std::vector<uint8_t>& out, uint32_t v) {
  engine::store_be32(grow(out, 4), v);
}
void put64(std::vector<uint8_t>& out, uint64_t v) {
  put32(out, static_cast<uint32_t>(v >> 32));
  put32(out, static_cast<uint32_t>(v));
}
void put_address(std::vector<uint8_t>& out, engine::Family family, const engine::IpAddress& a) {
  if (family == engine::Family::V4) {
    a.to_v4_bytes(grow(out, 4));
  } else {
    a.to_v6_bytes(grow(out, 16));
  }
}

bool has_ports(uint8_t proto) {
  return proto == 6 || proto == 17;
}

// One direction of a flow: `seen` as its packets arrived, `left` as they left.
void put_record(std::vector<uint8_t>& out, const engine::StateKey& seen, const engine::StateKey& left,
                uint64_t packets, uint64_t bytes, const engine::FlowRecord& flow, int64_t wall_offset_ms) {
  const bool ports = has_ports(seen.proto);
  put_address(out, seen.family, seen.addr[0]);
  put_address(out, seen.family, seen.addr[1]);
  put_address(out, seen.family, left.addr[0]);
  put_address(out, seen.family, left.addr[1]);
  put16(out, ports ? seen.port[0] : 0);
  put16(out, ports ? seen.port[1] : 0);
  put16(out, ports ? left.port[0] : 0);
  put16(out, ports ? left.port[1] : 0);
  out.push_back(seen.proto);
  put64(out, packets);
  put64(out, bytes);
  put64(out, static_cast<uint64_t>(flow.created.count() + wall_offset_ms));
  put64(out, static_cast<uint64_t>(flow.last_seen.count() + wall_offset_ms));
  out.push_back(static_cast<uint8_t>(flow.end));
}

void put_templates(std::vector<uint8_t>& out) {
  put16(out, kTemplateSetId);
  put16(out, static_cast<uint16_t>(kTemplateSetBytes));
  for (const bool v6 : {false, true}) {
    put16(out, v6 ? kTemplateV6 : kTemplateV4);
    put16(out, static_cast<uint16_t>(kFieldCount));
    for (const Field& f : kFields) {
      put16(out, v6 ? f.v6 : f.v4);
      put16(out, v6 ? f.v6_bytes : f.v4_bytes);
    }
  }
}

}  // namespace

std::string FlowExportConfig::collector() const {
  const bool v6 = collector_host.find(':') != std::string::npos;
  return (v6 ? "[" + collector_host + "]" : collector_host) + ":" + std::to_string(collector_port);
}

IpfixWriter::IpfixWriter(uint32_t observation_domain, std::size_t max_message)
    : domain_(observation_domain), max_message_(max_message) {
  // Room for the header, the templates and one flow of the larger family.
  const std::size_t least = kMessageHeader + kTemplateSetBytes + kSetHeader + 2 * record_bytes(true);
  if (max_message_ < least) max_message_ = least;
}

std::vector<IpfixMessage> IpfixWriter::write(std::span<const engine::FlowRecord> flows,
                                             int64_t wall_offset_ms, uint32_t export_time, bool templates) {
  std::vector<IpfixMessage> messages;
  std::vector<uint8_t> message;
  std::size_t set_start = 0;  // where the open data set's header is; 0: none open
  uint16_t set_id = 0;
  uint32_t records = 0;  // in the open message
  const auto close_set = [&] {
    if (set_start != 0)
      engine::store_be16(&message[set_start + 2], static_cast<uint16_t>(message.size() - set_start));
    set_start = 0;
  };
  const auto close_message = [&] {
    close_set();
    engine::store_be16(&message[2], static_cast<uint16_t>(message.size()));
    messages.push_back({std::move(message), records / 2});
    message.clear();
    sequence_ += records;
    records = 0;
  };
  const auto open_message = [&] {
    message.reserve(max_message_);
    put16(message, kIpfixVersion);
    put16(message, 0);  // its length, once known
    put32(message, export_time);
    put32(message, sequence_);
    put32(message, domain_);
    if (templates) put_templates(message);
    templates = false;
  };
  // IPv4 flows, then IPv6 ones: at most two data sets a message.
  for (const engine::Family family : {engine::Family::V4, engine::Family::V6}) {
    const bool v6 = family == engine::Family::V6;
    const std::size_t flow_bytes = 2 * record_bytes(v6);
    for (const engine::FlowRecord& flow : flows) {
      if (flow.stack.family != family) continue;
      const uint16_t id = v6 ? kTemplateV6 : kTemplateV4;
      const bool new_set = message.empty() || set_id != id || set_start == 0;
      if (!message.empty() && message.size() + (new_set ? kSetHeader : 0) + flow_bytes > max_message_)
        close_message();
      if (message.empty()) open_message();
      if (set_start == 0 || set_id != id) {
        close_set();
        set_start = message.size();
        set_id = id;
        put16(message, id);
        put16(message, 0);  // its length, once known
      }
      // The initiator's direction, then the reply's: it arrives as the wire key reversed, and
      // leaves translated back, as the stack key reversed.
      put_record(message, flow.stack, flow.wire, flow.packets[0], flow.bytes[0], flow, wall_offset_ms);
      put_record(message, flow.wire.reversed(), flow.stack.reversed(), flow.packets[1], flow.bytes[1], flow,
                 wall_offset_ms);
      records += 2;
    }
  }
  if (!message.empty()) {
    close_message();
  } else if (templates) {
    // Templates due and no flow: sent on their own, so that a collector knows them before the
    // first flow ends.
    open_message();
    close_message();
  }
  return messages;
}

FlowExporter::FlowExporter(engine::FlowLog& log, FlowExportConfig config)
    : log_(log), config_(std::move(config)), writer_(config_.observation_domain, 1400) {
  const std::string where =
      "[pflow] collector " + config_.collector_host + " port " + std::to_string(config_.collector_port);
  boost::system::error_code ec;
  const auto collector = boost::asio::ip::make_address(config_.collector_host, ec);
  if (ec) throw std::runtime_error(where + ": not an address");
  const bool v6 = collector.is_v6();
  fd_ = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) throw std::runtime_error(where + ": cannot open a socket: " + std::strerror(errno));
  const auto fail = [&](const std::string& what) {
    const std::string reason = std::strerror(errno);
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(where + ": " + what + ": " + reason);
  };
  if (!config_.source.empty()) {
    // The source may be a VIP the peer holds now: bound all the same (freebind), this node's
    // messages fail until it holds the address, counted, rather than keep the node from starting.
    const int on = 1;
    if (::setsockopt(fd_, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_FREEBIND : IP_FREEBIND, &on, sizeof on) !=
        0)
      fail("cannot bind to an address the node may not hold yet (freebind)");
    const udp::endpoint local(boost::asio::ip::make_address(config_.source), 0);
    if (::bind(fd_, local.data(), static_cast<socklen_t>(local.size())) != 0)
      fail("cannot send from " + config_.source);
  }
  // Unconnected: a collector the node has no route to yet (at boot) costs the messages sent
  // meanwhile, counted, and not the start.
  collector_ = udp::endpoint(collector, config_.collector_port);
}

FlowExporter::~FlowExporter() {
  if (fd_ >= 0) ::close(fd_);
}

void FlowExporter::export_flows(engine::Millis engine_now, std::chrono::system_clock::time_point wall_now) {
  log_.take(taken_);
  const bool templates = !templates_sent_ || engine_now - *templates_sent_ >= kTemplateInterval;
  if (taken_.empty() && !templates) return;
  const int64_t wall_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(wall_now.time_since_epoch()).count();
  const auto export_time = static_cast<uint32_t>(wall_ms / 1000);
  for (const IpfixMessage& message :
       writer_.write(taken_, wall_ms - engine_now.count(), export_time, templates)) {
    if (::sendto(fd_, message.bytes.data(), message.bytes.size(), 0, collector_.data(),
                 static_cast<socklen_t>(collector_.size())) == static_cast<ssize_t>(message.bytes.size())) {
      ++messages_sent_;
      flows_sent_ += message.flows;
    } else {
      ++send_errors_;
      flows_lost_ += message.flows;
    }
  }
  if (templates) templates_sent_ = engine_now;
}

}  // namespace pairwall::io
