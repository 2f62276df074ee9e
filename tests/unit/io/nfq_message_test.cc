// Queue messages crafted with libmnl the way the kernel lays them out, parsed back.
#include <arpa/inet.h>
#include <libmnl/libmnl.h>
// After <arpa/inet.h>: glibc's netinet/in.h must come before the kernel's linux/in.h.
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink_queue.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <optional>
#include <vector>

#include "daemon/engine/engine.h"
#include "daemon/io/nfq_socket.h"
#include "daemon/io/nfqueue.h"
#include "tests/unit/support/packet_builder.h"

namespace pairwall::io {
namespace {

struct Message {
  std::vector<char> buffer = std::vector<char>(200000, 0);
  nlmsghdr* nlh;

  explicit Message(uint16_t type = NFQNL_MSG_PACKET) { nlh = nfq_nlmsg_put(buffer.data(), type, 0); }

  Message& header(uint32_t id, uint16_t proto = 0x0800, uint8_t hook = NF_INET_FORWARD) {
    nfqnl_msg_packet_hdr hdr{htonl(id), htons(proto), hook};
    mnl_attr_put(nlh, NFQA_PACKET_HDR, sizeof(hdr), &hdr);
    return *this;
  }
  Message& u32(uint16_t type, uint32_t host_value) {
    mnl_attr_put_u32(nlh, type, htonl(host_value));
    return *this;
  }
  Message& payload(const std::vector<uint8_t>& bytes) {
    mnl_attr_put(nlh, NFQA_PAYLOAD, bytes.size(), bytes.data());
    return *this;
  }
};

std::vector<uint8_t> bytes(std::size_t n) {
  std::vector<uint8_t> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i);
  b[0] = 0x45;
  return b;
}

TEST_CASE("a forwarded packet with every attribute", "[nfqueue]") {
  const auto data = bytes(60);
  Message m;
  m.header(77, 0x0800, NF_INET_FORWARD)
      .u32(NFQA_MARK, 0xabc)
      .u32(NFQA_IFINDEX_INDEV, 3)
      .u32(NFQA_IFINDEX_OUTDEV, 9)
      .u32(NFQA_SKB_INFO, NFQA_SKB_CSUMNOTREADY | NFQA_SKB_GSO)
      .payload(data);
  QueuedPacket p;
  REQUIRE(parse_queue_message(m.nlh, p) == MessageStatus::Packet);
  CHECK(p.id == 77);
  CHECK(p.hw_protocol == 0x0800);
  CHECK(p.hook == NF_INET_FORWARD);
  CHECK(p.mark == 0xabc);
  CHECK(p.in_ifindex == 3);
  CHECK(p.out_ifindex == 9);
  CHECK(p.checksum_partial);
  CHECK(p.gso);
  CHECK(p.length == 60);
  REQUIRE(p.payload.size() == 60);
  CHECK(std::vector<uint8_t>(p.payload.begin(), p.payload.end()) == data);
  // The payload points into the message, so a rewrite in place lands in the receive buffer.
  CHECK(reinterpret_cast<char*>(p.payload.data()) > m.buffer.data());
  CHECK(reinterpret_cast<char*>(p.payload.data()) < m.buffer.data() + m.nlh->nlmsg_len);
}

TEST_CASE("a message ending unpadded after its payload, as the kernel sends it, is whole", "[nfqueue]") {
  Message m;
  m.header(78).payload(bytes(61));
  m.nlh->nlmsg_len -= 3;  // the kernel's nlmsg_len is its skb's length, the payload unpadded
  QueuedPacket p;
  REQUIRE(parse_queue_message(m.nlh, p) == MessageStatus::Packet);
  CHECK(p.payload.size() == 61);
}

TEST_CASE("a locally generated packet has no input interface", "[nfqueue]") {
  Message m;
  m.header(5, 0x86dd, NF_INET_LOCAL_OUT).u32(NFQA_IFINDEX_OUTDEV, 2).payload(bytes(40));
  QueuedPacket p;
  REQUIRE(parse_queue_message(m.nlh, p) == MessageStatus::Packet);
  CHECK(p.in_ifindex == 0);
  CHECK(p.out_ifindex == 2);
  CHECK(p.hw_protocol == 0x86dd);
  CHECK_FALSE(p.checksum_partial);
  CHECK(hook_of(p.hook, p.in_ifindex != 0, p.out_ifindex != 0) == engine::Hook::Output);
}

TEST_CASE("the hook follows the interfaces the kernel reports, and pre-routing its hook number",
          "[nfqueue]") {
  CHECK(hook_of(NF_INET_FORWARD, true, true) == engine::Hook::Forward);
  CHECK(hook_of(NF_INET_LOCAL_IN, true, false) == engine::Hook::Input);
  CHECK(hook_of(NF_INET_LOCAL_OUT, false, true) == engine::Hook::Output);
  CHECK(hook_of(NF_INET_PRE_ROUTING, true, false) == engine::Hook::Prerouting);
}

TEST_CASE("answers leave by the interface toward their destination, a link-local one's scope", "[nfqueue]") {
  test::Bytes syn = test::PacketBuilder().ipv6("fe80::1", "fe80::2").tcp(40000, 22).build();
  const auto client = *engine::parse_address("fe80::1", nullptr);
  const auto server = *engine::parse_address("fe80::2", nullptr);
  struct Row {
    const char* name;
    uint32_t in;
    uint32_t out;
    uint32_t back;    // to the packet's source
    uint32_t onward;  // to its destination
  };
  const Row rows[] = {
      {"forwarded", 3, 5, 3, 5},
      {"to this host", 3, 0, 3, 3},
      {"from this host", 0, 5, 5, 5},
  };
  for (const Row& row : rows) {
    SECTION(row.name) {
      QueuedPacket p;
      p.in_ifindex = row.in;
      p.out_ifindex = row.out;
      p.payload = syn;
      CHECK(link_back(p) == row.back);
      CHECK(link_toward(p, engine::Family::V6, client) == row.back);
      CHECK(link_toward(p, engine::Family::V6, server) == row.onward);
    }
  }
}

TEST_CASE("defer holds no first packet to a multicast or broadcast address, as pfsync_defer",
          "[nfqueue][defer]") {
  struct Row {
    const char* name;
    test::Bytes packet;
    bool held;
  };
  const Row rows[] = {
      {"IPv4 unicast", test::PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").udp(5353, 5353).build(), true},
      {"IPv4 link-local multicast (mDNS)",
       test::PacketBuilder().ipv4("10.0.0.1", "224.0.0.251").udp(5353, 5353).build(), false},
      {"IPv4 routed multicast", test::PacketBuilder().ipv4("10.0.0.1", "239.1.2.3").udp(4000, 4000).build(),
       false},
      {"IPv4 limited broadcast (DHCP)",
       test::PacketBuilder().ipv4("0.0.0.0", "255.255.255.255").udp(68, 67).build(), false},
      {"IPv4 class E, not multicast", test::PacketBuilder().ipv4("10.0.0.1", "240.0.0.1").udp(1, 2).build(),
       true},
      {"IPv6 unicast", test::PacketBuilder().ipv6("2001:db8::1", "2001:db8::2").tcp(40000, 443).build(),
       true},
      {"IPv6 link-local multicast", test::PacketBuilder().ipv6("fe80::1", "ff02::fb").udp(5353, 5353).build(),
       false},
      {"IPv6 site multicast", test::PacketBuilder().ipv6("2001:db8::1", "ff05::1:3").udp(546, 547).build(),
       false},
  };
  for (const Row& row : rows) {
    SECTION(row.name) {
      CHECK(worth_deferring(row.packet) == row.held);
    }
  }
}

TEST_CASE("a reset answers a GSO segment whose checksum field does not sum its merged bytes",
          "[nfqueue][reject]") {
  // Fraglist GRO merges verified segments and keeps the first one's checksum: over the merged
  // bytes it is wrong, and the kernel says CHECKSUM_UNNECESSARY (no NFQA_SKB_CSUMNOTREADY).
  test::Bytes merged = test::PacketBuilder()
                           .ipv4("192.0.2.10", "198.51.100.20")
                           .tcp(40000, 443)
                           .flags(engine::tcpflag::kAck)
                           .seq(1000)
                           .ack(2000)
                           .payload(2800)
                           .l4_checksum(0x1234)
                           .build();
  struct Row {
    const char* name;
    bool gso;
    bool checksum_partial;
    RejectStatus want;
  };
  const Row rows[] = {
      {"a GSO packet", true, false, RejectStatus::Built},
      {"a GSO packet the kernel has yet to sum", true, true, RejectStatus::Built},
      {"a packet whose checksum is not finished", false, true, RejectStatus::Built},
      {"a plain packet: its checksum is wrong", false, false, RejectStatus::NotEligible},
  };
  for (const Row& row : rows) {
    SECTION(row.name) {
      QueuedPacket p;
      p.payload = merged;
      p.gso = row.gso;
      p.checksum_partial = row.checksum_partial;
      std::vector<uint8_t> out(kMaxReplySize);
      CHECK(build_reject(p.payload, engine::rules::BlockReply::ReturnRst, RejectIcmp::PortUnreachable, -1, 64,
                         transport_checksum_vouched(p), out)
                .status == row.want);
    }
  }
}

// The verdict message's NFQA_MARK in host order, or nothing.
std::optional<uint32_t> verdict_mark(uint8_t* buf) {
  auto* nlh = reinterpret_cast<nlmsghdr*>(buf);
  std::optional<uint32_t> mark;
  mnl_attr_parse(
      nlh, sizeof(nfgenmsg),
      [](const nlattr* attr, void* out) {
        if (mnl_attr_get_type(attr) == NFQA_MARK)
          *static_cast<std::optional<uint32_t>*>(out) = ntohl(mnl_attr_get_u32(attr));
        return MNL_CB_OK;
      },
      &mark);
  return mark;
}

TEST_CASE("a claimed packet keeps the mark it came with, the claim's bit added", "[nfqueue]") {
  std::vector<uint8_t> buf(4096);
  constexpr uint32_t kClaim = 0x40000000;
  VerdictOp op{VerdictOp::Kind::Single, 7, true, false, true, 0x00000105};
  REQUIRE(put_verdict(buf.data(), 3, op, kClaim, {}) > 0);
  CHECK(verdict_mark(buf.data()) == 0x40000105u);

  op.mark = 0;
  put_verdict(buf.data(), 3, op, kClaim, {});
  CHECK(verdict_mark(buf.data()) == kClaim);

  op.claimed = false;  // an accept leaves the packet's mark alone
  op.mark = 0x105;
  put_verdict(buf.data(), 3, op, kClaim, {});
  CHECK_FALSE(verdict_mark(buf.data()).has_value());
}

TEST_CASE("a packet longer than the copy range is reported truncated", "[nfqueue]") {
  Message m;
  m.header(9).u32(NFQA_CAP_LEN, 70000).payload(bytes(1000));
  QueuedPacket p;
  REQUIRE(parse_queue_message(m.nlh, p) == MessageStatus::Truncated);
  CHECK(p.id == 9);
  CHECK(p.length == 70000);
  CHECK(p.payload.size() == 1000);

  Message whole;
  whole.header(10).u32(NFQA_CAP_LEN, 1000).payload(bytes(1000));
  REQUIRE(parse_queue_message(whole.nlh, p) == MessageStatus::Packet);

  Message meta_only;
  meta_only.header(11);
  REQUIRE(parse_queue_message(meta_only.nlh, p) == MessageStatus::Truncated);
  CHECK(p.id == 11);
}

TEST_CASE("messages that are not packets, or not whole", "[nfqueue]") {
  QueuedPacket p;
  SECTION("an error reply") {
    Message m;
    m.nlh->nlmsg_type = NLMSG_ERROR;
    CHECK(parse_queue_message(m.nlh, p) == MessageStatus::NotPacket);
  }
  SECTION("a config message") {
    Message m(NFQNL_MSG_CONFIG);
    CHECK(parse_queue_message(m.nlh, p) == MessageStatus::NotPacket);
  }
  SECTION("no packet header") {
    Message m;
    m.payload(bytes(20));
    CHECK(parse_queue_message(m.nlh, p) == MessageStatus::Malformed);
  }
  SECTION("a packet header of the wrong size") {
    Message m;
    const uint8_t short_header[3] = {0, 0, 1};
    mnl_attr_put(m.nlh, NFQA_PACKET_HDR, sizeof(short_header), short_header);
    CHECK(parse_queue_message(m.nlh, p) == MessageStatus::Malformed);
  }
  SECTION("an attribute running past the message") {
    Message m;
    m.header(1).payload(bytes(100));
    m.nlh->nlmsg_len -= 40;  // cut into the payload attribute
    // Malformed, not a packet the copy range cut short: the truncated count must not send anyone
    // to raise a copy range that is not at fault.
    CHECK(parse_queue_message(m.nlh, p) == MessageStatus::Malformed);
  }
  SECTION("bytes after the last attribute that make no attribute") {
    Message m;
    m.header(1).payload(bytes(100));
    const nlattr stray{2, NFQA_MARK};  // shorter than its own header
    std::memcpy(static_cast<char*>(mnl_nlmsg_get_payload_tail(m.nlh)), &stray, sizeof(stray));
    m.nlh->nlmsg_len += sizeof(stray);
    CHECK(parse_queue_message(m.nlh, p) == MessageStatus::Malformed);
  }
}

// A message that does not parse is settled by its id where the id can be read (nfq_socket.cc,
// collect()); read from a header of the wrong length, it would be another packet's, or none: that
// packet would be dropped, or accepted uninspected, in the malformed one's place.
TEST_CASE("a packet id is recovered only from a whole packet header", "[nfqueue]") {
  const auto data = [](const Message& m) { return reinterpret_cast<const uint8_t*>(m.nlh); };
  uint32_t id = 0;
  SECTION("a whole header, the message cut after it") {
    Message m;
    m.header(0x01020304).payload(bytes(100));
    CHECK(recover_packet_id(data(m), MNL_NLMSG_HDRLEN + MNL_ALIGN(sizeof(nfgenmsg)) + 12, id));
    CHECK(id == 0x01020304);
  }
  SECTION("the message cut inside the header") {
    Message m;
    m.header(7);
    CHECK_FALSE(recover_packet_id(data(m), MNL_NLMSG_HDRLEN + MNL_ALIGN(sizeof(nfgenmsg)) + 8, id));
  }
  SECTION("a header shorter than a packet header, another attribute after it") {
    Message m;
    const uint8_t short_header[3] = {0, 0, 1};
    mnl_attr_put(m.nlh, NFQA_PACKET_HDR, sizeof(short_header), short_header);
    m.u32(NFQA_MARK, 0x11223344).payload(bytes(40));
    QueuedPacket p;
    REQUIRE(parse_queue_message(m.nlh, p) == MessageStatus::Malformed);
    CHECK_FALSE(recover_packet_id(data(m), m.nlh->nlmsg_len, id));
  }
  SECTION("a header longer than a packet header") {
    Message m;
    const uint8_t long_header[12] = {0, 0, 0, 9, 8, 0, 2, 0, 0, 0, 0, 5};
    mnl_attr_put(m.nlh, NFQA_PACKET_HDR, sizeof(long_header), long_header);
    m.payload(bytes(40));
    QueuedPacket p;
    REQUIRE(parse_queue_message(m.nlh, p) == MessageStatus::Malformed);
    CHECK_FALSE(recover_packet_id(data(m), m.nlh->nlmsg_len, id));
  }
}

}  // namespace
}  // namespace pairwall::io
