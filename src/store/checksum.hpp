// The per-row checksum of the store: XXH3-128 over the length-prefixed key, cubin and ptx.
#pragma once

#include <string>
#include <string_view>

namespace attnjit::store {

// 32 lowercase hex digits (high 64 bits first, as util::xxh128_hex). The key is
// included so that a blob copied onto another key's row also fails the check.
std::string entry_checksum(std::string_view key, std::string_view cubin, std::string_view ptx);

}  // namespace attnjit::store
