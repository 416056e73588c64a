// The CUDA driver API loaded at run time: dlopen("libcuda.so.1") + cuGetProcAddress_v2.
#include "driver/cuda_driver.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "attnjit/error.hpp"
#include "driver/driver_api.hpp"
#include "driver/launch_attributes.hpp"
#include "util/log.hpp"

namespace attnjit::driver {

namespace detail {
Api g_api;
std::atomic<bool> g_ready{false};
std::atomic<bool> g_exiting{false};
void ensure_context() { (void)current_device(); }
}  // namespace detail

using namespace detail;

namespace {
constexpr int kMaxDevicesCached = 64;

// Every entry point is requested at this ABI version, not the toolkit's CUDA_VERSION, so a
// toolkit upgrade never silently swaps a signature (CUDA 13 changed cuCtxGetDevice and
// cuCtxSynchronize, for example). cuGetProcAddress_v2 itself needs a CUDA 12.0 driver.
constexpr int kApiVersion = 12000;
constexpr int kMaxDevices = 64;

std::once_flag g_once;
char g_reason[512] = {};  // a char array, not std::string: no constructor or destructor to order
int g_driver_version = 0;
int g_device_count = 0;
CUdevice g_devices[kMaxDevices] = {};
std::once_flag g_ctx_once[kMaxDevices];
std::atomic<CUcontext> g_ctx[kMaxDevices] = {};

void set_reason(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(g_reason, sizeof(g_reason), fmt, ap);
  va_end(ap);
}

const char* error_name(CUresult r) {
  const char* s = nullptr;
  if (g_api.cuGetErrorName && g_api.cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
  return nullptr;
}

std::string describe(CUresult r) {
  std::string out;
  if (const char* name = error_name(r)) {
    out = name;
  } else {
    out = "CUresult " + std::to_string(static_cast<int>(r));
  }
  const char* text = nullptr;
  if (g_api.cuGetErrorString && g_api.cuGetErrorString(r, &text) == CUDA_SUCCESS && text) {
    out += std::string(" (") + text + ")";
  }
  return out;
}

void mark_exiting() { g_exiting.store(true, std::memory_order_release); }

// Runs once. Never throws: every failure becomes g_reason and g_ready stays false.
void open_driver() {
  // Never dlclose'd: modules and contexts must outlive every static destructor that uses them.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    set_reason(
        "libcuda.so.1 not found (no NVIDIA driver): compiling and the cache still work; "
        "launching needs a GPU [dlopen: %s]",
        err ? err : "unknown error");
    return;
  }
  auto get_proc =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!get_proc) {
    set_reason(
        "libcuda.so.1 has no cuGetProcAddress_v2: the NVIDIA driver is older than CUDA 12.0; "
        "update the driver to launch kernels (compiling and the cache still work)");
    return;
  }

  Api api;
  bool ok = true;
  auto resolve = [&](const char* name, void** slot) {
    if (!ok) return;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    // LEGACY_STREAM: a null CUstream means the legacy default stream, as in the CUDA runtime.
    CUresult r = get_proc(name, slot, kApiVersion, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);
    if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || !*slot) {
      set_reason("cuGetProcAddress(%s, %d) failed: %s (result %d, status %d); update the driver",
                 name, kApiVersion,
                 status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? "driver too old"
                                                                       : "symbol not found",
                 static_cast<int>(r), static_cast<int>(status));
      ok = false;
    }
  };
#define ATTNJIT_RESOLVE(name, type) resolve(#name, reinterpret_cast<void**>(&api.name));
  ATTNJIT_DRIVER_ENTRY_POINTS(ATTNJIT_RESOLVE)
#undef ATTNJIT_RESOLVE
  if (!ok) return;
  g_api = api;

  int version = 0;
  if (g_api.cuDriverGetVersion(&version) != CUDA_SUCCESS) version = 0;
  CUresult r = g_api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    set_reason("cuInit failed: %s [driver %d]; compiling and the cache still work",
               describe(r).c_str(), version);
    return;
  }
  int count = 0;
  r = g_api.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count <= 0) {
    set_reason("no CUDA device visible (cuDeviceGetCount: %s, count %d)", describe(r).c_str(),
               count);
    return;
  }
  if (count > kMaxDevices) count = kMaxDevices;
  for (int i = 0; i < count; ++i) {
    r = g_api.cuDeviceGet(&g_devices[i], i);
    if (r != CUDA_SUCCESS) {
      set_reason("cuDeviceGet(%d) failed: %s", i, describe(r).c_str());
      return;
    }
  }
  g_driver_version = version;
  g_device_count = count;
  std::atexit(mark_exiting);
  g_ready.store(true, std::memory_order_release);
}

// The std::call_once body.
void load() {
  open_driver();
  try {
    if (g_ready.load(std::memory_order_acquire)) {
      util::log().debug("CUDA driver {} loaded, {} device(s)", g_driver_version, g_device_count);
    } else {
      util::log().debug("CUDA driver unavailable: {}", g_reason);
    }
  } catch (...) {
    // Logging must never turn a missing driver into a crash.
  }
}

void check_ordinal(int ordinal, const char* what) {
  if (ordinal < 0 || ordinal >= g_device_count) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string(what) + ": device ordinal expected 0.." +
                    std::to_string(g_device_count - 1) + ", given " + std::to_string(ordinal));
  }
}

int ordinal_of(CUdevice dev) {
  for (int i = 0; i < g_device_count; ++i) {
    if (g_devices[i] == dev) return i;
  }
  return static_cast<int>(dev);
}

// Pushes a context for the scope of a non-hot-path call and restores the caller's after.
class ScopedContext {
 public:
  explicit ScopedContext(CUcontext ctx) { check(g_api.cuCtxPushCurrent(ctx), "cuCtxPushCurrent"); }
  ~ScopedContext() {
    CUcontext popped = nullptr;
    (void)g_api.cuCtxPopCurrent(&popped);
  }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;
};

int attribute(CUdevice dev, CUdevice_attribute a, const char* what) {
  int v = 0;
  check(g_api.cuDeviceGetAttribute(&v, a, dev), what);
  return v;
}

// Clock attributes are informational (and deprecated in newer toolkits): 0 rather than a throw.
int attribute_or_zero(CUdevice dev, CUdevice_attribute a) {
  int v = 0;
  return g_api.cuDeviceGetAttribute(&v, a, dev) == CUDA_SUCCESS ? v : 0;
}

[[noreturn]] void throw_launch_error(CUresult r, const LaunchConfig& cfg) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "cuLaunchKernelEx(grid %ux%ux%u, block %ux%ux%u, cluster %ux%ux%u, smem %u%s)",
                cfg.grid[0], cfg.grid[1], cfg.grid[2], cfg.block[0], cfg.block[1], cfg.block[2],
                cfg.cluster[0], cfg.cluster[1], cfg.cluster[2], cfg.smem_bytes, cfg.pdl ? ", pdl" : "");
  check(r, buf);
  throw Error(ErrorCode::kInternal, "unreachable");
}

}  // namespace

bool is_available(std::string* reason) {
  std::call_once(g_once, load);
  bool ready = g_ready.load(std::memory_order_acquire);
  if (!ready && reason) *reason = g_reason;
  return ready;
}

void require_available() {
  std::string reason;
  if (!is_available(&reason)) throw Error(ErrorCode::kNoDevice, reason);
}

int driver_version() {
  return is_available() ? g_driver_version : 0;
}

int device_count() {
  return is_available() ? g_device_count : 0;
}

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  throw Error(ErrorCode::kDriver, std::string(what) + " failed: " + describe(r));
}

const DeviceCaps& device_caps(int ordinal) {
  static DeviceCaps caps[kMaxDevicesCached];
  static std::once_flag once[kMaxDevicesCached];
  ensure();
  check_ordinal(ordinal, "device_caps");
  if (ordinal >= kMaxDevicesCached)
    throw Error(ErrorCode::kUnsupported, "device_caps: more devices than attnjit caches");
  std::call_once(once[ordinal], [ordinal] {
    CUdevice dev = g_devices[ordinal];
    caps[ordinal].sm_major = attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cc major");
    caps[ordinal].sm_minor = attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cc minor");
    caps[ordinal].sm_count = attribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count");
  });
  return caps[ordinal];
}

DeviceInfo device_info(int ordinal) {
  ensure();
  check_ordinal(ordinal, "device_info");
  CUdevice dev = g_devices[ordinal];
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  check(g_api.cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName");
  info.name = name;
  info.sm_major = attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cc major");
  info.sm_minor = attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cc minor");
  info.sm_count = attribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count");
  size_t total = 0;
  check(g_api.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem");
  info.total_mem = static_cast<int64_t>(total);
  info.l2_bytes = attribute(dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 size");
  info.max_smem_per_block_optin =
      attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "smem optin");
  info.clock_khz = attribute_or_zero(dev, CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  info.mem_clock_khz = attribute_or_zero(dev, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
  info.mem_bus_width = attribute_or_zero(dev, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  return info;
}

int current_device() {
  ensure();
  CUcontext ctx = nullptr;
  check(g_api.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (!ctx) {
    // Same choice the CUDA runtime makes: device 0's primary context.
    check(g_api.cuCtxSetCurrent(context_for_device(0)), "cuCtxSetCurrent(device 0)");
    return 0;
  }
  CUdevice dev = 0;
  check(g_api.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  return ordinal_of(dev);
}

CUcontext context_for_device(int ordinal) {
  ensure();
  check_ordinal(ordinal, "context_for_device");
  if (CUcontext c = g_ctx[ordinal].load(std::memory_order_acquire)) return c;
  // Retained once and never released: modules loaded into it live as long as the process.
  // call_once retries if the retain throws.
  std::call_once(g_ctx_once[ordinal], [ordinal] {
    CUcontext c = nullptr;
    check(g_api.cuDevicePrimaryCtxRetain(&c, g_devices[ordinal]),
          ("cuDevicePrimaryCtxRetain(device " + std::to_string(ordinal) + ")").c_str());
    g_ctx[ordinal].store(c, std::memory_order_release);
  });
  return g_ctx[ordinal].load(std::memory_order_acquire);
}

// --- Module ------------------------------------------------------------------

Module::Module(int device, const void* image) {
  ensure();
  if (!image) throw Error(ErrorCode::kInvalidArgument, "Module: image is null");
  CUcontext ctx = context_for_device(device);
  ScopedContext scope(ctx);
  CUmodule m = nullptr;
  check(g_api.cuModuleLoadData(&m, image),
        ("cuModuleLoadData(device " + std::to_string(device) + ")").c_str());
  module_ = m;
  ctx_ = ctx;
}

Module::~Module() {
  if (!module_ || g_exiting.load(std::memory_order_acquire)) return;
  // Unload inside the module's own context; errors are ignored (a destructor must not throw).
  if (g_api.cuCtxPushCurrent(ctx_) == CUDA_SUCCESS) {
    (void)g_api.cuModuleUnload(module_);
    CUcontext popped = nullptr;
    (void)g_api.cuCtxPopCurrent(&popped);
  }
}

Module::Module(Module&& o) noexcept : module_(o.module_), ctx_(o.ctx_) {
  o.module_ = nullptr;
  o.ctx_ = nullptr;
}

Module& Module::operator=(Module&& o) noexcept {
  if (this != &o) {
    Module old(std::move(*this));  // unloads the previous module, if any
    module_ = o.module_;
    ctx_ = o.ctx_;
    o.module_ = nullptr;
    o.ctx_ = nullptr;
  }
  return *this;
}

int Module::global_int(const char* name) const {
  ensure();
  if (!module_) throw Error(ErrorCode::kInvalidArgument, "Module::global_int: no module loaded");
  ScopedContext scope(ctx_);
  CUdeviceptr p = 0;
  size_t bytes = 0;
  check(g_api.cuModuleGetGlobal(&p, &bytes, module_, name),
        (std::string("cuModuleGetGlobal(") + name + ")").c_str());
  if (bytes != sizeof(int))
    throw Error(ErrorCode::kInternal, std::string("module global '") + name + "' is not an int");
  int v = 0;
  check(g_api.cuMemcpyDtoH(&v, p, sizeof(v)), "cuMemcpyDtoH(module global)");
  return v;
}

int max_active_blocks(CUfunction f, int threads, int dynamic_smem) {
  ensure();
  int n = 0;
  check(g_api.cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, threads, static_cast<size_t>(dynamic_smem)),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  return n;
}

CUfunction Module::function(const char* name) const {
  ensure();
  if (!module_) throw Error(ErrorCode::kInvalidArgument, "Module::function: no module loaded");
  ScopedContext scope(ctx_);
  CUfunction f = nullptr;
  CUresult r = g_api.cuModuleGetFunction(&f, module_, name);
  if (r == CUDA_ERROR_NOT_FOUND) {
    throw Error(ErrorCode::kDriver,
                std::string("kernel '") + name + "' not found in the module (is it extern \"C\"?)");
  }
  check(r, (std::string("cuModuleGetFunction(") + name + ")").c_str());
  return f;
}

// --- functions and launch ------------------------------------------------------

FuncAttributes func_attributes(CUfunction f) {
  ensure();
  FuncAttributes a;
  check(g_api.cuFuncGetAttribute(&a.num_regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f), "num regs");
  check(g_api.cuFuncGetAttribute(&a.local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f),
        "local bytes");
  check(g_api.cuFuncGetAttribute(&a.static_smem_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f),
        "static smem");
  check(g_api.cuFuncGetAttribute(&a.max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f),
        "max threads");
  return a;
}

void set_max_dynamic_smem(CUfunction f, int bytes) {
  ensure();
  CUresult r = g_api.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
  if (r != CUDA_SUCCESS) {
    check(r, ("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, " + std::to_string(bytes) + ")")
                 .c_str());
  }
}

void allow_non_portable_cluster(CUfunction f) {
  ensure();
  check(g_api.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
        "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)");
}

void launch(CUfunction f, const LaunchConfig& cfg, void** args) {
  ensure();
  // Stack-only: no allocation and no lock on the launch path.
  CUlaunchAttribute attrs[kMaxLaunchAttributes] = {};
  CUlaunchConfig lc = {};
  lc.gridDimX = cfg.grid[0];
  lc.gridDimY = cfg.grid[1];
  lc.gridDimZ = cfg.grid[2];
  lc.blockDimX = cfg.block[0];
  lc.blockDimY = cfg.block[1];
  lc.blockDimZ = cfg.block[2];
  lc.sharedMemBytes = cfg.smem_bytes;
  lc.hStream = cfg.stream;
  lc.attrs = attrs;
  lc.numAttrs = static_cast<unsigned>(launch_attributes(cfg, attrs));
  CUresult r = g_api.cuLaunchKernelEx(&lc, f, args, nullptr);
  if (r != CUDA_SUCCESS) throw_launch_error(r, cfg);
}

bool is_capturing(CUstream stream) {
  ensure();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = g_api.cuStreamIsCapturing(stream, &status);
  // Asking about the legacy stream while another stream captures in global mode: treat it as
  // capturing, since any work we'd do on it now would break that capture.
  if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) return true;
  check(r, "cuStreamIsCapturing");
  // ACTIVE or INVALIDATED: the stream is still in capture mode either way.
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

RelaxedCaptureScope::RelaxedCaptureScope() {
  ensure();
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  check(g_api.cuThreadExchangeStreamCaptureMode(&mode), "cuThreadExchangeStreamCaptureMode");
  previous_ = static_cast<int>(mode);
  active_ = true;
}

RelaxedCaptureScope::~RelaxedCaptureScope() {
  if (!active_) return;
  CUstreamCaptureMode mode = static_cast<CUstreamCaptureMode>(previous_);
  g_api.cuThreadExchangeStreamCaptureMode(&mode);  // restores the thread's mode; cannot fail usefully
}

}  // namespace attnjit::driver
