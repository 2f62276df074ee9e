#include "daemon/sync/counters.h"

namespace pairwall::sync {

std::string_view drop_reason_name(DropReason r) {
  switch (r) {
    case DropReason::BadTtl:
      return "bad_ttl";
    case DropReason::BadMagic:
      return "bad_magic";
    case DropReason::BadVersion:
      return "bad_version";
    case DropReason::Truncated:
      return "truncated";
    case DropReason::BadLength:
      return "bad_length";
    case DropReason::BadTag:
      return "bad_tag";
    case DropReason::UnknownSender:
      return "unknown_sender";
    case DropReason::StaleEpoch:
      return "stale_epoch";
    case DropReason::Replay:
      return "replay";
    case DropReason::MalformedPayload:
      return "malformed_payload";
    case DropReason::Unproven:
      return "unproven_epoch";
    case DropReason::EarlierBoot:
      return "for_earlier_boot";
    case DropReason::Count:
      break;
  }
  return "unknown";
}

}  // namespace pairwall::sync
