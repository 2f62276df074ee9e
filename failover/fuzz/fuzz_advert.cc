// libFuzzer target for the advertisement decoder (preset "fuzz"):
//   ninja -C build-fuzz fuzz_advert && build-fuzz/bin/fuzz_advert -max_total_time=60 /tmp/advert
//   tests/fuzz/corpus/advert
// The first byte picks the mode: even, the bytes are a frame as received (almost all fail at the
// tag); odd, the rest is taken as header and body and given a valid tag, so the body parser and
// the field checks behind the HMAC are reached too.
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "failover/advert_codec.h"

namespace pf = pairwall::failover;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string key = "fuzzing key, thirty-two bytes!!";
  if (size == 0) return 0;
  std::vector<uint8_t> frame(data + 1, data + size);
  if (data[0] & 1) {
    uint8_t tag[pf::kAdvertTagSize];
    unsigned int len = sizeof tag;
    HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), frame.data(), frame.size(), tag, &len);
    frame.insert(frame.end(), tag, tag + sizeof tag);
  }
  pf::AdvertCodec codec(key, 1, 1);
  const auto r = codec.decode(frame, pf::kAdvertTtl);
  if (r.ok) {
    // What was accepted must survive a round trip.
    uint8_t out[pf::kAdvertMaxFrame];
    pf::AdvertCodec sender(key, 1, r.advert.node_id);
    if (sender.encode(r.advert, out) == 0) __builtin_trap();
  }
  return 0;
}
