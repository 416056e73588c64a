// Store test fixtures: entries whose content follows from the key (so any test can
// check one byte for byte), and stores opened on a folder.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "store/cubin_store.hpp"

namespace attnjit::store::fixtures {

inline Entry make_entry(const std::string& key, size_t cubin_bytes, size_t ptx_bytes = 64) {
  Entry e;
  e.key = key;
  e.name = "xqa.bf16." + key;
  e.arch = "sm_90a";
  e.cubin.resize(cubin_bytes);
  const size_t salt = key.size() + (key.empty() ? 0 : static_cast<unsigned char>(key.back()));
  for (size_t i = 0; i < cubin_bytes; ++i) e.cubin[i] = static_cast<char>((i * 131 + salt) & 0xff);
  e.ptx = std::string(ptx_bytes, 'p');
  e.meta_json = R"({"log":"ok","resources":{"registers":32},"key":")" + key + "\"}";
  e.compile_ms = 12.5;
  return e;
}

inline std::unique_ptr<CubinStore> open_store(const std::string& dir, int64_t max_bytes = 4LL << 30,
                                              int busy_timeout_ms = 30000) {
  StoreOptions options;
  options.dir = dir;
  options.max_bytes = max_bytes;
  options.busy_timeout_ms = busy_timeout_ms;
  return CubinStore::open(options);
}

inline bool same(const Entry& a, const Entry& b) {
  return a.key == b.key && a.name == b.name && a.arch == b.arch && a.cubin == b.cubin && a.ptx == b.ptx &&
         a.meta_json == b.meta_json;
}

}  // namespace attnjit::store::fixtures
