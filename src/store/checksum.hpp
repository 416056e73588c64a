// The per-row checksums of the store: XXH3-128 over every column a reader trusts.
#pragma once

#include <string>
#include <string_view>

namespace attnjit::store {

struct Entry;

// util::xxh128_hex of the PTX alone (32 lowercase hex digits, high 64 bits first): the
// row's ptx_checksum column, which the row checksum covers in the PTX's place, so that a
// read of the cubin alone (the launch path) is verified without reading the PTX.
std::string ptx_checksum(std::string_view ptx);

// XXH3-128, as the same 32 hex digits, over a version tag and the length-prefixed key, name, arch, meta_json,
// cubin and ptx_digest (the row's ptx_checksum). The key is included so that a blob copied
// onto another key's row fails the check; name, arch and meta_json so that the metadata
// the runtime parses is as trustworthy as the cubin. Rows of schemas 001 and 002 were
// summed otherwise and never match this.
std::string row_checksum(const Entry& entry, std::string_view ptx_digest);

}  // namespace attnjit::store
