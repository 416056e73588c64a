// libFuzzer target: a store file of arbitrary bytes. The bytes become cubins.sqlite3 in
// a fresh private folder; the store opens it (quarantining what it cannot use) and
// serves get/put/contains without throwing; verify/list/stats answer or refuse with
// Error(kStore); an entry put is then read back byte for byte, and a repair leaves no
// bad rows in a file it can write.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_store_file.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  attnjit::fuzz::quiet_store_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fz = attnjit::fuzz;
  namespace fx = attnjit::store::fixtures;
  const std::string dir = fz::fresh_dir("store");
  fz::write_file(dir + "/cubins.sqlite3", data, size);
  {
    auto store = fz::open_quick(dir);  // never throws for a bad file in a good folder
    fz::admin_call([&] { store->stats(); });
    fz::admin_call([&] {
      int reads = 0;
      for (const auto& info : store->list()) {
        if (++reads > 16) break;
        if (auto e = store->get(info.key)) fz::check(e->key == info.key, "get returned another key", info.key);
      }
    });
    fz::check(!store->get("no-such-key"), "a key never put was found");
    const attnjit::store::Entry entry = fx::make_entry("fuzz-key-0123456789abcdef", 96);
    store->put(entry);
    fz::check(store->contains(entry.key), "an entry just put is not there", dir);
    const auto back = store->get(entry.key);
    fz::check(back && fx::same(*back, entry), "an entry just put reads back different", dir);
    fz::admin_call([&] {
      const auto report = store->verify(/*repair=*/true);
      fz::check(report.bad == static_cast<int64_t>(report.bad_keys.size()), "verify's bad count and keys differ");
    });
    fz::admin_call([&] {
      // A file SQLite opens read-only (say, a header from a newer SQLite) is served through
      // a read-only attach: its bad rows are skipped on read but cannot be deleted.
      const auto stats = store->stats();
      const auto report = store->verify(/*repair=*/false);
      fz::check(report.bad == 0 || stats.in_memory, "verify still finds bad rows after a repair",
                std::to_string(report.bad) + " bad; " + stats.note);
    });
    fz::admin_call([&] { store->gc(0); });
  }
  return 0;
}
