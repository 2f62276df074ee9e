// A fluent builder for crafted IPv4/IPv6 packets, as NFQUEUE delivers them (starting at the IP
// header). Lengths and checksums are computed unless a test overrides them to build a malformed
// packet; anything the builder cannot express, a test does by mutating the returned bytes.
//
//   auto syn = PacketBuilder().ipv4("10.0.0.1", "10.0.0.2").tcp(40000, 80)
//                  .flags(tcpflag::kSyn).mss(1460).wscale(7).build();
//
// Defaults: TTL/hop limit 64, TCP flags SYN, seq 0x1000, ack 0, window 65535, no options.
// Header-only and independent of the engine's parser, so parser bugs cannot hide in the tests.
#pragma once

#include <arpa/inet.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/engine/packet.h"

namespace pairwall::test {

namespace tcpflag = engine::tcpflag;
namespace ipproto = engine::ipproto;

using Bytes = std::vector<uint8_t>;

// IPv6 extension header types (RFC 8200 4.1).
namespace ip6ext {
inline constexpr uint8_t kHopByHop = 0;
inline constexpr uint8_t kRouting = 43;
inline constexpr uint8_t kFragment = 44;
inline constexpr uint8_t kEsp = 50;
inline constexpr uint8_t kAh = 51;
inline constexpr uint8_t kNoNext = 59;
inline constexpr uint8_t kDestOpts = 60;
}  // namespace ip6ext

// TCP option kinds (RFC 9293 3.2, RFC 7323, RFC 2018).
namespace tcpopt {
inline constexpr uint8_t kEol = 0;
inline constexpr uint8_t kNop = 1;
inline constexpr uint8_t kMss = 2;
inline constexpr uint8_t kWscale = 3;
inline constexpr uint8_t kSackPermitted = 4;
inline constexpr uint8_t kSack = 5;
inline constexpr uint8_t kTimestamps = 8;
}  // namespace tcpopt

// Byte helpers for tests that edit a built packet.
inline void put16(Bytes& b, std::size_t at, uint16_t v) {
  b.at(at) = static_cast<uint8_t>(v >> 8);
  b.at(at + 1) = static_cast<uint8_t>(v);
}
inline void put32(Bytes& b, std::size_t at, uint32_t v) {
  put16(b, at, static_cast<uint16_t>(v >> 16));
  put16(b, at + 2, static_cast<uint16_t>(v));
}
inline uint16_t get16(const Bytes& b, std::size_t at) {
  return static_cast<uint16_t>(b.at(at) << 8 | b.at(at + 1));
}
inline uint32_t get32(const Bytes& b, std::size_t at) {
  return uint32_t{get16(b, at)} << 16 | get16(b, at + 2);
}
inline Bytes truncated(Bytes b, std::size_t n) {
  if (n < b.size()) b.resize(n);
  return b;
}

// RFC 1071 one's-complement sum, folded, not yet inverted.
inline uint32_t checksum_add(uint32_t sum, const uint8_t* p, std::size_t n) {
  for (std::size_t i = 0; i + 1 < n; i += 2) sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
  if (n % 2 != 0) sum += static_cast<uint32_t>(p[n - 1] << 8);
  return sum;
}
inline uint16_t checksum_finish(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}
inline uint16_t internet_checksum(const uint8_t* p, std::size_t n) {
  return checksum_finish(checksum_add(0, p, n));
}

class PacketBuilder {
 public:
  // --- IP layer ---------------------------------------------------------------------------------
  PacketBuilder& ipv4(const std::string& src, const std::string& dst) {
    v6_ = false;
    src_ = parse(AF_INET, src);
    dst_ = parse(AF_INET, dst);
    return *this;
  }
  PacketBuilder& ipv6(const std::string& src, const std::string& dst) {
    v6_ = true;
    src_ = parse(AF_INET6, src);
    dst_ = parse(AF_INET6, dst);
    return *this;
  }
  PacketBuilder& ttl(uint8_t v) {
    ttl_ = v;
    return *this;
  }
  PacketBuilder& tos(uint8_t v) {  // IPv4 TOS or IPv6 traffic class
    tos_ = v;
    return *this;
  }
  PacketBuilder& ip_id(uint16_t v) {
    ip_id_ = v;
    return *this;
  }
  PacketBuilder& df(bool on = true) {
    df_ = on;
    return *this;
  }
  // The IPv4 flags' first bit, reserved and zero (RFC 791 3.1).
  PacketBuilder& reserved_flag(bool on = true) {
    reserved_flag_ = on;
    return *this;
  }
  // IPv4: sets the offset field (offset_bytes / 8), MF and the 16-bit id. IPv6 (call ipv6()
  // first): inserts a fragment header at this point of the extension chain, with the 32-bit id.
  PacketBuilder& fragment(uint16_t offset_bytes, bool more_fragments, uint32_t id) {
    frag_ = Frag{offset_bytes, more_fragments, id};
    if (v6_) exts_.push_back(Ext{ip6ext::kFragment, {}, true});
    return *this;
  }
  // IPv4 options, padded with EOL to a multiple of 4 bytes.
  PacketBuilder& ip_options(Bytes bytes) {
    ip_options_ = std::move(bytes);
    return *this;
  }
  // IPv6 extension headers in chain order. `total_length` is the whole header in bytes: a
  // multiple of 8 (AH: of 4, at least 12); the body is PadN-filled so options parse cleanly.
  PacketBuilder& hop_by_hop(std::size_t total_length = 8) {
    return ext_options(ip6ext::kHopByHop, total_length);
  }
  PacketBuilder& dest_opts(std::size_t total_length = 8) {
    return ext_options(ip6ext::kDestOpts, total_length);
  }
  PacketBuilder& routing(std::size_t total_length = 8) {
    Bytes h(total_length, 0);
    if (total_length >= 2) h[1] = static_cast<uint8_t>(total_length / 8 - 1);
    if (total_length >= 4) h[2] = 253;  // experimental type (RFC 4727); segments left 0: skipped
    exts_.push_back(Ext{ip6ext::kRouting, std::move(h), false});
    return *this;
  }
  PacketBuilder& ah(std::size_t total_length = 24) {
    Bytes h(total_length, 0);
    if (total_length >= 2) h[1] = static_cast<uint8_t>(total_length / 4 - 2);  // RFC 4302 2.2
    exts_.push_back(Ext{ip6ext::kAh, std::move(h), false});
    return *this;
  }
  // An extension header given byte for byte; byte 0 (next header) is filled in by build().
  PacketBuilder& ipv6_ext_raw(uint8_t type, Bytes header) {
    exts_.push_back(Ext{type, std::move(header), false});
    return *this;
  }

  // --- transport layer --------------------------------------------------------------------------
  PacketBuilder& tcp(uint16_t sport, uint16_t dport) {
    l4_ = L4::Tcp;
    proto_ = ipproto::kTcp;
    sport_ = sport;
    dport_ = dport;
    return *this;
  }
  PacketBuilder& flags(unsigned f) {
    tcp_flags_ = static_cast<uint8_t>(f);
    return *this;
  }
  PacketBuilder& seq(uint32_t v) {
    seq_ = v;
    return *this;
  }
  PacketBuilder& ack(uint32_t v) {
    ack_ = v;
    return *this;
  }
  PacketBuilder& window(uint16_t v) {
    window_ = v;
    return *this;
  }
  PacketBuilder& urgent(uint16_t v) {  // the urgent pointer, whether or not URG is set
    urgent_ = v;
    return *this;
  }
  // The low four bits of the data offset's byte: three reserved (RFC 9293 3.1) and AE, the Accurate
  // ECN flag (once RFC 3540's nonce sum).
  PacketBuilder& tcp_reserved(uint8_t bits) {
    tcp_reserved_ = static_cast<uint8_t>(bits & 0x0f);
    return *this;
  }
  // TCP options are laid out in call order and padded with EOL to a multiple of 4.
  PacketBuilder& mss(uint16_t v) {
    tcp_options_.insert(tcp_options_.end(),
                        {tcpopt::kMss, 4, static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)});
    return *this;
  }
  PacketBuilder& wscale(uint8_t shift) {
    tcp_options_.insert(tcp_options_.end(), {tcpopt::kNop, tcpopt::kWscale, 3, shift});
    return *this;
  }
  PacketBuilder& sack_permitted() {
    tcp_options_.insert(tcp_options_.end(), {tcpopt::kNop, tcpopt::kNop, tcpopt::kSackPermitted, 2});
    return *this;
  }
  PacketBuilder& timestamps(uint32_t value, uint32_t echo) {
    tcp_options_.insert(tcp_options_.end(), {tcpopt::kNop, tcpopt::kNop, tcpopt::kTimestamps, 10});
    for (uint32_t w : {value, echo})
      for (int s = 24; s >= 0; s -= 8) tcp_options_.push_back(static_cast<uint8_t>(w >> s));
    return *this;
  }
  // Raw option bytes appended as they are (no validation), for malformed-option tests.
  PacketBuilder& tcp_options_raw(const Bytes& bytes) {
    tcp_options_.insert(tcp_options_.end(), bytes.begin(), bytes.end());
    return *this;
  }

  PacketBuilder& udp(uint16_t sport, uint16_t dport) {
    l4_ = L4::Udp;
    proto_ = ipproto::kUdp;
    sport_ = sport;
    dport_ = dport;
    return *this;
  }
  // ICMP echo, or ICMPv6 echo when the IP layer is IPv6.
  PacketBuilder& icmp_echo(uint16_t id, uint16_t sequence, bool reply = false) {
    uint8_t type = v6_ ? (reply ? 129 : 128) : (reply ? 0 : 8);
    return icmp(type, 0, static_cast<uint32_t>(id) << 16 | sequence);
  }
  // An ICMP/ICMPv6 error quoting `quoted` (typically another build()). `rest` is the second word
  // of the header: the MTU for packet-too-big / frag-needed, the pointer for parameter problem.
  PacketBuilder& icmp_error(uint8_t type, uint8_t code, Bytes quoted, uint32_t rest = 0) {
    icmp(type, code, rest);
    payload_ = std::move(quoted);
    return *this;
  }
  // Any ICMP/ICMPv6 message: type, code and the 4 bytes after the checksum.
  PacketBuilder& icmp(uint8_t type, uint8_t code, uint32_t rest = 0) {
    l4_ = L4::Icmp;
    icmp_type_ = type;
    icmp_code_ = code;
    icmp_rest_ = rest;
    return *this;
  }
  // Transport bytes sent as they are, with no checksum computed.
  PacketBuilder& raw_l4(uint8_t proto, Bytes bytes) {
    l4_ = L4::Raw;
    proto_ = proto;
    payload_ = std::move(bytes);
    return *this;
  }
  PacketBuilder& payload(std::size_t size) {
    payload_.resize(size);
    for (std::size_t i = 0; i < size; ++i) payload_[i] = static_cast<uint8_t>('a' + i % 26);
    return *this;
  }
  PacketBuilder& payload(Bytes bytes) {
    payload_ = std::move(bytes);
    return *this;
  }
  // Bytes after the IP datagram (link-layer padding); not counted in any length field.
  PacketBuilder& trailing(std::size_t n, uint8_t fill = 0) {
    trailing_ = n;
    trailing_fill_ = fill;
    return *this;
  }

  // --- overrides for malformed packets ----------------------------------------------------------
  PacketBuilder& version(uint8_t v) {
    version_ = v;
    return *this;
  }
  PacketBuilder& ihl(uint8_t words) {  // IPv4 header length field
    ihl_ = words;
    return *this;
  }
  PacketBuilder& total_length(uint16_t v) {  // IPv4 total length or IPv6 payload length
    total_length_ = v;
    return *this;
  }
  PacketBuilder& ip_proto(uint8_t v) {  // IPv4 protocol or the last next-header of the chain
    proto_override_ = v;
    return *this;
  }
  PacketBuilder& data_offset(uint8_t words) {  // TCP data offset field
    data_offset_ = words;
    return *this;
  }
  PacketBuilder& udp_length(uint16_t v) {
    udp_length_ = v;
    return *this;
  }
  PacketBuilder& l4_checksum(uint16_t v) {
    l4_checksum_ = v;
    return *this;
  }

  Bytes build() const {
    Bytes l4 = build_l4();
    Bytes out = v6_ ? build_ipv6(l4) : build_ipv4(l4);
    out.insert(out.end(), trailing_, trailing_fill_);
    return out;
  }

 private:
  enum class L4 { None, Tcp, Udp, Icmp, Raw };
  struct Frag {
    uint16_t offset = 0;
    bool more = false;
    uint32_t id = 0;
  };
  struct Ext {
    uint8_t type;
    Bytes header;
    bool is_fragment;
  };

  static Bytes parse(int af, const std::string& text) {
    Bytes b(af == AF_INET ? 4 : 16);
    if (inet_pton(af, text.c_str(), b.data()) != 1)
      throw std::invalid_argument("PacketBuilder: bad address " + text);
    return b;
  }

  PacketBuilder& ext_options(uint8_t type, std::size_t total_length) {
    Bytes h(total_length, 0);
    if (total_length >= 2) h[1] = static_cast<uint8_t>(total_length / 8 - 1);
    // PadN options covering the body (RFC 8200 4.2), a Pad1 (zero byte) for a lone byte.
    std::size_t at = 2;
    while (at + 1 < total_length) {
      std::size_t chunk = std::min<std::size_t>(total_length - at, 257);
      if (total_length - at - chunk == 1) --chunk;
      h[at] = 1;
      h[at + 1] = static_cast<uint8_t>(chunk - 2);
      at += chunk;
    }
    exts_.push_back(Ext{type, std::move(h), false});
    return *this;
  }

  uint8_t final_proto() const {
    if (proto_override_) return *proto_override_;
    if (l4_ == L4::Icmp) return v6_ ? ipproto::kIcmp6 : ipproto::kIcmp;
    return proto_;
  }

  Bytes build_l4() const {
    Bytes h;
    switch (l4_) {
      case L4::None:
      case L4::Raw:
        return payload_;
      case L4::Tcp: {
        Bytes opts = tcp_options_;
        while (opts.size() % 4 != 0) opts.push_back(tcpopt::kEol);
        h.resize(20);
        put16(h, 0, sport_);
        put16(h, 2, dport_);
        put32(h, 4, seq_);
        put32(h, 8, ack_);
        uint8_t words = data_offset_ ? *data_offset_ : static_cast<uint8_t>((20 + opts.size()) / 4);
        h[12] = static_cast<uint8_t>(words << 4 | tcp_reserved_);
        h[13] = tcp_flags_;
        put16(h, 14, window_);
        put16(h, 18, urgent_);
        h.insert(h.end(), opts.begin(), opts.end());
        break;
      }
      case L4::Udp:
        h.resize(8);
        put16(h, 0, sport_);
        put16(h, 2, dport_);
        put16(h, 4, udp_length_ ? *udp_length_ : static_cast<uint16_t>(8 + payload_.size()));
        break;
      case L4::Icmp:
        h.resize(8);
        h[0] = icmp_type_;
        h[1] = icmp_code_;
        put32(h, 4, icmp_rest_);
        break;
    }
    h.insert(h.end(), payload_.begin(), payload_.end());
    return h;
  }

  // Checksum offset inside the transport header, if the builder owns it.
  std::optional<std::size_t> checksum_at() const {
    switch (l4_) {
      case L4::Tcp:
        return 16;
      case L4::Udp:
      case L4::Icmp:
        return l4_ == L4::Udp ? 6 : 2;
      default:
        return std::nullopt;
    }
  }

  void fill_l4_checksum(Bytes& l4) const {
    auto at = checksum_at();
    if (!at || l4.size() < *at + 2) return;
    uint32_t sum = 0;
    uint8_t proto = final_proto();
    bool pseudo = !(l4_ == L4::Icmp && !v6_);  // ICMPv4 has no pseudo-header (RFC 792)
    if (pseudo) {
      sum = checksum_add(sum, src_.data(), src_.size());
      sum = checksum_add(sum, dst_.data(), dst_.size());
      sum += static_cast<uint32_t>(l4.size() >> 16) + static_cast<uint32_t>(l4.size() & 0xffff);
      sum += proto;
    }
    sum = checksum_add(sum, l4.data(), l4.size());
    uint16_t c = checksum_finish(sum);
    if (l4_ == L4::Udp && c == 0) c = 0xffff;  // RFC 768: zero means "no checksum"
    put16(l4, *at, l4_checksum_ ? *l4_checksum_ : c);
  }

  Bytes build_ipv4(Bytes& l4) const {
    fill_l4_checksum(l4);
    Bytes opts = ip_options_;
    while (opts.size() % 4 != 0) opts.push_back(0);
    std::size_t hlen = 20 + opts.size();
    Bytes p(hlen, 0);
    p[0] = static_cast<uint8_t>((version_ ? *version_ : 4) << 4 | (ihl_ ? *ihl_ : hlen / 4));
    p[1] = tos_;
    put16(p, 2, total_length_ ? *total_length_ : static_cast<uint16_t>(hlen + l4.size()));
    uint16_t frag_field = 0;
    uint16_t id = ip_id_;
    if (frag_) {
      id = static_cast<uint16_t>(frag_->id);
      frag_field = static_cast<uint16_t>((frag_->offset / 8) & 0x1fff);
      if (frag_->more) frag_field |= 0x2000;
    }
    if (df_) frag_field |= 0x4000;
    if (reserved_flag_) frag_field |= 0x8000;
    put16(p, 4, id);
    put16(p, 6, frag_field);
    p[8] = ttl_;
    p[9] = final_proto();
    std::copy(src_.begin(), src_.end(), p.begin() + 12);
    std::copy(dst_.begin(), dst_.end(), p.begin() + 16);
    std::copy(opts.begin(), opts.end(), p.begin() + 20);
    put16(p, 10, internet_checksum(p.data(), p.size()));
    p.insert(p.end(), l4.begin(), l4.end());
    return p;
  }

  Bytes build_ipv6(Bytes& l4) const {
    // The upper-layer checksum uses the final destination; we never set routing segments, so that
    // is the header's destination (RFC 8200 8.1).
    fill_l4_checksum(l4);
    Bytes chain;
    uint8_t first_next = exts_.empty() ? final_proto() : exts_.front().type;
    for (std::size_t i = 0; i < exts_.size(); ++i) {
      uint8_t next = i + 1 < exts_.size() ? exts_[i + 1].type : final_proto();
      Bytes h = exts_[i].header;
      if (exts_[i].is_fragment) {
        h.assign(8, 0);
        uint16_t off = frag_ ? static_cast<uint16_t>(frag_->offset & 0xfff8) : 0;
        if (frag_ && frag_->more) off |= 1;
        put16(h, 2, off);
        put32(h, 4, frag_ ? frag_->id : 0);
      }
      if (!h.empty()) h[0] = next;
      chain.insert(chain.end(), h.begin(), h.end());
    }
    Bytes p(40, 0);
    uint8_t v = version_ ? *version_ : 6;
    p[0] = static_cast<uint8_t>(v << 4 | tos_ >> 4);
    p[1] = static_cast<uint8_t>(tos_ << 4);
    put16(p, 4, total_length_ ? *total_length_ : static_cast<uint16_t>(chain.size() + l4.size()));
    p[6] = first_next;
    p[7] = ttl_;
    std::copy(src_.begin(), src_.end(), p.begin() + 8);
    std::copy(dst_.begin(), dst_.end(), p.begin() + 24);
    p.insert(p.end(), chain.begin(), chain.end());
    p.insert(p.end(), l4.begin(), l4.end());
    return p;
  }

  bool v6_ = false;
  Bytes src_ = Bytes(4, 0);
  Bytes dst_ = Bytes(4, 0);
  uint8_t ttl_ = 64;
  uint8_t tos_ = 0;
  uint16_t ip_id_ = 0;
  bool df_ = false;
  bool reserved_flag_ = false;
  std::optional<Frag> frag_;
  Bytes ip_options_;
  std::vector<Ext> exts_;

  L4 l4_ = L4::None;
  uint8_t proto_ = 0;
  uint16_t sport_ = 0;
  uint16_t dport_ = 0;
  uint8_t tcp_flags_ = tcpflag::kSyn;
  uint32_t seq_ = 0x1000;
  uint32_t ack_ = 0;
  uint16_t window_ = 65535;
  uint16_t urgent_ = 0;
  uint8_t tcp_reserved_ = 0;
  Bytes tcp_options_;
  uint8_t icmp_type_ = 0;
  uint8_t icmp_code_ = 0;
  uint32_t icmp_rest_ = 0;
  Bytes payload_;
  std::size_t trailing_ = 0;
  uint8_t trailing_fill_ = 0;

  std::optional<uint8_t> version_;
  std::optional<uint8_t> ihl_;
  std::optional<uint16_t> total_length_;
  std::optional<uint8_t> proto_override_;
  std::optional<uint8_t> data_offset_;
  std::optional<uint16_t> udp_length_;
  std::optional<uint16_t> l4_checksum_;
};

}  // namespace pairwall::test
