#include "daemon/engine/synproxy.h"

namespace pairwall::engine {

std::string_view proxy_name(Proxy proxy) {
  switch (proxy) {
    case Proxy::Initiator:
      return "awaiting initiator";
    case Proxy::Responder:
      return "awaiting responder";
    case Proxy::Spliced:
      return "spliced";
    case Proxy::None:
      break;
  }
  return "";
}

}  // namespace pairwall::engine
