#include "daemon/sync/records.h"

#include <algorithm>
#include <cstring>

namespace pairwall::sync {
namespace {

using engine::Family;
using engine::IpAddress;

constexpr uint32_t kMaxExpiresMs = 0x7fffffff;
// About 35 years, longer than any state lives: a larger age is a corrupt or hostile record.
constexpr uint64_t kMaxAgeMs = uint64_t{1} << 40;
// Node ids start at 1 ([node] id), and a ClearStates of creator 0 names every state: a state id of
// creator 0 is no node's, so that neither the peer's ClearStates nor the end of its full transfer
// would ever remove it (pfsync_state_import refuses creator id 0 too).
constexpr bool valid_id(uint32_t creator, uint64_t counter) {
  return creator != 0 && counter != 0;
}
// IP protocol numbers (daemon/engine/packet.h's ipproto, without the engine's code).
constexpr uint8_t kTcp = 6;
constexpr uint8_t kUdp = 17;
constexpr uint8_t kIcmp = 1;
constexpr uint8_t kIcmp6 = 58;

void put_key(const engine::StateKey& k, wire::Key* out) {
  out->set_family(static_cast<uint32_t>(k.family));
  out->set_proto(k.proto);
  encode_address(k.family, k.addr[0], out->mutable_addr0());
  encode_address(k.family, k.addr[1], out->mutable_addr1());
  out->set_port0(k.port[0]);
  out->set_port1(k.port[1]);
}

bool get_key(const wire::Key& in, engine::StateKey& k) {
  if (in.family() == 4) {
    k.family = Family::V4;
  } else if (in.family() == 6) {
    k.family = Family::V6;
  } else {
    return false;
  }
  if (in.proto() > 255 || in.port0() > 65535 || in.port1() > 65535) return false;
  // The packet parser takes ICMP only over IPv4 and ICMPv6 only over IPv6 (packet.cc): no node
  // holds a state of the other pairings, and one would be keyed by another ICMP's types.
  if ((in.proto() == kIcmp && k.family != Family::V4) || (in.proto() == kIcmp6 && k.family != Family::V6)) {
    return false;
  }
  k.proto = static_cast<uint8_t>(in.proto());
  k.port[0] = static_cast<uint16_t>(in.port0());
  k.port[1] = static_cast<uint16_t>(in.port1());
  return decode_address(k.family, in.addr0(), k.addr[0]) && decode_address(k.family, in.addr1(), k.addr[1]);
}

void put_peer(const engine::StateRecord& r, int end, wire::Peer* out) {
  const engine::PeerTracking& p = end == 0 ? r.src : r.dst;
  out->set_seqlo(p.seqlo);
  out->set_seqhi(p.seqhi);
  out->set_max_win(p.max_win);
  out->set_wscale(p.wscale);
  out->set_state(p.state);
  out->set_mss(p.mss);
  out->set_seqdiff(r.seqdiff[end]);
  out->set_proxy_isn(r.proxy_isn[end]);
  out->set_ts_mod(r.scrub[end].ts_mod);
  out->set_scrub_ttl(r.scrub[end].ttl);
}

// The figures put_peer() sends besides the tracking, for both ends.
bool get_peer_extras(const wire::Peer& src, const wire::Peer& dst, engine::StateRecord& out) {
  if (src.scrub_ttl() > 0xff || dst.scrub_ttl() > 0xff) return false;
  out.seqdiff = {src.seqdiff(), dst.seqdiff()};
  out.proxy_isn = {src.proxy_isn(), dst.proxy_isn()};
  out.scrub[0] = {src.ts_mod(), static_cast<uint8_t>(src.scrub_ttl())};
  out.scrub[1] = {dst.ts_mod(), static_cast<uint8_t>(dst.scrub_ttl())};
  return true;
}

bool get_proxy(uint32_t value, engine::Proxy& out) {
  if (value > static_cast<uint32_t>(engine::Proxy::Spliced)) return false;
  out = static_cast<engine::Proxy>(value);
  return true;
}

bool get_peer(const wire::Peer& in, bool tcp, engine::PeerTracking& p) {
  const uint32_t max_state = tcp ? static_cast<uint32_t>(engine::TcpState::TimeWait)
                                 : static_cast<uint32_t>(engine::FlowState::Multiple);
  const uint32_t shift = in.wscale() & engine::PeerTracking::kScaleMask;
  if (in.state() > max_state || in.mss() > 65535 || in.max_win() > 65535 || shift > 14 ||
      (in.wscale() & ~uint32_t{engine::PeerTracking::kScaleOffered | engine::PeerTracking::kScaleMask}) !=
          0) {
    return false;
  }
  p.seqlo = in.seqlo();
  p.seqhi = in.seqhi();
  p.max_win = in.max_win();
  p.wscale = static_cast<uint8_t>(in.wscale());
  p.state = static_cast<uint8_t>(in.state());
  p.mss = static_cast<uint16_t>(in.mss());
  return true;
}

bool get_timeout(uint32_t value, engine::TimeoutClass& out) {
  if (value >= engine::kTimeoutClassCount) return false;
  out = static_cast<engine::TimeoutClass>(value);
  return true;
}

uint32_t expires_ms(engine::Millis m) {
  if (m.count() <= 0) return 0;
  return m.count() > kMaxExpiresMs ? kMaxExpiresMs : static_cast<uint32_t>(m.count());
}

bool timeout_fits(uint8_t proto, engine::TimeoutClass t) {
  using T = engine::TimeoutClass;
  switch (proto) {
    case kTcp:
      return t <= T::TcpClosed;
    case kUdp:
      return t >= T::UdpFirst && t <= T::UdpMultiple;
    case kIcmp:
    case kIcmp6:
      return t == T::IcmpFirst || t == T::IcmpError;
    default:
      return t >= T::OtherFirst && t <= T::OtherMultiple;
  }
}

}  // namespace

void encode_address(Family f, const IpAddress& a, std::string* out) {
  if (f == Family::V4) {
    const uint32_t v = a.v4_value();
    const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                       static_cast<char>(v)};
    out->assign(b, 4);
    return;
  }
  char b[16];
  for (int i = 0; i < 8; ++i) {
    b[i] = static_cast<char>(a.hi >> (56 - 8 * i));
    b[8 + i] = static_cast<char>(a.lo >> (56 - 8 * i));
  }
  out->assign(b, 16);
}

bool decode_address(Family f, const std::string& in, IpAddress& a) {
  const auto* p = reinterpret_cast<const uint8_t*>(in.data());
  if (f == Family::V4) {
    if (in.size() != 4) return false;
    a = IpAddress::v4(uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3]);
    return true;
  }
  if (in.size() != 16) return false;
  a.hi = a.lo = 0;
  for (int i = 0; i < 8; ++i) {
    a.hi = a.hi << 8 | p[i];
    a.lo = a.lo << 8 | p[8 + i];
  }
  return true;
}

bool fits_protocol(uint8_t proto, const engine::StateRecord& r) {
  const uint8_t max_state = proto == kTcp ? static_cast<uint8_t>(engine::TcpState::TimeWait)
                                          : static_cast<uint8_t>(engine::FlowState::Multiple);
  return r.src.state <= max_state && r.dst.state <= max_state && timeout_fits(proto, r.timeout) &&
         (proto == kTcp || r.proxy == engine::Proxy::None);
}

void encode_insert(const engine::StateRecord& r, uint32_t bulk, wire::Insert* out,
                   const engine::InterfaceRegistry* interfaces) {
  out->set_creator(r.id.creator);
  out->set_counter(r.id.counter);
  put_key(r.stack_key, out->mutable_stack_key());
  if (!(r.wire_key == r.stack_key)) put_key(r.wire_key, out->mutable_wire_key());
  put_peer(r, 0, out->mutable_src());
  put_peer(r, 1, out->mutable_dst());
  out->set_timeout(static_cast<uint32_t>(r.timeout));
  out->set_expires_in_ms(expires_ms(r.expires_in));
  out->set_age_ms(
      static_cast<uint64_t>(std::clamp<int64_t>(r.age.count(), 0, static_cast<int64_t>(kMaxAgeMs))));
  out->set_rule(r.rule);
  out->set_flags(r.flags);
  out->set_bulk(bulk);
  out->set_proxy(static_cast<uint32_t>(r.proxy));
  out->set_scrub_tcp(r.scrub_tcp);
  if (r.rules_digest != 0) {
    out->set_rules_digest(r.rules_digest);
    out->set_rule_index(r.rule_index);
    const auto wire_index = [](uint32_t index) {
      return index == engine::StateRecord::kNoTranslation ? 0 : index + 1;
    };
    out->set_translation_in(wire_index(r.translation_index[0]));
    out->set_translation_out(wire_index(r.translation_index[1]));
  }
  if (interfaces != nullptr) {
    if (r.bound[0] != engine::kNoIface) out->set_bound_in(interfaces->name(r.bound[0]));
    if (r.bound[1] != engine::kNoIface) out->set_bound_out(interfaces->name(r.bound[1]));
  }
}

void encode_update(const engine::StateRecord& r, wire::Update* out) {
  out->set_creator(r.id.creator);
  out->set_counter(r.id.counter);
  put_peer(r, 0, out->mutable_src());
  put_peer(r, 1, out->mutable_dst());
  out->set_timeout(static_cast<uint32_t>(r.timeout));
  out->set_expires_in_ms(expires_ms(r.expires_in));
  out->set_proxy(static_cast<uint32_t>(r.proxy));
}

void encode_delete(const engine::StateId& id, wire::Delete* out) {
  out->set_creator(id.creator);
  out->set_counter(id.counter);
}

bool decode_insert(const wire::Insert& in, engine::StateRecord& out, engine::InterfaceRegistry* interfaces) {
  out = engine::StateRecord{};
  out.kind = engine::StateRecord::Kind::Insert;
  out.id = {in.creator(), in.counter()};
  if (!valid_id(in.creator(), in.counter()) || !in.has_stack_key() || !get_key(in.stack_key(), out.stack_key))
    return false;
  if (in.has_wire_key()) {
    if (!get_key(in.wire_key(), out.wire_key) || out.wire_key.family != out.stack_key.family ||
        out.wire_key.proto != out.stack_key.proto) {
      return false;
    }
  } else {
    out.wire_key = out.stack_key;
  }
  const bool tcp = out.stack_key.proto == kTcp;
  if (!get_peer(in.src(), tcp, out.src) || !get_peer(in.dst(), tcp, out.dst) ||
      !get_peer_extras(in.src(), in.dst(), out) || (in.scrub_tcp() && !tcp)) {
    return false;
  }
  out.scrub_tcp = in.scrub_tcp();
  if (!get_timeout(in.timeout(), out.timeout) || in.flags() > 0xff || in.expires_in_ms() > kMaxExpiresMs ||
      in.age_ms() > kMaxAgeMs || !get_proxy(in.proxy(), out.proxy)) {
    return false;
  }
  out.expires_in = engine::Millis{in.expires_in_ms()};
  out.age = engine::Millis{static_cast<int64_t>(in.age_ms())};
  out.rule = in.rule();
  out.flags = static_cast<uint8_t>(in.flags());
  out.rules_digest = in.rules_digest();
  out.rule_index = in.rule_index();
  const auto record_index = [](uint32_t on_wire) {
    return on_wire == 0 ? engine::StateRecord::kNoTranslation : on_wire - 1;
  };
  out.translation_index = {record_index(in.translation_in()), record_index(in.translation_out())};
  if (!fits_protocol(out.stack_key.proto, out)) return false;
  // Last: a record refused takes no name into the registry.
  const std::string* bound[2] = {&in.bound_in(), &in.bound_out()};
  for (int pass = 0; pass < 2; ++pass) {
    if (bound[pass]->empty()) continue;
    if (interfaces == nullptr || !engine::valid_interface_name(*bound[pass])) return false;
    const auto id = interfaces->intern_within(*bound[pass], kMaxInterfaceNames);
    if (!id) return false;
    out.bound[pass] = *id;
  }
  return true;
}

bool decode_update(const wire::Update& in, engine::StateRecord& out) {
  out = engine::StateRecord{};
  out.kind = engine::StateRecord::Kind::Update;
  out.id = {in.creator(), in.counter()};
  if (!valid_id(in.creator(), in.counter())) return false;
  // An update does not say the protocol; TCP's range is the wider one, and the store checks it
  // against the state it names (fits_protocol).
  if (!get_peer(in.src(), true, out.src) || !get_peer(in.dst(), true, out.dst) ||
      !get_peer_extras(in.src(), in.dst(), out)) {
    return false;
  }
  if (!get_timeout(in.timeout(), out.timeout) || in.expires_in_ms() > kMaxExpiresMs ||
      !get_proxy(in.proxy(), out.proxy)) {
    return false;
  }
  out.expires_in = engine::Millis{in.expires_in_ms()};
  return true;
}

bool decode_delete(const wire::Delete& in, engine::StateRecord& out) {
  out = engine::StateRecord{};
  out.kind = engine::StateRecord::Kind::Delete;
  out.id = {in.creator(), in.counter()};
  return valid_id(in.creator(), in.counter());
}

}  // namespace pairwall::sync
