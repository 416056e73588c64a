#include "util/hash.hpp"

#define XXH_INLINE_ALL  // header-only: no libxxhash.so needed where the library runs
#include <xxhash.h>

#include <cstdio>

namespace attnjit::util {

std::string xxh128_hex(std::string_view data) {
  XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  char out[33];
  std::snprintf(out, sizeof(out), "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return out;
}

uint64_t xxh64(std::string_view data) { return XXH3_64bits(data.data(), data.size()); }

static void append_len(std::string& buf, uint64_t n) {
  for (int i = 0; i < 8; ++i) buf.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
}

KeyEncoder& KeyEncoder::field(std::string_view name, std::string_view value) {
  append_len(buf_, name.size());
  buf_.append(name);
  append_len(buf_, value.size());
  buf_.append(value);
  return *this;
}

KeyEncoder& KeyEncoder::field(std::string_view name, int64_t value) {
  return field(name, std::to_string(value));
}

}  // namespace attnjit::util
