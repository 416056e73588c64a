// Hashing: XXH3-128 as hex, and a length-prefixed encoder so that field
// boundaries can never alias ("ab"+"c" != "a"+"bc").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace attnjit::util {

std::string xxh128_hex(std::string_view data);
uint64_t xxh64(std::string_view data);

class KeyEncoder {
 public:
  KeyEncoder& field(std::string_view name, std::string_view value);
  KeyEncoder& field(std::string_view name, int64_t value);
  const std::string& bytes() const { return buf_; }
  std::string hex() const { return xxh128_hex(buf_); }

 private:
  std::string buf_;
};

}  // namespace attnjit::util
