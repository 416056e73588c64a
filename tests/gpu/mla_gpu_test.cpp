// batch_decode_mla on the GPU against the float64 reference (tests/common/mla_reference.hpp):
// every output element (NaN-filled first) and every LSE checked against a per-element bound.
// fp8 e4m3 KV (and fp8 queries) are checked against the reference over the dequantised values.
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
#include "common/env_guard.hpp"
#include "common/mla_reference.hpp"
#include "gpu_test_env.hpp"

namespace attnjit {
namespace {

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
  float bmm1 = 1.0f / 24.0f;  // 1 / sqrt(576)
  float bmm2 = 1.0f;
  Backend backend = Backend::kXqa;  // MlaGpu* test the mma.sync kernel, MlaGpuHopper the wgmma one
};

DType kv_dtype(const MlaCase& c) { return c.fp8_kv ? DType::kFloat8E4M3 : c.dtype; }
DType out_dtype(const MlaCase& c) { return c.dtype == DType::kFloat8E4M3 ? DType::kBFloat16 : c.dtype; }

std::string describe(const MlaCase& c) {
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
  s += " sm" + std::to_string(c.sm_count) + " bmm1 " + std::to_string(c.bmm1) + " bmm2 " + std::to_string(c.bmm2);
  return s;
}

constexpr double kTol = 1e-2;  // relative L2 budget of 16-bit inputs with P rounded to 16 bits

double run_mla(const MlaCase& c, uint32_t seed) {
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
  DeviceTensor q(c.dtype, {B, T, H, 576}), kv(kv_dtype(c), kv_shape), out(out_dtype(c), {B, T, H, 512});
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
  const int max_seq_len = pages_per_seq * P;
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
  std::vector<double> g(got.begin(), got.end());
  for (size_t i = 0; i < g.size(); ++i)
    if (std::isnan(g[i])) {
      ADD_FAILURE() << describe(c) << ": NaN (an element never written) at " << i;
      return 1e9;
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
MlaCase random_16bit_case(std::mt19937& rng, int max_len) {
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

TEST(MlaGpu, Basic) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  MlaCase c;
  EXPECT_LE(run_mla(c, 1), kTol) << describe(c);
}

TEST(MlaGpu, OddHeadCountsAndQueryLengths) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(4242);
  int n = 0;
  for (int heads : {1, 7, 16, 33, 128})
    for (int q_len : {1, 2, 5, 16}) {
      MlaCase c;
      c.heads = heads;
      c.q_len = q_len;
      c.page_size = 16 << (rng() % 4);
      // Ragged, including a request shorter than its queries (its first rows see nothing).
      c.seq_lens = {1 + int(rng() % 40), q_len + int(rng() % 900), 1 + int(rng() % 2500)};
      c.dtype = rng() % 2 ? DType::kBFloat16 : DType::kFloat16;
      EXPECT_LE(run_mla(c, 100 + n++), kTol) << describe(c);
    }
}

TEST(MlaGpu, RandomizedSweep) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(20261201);
  for (int n = 0; n < 40; ++n) {
    const MlaCase c = random_16bit_case(rng, 3000);
    EXPECT_LE(run_mla(c, 9000 + n), kTol) << describe(c);
  }
}

TEST(MlaGpu, SparseWithSinksDeviceScalesAndLse) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  for (int heads : {16, 128}) {
    MlaCase c;
    c.heads = heads;
    c.q_len = 2;
    c.seq_lens = {2048, 300};
    c.top_k = 2048;
    c.sinks = c.scale_ptrs = c.lse = true;
    c.bmm1 = 0.04f;
    c.bmm2 = 1.5f;
    EXPECT_LE(run_mla(c, 77 + heads), kTol) << describe(c);
  }
}

TEST(MlaGpu, LongSequencesSplitAcrossTheGpu) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  MlaCase one;
  one.heads = 128;
  one.seq_lens = {32768};
  one.lse = true;
  EXPECT_LE(run_mla(one, 5), kTol) << describe(one);
  MlaCase narrow;
  narrow.heads = 16;
  narrow.q_len = 4;
  narrow.page_size = 128;
  narrow.seq_lens = {20000, 17, 9000};
  narrow.sinks = true;
  EXPECT_LE(run_mla(narrow, 6), kTol) << describe(narrow);
}

// fp8 e4m3 KV: a bf16, fp8 or fp16 query (fp8 writes bf16), 16, 128 and odd head counts,
// q_len 1 and more, pages of 32 and 64, ragged lengths (one shorter than its queries), bmm1
// and bmm2 scales as host floats and as device pointers.
TEST(MlaGpuFp8, HeadCountsQueryLengthsPagesAndScales) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(8008);
  int n = 0;
  for (DType q : {DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat16})
    for (int heads : {16, 128, 7})
      for (int q_len : {1, 2, 5}) {
        MlaCase c;
        c.dtype = q;
        c.fp8_kv = true;
        c.heads = heads;
        c.q_len = q_len;
        c.page_size = n % 2 ? 32 : 64;
        c.seq_lens = {1 + int(rng() % 40), q_len + int(rng() % 900), 1 + int(rng() % 2500)};
        c.scale_ptrs = n % 3 == 1;
        c.four_d = n % 4 == 3;
        c.bmm1 = (0.5f + float(rng() % 100) / 100.f) / 24.f;
        c.bmm2 = 0.5f + float(rng() % 100) / 50.f;
        EXPECT_LE(run_mla(c, 300 + n++), kTol) << describe(c);
      }
}

// Values across e4m3's range (large ones near 448, small ones subnormal) with the scales an
// engine folds in: bmm1 = q_scale * k_scale / sqrt(576), bmm2 = v_scale * o_scale; the host
// and the device forms of the same scales.
TEST(MlaGpuFp8, QuantizationScalesHostAndDevice) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  int n = 0;
  for (DType q : {DType::kFloat8E4M3, DType::kBFloat16})
    for (float kv_sigma : {96.0f, 0.02f})
      for (bool ptrs : {false, true}) {
        MlaCase c;
        c.dtype = q;
        c.fp8_kv = true;
        c.heads = 16;
        c.q_len = 2;
        c.seq_lens = {700, 1500, 33};
        c.q_sigma = q == DType::kFloat8E4M3 ? 24.0f : 1.0f;
        c.kv_sigma = kv_sigma;
        const float q_scale = 1.0f / c.q_sigma, k_scale = 1.0f / kv_sigma, v_scale = 1.0f / kv_sigma;
        c.bmm1 = q_scale * k_scale / 24.0f;
        c.bmm2 = v_scale * 2.0f;
        c.scale_ptrs = ptrs;
        EXPECT_LE(run_mla(c, 500 + n++), kTol) << describe(c);
      }
}

// Split-KV (the merge reads the fp8 path's interleaved O), sparse indices, sinks and LSE.
TEST(MlaGpuFp8, SplitsSparseSinksAndLse) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  MlaCase one;
  one.dtype = DType::kFloat8E4M3;
  one.fp8_kv = true;
  one.heads = 128;
  one.seq_lens = {32768};
  one.lse = true;
  EXPECT_LE(run_mla(one, 601), kTol) << describe(one);
  MlaCase narrow;
  narrow.fp8_kv = true;
  narrow.heads = 16;
  narrow.q_len = 3;
  narrow.page_size = 32;
  narrow.seq_lens = {20000, 17, 9000};
  narrow.sinks = narrow.lse = narrow.lse_base2 = true;
  EXPECT_LE(run_mla(narrow, 602), kTol) << describe(narrow);
  for (int heads : {16, 128, 33}) {
    MlaCase c;
    c.dtype = heads == 16 ? DType::kBFloat16 : DType::kFloat8E4M3;
    c.fp8_kv = true;
    c.heads = heads;
    c.q_len = 2;
    c.seq_lens = {2048, 300};
    c.top_k = heads == 33 ? 999 : 2048;
    c.sinks = c.scale_ptrs = c.lse = true;
    c.bmm1 = 0.04f;
    c.bmm2 = 1.5f;
    EXPECT_LE(run_mla(c, 603 + heads), kTol) << describe(c);
  }
}

TEST(MlaGpuFp8, RandomizedSweep) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(20261202);
  for (int n = 0; n < 24; ++n) {
    MlaCase c;
    const DType qs[] = {DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat16};
    c.dtype = qs[rng() % 3];
    c.fp8_kv = true;
    const int heads[] = {1, 3, 16, 32, 64, 77, 128};
    c.heads = heads[rng() % 7];
    c.q_len = 1 + int(rng() % 16);
    c.page_size = 16 << (rng() % 4);
    const int batch = 1 + int(rng() % 4);
    c.seq_lens.clear();
    for (int b = 0; b < batch; ++b) c.seq_lens.push_back(1 + int(rng() % 3000));
    if (rng() % 3 == 0) c.top_k = 32 * (1 + int(rng() % 40)) + int(rng() % 2) * 7;
    c.sinks = rng() % 3 == 0;
    c.scale_ptrs = rng() % 2 == 0;
    c.lse = rng() % 2 == 0;
    c.lse_base2 = rng() % 2 == 0;
    c.four_d = rng() % 2 == 0;
    c.sm_count = rng() % 4 == 0 ? 1 : 0;
    c.kv_sigma = rng() % 2 ? 1.0f : 16.0f;
    c.bmm1 = (0.5f + float(rng() % 100) / 100.f) / (24.f * c.kv_sigma);
    c.bmm2 = (0.5f + float(rng() % 100) / 50.f) / c.kv_sigma;
    EXPECT_LE(run_mla(c, 9500 + n), kTol) << describe(c);
  }
}

// A small wgmma-kernel case (the compute-sanitizer subset's): two row blocks, a split
// merge (a request longer than one split), sinks and LSE.
TEST(MlaGpuHopper, Basic) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  MlaCase c;
  c.backend = Backend::kTrtllmGen;
  c.heads = 128;
  c.seq_lens = {100, 3000};
  c.sinks = c.lse = true;
  EXPECT_LE(run_mla(c, 11), kTol) << describe(c);
}

// The wgmma (trtllm-gen) kernel: head counts 1 to 128 (64 rows per CTA, so 1, 2 or more
// row blocks and partly empty ones), query lengths 1 to 16, every page size, ragged lengths
// (one shorter than its queries), both dtypes and both cache shapes.
TEST(MlaGpuHopper, HeadCountsQueryLengthsAndPages) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(9090);
  int n = 0;
  for (int heads : {1, 7, 16, 33, 64, 128})
    for (int q_len : {1, 2, 5, 16}) {
      MlaCase c;
      c.backend = Backend::kTrtllmGen;
      c.heads = heads;
      c.q_len = q_len;
      c.page_size = 16 << (rng() % 4);
      c.seq_lens = {1 + int(rng() % 40), q_len + int(rng() % 900), 1 + int(rng() % 2500)};
      c.dtype = rng() % 2 ? DType::kBFloat16 : DType::kFloat16;
      c.four_d = n % 3 == 2;
      EXPECT_LE(run_mla(c, 700 + n++), kTol) << describe(c);
    }
}

TEST(MlaGpuHopper, RandomizedSweep) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(20261203);
  for (int n = 0; n < 32; ++n) {
    MlaCase c = random_16bit_case(rng, 5000);
    c.backend = n % 4 == 3 ? Backend::kAuto : Backend::kTrtllmGen;  // auto takes it on sm_90a
    EXPECT_LE(run_mla(c, 9800 + n), kTol) << describe(c);
  }
}

// Split-KV across the GPU (one long sequence; a narrow ragged batch), the merge with LSE
// and sinks; sparse indices (-1 and out-of-cache entries) with device scales.
TEST(MlaGpuHopper, SplitsSparseSinksAndLse) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  MlaCase one;
  one.backend = Backend::kTrtllmGen;
  one.heads = 128;
  one.seq_lens = {32768};
  one.lse = true;
  EXPECT_LE(run_mla(one, 801), kTol) << describe(one);
  MlaCase narrow;
  narrow.backend = Backend::kTrtllmGen;
  narrow.heads = 16;
  narrow.q_len = 4;
  narrow.page_size = 128;
  narrow.seq_lens = {20000, 17, 9000};
  narrow.sinks = narrow.lse = narrow.lse_base2 = true;
  EXPECT_LE(run_mla(narrow, 802), kTol) << describe(narrow);
  for (int heads : {16, 128, 33}) {
    MlaCase c;
    c.backend = Backend::kTrtllmGen;
    c.dtype = heads == 33 ? DType::kFloat16 : DType::kBFloat16;
    c.heads = heads;
    c.q_len = 2;
    c.seq_lens = {2048, 300};
    c.top_k = heads == 33 ? 999 : 2048;
    c.sinks = c.scale_ptrs = c.lse = true;
    c.bmm1 = 0.04f;
    c.bmm2 = 1.5f;
    EXPECT_LE(run_mla(c, 803 + heads), kTol) << describe(c);
  }
}

// The split merge either way (ATTNJIT_MLA_COMBINE): by the attention pass's last CTA of
// each row block, or by the combine launch over many CTAs. Both backends, one long request,
// ragged lengths with sinks and base-2 LSE, sparse indices with empty splits (a short
// request's -1 entries), fp8 KV on xqa.
TEST(MlaGpu, SplitMergeByLastCtaOrCombineLaunchMatch) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  int seed = 9100;
  for (const char* mode : {"0", "1"}) {
    testing::EnvGuard combine("ATTNJIT_MLA_COMBINE", mode);
    for (Backend backend : {Backend::kXqa, Backend::kTrtllmGen}) {
      MlaCase one;
      one.backend = backend;
      one.heads = 128;
      one.seq_lens = {32768};
      one.lse = true;
      EXPECT_LE(run_mla(one, seed++), kTol) << describe(one) << " combine " << mode;
      MlaCase narrow;
      narrow.backend = backend;
      narrow.heads = 16;
      narrow.q_len = 4;
      narrow.page_size = 128;
      narrow.seq_lens = {20000, 17, 9000};
      narrow.sinks = narrow.lse = narrow.lse_base2 = true;
      EXPECT_LE(run_mla(narrow, seed++), kTol) << describe(narrow) << " combine " << mode;
      MlaCase sparse;
      sparse.backend = backend;
      sparse.heads = 33;
      sparse.dtype = DType::kFloat16;
      sparse.q_len = 2;
      sparse.seq_lens = {2048, 300};
      sparse.top_k = 2048;
      sparse.sinks = sparse.scale_ptrs = sparse.lse = true;
      sparse.bmm1 = 0.04f;
      sparse.bmm2 = 1.5f;
      EXPECT_LE(run_mla(sparse, seed++), kTol) << describe(sparse) << " combine " << mode;
    }
    MlaCase fp8;
    fp8.fp8_kv = true;
    fp8.heads = 64;
    fp8.seq_lens = {16384, 5000};
    fp8.lse = true;
    EXPECT_LE(run_mla(fp8, seed++), kTol) << describe(fp8) << " combine " << mode;
  }
}

// The wgmma kernel's dense path without its TMA tensor map (ATTNJIT_MLA_TMA=0): the rows
// copied by cp.async, as sparse calls always are. Same kernels, ragged lengths, every page size.
TEST(MlaGpuHopper, DenseRowsByCpAsyncMatch) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  testing::EnvGuard no_tma("ATTNJIT_MLA_TMA", "0");
  std::mt19937 rng(4242);
  for (int page : {16, 32, 64, 128}) {
    MlaCase c;
    c.backend = Backend::kTrtllmGen;
    c.heads = page == 32 ? 128 : 16;
    c.q_len = page == 16 ? 3 : 1;
    c.page_size = page;
    c.seq_lens = {1 + int(rng() % 3000), 1 + int(rng() % 200), 1 + int(rng() % 9000)};
    c.lse = true;
    EXPECT_LE(run_mla(c, 4300 + page), kTol) << describe(c);
  }
}

// fp8 KV has no wgmma kernel: asking trtllm-gen for it is an error naming the backend.
TEST(MlaGpuHopper, Fp8KvIsRefusedNamingTheBackend) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  if (testing::gpu_test_prewarm_arch()) return;
  DeviceTensor q(DType::kBFloat16, {1, 1, 16, 576}), kv(DType::kFloat8E4M3, {2, 64, 576}),
      out(DType::kBFloat16, {1, 1, 16, 512}), bt(DType::kInt32, {1, 2}), sl(DType::kInt32, {1});
  MlaArgs a;
  a.query = q.view;
  a.kv_cache = kv.view;
  a.out = out.view;
  a.block_tables = bt.view;
  a.seq_lens = sl.view;
  a.max_seq_len = 128;
  a.backend = Backend::kTrtllmGen;
  try {
    batch_decode_mla(a);
    ADD_FAILURE() << "trtllm-gen served an fp8-KV mla call: the wgmma kernel reads 16-bit KV";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("backend"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnjit
