// attnjit-bench --fia: fused_infer_attention_score prefill TFLOP/s at the issue's
// shapes (bf16, D128, 32 heads; B4 S8K and B16 S2K; non-causal and causal), then
// the decode rows (bench_fia_decode.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <vector>

#include "attnjit/fia.hpp"
#include "bench_cases.hpp"
#include "common/device_tensor.hpp"
#include "driver/cuda_driver.hpp"

namespace attnjit::bench {

namespace {
constexpr double kGemmTflops = 790.0;  // measured H200 bf16 GEMM rate (DESIGN.md)
}

// Returns 0, printing one line per shape: median ms, TFLOP/s and % of the GEMM rate.
// FLOPs = 4 * S_q * S_kv * D * H * B, halved for causal (sparse_mode 3).
int bench_fia(int iters) {
  struct Shape {
    int batch, seq;
  };
  const Shape shapes[] = {{4, 8192}, {16, 2048}};
  constexpr int kHeads = 32, kHd = 128;
  fmt::print("{:<34} {:>10} {:>10} {:>8}\n", "fia prefill (bf16, D128, 32 heads)", "ms", "TFLOP/s", "% GEMM");
  for (const Shape& s : shapes) {
    const std::vector<int64_t> shape = {s.batch, s.seq, kHeads, kHd};
    testing::DeviceTensor q(DType::kBFloat16, shape), k(DType::kBFloat16, shape), v(DType::kBFloat16, shape),
        o(DType::kBFloat16, shape), mask(DType::kUInt8, {2048, 2048});
    std::mt19937 rng(1);
    size_t n = size_t(s.batch) * s.seq * kHeads * kHd;
    const auto vals = testing::random_values(std::min<size_t>(n, 1 << 22), rng);
    std::vector<float> full(n);
    for (size_t i = 0; i < n; ++i) full[i] = vals[i % vals.size()];
    q.upload_floats(full);
    k.upload_floats(full);
    v.upload_floats(full);
    mask.zero();
    for (bool causal : {false, true}) {
      FiaArgs a;
      a.query = q.view;
      a.key = k.view;
      a.value = v.view;
      a.attention_out = o.view;
      a.input_layout = "BSND";
      a.num_heads = kHeads;
      a.scale = 0.08838834764831845;
      if (causal) {
        a.sparse_mode = 3;
        a.atten_mask = mask.view;
      }
      for (int i = 0; i < 3; ++i) fused_infer_attention_score(a);
      driver::ctx_sync();
      std::vector<float> ms;
      driver::EventTimer t;
      for (int i = 0; i < iters; ++i) {
        t.start(nullptr);
        fused_infer_attention_score(a);
        t.stop(nullptr);
        ms.push_back(t.elapsed_ms());
      }
      std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
      const double med = ms[ms.size() / 2];
      const double flops = 4.0 * s.seq * double(s.seq) * kHd * kHeads * s.batch * (causal ? 0.5 : 1.0);
      const double tflops = flops / (med * 1e-3) / 1e12;
      fmt::print("{:<34} {:>10.3f} {:>10.1f} {:>7.1f}%\n",
                 fmt::format("B{} S{} {}", s.batch, s.seq, causal ? "causal (sparse 3)" : "non-causal"), med, tflops,
                 100.0 * tflops / kGemmTflops);
    }
  }
  Options o;
  o.iters = iters;
  return bench_fia_decode(o);
}

}  // namespace attnjit::bench
