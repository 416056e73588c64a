// The per-row checksum of the store: XXH3-128 over every column a reader trusts.
#pragma once

#include <string>
#include <string_view>

namespace attnjit::store {

struct Entry;

// 32 lowercase hex digits (high 64 bits first, as util::xxh128_hex) over a
// version tag and the length-prefixed key, name, arch, cubin, ptx and
// meta_json. The key is included so that a blob copied onto another key's row
// fails the check; name, arch and meta_json so that the metadata the runtime
// parses is as trustworthy as the cubin (schema 002; rows of schema 001 only
// covered key, cubin and ptx and never match this).
std::string row_checksum(const Entry& entry);

}  // namespace attnjit::store
