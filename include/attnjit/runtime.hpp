// attnjit::Runtime: the process's kernel registry, its cubin store and compile
// statistics. Ops use Runtime::global() unless given one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace attnjit {

struct RuntimeOptions {
  std::string cache_dir;               // empty: $ATTNJIT_CACHE_DIR, $XDG_CACHE_HOME/attnjit, ~/.cache/attnjit
  int64_t cache_max_bytes = 4LL << 30; // LRU eviction above this
  bool use_store = true;               // false: compile in memory only
};

struct RuntimeStats {
  int64_t lookups = 0;          // launch-path lookups
  int64_t compiles = 0;         // NVRTC compiles in this process
  int64_t store_hits = 0;       // cubins read from the store
  int64_t module_loads = 0;
  double compile_ms = 0;        // total NVRTC time in this process
  double store_load_ms = 0;     // total time fetching cubins from the store
  std::string cache_path;       // the store file, or ":memory:"
};

namespace runtime {
class KernelRegistry;
}

class Runtime {
 public:
  explicit Runtime(const RuntimeOptions& options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The process-wide runtime (created on first use with default options).
  static Runtime& global();

  RuntimeStats stats() const;
  runtime::KernelRegistry& registry();  // internal: ops, the CLI and tests

 private:
  std::unique_ptr<runtime::KernelRegistry> registry_;
};

}  // namespace attnjit
