#include "failover/leaving.h"

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstring>
#include <span>
#include <system_error>

#include "failover/advert_codec.h"
#include "failover/advert_socket.h"
#include "failover/election.h"

namespace pairwall::failover {

LeavingResult send_leaving_adverts(const FailoverConfig& config, uint32_t node_id, uint64_t boot_epoch) {
  LeavingResult result;
  if (config.driver != Driver::Builtin) return result;
  AdvertCodec codec(config.key, config.vhid, node_id);
  const Advert advert =
      advert_of(leaving_advert(std::chrono::milliseconds(config.advbase_ms)), node_id, boot_epoch, 1);
  uint8_t frame[kAdvertMaxFrame];
  const std::size_t size = codec.encode(advert, frame);
  if (size == 0) {
    result.errors.push_back("failover: the leaving advertisement does not fit a frame");
    return result;
  }
  // The sockets only send: the context that would run their receives never runs.
  boost::asio::io_context io;
  for (const AdvertChannel& channel : config.advert_channels()) {
    ++result.channels;
    AdvertSocket socket(io, channel);
    try {
      socket.open([](std::span<const uint8_t>, int, const std::array<uint8_t, 16>&) {});
    } catch (const std::system_error& e) {
      result.errors.push_back(e.what());
      continue;
    }
    if (const int error = socket.send(std::span<const uint8_t>(frame, size)); error != 0) {
      result.errors.push_back("failover: leaving advertisement on " + channel.interface + ": " +
                              std::strerror(error));
      continue;
    }
    ++result.sent;
  }
  return result;
}

}  // namespace pairwall::failover
