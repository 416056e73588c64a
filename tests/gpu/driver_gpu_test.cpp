// GPU tests for src/driver/: NVRTC-built cubins loaded, launched, timed and captured.
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nvrtc.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attnjit/error.hpp"
#include "driver/cuda_driver.hpp"

namespace attnjit::driver {
namespace {

// Device code is compiled here with NVRTC directly, so this test depends only on src/driver/.
// Params are passed by value as __grid_constant__, the way every attnjit family does.
constexpr const char* kSource = R"(
struct Params { const float* x; float* y; float scale; int n; };

extern "C" __global__ void saxpy(const __grid_constant__ Params p) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) p.y[i] = p.scale * p.x[i] + p.y[i];
}

// Reverses each block's chunk of blockDim.x * 64 floats through dynamic shared memory.
extern "C" __global__ void smem_roundtrip(const __grid_constant__ Params p) {
  extern __shared__ float buf[];
  int base = blockIdx.x * blockDim.x * 64;
  for (int k = 0; k < 64; ++k) {
    int j = threadIdx.x + k * blockDim.x;
    buf[j] = (base + j < p.n) ? p.x[base + j] : 0.f;
  }
  __syncthreads();
  for (int k = 0; k < 64; ++k) {
    int j = threadIdx.x + k * blockDim.x;
    if (base + j < p.n) p.y[base + j] = buf[blockDim.x * 64 - 1 - j];  // another thread's slot
  }
}

#if __CUDA_ARCH__ >= 900
// PDL pair: `producer` lets the next kernel start early; `consumer` waits for it to finish.
extern "C" __global__ void producer(const __grid_constant__ Params p) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) p.y[i] = 2.f * p.x[i];
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
extern "C" __global__ void consumer(const __grid_constant__ Params p) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) p.y[i] = p.y[i] + p.scale;
}
#endif
)";

struct Params {
  const float* x;
  float* y;
  float scale;
  int n;
};

// NVRTC through dlopen: the gpu test target does not link CUDA::nvrtc itself.
struct Nvrtc {
  decltype(&nvrtcCreateProgram) create = nullptr;
  decltype(&nvrtcCompileProgram) compile = nullptr;
  decltype(&nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&nvrtcGetProgramLog) log = nullptr;
  decltype(&nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&nvrtcGetCUBIN) cubin = nullptr;
  decltype(&nvrtcDestroyProgram) destroy = nullptr;
  std::string error;

  Nvrtc() {
    std::vector<std::string> names = {"libnvrtc.so." + std::to_string(CUDA_VERSION / 1000),
                                      "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so"};
    if (const char* home = std::getenv("CUDA_HOME")) {
      names.push_back(std::string(home) + "/lib64/libnvrtc.so");
    }
    void* lib = nullptr;
    for (const auto& n : names) {
      if ((lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    }
    if (!lib) {
      error = "libnvrtc not found";
      return;
    }
    create = reinterpret_cast<decltype(create)>(dlsym(lib, "nvrtcCreateProgram"));
    compile = reinterpret_cast<decltype(compile)>(dlsym(lib, "nvrtcCompileProgram"));
    log_size = reinterpret_cast<decltype(log_size)>(dlsym(lib, "nvrtcGetProgramLogSize"));
    log = reinterpret_cast<decltype(log)>(dlsym(lib, "nvrtcGetProgramLog"));
    cubin_size = reinterpret_cast<decltype(cubin_size)>(dlsym(lib, "nvrtcGetCUBINSize"));
    cubin = reinterpret_cast<decltype(cubin)>(dlsym(lib, "nvrtcGetCUBIN"));
    destroy = reinterpret_cast<decltype(destroy)>(dlsym(lib, "nvrtcDestroyProgram"));
    if (!create || !compile || !log_size || !log || !cubin_size || !cubin || !destroy) {
      error = "libnvrtc is missing an entry point";
    }
  }

  // Returns the cubin, or an empty vector with `out_log` explaining why.
  std::vector<char> build(const std::string& arch, std::string* out_log) const {
    nvrtcProgram prog = nullptr;
    if (create(&prog, kSource, "driver_gpu_test.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) {
      *out_log = "nvrtcCreateProgram failed";
      return {};
    }
    std::string arch_opt = "--gpu-architecture=" + arch;
    const char* opts[] = {arch_opt.c_str(), "--std=c++17"};
    nvrtcResult r = compile(prog, 2, opts);
    size_t n = 0;
    log_size(prog, &n);
    out_log->assign(n, '\0');
    if (n) log(prog, out_log->data());
    std::vector<char> bin;
    if (r == NVRTC_SUCCESS && cubin_size(prog, &n) == NVRTC_SUCCESS) {
      bin.resize(n);
      if (cubin(prog, bin.data()) != NVRTC_SUCCESS) bin.clear();
    }
    destroy(&prog);
    return bin;
  }
};

// Capture entry points the library does not wrap, resolved the same way (no libcuda link).
struct CaptureApi {
  PFN_cuStreamCreate_v2000 stream_create = nullptr;
  PFN_cuStreamDestroy_v4000 stream_destroy = nullptr;
  PFN_cuStreamBeginCapture_v10010 begin_capture = nullptr;
  PFN_cuStreamEndCapture_v10000 end_capture = nullptr;
  PFN_cuGraphDestroy_v10000 graph_destroy = nullptr;

  CaptureApi() {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    auto get = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"));
    if (!get) return;
    auto resolve = [&](const char* name, auto* slot) {
      get(name, reinterpret_cast<void**>(slot), 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
          nullptr);
    };
    resolve("cuStreamCreate", &stream_create);
    resolve("cuStreamDestroy", &stream_destroy);
    resolve("cuStreamBeginCapture", &begin_capture);
    resolve("cuStreamEndCapture", &end_capture);
    resolve("cuGraphDestroy", &graph_destroy);
  }
  bool ok() const {
    return stream_create && stream_destroy && begin_capture && end_capture && graph_destroy;
  }
};

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-4.f, 4.f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

class DriverGpuTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string reason;
    if (!is_available(&reason)) return;
    info_ = new DeviceInfo(device_info(0));
    arch_ = "sm_" + std::to_string(info_->sm_major) + std::to_string(info_->sm_minor);
    Nvrtc nvrtc;
    if (!nvrtc.error.empty()) {
      setup_error_ = nvrtc.error;
      return;
    }
    std::string log;
    cubin_ = new std::vector<char>(nvrtc.build(arch_, &log));
    if (cubin_->empty()) setup_error_ = "NVRTC failed for " + arch_ + ":\n" + log;
  }
  static void TearDownTestSuite() {
    delete cubin_;
    delete info_;
    cubin_ = nullptr;
    info_ = nullptr;
  }

  void SetUp() override {
    std::string reason;
    if (!is_available(&reason)) GTEST_SKIP() << "no usable CUDA driver: " << reason;
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    module_ = Module(0, cubin_->data());
  }

  // y = scale * x + y on `stream`, checked against the host.
  void run_saxpy(CUstream stream, int n, unsigned seed) {
    CUfunction f = module_.function("saxpy");
    auto x = random_floats(n, seed);
    auto y = random_floats(n, seed + 1);
    DeviceBuffer dx(n * sizeof(float)), dy(n * sizeof(float));
    memcpy_htod(dx.get(), x.data(), n * sizeof(float));
    memcpy_htod(dy.get(), y.data(), n * sizeof(float));
    Params p{static_cast<const float*>(dx.ptr()), static_cast<float*>(dy.ptr()), 1.5f, n};
    void* args[] = {&p};
    LaunchConfig cfg;
    cfg.block[0] = 256;
    cfg.grid[0] = (n + 255) / 256;
    cfg.stream = stream;
    launch(f, cfg, args);
    stream_sync(stream);
    std::vector<float> out(n);
    memcpy_dtoh(out.data(), dy.get(), n * sizeof(float));
    for (int i = 0; i < n; ++i) {
      // The device contracts to an FMA, the host may not: allow one rounding of slack.
      double want = 1.5 * double(x[i]) + double(y[i]);
      ASSERT_NEAR(out[i], want, 1e-6 * (1.0 + std::abs(want))) << "i=" << i;
    }
  }

  static inline DeviceInfo* info_ = nullptr;
  static inline std::string arch_;
  static inline std::vector<char>* cubin_ = nullptr;
  static inline std::string setup_error_;
  Module module_;
};

TEST_F(DriverGpuTest, DeviceInfoIsSane) {
  EXPECT_GT(driver_version(), 12000);
  EXPECT_GT(device_count(), 0);
  EXPECT_FALSE(info_->name.empty());
  EXPECT_GE(info_->sm_major, 7);
  EXPECT_GT(info_->sm_count, 0);
  EXPECT_GT(info_->total_mem, int64_t{1} << 30);
  EXPECT_GT(info_->l2_bytes, 0);
  EXPECT_GE(info_->max_smem_per_block_optin, 48 * 1024);
  EXPECT_GT(info_->mem_bus_width, 0);
  std::printf("device 0: %s %s, %d SMs, %lld MiB, L2 %d KiB, smem optin %d, clocks %d/%d kHz, "
              "bus %d bits, driver %d\n",
              info_->name.c_str(), arch_.c_str(), info_->sm_count,
              static_cast<long long>(info_->total_mem >> 20), info_->l2_bytes >> 10,
              info_->max_smem_per_block_optin, info_->clock_khz, info_->mem_clock_khz,
              info_->mem_bus_width, driver_version());
}

TEST_F(DriverGpuTest, ContextsAreRetainedOnce) {
  CUcontext c = context_for_device(0);
  EXPECT_NE(c, nullptr);
  EXPECT_EQ(c, context_for_device(0));
  EXPECT_EQ(current_device(), 0);
  try {
    context_for_device(device_count());
    FAIL() << "out-of-range ordinal accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

TEST_F(DriverGpuTest, LaunchSaxpyWithParamsByValue) { run_saxpy(nullptr, 100003, 1); }

TEST_F(DriverGpuTest, LaunchFromFreshThreadSetsPrimaryContext) {
  // A new thread has no current context: current_device() must make device 0's current.
  std::thread t([&] {
    EXPECT_EQ(current_device(), 0);
    run_saxpy(nullptr, 4097, 7);
  });
  t.join();
}

TEST_F(DriverGpuTest, MissingKernelNamesIt) {
  try {
    module_.function("no_such_kernel");
    FAIL() << "missing kernel accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDriver);
    EXPECT_NE(std::string(e.what()).find("no_such_kernel"), std::string::npos) << e.what();
  }
}

TEST_F(DriverGpuTest, BadLaunchThrowsDriverErrorWithShape) {
  LaunchConfig cfg;
  cfg.block[0] = 4096;  // over every GPU's limit of 1024 threads per block
  Params p{};
  void* args[] = {&p};
  try {
    launch(module_.function("saxpy"), cfg, args);
    FAIL() << "oversized block accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDriver);
    EXPECT_NE(std::string(e.what()).find("block 4096x1x1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CUDA_ERROR_"), std::string::npos) << e.what();
  }
}

TEST_F(DriverGpuTest, FuncAttributesAndDynamicSmem) {
  CUfunction f = module_.function("smem_roundtrip");
  FuncAttributes a = func_attributes(f);
  EXPECT_GT(a.num_regs, 0);
  EXPECT_LE(a.num_regs, 255);
  EXPECT_EQ(a.local_bytes, 0);
  EXPECT_EQ(a.static_smem_bytes, 0);
  EXPECT_GE(a.max_threads, 256);

  // 512 threads * 64 floats = 128 KiB: above the 48 KiB default, so it needs the opt-in.
  const int threads = 512, smem = threads * 64 * 4;
  if (smem > info_->max_smem_per_block_optin) GTEST_SKIP() << "device opt-in smem too small";
  const int n = 3 * threads * 64 - 5;
  auto x = random_floats(n, 3);
  DeviceBuffer dx(n * sizeof(float)), dy(n * sizeof(float));
  memcpy_htod(dx.get(), x.data(), n * sizeof(float));
  memset_d32(dy.get(), 0x7fc00000u, n);  // NaN: every element must be written
  Params p{static_cast<const float*>(dx.ptr()), static_cast<float*>(dy.ptr()), 0.f, n};
  void* args[] = {&p};
  LaunchConfig cfg;
  cfg.grid[0] = 3;
  cfg.block[0] = threads;
  cfg.smem_bytes = smem;
  EXPECT_THROW(launch(f, cfg, args), Error);  // not opted in yet
  set_max_dynamic_smem(f, smem);
  launch(f, cfg, args);
  ctx_sync();
  std::vector<float> out(n);
  memcpy_dtoh(out.data(), dy.get(), n * sizeof(float));
  const int chunk = threads * 64;
  for (int i = 0; i < n; ++i) {
    int src = (i / chunk) * chunk + (chunk - 1 - i % chunk);
    ASSERT_EQ(out[i], src < n ? x[src] : 0.f) << "i=" << i;
  }
}

TEST_F(DriverGpuTest, NotCapturingOnNullStream) { EXPECT_FALSE(is_capturing(nullptr)); }

TEST_F(DriverGpuTest, CapturingStreamIsReported) {
  CaptureApi api;
  ASSERT_TRUE(api.ok()) << "could not resolve the capture entry points";
  CUstream s = nullptr;
  check(api.stream_create(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  EXPECT_FALSE(is_capturing(s));
  check(api.begin_capture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
  EXPECT_TRUE(is_capturing(s));
  CUgraph g = nullptr;
  check(api.end_capture(s, &g), "cuStreamEndCapture");
  EXPECT_FALSE(is_capturing(s));
  if (g) api.graph_destroy(g);

  // A blocking stream capturing in global mode makes the legacy stream unsafe to use too.
  CUstream b = nullptr;
  check(api.stream_create(&b, CU_STREAM_DEFAULT), "cuStreamCreate");
  check(api.begin_capture(b, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  EXPECT_TRUE(is_capturing(nullptr));
  g = nullptr;
  (void)api.end_capture(b, &g);  // may report the capture invalidated by that query
  if (g) api.graph_destroy(g);
  api.stream_destroy(b);
  api.stream_destroy(s);
}

TEST_F(DriverGpuTest, EventTimerMeasuresWork) {
  const int n = 1 << 24;
  CUfunction f = module_.function("saxpy");
  DeviceBuffer dx(n * sizeof(float)), dy(n * sizeof(float));
  memset_d8(dx.get(), 0, n * sizeof(float));
  memset_d8(dy.get(), 0, n * sizeof(float));
  Params p{static_cast<const float*>(dx.ptr()), static_cast<float*>(dy.ptr()), 2.f, n};
  void* args[] = {&p};
  LaunchConfig cfg;
  cfg.block[0] = 256;
  cfg.grid[0] = n / 256;
  EventTimer timer;
  timer.start(nullptr);
  for (int i = 0; i < 10; ++i) launch(f, cfg, args);
  timer.stop(nullptr);
  float ms = timer.elapsed_ms();
  EXPECT_GT(ms, 0.f);
  EXPECT_LT(ms, 10000.f);
}

TEST_F(DriverGpuTest, DeviceBufferMoveAssignFrees) {
  DeviceBuffer a(1 << 20), b(1 << 10);
  CUdeviceptr pa = a.get();
  b = std::move(a);  // frees b's old allocation
  EXPECT_EQ(b.get(), pa);
  EXPECT_EQ(b.bytes(), size_t{1} << 20);
  EXPECT_EQ(a.get(), 0u);
  Module m2 = std::move(module_);
  EXPECT_EQ(module_.handle(), nullptr);
  module_ = std::move(m2);
  EXPECT_NE(module_.handle(), nullptr);
}

TEST_F(DriverGpuTest, PdlLaunchOnSm90) {
  if (info_->sm_major < 9) GTEST_SKIP() << "PDL needs sm_90+, device is " << arch_;
  const int n = 1 << 20;
  auto x = random_floats(n, 11);
  DeviceBuffer dx(n * sizeof(float)), dy(n * sizeof(float));
  memcpy_htod(dx.get(), x.data(), n * sizeof(float));
  memset_d32(dy.get(), 0x7fc00000u, n);
  Params p{static_cast<const float*>(dx.ptr()), static_cast<float*>(dy.ptr()), 0.25f, n};
  void* args[] = {&p};
  LaunchConfig cfg;
  cfg.block[0] = 256;
  cfg.grid[0] = n / 256;
  for (int rep = 0; rep < 20; ++rep) {
    cfg.pdl = false;
    launch(module_.function("producer"), cfg, args);
    cfg.pdl = true;  // may start before producer ends; griddepcontrol.wait orders the reads
    launch(module_.function("consumer"), cfg, args);
  }
  stream_sync(nullptr);
  std::vector<float> out(n);
  memcpy_dtoh(out.data(), dy.get(), n * sizeof(float));
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], 2.f * x[i] + 0.25f) << "i=" << i;
}

}  // namespace
}  // namespace attnjit::driver
