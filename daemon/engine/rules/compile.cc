// Rule file -> RuleSet, and the RuleSet's packet-path entry points.
//
// Translation rules are matched per pass, first match wins, like pf's nat/rdr/binat rulesets:
//   - nat applies on the out pass of its interface (the packet leaves through it, source rewritten);
//   - rdr applies on the in pass (the packet arrives on it, destination rewritten);
//   - binat applies to both: on the out pass to packets from its internal prefix, and on the in
//     pass to packets addressed to its external (target) prefix, coming from the rule's `to`.
// Each direction of a binat rule is its own entry in a first-match list. As pf_get_translation
// asks its rulesets, binat comes before nat on the out pass and rdr before binat on the in pass,
// whatever the file's order; rules of one kind keep theirs. The later ruleset is asked when the
// earlier one has no match or matched an exemption (`no binat` exempts from binat, not from nat),
// so the two are separate lists.
#include "daemon/engine/rules/compile.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "daemon/engine/rules/anchors.h"
#include "daemon/engine/rules/classifier.h"
#include "daemon/engine/rules/interface_addresses.h"
#include "daemon/engine/rules/shadowed.h"

namespace pairwall::engine::rules {

namespace {

// Thrown inside the compiler, returned from compile() as a RuleError.
struct CompileFailure {
  RuleError error;
};

[[noreturn]] void fail(const SourceLocation& at, std::string message) {
  throw CompileFailure{RuleError{at, std::move(message)}};
}

// Applies `name seconds` pairs onto `timeouts`; `where` locates each name for errors. `per_rule`:
// a rule's state options, where src.track 0 means the global value, as in pf (whose rule
// timeouts of 0 all do).
template <typename Locate>
void apply_timeouts(const std::map<std::string, uint32_t>& values, Timeouts& timeouts, Locate where,
                    std::string_view context, bool per_rule) {
  for (const auto& [name, seconds] : values) {
    if (name == kSourceTrackTimeoutName) {
      if (seconds != 0 || !per_rule) timeouts.source_track = std::chrono::seconds(seconds);
      continue;
    }
    const auto cls = timeout_class_from_name(name);
    if (!cls) {
      fail(where(name), "unknown timeout '" + name + "' in " + std::string(context) + "; expected one of " +
                            timeout_names());
    }
    if (seconds == 0) {
      fail(where(name), "timeout '" + name + "' must be at least 1 second (0 would expire states at once)");
    }
    timeouts[*cls] = std::chrono::seconds(seconds);
  }
}

std::string family_name(Family f) {
  return f == Family::V4 ? "IPv4" : "IPv6";
}

// --- Canonical text, in the syntax the parser reads.

template <typename T, typename F>
std::string list_text(const std::vector<T>& items, F one) {
  if (items.size() == 1) return one(items[0]);
  std::string out = "{ ";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + one(items[i]);
  return out + " }";
}

std::string element_text(const AddressElement& e) {
  std::string out = e.negated ? "! " : "";
  switch (e.kind) {
    case AddressElement::Kind::Any:
      return out + "any";
    case AddressElement::Kind::Prefix:
      return out + address_text(e.prefix);
    case AddressElement::Kind::Range:
      return out + address_text(e.prefix) + " - " +
             address_text(IpPrefix{e.prefix.family, e.last, e.prefix.length});
    case AddressElement::Kind::Table:
      return out + "<" + e.table + ">";
    case AddressElement::Kind::Interface: {
      const std::string name = e.table + (e.networks ? ":network" : "");
      return out + (e.dynamic ? "(" + name + ")" : name);
    }
  }
  return out;
}

std::string port_text(const PortMatch& m) {
  const std::string lo = std::to_string(m.low);
  const std::string hi = std::to_string(m.high);
  switch (m.op) {
    case PortMatch::Op::Eq:
      return lo;
    case PortMatch::Op::Ne:
      return "!= " + lo;
    case PortMatch::Op::Lt:
      return "< " + lo;
    case PortMatch::Op::Le:
      return "<= " + lo;
    case PortMatch::Op::Gt:
      return "> " + lo;
    case PortMatch::Op::Ge:
      return ">= " + lo;
    case PortMatch::Op::RangeInclusive:
      return lo + ":" + hi;
    case PortMatch::Op::RangeExclusive:
      return lo + " >< " + hi;
    case PortMatch::Op::Outside:
      return lo + " <> " + hi;
  }
  return lo;
}

std::string proto_text(uint8_t p) {
  switch (p) {
    case ipproto::kTcp:
      return "tcp";
    case ipproto::kUdp:
      return "udp";
    case ipproto::kIcmp:
      return "icmp";
    case ipproto::kIcmp6:
      return "icmp6";
    default:
      return std::to_string(p);
  }
}

std::string flags_text(uint8_t bits) {
  static constexpr char kLetters[] = "FSRPAUEW";
  std::string out;
  for (int i = 0; i < 8; ++i) {
    if (bits & (1u << i)) out += kLetters[i];
  }
  return out;
}

// `lan0`, `! lan0`, `{ lan0, dmz0 }`: after `on`, and after `received-on`.
std::string interfaces_text(const std::vector<InterfaceMatch>& interfaces) {
  return list_text(interfaces, [](const InterfaceMatch& i) { return (i.negated ? "! " : "") + i.name; });
}

std::string header_text(const std::vector<InterfaceMatch>& interfaces, const std::optional<Family>& family,
                        const std::vector<uint8_t>& protocols) {
  std::string out;
  if (!interfaces.empty()) out += " on " + interfaces_text(interfaces);
  if (family) out += *family == Family::V4 ? " inet" : " inet6";
  if (!protocols.empty()) out += " proto " + list_text(protocols, proto_text);
  return out;
}

// An endpoint's addresses as written: a list, any, or what the routing tables are asked.
std::string addresses_text(const Endpoint& e) {
  if (e.urpf_failed) return "urpf-failed";
  if (e.route != RouteTest::None) return e.route == RouteTest::NoRoute ? "no-route" : "! no-route";
  return e.addresses.empty() ? "any" : list_text(e.addresses, element_text);
}

std::string endpoints_text(const Endpoint& from, const Endpoint& to) {
  auto one = [](const char* word, const Endpoint& e) {
    std::string out = std::string(" ") + word + " " + addresses_text(e);
    if (!e.ports.empty()) out += " port " + list_text(e.ports, port_text);
    return out;
  };
  const auto open = [](const Endpoint& e) {
    return e.addresses.empty() && e.ports.empty() && !e.urpf_failed && e.route == RouteTest::None;
  };
  if (open(from) && open(to)) return " all";
  return one("from", from) + one("to", to);
}

// pfctl's label macros, by its expand_label(): the rule's interface ("any" without one), source
// and destination address ("any", "! 10.0.0.0/8", "<table>") and port ("80", ">1023", "80:90",
// empty without one), protocol (empty without one) and number (@N). pfctl expands a list into a
// rule each, each labelled for its element; a rule here keeps its list, so a macro of a listed
// field is refused. `$` before other words stays as written, as in pfctl.
std::string expand_label(const FilterRule& r, uint32_t number) {
  std::string label = r.label;
  if (label.find('$') == std::string::npos) return label;
  const auto single = [&](std::string_view macro, std::size_t count, const char* field) {
    if (count > 1) {
      fail(r.label_location, "the label's " + std::string(macro) + " stands for one " + field +
                                 ", and the rule lists " + std::to_string(count) +
                                 ": write a rule for each (pfctl expands them so)");
    }
  };
  const auto replace = [&](std::string_view macro, const std::string& value) {
    for (std::size_t at = label.find(macro); at != std::string::npos;
         at = label.find(macro, at + value.size())) {
      label.replace(at, macro.size(), value);
    }
  };
  const auto address = [](const Endpoint& e) -> std::string {
    return e.addresses.empty() ? addresses_text(e) : element_text(e.addresses[0]);
  };
  const auto port = [](const Endpoint& e) -> std::string {
    if (e.ports.empty()) return "";
    const PortMatch& m = e.ports[0];
    std::string text = port_text(m);
    if (m.op != PortMatch::Op::Eq && m.op != PortMatch::Op::RangeInclusive) std::erase(text, ' ');
    return text;
  };
  const struct {
    std::string_view macro;
    std::size_t count;
    const char* field;
    std::string value;
  } macros[] = {
      {"$if", r.interfaces.size(), "interface", r.interfaces.empty() ? "any" : r.interfaces[0].name},
      {"$srcaddr", r.from.addresses.size(), "source address", address(r.from)},
      {"$dstaddr", r.to.addresses.size(), "destination address", address(r.to)},
      {"$srcport", r.from.ports.size(), "source port", port(r.from)},
      {"$dstport", r.to.ports.size(), "destination port", port(r.to)},
      {"$proto", r.protocols.size(), "protocol", r.protocols.empty() ? "" : proto_text(r.protocols[0])},
      {"$nr", 1, "rule", std::to_string(number)},
  };
  for (const auto& m : macros) {
    if (label.find(m.macro) == std::string::npos) continue;
    single(m.macro, m.count, m.field);
    replace(m.macro, m.value);
  }
  if (label.size() > 63) {
    fail(r.label_location, "the label expands to " + std::to_string(label.size()) +
                               " characters, over pf's 63: \"" + label + "\"");
  }
  return label;
}

// SipHash of a text, its length included (texts that differ only in trailing NULs differ).
uint64_t hash_text(std::string_view text, const SipKey& key) {
  std::vector<uint64_t> words((text.size() + 7) / 8, 0);
  for (std::size_t i = 0; i < text.size(); ++i)
    words[i / 8] |= uint64_t{static_cast<uint8_t>(text[i])} << (8 * (i % 8));
  words.push_back(text.size());
  return siphash13(key, words.data(), words.size());
}

std::string scrub_text(const ScrubRule& r) {
  std::string out = r.negated ? "no scrub" : "scrub";
  if (r.direction != Direction::Any) out += r.direction == Direction::In ? " in" : " out";
  out += header_text(r.interfaces, r.family, r.protocols);
  out += endpoints_text(r.from, r.to);
  if (r.fragment_reassemble) out += " fragment reassemble";
  if (r.reassemble_tcp) out += " reassemble tcp";
  if (r.max_mss != 0) out += " max-mss " + std::to_string(r.max_mss);
  if (r.min_ttl != 0) out += " min-ttl " + std::to_string(r.min_ttl);
  if (r.random_id) out += " random-id";
  if (r.no_df) out += " no-df";
  if (r.set_tos) out += " set-tos " + std::to_string(*r.set_tos);
  return out;
}

std::string translation_text(const TranslationRule& r) {
  static constexpr const char* kKinds[] = {"nat", "rdr", "binat"};
  std::string out = r.negate_translation ? "no " : "";
  out += kKinds[static_cast<int>(r.kind)];
  if (r.pass) out += " pass";
  out += header_text(r.interfaces, r.family, r.protocols);
  out += endpoints_text(r.from, r.to);
  if (!r.tag.empty()) out += " tag " + r.tag;
  if (!r.tagged.empty()) out += std::string(r.tagged_negated ? " !" : "") + " tagged " + r.tagged;
  if (!r.target_table.empty()) {
    out += " -> <" + r.target_table + ">";
  } else if (!r.target_interface.empty()) {
    out += " -> (" + r.target_interface + ")";
  } else if (r.targets.size() == 1) {
    out += " -> " + address_text(r.targets[0]);
  } else if (!r.targets.empty()) {
    out += " -> " + list_text(r.targets, address_text);
  }
  if (r.target_port) out += " port " + port_text(*r.target_port) + (r.target_port_follows ? ":*" : "");
  if (r.pool) {
    out += std::string(" ") + pool_type_name(*r.pool);
    if (r.hash_key_is_text) {
      out += " key \"" + r.hash_key + "\"";
    } else if (!r.hash_key.empty()) {
      out += " " + r.hash_key;
    }
  }
  if (r.static_port) out += " static-port";
  return out;
}

}  // namespace

std::string anchor_terms_text(const Anchor& a) {
  std::string out;
  if (a.direction != Direction::Any) out += a.direction == Direction::In ? " in" : " out";
  if (a.quick) out += " quick";
  out += header_text(a.interfaces, a.family, a.protocols);
  return out.empty() ? "all" : out.substr(1);
}

namespace {

// Whether every protocol a rule names is among `allowed` (a rule naming none is not).
bool only_protocols(const std::vector<uint8_t>& protocols, std::initializer_list<uint8_t> allowed) {
  return !protocols.empty() && std::all_of(protocols.begin(), protocols.end(), [&](uint8_t p) {
    return std::find(allowed.begin(), allowed.end(), p) != allowed.end();
  });
}

// pf's default since OpenBSD 4.1: a pass rule that keeps state and names no flags takes
// `flags S/SA` for its TCP packets, so that a connection's state starts from its SYN. A mid-stream
// packet (an ACK scan, or a connection this node never saw opening) then meets the rules without
// creating a state whose windows it would have guessed.
bool may_be_tcp(const std::vector<uint8_t>& protocols) {
  return protocols.empty() || std::find(protocols.begin(), protocols.end(), ipproto::kTcp) != protocols.end();
}

bool takes_default_flags(const FilterRule& r) {
  return r.action == Action::Pass && r.state.keep_state && !r.flags && !r.flags_any &&
         may_be_tcp(r.protocols);
}

constexpr FlagsMatch kDefaultFlags{tcpflag::kSyn, tcpflag::kSyn | tcpflag::kAck};

// As pfctl prints it, a percentage without trailing zeros (`20%`, `12.5%`, `0.001%`), to ten places
// where pfctl's six would print a chance of a few in 2^32 as 0%.
std::string probability_text(double probability) {
  char text[32];
  std::snprintf(text, sizeof text, "%.10f", probability * 100);
  std::string out = text;
  out.erase(out.find_last_not_of('0') + 1);
  if (out.back() == '.') out.pop_back();
  return out + "%";
}

std::string filter_text(const FilterRule& r) {
  std::string out = r.action == Action::Pass ? "pass" : r.action == Action::Block ? "block" : "match";
  if (r.action == Action::Block) {
    if (r.reply_given && r.reply == BlockReply::Drop) {
      out += " drop";
    } else if (r.reply_rst_for_tcp) {
      out += " return";
    } else if (r.reply == BlockReply::ReturnRst) {
      out += " return-rst";
      if (r.rst_ttl != 0) out += " (ttl " + std::to_string(r.rst_ttl) + ")";
    } else if (r.reply == BlockReply::ReturnIcmp) {
      auto code = [](std::span<const std::string_view> names, int16_t c) {
        return static_cast<std::size_t>(c) < names.size() ? std::string(names[static_cast<std::size_t>(c)])
                                                          : std::to_string(c);
      };
      if (r.icmp_code >= 0) {
        out += " return-icmp(" + code(kIcmpUnreachCodes, r.icmp_code) +
               (r.icmp6_code >= 0 ? ", " + code(kIcmp6UnreachCodes, r.icmp6_code) : "") + ")";
      } else if (r.icmp6_code >= 0) {
        out += " return-icmp6(" + code(kIcmp6UnreachCodes, r.icmp6_code) + ")";
      } else {
        out += " return-icmp";
      }
    }
  }
  if (r.direction != Direction::Any) out += r.direction == Direction::In ? " in" : " out";
  if (r.log == LogMode::First) out += " log";
  if (r.log == LogMode::All) out += " log (all)";
  if (r.quick) out += " quick";
  out += header_text(r.interfaces, r.family, r.protocols);
  out += endpoints_text(r.from, r.to);
  // As pfctl shows them: the default flags where they are a TCP rule's, and `flags any` where it
  // turned them off.
  const std::optional<FlagsMatch> flags =
      r.flags ? r.flags
              : (takes_default_flags(r) && only_protocols(r.protocols, {ipproto::kTcp})
                     ? std::optional(kDefaultFlags)
                     : std::nullopt);
  if (flags) out += " flags " + flags_text(flags->set) + "/" + flags_text(flags->mask);
  if (r.flags_any) out += " flags any";
  if (!r.icmp_types.empty()) {
    out += r.icmp6_types ? " icmp6-type " : " icmp-type ";
    out += list_text(r.icmp_types, [](const IcmpTypeMatch& t) {
      return std::to_string(t.type) + (t.code >= 0 ? " code " + std::to_string(t.code) : "");
    });
  }
  if (r.action == Action::Pass) {
    out += !r.state.keep_state ? " no state"
           : r.state.modulate  ? " modulate state"
           : r.state.synproxy  ? " synproxy state"
                               : " keep state";
    std::vector<std::string> options;
    if (r.state.max_states != 0) options.push_back("max " + std::to_string(r.state.max_states));
    if (r.state.no_sync) options.push_back("no-sync");
    if (r.state.pflow) options.push_back("pflow");
    if (r.state.sloppy) options.push_back("sloppy");
    if (r.state.if_bound) options.push_back(*r.state.if_bound ? "if-bound" : "floating");
    if (r.state.max_src_nodes != 0)
      options.push_back("max-src-nodes " + std::to_string(r.state.max_src_nodes));
    if (r.state.max_src_states != 0)
      options.push_back("max-src-states " + std::to_string(r.state.max_src_states));
    if (r.state.max_src_conn != 0) options.push_back("max-src-conn " + std::to_string(r.state.max_src_conn));
    if (r.state.max_src_conn_rate != 0) {
      options.push_back("max-src-conn-rate " + std::to_string(r.state.max_src_conn_rate) + "/" +
                        std::to_string(r.state.max_src_conn_rate_seconds));
    }
    if (r.state.source_track_global) options.push_back("source-track global");
    if (!r.state.overload_table.empty()) {
      options.push_back("overload <" + r.state.overload_table + ">" +
                        (r.state.overload_flush == OverloadFlush::Global ? " flush global"
                         : r.state.overload_flush == OverloadFlush::Rule ? " flush"
                                                                         : ""));
    }
    for (const auto& [name, seconds] : r.state.timeouts)
      options.push_back(name + " " + std::to_string(seconds));
    if (r.state.keep_state && !options.empty()) {
      out += " (";
      for (std::size_t i = 0; i < options.size(); ++i) out += (i ? ", " : "") + options[i];
      out += ")";
    }
    if (r.allow_opts) out += " allow-opts";
  }
  if (!r.label.empty()) {
    out += " label \"";
    for (const char c : r.label) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  if (!r.tag.empty()) out += " tag " + r.tag;
  if (!r.tagged.empty()) out += std::string(r.tagged_negated ? " !" : "") + " tagged " + r.tagged;
  if (!r.received_on.empty()) out += " received-on " + interfaces_text(r.received_on);
  if (r.tos) out += " tos " + std::to_string(*r.tos);
  if (r.probability < 1) out += " probability " + probability_text(r.probability);
  if (r.once) out += " once";
  if (r.max_pkt_rate != 0)
    out += " max-pkt-rate " + std::to_string(r.max_pkt_rate) + "/" + std::to_string(r.max_pkt_rate_seconds);
  return out;
}

// --- Validation shared by filter, translation and scrub rules.

void check_ports(const SourceLocation& at, const std::vector<uint8_t>& protocols, const Endpoint& from,
                 const Endpoint& to) {
  if ((!from.ports.empty() || !to.ports.empty()) &&
      !only_protocols(protocols, {ipproto::kTcp, ipproto::kUdp})) {
    fail(at, "'port' applies to TCP and UDP only: add 'proto tcp', 'proto udp' or 'proto { tcp, udp }'");
  }
}

// An address or prefix, or a range of them, is of one family; any, a table or an interface of both.
bool has_family(const AddressElement& e) {
  return e.kind == AddressElement::Kind::Prefix || e.kind == AddressElement::Kind::Range;
}

// The fewest prefixes that cover `range` (of `family`'s keys, address_key()), in address order.
std::vector<IpPrefix> range_prefixes(Family family, const KeyRange& range) {
  const unsigned width = family == Family::V4 ? 32 : 128;
  const unsigned shift = 128 - width;
  const auto low_bits = [](unsigned bits) {
    return bits >= 128 ? ~AddressKey{0} : (AddressKey{1} << bits) - 1;
  };
  const AddressKey last = range.last >> shift;
  AddressKey first = range.first >> shift;
  std::vector<IpPrefix> out;
  for (;;) {
    // The widest block that starts at `first` and ends within the range.
    unsigned bits = 0;
    while (bits < width && (first & low_bits(bits + 1)) == 0 && (first | low_bits(bits + 1)) <= last) ++bits;
    IpPrefix p;
    p.family = family;
    p.address = family == Family::V4
                    ? IpAddress::v4(static_cast<uint32_t>(first))
                    : IpAddress{static_cast<uint64_t>(first >> 64), static_cast<uint64_t>(first)};
    p.length = static_cast<uint8_t>(width - bits);
    out.push_back(p);
    const AddressKey end = first | low_bits(bits);
    if (end >= last) return out;
    first = end + 1;
  }
}

// The families an address list can match; a rule whose lists share none can never match.
uint8_t families_of(const std::vector<AddressElement>& addresses) {
  if (addresses.empty()) return 3;
  uint8_t out = 0;
  for (const AddressElement& e : addresses) {
    out |= has_family(e) ? (e.prefix.family == Family::V4 ? 1 : 2) : 3;
  }
  return out;
}

void check_families(const SourceLocation& at, const std::optional<Family>& family, const Endpoint& from,
                    const Endpoint& to) {
  for (const Endpoint* e : {&from, &to}) {
    for (const AddressElement& a : e->addresses) {
      if (family && has_family(a) && a.prefix.family != *family) {
        fail(a.location, "address " + address_text(a.prefix) + " is " + family_name(a.prefix.family) +
                             " but the rule is limited to " + (*family == Family::V4 ? "inet" : "inet6"));
      }
    }
  }
  if ((families_of(from.addresses) & families_of(to.addresses)) == 0) {
    const SourceLocation& where = to.addresses.empty() ? at : to.addresses.front().location;
    fail(where, "the source addresses are all " + family_name(from.addresses.front().prefix.family) +
                    " and the destination addresses all " + family_name(to.addresses.front().prefix.family) +
                    ": the rule can never match");
  }
}

// As pfctl: ICMP names IPv4's protocol and ICMPv6 IPv6's; a rule of the other family never matches it.
void check_icmp_family(const SourceLocation& at, const std::vector<uint8_t>& protocols,
                       const std::optional<Family>& family, const Endpoint& from, const Endpoint& to) {
  const uint8_t families = static_cast<uint8_t>((family ? (*family == Family::V4 ? 1 : 2) : 3) &
                                                families_of(from.addresses) & families_of(to.addresses));
  const auto names = [&](uint8_t p) {
    return std::find(protocols.begin(), protocols.end(), p) != protocols.end();
  };
  if (families == 2 && names(ipproto::kIcmp)) {
    fail(at, "proto icmp is IPv4's and the rule matches IPv6 only: use 'proto icmp6'");
  }
  if (families == 1 && names(ipproto::kIcmp6)) {
    fail(at, "proto icmp6 is IPv6's and the rule matches IPv4 only: use 'proto icmp'");
  }
}

}  // namespace

class Compiler {
 public:
  Compiler(const RuleFile& file, InterfaceRegistry& interfaces, std::vector<RuleError>* notices)
      : file_(file), interfaces_(interfaces), notices_(notices) {}

  std::shared_ptr<const RuleSet> run(const RuleSet* counters_from,
                                     const std::function<bool(std::string_view)>& keeps_counters) {
    auto set = std::make_shared<RuleSet>();
    settings(*set);
    tables(*set, counters_from);
    number_tags();
    filter_rules(*set);
    scrub_rules(*set);
    translation_rules(*set);
    digest(*set);
    if (counters_from != nullptr) keep_counters(*set, *counters_from, keeps_counters);
    return set;
  }

 private:
  // A rule written alike in the same anchor keeps its counters (the first such rule those of the
  // first, and so on), wherever rules were added or removed around it. Scrub and translation rules
  // too, in the main rule set's lists: a table edit recompiles them as well.
  static void keep_counters(RuleSet& set, const RuleSet& from,
                            const std::function<bool(std::string_view)>& keeps_counters) {
    if (!keeps_counters || keeps_counters("")) {
      keep_listed_counters(set.scrub_listing_, from.scrub_listing_, [&](const auto& old, const auto& kept) {
        for (auto& stats : set.scrub_stats_) {
          if (stats == old) stats = kept;
        }
      });
      // A translation rule's entries (an rdr split by its ports, binat's two ways) share its
      // counters, and its round-robin turns: a table pool's edit goes on from the turn it reached
      // instead of sending the next connection to the pool's first address.
      std::map<const RuleStats*, std::shared_ptr<std::atomic<uint64_t>>> turns;
      for (const CompiledTranslation& entry : from.translations_)
        turns.try_emplace(entry.stats.get(), entry.turns);
      keep_listed_counters(set.translation_listing_, from.translation_listing_,
                           [&](const auto& old, const auto& kept) {
                             for (CompiledTranslation& entry : set.translations_) {
                               if (entry.stats != old) continue;
                               entry.stats = kept;
                               if (const auto it = turns.find(kept.get()); it != turns.end())
                                 entry.turns = it->second;
                             }
                           });
    }
    std::map<std::pair<std::string_view, std::string_view>, std::vector<const CompiledRule*>> earlier;
    for (auto it = from.rules_.rbegin(); it != from.rules_.rend(); ++it)
      earlier[{it->anchor, it->text}].push_back(&*it);
    for (CompiledRule& rule : set.rules_) {
      if (keeps_counters && !keeps_counters(rule.anchor)) continue;
      auto found = earlier.find({rule.anchor, rule.text});
      if (found == earlier.end() || found->second.empty()) continue;
      rule.stats = found->second.back()->stats;
      found->second.pop_back();
    }
  }

  // keep_counters() for a list of scrub or translation rules: `share(old, kept)` puts the earlier
  // rule's counters where the new one's were.
  template <typename Share>
  static void keep_listed_counters(std::vector<ListedRule>& listing, const std::vector<ListedRule>& from,
                                   const Share& share) {
    std::map<std::string_view, std::vector<const ListedRule*>> earlier;
    for (auto it = from.rbegin(); it != from.rend(); ++it) earlier[it->text].push_back(&*it);
    for (ListedRule& rule : listing) {
      auto found = earlier.find(rule.text);
      if (found == earlier.end() || found->second.empty()) continue;
      auto kept = std::const_pointer_cast<RuleStats>(found->second.back()->stats);
      found->second.pop_back();
      share(rule.stats, kept);
      rule.stats = kept;
    }
  }

  SourceLocation file_location() const { return SourceLocation{file_.file, 0, 0}; }

  // pfsync's rule set checksum: the nodes of a pair should decide alike, and the sync link tells
  // each whether the other would. Taken over what decides packets, as `rules show` writes it, and
  // the settings; not over what a table holds, which changes at run time (overload) and differs
  // between nodes (an interface's addresses), nor over nat's source ports, which the nodes of an
  // active/active pair are told to split.
  void digest(RuleSet& set) const {
    std::string text;
    const auto line = [&](std::string_view part) {
      text.append(part);
      text.push_back('\n');
    };
    for (const CompiledRule& r : set.rules_) line(r.anchor + " " + r.text);
    for (const AnchorListing& a : set.anchors_) line(a.path + " " + a.text);
    for (TranslationRule r : file_.translation_rules) {
      if (r.kind == TranslationRule::Kind::Nat) r.target_port.reset();
      line(translation_text(r));
    }
    for (const ScrubRule& r : file_.scrub_rules) line(scrub_text(r));
    for (const Millis timeout : set.timeouts_.values) line(std::to_string(timeout.count()));
    line("src.track " + std::to_string(set.timeouts_.source_track.count()));
    line(std::to_string(set.adaptive_timeouts_.start.value_or(0)) + " " +
         std::to_string(set.adaptive_timeouts_.end.value_or(0)));
    line(std::to_string(set.state_limit_) + " " + std::to_string(set.source_node_limit_));
    std::vector<std::string> skipped = file_.settings.skip_interfaces;
    std::sort(skipped.begin(), skipped.end());
    for (const std::string& name : skipped) line("skip " + name);
    // What a plain `block` does, which its rules' text does not say.
    line(file_.settings.block_policy_return ? "block-policy return" : "block-policy drop");
    line(file_.settings.fail_policy_return ? "fail-policy return" : "fail-policy drop");

    set.digest_ = hash_text(text, SipKey{0x72756c6573657400ULL, 0x6469676573740000ULL});
  }

  void settings(RuleSet& set) {
    const Settings& s = file_.settings;
    apply_timeouts(
        s.timeouts, set.timeouts_,
        [&](const std::string& name) {
          auto it = s.timeout_locations.find(name);
          return it != s.timeout_locations.end() ? it->second : file_location();
        },
        "'set timeout'", false);
    if (s.limit_states) {
      if (*s.limit_states == 0)
        fail(file_location(), "'set limit states 0' would refuse every new connection");
      set.state_limit_ = *s.limit_states;
    }
    if (s.limit_src_nodes) set.source_node_limit_ = *s.limit_src_nodes;
    set.fail_policy_return_ = s.fail_policy_return;
    adaptive_timeouts(set);
    for (const std::string& name : s.skip_interfaces) {
      const IfaceId id = interfaces_.intern(name);
      if (id >= set.skipped_.size()) set.skipped_.resize(id + 1, 0);
      set.skipped_[id] = 1;
    }
    set.local_broadcasts_ = file_.local_broadcasts;
  }

  // `overload <t> [flush [global]]`: <t> must be a table that can change, and a connection limit
  // must be there to go over.
  void overload(const StateOptions& state, CompiledRule& c) {
    const std::string& name = state.overload_table;
    const auto table = std::find_if(file_.tables.begin(), file_.tables.end(),
                                    [&](const Table& t) { return t.name == name; });
    if (table == file_.tables.end()) {
      fail(state.overload_location,
           "table <" + name + "> is not defined; define it before use with 'table <" + name + "> persist'");
    }
    if (table->is_const)
      fail(state.overload_location, "table <" + name + "> is const: 'overload' adds addresses to it");
    if (!c.sources.limits_connections()) {
      fail(state.overload_location,
           "'overload' acts when a source goes over 'max-src-conn' or 'max-src-conn-rate': add one");
    }
    c.overload_table = name;
    c.overload_flush = state.overload_flush;
  }

  void adaptive_timeouts(RuleSet& set) {
    const Settings& s = file_.settings;
    auto where = [&](std::string_view name) {
      auto it = s.timeout_locations.find(std::string(name));
      return it != s.timeout_locations.end() ? it->second : file_location();
    };
    const std::string start_name(AdaptiveTimeouts::kStartName);
    const std::string end_name(AdaptiveTimeouts::kEndName);
    if (s.adaptive_start.has_value() != s.adaptive_end.has_value()) {
      const std::string& given = s.adaptive_start ? start_name : end_name;
      const std::string& missing = s.adaptive_start ? end_name : start_name;
      fail(where(given), "'" + given + "' without '" + missing +
                             "': set both (or neither, and they follow the state limit)");
    }
    if (s.adaptive_start && !(*s.adaptive_start == 0 && *s.adaptive_end == 0) &&
        *s.adaptive_start >= *s.adaptive_end) {
      fail(where(end_name), "'" + end_name + " " + std::to_string(*s.adaptive_end) + "' must be above '" +
                                start_name + " " + std::to_string(*s.adaptive_start) +
                                "' (both 0 turn adaptive timeouts off)");
    }
    set.adaptive_timeouts_ = AdaptiveTimeouts{s.adaptive_start, s.adaptive_end};
  }

  // Every table's entries count against one limit, as pf's table-entries pool does: tables grow at
  // run time (overload, `tables add`), and each change recompiles the rule set, whose time and
  // memory grow with them.
  void tables(RuleSet& set, const RuleSet* counters_from) {
    const uint64_t limit = file_.settings.table_entry_limit();
    const uint64_t entries = file_.table_entries();
    if (entries > limit) {
      const Table* largest = &*std::max_element(
          file_.tables.begin(), file_.tables.end(),
          [](const Table& a, const Table& b) { return a.entry_count() < b.entry_count(); });
      fail(largest->location, "the tables hold " + std::to_string(entries) + " entries, over the limit of " +
                                  std::to_string(limit) + ", <" + largest->name + "> " +
                                  std::to_string(largest->entry_count()) +
                                  " of them (raise it with 'set limit table-entries N')");
    }
    for (const Table& t : file_.tables) {
      if (!t.interfaces.empty()) {
        fail(t.interfaces[0].location,
             "the addresses of interface '" + t.interfaces[0].table +
                 "' are known only to rules loaded on a host (resolve_interfaces())");
      }
      auto [it, inserted] = tables_.try_emplace(t.name, &t, AddressTable(t.entries, t.negated_entries));
      if (!inserted) {
        fail(t.location, "table <" + t.name + "> is already defined at line " +
                             std::to_string(it->second.first->location.line));
      }
      if (t.counters) {
        const TableCounters* earlier =
            counters_from != nullptr ? counters_from->table_counters(t.name) : nullptr;
        set.table_counters_.push_back(std::make_unique<TableCounters>(t, earlier));
        counted_tables_[t.name] = set.table_counters_.back().get();
      }
    }
  }

  // The tables with `counters` among a rule's source (destination) addresses.
  void count_tables(const std::vector<AddressElement>& addresses, bool destination, CompiledRule& c) const {
    for (const AddressElement& e : addresses) {
      if (e.kind != AddressElement::Kind::Table) continue;
      if (const auto it = counted_tables_.find(e.table); it != counted_tables_.end())
        c.counted_tables.push_back({it->second, destination});
    }
  }

  std::vector<AddressTerm> addresses(const std::vector<AddressElement>& elements) const {
    std::vector<AddressTerm> out;
    for (const AddressElement& e : elements) {
      AddressTerm t;
      t.kind = e.kind;
      t.negated = e.negated;
      t.prefix = e.prefix;
      t.last = e.last;
      if (e.kind == AddressElement::Kind::Table) {
        auto it = tables_.find(e.table);
        if (it == tables_.end()) {
          fail(e.location, "table <" + e.table + "> is not defined; define it before use with 'table <" +
                               e.table + "> { ... }'");
        }
        t.table = &it->second.second;
      } else if (e.kind == AddressElement::Kind::Interface) {
        // resolve_interfaces() made the table; rules parsed from text alone have none.
        auto it = tables_.find(interface_table_name(e));
        if (it == tables_.end()) {
          fail(e.location, "the addresses of interface '" + e.table +
                               "' are known only to rules loaded on a host (resolve_interfaces())");
        }
        t.kind = AddressElement::Kind::Table;
        t.table = &it->second.second;
      }
      out.push_back(t);
    }
    return out;
  }

  std::vector<InterfaceTerm> interfaces(const std::vector<InterfaceMatch>& names) {
    std::vector<InterfaceTerm> out;
    for (const InterfaceMatch& m : names) out.push_back({interfaces_.intern(m.name), m.negated});
    return out;
  }

  MatchSpec spec(Direction direction, const std::vector<InterfaceMatch>& ifs,
                 const std::optional<Family>& family, const std::vector<uint8_t>& protocols,
                 const Endpoint& from, const Endpoint& to) {
    MatchSpec s;
    s.direction = direction;
    s.interfaces = interfaces(ifs);
    s.family = family;
    s.protocols = protocols;
    s.src = addresses(from.addresses);
    s.src_ports = from.ports;
    s.dst = addresses(to.addresses);
    s.dst_ports = to.ports;
    s.urpf_failed = from.urpf_failed;
    s.src_route = from.route;
    s.dst_route = to.route;
    return s;
  }

  // The rule with `set state-defaults` applied where it writes no state of its own, and `set
  // state-policy if-bound` where it says neither (if-bound) nor (floating), as pfctl gives them to
  // it (and shows them in its text, which the rule set's digest reads).
  FilterRule with_state_defaults(const FilterRule& written) const {
    FilterRule r = written;
    if (r.action == Action::Pass && !r.state_given && file_.settings.state_defaults) {
      r.state = *file_.settings.state_defaults;
      r.state.keep_state = true;
    }
    if (r.action == Action::Pass && r.state.keep_state && !r.state.if_bound && file_.settings.states_if_bound)
      r.state.if_bound = true;
    return r;
  }

  // The rule as its anchors narrow it: each enclosing anchor's direction, interfaces, family and
  // protocols must hold as well as the rule's own. Terms that leave nothing to match are an error.
  FilterRule within_anchors(const FilterRule& written) const {
    FilterRule r = written;
    for (const Anchor* a = find_anchor(file_, r.anchor); a != nullptr; a = find_anchor(file_, a->parent)) {
      const std::string anchor = "anchor \"" + a->path + "\" (" + a->location.file_and_line() + ")";
      if (a->direction != Direction::Any) {
        if (r.direction != Direction::Any && r.direction != a->direction)
          fail(r.location, "the rule can never match: its direction is not that of " + anchor);
        r.direction = a->direction;
      }
      if (a->family) {
        if (r.family && *r.family != *a->family)
          fail(r.location, "the rule can never match: its address family is not that of " + anchor);
        r.family = a->family;
      }
      if (!a->protocols.empty()) {
        if (r.protocols.empty()) {
          r.protocols = a->protocols;
        } else {
          std::erase_if(r.protocols, [&](uint8_t p) {
            return std::find(a->protocols.begin(), a->protocols.end(), p) == a->protocols.end();
          });
          if (r.protocols.empty())
            fail(r.location, "the rule can never match: none of its protocols is one of " + anchor);
        }
      }
      if (!a->interfaces.empty()) r.interfaces = narrowed_interfaces(r, a->interfaces, anchor);
    }
    return r;
  }

  // The interfaces both the rule's `on` and its anchor's accept. A list with a `! IF` combines with
  // a list of plain names (those of its names it matches); two lists with '!' in both are refused.
  std::vector<InterfaceMatch> narrowed_interfaces(const FilterRule& r,
                                                  const std::vector<InterfaceMatch>& outer,
                                                  const std::string& anchor) const {
    if (r.interfaces.empty()) return outer;
    auto negates = [](const std::vector<InterfaceMatch>& l) {
      return std::any_of(l.begin(), l.end(), [](const InterfaceMatch& m) { return m.negated; });
    };
    auto named = [](const std::vector<InterfaceMatch>& l, const std::string& name) {
      return std::any_of(l.begin(), l.end(), [&](const InterfaceMatch& m) { return m.name == name; });
    };
    // Each element on its own, as pf expands a list: `{ a, !b }` matches every interface but b.
    auto matches = [](const std::vector<InterfaceMatch>& l, const std::string& name) {
      return std::any_of(l.begin(), l.end(),
                         [&](const InterfaceMatch& m) { return (m.name == name) != m.negated; });
    };
    std::vector<InterfaceMatch> out;
    if (!negates(r.interfaces) && !negates(outer)) {
      for (const InterfaceMatch& m : r.interfaces) {
        if (named(outer, m.name)) out.push_back(m);
      }
    } else if (!negates(outer)) {
      for (const InterfaceMatch& m : outer) {
        if (matches(r.interfaces, m.name)) out.push_back(m);
      }
    } else if (!negates(r.interfaces)) {
      for (const InterfaceMatch& m : r.interfaces) {
        if (matches(outer, m.name)) out.push_back(m);
      }
    } else {
      fail(r.location, "the rule's 'on' and that of " + anchor +
                           " both have '!': write the interfaces it may match by name");
    }
    if (out.empty()) fail(r.location, "the rule can never match: none of its interfaces is one of " + anchor);
    return out;
  }

  static constexpr std::size_t kMaxTestedTags = 64;

  // The tags that `tagged` tests, filter and translation rules' alike, numbered from 1; a tag none
  // tests is 0, as no tag: it matches alike. Each multiplies a classifier's direction x interface
  // field, hence a bound.
  void number_tags() {
    const auto add = [this](const std::string& tagged, const SourceLocation& at) {
      if (tagged.empty() || tag_numbers_.count(tagged) != 0) return;
      if (tag_numbers_.size() == kMaxTestedTags) {
        fail(at, "'tagged' tests at most " + std::to_string(kMaxTestedTags) +
                     " distinct tags in a rule set: this is one more");
      }
      tag_numbers_.emplace(tagged, static_cast<uint16_t>(tag_numbers_.size() + 1));
    };
    for (const FilterRule& r : file_.filter_rules) add(r.tagged, r.location);
    for (const TranslationRule& r : file_.translation_rules) add(r.tagged, r.location);
  }

  uint16_t tag_number(const std::string& name) const {
    const auto it = tag_numbers_.find(name);
    return it == tag_numbers_.end() ? 0 : it->second;
  }

  void filter_rules(RuleSet& set) {
    std::vector<MatchSpec> specs;
    const std::vector<uint32_t> ranks = decision_ranks(file_);
    const RuleNumbers numbers = rule_numbers(file_);
    std::map<std::string, uint32_t> anchor_numbers;
    for (std::size_t a = 0; a < file_.anchors.size(); ++a) {
      const Anchor& anchor = file_.anchors[a];
      anchor_numbers[anchor.path] = numbers.anchors[a];
      const std::string name = anchor.path.substr(anchor.path.rfind('/') + 1);
      set.anchors_.push_back({anchor.path, anchor.parent, numbers.anchors[a], anchor.position,
                              "anchor \"" + name + "\" " + anchor_terms_text(anchor), anchor.location});
    }
    std::vector<PassReach> reach;  // per rule, for segment_starts()
    for (std::size_t i = 0; i < file_.filter_rules.size(); ++i) {
      const FilterRule written = with_state_defaults(file_.filter_rules[i]);
      const FilterRule r = within_anchors(written);
      reach.push_back({r.direction, r.interfaces});
      check_ports(r.location, r.protocols, r.from, r.to);
      check_families(r.location, r.family, r.from, r.to);
      // As pfctl: flags on a rule that may match TCP test TCP packets alone (`pass in all flags
      // S/SA`, as pfctl -sr prints `pass in all`), and a rule that cannot is an error.
      if (r.flags && !may_be_tcp(r.protocols)) {
        fail(r.location, "'flags' applies to TCP only: add 'proto tcp'");
      }
      if (r.reply == BlockReply::ReturnRst && !only_protocols(r.protocols, {ipproto::kTcp})) {
        fail(r.location,
             "'return-rst' answers TCP only: add 'proto tcp', or write 'return' (a reset for TCP, ICMP for "
             "the "
             "rest)");
      }
      check_icmp_family(r.location, r.protocols, r.family, r.from, r.to);
      if (r.from.urpf_failed && r.direction == Direction::Out) {
        fail(r.location,
             "'urpf-failed' checks the interface a packet arrives on, which an out pass has not: write "
             "'in', or no direction");
      }
      if (!r.icmp_types.empty()) {
        const uint8_t needed = r.icmp6_types ? ipproto::kIcmp6 : ipproto::kIcmp;
        const char* keyword = r.icmp6_types ? "icmp6-type" : "icmp-type";
        if (!only_protocols(r.protocols, {needed})) {
          fail(r.location, std::string("'") + keyword + "' needs 'proto " + proto_text(needed) +
                               "' and no other protocol");
        }
        const Family family = r.icmp6_types ? Family::V6 : Family::V4;
        if (r.family && *r.family != family) {
          fail(r.location, std::string("'") + keyword + "' cannot be used with " +
                               (family == Family::V4 ? "inet6" : "inet") +
                               (family == Family::V4 ? ": use icmp6-type" : ": use icmp-type"));
        }
      }
      CompiledRule c;
      c.number = numbers.rules[i];
      c.anchor = r.anchor;
      if (!r.anchor.empty()) c.anchor_number = anchor_numbers[r.anchor];
      c.action = r.action;
      c.direction = r.direction;
      c.reply = r.reply;
      c.reply_rst_for_tcp = r.reply_rst_for_tcp;
      c.icmp_code = r.icmp_code;
      c.icmp6_code = r.icmp6_code;
      c.rst_ttl = r.rst_ttl;
      if (r.action == Action::Block && !r.reply_given && file_.settings.block_policy_return) {
        c.reply = BlockReply::ReturnIcmp;  // as `block return`
        c.reply_rst_for_tcp = true;
      }
      c.log = r.log != LogMode::None;
      c.log_states = r.log == LogMode::All;
      c.quick = r.quick;
      c.keep_state = r.action == Action::Pass && r.state.keep_state;
      c.max_states = r.state.max_states;
      c.no_sync = r.state.no_sync;
      c.pflow = r.state.pflow;
      c.sloppy = r.state.sloppy;
      c.if_bound = c.keep_state && r.state.if_bound.value_or(false);
      c.modulate = r.state.modulate;
      c.synproxy = r.state.synproxy;
      c.allow_opts = r.allow_opts;
      c.sources.max_src_states = r.state.max_src_states;
      c.sources.max_src_nodes = r.state.max_src_nodes;
      c.sources.max_src_conn = r.state.max_src_conn;
      c.sources.conn_rate_count = r.state.max_src_conn_rate;
      c.sources.conn_rate_seconds = r.state.max_src_conn_rate_seconds;
      c.sources.global = r.state.source_track_global;
      if (!r.state.overload_table.empty()) overload(r.state, c);
      if (r.state.source_track_global && !c.sources.tracks()) {
        fail(r.location,
             "'source-track global' without a limit tracks nothing: add max-src-states, "
             "max-src-conn or max-src-conn-rate");
      }
      c.timeouts = set.timeouts_;
      apply_timeouts(
          r.state.timeouts, c.timeouts, [&](const std::string&) { return r.location; },
          "the rule's state options", true);
      for (const auto& [name, seconds] : r.state.timeouts) {
        if (const auto cls = timeout_class_from_name(name))
          c.own_timeouts |= 1u << static_cast<unsigned>(*cls);
        if (name == kSourceTrackTimeoutName && seconds != 0) c.own_source_track = true;
      }
      c.location = r.location;
      FilterRule shown = written;  // as pfctl shows it: the label's macros expanded
      shown.label = expand_label(written, c.number);
      c.text = filter_text(shown);
      c.label = shown.label;
      c.tag = tag_number(r.tag);
      count_tables(r.from.addresses, false, c);
      count_tables(r.to.addresses, true, c);
      c.chance = static_cast<uint64_t>(std::llround(r.probability * static_cast<double>(kCertain)));
      c.once = r.once;
      c.max_packets = r.max_pkt_rate;
      c.rate_seconds = r.max_pkt_rate_seconds;
      c.conditional = c.chance != kCertain || c.once || c.max_packets != 0;
      set.filter_conditional_ |= c.conditional;
      set.filter_meters_ |= c.once || c.max_packets != 0;
      set.rules_.push_back(std::move(c));

      MatchSpec s = spec(r.direction, r.interfaces, r.family, r.protocols, r.from, r.to);
      s.received_on = interfaces(r.received_on);
      s.tos = r.tos;
      // Written or pf's default, flags on a rule not TCP's alone test its TCP packets only.
      s.flags = takes_default_flags(r) ? std::optional(kDefaultFlags) : r.flags;
      s.flags_tcp_only = s.flags && !only_protocols(r.protocols, {ipproto::kTcp});
      s.icmp_types = r.icmp_types;
      s.icmp6 = r.icmp6_types;
      s.quick = r.quick;
      s.rank = ranks[i];
      s.tagged = tag_number(r.tagged);
      s.tagged_negated = r.tagged_negated;
      if (s.tagged != 0) set.filter_tests_tags_ = true;
      if (s.urpf_failed) set.filter_tests_urpf_ = true;
      if (s.src_route != RouteTest::None) set.filter_tests_no_route_[0] = true;
      if (s.dst_route != RouteTest::None) set.filter_tests_no_route_[1] = true;
      s.decides = r.action != Action::Match;
      specs.push_back(std::move(s));
    }
    evaluation_stops(set);
    if (notices_ != nullptr) shadowed_rule_notices(specs, set.rules_, *notices_);
    const std::vector<uint32_t> starts = segment_starts(reach);
    for (std::size_t k = 0; k < starts.size(); ++k) {
      const uint32_t first = starts[k];
      const auto end = static_cast<uint32_t>(k + 1 < starts.size() ? starts[k + 1] : specs.size());
      set.segments_.push_back(segment(specs, first, end));
    }
  }

  // One segment's classifiers: its rules ranked among themselves as the whole set ranks them (pf's
  // order restricted to a stretch of the file is that stretch's own order), and where some rule
  // tests tags, its rules with a `tag`, the last in file order first.
  RuleSet::Segment segment(const std::vector<MatchSpec>& specs, uint32_t first, uint32_t end) const {
    RuleSet::Segment out;
    out.first = first;
    std::vector<MatchSpec> own(specs.begin() + first, specs.begin() + end);
    std::vector<uint32_t> by_rank(own.size());
    std::iota(by_rank.begin(), by_rank.end(), 0u);
    std::sort(by_rank.begin(), by_rank.end(),
              [&](uint32_t a, uint32_t b) { return own[a].rank < own[b].rank; });
    for (std::size_t k = 0; k < by_rank.size(); ++k) own[by_rank[k]].rank = static_cast<uint32_t>(k);
    out.classifier = build(own, MatchOrder::Ranked);
    if (tag_numbers_.empty()) return out;
    std::vector<MatchSpec> tagging;
    for (uint32_t i = first; i < end; ++i) {
      if (file_.filter_rules[i].tag.empty()) continue;
      out.tag_rules.push_back(i);
      tagging.push_back(own[i - first]);
      tagging.back().decides = true;  // a match rule tags all the same
    }
    if (tagging.empty()) return out;  // the tag a packet carries into it is the one it leaves with
    for (std::size_t k = 0; k < tagging.size(); ++k)
      tagging[k].rank = static_cast<uint32_t>(tagging.size() - 1 - k);
    out.tags = build(tagging, MatchOrder::Ranked);
    return out;
  }

  // Where a filter rule could act: its direction and interfaces, as its anchors narrow them.
  struct PassReach {
    Direction direction = Direction::Any;
    std::vector<InterfaceMatch> interfaces;

    bool may_share_a_pass(const PassReach& other) const {
      if (direction != Direction::Any && other.direction != Direction::Any && direction != other.direction)
        return false;
      const auto named = [](const std::vector<InterfaceMatch>& list) {
        return !list.empty() &&
               std::none_of(list.begin(), list.end(), [](const InterfaceMatch& m) { return m.negated; });
      };
      if (!named(interfaces) || !named(other.interfaces)) return true;
      return std::any_of(interfaces.begin(), interfaces.end(), [&](const InterfaceMatch& m) {
        return std::any_of(other.interfaces.begin(), other.interfaces.end(),
                           [&](const InterfaceMatch& o) { return o.name == m.name; });
      });
    }
  };

  static constexpr std::size_t kMaxSegments = 64;

  // Where the filter rules' segments start (RuleSet::Segment). pf evaluates a pass in file order,
  // and a rule's `tag` changes what the later rules' `tagged` see; one classifier matches its rules
  // with one tag. So a segment ends before a `tagged` that could follow a `tag` of the same
  // segment in the same pass (`match in tag LAN` then `pass in tagged LAN`): the next segment is
  // matched with the tag the packet leaves this one with.
  std::vector<uint32_t> segment_starts(const std::vector<PassReach>& reach) const {
    const auto& rules = file_.filter_rules;
    std::vector<uint32_t> starts = {0};
    std::vector<std::size_t> tagging;  // the current segment's rules with a tag, in file order
    for (std::size_t i = 0; i < rules.size(); ++i) {
      const bool follows_a_tag =
          !rules[i].tagged.empty() && std::any_of(tagging.begin(), tagging.end(), [&](std::size_t t) {
            return reach[t].may_share_a_pass(reach[i]);
          });
      if (follows_a_tag) {
        if (starts.size() == kMaxSegments) {
          fail(rules[i].tagged_location,
               "a 'tagged' after a 'tag' of the same pass begins a new stretch of rules, each matched on "
               "its own; this would be stretch " +
                   std::to_string(kMaxSegments + 1) + ", and the most is " + std::to_string(kMaxSegments) +
                   ": test tags in fewer places, or give the rules directions or interfaces apart");
        }
        starts.push_back(static_cast<uint32_t>(i));
        tagging.clear();
      }
      if (!rules[i].tag.empty()) tagging.push_back(i);
    }
    return starts;
  }

  // CompiledRule::evaluated_until. An anchor's rules, and those of the anchors within it, stand
  // together from its position.
  void evaluation_stops(RuleSet& set) const {
    const auto& rules = file_.filter_rules;
    const auto parent = [](std::string_view path) {
      const auto slash = path.rfind('/');
      return slash == std::string_view::npos ? std::string_view() : path.substr(0, slash);
    };
    std::map<std::string_view, uint32_t> last_rule;  // by anchor path, its own and its anchors' rules
    for (std::size_t i = 0; i < rules.size(); ++i) {
      for (std::string_view a = rules[i].anchor; !a.empty(); a = parent(a))
        last_rule[a] = static_cast<uint32_t>(i);
    }
    for (std::size_t i = 0; i < rules.size(); ++i) {
      CompiledRule& c = set.rules_[i];
      if (rules[i].quick) {
        c.evaluated_until = static_cast<uint32_t>(i);
        continue;
      }
      // The innermost quick anchor holding the rule ends evaluation once it has matched.
      for (std::string_view a = rules[i].anchor; !a.empty(); a = parent(a)) {
        const Anchor* anchor = find_anchor(file_, a);
        if (anchor == nullptr || !anchor->quick) continue;
        c.evaluated_until = last_rule[a];
        break;
      }
    }
  }

  void scrub_rules(RuleSet& set) {
    std::vector<MatchSpec> specs;
    for (const ScrubRule& r : file_.scrub_rules) {
      if (!r.from.ports.empty() || !r.to.ports.empty()) {
        fail(r.location,
             "scrub rules match interfaces, address families, protocols and addresses, not ports: remove "
             "'port'");
      }
      check_families(r.location, r.family, r.from, r.to);
      check_icmp_family(r.location, r.protocols, r.family, r.from, r.to);
      specs.push_back(spec(r.direction, r.interfaces, r.family, r.protocols, r.from, r.to));
    }
    set.scrub_rules_ = file_.scrub_rules;
    for (std::size_t i = 0; i < file_.scrub_rules.size(); ++i) {
      const ScrubRule& r = file_.scrub_rules[i];
      set.scrub_stats_.push_back(std::make_shared<RuleStats>());
      set.scrub_listing_.push_back(
          {static_cast<uint32_t>(i), scrub_text(r), r.location, set.scrub_stats_.back()});
    }
    if (!specs.empty()) set.scrub_classifier_ = build(specs, MatchOrder::First);
  }

  void translation_rules(RuleSet& set) {
    // pf's translation rulesets, in two stages: the out pass's binat and the in pass's rdr, then
    // the out pass's nat and the in pass's binat (a pass never meets the other's entries).
    enum Ruleset { kBinatOut, kRdr, kNat, kBinatIn, kRulesets };
    std::vector<MatchSpec> ruleset_specs[kRulesets];
    std::vector<CompiledTranslation> ruleset_entries[kRulesets];
    const auto add = [&](Ruleset ruleset, MatchSpec s, const CompiledTranslation& t) {
      const TranslationRule& r = file_.translation_rules[t.number];
      s.tagged = tag_number(r.tagged);
      s.tagged_negated = r.tagged_negated;
      if (s.tagged != 0 && (ruleset == kBinatOut || ruleset == kNat)) set.out_translation_tests_tags_ = true;
      ruleset_specs[ruleset].push_back(std::move(s));
      ruleset_entries[ruleset].push_back(t);
    };
    for (std::size_t i = 0; i < file_.translation_rules.size(); ++i) {
      const TranslationRule& r = file_.translation_rules[i];
      check_ports(r.location, r.protocols, r.from, r.to);
      check_families(r.location, r.family, r.from, r.to);
      CompiledTranslation t;
      t.kind = r.kind;
      t.negated = r.negate_translation;
      t.pass = r.pass;
      t.number = static_cast<uint32_t>(i);
      set.translation_listing_.push_back({t.number, translation_text(r), r.location, t.stats});
      // The family of the addresses the rule translates to, which a rule that names none takes.
      std::optional<Family> target_family;
      if (!r.negate_translation && r.targets.empty() && r.target_pending) {
        // `-> (em0)` before em0 has an address: the rule matches, and its packets are dropped.
        // resolve_interfaces() gave the rule the family its address will have.
        pool(r, t);
      } else if (!r.target_table.empty()) {
        target_family = table_pool(r, t);
      } else if (!r.negate_translation) {
        if (r.targets.empty() && !r.target_interface.empty()) {
          // resolve_interfaces() sets it; rules compiled without the host's addresses cannot.
          fail(r.target_location, "the address of interface '" + r.target_interface + "' is not known here");
        }
        if (r.targets.empty()) fail(r.location, "a translation rule needs a target: '-> ADDRESS'");
        t.targets = r.targets;
        const Family family = t.targets[0].family;
        const uint8_t matched = families_of(r.from.addresses) & families_of(r.to.addresses) &
                                (r.family ? (*r.family == Family::V4 ? 1 : 2) : 3);
        const uint8_t target = family == Family::V4 ? 1 : 2;
        if ((matched & target) == 0) {
          fail(r.location, "the translation target " + address_text(t.targets[0]) + " is " +
                               family_name(family) + " but the rule only matches " +
                               family_name(family == Family::V4 ? Family::V6 : Family::V4) + " packets");
        }
        pool(r, t);
        target_family = family;
      }
      t.static_port = r.static_port;
      t.tag = tag_number(r.tag);
      // A rule that names no family takes its target's, as pfctl's natrule does: an IPv4 target
      // never rewrites an IPv6 packet (and an interface target stands for its first address).
      const std::optional<Family> family = r.family ? r.family : target_family;
      // As a filter rule's: ICMP of the other family than the rule's (its target's) never matches.
      check_icmp_family(r.location, r.protocols, family, r.from, r.to);
      if (r.target_port) {
        if (!only_protocols(r.protocols, {ipproto::kTcp, ipproto::kUdp})) {
          fail(r.location, "a translation 'port' needs 'proto tcp' or 'proto udp'");
        }
        if (r.target_port->op != PortMatch::Op::Eq && r.target_port->op != PortMatch::Op::RangeInclusive) {
          fail(r.location, "the translation port must be a port or a range P:Q");
        }
        t.port_low = r.target_port->low;
        t.port_high = r.target_port->op == PortMatch::Op::Eq ? r.target_port->low : r.target_port->high;
        if (r.target_port_follows && r.kind != TranslationRule::Kind::Rdr) {
          fail(r.location,
               "'port " + std::to_string(t.port_low) +
                   ":*' maps an rdr's destination port range: a nat rule takes 'port P' or 'port P:Q'");
        }
      }
      switch (r.kind) {
        case TranslationRule::Kind::Nat:
          add(kNat, spec(Direction::Out, r.interfaces, family, r.protocols, r.from, r.to), t);
          break;
        case TranslationRule::Kind::Rdr:
          rdr_entries(r, t, [&](const Endpoint& to, const CompiledTranslation& entry) {
            add(kRdr, spec(Direction::In, r.interfaces, family, r.protocols, r.from, to), entry);
          });
          break;
        case TranslationRule::Kind::Binat: {
          if (r.from.addresses.size() != 1 || r.from.addresses[0].kind != AddressElement::Kind::Prefix ||
              r.from.addresses[0].negated) {
            fail(r.location, "binat maps one internal address or prefix: write 'from ADDRESS[/LEN]'");
          }
          t.source = r.from.addresses[0].prefix;
          if (!r.negate_translation && t.source.length != t.targets[0].length) {
            fail(r.location, "binat maps " + address_text(t.source) + " onto " + address_text(t.targets[0]) +
                                 ": both sides need the same prefix length");
          }
          add(kBinatOut, spec(Direction::Out, r.interfaces, family, r.protocols, r.from, r.to), t);
          // Inbound: from the rule's destination side to the external address.
          Endpoint external;
          if (!r.negate_translation) {
            AddressElement e;
            e.kind = AddressElement::Kind::Prefix;
            e.prefix = t.targets[0];
            e.location = r.location;
            external.addresses.push_back(e);
          }
          add(kBinatIn, spec(Direction::In, r.interfaces, family, r.protocols, r.to, external), t);
          break;
        }
      }
    }
    for (int stage = 0; stage < 2; ++stage) {
      if (stage == 1) set.second_stage_base_ = static_cast<uint32_t>(set.translations_.size());
      std::vector<MatchSpec> specs;
      for (int ruleset = 2 * stage; ruleset < 2 * stage + 2; ++ruleset) {
        for (MatchSpec& s : ruleset_specs[ruleset]) specs.push_back(std::move(s));
        for (const CompiledTranslation& t : ruleset_entries[ruleset]) set.translations_.push_back(t);
      }
      if (!specs.empty()) set.translation_classifier_[stage] = build(specs, MatchOrder::First);
    }
  }

  // pf's rdr onto a port range P:Q: a destination port goes to P plus its distance from the
  // rule's own port (the first of a range, the operand of `>` and the like), modulo the range's
  // width; onto P:*, the range is as wide as the rule's. pfctl expands a list of ports into a rule
  // each, each with its own first port: so does this, one entry (`add(to, entry)`) per port.
  template <typename Add>
  void rdr_entries(const TranslationRule& r, const CompiledTranslation& t, Add add) const {
    if (r.target_port_follows && r.to.ports.empty()) {
      fail(r.location, "'port " + std::to_string(t.port_low) +
                           ":*' maps an rdr's destination port range P:Q: the rule names none");
    }
    if (r.to.ports.empty() || (!r.target_port_follows && t.port_low == t.port_high)) {
      add(r.to, t);  // every port onto one, or (base 0) port n onto port_low + n modulo the width
      return;
    }
    for (const PortMatch& port : r.to.ports) {
      Endpoint to = r.to;
      to.ports = {port};
      CompiledTranslation entry = t;
      entry.rdr_port_base = port.low;
      if (r.target_port_follows) {
        if (port.op != PortMatch::Op::RangeInclusive) {
          fail(r.location, "'port " + std::to_string(t.port_low) +
                               ":*' maps an rdr's destination port range P:Q, not '" + port_text(port) + "'");
        }
        if (uint32_t{t.port_low} + (port.high - port.low) > UINT16_MAX) {
          fail(r.location, "rdr maps ports " + std::to_string(port.low) + ":" + std::to_string(port.high) +
                               " onto " + std::to_string(t.port_low) + " and up, past port 65535");
        }
        entry.port_high = static_cast<uint16_t>(t.port_low + (port.high - port.low));
      }
      add(to, entry);
    }
  }

  // `-> <name>`: the addresses the table holds (its exceptions left out) of the one family the
  // rule can translate, in address order as pf's table pools walk them: round-robin by default,
  // or random, or source-hash (which both nodes of a pair holding the same table map alike,
  // whatever order its entries were added in). An empty pool loads and drops what the rule
  // matches (TranslationFailed), as pf's does, until the table gains an address. Returns the
  // family.
  Family table_pool(const TranslationRule& r, CompiledTranslation& t) const {
    const auto it = tables_.find(r.target_table);
    if (it == tables_.end()) {
      fail(r.target_location, "table <" + r.target_table +
                                  "> is not defined; define it before use with 'table <" + r.target_table +
                                  "> { ... }'");
    }
    const uint8_t families = families_of(r.from.addresses) & families_of(r.to.addresses) &
                             (r.family ? (*r.family == Family::V4 ? 1 : 2) : 3);
    if (families == 3) {
      fail(r.target_location, "table <" + r.target_table +
                                  "> may hold addresses of either family: limit the rule to one with 'inet' "
                                  "or 'inet6'");
    }
    const Family family = families == 1 ? Family::V4 : Family::V6;
    for (const KeyRange& range : it->second.second.ranges(family)) {
      for (const IpPrefix& p : range_prefixes(family, range)) t.targets.push_back(p);
    }
    t.pool = r.pool.value_or(PoolType::RoundRobin);
    if (t.pool == PoolType::Bitmask) {
      fail(r.target_location,
           "a table pool has no one network to graft onto: round-robin (its default), random or source-hash");
    }
    t.hash_key = source_hash_key(r);
    t.count_turns();
    return family;
  }

  // The pool type a nat or rdr rule gives `t`, and the key of source-hash. A list defaults to
  // round-robin, and as OpenBSD's pfctl takes random and source-hash (which pick among its
  // addresses) but not bitmask; one address or prefix defaults to bitmask.
  void pool(const TranslationRule& r, CompiledTranslation& t) const {
    const bool list = r.targets.size() > 1;
    t.pool = r.pool.value_or(list ? PoolType::RoundRobin : PoolType::Bitmask);
    if (list && t.pool == PoolType::Bitmask) {
      fail(r.target_location,
           "a list of translation addresses has no one network to graft onto: round-robin (its default), "
           "random or source-hash");
    }
    t.hash_key = source_hash_key(r);
    t.count_turns();
  }

  // A key both nodes of a pair derive alike, so that a source maps to the same address on either:
  // the one written (as 0x and hex digits, or text hashed down to 128 bits), else a built-in one.
  static SipKey source_hash_key(const TranslationRule& r) {
    constexpr SipKey kBuiltIn{0x7061697277616c6cULL, 0x736f757263652d68ULL};  // "pairwall", "source-h"
    if (r.hash_key.empty()) return kBuiltIn;
    if (!r.hash_key_is_text) {
      const auto word = [&](std::size_t at) {
        uint64_t v = 0;
        std::from_chars(r.hash_key.data() + at, r.hash_key.data() + at + 16, v, 16);
        return v;
      };
      return {word(2), word(18)};
    }
    return {hash_text(r.hash_key, kBuiltIn), hash_text(r.hash_key, {kBuiltIn.k1, kBuiltIn.k0})};
  }

  std::unique_ptr<Classifier> build(const std::vector<MatchSpec>& specs, MatchOrder order) const {
    try {
      return std::make_unique<Classifier>(specs, order);
    } catch (const std::length_error& e) {
      fail(file_location(), e.what());
    } catch (const std::invalid_argument& e) {  // a rule of an anchor the file does not declare
      fail(file_location(), e.what());
    }
  }

  const RuleFile& file_;
  InterfaceRegistry& interfaces_;
  std::vector<RuleError>* notices_;  // where given: rules that never decide (shadowed.h)
  std::map<std::string, std::pair<const Table*, AddressTable>> tables_;
  std::map<std::string, const TableCounters*> counted_tables_;
  std::map<std::string, uint16_t> tag_numbers_;  // number_tags()
};

std::variant<std::shared_ptr<const RuleSet>, RuleError> compile(
    const RuleFile& file, InterfaceRegistry& interfaces, const RuleSet* counters_from,
    const std::function<bool(std::string_view anchor)>& keeps_counters, std::vector<RuleError>* notices) {
  try {
    return Compiler(file, interfaces, notices).run(counters_from, keeps_counters);
  } catch (const CompileFailure& f) {
    return f.error;
  }
}

std::variant<RuleFile, RuleError> read_rules_file(const std::string& path,
                                                  const InterfaceAddresses& addresses,
                                                  std::vector<RuleError>* notices) {
  auto parsed = parse_rules_file(path);
  if (auto* error = std::get_if<RuleError>(&parsed)) return std::move(*error);
  RuleFile& file = std::get<RuleFile>(parsed);
  if (auto error = resolve_interfaces(file, addresses, notices)) return std::move(*error);
  if (notices != nullptr) tag_notices(file, *notices);
  return parsed;
}

std::variant<std::shared_ptr<const RuleSet>, RuleError> load_rules_file(const std::string& path,
                                                                        InterfaceRegistry& interfaces,
                                                                        const InterfaceAddresses& addresses,
                                                                        std::vector<RuleError>* notices) {
  auto read = read_rules_file(path, addresses, notices);
  if (auto* error = std::get_if<RuleError>(&read)) return std::move(*error);
  return compile(std::get<RuleFile>(read), interfaces, nullptr, {}, notices);
}

void tag_notices(const RuleFile& file, std::vector<RuleError>& notices) {
  std::set<std::string_view> tagged_by_some;
  for (const FilterRule& r : file.filter_rules) tagged_by_some.insert(r.tag);
  for (const TranslationRule& r : file.translation_rules) tagged_by_some.insert(r.tag);
  const auto check = [&](const std::string& tagged, bool negated, const SourceLocation& at) {
    if (tagged.empty() || tagged_by_some.count(tagged) != 0) return;
    notices.push_back(RuleError{at, "warning: no rule tags '" + tagged + "': '" + (negated ? "! " : "") +
                                        "tagged " + tagged + "' " +
                                        (negated ? "matches every packet" : "never matches")});
  };
  for (const FilterRule& r : file.filter_rules) check(r.tagged, r.tagged_negated, r.tagged_location);
  for (const TranslationRule& r : file.translation_rules)
    check(r.tagged, r.tagged_negated, r.tagged_location);
}

// --- RuleSet

RuleSet::RuleSet() = default;
RuleSet::~RuleSet() = default;

std::size_t RuleSet::zero_counters(std::string_view anchor) const noexcept {
  const auto zero = [](RuleStats& stats) {
    stats.evaluations.store(0, std::memory_order_relaxed);
    stats.packets.store(0, std::memory_order_relaxed);
    stats.bytes.store(0, std::memory_order_relaxed);
  };
  std::size_t zeroed = 0;
  for (const CompiledRule& rule : rules_) {
    if (!in_anchor(rule.anchor, anchor)) continue;
    zero(*rule.stats);
    ++zeroed;
  }
  if (!anchor.empty()) return zeroed;
  // A translation rule's entries (binat's two ways, an rdr split by its ports) share its counters.
  for (const CompiledTranslation& entry : translations_) zero(*entry.stats);
  for (const std::shared_ptr<RuleStats>& stats : scrub_stats_) zero(*stats);
  return zeroed + translation_listing_.size() + scrub_listing_.size();
}

uint32_t RuleSet::evaluate(const MatchQuery& query, DecisionContext* context) const noexcept {
  if (segments_.size() == 1) {
    const uint32_t found = segments_[0].classifier->match(query);
    return filter_conditional_ ? admitted(segments_[0], query, found, context) : found;
  }
  return pass(query, context).deciding;
}

// pf tests a rule's conditions as its evaluation reaches the rule; the rules before the one that
// decides in the order of decision never matter, so only the candidates that would decide draw,
// count or are spent. (pf also counts a non-quick rule's rate, and spends its `once`, where a
// later rule overrides it; here only what a rule decides counts.)
uint32_t RuleSet::admitted(const Segment& segment, const MatchQuery& query, uint32_t found,
                           DecisionContext* context) const noexcept {
  while (found != Classifier::kNoMatch && context != nullptr) {
    const CompiledRule& rule = rules_[segment.first + found];
    if (!rule.conditional || admits(rule, *context)) break;
    found = segment.classifier->match_after(query, found);
  }
  return found;
}

void RuleSet::admitted_batch(const Segment& segment, std::span<const MatchQuery> queries, uint32_t* found,
                             DecisionContext* context) const noexcept {
  if (!filter_conditional_) return;
  for (std::size_t i = 0; i < queries.size(); ++i)
    found[i] = admitted(segment, queries[i], found[i], context);
}

bool packet_rate_over(RuleStats& stats, uint32_t limit, uint32_t seconds, Millis now) noexcept {
  // The time in 16 ms steps: 32 bits of them span two years, so that a rule idle for weeks still
  // finds its count decayed. A worker whose clock reads a little behind another's decays nothing.
  const auto at = static_cast<uint32_t>(static_cast<uint64_t>(now.count()) >> 4);
  const uint64_t period = uint64_t{seconds} * 1000;
  uint64_t seen = stats.packet_rate.load(std::memory_order_relaxed);
  uint64_t raised = 0;
  uint32_t last = 0;
  do {
    uint64_t count = seen >> 32;
    last = static_cast<uint32_t>(seen);
    const auto ahead = static_cast<int32_t>(at - last);
    if (count == 0 || ahead > 0) {  // a count of 0 has no time to decay from
      const uint64_t elapsed = count == 0 ? 0 : uint64_t{static_cast<uint32_t>(ahead)} << 4;
      count = elapsed >= period ? 0 : count - count * elapsed / period;
      last = at;
    }
    raised = std::min<uint64_t>(count + kRateUnit, UINT32_MAX);
  } while (!stats.packet_rate.compare_exchange_weak(seen, raised << 32 | last, std::memory_order_relaxed));
  return raised > uint64_t{limit} * kRateUnit;
}

bool RuleSet::admits(const CompiledRule& rule, DecisionContext& context) noexcept {
  if (rule.chance != kCertain && context.draws != nullptr && (next_draw(*context.draws) >> 32) >= rule.chance)
    return false;
  if (rule.max_packets != 0 &&
      packet_rate_over(*rule.stats, rule.max_packets, rule.rate_seconds, context.now))
    return false;
  // Read first: once spent, the packets that pass over it leave its line shared among the workers.
  if (rule.once && (rule.stats->spent.load(std::memory_order_relaxed) ||
                    rule.stats->spent.exchange(true, std::memory_order_relaxed)))
    return false;
  return true;
}

RuleSet::InPass RuleSet::pass(const MatchQuery& query, DecisionContext* context) const noexcept {
  InPass out;
  const bool tag_wanted = true;
  pass_batch({&query, 1}, {&out, 1}, &tag_wanted, context);
  return out;
}

std::array<uint32_t, 2> RuleSet::evaluate_passes(const MatchQuery* in, const MatchQuery* out,
                                                 uint32_t in_decided,
                                                 DecisionContext* context) const noexcept {
  std::array<uint32_t, 2> deciding = {kNoRule, kNoRule};
  uint16_t tag = 0;
  if (in != nullptr) {
    if (in_decided != kUndecided) {
      deciding[0] = in_decided;
    } else if (out != nullptr && out->tag == 0) {
      // The tag only matters to an out pass that does not carry its translation's; where the in
      // pass was matched before, out->tag is what it left.
      const InPass passed = evaluate_in(*in, context);
      deciding[0] = passed.deciding;
      tag = passed.tag;
    } else {
      deciding[0] = evaluate(*in, context);
    }
  }
  if (out != nullptr && reaches_out(deciding[0])) {
    MatchQuery carrying = *out;
    if (carrying.tag == 0) carrying.tag = tag;
    deciding[1] = evaluate(carrying, context);
  }
  return deciding;
}

void RuleSet::evaluate_passes_batch(std::span<const std::array<const MatchQuery*, 2>> packets,
                                    std::span<std::array<uint32_t, 2>> decided,
                                    DecisionContext* context) const noexcept {
  static constexpr std::size_t kChunk = Classifier::kBatch;
  for (std::size_t first = 0; first < packets.size(); first += kChunk) {
    const std::size_t n = std::min(kChunk, packets.size() - first);
    MatchQuery queries[kChunk];
    InPass results[kChunk];
    uint8_t packet_of[kChunk];
    bool out_needs_tag[kChunk];  // by query of the in passes
    uint16_t left[kChunk];       // by packet: the tag its in pass left
    for (int pass = 0; pass < 2; ++pass) {
      std::size_t count = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::array<const MatchQuery*, 2>& p = packets[first + i];
        decided[first + i][pass] = kNoRule;
        if (p[pass] == nullptr || (pass == 1 && !reaches_out(decided[first + i][0]))) continue;
        queries[count] = *p[pass];
        // The tag only matters to an out pass that does not carry its translation's.
        const bool out_tag_left = p[1] != nullptr && p[1]->tag == 0;
        if (pass == 0) out_needs_tag[count] = out_tag_left;
        if (pass == 1 && out_tag_left && p[0] != nullptr) queries[count].tag = left[i];
        packet_of[count++] = static_cast<uint8_t>(i);
      }
      pass_batch({queries, count}, {results, count}, pass == 0 ? out_needs_tag : nullptr, context);
      for (std::size_t q = 0; q < count; ++q) {
        decided[first + packet_of[q]][pass] = results[q].deciding;
        if (pass == 0) left[packet_of[q]] = results[q].tag;
      }
    }
  }
}

void RuleSet::pass_batch(std::span<const MatchQuery> queries, std::span<InPass> out, const bool* tag_wanted,
                         DecisionContext* context) const noexcept {
  static constexpr std::size_t kMost = Classifier::kBatch;
  const std::size_t n = queries.size();
  uint32_t results[kMost];
  uint32_t last[kMost];  // by query: the last rule evaluated
  bool wanted[kMost];
  uint16_t tags[kMost];
  if (segments_.size() == 1) {
    segments_[0].classifier->match_batch(queries, {results, n});
    admitted_batch(segments_[0], queries, results, context);
    for (std::size_t i = 0; i < n; ++i) {
      out[i].deciding = results[i];
      last[i] = results[i] == kNoRule ? UINT32_MAX : rules_[results[i]].evaluated_until;
      wanted[i] = tag_wanted != nullptr && tag_wanted[i];
      tags[i] = queries[i].tag;
    }
    if (tag_wanted != nullptr) tags_after_batch(segments_[0], queries, last, wanted, tags);
    for (std::size_t i = 0; i < n; ++i) out[i].tag = tags[i];
    return;
  }
  // Each query through the segments in turn, each segment matched with the tag the ones before
  // left; the lookups of the queries that reach a segment go through its classifiers together. A
  // quick anchor that decided in a segment before may reach into this one; its rules come first in
  // this segment's order, so a rule past it found here means none of them matched.
  MatchQuery reaching[kMost];
  uint8_t query_of[kMost];
  uint32_t end[kMost];  // by query: the last rule evaluated, once a quick rule or anchor decided
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = {kNoRule, queries[i].tag};
    end[i] = UINT32_MAX;
  }
  for (std::size_t k = 0; k < segments_.size(); ++k) {
    const Segment& segment = segments_[k];
    std::size_t count = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (segment.first > end[i]) continue;
      reaching[count] = queries[i];
      reaching[count].tag = out[i].tag;
      query_of[count++] = static_cast<uint8_t>(i);
    }
    if (count == 0) break;
    segment.classifier->match_batch({reaching, count}, {results, count});
    admitted_batch(segment, {reaching, count}, results, context);
    const bool last_segment = k + 1 == segments_.size();
    for (std::size_t j = 0; j < count; ++j) {
      const std::size_t i = query_of[j];
      if (results[j] != Classifier::kNoMatch && segment.first + results[j] <= end[i]) {
        out[i].deciding = segment.first + results[j];
        end[i] = std::min(end[i], rules_[out[i].deciding].evaluated_until);
      }
      last[j] = end[i];
      wanted[j] = !last_segment || (tag_wanted != nullptr && tag_wanted[i]);
      tags[j] = out[i].tag;
    }
    tags_after_batch(segment, {reaching, count}, last, wanted, tags);
    for (std::size_t j = 0; j < count; ++j) out[query_of[j]].tag = tags[j];
  }
}

void RuleSet::tags_after_batch(const Segment& segment, std::span<const MatchQuery> passes,
                               const uint32_t* last, const bool* wanted, uint16_t* tags) const noexcept {
  if (!segment.tags) return;
  // Evaluated to the end, a pass's tag is the plain first match of the tag classifier: those go
  // through it together; one that stopped early asks past the rules it did not evaluate.
  MatchQuery whole[Classifier::kBatch];
  uint8_t pass_of[Classifier::kBatch];
  std::size_t count = 0;
  for (std::size_t i = 0; i < passes.size(); ++i) {
    if (!wanted[i]) continue;
    if (last[i] != UINT32_MAX) {
      tags[i] = tag_after(segment, passes[i], tags[i], last[i]);
      continue;
    }
    whole[count] = passes[i];
    whole[count].tag = tags[i];
    pass_of[count++] = static_cast<uint8_t>(i);
  }
  uint32_t found[Classifier::kBatch];
  segment.tags->match_batch({whole, count}, {found, count});
  for (std::size_t j = 0; j < count; ++j) {
    if (found[j] != Classifier::kNoMatch) tags[pass_of[j]] = rules_[segment.tag_rules[found[j]]].tag;
  }
}

RuleSet::InPass RuleSet::evaluate_in(const MatchQuery& in, DecisionContext* context) const noexcept {
  if (segments_.size() != 1) return pass(in, context);
  uint32_t deciding = segments_[0].classifier->match(in);
  if (filter_conditional_) deciding = admitted(segments_[0], in, deciding, context);
  return {deciding, tag_after_in(in, deciding)};
}

uint16_t RuleSet::tag_after_in(const MatchQuery& in, uint32_t deciding) const noexcept {
  return tag_after(segments_[0], in, in.tag,
                   deciding == kNoRule ? UINT32_MAX : rules_[deciding].evaluated_until);
}

uint16_t RuleSet::tag_after(const Segment& segment, const MatchQuery& pass, uint16_t tag,
                            uint32_t last) const noexcept {
  if (!segment.tags) return tag;
  // Ranked last rule first: the tag rules past where evaluation stopped rank before the others.
  const std::vector<uint32_t>& rules = segment.tag_rules;
  const auto after = static_cast<uint32_t>(rules.end() - std::upper_bound(rules.begin(), rules.end(), last));
  MatchQuery carrying = pass;
  carrying.tag = tag;
  const uint32_t k = segment.tags->match_from(carrying, after);
  return k == Classifier::kNoMatch ? tag : rules_[rules[k]].tag;
}

uint32_t RuleSet::words_tested(const PacketView& packet, Direction direction, IfaceId iface) const noexcept {
  uint32_t words = 0;
  for (const Segment& segment : segments_)
    words += segment.classifier->words_tested(packet, direction, iface);
  return words;
}

void RuleSet::evaluate_batch(std::span<const MatchQuery> queries, std::span<uint32_t> out,
                             DecisionContext* context) const noexcept {
  if (segments_.size() == 1) {
    segments_[0].classifier->match_batch(queries, out);
    admitted_batch(segments_[0], queries, out.data(), context);
    return;
  }
  static constexpr std::size_t kChunk = Classifier::kBatch;
  for (std::size_t first = 0; first < queries.size(); first += kChunk) {
    const std::size_t n = std::min(kChunk, queries.size() - first);
    InPass passed[kChunk];
    pass_batch(queries.subspan(first, n), {passed, n}, nullptr, context);
    for (std::size_t i = 0; i < n; ++i) out[first + i] = passed[i].deciding;
  }
}

const TableCounters* RuleSet::table_counters(std::string_view name) const noexcept {
  for (const auto& t : table_counters_) {
    if (t->name() == name) return t.get();
  }
  return nullptr;
}

bool RuleSet::local_broadcast(Family family, const IpAddress& address) const noexcept {
  return family == Family::V4 &&
         std::binary_search(local_broadcasts_.begin(), local_broadcasts_.end(), address.v4_value());
}

ScrubAction RuleSet::scrub(const PacketView& packet, Direction direction, IfaceId iface) const noexcept {
  ScrubAction action;
  if (!scrub_classifier_) return action;
  const uint32_t r = scrub_classifier_->match(packet, direction, iface);
  if (r == Classifier::kNoMatch) return action;
  const ScrubRule& rule = scrub_rules_[r];
  action.counters = scrub_stats_[r].get();
  if (rule.negated) return action;
  action.matched = true;
  action.fragment_reassemble = rule.fragment_reassemble;
  action.reassemble_tcp = rule.reassemble_tcp;
  action.max_mss = rule.max_mss;
  action.min_ttl = rule.min_ttl;
  action.random_id = rule.random_id;
  action.no_df = rule.no_df;
  action.set_tos = rule.set_tos;
  return action;
}

const CompiledTranslation* RuleSet::translation(const PacketView& packet, Direction direction, IfaceId iface,
                                                uint16_t* tag) const noexcept {
  uint16_t carried = tag != nullptr ? *tag : 0;
  const auto matched = [&](const CompiledTranslation& rule) {
    if (rule.tag != 0) carried = rule.tag;
    if (tag != nullptr) *tag = carried;
    return &rule;
  };
  const CompiledTranslation* exemption = nullptr;
  if (translation_classifier_[0]) {
    const uint32_t r = translation_classifier_[0]->match(packet, direction, iface, carried);
    if (r != Classifier::kNoMatch) {
      exemption = matched(translations_[r]);
      if (!exemption->negated) return exemption;
    }
  }
  if (translation_classifier_[1]) {
    const uint32_t r = translation_classifier_[1]->match(packet, direction, iface, carried);
    if (r != Classifier::kNoMatch) return matched(translations_[second_stage_base_ + r]);
  }
  return exemption;
}

}  // namespace pairwall::engine::rules
