// IPFIX as the flow exporter writes it, read back by a reader written from RFC 7011 alone: the
// message header, the template set, the data sets by their templates; and the exporter sending
// to a collector socket on the loopback.
#include "daemon/io/flow_export.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/udp.hpp>
#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/engine/address.h"

using namespace pairwall;
using engine::FlowEnd;
using engine::FlowRecord;
using io::IpfixMessage;
using io::IpfixWriter;

namespace {

uint64_t be(const uint8_t* p, std::size_t n) {
  uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

struct Header {
  uint16_t version = 0;
  uint16_t length = 0;
  uint32_t export_time = 0;
  uint32_t sequence = 0;
  uint32_t domain = 0;
};

// A data record as (information element id -> raw bytes).
using Record = std::map<uint16_t, std::vector<uint8_t>>;

struct Message {
  Header header;
  bool had_templates = false;
  std::vector<std::pair<uint16_t, Record>> records;  // (template id, record)
};

// Templates learned from earlier messages, as a collector keeps them.
using Templates = std::map<uint16_t, std::vector<std::pair<uint16_t, uint16_t>>>;

Message read(const std::vector<uint8_t>& bytes, Templates& templates) {
  Message m;
  REQUIRE(bytes.size() >= 16);
  m.header = {static_cast<uint16_t>(be(&bytes[0], 2)), static_cast<uint16_t>(be(&bytes[2], 2)),
              static_cast<uint32_t>(be(&bytes[4], 4)), static_cast<uint32_t>(be(&bytes[8], 4)),
              static_cast<uint32_t>(be(&bytes[12], 4))};
  REQUIRE(m.header.length == bytes.size());
  std::size_t at = 16;
  while (at < bytes.size()) {
    REQUIRE(at + 4 <= bytes.size());
    const auto set_id = static_cast<uint16_t>(be(&bytes[at], 2));
    const auto set_length = static_cast<uint16_t>(be(&bytes[at + 2], 2));
    REQUIRE(set_length >= 4);
    REQUIRE(at + set_length <= bytes.size());
    const std::size_t end = at + set_length;
    at += 4;
    if (set_id == 2) {
      m.had_templates = true;
      while (at + 4 <= end) {
        const auto id = static_cast<uint16_t>(be(&bytes[at], 2));
        const auto count = static_cast<uint16_t>(be(&bytes[at + 2], 2));
        at += 4;
        auto& fields = templates[id];
        fields.clear();
        for (uint16_t i = 0; i < count; ++i, at += 4) {
          REQUIRE(at + 4 <= end);
          fields.emplace_back(static_cast<uint16_t>(be(&bytes[at], 2)),
                              static_cast<uint16_t>(be(&bytes[at + 2], 2)));
        }
      }
    } else {
      REQUIRE(set_id >= 256);
      REQUIRE(templates.count(set_id) == 1);
      const auto& fields = templates[set_id];
      std::size_t size = 0;
      for (const auto& f : fields) size += f.second;
      while (at + size <= end) {
        Record r;
        for (const auto& [id, length] : fields) {
          r[id] = std::vector<uint8_t>(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                                       bytes.begin() + static_cast<std::ptrdiff_t>(at + length));
          at += length;
        }
        m.records.emplace_back(set_id, std::move(r));
      }
    }
    REQUIRE(at == end);
  }
  return m;
}

uint64_t value(const Record& r, uint16_t id) {
  const auto it = r.find(id);
  REQUIRE(it != r.end());
  return be(it->second.data(), it->second.size());
}

engine::IpAddress address(const char* text) {
  const std::optional<engine::IpAddress> a = engine::parse_address(text, nullptr);
  REQUIRE(a);
  return *a;
}

std::vector<uint8_t> bytes_of(const Record& r, uint16_t id) {
  const auto it = r.find(id);
  REQUIRE(it != r.end());
  return it->second;
}

std::vector<uint8_t> v6_bytes(const char* text) {
  std::vector<uint8_t> out(16);
  address(text).to_v6_bytes(out.data());
  return out;
}

// A nat'd IPv4 UDP flow: 10.1.0.10:40000 -> 192.0.2.80:53, left as 203.0.113.1:50001.
FlowRecord nat_flow() {
  FlowRecord f;
  f.stack.family = engine::Family::V4;
  f.stack.proto = 17;
  f.stack.addr[0] = address("10.1.0.10");
  f.stack.addr[1] = address("192.0.2.80");
  f.stack.port[0] = 40000;
  f.stack.port[1] = 53;
  f.wire = f.stack;
  f.wire.addr[0] = address("203.0.113.1");
  f.wire.port[0] = 50001;
  f.packets[0] = 3;
  f.packets[1] = 2;
  f.bytes[0] = 300;
  f.bytes[1] = 200;
  f.created = engine::Millis{5'000};
  f.last_seen = engine::Millis{7'500};
  f.end = FlowEnd::IdleTimeout;
  return f;
}

FlowRecord v6_tcp_flow() {
  FlowRecord f;
  f.stack.family = engine::Family::V6;
  f.stack.proto = 6;
  f.stack.addr[0] = address("2001:db8:1::10");
  f.stack.addr[1] = address("2001:db8:2::80");
  f.stack.port[0] = 41000;
  f.stack.port[1] = 443;
  f.wire = f.stack;
  f.packets[0] = 10;
  f.packets[1] = 8;
  f.bytes[0] = 1000;
  f.bytes[1] = 8000;
  f.created = engine::Millis{1'000};
  f.last_seen = engine::Millis{2'000};
  f.end = FlowEnd::EndOfFlow;
  return f;
}

constexpr int64_t kWallOffset = 1'800'000'000'000;  // engine ms 0 is this many ms after the epoch

}  // namespace

TEST_CASE("IPFIX: templates, then a record a direction of each flow, translated addresses after NAT",
          "[io][pflow]") {
  IpfixWriter writer(42, 1400);
  const std::vector<FlowRecord> flows = {nat_flow(), v6_tcp_flow()};
  const std::vector<IpfixMessage> messages = writer.write(flows, kWallOffset, 1'800'000'010, true);
  REQUIRE(messages.size() == 1);
  CHECK(messages[0].flows == 2);
  Templates templates;
  const Message m = read(messages[0].bytes, templates);
  CHECK(m.header.version == 10);
  CHECK(m.header.export_time == 1'800'000'010);
  CHECK(m.header.sequence == 0);
  CHECK(m.header.domain == 42);
  CHECK(m.had_templates);
  REQUIRE(templates.count(256) == 1);
  REQUIRE(templates.count(257) == 1);
  CHECK(templates[256].size() == 14);
  REQUIRE(m.records.size() == 4);

  // The initiator's direction: as it arrived, and as it left translated.
  const auto& [t0, out] = m.records[0];
  CHECK(t0 == 256);
  CHECK(value(out, 8) == 0x0a01000a);    // sourceIPv4Address 10.1.0.10
  CHECK(value(out, 12) == 0xc0000250);   // destinationIPv4Address 192.0.2.80
  CHECK(value(out, 225) == 0xcb007101);  // postNATSourceIPv4Address 203.0.113.1
  CHECK(value(out, 226) == 0xc0000250);
  CHECK(value(out, 7) == 40000);
  CHECK(value(out, 11) == 53);
  CHECK(value(out, 227) == 50001);
  CHECK(value(out, 228) == 53);
  CHECK(value(out, 4) == 17);
  CHECK(value(out, 2) == 3);
  CHECK(value(out, 1) == 300);
  CHECK(value(out, 152) == static_cast<uint64_t>(kWallOffset + 5'000));
  CHECK(value(out, 153) == static_cast<uint64_t>(kWallOffset + 7'500));
  CHECK(value(out, 136) == 1);
  // The reply: to the translated address, then back to the inside host.
  const auto& [t1, back] = m.records[1];
  CHECK(t1 == 256);
  CHECK(value(back, 8) == 0xc0000250);
  CHECK(value(back, 12) == 0xcb007101);
  CHECK(value(back, 225) == 0xc0000250);
  CHECK(value(back, 226) == 0x0a01000a);
  CHECK(value(back, 7) == 53);
  CHECK(value(back, 11) == 50001);
  CHECK(value(back, 227) == 53);
  CHECK(value(back, 228) == 40000);
  CHECK(value(back, 2) == 2);
  CHECK(value(back, 1) == 200);

  const auto& [t2, v6_out] = m.records[2];
  CHECK(t2 == 257);
  CHECK(bytes_of(v6_out, 27) == v6_bytes("2001:db8:1::10"));
  CHECK(bytes_of(v6_out, 28) == v6_bytes("2001:db8:2::80"));
  CHECK(bytes_of(v6_out, 281) == v6_bytes("2001:db8:1::10"));
  CHECK(value(v6_out, 11) == 443);
  CHECK(value(v6_out, 4) == 6);
  CHECK(value(v6_out, 1) == 1000);
  CHECK(value(v6_out, 136) == 3);
  const auto& [t3, v6_back] = m.records[3];
  CHECK(t3 == 257);
  CHECK(bytes_of(v6_back, 27) == v6_bytes("2001:db8:2::80"));
  CHECK(value(v6_back, 1) == 8000);
}

TEST_CASE("IPFIX: flows split across messages within the size, sequence numbers counting records",
          "[io][pflow]") {
  IpfixWriter writer(1, 512);
  std::vector<FlowRecord> flows(20, nat_flow());
  FlowRecord icmp = nat_flow();
  icmp.stack.proto = icmp.wire.proto = 1;
  flows.push_back(icmp);
  const std::vector<IpfixMessage> first = writer.write(flows, kWallOffset, 1, true);
  REQUIRE(first.size() > 1);
  Templates templates;
  uint32_t expected_sequence = 0;
  std::size_t flows_read = 0;
  for (std::size_t i = 0; i < first.size(); ++i) {
    INFO("message " << i);
    CHECK(first[i].bytes.size() <= 512);
    const Message m = read(first[i].bytes, templates);
    CHECK(m.had_templates == (i == 0));
    CHECK(m.header.sequence == expected_sequence);
    CHECK(m.records.size() == 2 * first[i].flows);
    expected_sequence += static_cast<uint32_t>(m.records.size());
    flows_read += first[i].flows;
    if (i + 1 == first.size()) CHECK(value(m.records.back().second, 7) == 0);  // ICMP: no ports
  }
  CHECK(flows_read == flows.size());
  CHECK(writer.sequence() == expected_sequence);

  // The next write goes on counting; without flows or templates due, it writes nothing.
  const std::vector<IpfixMessage> next =
      writer.write(std::vector<FlowRecord>{nat_flow()}, kWallOffset, 2, false);
  REQUIRE(next.size() == 1);
  CHECK(read(next[0].bytes, templates).header.sequence == expected_sequence);
  CHECK(writer.write({}, kWallOffset, 3, false).empty());
  const std::vector<IpfixMessage> only_templates = writer.write({}, kWallOffset, 3, true);
  REQUIRE(only_templates.size() == 1);
  CHECK(read(only_templates[0].bytes, templates).had_templates);
  CHECK(only_templates[0].flows == 0);
}

TEST_CASE("the exporter sends the log's flows to the collector, templates first", "[io][pflow]") {
  const std::string loopback = GENERATE(std::string("127.0.0.1"), std::string("::1"));
  INFO(loopback);
  boost::asio::io_context io;
  boost::asio::ip::udp::socket collector(
      io, boost::asio::ip::udp::endpoint(boost::asio::ip::make_address(loopback), 0));
  const timeval wait{2, 0};
  REQUIRE(::setsockopt(collector.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait) == 0);
  engine::FlowLog log(16);
  io::FlowExporter exporter(log, {loopback, collector.local_endpoint().port(), loopback, 9});
  REQUIRE(log.push(nat_flow()));
  exporter.export_flows(engine::Millis{10'000},
                        std::chrono::system_clock::time_point(std::chrono::seconds(100)));
  std::vector<uint8_t> buffer(2048);
  const ssize_t n = ::recv(collector.native_handle(), buffer.data(), buffer.size(), 0);
  REQUIRE(n > 0);
  buffer.resize(static_cast<std::size_t>(n));
  Templates templates;
  const Message m = read(buffer, templates);
  CHECK(m.had_templates);
  CHECK(m.header.domain == 9);
  CHECK(m.header.export_time == 100);
  REQUIRE(m.records.size() == 2);
  // The engine's 5,000 ms, when its clock read 10,000 at 100 s after the epoch.
  CHECK(value(m.records[0].second, 152) == 95'000);
  CHECK(exporter.flows_sent() == 1);
  CHECK(exporter.messages_sent() == 1);
  // Nothing new and the templates sent a moment ago: nothing goes.
  exporter.export_flows(engine::Millis{11'000},
                        std::chrono::system_clock::time_point(std::chrono::seconds(101)));
  CHECK(exporter.messages_sent() == 1);
  // Nothing new, the templates sent 30 s ago by the engine's clock: they go again, alone.
  exporter.export_flows(engine::Millis{40'000},
                        std::chrono::system_clock::time_point(std::chrono::seconds(130)));
  REQUIRE(exporter.messages_sent() == 2);
  buffer.assign(2048, 0);
  const ssize_t again = ::recv(collector.native_handle(), buffer.data(), buffer.size(), 0);
  REQUIRE(again > 0);
  buffer.resize(static_cast<std::size_t>(again));
  Templates fresh;
  const Message repeat = read(buffer, fresh);
  CHECK(repeat.had_templates);
  CHECK(repeat.records.empty());
}

// A VIP as the source: the backup does not hold it, and must start all the same.
TEST_CASE("an exporter whose source this node does not hold starts, and counts what it cannot send",
          "[io][pflow]") {
  boost::asio::io_context io;
  boost::asio::ip::udp::socket collector(
      io, boost::asio::ip::udp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  const timeval wait{0, 300'000};
  REQUIRE(::setsockopt(collector.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait) == 0);
  engine::FlowLog log(16);
  io::FlowExporter exporter(log, {"127.0.0.1", collector.local_endpoint().port(), "192.0.2.254", 1});
  REQUIRE(log.push(nat_flow()));
  exporter.export_flows(engine::Millis{10'000},
                        std::chrono::system_clock::time_point(std::chrono::seconds(100)));
  CHECK(exporter.messages_sent() == 0);
  CHECK(exporter.send_errors() == 1);
  CHECK(exporter.flows_lost() == 1);
  std::vector<uint8_t> buffer(2048);
  CHECK(::recv(collector.native_handle(), buffer.data(), buffer.size(), 0) < 0);
}
