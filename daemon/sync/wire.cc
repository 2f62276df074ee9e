#include "daemon/sync/wire.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <array>
#include <cstring>
#include <stdexcept>

namespace pairwall::sync {
namespace {

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void put32(uint8_t* p, uint32_t v) {
  for (int i = 3; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v);
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v);
}
uint16_t get16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = v << 8 | p[i];
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}

}  // namespace

Authenticator::Authenticator(std::span<const uint8_t> key, std::span<const uint8_t> also_accept) {
  mac_ = EVP_MAC_fetch(nullptr, OSSL_MAC_NAME_HMAC, nullptr);
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  const auto context = [&](std::span<const uint8_t> k) {
    EVP_MAC_CTX* ctx = mac_ != nullptr ? EVP_MAC_CTX_new(mac_) : nullptr;
    if (ctx != nullptr && EVP_MAC_init(ctx, k.data(), k.size(), params) == 1) return ctx;
    EVP_MAC_CTX_free(ctx);
    return static_cast<EVP_MAC_CTX*>(nullptr);
  };
  ctx_ = context(key);
  if (!also_accept.empty()) also_accept_ctx_ = context(also_accept);
  if (ctx_ == nullptr || (!also_accept.empty() && also_accept_ctx_ == nullptr)) {
    EVP_MAC_CTX_free(ctx_);
    EVP_MAC_CTX_free(also_accept_ctx_);
    EVP_MAC_free(mac_);
    throw std::runtime_error("OpenSSL cannot set up HMAC-SHA256");
  }
}

Authenticator::~Authenticator() {
  EVP_MAC_CTX_free(ctx_);
  EVP_MAC_CTX_free(also_accept_ctx_);
  EVP_MAC_free(mac_);
}

bool Authenticator::tag_with(EVP_MAC_CTX* ctx, std::span<const uint8_t> data, uint8_t* out) noexcept {
  // A NULL key re-initializes with the key set at construction (EVP_MAC_init(3)).
  std::array<uint8_t, EVP_MAX_MD_SIZE> full;
  std::size_t len = 0;
  if (EVP_MAC_init(ctx, nullptr, 0, nullptr) != 1 || EVP_MAC_update(ctx, data.data(), data.size()) != 1 ||
      EVP_MAC_final(ctx, full.data(), &len, full.size()) != 1 || len < kTagSize) {
    return false;
  }
  std::memcpy(out, full.data(), kTagSize);
  return true;
}

bool Authenticator::tag(std::span<const uint8_t> data, uint8_t* out) noexcept {
  return tag_with(ctx_, data, out);
}

bool Authenticator::verify(std::span<const uint8_t> data, const uint8_t* expected) noexcept {
  std::array<uint8_t, kTagSize> computed;
  by_also_accept_ = false;
  if (tag_with(ctx_, data, computed.data()) && CRYPTO_memcmp(computed.data(), expected, kTagSize) == 0)
    return true;
  if (also_accept_ctx_ == nullptr || !tag_with(also_accept_ctx_, data, computed.data()) ||
      CRYPTO_memcmp(computed.data(), expected, kTagSize) != 0)
    return false;
  by_also_accept_ = true;
  return true;
}

void write_header(const Header& h, uint8_t* p) noexcept {
  put16(p + 0, kMagic);
  p[2] = h.version;
  p[3] = h.flags;
  put32(p + 4, h.node_id);
  put64(p + 8, h.epoch);
  put64(p + 16, h.xmit);
  put64(p + 24, h.seq);
  put64(p + 32, h.send_base);
  put64(p + 40, h.ack_epoch);
  put64(p + 48, h.cum_ack);
  put64(p + 56, h.sack);
  put16(p + 64, h.payload_len);
  put16(p + 66, 0);
}

Header read_header(const uint8_t* p) noexcept {
  Header h;
  h.version = p[2];
  h.flags = p[3];
  h.node_id = get32(p + 4);
  h.epoch = get64(p + 8);
  h.xmit = get64(p + 16);
  h.seq = get64(p + 24);
  h.send_base = get64(p + 32);
  h.ack_epoch = get64(p + 40);
  h.cum_ack = get64(p + 48);
  h.sack = get64(p + 56);
  h.payload_len = get16(p + 64);
  return h;
}

std::size_t seal(const Header& header, std::span<const uint8_t> payload, Authenticator& auth,
                 std::span<uint8_t> out) noexcept {
  if (payload.size() > kMaxPayload) return 0;
  const std::size_t total = kOverhead + payload.size();
  if (out.size() < total) return 0;
  Header h = header;
  h.payload_len = static_cast<uint16_t>(payload.size());
  write_header(h, out.data());
  if (!payload.empty()) std::memcpy(out.data() + kHeaderSize, payload.data(), payload.size());
  const std::size_t signed_len = kHeaderSize + payload.size();
  if (!auth.tag(out.first(signed_len), out.data() + signed_len)) return 0;
  return total;
}

bool open(std::span<const uint8_t> datagram, Authenticator& auth, Header& header,
          std::span<const uint8_t>& payload, DropReason& why) noexcept {
  // Magic and version first: they need 3 bytes and tell garbage and other versions apart from
  // truncation.
  if (datagram.size() < 2) {
    why = DropReason::Truncated;
    return false;
  }
  if (get16(datagram.data()) != kMagic) {
    why = DropReason::BadMagic;
    return false;
  }
  if (datagram.size() < 3) {
    why = DropReason::Truncated;
    return false;
  }
  if (datagram[2] != kVersion) {
    why = DropReason::BadVersion;
    return false;
  }
  if (datagram.size() < kOverhead) {
    why = DropReason::Truncated;
    return false;
  }
  header = read_header(datagram.data());
  const std::size_t expected = kOverhead + header.payload_len;
  if (datagram.size() != expected) {
    why = datagram.size() < expected ? DropReason::Truncated : DropReason::BadLength;
    return false;
  }
  const std::size_t signed_len = kHeaderSize + header.payload_len;
  if (!auth.verify(datagram.first(signed_len), datagram.data() + signed_len)) {
    why = DropReason::BadTag;
    return false;
  }
  payload = datagram.subspan(kHeaderSize, header.payload_len);
  return true;
}

}  // namespace pairwall::sync
