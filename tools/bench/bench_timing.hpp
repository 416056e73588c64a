// What every attnjit-bench case shares: median CUDA-event timing over rotating input
// sets, and fast random device data.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "bench_cases.hpp"
#include "common/device_tensor.hpp"
#include "driver/cuda_driver.hpp"

namespace attnjit::bench {

constexpr double kL2Bytes = 60e6;

// Median per-call time with CUDA events, rotating over the input sets. Each
// sample times kBatch back-to-back calls so host launch cost stays hidden.
template <class Fn>
inline double time_median(int sets, const Options& o, Fn fn) {
  constexpr int kBatch = 8;
  for (int i = 0; i < o.warmup; ++i) fn(i % sets);
  driver::ctx_sync();
  std::vector<float> ms;
  driver::EventTimer t;
  int call = 0;
  for (int i = 0; i < o.iters; ++i) {
    t.start(nullptr);
    for (int j = 0; j < kBatch; ++j) fn(call++ % sets);
    t.stop(nullptr);
    ms.push_back(t.elapsed_ms() / kBatch);
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

// Host microseconds per call: the median of 50 bursts of 100 calls, timing the calls only
// (the device drains between bursts). The launch path's cost, not the kernel's.
template <class Fn>
inline double host_us_per_call(Fn&& body) {
  std::vector<double> us;
  for (int burst = 0; burst < 50; ++burst) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 100; ++i) body();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 100);
    driver::ctx_sync();
  }
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

// Drawing and encoding GBs of normals takes minutes on the host; tiling a 1M-value
// random pool at random offsets gives the same timing in a fraction of that.
inline std::vector<uint8_t> random_bytes(size_t n, DType dtype, std::mt19937& rng) {
  constexpr size_t kPool = 1 << 20;
  const size_t es = dtype_size(dtype);
  const std::vector<uint8_t> pool = util::encode(testing::random_values(kPool, rng), dtype);
  std::vector<uint8_t> out(n * es);
  for (size_t done = 0; done < n;) {
    const size_t start = rng() % (kPool / 2), len = std::min(n - done, kPool - start);
    std::memcpy(out.data() + done * es, pool.data() + start * es, len * es);
    done += len;
  }
  return out;
}


}  // namespace attnjit::bench
