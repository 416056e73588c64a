#include "runtime/kernel_registry.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#include "attnjit/error.hpp"
#include "util/log.hpp"

namespace attnjit::runtime {

struct KernelRegistry::Slot {
  spec::KernelSpec spec;
  std::mutex build_mutex;
  std::atomic<bool> built{false};
  Artifact artifact;
  std::mutex load_mutex;
  std::atomic<bool> loaded[kMaxDevices] = {};
  LoadedKernel kernels[kMaxDevices];
  driver::Module modules[kMaxDevices];
};

namespace {

// How long a miss waits for another process compiling the same key: more than the slowest
// kernel's compile (the MLA wide tile, ~7 s on the H200 host), less than a stopped holder
// should cost (after it, this process compiles the kernel itself).
constexpr int kCompileClaimWaitMs = 120'000;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

spec::KeyInputs key_inputs(const spec::KernelSpec& s, const render::RenderedUnit& unit) {
  return {ATTNJIT_VERSION, render::headers_hash(unit), unit.source, compile::nvrtc_version(),
          compile::join_options(compile::nvrtc_options(s.arch))};
}

// A store row is used only if its recorded inputs are this request's: the rendered
// source, the NVRTC options and version, the entry point and the arch. The key
// hashes all of them, so a mismatch means a row the key does not describe.
bool built_from_same_inputs(const store::Entry& e, const nlohmann::json& meta, const Artifact& a,
                            const spec::KernelSpec& s, std::string* why) {
  auto text = [&](const char* field) {
    const auto it = meta.is_object() ? meta.find(field) : meta.end();
    return it != meta.end() && it->is_string() ? it->get<std::string>() : std::string("\x01missing");
  };
  if (!meta.is_object()) *why = "no metadata";
  else if (e.arch != s.arch.str()) *why = "arch " + e.arch;
  else if (text("source") != a.unit.source) *why = "another rendered source";
  else if (text("options") != a.options) *why = "other NVRTC options";
  else if (text("nvrtc") != compile::nvrtc_version()) *why = "NVRTC " + text("nvrtc");
  else if (text("entry") != a.unit.entry) *why = "another entry point";
  else if (meta.contains("resources") && !meta["resources"].is_object()) *why = "malformed resources";
  else if (meta.contains("log") && !meta["log"].is_string()) *why = "malformed log";
  else return true;
  return false;
}

}  // namespace

namespace {
// Registries get ids that are never reused, so a thread's memo (below) never matches a new
// registry that happens to live at a dead one's address.
std::atomic<uint64_t> g_next_registry_id{1};

// A thread's last launch-path answer: engines launch the same few kernels over and over,
// and an equal spec skips the map's hash and its reader lock (~40 of ~110 ns). A slot,
// once loaded on a device, is never unloaded or freed while its registry lives.
struct LastKernel {
  uint64_t registry_id = 0;
  int device = -1;
  spec::KernelSpec spec;
  const LoadedKernel* kernel = nullptr;
};
thread_local LastKernel t_last_kernel;
}  // namespace

KernelRegistry::KernelRegistry(const RuntimeOptions& options)
    : options_(options), id_(g_next_registry_id.fetch_add(1, std::memory_order_relaxed)) {
  if (options_.use_store) {
    store::StoreOptions so;
    so.dir = options_.cache_dir;
    so.max_bytes = options_.cache_max_bytes;
    store_ = store::CubinStore::open(so);
  }
}

KernelRegistry::~KernelRegistry() = default;

std::string KernelRegistry::key_of(const spec::KernelSpec& s) const {
  render::RenderedUnit unit = render::render(s);
  return spec::cache_key(s, key_inputs(s, unit));
}

KernelRegistry::Slot* KernelRegistry::find_slot(const spec::KernelSpec& s) const {
  std::shared_lock lock(map_mutex_);
  auto it = slots_.find(s);
  return it == slots_.end() ? nullptr : it->second.get();
}

KernelRegistry::Slot& KernelRegistry::slot_for(const spec::KernelSpec& s) {
  if (Slot* slot = find_slot(s)) return *slot;
  std::unique_lock lock(map_mutex_);
  auto& ptr = slots_[s];
  if (!ptr) {
    ptr = std::make_unique<Slot>();
    ptr->spec = s;
  }
  return *ptr;
}

void KernelRegistry::build(Slot& slot, Origin* origin) {
  const spec::KernelSpec& s = slot.spec;
  Artifact a;
  a.name = s.name();
  a.unit = render::render(s);
  a.key = spec::cache_key(s, key_inputs(s, a.unit));
  a.options = compile::join_options(compile::nvrtc_options(s.arch));
  // A store entry built from this key's inputs, if there is one.
  auto from_store = [&]() {
    auto t0 = std::chrono::steady_clock::now();
    auto hit = store_->get(a.key, store::Blobs::kCubin);  // a launch needs no PTX
    if (!hit) return false;
    std::string why;
    const auto meta = nlohmann::json::parse(hit->meta_json, nullptr, false);
    if (!built_from_same_inputs(*hit, meta, a, s, &why)) {
      // Intact (the checksum held) but not what this key means here: an imported
      // bundle, or a key that missed an input. Never run it; replace it.
      util::log().warn("store entry {} ({}) was built from other inputs ({}); compiling it again", a.name, a.key, why);
      store_->remove(a.key);
      return false;
    }
    a.cubin = std::move(hit->cubin);
    a.ptx_bytes = static_cast<size_t>(hit->ptx_bytes);
    a.compile_ms = hit->compile_ms;
    a.resources = compile::Resources::from_json(meta.value("resources", nlohmann::json::object()));
    a.log = meta.value("log", "");
    a.from_store = true;
    store_hits_ += 1;
    store_load_us_ += static_cast<int64_t>(ms_since(t0) * 1000);
    util::log().debug("store hit {} ({})", a.name, a.key);
    slot.artifact = std::move(a);
    if (origin) *origin = Origin::kStore;
    return true;
  };
  // Held until the entry is put: another process missing this key waits for it.
  std::unique_ptr<store::CompileClaim> claim;
  if (store_) {
    if (from_store()) return;
    claim = store_->claim_compile(a.key, kCompileClaimWaitMs);
    if (claim && claim->waited() && from_store()) return;
  }
  compile::CompileResult r = compile::compile(a.name, a.unit, s.arch);
  compiles_ += 1;
  compile_us_ += static_cast<int64_t>(r.compile_ms * 1000);
  a.cubin = std::move(r.cubin);
  a.ptx = std::move(r.ptx);
  a.ptx_bytes = a.ptx.size();
  a.resources = r.resources;
  a.log = std::move(r.log);
  a.compile_ms = r.compile_ms;
  if (store_) {
    store::Entry e;
    e.key = a.key;
    e.name = a.name;
    e.arch = s.arch.str();
    e.cubin = a.cubin;
    e.ptx = a.ptx;
    e.compile_ms = a.compile_ms;
    e.meta_json = nlohmann::json{{"spec", s.to_json()},
                                 {"resources", a.resources.to_json()},
                                 {"log", a.log},
                                 {"options", a.options},
                                 {"entry", a.unit.entry},
                                 {"source", a.unit.source},
                                 {"nvrtc", compile::nvrtc_version()}}
                      .dump();
    store_->put(e);
  }
  slot.artifact = std::move(a);
  if (origin) *origin = Origin::kCompiled;
}

std::string KernelRegistry::ptx(const spec::KernelSpec& s) {
  const Artifact& a = artifact(s);
  if (a.ptx.size() == a.ptx_bytes) return a.ptx;
  auto whole = store_ ? store_->get(a.key, store::Blobs::kCubinAndPtx) : std::nullopt;
  if (!whole || whole->cubin != a.cubin)
    throw Error(ErrorCode::kStore, fmt::format("{}: its store row ({}) is gone or damaged since its cubin was read; "
                                               "the PTX is not available", a.name, a.key));
  return std::move(whole->ptx);
}

const Artifact& KernelRegistry::artifact(const spec::KernelSpec& s, Origin* origin) {
  Slot& slot = slot_for(s);
  if (origin) *origin = Origin::kMemory;
  if (slot.built.load(std::memory_order_acquire)) return slot.artifact;
  std::lock_guard lock(slot.build_mutex);  // single flight: later callers wait here
  if (!slot.built.load(std::memory_order_relaxed)) {
    build(slot, origin);
    slot.built.store(true, std::memory_order_release);
  }
  return slot.artifact;
}

const LoadedKernel& KernelRegistry::load(Slot& slot, int device) {
  std::lock_guard lock(slot.load_mutex);
  if (slot.loaded[device].load(std::memory_order_relaxed)) return slot.kernels[device];
  const Artifact& a = artifact(slot.spec);
  // Another thread may be capturing a graph in global mode: a module load is
  // allowed to proceed beside it instead of invalidating it.
  driver::RelaxedCaptureScope relaxed;
  driver::Module module(device, a.cubin.data());
  LoadedKernel k;
  k.function = module.function(a.unit.entry.c_str());
  // The rendered TU static_asserts its shared memory, threads and min blocks against
  // the generator's figures, so those are the kernel's; reading the smem symbol back
  // would be a blocking copy on the legacy stream (which a global-mode capture
  // elsewhere forbids), so it is read only for a unit that declares no figure.
  k.launch = a.unit.launch;
  if (!k.launch.smem_bytes) k.launch.smem_bytes = module.global_int(a.unit.smem_symbol.c_str());
  driver::set_max_dynamic_smem(k.function, k.launch.smem_bytes);
  const int max_threads = driver::func_attributes(k.function).max_threads;
  if (k.launch.threads <= 0) k.launch.threads = max_threads;
  if (k.launch.threads > max_threads)
    throw Error(ErrorCode::kInternal, fmt::format("{}: the generator launches {} threads, the kernel allows {}",
                                                  a.name, k.launch.threads, max_threads));
  const render::Family* family = render::find_family(slot.spec.family);
  k.params_bytes = family ? family->params_bytes : 0;
  k.num_sms = driver::device_caps(device).sm_count;
  k.blocks_per_sm = driver::max_active_blocks(k.function, k.launch.threads, k.launch.smem_bytes);
  slot.modules[device] = std::move(module);
  slot.kernels[device] = k;
  module_loads_ += 1;
  slot.loaded[device].store(true, std::memory_order_release);
  return slot.kernels[device];
}

const LoadedKernel& KernelRegistry::kernel(const spec::KernelSpec& s, int device, CUstream stream) {
  lookups_.fetch_add(1, std::memory_order_relaxed);
  if (device < 0 || device >= kMaxDevices)
    throw Error(ErrorCode::kUnsupported, fmt::format("device {} is beyond the {} devices attnjit tracks", device, kMaxDevices));
  LastKernel& last = t_last_kernel;
  if (last.registry_id == id_ && last.device == device && last.spec == s) return *last.kernel;
  if (Slot* slot = find_slot(s); slot && slot->loaded[device].load(std::memory_order_acquire)) {
    last = LastKernel{id_, device, s, &slot->kernels[device]};
    return slot->kernels[device];
  }
  if (driver::is_capturing(stream))
    throw Error(ErrorCode::kNotPrewarmed,
                fmt::format("kernel {} is not loaded on device {} and the stream is capturing a graph: "
                            "prewarm this spec (run the op once before capture, or `attnjit prewarm`)",
                            s.name(), device));
  return load(slot_for(s), device);
}

struct KernelRegistry::ScratchEntry {
  driver::DeviceBuffer workspace;
  driver::DeviceBuffer semaphores;
  size_t semaphore_count = 0;
  std::vector<driver::DeviceBuffer> retired;  // outgrown, kept for graphs that captured them
};

Scratch KernelRegistry::scratch(int device, size_t ws_bytes, size_t sem_count, CUstream stream) {
  const ScratchKey key{device, driver::stream_id(stream)};
  {
    std::shared_lock lock(scratch_mutex_);
    auto it = scratch_.find(key);
    if (it != scratch_.end() && it->second->workspace.bytes() >= ws_bytes &&
        it->second->semaphore_count >= sem_count)
      return {it->second->workspace.ptr(), static_cast<unsigned*>(it->second->semaphores.ptr())};
  }
  if (driver::is_capturing(stream))
    throw Error(ErrorCode::kNotPrewarmed,
                fmt::format("split-KV scratch for device {} must grow to {} bytes while the stream is "
                            "capturing: run the op once with these sizes before capture",
                            device, ws_bytes));
  std::unique_lock lock(scratch_mutex_);
  auto& entry = scratch_[key];
  if (!entry) entry = std::make_unique<ScratchEntry>();
  if (entry->workspace.bytes() < ws_bytes || entry->semaphore_count < sem_count) {
    driver::RelaxedCaptureScope relaxed;  // allocating must not break another thread's capture
    const size_t ws = std::max(ws_bytes + ws_bytes / 2, entry->workspace.bytes());
    const size_t sc = std::max(sem_count * 2, entry->semaphore_count);
    // Built aside and committed only once all of it succeeded: a failed allocation
    // leaves the old (still valid, still zeroed) pair in place.
    driver::DeviceBuffer workspace(ws), semaphores(sc * sizeof(unsigned));
    // Zeroed on the stream that will use them: ordered before its kernels, and
    // no device-wide synchronization.
    driver::memset_d32_async(semaphores.get(), 0u, sc, stream);
    // Queued kernels or captured graphs may still use the old buffers: keep them.
    if (entry->workspace.bytes()) entry->retired.push_back(std::move(entry->workspace));
    if (entry->semaphores.bytes()) entry->retired.push_back(std::move(entry->semaphores));
    entry->workspace = std::move(workspace);
    entry->semaphores = std::move(semaphores);
    entry->semaphore_count = sc;
  }
  return {entry->workspace.ptr(), static_cast<unsigned*>(entry->semaphores.ptr())};
}

RuntimeStats KernelRegistry::stats() const {
  RuntimeStats st;
  st.lookups = lookups_.load();
  st.compiles = compiles_.load();
  st.store_hits = store_hits_.load();
  st.module_loads = module_loads_.load();
  st.compile_ms = compile_us_.load() / 1000.0;
  st.store_load_ms = store_load_us_.load() / 1000.0;
  st.cache_path = store_ ? store_->path() : ":memory:";
  return st;
}

}  // namespace attnjit::runtime

namespace attnjit {

Runtime::Runtime(const RuntimeOptions& options)
    : registry_(std::make_unique<runtime::KernelRegistry>(options)) {}
Runtime::~Runtime() = default;

Runtime& Runtime::global() {
  static Runtime* rt = new Runtime();  // never destroyed: modules outlive static teardown
  return *rt;
}

RuntimeStats Runtime::stats() const { return registry_->stats(); }
runtime::KernelRegistry& Runtime::registry() { return *registry_; }

}  // namespace attnjit
