#include "daemon/engine/translate.h"

#include <initializer_list>

#include "daemon/engine/checksum.h"

namespace pairwall::engine {
namespace {

// A checksum field that a rewrite keeps right.
struct Sum {
  uint8_t* at = nullptr;  // nullptr: nothing to keep
  // UDP: a computed 0 is sent as 0xffff (RFC 768), as an IPv6 receiver drops a datagram whose
  // field is 0 (RFC 8200 8.1); a 0 found there (IPv4: "no checksum") stays.
  bool udp = false;
};

void adjust(const Sum& sum, uint16_t old_word, uint16_t new_word) {
  if (sum.at == nullptr) return;
  if (sum.udp && load_be16(sum.at) == 0) return;
  checksum_replace16(sum.at, old_word, new_word);
  if (sum.udp && load_be16(sum.at) == 0) store_be16(sum.at, 0xffff);
}

// Writes the `size` bytes (even) of `value` at `at`, word by word, updating `sums` for each word
// that changes. `odd_offset`: `at` lies an odd number of bytes from the start of what the sums
// cover (a TCP option's field; see as_summed()).
void write(uint8_t* at, const uint8_t* value, std::size_t size, std::initializer_list<Sum> sums,
           bool odd_offset = false) {
  for (std::size_t i = 0; i < size; i += 2) {
    const uint16_t old_word = load_be16(at + i);
    const uint16_t new_word = load_be16(value + i);
    if (old_word == new_word) continue;
    store_be16(at + i, new_word);
    for (const Sum& sum : sums) adjust(sum, as_summed(old_word, odd_offset), as_summed(new_word, odd_offset));
  }
}

void write16(uint8_t* at, uint16_t value, std::initializer_list<Sum> sums) {
  uint8_t bytes[2];
  store_be16(bytes, value);
  write(at, bytes, 2, sums);
}

void write32(uint8_t* at, uint32_t value, std::initializer_list<Sum> sums, bool odd_offset = false) {
  uint8_t bytes[4];
  store_be16(bytes, static_cast<uint16_t>(value >> 16));
  store_be16(bytes + 2, static_cast<uint16_t>(value));
  write(at, bytes, 4, sums, odd_offset);
}

void write_address(uint8_t* ip, Family family, bool destination, const IpAddress& address,
                   std::initializer_list<Sum> sums) {
  uint8_t bytes[16];
  if (family == Family::V4) {
    address.to_v4_bytes(bytes);
    write(ip + (destination ? 16 : 12), bytes, 4, sums);
  } else {
    address.to_v6_bytes(bytes);
    write(ip + (destination ? 24 : 8), bytes, 16, sums);
  }
}

// Where a transport header keeps its checksum, or 0 for protocols without one we maintain.
std::size_t checksum_offset(uint8_t proto) {
  switch (proto) {
    case ipproto::kTcp:
      return 16;
    case ipproto::kUdp:
      return 6;
    case ipproto::kIcmp:
    case ipproto::kIcmp6:
      return 2;
    default:
      return 0;
  }
}

// ICMP (v4) is the one transport here whose checksum leaves out the IP pseudo-header.
bool sums_pseudo_header(uint8_t proto) {
  return proto != ipproto::kIcmp;
}

// The pseudo-header checksum `pseudo` as a write to the destination field keeps it: untouched where
// a routing header has segments left, as the pseudo-header holds the route's end instead.
Sum destination_sum(const PacketView& view, Sum pseudo) {
  return view.route_pending ? Sum{} : pseudo;
}

// The transport checksum of a header at `l4` with `available` bytes of it present.
Sum transport_sum(const PacketView& view, uint8_t* l4, std::size_t available) {
  const std::size_t at = checksum_offset(view.proto);
  if (at == 0 || at + 2 > available) return {};
  return Sum{l4 + at, view.is_udp()};
}

bool has_ports(const PacketView& view) {
  return view.is_tcp() || view.is_udp();
}

bool has_query_id(const PacketView& view) {
  return view.is_icmp() && view.icmp.is_query;
}

// Which of a key's ports holds an ICMP message's identifier: a request's first, a reply's second
// (IcmpKeying in packet.cc).
uint16_t query_id(const PacketView& view, const StateKey& key) {
  return key.port[view.icmp.is_reply ? 1 : 0];
}

}  // namespace

IpAddress graft(const IpPrefix& pool, const IpAddress& address) {
  const IpAddress last = pool.last();
  // Host bits: where the pool's first and last address differ.
  const IpAddress host{pool.address.hi ^ last.hi, pool.address.lo ^ last.lo};
  return IpAddress{pool.address.hi | (address.hi & host.hi), pool.address.lo | (address.lo & host.lo)};
}

void rewrite_packet(std::span<uint8_t> bytes, const PacketView& view, const StateKey& to) noexcept {
  uint8_t* ip = bytes.data();
  uint8_t* l4 = ip + view.l4_offset;
  const Sum header{view.family == Family::V4 ? ip + 10 : nullptr};
  const Sum transport = transport_sum(view, l4, view.l4_length);
  const Sum pseudo = sums_pseudo_header(view.proto) ? transport : Sum{};
  write_address(ip, view.family, false, to.addr[0], {header, pseudo});
  write_address(ip, view.family, true, to.addr[1], {header, destination_sum(view, pseudo)});
  if (has_ports(view)) {
    write16(l4, to.port[0], {transport});
    write16(l4 + 2, to.port[1], {transport});
  } else if (has_query_id(view)) {
    write16(l4 + 4, query_id(view, to), {transport});
  }
}

void modulate_segment(std::span<uint8_t> bytes, const PacketView& view, uint32_t seq_add,
                      uint32_t ack_sub) noexcept {
  uint8_t* tcp = bytes.data() + view.l4_offset;
  const Sum transport{tcp + 16};
  write32(tcp + 4, view.tcp.seq + seq_add, {transport});
  if ((view.tcp.flags & tcpflag::kAck) == 0 || ack_sub == 0) return;
  write32(tcp + 8, view.tcp.ack - ack_sub, {transport});
  // SACK blocks (RFC 2018): left and right edges of what the sender holds of the receiver's data.
  // The parser checked the header length; an option's length is checked here.
  const uint8_t* end = tcp + view.tcp.header_length;
  for (uint8_t* option = tcp + 20; option < end;) {
    if (*option == 0) break;  // end of options
    if (*option == 1) {       // no-operation
      ++option;
      continue;
    }
    if (end - option < 2 || option[1] < 2 || option[1] > end - option) break;
    if (*option == 5) {
      for (uint8_t* edge = option + 2; edge + 4 <= option + option[1]; edge += 4)
        write32(edge, load_be32(edge) - ack_sub, {transport}, ((edge - tcp) & 1) != 0);
    }
    option += option[1];
  }
}

void modulate_timestamps(std::span<uint8_t> bytes, const PacketView& view, uint32_t value_add,
                         uint32_t echo_sub) noexcept {
  uint8_t* tcp = bytes.data() + view.l4_offset;
  uint8_t* value = bytes.data() + view.tcp.ts_offset;
  const Sum transport{tcp + 16};
  const bool odd_offset = ((value - tcp) & 1) != 0;  // options have no alignment
  if (value_add != 0) write32(value, view.tcp.ts_value + value_add, {transport}, odd_offset);
  if (echo_sub != 0) write32(value + 4, view.tcp.ts_echo - echo_sub, {transport}, odd_offset);
}

void demodulate_icmp_quote(std::span<uint8_t> bytes, const PacketView& view, const PacketView& quoted,
                           uint32_t seq_sub) noexcept {
  uint8_t* quote = bytes.data() + view.icmp.quoted_offset;
  const std::size_t quote_size = view.payload_length;  // the IP datagram's, not link padding after it
  // No sequence number quoted: a later fragment, or a quote that ends before it.
  if ((quoted.is_fragment && !quoted.is_first_fragment) || quote_size < std::size_t{quoted.l4_offset} + 8u)
    return;
  uint8_t* quoted_tcp = quote + quoted.l4_offset;
  const Sum error{bytes.data() + view.l4_offset + 2};
  // The quoted segment's own checksum, where the quote holds it, is kept right too; it is bytes
  // of the error as well.
  const Sum quoted_transport = transport_sum(quoted, quoted_tcp, quote_size - quoted.l4_offset);
  const uint16_t transport_before = quoted_transport.at ? load_be16(quoted_transport.at) : 0;
  write32(quoted_tcp + 4, quoted.tcp.seq - seq_sub, {quoted_transport, error});
  if (quoted_transport.at) adjust(error, transport_before, load_be16(quoted_transport.at));
}

void complete_transport_checksum(std::span<uint8_t> bytes, const PacketView& view) noexcept {
  const std::size_t at = checksum_offset(view.proto);
  if (at == 0 || at + 2 > view.l4_length) return;
  uint8_t* l4 = bytes.data() + view.l4_offset;
  const uint32_t pseudo = sums_pseudo_header(view.proto)
                              ? pseudo_header_sum(view.family, bytes.data(), view.proto, view.l4_length,
                                                  view.final_destination_offset)
                              : 0;
  store_be16(l4 + at, 0);
  uint16_t checksum = checksum_fold(checksum_sum(l4, view.l4_length, pseudo));
  if (checksum == 0 && view.is_udp()) checksum = 0xffff;  // RFC 768: 0 would mean "none"
  store_be16(l4 + at, checksum);
}

void partial_transport_checksum(std::span<uint8_t> bytes, const PacketView& view) noexcept {
  const std::size_t at = checksum_offset(view.proto);
  if (at == 0 || at + 2 > view.l4_length || !sums_pseudo_header(view.proto)) return;
  const uint32_t pseudo =
      pseudo_header_sum(view.family, bytes.data(), view.proto, view.l4_length, view.final_destination_offset);
  store_be16(bytes.data() + view.l4_offset + at, static_cast<uint16_t>(~checksum_fold(pseudo)));
}

void rewrite_icmp_error(std::span<uint8_t> bytes, const PacketView& view, const PacketView& quoted,
                        const StateKey& to) noexcept {
  uint8_t* ip = bytes.data();
  uint8_t* quote = ip + view.icmp.quoted_offset;
  const std::size_t quote_size = view.payload_length;  // the IP datagram's, not link padding after it
  uint8_t* quoted_l4 = quote + quoted.l4_offset;
  const std::size_t quoted_l4_size = quote_size > quoted.l4_offset ? quote_size - quoted.l4_offset : 0;

  // The error's own checksum covers the quote (and for ICMPv6 the outer addresses too).
  const Sum error{ip + view.l4_offset + 2};
  const Sum quoted_header{quoted.family == Family::V4 ? quote + 10 : nullptr};
  const Sum quoted_transport = transport_sum(quoted, quoted_l4, quoted_l4_size);
  const Sum quoted_pseudo = sums_pseudo_header(quoted.proto) ? quoted_transport : Sum{};
  // The quote's checksum fields are bytes of the error too: what they change by, the error's
  // checksum changes by.
  const uint16_t header_before = quoted_header.at ? load_be16(quoted_header.at) : 0;
  const uint16_t transport_before = quoted_transport.at ? load_be16(quoted_transport.at) : 0;

  write_address(quote, quoted.family, false, to.addr[0], {quoted_header, quoted_pseudo, error});
  write_address(quote, quoted.family, true, to.addr[1],
                {quoted_header, destination_sum(quoted, quoted_pseudo), error});
  // A quote may end inside its transport header (its ports then read as zero).
  if (has_ports(quoted) && quoted_l4_size >= 4) {
    write16(quoted_l4, to.port[0], {quoted_transport, error});
    write16(quoted_l4 + 2, to.port[1], {quoted_transport, error});
  } else if (has_query_id(quoted) && quoted_l4_size >= 6) {
    write16(quoted_l4 + 4, query_id(quoted, to), {quoted_transport, error});
  }
  if (quoted_header.at) adjust(error, header_before, load_be16(quoted_header.at));
  if (quoted_transport.at) adjust(error, transport_before, load_be16(quoted_transport.at));

  // The error travels back to the quoted packet's sender, whose address changed with the quote.
  // And where the quoted packet's destination changed, the error comes from the address that
  // destination has on this side, as pf_change_icmp makes it: an inside host's (or router's)
  // error about a translated connection leaves from the translated address, not its own.
  const Sum outer_header{view.family == Family::V4 ? ip + 10 : nullptr};
  const Sum outer_pseudo = sums_pseudo_header(view.proto) ? error : Sum{};
  write_address(ip, view.family, true, to.addr[0], {outer_header, destination_sum(view, outer_pseudo)});
  if (quoted.dst != to.addr[1])
    write_address(ip, view.family, false, to.addr[1], {outer_header, outer_pseudo});
}

}  // namespace pairwall::engine
