// KernelRegistry: spec -> compiled artifact (store-backed, single-flight) and
// spec -> loaded function per device. The launch-path lookup takes one shared
// lock and allocates nothing.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "attnjit/runtime.hpp"
#include "compile/nvrtc_compiler.hpp"
#include "render/family.hpp"
#include "driver/cuda_driver.hpp"
#include "spec/kernel_spec.hpp"
#include "store/cubin_store.hpp"

namespace attnjit::runtime {

constexpr int kMaxDevices = 16;

// What a spec compiles to: identical whether compiled here or read from the store.
struct Artifact {
  std::string key;
  std::string name;
  render::RenderedUnit unit;
  std::string cubin;
  std::string ptx;        // empty when the cubin came from the store: KernelRegistry::ptx reads it
  size_t ptx_bytes = 0;   // its length either way
  compile::Resources resources;
  std::string log;
  std::string options;
  double compile_ms = 0;
  bool from_store = false;
};

struct LoadedKernel {
  CUfunction function = nullptr;
  render::LaunchMetadata launch;  // the generator's, as rendered: threads, smem, cluster, ...
  size_t params_bytes = 0;        // the family's Params size (launch_kernel<Params> checks it)
  int blocks_per_sm = 0;          // the occupancy the driver reports for launch.threads/smem
  int num_sms = 0;
};

enum class Origin { kMemory, kStore, kCompiled };

// Split-KV scratch owned by the runtime, for ops whose API has no workspace argument.
struct Scratch {
  void* workspace = nullptr;
  unsigned* semaphores = nullptr;  // zeroed at allocation; kernels leave them zero
};

class KernelRegistry {
 public:
  explicit KernelRegistry(const RuntimeOptions& options);
  ~KernelRegistry();

  // Compile or fetch; no GPU needed. Concurrent calls for one spec compile once.
  const Artifact& artifact(const spec::KernelSpec& spec, Origin* origin = nullptr);

  // The artifact's PTX (inspect): a store hit reads only the cubin, so this reads the row
  // again, whole, and checks the PTX against its digest. Throws Error(kStore) when the row
  // is gone or damaged since.
  std::string ptx(const spec::KernelSpec& spec);

  // The cache key of a spec without compiling it.
  std::string key_of(const spec::KernelSpec& spec) const;

  // Launch path: the loaded function for the spec on `device`. During stream
  // capture a miss throws Error(kNotPrewarmed) instead of compiling or loading.
  const LoadedKernel& kernel(const spec::KernelSpec& spec, int device, CUstream stream);

  // One scratch per (device, stream), so concurrent streams never share partials.
  // Growing it during stream capture throws Error(kNotPrewarmed). Outgrown
  // buffers are kept, never freed: a captured graph may still point at them.
  Scratch scratch(int device, size_t workspace_bytes, size_t semaphore_count, CUstream stream);

  store::CubinStore* store() { return store_.get(); }
  RuntimeStats stats() const;

 private:
  struct Slot;
  Slot& slot_for(const spec::KernelSpec& spec);
  Slot* find_slot(const spec::KernelSpec& spec) const;
  void build(Slot& slot, Origin* origin);
  const LoadedKernel& load(Slot& slot, int device);

  RuntimeOptions options_;
  const uint64_t id_;  // unique over the process's life (the launch path's per-thread memo)
  std::unique_ptr<store::CubinStore> store_;
  mutable std::shared_mutex map_mutex_;
  std::unordered_map<spec::KernelSpec, std::unique_ptr<Slot>, spec::KernelSpecHash> slots_;

  struct ScratchEntry;
  struct ScratchKey {
    int device;
    unsigned long long stream_id;  // not the handle: see driver::stream_id
    bool operator==(const ScratchKey& o) const { return device == o.device && stream_id == o.stream_id; }
  };
  struct ScratchKeyHash {
    size_t operator()(const ScratchKey& k) const noexcept {
      return std::hash<unsigned long long>()(k.stream_id) ^ static_cast<size_t>(k.device);
    }
  };
  std::shared_mutex scratch_mutex_;
  std::unordered_map<ScratchKey, std::unique_ptr<ScratchEntry>, ScratchKeyHash> scratch_;

  mutable std::atomic<int64_t> lookups_{0};
  std::atomic<int64_t> compiles_{0}, store_hits_{0}, module_loads_{0};
  std::atomic<int64_t> compile_us_{0}, store_load_us_{0};
};

}  // namespace attnjit::runtime
