// Writes the store seeds of the fuzz corpus (scripts/run_fuzzers.sh --make-seeds):
// a store file and an exported bundle, each holding two small verified entries.
// Not a fuzz target; the script then shrinks and varies them with sqlite3.
#include <cstdio>
#include <filesystem>
#include <string>

#include "fuzz/fuzz_store_file.hpp"

int main(int argc, char** argv) {
  namespace fz = attnjit::fuzz;
  namespace fx = attnjit::store::fixtures;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  const std::string dir = fz::fresh_dir("seed");
  {
    auto store = fz::open_quick(dir);
    store->put(fx::make_entry("seed-key-aaaaaaaaaaaaaaaaaaaaaaaa", 40, 8));
    store->put(fx::make_entry("seed-key-bbbbbbbbbbbbbbbbbbbbbbbb", 24, 0));
    std::filesystem::remove(out + "/bundle.sqlite3");
    if (store->export_to(out + "/bundle.sqlite3") != 2) {
      std::fprintf(stderr, "export did not copy both entries\n");
      return 1;
    }
  }  // closing the last connection checkpoints the WAL into the file
  std::filesystem::copy_file(dir + "/cubins.sqlite3", out + "/store.sqlite3",
                             std::filesystem::copy_options::overwrite_existing);
  return 0;
}
