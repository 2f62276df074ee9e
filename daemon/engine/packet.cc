#include "daemon/engine/packet.h"

#include <algorithm>

#include "daemon/engine/checksum.h"

namespace pairwall::engine {

namespace {

// Every read below is preceded by a length check against the end of the datagram (or of the
// quote), never against the buffer alone: bytes after the IP total length are link padding.

// A whole packet from the queue, or the packet quoted in an ICMP error (truncated by design,
// RFC 792 / RFC 4443 2.4(c): only the IP header and 8 bytes of transport are guaranteed).
enum class Mode : uint8_t { Packet, Quote };

// Real chains have a handful of headers; pf stops at 20. The bound also keeps every offset we
// compute below 40 + 16 * 2048 bytes, well inside the view's 16-bit fields.
constexpr int kMaxIpv6Extensions = 16;
// The same bound for the authentication headers an IPv4 datagram may nest (at most 1024 bytes
// each).
constexpr int kMaxIpv4AuthHeaders = kMaxIpv6Extensions;

namespace ip6 {
constexpr uint8_t kHopByHop = 0;
constexpr uint8_t kRouting = 43;
constexpr uint8_t kFragment = 44;
constexpr uint8_t kDestOpts = 60;
}  // namespace ip6

constexpr uint8_t kIpv4RouterAlert = 148;    // RFC 2113: copied, class 0, number 20
constexpr uint8_t kIpv6RouterAlert = 5;      // RFC 2711
constexpr uint8_t kIpv6JumboPayload = 0xc2;  // RFC 2675 2

// IPv4 options (RFC 791 3.1): EOL ends the list, NOP is one byte, everything else is
// type-length-value with the length covering type and length bytes.
Reason walk_ipv4_options(const uint8_t* p, uint32_t len, PacketView& out) noexcept {
  uint32_t i = 0;
  while (i < len) {
    const uint8_t type = p[i];
    if (type == 0) break;
    if (type == 1) {
      ++i;
      continue;
    }
    if (len - i < 2) return Reason::BadIpHeader;
    const uint8_t olen = p[i + 1];
    if (olen < 2 || olen > len - i) return Reason::BadIpHeader;
    (type == kIpv4RouterAlert ? out.router_alert : out.has_ip_options) = true;
    i += olen;
  }
  return Reason::Match;
}

// Hop-by-hop and destination options (RFC 8200 4.2): Pad1 is one byte, the rest TLV with the
// length excluding type and length. Only padding counts as "no options".
Reason walk_ipv6_options(const uint8_t* p, uint32_t len, PacketView& out) noexcept {
  uint32_t i = 0;
  while (i < len) {
    const uint8_t type = p[i];
    if (type == 0) {
      ++i;
      continue;
    }
    if (len - i < 2) return Reason::BadIpv6Extension;
    const uint32_t olen = 2u + p[i + 1];
    if (olen > len - i) return Reason::BadIpv6Extension;
    // RFC 2675 3: the option stands for a payload length of 0, and one that is not 0 is an error
    // the receiver discards (pf_walk_option6, whatever allow-opts says). A packet whose length
    // is 0 never gets here: its chain runs past the datagram.
    if (type == kIpv6JumboPayload) return Reason::BadIpv6Extension;
    if (type == kIpv6RouterAlert) {
      out.router_alert = true;
    } else if (type != 1) {
      out.has_ip_options = true;
    }
    i += olen;
  }
  return Reason::Match;
}

// Fills the IP layer of `out` and the end of the datagram (`end`, exclusive).
Reason parse_ipv4(const uint8_t* d, uint32_t size, Mode mode, PacketView& out, uint32_t& end) noexcept {
  if (size < 20) return Reason::Short;
  const uint32_t ihl = (d[0] & 0x0fu) * 4u;
  if (ihl < 20) return Reason::BadIpHeader;
  const uint32_t total = load_be16(d + 2);
  if (mode == Mode::Packet) {
    if (total > size) return Reason::Short;
  } else if (ihl > size) {
    return Reason::Short;
  }
  if (total < ihl) return Reason::BadIpHeader;
  end = std::min(total, size);

  if (Reason r = walk_ipv4_options(d + 20, ihl - 20, out); r != Reason::Match) return r;
  // Options of padding alone have no use but to hide something behind the header: pf counts them
  // as options too (pf_walk_header), as it does an IPv6 hop-by-hop header of padding.
  if (ihl > 20 && !out.router_alert) out.has_ip_options = true;

  out.family = Family::V4;
  out.ttl = d[8];
  out.tos = static_cast<uint8_t>(d[1] & 0xfc);
  out.proto = d[9];
  out.src = IpAddress::from_v4_bytes(d + 12);
  out.dst = IpAddress::from_v4_bytes(d + 16);
  const uint16_t frag = load_be16(d + 6);
  const bool more = (frag & 0x2000) != 0;
  out.dont_fragment = (frag & 0x4000) != 0;
  out.fragment_offset = static_cast<uint16_t>((frag & 0x1fff) * 8);
  out.fragment_id = load_be16(d + 4);
  out.is_fragment = more || out.fragment_offset != 0;
  out.is_first_fragment = out.is_fragment && out.fragment_offset == 0;

  if (mode == Mode::Packet && out.is_fragment) {
    // RFC 791: every fragment but the last carries a multiple of 8 bytes, and the reassembled
    // datagram cannot pass 65535 bytes (the ping-of-death overlap).
    const uint32_t data = total - ihl;
    if (more && data % 8 != 0) return Reason::BadOffset;
    if (out.fragment_offset + data > 65535) return Reason::BadOffset;
  }

  // AH (RFC 4302) comes between the IP header and the transport it protects, whose ports the
  // rules and states match: pf_walk_header walks it, as the IPv6 chain's walk does below. A
  // later fragment holds no header. A chain that runs past a first fragment hides the transport
  // in a later one (RFC 7112's concern).
  uint32_t off = ihl;
  if (out.fragment_offset == 0) {
    const Reason past_end = mode == Mode::Packet && out.is_first_fragment ? Reason::BadOffset : Reason::Short;
    for (int count = 0; out.proto == ipproto::kAh; ++count) {
      if (count == kMaxIpv4AuthHeaders) return Reason::BadIpHeader;
      const uint32_t left = end - off;
      if (left < 2) return past_end;
      const uint32_t hlen = (d[off + 1] + 2u) * 4u;  // RFC 4302 2.2: in 4-byte units, minus 2
      if (hlen > left) return past_end;
      out.proto = d[off];
      off += hlen;
    }
  }
  out.l3_header_length = static_cast<uint16_t>(off);
  out.l4_offset = static_cast<uint16_t>(off);
  out.l4_length = static_cast<uint16_t>(end - off);
  return Reason::Match;
}

Reason parse_ipv6(const uint8_t* d, uint32_t size, Mode mode, PacketView& out, uint32_t& end) noexcept {
  if (size < 40) return Reason::Short;
  const uint32_t claimed_end = 40u + load_be16(d + 4);
  if (mode == Mode::Packet && claimed_end > size) return Reason::Short;
  end = std::min(claimed_end, size);
  // A chain that runs past the datagram is malformed; past a quote that was cut short, it is
  // only truncated.
  const Reason past_end =
      (mode == Mode::Quote && claimed_end > size) ? Reason::Short : Reason::BadIpv6Extension;

  out.family = Family::V6;
  out.ttl = d[7];
  out.tos = static_cast<uint8_t>((d[0] << 4 | d[1] >> 4) & 0xfc);
  out.src = IpAddress::from_v6_bytes(d + 8);
  out.dst = IpAddress::from_v6_bytes(d + 24);

  uint8_t next = d[6];
  uint32_t off = 40;
  int routing_headers = 0;
  int dest_opts_headers = 0;
  bool seen_fragment = false;
  bool upper_layer = false;
  for (int count = 0; !upper_layer; ++count) {
    if (count > kMaxIpv6Extensions) return Reason::BadIpv6Extension;
    const uint32_t left = end - off;
    uint32_t hlen = 0;
    switch (next) {
      case ip6::kHopByHop:
      case ip6::kDestOpts: {
        // RFC 8200 4.1: hop-by-hop only right after the IPv6 header; destination options at
        // most twice (before routing and before the upper layer).
        if (next == ip6::kHopByHop && off != 40) return Reason::BadIpv6Extension;
        if (next == ip6::kDestOpts && ++dest_opts_headers > 2) return Reason::BadIpv6Extension;
        if (left < 2) return past_end;
        hlen = (d[off + 1] + 1u) * 8u;
        if (hlen > left) return past_end;
        const bool before = out.has_ip_options || out.router_alert;
        if (Reason r = walk_ipv6_options(d + off + 2, hlen - 2, out); r != Reason::Match) return r;
        // As pf's: a destination options header is an option whatever it holds, and a hop-by-hop
        // header of padding alone is no less fishy.
        if (next == ip6::kDestOpts || (!before && !out.has_ip_options && !out.router_alert))
          out.has_ip_options = true;
        break;
      }
      case ip6::kRouting: {
        if (++routing_headers > 1) return Reason::BadIpv6Extension;
        if (left < 2) return past_end;
        hlen = (d[off + 1] + 1u) * 8u;
        if (hlen > left) return past_end;
        // RFC 5095: type 0 is deprecated; one still in use would send the packet somewhere
        // other than the destination we filter on.
        if (d[off + 2] == 0 && d[off + 3] != 0) return Reason::BadIpv6Extension;
        out.has_ip_options = true;
        out.route_pending = d[off + 3] != 0;
        // Type 2's one address, and segment 0 of type 4's list, are the route's end.
        if (out.route_pending && (d[off + 2] == 2 || d[off + 2] == 4) && hlen >= 24)
          out.final_destination_offset = static_cast<uint16_t>(off + 8);
        break;
      }
      case ip6::kFragment: {
        if (seen_fragment) return Reason::BadIpv6Extension;
        seen_fragment = true;
        hlen = 8;
        if (left < hlen) return past_end;
        const uint16_t field = load_be16(d + off + 2);
        const bool more = (field & 1) != 0;
        out.fragment_offset = static_cast<uint16_t>(field & 0xfff8);
        out.fragment_id = load_be32(d + off + 4);
        // An atomic fragment (offset 0, no more) is a whole packet (RFC 6946).
        out.is_fragment = more || out.fragment_offset != 0;
        out.is_first_fragment = out.is_fragment && out.fragment_offset == 0;
        if (mode == Mode::Packet && out.is_fragment) {
          const uint32_t data = end - (off + hlen);
          if (more && data % 8 != 0) return Reason::BadOffset;
          if (out.fragment_offset + data > 65535) return Reason::BadOffset;
        }
        if (out.fragment_offset != 0) {
          // The rest is fragment data; the next header names the upper layer.
          next = d[off];
          off += hlen;
          upper_layer = true;
          continue;
        }
        break;
      }
      case ipproto::kAh: {
        if (left < 2) return past_end;
        hlen = (d[off + 1] + 2u) * 4u;  // RFC 4302 2.2: in 4-byte units, minus 2
        if (hlen > left) return past_end;
        break;
      }
      default:
        // Upper layer, ESP (opaque) or no-next-header: the chain ends here.
        upper_layer = true;
        continue;
    }
    next = d[off];
    off += hlen;
  }

  out.proto = next;
  out.l3_header_length = static_cast<uint16_t>(off);
  out.l4_offset = static_cast<uint16_t>(off);
  out.l4_length = static_cast<uint16_t>(end - off);
  return Reason::Match;
}

// TCP options (RFC 9293 3.2). Kinds with a known meaning but the wrong length are ignored, as
// end hosts do (Linux tcp_parse_options), so our view of the connection matches theirs.
Reason walk_tcp_options(const uint8_t* p, uint32_t len, uint16_t options_offset, TcpInfo& tcp) noexcept {
  uint32_t i = 0;
  while (i < len) {
    const uint8_t kind = p[i];
    if (kind == 0) break;
    if (kind == 1) {
      ++i;
      continue;
    }
    if (len - i < 2) return Reason::BadTcpOptions;
    const uint8_t olen = p[i + 1];
    if (olen < 2 || olen > len - i) return Reason::BadTcpOptions;
    switch (kind) {
      case 2:
        if (olen == 4) {
          tcp.has_mss = true;
          tcp.mss = load_be16(p + i + 2);
          tcp.mss_offset = static_cast<uint16_t>(options_offset + i + 2);
        }
        break;
      case 3:
        if (olen == 3) {
          tcp.has_window_scale = true;
          // RFC 7323 2.3: a shift above 14 is treated as 14.
          tcp.window_scale = std::min<uint8_t>(p[i + 2], 14);
        }
        break;
      case 4:
        if (olen == 2) tcp.sack_permitted = true;
        break;
      case 8:
        if (olen == 10) {
          tcp.timestamps_repeated = tcp.has_timestamps;
          tcp.has_timestamps = true;
          tcp.ts_value = load_be32(p + i + 2);
          tcp.ts_echo = load_be32(p + i + 6);
          tcp.ts_offset = static_cast<uint16_t>(options_offset + i + 2);
        }
        break;
      default:
        break;
    }
    i += olen;
  }
  return Reason::Match;
}

Reason parse_tcp(const uint8_t* p, Mode mode, Reason too_short, PacketView& out) noexcept {
  TcpInfo& tcp = out.tcp;
  if (mode == Mode::Quote) {
    if (out.l4_length < 8) return Reason::Short;
    out.src_port = load_be16(p);
    out.dst_port = load_be16(p + 2);
    tcp.seq = load_be32(p + 4);
    return Reason::Match;
  }
  if (out.l4_length < 20) return too_short;
  const uint32_t hlen = (p[12] >> 4) * 4u;
  if (hlen < 20) return Reason::BadTcpHeader;
  if (hlen > out.l4_length) return out.is_first_fragment ? Reason::BadOffset : Reason::BadTcpHeader;
  out.src_port = load_be16(p);
  out.dst_port = load_be16(p + 2);
  // Nothing listens on port 0 (pf drops such a segment too), and nothing can answer one from it:
  // its replies would be such segments.
  if (out.dst_port == 0 || out.src_port == 0) return Reason::BadTcpHeader;
  tcp.seq = load_be32(p + 4);
  tcp.ack = load_be32(p + 8);
  tcp.flags = p[13];
  tcp.window = load_be16(p + 14);
  tcp.header_length = static_cast<uint8_t>(hlen);
  const auto options_offset = static_cast<uint16_t>(out.l4_offset + 20);
  if (Reason r = walk_tcp_options(p + 20, hlen - 20, options_offset, tcp); r != Reason::Match) return r;
  out.payload_offset = static_cast<uint16_t>(out.l4_offset + hlen);
  out.payload_length = static_cast<uint16_t>(out.l4_length - hlen);
  return Reason::Match;
}

Reason parse_udp(const uint8_t* p, Mode mode, Reason too_short, PacketView& out) noexcept {
  if (out.l4_length < 8) return mode == Mode::Quote ? Reason::Short : too_short;
  out.src_port = load_be16(p);
  out.dst_port = load_be16(p + 2);
  if (mode == Mode::Quote) return Reason::Match;
  // No socket listens on port 0 (stacks drop a datagram to it, and so does pf): one to it is a
  // probe. One from it (RFC 768's "no reply wanted") could not be answered either, nor translated
  // back: its state's replies would go to port 0. IANA reserves the port.
  if (out.dst_port == 0 || out.src_port == 0) return Reason::BadUdpHeader;
  // RFC 768: the length covers header and data. A first fragment holds only part of the
  // datagram the length describes.
  const uint16_t length = load_be16(p + 4);
  if (length < 8) return Reason::BadUdpHeader;
  if (!out.is_first_fragment && length > out.l4_length) return Reason::BadUdpHeader;
  const uint16_t end = out.is_first_fragment ? out.l4_length : length;
  out.payload_offset = static_cast<uint16_t>(out.l4_offset + 8);
  out.payload_length = static_cast<uint16_t>(end - 8);
  return Reason::Match;
}

// How a message that is not an error is keyed in the state table (pf's pf_icmp_mapping). A request
// and its reply share a virtual type, the request's, and an identifier: the request's key holds
// (identifier, virtual type) as its ports and the reply's (virtual type, identifier), so that a
// reply matches its request's state in reverse and nothing else does: neither a request from the
// other end nor a message of another type. Types without a reply get states of their own, keyed
// by their type, that only match in the direction they were made.
struct IcmpKeying {
  uint8_t virtual_type = 0;
  bool reply = false;
  bool has_id = false;      // bytes 4..5 carry an identifier (NAT may rewrite it)
  uint8_t min_length = 8;   // of the message: timestamp 20 (RFC 792), address mask 12 (RFC 950)
  bool address_id = false;  // no identifier: one made from the address at bytes 8..23 (MLD, ND)
  bool keeps_no_state = false;
};

IcmpKeying icmp4_keying(uint8_t type) noexcept {
  switch (type) {
    case 8:  // echo
      return {8, false, true, 8};
    case 0:
      return {8, true, true, 8};
    case 13:  // timestamp
      return {13, false, true, 20};
    case 14:
      return {13, true, true, 20};
    case 15:  // information
      return {15, false, true, 8};
    case 16:
      return {15, true, true, 8};
    case 17:  // address mask
      return {17, false, true, 12};
    case 18:
      return {17, true, true, 12};
    case 10:  // router solicitation, answered by an advertisement (RFC 1256)
      return {10, false};
    case 9:
      return {10, true};
    case 33:  // IPv6 where-are-you, I-am-here
      return {33, false};
    case 34:
      return {33, true};
    case 35:  // mobile registration
      return {35, false};
    case 36:
      return {35, true};
    default:
      return {type, false};
  }
}

IcmpKeying icmp6_keying(uint8_t type) noexcept {
  switch (type) {
    case 128:  // echo request (RFC 4443 4.1)
      return {128, false, true, 8};
    case 129:
      return {128, true, true, 8};
    case 130:  // MLD query and report, keyed by the multicast address (RFC 2710 3): a report is
    case 131:  // sent unasked too, and to another address than the query's sender, as pf keys them
      return {130, false, false, 24, true};
    case 135:  // neighbor solicitation, keyed by the target (RFC 4861 4.3, 4.4); an advertisement
      return {135, false, false, 24, true};
    case 136:  // answers one, and makes no state: nothing answers an unsolicited one
      return {135, true, false, 24, true, true};
    case 139:  // node information query and reply (RFC 4620)
      return {139, false};
    case 140:
      return {139, true};
    case 200:  // multicast traceroute and its response
      return {200, false};
    case 201:
      return {200, true};
    default:
      return {type, false};
  }
}

// The 16 bits an address at `p` stands for in a key, as pf folds it.
uint16_t address_id(const uint8_t* p) noexcept {
  const uint32_t h = load_be32(p) ^ load_be32(p + 4) ^ load_be32(p + 8) ^ load_be32(p + 12);
  return static_cast<uint16_t>((h >> 16) ^ (h & 0xffff));
}

bool icmp4_error(uint8_t type) noexcept {
  // Unreachable, source quench, redirect, time exceeded, parameter problem.
  return type == 3 || type == 4 || type == 5 || type == 11 || type == 12;
}

// Router solicitation and advertisement, neighbor solicitation and advertisement, redirect
// (RFC 4861 4).
bool is_neighbor_discovery(uint8_t type) noexcept {
  return type >= 133 && type <= 137;
}

bool icmp6_error(uint8_t type) noexcept {
  // Unreachable, packet too big, time exceeded, parameter problem (RFC 4443 2.1).
  return type >= 1 && type <= 4;
}

Reason parse_icmp(const uint8_t* p, Mode mode, Reason too_short, PacketView& out) noexcept {
  if (out.l4_length < 8) {
    if (mode == Mode::Quote) return Reason::Short;
    return out.is_first_fragment ? too_short : Reason::BadIcmp;
  }
  IcmpInfo& icmp = out.icmp;
  icmp.type = p[0];
  icmp.code = p[1];
  const bool v4 = out.family == Family::V4;
  icmp.is_error = v4 ? icmp4_error(icmp.type) : icmp6_error(icmp.type);
  out.payload_offset = static_cast<uint16_t>(out.l4_offset + 8);
  out.payload_length = static_cast<uint16_t>(out.l4_length - 8);

  if (!icmp.is_error) {
    // RFC 4861 6.1.1, 6.1.2, 7.1.1, 7.1.2, 8.1: neighbor discovery never crosses a router, so a
    // receiver drops a message whose hop limit is not 255 as sent from off the link; pf drops it
    // before the rules (pf_setup_pdesc), and it neither passes nor makes a state here.
    if (mode == Mode::Packet && !v4 && is_neighbor_discovery(icmp.type) && out.ttl != 255)
      return Reason::BadIcmp;
    const IcmpKeying k = v4 ? icmp4_keying(icmp.type) : icmp6_keying(icmp.type);
    const bool whole = out.l4_length >= k.min_length;
    if (mode == Mode::Packet && !whole && !out.is_first_fragment) return Reason::BadIcmp;
    icmp.is_query = k.has_id;
    icmp.is_reply = k.reply;
    icmp.keeps_no_state = k.keeps_no_state;
    uint16_t id = 0;
    if (k.has_id) {
      id = icmp.id = load_be16(p + 4);
    } else if (k.address_id && whole) {
      id = address_id(p + 8);
    }
    out.src_port = k.reply ? k.virtual_type : id;
    out.dst_port = k.reply ? id : k.virtual_type;
    return Reason::Match;
  }

  // RFC 1122 3.2.2: no error is sent about an error, so a quote of one is forged.
  if (mode == Mode::Quote) return Reason::BadIcmp;
  icmp.quoted_offset = out.payload_offset;
  PacketView quoted;
  const std::span<const uint8_t> quote(out.data + out.payload_offset, out.payload_length);
  if (parse_quoted_packet(quote, quoted) != Reason::Match) return Reason::BadIcmp;
  if (quoted.family != out.family) return Reason::BadIcmp;
  // Errors are only ever sent about a datagram's first fragment (RFC 792, RFC 4443 2.4): the
  // quote of a later one is forged (pf_test_state_icmp drops it too).
  if (quoted.is_fragment && quoted.fragment_offset != 0) return Reason::BadIcmp;
  return Reason::Match;
}

bool is_mld(const PacketView& p) noexcept {
  if (p.proto != ipproto::kIcmp6 || p.is_fragment) return false;
  const uint8_t type = p.icmp.type;
  return type == 130 || type == 131 || type == 132 || type == 143;
}

// Group management, which asks every router on the path to look (pf lets its router alert by):
// IGMP, and MLD's queries, reports and done messages, which never leave their link.
bool carries_router_alert(const PacketView& p) noexcept {
  if (p.proto == ipproto::kIgmp) return p.family == Family::V4;
  return is_mld(p) && !mld_off_link(p);
}

Reason parse(std::span<const uint8_t> bytes, Mode mode, PacketView& out) noexcept {
  // Copied from a constant: `out = PacketView{}` built a zeroed temporary first (rep stos), and
  // reading it back stalled on the store (pairwall-bench engine --only state --seconds 0.5
  // --runs 3, three alternating invocations: state_lookup_mpps at 1k states 7.09-7.12 ->
  // 7.61-7.67, state_lookup_single_mpps 6.52-6.55 -> 7.31-7.41).
  static constexpr PacketView kEmpty{};
  out = kEmpty;
  out.data = bytes.data();
  out.size = static_cast<uint32_t>(std::min<std::size_t>(bytes.size(), UINT32_MAX));
  if (out.size < 1) return Reason::Short;

  const uint8_t* d = bytes.data();
  uint32_t end = 0;
  const uint8_t version = d[0] >> 4;
  Reason r = Reason::BadIpVersion;
  if (version == 4) {
    r = parse_ipv4(d, out.size, mode, out, end);
  } else if (version == 6) {
    r = parse_ipv6(d, out.size, mode, out, end);
  }
  if (r != Reason::Match) return r;

  if (out.is_fragment && out.fragment_offset != 0) {
    // RFC 1858 3.2: a TCP fragment at offset 8 can only be there to overwrite the flags of
    // the first one.
    if (mode == Mode::Packet && out.proto == ipproto::kTcp && out.fragment_offset == 8)
      return Reason::BadOffset;
    out.payload_offset = out.l4_offset;
    out.payload_length = out.l4_length;
    return Reason::Match;
  }

  // A first fragment too small for its transport header hides the header in a later fragment
  // (RFC 1858 3.1, RFC 7112): that is an offset problem, not a short packet.
  const Reason too_short = out.is_first_fragment ? Reason::BadOffset : Reason::Short;
  const uint8_t* l4 = d + out.l4_offset;
  switch (out.proto) {
    case ipproto::kTcp:
      r = parse_tcp(l4, mode, too_short, out);
      break;
    case ipproto::kUdp:
      r = parse_udp(l4, mode, too_short, out);
      break;
    case ipproto::kIcmp:
    case ipproto::kIcmp6:
      // pf drops ICMPv6 over IPv4 and ICMP over IPv6: neither is a valid pairing.
      if ((out.proto == ipproto::kIcmp) != (out.family == Family::V4)) return Reason::BadIcmp;
      r = parse_icmp(l4, mode, too_short, out);
      break;
    default:
      out.payload_offset = out.l4_offset;
      out.payload_length = out.l4_length;
      break;
  }
  if (out.router_alert && !carries_router_alert(out)) out.has_ip_options = true;
  return r;
}

}  // namespace

bool mld_off_link(const PacketView& p) noexcept {
  const bool link_local = (p.src.hi >> 54) == (0xfe80ull >> 6);
  return is_mld(p) && (p.ttl != 1 || !link_local);
}

Reason parse_packet(std::span<const uint8_t> bytes, PacketView& out) noexcept {
  return parse(bytes, Mode::Packet, out);
}

Reason parse_quoted_packet(std::span<const uint8_t> bytes, PacketView& out) noexcept {
  return parse(bytes, Mode::Quote, out);
}

}  // namespace pairwall::engine
