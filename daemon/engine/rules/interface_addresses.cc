#include "daemon/engine/rules/interface_addresses.h"

#include <algorithm>
#include <optional>
#include <set>

namespace pairwall::engine::rules {
namespace {

constexpr const char* kSelf = "self";  // pf's word for every address of the host

IpPrefix network_of(const InterfaceAddress& a) {
  const unsigned width = a.family == Family::V4 ? 32 : 128;
  const unsigned length = a.prefix_length > width ? width : a.prefix_length;
  // The host bits of a 128-bit address kept as (hi, lo), IPv4's in the low 32 bits of lo.
  const unsigned host = width - length;
  const uint64_t lo_mask = host >= 64 ? ~uint64_t{0} : (uint64_t{1} << host) - 1;
  const uint64_t hi_mask = host <= 64 ? 0 : host >= 128 ? ~uint64_t{0} : (uint64_t{1} << (host - 64)) - 1;
  return IpPrefix{a.family, IpAddress{a.address.hi & ~hi_mask, a.address.lo & ~lo_mask},
                  static_cast<uint8_t>(length)};
}

IpPrefix host_of(const InterfaceAddress& a) {
  return IpPrefix{a.family, a.address, static_cast<uint8_t>(a.family == Family::V4 ? 32 : 128)};
}

// The addresses (or networks) of `interface` (or of every interface, for `self`), each once and in
// order, so that a refresh compares sets and not the order the kernel listed them in; false when
// the host has no such interface.
bool collect(const std::string& interface, bool networks, const InterfaceAddresses& addresses,
             std::vector<IpPrefix>& out) {
  std::vector<InterfaceAddress> own;
  if (interface == kSelf) {
    for (const auto& [name, list] : addresses) own.insert(own.end(), list.begin(), list.end());
  } else if (auto it = addresses.find(interface); it != addresses.end()) {
    own = it->second;
  } else {
    return false;
  }
  std::set<IpPrefix> prefixes;
  for (const InterfaceAddress& a : own) prefixes.insert(networks ? network_of(a) : host_of(a));
  out.assign(prefixes.begin(), prefixes.end());
  return true;
}

// The family a translation rule translates: its own, else that of the first address it names.
Family translated_family(const TranslationRule& r) {
  if (r.family) return *r.family;
  for (const Endpoint* ep : {&r.from, &r.to}) {
    for (const AddressElement& e : ep->addresses) {
      if (e.kind == AddressElement::Kind::Prefix || e.kind == AddressElement::Kind::Range)
        return e.prefix.family;
    }
  }
  return Family::V4;
}

// The interface's first address (the kernel's primary) of the rule's family, as a host prefix;
// with `round-robin`, every address of the family, in the kernel's order, as pf walks `($if)`.
// Empty when it has none.
std::vector<IpPrefix> interface_targets(const TranslationRule& r, const InterfaceAddresses& addresses) {
  std::vector<IpPrefix> out;
  const auto it = addresses.find(r.target_interface);
  if (it == addresses.end()) return out;
  const Family family = translated_family(r);
  const bool every = r.pool == PoolType::RoundRobin;
  for (const InterfaceAddress& a : it->second) {
    if (a.family != family) continue;
    out.push_back(host_of(a));
    if (!every) break;
  }
  return out;
}

class Resolver {
 public:
  // Tables an earlier resolution made stay as they are (refresh_interface_tables() sets them), so
  // that rules added to a resolved file, an anchor's, resolve alike.
  Resolver(RuleFile& file, const InterfaceAddresses& addresses, std::vector<RuleError>* notices)
      : file_(file), addresses_(addresses), notices_(notices) {
    for (const Table& t : file.tables) {
      if (t.name.find(':') != std::string::npos) made_.insert(t.name);
    }
  }

  std::optional<RuleError> run() {
    // Tables first: the tables made for rules' elements are appended after them.
    for (Table& t : file_.tables) {
      std::set<IpPrefix> seen(t.entries.begin(), t.entries.end());  // each prefix once, its first way
      seen.insert(t.negated_entries.begin(), t.negated_entries.end());
      for (const AddressElement& e : t.interfaces) {
        std::vector<IpPrefix> prefixes;
        if (auto error = addresses_of(e, prefixes, /*in_table=*/true)) return error;
        for (const IpPrefix& p : prefixes) {
          if (seen.insert(p).second) (e.negated ? t.negated_entries : t.entries).push_back(p);
        }
      }
      t.interfaces.clear();
    }
    for (FilterRule& r : file_.filter_rules) {
      if (auto e = endpoints(r.from, r.to)) return e;
    }
    for (TranslationRule& r : file_.translation_rules) {
      if (auto e = endpoints(r.from, r.to)) return e;
      if (r.target_interface.empty() || !r.targets.empty()) continue;
      if (std::vector<IpPrefix> targets = interface_targets(r, addresses_); !targets.empty()) {
        r.targets = std::move(targets);
        r.target_pending = false;
        continue;
      }
      const bool exists = addresses_.count(r.target_interface) != 0;
      // binat compares its prefix lengths with the address's when the rules load: it needs one.
      if (r.target_dynamic && r.kind != TranslationRule::Kind::Binat) {
        r.target_pending = true;
        r.family = translated_family(r);
        if (!exists)
          note_absent(r.target_location, r.target_interface, r.target_interface, "translates nothing");
        continue;
      }
      if (!exists)
        return RuleError{r.target_location, "no interface named '" + r.target_interface + "' on this host"};
      const std::string family = translated_family(r) == Family::V4 ? "IPv4" : "IPv6";
      return RuleError{r.target_location,
                       "interface '" + r.target_interface + "' has no " + family +
                           " address to translate to" +
                           (r.kind == TranslationRule::Kind::Binat
                                ? std::string()
                                : " (write '(" + r.target_interface + ")' to translate once it has one)")};
    }
    for (ScrubRule& r : file_.scrub_rules) {
      if (auto e = endpoints(r.from, r.to)) return e;
    }
    note_absent_interfaces();
    return std::nullopt;
  }

 private:
  std::optional<RuleError> endpoints(const Endpoint& from, const Endpoint& to) {
    for (const Endpoint* ep : {&from, &to}) {
      for (const AddressElement& e : ep->addresses) {
        if (e.kind != AddressElement::Kind::Interface) continue;
        if (auto error = table_for(e)) return error;
      }
    }
    return std::nullopt;
  }

  // Each element is checked, also where an earlier one made its table: `em0` needs an address
  // even where `(em0)` came first.
  std::optional<RuleError> table_for(const AddressElement& e) {
    Table t;
    if (auto error = addresses_of(e, t.entries)) return error;
    t.name = interface_table_name(e);
    if (!made_.insert(t.name).second) return std::nullopt;
    t.location = e.location;
    t.is_const = true;
    t.lists_entries = true;
    file_.tables.push_back(std::move(t));
    return std::nullopt;
  }

  // The element's addresses (or networks), each once. `(em0)` may have none yet: its table
  // follows the addresses (refresh_interface_tables()). A table's list (`in_table`) has no
  // `(em0)`: its entries are the addresses the interface has as the rules load.
  std::optional<RuleError> addresses_of(const AddressElement& e, std::vector<IpPrefix>& out,
                                        bool in_table = false) {
    if (!collect(e.table, e.networks, addresses_, out)) {
      const std::string written = e.table + (e.networks ? ":network" : "");
      if (e.dynamic && !in_table) {
        note_absent(e.location, e.table, written, "matches no address");
        return std::nullopt;
      }
      return RuleError{e.location,
                       "no interface named '" + e.table + "' on this host" +
                           (in_table ? std::string()
                                     : " (write '(" + written + ")' to match its addresses once it exists)")};
    }
    if (out.empty() && !e.dynamic) {
      const std::string written = e.table + (e.networks ? ":network" : "");
      return RuleError{
          e.location,
          (e.table == kSelf ? std::string("this host has no address")
                            : "interface '" + e.table + "' has no address") +
              (in_table ? std::string(" (a table holds the addresses it has when the "
                                      "rules load)")
                        : " (write '(" + written + ")' to match its addresses once it has them)")};
    }
    return std::nullopt;
  }

  // `on eht0`: pf loads rules on interfaces that do not exist yet (a tunnel, a VLAN made later), and
  // so does this; but a misspelt name makes a rule that matches nothing, unseen, and `block in on
  // eht0` a hole. Said once a name, at its first rule, unless note_absent() said it already.
  void note_absent_interfaces() {
    if (notices_ == nullptr) return;
    const auto note = [this](const SourceLocation& where, const std::vector<InterfaceMatch>& list) {
      for (const InterfaceMatch& m : list) {
        if (addresses_.count(m.name) != 0 || !noted_.insert(m.name).second) continue;
        notices_->push_back(
            RuleError{where, "warning: no interface named '" + m.name +
                                 "' on this host yet: rules on it match nothing until it exists"});
      }
    };
    // In the file's order: scrub, translation, then filter rules with the anchors where they stand.
    for (const ScrubRule& r : file_.scrub_rules) note(r.location, r.interfaces);
    for (const TranslationRule& r : file_.translation_rules) note(r.location, r.interfaces);
    auto anchor = file_.anchors.begin();
    for (std::size_t i = 0; i <= file_.filter_rules.size(); ++i) {
      for (; anchor != file_.anchors.end() && anchor->position <= i; ++anchor)
        note(anchor->location, anchor->interfaces);
      if (i == file_.filter_rules.size()) break;
      note(file_.filter_rules[i].location, file_.filter_rules[i].interfaces);
      note(file_.filter_rules[i].location, file_.filter_rules[i].received_on);
    }
  }

  // `(em0)` of an interface the host does not have: loaded as pf loads it, and said.
  void note_absent(const SourceLocation& where, const std::string& interface, const std::string& written,
                   const char* meanwhile) {
    if (notices_ == nullptr) return;
    noted_.insert(interface);
    notices_->push_back(RuleError{where, "warning: no interface named '" + interface +
                                             "' on this host yet: (" + written + ") " + meanwhile +
                                             " until it has an address"});
  }

  RuleFile& file_;
  const InterfaceAddresses& addresses_;
  std::vector<RuleError>* notices_;
  std::set<std::string> noted_;  // the interfaces a notice has named
  std::set<std::string> made_;
};

}  // namespace

std::string interface_table_name(const AddressElement& element) {
  return element.table + (element.networks ? ":network" : ":addresses");
}

std::optional<RuleError> resolve_interfaces(RuleFile& file, const InterfaceAddresses& addresses,
                                            std::vector<RuleError>* notices) {
  refresh_local_broadcasts(file, addresses);
  return Resolver(file, addresses, notices).run();
}

bool refresh_local_broadcasts(RuleFile& file, const InterfaceAddresses& addresses) {
  std::vector<uint32_t> now;
  for (const auto& [name, list] : addresses) {
    for (const InterfaceAddress& a : list) {
      if (a.family != Family::V4 || a.prefix_length > 30) continue;
      now.push_back(a.address.v4_value() | (~uint32_t{0} >> a.prefix_length));
    }
  }
  std::sort(now.begin(), now.end());
  now.erase(std::unique(now.begin(), now.end()), now.end());
  if (now == file.local_broadcasts) return false;
  file.local_broadcasts = std::move(now);
  return true;
}

std::vector<std::string> refresh_interface_tables(RuleFile& file, const InterfaceAddresses& addresses) {
  std::vector<std::string> changed;
  for (Table& t : file.tables) {
    // Only the tables made for interface elements have a ':' in their names.
    const auto colon = t.name.find(':');
    if (colon == std::string::npos) continue;
    std::vector<IpPrefix> now;
    collect(t.name.substr(0, colon), t.name.substr(colon + 1) == "network", addresses, now);
    if (now == t.entries) continue;
    t.entries = std::move(now);
    changed.push_back(t.name);
  }
  // An interface without an address of the family keeps the target it had: a translation to
  // nothing would not pass the rule's packets either.
  for (TranslationRule& r : file.translation_rules) {
    if (r.target_interface.empty()) continue;
    std::vector<IpPrefix> now = interface_targets(r, addresses);
    if (now.empty() || now == r.targets) continue;
    r.targets = std::move(now);
    r.target_pending = false;
    changed.push_back(r.target_interface + " (translation address)");
  }
  return changed;
}

}  // namespace pairwall::engine::rules
