#include "daemon/engine/reason.h"

namespace pairwall::engine {

std::string_view reason_name(Reason r) {
  switch (r) {
    case Reason::Match:
      return "match";
    case Reason::State:
      return "state";
    case Reason::DefaultPass:
      return "default_pass";
    case Reason::AfterRouting:
      return "after_routing";
    case Reason::Skipped:
      return "skipped";
    case Reason::Short:
      return "short";
    case Reason::BadIpVersion:
      return "bad_ip_version";
    case Reason::BadIpHeader:
      return "bad_ip_header";
    case Reason::BadIpv6Extension:
      return "bad_ipv6_extension";
    case Reason::BadOffset:
      return "bad_offset";
    case Reason::BadTcpHeader:
      return "bad_tcp_header";
    case Reason::BadTcpOptions:
      return "bad_tcp_options";
    case Reason::BadUdpHeader:
      return "bad_udp_header";
    case Reason::BadIcmp:
      return "bad_icmp";
    case Reason::Fragment:
      return "fragment";
    case Reason::BadTcpFlags:
      return "bad_tcp_flags";
    case Reason::IpOptions:
      return "ip_options";
    case Reason::RuleBlock:
      return "rule_block";
    case Reason::StateMismatch:
      return "state_mismatch";
    case Reason::StateInterface:
      return "state_interface";
    case Reason::BadSeq:
      return "bad_seq";
    case Reason::BadTimestamp:
      return "bad_timestamp";
    case Reason::Synproxy:
      return "synproxy";
    case Reason::StateLimit:
      return "state_limit";
    case Reason::RuleStateLimit:
      return "rule_state_limit";
    case Reason::SourceLimit:
      return "src_limit";
    case Reason::SourceNodeLimit:
      return "src_node_limit";
    case Reason::TranslationFailed:
      return "translation_failed";
    case Reason::Memory:
      return "memory";
    case Reason::Internal:
      return "internal";
    case Reason::Count:
      break;
  }
  return "unknown";
}

}  // namespace pairwall::engine
