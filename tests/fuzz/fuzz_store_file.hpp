// What the store fuzz targets share: quiet logging, a fresh private folder per input,
// a small entry, and the rule that the store's only exception is an attnjit::Error.
#pragma once

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "common/store_fixtures.hpp"
#include "fuzz/fuzz_check.hpp"
#include "fuzz/fuzz_temp.hpp"
#include "store/cubin_store.hpp"
#include "util/log.hpp"

namespace attnjit::fuzz {

// A quarantine warning per input would drown libFuzzer's output; ATTNJIT_LOG_LEVEL wins.
inline void quiet_store_logs() {
  if (!std::getenv("ATTNJIT_LOG_LEVEL")) util::log().set_level(spdlog::level::off);
}

// <private_dir>/<name>, empty and 0700 (the store refuses folders others can write).
inline std::string fresh_dir(const std::string& name) {
  const std::string dir = private_dir() + "/" + name;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (mkdir(dir.c_str(), 0700) != 0) fail("mkdir", dir);
  return dir;
}

inline std::unique_ptr<store::CubinStore> open_quick(const std::string& dir) {
  // A short busy timeout: nothing else holds these files, and a hang must not hide as a wait.
  return store::fixtures::open_store(dir, 4LL << 30, /*busy_timeout_ms=*/200);
}

// Runs an admin call, which may refuse with Error(kStore) on a file it cannot repair.
template <class F>
void admin_call(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    require_code(e, {ErrorCode::kStore});
  }
}

}  // namespace attnjit::fuzz
