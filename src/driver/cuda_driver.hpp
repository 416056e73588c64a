// The CUDA driver API, loaded at run time (dlopen libcuda.so.1 + cuGetProcAddress),
// so the library, the CLI and every CPU test work on a machine without a GPU.
#pragma once

#include <cuda.h>  // types only: no symbol from libcuda is linked

#include <cstddef>
#include <cstdint>
#include <string>

namespace attnjit::driver {

// True when libcuda loaded and cuInit succeeded. `reason` explains a false.
bool is_available(std::string* reason = nullptr);
// Throws Error(kNoDevice) with the reason when !is_available().
void require_available();

int driver_version();  // e.g. 13000; 0 when unavailable
int device_count();    // 0 when unavailable

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int sm_count = 0;
  int64_t total_mem = 0;
  int l2_bytes = 0;
  int max_smem_per_block_optin = 0;
  int clock_khz = 0, mem_clock_khz = 0, mem_bus_width = 0;
};
DeviceInfo device_info(int ordinal);

// What the launch path needs, queried once per device (no allocation after that).
struct DeviceCaps {
  int sm_major = 0, sm_minor = 0, sm_count = 0;
};
const DeviceCaps& device_caps(int ordinal);

// Device of the calling thread's current context. If no context is current,
// retains device 0's primary context (the one the CUDA runtime uses) and makes it current.
int current_device();
CUcontext context_for_device(int ordinal);  // primary context, retained once

// Throws Error(kDriver) naming `what` and the CUDA error string when r != CUDA_SUCCESS.
void check(CUresult r, const char* what);

// A loaded module (cuModuleLoadData in the given device's primary context).
class Module {
 public:
  Module() = default;
  Module(int device, const void* image);
  ~Module();
  Module(Module&& o) noexcept;
  Module& operator=(Module&& o) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  CUfunction function(const char* name) const;
  int global_int(const char* name) const;  // reads a __device__/__constant__ int
  CUmodule handle() const { return module_; }

 private:
  CUmodule module_ = nullptr;
  CUcontext ctx_ = nullptr;
};

struct FuncAttributes {
  int num_regs = 0, local_bytes = 0, static_smem_bytes = 0, max_threads = 0;
};
FuncAttributes func_attributes(CUfunction f);
void set_max_dynamic_smem(CUfunction f, int bytes);
int max_active_blocks(CUfunction f, int threads, int dynamic_smem);  // per SM
// Lets `f` launch with clusters of up to 16 blocks (CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED).
void allow_non_portable_cluster(CUfunction f);

struct LaunchConfig {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned smem_bytes = 0;
  CUstream stream = nullptr;
  bool pdl = false;  // programmatic stream serialization (sm_90+)
  // Thread block cluster (sm_90+): {1,1,1} launches without one. Each dim must divide the grid's;
  // at most 8 blocks (the portable size), or 16 after allow_non_portable_cluster(f).
  unsigned cluster[3] = {1, 1, 1};
};
// cuLaunchKernelEx with the cluster and PDL attributes (launch_attributes.hpp); no allocation.
// Throws Error(kInvalidArgument) for a cluster shape that does not fit the grid.
void launch(CUfunction f, const LaunchConfig& cfg, void** args);

// True when the stream is capturing (cuStreamIsCapturing).
bool is_capturing(CUstream stream);

// While alive, this thread's calls that are unsafe during a global-mode capture
// (module loads, allocations) are allowed even when another thread is capturing,
// so that first-use work here never invalidates someone else's graph. The work
// done under it must not touch a capturing stream.
class RelaxedCaptureScope {
 public:
  RelaxedCaptureScope();
  ~RelaxedCaptureScope();
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  int previous_ = 0;  // CUstreamCaptureMode
  bool active_ = false;
};

// --- thin helpers for tests, the benchmark and the CLI demo -------------------
CUdeviceptr mem_alloc(size_t bytes);
void mem_free(CUdeviceptr p) noexcept;
void memcpy_htod(CUdeviceptr dst, const void* src, size_t bytes);
// Stream-ordered. From pageable memory the driver stages src before returning, so
// src may be reused at once; never during capture (the graph would keep src's address).
void memcpy_htod_async(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream);
void memcpy_dtoh(void* dst, CUdeviceptr src, size_t bytes);
void memset_d8(CUdeviceptr dst, unsigned char value, size_t bytes);
void memset_d32(CUdeviceptr dst, unsigned value, size_t count);
void memset_d8_async(CUdeviceptr dst, unsigned char value, size_t bytes, CUstream stream);
void memset_d32_async(CUdeviceptr dst, unsigned value, size_t count, CUstream stream);
void stream_sync(CUstream stream);

// A stream's process-unique id: the per-thread default stream has one handle
// but a different id in every thread.
unsigned long long stream_id(CUstream stream);

// Streams and graph capture, for tests and the benchmark.
CUstream stream_create();  // non-blocking stream in the current context
void stream_destroy(CUstream stream) noexcept;
struct CapturedGraph {
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  CapturedGraph() = default;
  CapturedGraph(CapturedGraph&& o) noexcept : graph(o.graph), exec(o.exec) { o.graph = nullptr; o.exec = nullptr; }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph();
  void launch(CUstream stream);  // instantiates on first use
};
// Thread-local capture mode, or global (PyTorch's default: unsafe calls from any thread fail).
void begin_capture(CUstream stream, bool global_mode = false);
CapturedGraph end_capture(CUstream stream);
void ctx_sync();

// RAII device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : ptr_(mem_alloc(bytes)), bytes_(bytes) {}
  ~DeviceBuffer() { mem_free(ptr_); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  CUdeviceptr get() const { return ptr_; }
  void* ptr() const { return reinterpret_cast<void*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

// Event timing for the benchmark: milliseconds between two recorded events.
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;  // owns two events
  EventTimer& operator=(const EventTimer&) = delete;
  void start(CUstream s);
  void stop(CUstream s);
  float elapsed_ms();  // synchronizes on the stop event

 private:
  CUevent start_ = nullptr, stop_ = nullptr;
};

}  // namespace attnjit::driver
