// libFuzzer target: `cache import` of a bundle of arbitrary bytes (CubinStore::import_from).
// The import adds only rows whose checksum holds, or refuses with Error(kStore or
// kInvalidArgument); either way the live store stays intact and serves its own entry.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "fuzz/fuzz_store_file.hpp"

namespace {

namespace fz = attnjit::fuzz;
namespace fx = attnjit::store::fixtures;

const attnjit::store::Entry& own_entry() {
  static const attnjit::store::Entry e = fx::make_entry("live-key-0123456789abcdef", 64);
  return e;
}

// One live store for the whole run (opening one per input would dominate the time);
// it is cleared back to its one entry after each input.
attnjit::store::CubinStore& live() {
  static std::unique_ptr<attnjit::store::CubinStore> store = [] {
    auto s = fz::open_quick(fz::fresh_dir("live"));
    s->put(own_entry());
    return s;
  }();
  return *store;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fz::quiet_store_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string bundle_dir = fz::fresh_dir("bundle");
  const std::string bundle = bundle_dir + "/bundle.sqlite3";
  fz::write_file(bundle, data, size);
  auto& store = live();
  int64_t added = 0;
  try {
    added = store.import_from(bundle);
  } catch (const attnjit::Error& e) {
    fz::require_code(e, {attnjit::ErrorCode::kStore, attnjit::ErrorCode::kInvalidArgument});
  }
  fz::check(added >= 0, "a negative import count");
  const auto report = store.verify(/*repair=*/false);
  fz::check(report.integrity_ok && report.bad == 0, "an import left bad rows in the live store",
            std::to_string(report.bad));
  const auto back = store.get(own_entry().key);
  fz::check(back && fx::same(*back, own_entry()), "the live store lost its own entry");
  const size_t listed = store.list().size();
  fz::check(listed == static_cast<size_t>(1 + added), "the import count is not what the store holds",
            std::to_string(added) + " added, " + std::to_string(listed) + " listed");
  // Back to the one entry, so every input starts from the same store.
  store.clear();
  store.put(own_entry());
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::remove((bundle + suffix).c_str());
  return 0;
}
