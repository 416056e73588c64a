// Memory, stream, graph and event helpers over the run-time-loaded driver, for
// the runtime's scratch, the tests and the benchmark.
#include <mutex>
#include <unordered_map>
#include <utility>

#include "attnjit/error.hpp"
#include "driver/cuda_driver.hpp"
#include "driver/driver_api.hpp"

namespace attnjit::driver {

using namespace detail;

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

void memcpy_htod_async(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  ensure();
  ensure_context();
  check(g_api.cuMemcpyHtoDAsync(dst, src, bytes, stream), "cuMemcpyHtoDAsync");
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

void memset_d8_async(CUdeviceptr dst, unsigned char value, size_t bytes, CUstream stream) {
  ensure();
  ensure_context();
  check(g_api.cuMemsetD8Async(dst, value, bytes, stream), "cuMemsetD8Async");
}

void memset_d32_async(CUdeviceptr dst, unsigned value, size_t count, CUstream stream) {
  ensure();
  ensure_context();
  check(g_api.cuMemsetD32Async(dst, value, count, stream), "cuMemsetD32Async");
}

void stream_sync(CUstream stream) {
  ensure();
  if (!stream) ensure_context();  // the legacy stream belongs to the current context
  check(g_api.cuStreamSynchronize(stream), "cuStreamSynchronize");
}

unsigned long long stream_id(CUstream stream) {
  ensure();
  if (!stream) ensure_context();
  // cuStreamGetId on a capturing stream fails (CAPTURE_UNSUPPORTED, in every capture
  // mode) and invalidates the capture. So ids are learnt outside capture and looked up
  // by handle during it; a handle is re-asked each time it is seen uncaptured, so a
  // reused handle learns its new stream's id on its first ordinary launch.
  static std::mutex mu;
  static auto* ids = new std::unordered_map<CUstream, unsigned long long>();  // never destroyed
  if (stream && is_capturing(stream)) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = ids->find(stream);
    if (it != ids->end()) return it->second;
    throw Error(ErrorCode::kNotPrewarmed,
                "this stream is capturing a graph and has not run an attnjit op before: run the op once "
                "on this stream before capture (its split-KV scratch is found by stream)");
  }
  unsigned long long id = 0;
  check(g_api.cuStreamGetId(stream, &id), "cuStreamGetId");
  if (stream) {
    std::lock_guard<std::mutex> lock(mu);
    if (ids->size() > 4096) ids->clear();  // a bound for programs that make streams without end
    (*ids)[stream] = id;
  }
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

void begin_capture(CUstream stream, bool global_mode) {
  ensure();
  check(g_api.cuStreamBeginCapture(stream, global_mode ? CU_STREAM_CAPTURE_MODE_GLOBAL : CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
        "cuStreamBeginCapture");
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
