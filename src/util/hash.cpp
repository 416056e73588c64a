#include "util/hash.hpp"

#define XXH_INLINE_ALL  // header-only: no libxxhash.so needed where the library runs
#include <xxhash.h>

#include <cstdio>

namespace attnjit::util {

std::string hex128(uint64_t high, uint64_t low) {
  char out[33];
  std::snprintf(out, sizeof(out), "%016llx%016llx", static_cast<unsigned long long>(high),
                static_cast<unsigned long long>(low));
  return out;
}

std::string xxh128_hex(std::string_view data) {
  const XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  return hex128(h.high64, h.low64);
}

uint64_t xxh64(std::string_view data) { return XXH3_64bits(data.data(), data.size()); }

static_assert(sizeof(XXH3_state_t) <= 640 && alignof(XXH3_state_t) <= 64, "KeyEncoder::state_ holds an XXH3 state");

namespace {
XXH3_state_t* state(unsigned char* raw) { return reinterpret_cast<XXH3_state_t*>(raw); }
const XXH3_state_t* state(const unsigned char* raw) { return reinterpret_cast<const XXH3_state_t*>(raw); }
void le64(unsigned char (&out)[8], uint64_t n) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
}
}  // namespace

// The state is plain data (the default secret, no pointers into itself), so the
// implicit copy is XXH3_copyState's memcpy.
KeyEncoder::KeyEncoder() { XXH3_128bits_reset(state(state_)); }

void KeyEncoder::update(const void* data, size_t n) { XXH3_128bits_update(state(state_), data, n); }

KeyEncoder& KeyEncoder::field(std::string_view name, std::string_view value) {
  unsigned char len[8];
  le64(len, name.size());
  update(len, 8);
  update(name.data(), name.size());
  le64(len, value.size());
  update(len, 8);
  update(value.data(), value.size());
  return *this;
}

KeyEncoder& KeyEncoder::field(std::string_view name, int64_t value) {
  return field(name, std::to_string(value));
}

std::string KeyEncoder::hex() const {
  const XXH128_hash_t h = XXH3_128bits_digest(state(state_));
  return hex128(h.high64, h.low64);
}

std::string KeyEncoder::field_bytes(std::string_view name, std::string_view value) {
  std::string out;
  unsigned char len[8];
  le64(len, name.size());
  out.append(reinterpret_cast<const char*>(len), 8).append(name);
  le64(len, value.size());
  out.append(reinterpret_cast<const char*>(len), 8).append(value);
  return out;
}

}  // namespace attnjit::util
