// Device tensors for GPU tests and the benchmark: upload host bytes, poison
// outputs with NaN (0xFF bytes), download.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "attnjit/tensor.hpp"
#include "common/parallel_for.hpp"
#include "driver/cuda_driver.hpp"
#include "util/host_dtype.hpp"

namespace attnjit::testing {

// When the GPU tests run in prewarm mode (no GPU, ATTNJIT_GPU_TEST_PREWARM=<arch>),
// tensors are shapes only: nothing is allocated or copied.
inline const char* gpu_test_prewarm_arch() {
  static const char* arch = [] {
    const char* a = std::getenv("ATTNJIT_GPU_TEST_PREWARM");
    return a && *a && !driver::is_available() ? a : nullptr;
  }();
  return arch;
}

struct DeviceTensor {
  driver::DeviceBuffer buffer;
  TensorView view;

  DeviceTensor() = default;
  DeviceTensor(DType dtype, std::initializer_list<int64_t> shape) { allocate(dtype, std::vector<int64_t>(shape)); }
  DeviceTensor(DType dtype, const std::vector<int64_t>& shape) { allocate(dtype, shape); }

  void allocate(DType dtype, const std::vector<int64_t>& shape) {
    view = TensorView{};
    view.dtype = dtype;
    view.rank = static_cast<int>(shape.size());
    int64_t n = 1;
    for (int d = view.rank - 1; d >= 0; --d) {
      view.shape[d] = shape[d];
      view.stride[d] = n;
      n *= shape[d];
    }
    if (gpu_test_prewarm_arch()) return;  // shapes only
    buffer = driver::DeviceBuffer(static_cast<size_t>(std::max<int64_t>(n, 1)) * dtype_size(dtype));
    view.data = buffer.ptr();
  }
  size_t bytes() const { return static_cast<size_t>(view.numel()) * dtype_size(view.dtype); }
  void upload(const std::vector<uint8_t>& host) {
    if (!gpu_test_prewarm_arch()) driver::memcpy_htod(buffer.get(), host.data(), host.size());
  }
  void upload_floats(const std::vector<float>& values) { upload(util::encode(values, view.dtype)); }
  template <class T>
  void upload_pod(const std::vector<T>& values) {
    if (!gpu_test_prewarm_arch()) driver::memcpy_htod(buffer.get(), values.data(), values.size() * sizeof(T));
  }
  void poison() {
    if (!gpu_test_prewarm_arch()) driver::memset_d8(buffer.get(), 0xFF, bytes());
  }
  void zero() {
    if (!gpu_test_prewarm_arch()) driver::memset_d8(buffer.get(), 0, bytes());
  }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> host(bytes());
    driver::memcpy_dtoh(host.data(), buffer.get(), host.size());
    return host;
  }
  std::vector<float> download_floats() const { return util::decode(download(), view.dtype); }
};

// Values from N(0, sigma), stored in `dtype`; returns what the device will see.
// n normal values, deterministic for the state of rng (one draw seeds the call).
// Chunks of 64K are drawn on every hardware thread: the long-context GPU cases
// need hundreds of millions of values, ~1.5 s each 50M on one core.
inline std::vector<float> random_values(size_t n, std::mt19937& rng, float sigma = 1.0f) {
  constexpr size_t kChunk = 1 << 16;
  const uint32_t seed = rng();
  const int64_t chunks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
  std::vector<float> v(n);
  parallel_for(chunks, hardware_threads(), [&](int64_t c) {
    std::mt19937 r(seed ^ static_cast<uint32_t>(c * 0x9E3779B9u));
    std::normal_distribution<float> dist(0.0f, sigma);
    for (size_t i = size_t(c) * kChunk; i < std::min(n, size_t(c + 1) * kChunk); ++i) v[i] = dist(r);
  });
  return v;
}

}  // namespace attnjit::testing
