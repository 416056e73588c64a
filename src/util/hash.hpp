// Hashing: XXH3-128 as hex, and a length-prefixed encoder so that field
// boundaries can never alias ("ab"+"c" != "a"+"bc").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace attnjit::util {

std::string xxh128_hex(std::string_view data);
// A 128-bit digest as those 32 lowercase hex digits, high 64 bits first.
std::string hex128(uint64_t high, uint64_t low);
uint64_t xxh64(std::string_view data);

// Streams the encoded fields into XXH3-128: hex() equals xxh128_hex of the fields'
// encodings (field_bytes) one after another, without holding them. A copy carries
// the hash state, so a prefix hashed once (the template set) can be extended many times.
class KeyEncoder {
 public:
  KeyEncoder();
  KeyEncoder& field(std::string_view name, std::string_view value);
  KeyEncoder& field(std::string_view name, int64_t value);
  std::string hex() const;
  // One field's encoding: the name's length (8 bytes, little-endian), the name, the
  // value's length, the value.
  static std::string field_bytes(std::string_view name, std::string_view value);

 private:
  void update(const void* data, size_t n);
  static constexpr size_t kStateBytes = 640;  // >= sizeof(XXH3_state_t), checked in hash.cpp
  alignas(64) unsigned char state_[kStateBytes];
};

}  // namespace attnjit::util
