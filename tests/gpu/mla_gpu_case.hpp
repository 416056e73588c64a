// The MLA GPU tests' case, its float64 check and tolerance, shared by mla_gpu_test.cpp
// (16-bit KV) and mla_fp8_gpu_test.cpp: batch_decode_mla against the float64 reference
// (tests/common/mla_reference.hpp), every output element (NaN-filled first) and every LSE
// checked against a per-element bound. fp8 e4m3 KV (and fp8 queries) are checked against
// the reference over the dequantised values.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "attnjit/error.hpp"
#include "attnjit/mla.hpp"
#include "common/attention_reference.hpp"
#include "common/device_tensor.hpp"
#include "common/mla_reference.hpp"
#include "gpu_test_env.hpp"

namespace attnjit::mla_gpu {

using testing::DeviceTensor;

struct MlaCase {
  DType dtype = DType::kBFloat16;  // the query's; e4m3 needs fp8_kv, and writes bf16
  bool fp8_kv = false;             // an fp8 e4m3 cache (else the query's dtype)
  float q_sigma = 1.0f, kv_sigma = 1.0f;  // spread of the values before quantization
  int heads = 16, q_len = 1, page_size = 64;
  std::vector<int> seq_lens = {100, 1000};
  int top_k = 0;          // > 0: sparse
  bool sinks = false;
  bool scale_ptrs = false;
  bool lse = false;
  bool lse_base2 = false;
  bool four_d = false;
  int sm_count = 0;       // 0: the device's
  int max_seq_len = 0;    // 0: the block tables' capacity; else the call's (seq_lens may pass it)
  int out_pad = 0;        // > 0: out's rows are 512 + out_pad apart (a sliced view; the pad stays NaN)
  float bmm1 = 1.0f / 24.0f;  // 1 / sqrt(576)
  float bmm2 = 1.0f;
  Backend backend = Backend::kXqa;  // MlaGpu* test the mma.sync kernel, MlaGpuHopper the wgmma one
};

inline DType kv_dtype(const MlaCase& c) { return c.fp8_kv ? DType::kFloat8E4M3 : c.dtype; }
inline DType out_dtype(const MlaCase& c) { return c.dtype == DType::kFloat8E4M3 ? DType::kBFloat16 : c.dtype; }

inline std::string describe(const MlaCase& c) {
  std::string s = std::string(dtype_name(c.dtype)) + " kv " + dtype_name(kv_dtype(c)) + " sigma " +
                  std::to_string(c.q_sigma) + "/" + std::to_string(c.kv_sigma) + " h" + std::to_string(c.heads) + " qlen" +
                  std::to_string(c.q_len) + " p" + std::to_string(c.page_size) + " lens";
  for (int l : c.seq_lens) s += " " + std::to_string(l);
  if (c.top_k) s += " topk" + std::to_string(c.top_k);
  s += c.sinks ? " sinks" : "";
  s += c.scale_ptrs ? " scaleptr" : "";
  s += c.lse ? (c.lse_base2 ? " lse2" : " lse") : "";
  s += c.four_d ? " 4d" : "";
  s += c.backend == Backend::kTrtllmGen ? " trtllm-gen" : c.backend == Backend::kAuto ? " auto" : " xqa";
  if (c.max_seq_len) s += " max_seq_len " + std::to_string(c.max_seq_len);
  if (c.out_pad) s += " out_pad " + std::to_string(c.out_pad);
  s += " sm" + std::to_string(c.sm_count) + " bmm1 " + std::to_string(c.bmm1) + " bmm2 " + std::to_string(c.bmm2);
  return s;
}

constexpr double kTol = 1e-2;  // relative L2 budget of 16-bit inputs with P rounded to 16 bits

inline double run_mla(const MlaCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int B = static_cast<int>(c.seq_lens.size()), H = c.heads, T = c.q_len, P = c.page_size;
  const int max_len = *std::max_element(c.seq_lens.begin(), c.seq_lens.end());
  const int pages_per_seq = (max_len + P - 1) / P + 1;  // a spare page: max_pages * page_size > the longest
  const int num_pages = B * pages_per_seq + 3;          // pages no request owns (sparse may still pick them)
  std::vector<int> page_ids(num_pages);
  std::iota(page_ids.begin(), page_ids.end(), 0);
  std::shuffle(page_ids.begin(), page_ids.end(), rng);
  std::vector<int> bt(page_ids.begin(), page_ids.begin() + size_t(B) * pages_per_seq);

  // The reference reads the values as the device stores them (fp8: dequantised).
  auto qv = util::quantize(testing::random_values(size_t(B) * T * H * 576, rng, c.q_sigma), c.dtype);
  auto kvv = testing::random_values(size_t(num_pages) * P * 576, rng, c.kv_sigma);
  // A request's slots past its length hold stale values in a real cache: NaN here, which no
  // kernel may let through (0 * NaN is NaN). Sparse indices may point anywhere, so not there.
  if (c.top_k == 0)
    for (int b = 0; b < B; ++b)
      for (int pos = c.seq_lens[size_t(b)]; pos < pages_per_seq * P; ++pos)
        std::fill_n(kvv.begin() + (int64_t(bt[size_t(b) * pages_per_seq + pos / P]) * P + pos % P) * 576, 576, NAN);
  kvv = util::quantize(kvv, kv_dtype(c));
  const std::vector<int64_t> kv_shape = c.four_d ? std::vector<int64_t>{num_pages, 1, P, 576}
                                                 : std::vector<int64_t>{num_pages, P, 576};
  DeviceTensor q(c.dtype, {B, T, H, 576}), kv(kv_dtype(c), kv_shape), out(out_dtype(c), {B, T, H, 512 + c.out_pad});
  q.upload_floats(qv);
  kv.upload_floats(kvv);
  out.poison();
  DeviceTensor bt_t(DType::kInt32, {B, pages_per_seq}), sl(DType::kInt32, {B});
  bt_t.upload_pod(bt);
  sl.upload_pod(c.seq_lens);

  // Sparse: physical positions anywhere in the cache, about a fifth of them -1, a few past its end.
  std::vector<int> idx;
  DeviceTensor idx_t(DType::kInt32, {B, T, std::max(c.top_k, 1)});
  if (c.top_k > 0) {
    idx.resize(size_t(B) * T * c.top_k);
    for (int& i : idx) {
      const uint32_t r = rng() % 100;
      i = r < 20 ? -1 : r < 22 ? num_pages * P + int(rng() % 64) : int(rng() % (uint32_t(num_pages) * P));
    }
    idx_t.upload_pod(idx);
  }
  const int sm = c.sm_count ? c.sm_count
                 : testing::gpu_test_prewarm_arch() ? 132
                                                    : driver::device_info(driver::current_device()).sm_count;
  const int max_seq_len = c.max_seq_len > 0 ? c.max_seq_len : pages_per_seq * P;
  DeviceTensor ws(DType::kUInt8, {int64_t(std::max<size_t>(256, mla_workspace_bytes(B, H, T, max_seq_len, sm, c.top_k)))});
  ws.zero();  // once: the semaphores reset themselves

  MlaArgs a;
  a.query = q.view;
  a.kv_cache = kv.view;
  a.workspace_buffer = ws.view;
  a.block_tables = bt_t.view;
  a.seq_lens = sl.view;
  a.max_seq_len = max_seq_len;
  a.out = out.view;
  a.out.shape[3] = 512;  // (out_pad: a view of each padded row's first 512)
  a.backend = c.backend;
  if (c.top_k > 0) {
    a.sparse_mla_top_k = c.top_k;
    a.indices = idx_t.view;
  }
  if (c.sm_count) a.sm_count = c.sm_count;
  DeviceTensor sinks_t(DType::kFloat32, {H});
  std::vector<float> sinks_host(H);
  if (c.sinks) {
    for (auto& s : sinks_host) s = std::normal_distribution<float>(1.0f, 2.0f)(rng);
    sinks_t.upload_pod(sinks_host);
    a.sinks = sinks_t.view;
  }
  DeviceTensor scales(DType::kFloat32, {2});
  if (c.scale_ptrs) {
    scales.upload_pod(std::vector<float>{c.bmm1, c.bmm2});
    // Prewarm mode has no device memory; any non-null pointer selects the same kernel.
    const float* base = testing::gpu_test_prewarm_arch() ? reinterpret_cast<const float*>(uintptr_t{256})
                                                         : static_cast<const float*>(scales.view.data);
    a.bmm1_scale = base;
    a.bmm2_scale = base + 1;
  } else {
    a.bmm1_scale = c.bmm1;
    a.bmm2_scale = c.bmm2;
  }
  DeviceTensor lse(DType::kFloat32, {B * T, H});
  if (c.lse) {
    lse.poison();
    a.lse = lse.view;
    a.lse_base = c.lse_base2 ? LseBase::kTwo : LseBase::kE;
  }
  if (const char* arch = testing::gpu_test_prewarm_arch()) {
    prewarm_mla(a, arch);
    return 0.0;
  }
  batch_decode_mla(a);
  driver::ctx_sync();
  // Run twice: the semaphores must have reset themselves.
  out.poison();
  if (c.lse) lse.poison();
  batch_decode_mla(a);
  driver::ctx_sync();

  testing::MlaRefProblem pr;
  pr.batch = B;
  pr.q_len = T;
  pr.num_heads = H;
  pr.page_size = P;
  pr.num_tokens = int64_t(num_pages) * P;
  pr.query = &qv;
  pr.kv = &kvv;
  pr.block_tables = bt;
  pr.pages_per_seq = pages_per_seq;
  pr.seq_lens = c.seq_lens;
  pr.top_k = c.top_k;
  pr.indices = idx;
  pr.bmm1 = c.bmm1;
  pr.bmm2 = c.bmm2;
  if (c.sinks) pr.sinks = sinks_host;
  const testing::MlaRefResult ref = testing::reference_mla(pr);

  const std::vector<float> got = out.download_floats();
  std::vector<double> g;
  g.reserve(got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const bool pad = int(i % size_t(512 + c.out_pad)) >= 512;
    if (pad != std::isnan(got[i])) {
      ADD_FAILURE() << describe(c) << (pad ? ": a pad element written at " : ": NaN (an element never written) at ") << i;
      return 1e9;
    }
    if (!pad) g.push_back(got[i]);
  }
  std::string report;
  const size_t outside = testing::count_outside_bound(g, ref.out, 5 * kTol * testing::rms(ref.out), kTol, &report);
  EXPECT_EQ(outside, 0u) << describe(c) << ": " << outside << " of " << ref.out.size()
                         << " elements outside the bound:\n" << report;
  if (c.lse) {
    const std::vector<float> gl = lse.download_floats();
    size_t bad = 0;
    for (size_t i = 0; i < ref.lse.size(); ++i) {
      const double want = c.lse_base2 ? ref.lse[i] / std::log(2.0) : ref.lse[i];
      const bool ok = std::isinf(want) ? (std::isinf(gl[i]) && gl[i] < 0) : std::fabs(gl[i] - want) <= 2e-3 * (1 + std::fabs(want));
      if (!ok && ++bad <= 5)
        ADD_FAILURE() << describe(c) << ": lse[" << i << "] = " << gl[i] << ", expected " << want;
    }
    EXPECT_EQ(bad, 0u) << describe(c);
  }
  return testing::rel_l2(g, ref.out);
}

// A random 16-bit case of the sweeps: dtype, heads, q_len, page, 1-4 ragged lengths up to
// max_len, sometimes sparse, and every option drawn (on the xqa backend; callers may change it).
inline MlaCase random_16bit_case(std::mt19937& rng, int max_len) {
  MlaCase c;
  c.dtype = rng() % 2 ? DType::kBFloat16 : DType::kFloat16;
  const int heads[] = {1, 2, 7, 16, 32, 64, 100, 128};
  c.heads = heads[rng() % 8];
  c.q_len = 1 + int(rng() % 16);
  c.page_size = 16 << (rng() % 4);
  const int batch = 1 + int(rng() % 4);
  c.seq_lens.clear();
  for (int b = 0; b < batch; ++b) c.seq_lens.push_back(1 + int(rng() % uint32_t(max_len)));
  if (rng() % 3 == 0) c.top_k = 32 * (1 + int(rng() % 40)) + int(rng() % 2) * 7;  // not always a tile multiple
  c.sinks = rng() % 3 == 0;
  c.scale_ptrs = rng() % 3 == 0;
  c.lse = rng() % 2 == 0;
  c.lse_base2 = rng() % 2 == 0;
  c.four_d = rng() % 2 == 0;
  c.sm_count = rng() % 4 == 0 ? 1 : 0;
  c.bmm1 = (0.5f + float(rng() % 100) / 100.f) / 24.f;
  c.bmm2 = 0.5f + float(rng() % 100) / 50.f;
  return c;
}

}  // namespace attnjit::mla_gpu
