// attnjit-bench --fia: fused_infer_attention_score prefill TFLOP/s at the issues'
// shapes, on both backends (the portable mma.sync kernel and the sm_90a wgmma one),
// then the decode rows (bench_fia_decode.cpp), the shared-prefix rows (bench_fia_prefix.cpp)
// and the quantised-KV rows (bench_fia_quant.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/fia.hpp"
#include "bench_cases.hpp"
#include "common/device_tensor.hpp"
#include "driver/cuda_driver.hpp"

namespace attnjit::bench {

namespace {
constexpr double kGemmTflops = 790.0;  // measured H200 bf16 GEMM rate (DESIGN.md)
}

double time_fia_call(FiaArgs& a, int iters, const std::string& what, int width) {
  try {
    for (int i = 0; i < 3; ++i) fused_infer_attention_score(a);
  } catch (const Error& e) {  // trtllm-gen off sm_90a
    fmt::print("{:<{}} {}\n", what, width, e.what());
    return -1;
  }
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
  return ms[ms.size() / 2];
}

// Returns 0, printing one line per shape and backend: median ms, TFLOP/s and % of
// the GEMM rate. FLOPs = 2 * S_q * S_kv * (D_qk + D_v) * H * B, halved for causal
// (sparse_mode 3). The shapes are the Hopper prefill issue's (cuDNN's figures there).
FiaArgs fia_prefill_args(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                         const char* layout, int heads, int kv_heads, int head_dim, Backend backend,
                         const TensorView* causal_mask) {
  FiaArgs a;
  a.query = q;
  a.key = k;
  a.value = v;
  a.attention_out = out;
  a.input_layout = layout;
  a.num_heads = heads;
  a.num_key_value_heads = kv_heads;
  a.scale = 1.0 / std::sqrt(double(head_dim));
  a.backend = backend;
  if (causal_mask) {
    a.sparse_mode = 3;
    a.atten_mask = *causal_mask;
  }
  return a;
}

int bench_fia(int iters, bool prefill_only) {
  struct Shape {
    int batch, seq, heads, kv_heads, hd;
  };
  const Shape shapes[] = {{4, 8192, 32, 32, 128}, {16, 2048, 32, 32, 128}, {4, 8192, 32, 8, 128},
                          {8, 4096, 32, 32, 64},  {4, 4096, 16, 16, 256}};
  fmt::print("{:<44} {:>10} {:>10} {:>8}\n", "fia prefill (bf16, BSND)", "ms", "TFLOP/s", "% GEMM");
  for (const Shape& s : shapes) {
    const std::vector<int64_t> qshape = {s.batch, s.seq, s.heads, s.hd}, kvshape = {s.batch, s.seq, s.kv_heads, s.hd};
    testing::DeviceTensor q(DType::kBFloat16, qshape), k(DType::kBFloat16, kvshape), v(DType::kBFloat16, kvshape),
        o(DType::kBFloat16, qshape), mask(DType::kUInt8, {2048, 2048});
    std::mt19937 rng(1);
    const size_t n = size_t(s.batch) * s.seq * s.heads * s.hd;
    const auto vals = testing::random_values(std::min<size_t>(n, 1 << 22), rng);
    std::vector<float> full(n);
    for (size_t i = 0; i < n; ++i) full[i] = vals[i % vals.size()];
    q.upload_floats(full);
    full.resize(size_t(s.batch) * s.seq * s.kv_heads * s.hd);
    k.upload_floats(full);
    v.upload_floats(full);
    mask.zero();
    for (bool causal : {false, true}) {
      for (Backend backend : {Backend::kXqa, Backend::kTrtllmGen}) {
        if (prefill_only && backend != Backend::kTrtllmGen) continue;
        FiaArgs a = fia_prefill_args(q.view, k.view, v.view, o.view, "BSND", s.heads, s.kv_heads, s.hd, backend,
                                     causal ? &mask.view : nullptr);
        const char* name = backend == Backend::kXqa ? "xqa" : "trtllm-gen";
        const double med = time_fia_call(a, iters, name, 44);
        if (med < 0) continue;
        const double flops =
            2.0 * s.seq * double(s.seq) * (2 * s.hd) * s.heads * s.batch * (causal ? 0.5 : 1.0);
        const double tflops = flops / (med * 1e-3) / 1e12;
        fmt::print("{:<44} {:>10.3f} {:>10.1f} {:>7.1f}%\n",
                   fmt::format("B{} S{} H{}/{} D{} {} {}", s.batch, s.seq, s.heads, s.kv_heads, s.hd,
                               causal ? "causal" : "full", name),
                   med, tflops, 100.0 * tflops / kGemmTflops);
      }
    }
  }
  if (prefill_only) return 0;
  Options o;
  o.iters = iters;
  int rc = bench_fia_decode(o);
  rc = rc ? rc : bench_fia_prefix(o);
  return rc ? rc : bench_fia_quant(o);
}

}  // namespace attnjit::bench
