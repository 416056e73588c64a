// The CUDA driver API loaded at run time: dlopen("libcuda.so.1") + cuGetProcAddress_v2.
#include "driver/cuda_driver.hpp"

#include <cudaTypedefs.h>  // PFN_* typedefs: the exact signature of each versioned entry point
#include <dlfcn.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "attnjit/error.hpp"
#include "util/log.hpp"

namespace attnjit::driver {
namespace {
constexpr int kMaxDevicesCached = 64;

// Every entry point is requested at this ABI version, not the toolkit's CUDA_VERSION, so a
// toolkit upgrade never silently swaps a signature (CUDA 13 changed cuCtxGetDevice and
// cuCtxSynchronize, for example). cuGetProcAddress_v2 itself needs a CUDA 12.0 driver.
constexpr int kApiVersion = 12000;
constexpr int kMaxDevices = 64;

// name, PFN type (the version valid at kApiVersion).
#define ATTNJIT_DRIVER_ENTRY_POINTS(X)                         \
  X(cuGetErrorName, PFN_cuGetErrorName_v6000)                  \
  X(cuGetErrorString, PFN_cuGetErrorString_v6000)              \
  X(cuInit, PFN_cuInit_v2000)                                  \
  X(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020)          \
  X(cuDeviceGet, PFN_cuDeviceGet_v2000)                        \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000)              \
  X(cuDeviceGetName, PFN_cuDeviceGetName_v2000)                \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000)      \
  X(cuDeviceTotalMem, PFN_cuDeviceTotalMem_v3020)              \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000) \
  X(cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000)                \
  X(cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000)                \
  X(cuCtxPushCurrent, PFN_cuCtxPushCurrent_v4000)              \
  X(cuCtxPopCurrent, PFN_cuCtxPopCurrent_v4000)                \
  X(cuCtxGetDevice, PFN_cuCtxGetDevice_v2000)                  \
  X(cuCtxSynchronize, PFN_cuCtxSynchronize_v2000)              \
  X(cuModuleLoadData, PFN_cuModuleLoadData_v2000)              \
  X(cuModuleUnload, PFN_cuModuleUnload_v2000)                  \
  X(cuModuleGetFunction, PFN_cuModuleGetFunction_v2000)        \
  X(cuFuncGetAttribute, PFN_cuFuncGetAttribute_v2020)          \
  X(cuFuncSetAttribute, PFN_cuFuncSetAttribute_v9000)          \
  X(cuLaunchKernelEx, PFN_cuLaunchKernelEx_v11060)             \
  X(cuStreamIsCapturing, PFN_cuStreamIsCapturing_v10000)       \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000)        \
  X(cuStreamCreate, PFN_cuStreamCreate_v2000)                  \
  X(cuStreamGetId, PFN_cuStreamGetId_v12000)                   \
  X(cuStreamDestroy, PFN_cuStreamDestroy_v4000)                \
  X(cuStreamBeginCapture, PFN_cuStreamBeginCapture_v10010)     \
  X(cuStreamEndCapture, PFN_cuStreamEndCapture_v10000)         \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags_v11040) \
  X(cuGraphLaunch, PFN_cuGraphLaunch_v10000)                   \
  X(cuGraphExecDestroy, PFN_cuGraphExecDestroy_v10000)         \
  X(cuGraphDestroy, PFN_cuGraphDestroy_v10000)                 \
  X(cuMemAlloc, PFN_cuMemAlloc_v3020)                          \
  X(cuMemFree, PFN_cuMemFree_v3020)                            \
  X(cuMemcpyHtoD, PFN_cuMemcpyHtoD_v3020)                      \
  X(cuMemcpyDtoH, PFN_cuMemcpyDtoH_v3020)                      \
  X(cuMemsetD8, PFN_cuMemsetD8_v3020)                          \
  X(cuMemsetD32, PFN_cuMemsetD32_v3020)                        \
  X(cuEventCreate, PFN_cuEventCreate_v2000)                    \
  X(cuEventRecord, PFN_cuEventRecord_v2000)                    \
  X(cuEventSynchronize, PFN_cuEventSynchronize_v2000)          \
  X(cuEventElapsedTime, PFN_cuEventElapsedTime_v2000)          \
  X(cuEventDestroy, PFN_cuEventDestroy_v4000)                  \
  X(cuModuleGetGlobal, PFN_cuModuleGetGlobal_v3020)            \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, PFN_cuOccupancyMaxActiveBlocksPerMultiprocessor_v6050)

// Plain function pointers, written once under g_once and only read afterwards: the launch
// path takes no lock. Everything here is constant-initialized, so no static-init-order issue.
struct Api {
#define ATTNJIT_DECLARE(name, type) type name = nullptr;
  ATTNJIT_DRIVER_ENTRY_POINTS(ATTNJIT_DECLARE)
#undef ATTNJIT_DECLARE
};

Api g_api;
std::once_flag g_once;
std::atomic<bool> g_ready{false};
// Set by an atexit handler: once the process is exiting, libcuda may already be torn down,
// so destructors skip unloading and freeing (the OS reclaims everything anyway).
std::atomic<bool> g_exiting{false};
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

// The fast check every entry point starts with: one atomic load once the driver is up.
inline void ensure() {
  if (!g_ready.load(std::memory_order_acquire)) require_available();
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

// Makes some context current on this thread (device 0's primary one if none is).
void ensure_context() { (void)current_device(); }

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
  std::snprintf(buf, sizeof(buf), "cuLaunchKernelEx(grid %ux%ux%u, block %ux%ux%u, smem %u%s)",
                cfg.grid[0], cfg.grid[1], cfg.grid[2], cfg.block[0], cfg.block[1], cfg.block[2],
                cfg.smem_bytes, cfg.pdl ? ", pdl" : "");
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

void launch(CUfunction f, const LaunchConfig& cfg, void** args) {
  ensure();
  // Stack-only: no allocation and no lock on the launch path.
  CUlaunchAttribute attrs[1] = {};
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
  lc.numAttrs = 0;
  if (cfg.pdl) {
    // Lets this kernel start while the previous one on the stream finishes (griddepcontrol).
    attrs[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[0].value.programmaticStreamSerializationAllowed = 1;
    lc.numAttrs = 1;
  }
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

// --- memory helpers ------------------------------------------------------------

CUdeviceptr mem_alloc(size_t bytes) {
  ensure();
  if (bytes == 0) return 0;
  ensure_context();
  CUdeviceptr p = 0;
  check(g_api.cuMemAlloc(&p, bytes), ("cuMemAlloc(" + std::to_string(bytes) + " bytes)").c_str());
  return p;
}

void mem_free(CUdeviceptr p) noexcept {
  if (!p || !g_ready.load(std::memory_order_acquire) ||
      g_exiting.load(std::memory_order_acquire)) {
    return;
  }
  (void)g_api.cuMemFree(p);
}

void memcpy_htod(CUdeviceptr dst, const void* src, size_t bytes) {
  ensure();
  ensure_context();
  check(g_api.cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
}

void memcpy_dtoh(void* dst, CUdeviceptr src, size_t bytes) {
  ensure();
  ensure_context();
  check(g_api.cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
}

void memset_d8(CUdeviceptr dst, unsigned char value, size_t bytes) {
  ensure();
  ensure_context();
  check(g_api.cuMemsetD8(dst, value, bytes), "cuMemsetD8");
}

void memset_d32(CUdeviceptr dst, unsigned value, size_t count) {
  ensure();
  ensure_context();
  check(g_api.cuMemsetD32(dst, value, count), "cuMemsetD32");
}

void stream_sync(CUstream stream) {
  ensure();
  if (!stream) ensure_context();  // the legacy stream belongs to the current context
  check(g_api.cuStreamSynchronize(stream), "cuStreamSynchronize");
}

unsigned long long stream_id(CUstream stream) {
  ensure();
  if (!stream) ensure_context();
  unsigned long long id = 0;
  check(g_api.cuStreamGetId(stream, &id), "cuStreamGetId");
  return id;
}

CUstream stream_create() {
  ensure_context();
  CUstream s = nullptr;
  check(g_api.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return s;
}

void stream_destroy(CUstream stream) noexcept {
  if (stream && g_ready.load(std::memory_order_acquire) && !g_exiting.load()) (void)g_api.cuStreamDestroy(stream);
}

void begin_capture(CUstream stream) {
  ensure();
  check(g_api.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
}

CapturedGraph end_capture(CUstream stream) {
  ensure();
  CUgraph graph = nullptr;
  check(g_api.cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
  CapturedGraph g;
  g.graph = graph;
  return g;
}

CapturedGraph::~CapturedGraph() {
  if (g_exiting.load() || !g_ready.load(std::memory_order_acquire)) return;
  if (exec) (void)g_api.cuGraphExecDestroy(exec);
  if (graph) (void)g_api.cuGraphDestroy(graph);
}

void CapturedGraph::launch(CUstream stream) {
  ensure();
  if (!exec) check(g_api.cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
  check(g_api.cuGraphLaunch(exec, stream), "cuGraphLaunch");
}

void ctx_sync() {
  ensure();
  ensure_context();
  check(g_api.cuCtxSynchronize(), "cuCtxSynchronize");
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    mem_free(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = 0;
    o.bytes_ = 0;
  }
  return *this;
}

// --- EventTimer ------------------------------------------------------------------

EventTimer::EventTimer() {
  ensure();
  ensure_context();
  check(g_api.cuEventCreate(&start_, CU_EVENT_DEFAULT), "cuEventCreate");
  CUresult r = g_api.cuEventCreate(&stop_, CU_EVENT_DEFAULT);
  if (r != CUDA_SUCCESS) {
    (void)g_api.cuEventDestroy(start_);
    start_ = nullptr;
    check(r, "cuEventCreate");
  }
}

EventTimer::~EventTimer() {
  if (g_exiting.load(std::memory_order_acquire)) return;
  if (start_) (void)g_api.cuEventDestroy(start_);
  if (stop_) (void)g_api.cuEventDestroy(stop_);
}

void EventTimer::start(CUstream s) { check(g_api.cuEventRecord(start_, s), "cuEventRecord(start)"); }

void EventTimer::stop(CUstream s) { check(g_api.cuEventRecord(stop_, s), "cuEventRecord(stop)"); }

float EventTimer::elapsed_ms() {
  check(g_api.cuEventSynchronize(stop_), "cuEventSynchronize");
  float ms = 0.f;
  check(g_api.cuEventElapsedTime(&ms, start_, stop_), "cuEventElapsedTime");
  return ms;
}

}  // namespace attnjit::driver
