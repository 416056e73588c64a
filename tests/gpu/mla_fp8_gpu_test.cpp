// batch_decode_mla with fp8 e4m3 KV on the GPU against the float64 reference
// (mla_gpu_case.hpp), on both kernels: the mma.sync one (MlaGpuFp8, fp8 widened in
// registers) and the wgmma one (MlaGpuHopperFp8, each half tile widened in shared memory;
// dense pages by TMA, sparse rows by cp.async).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "mla_gpu_case.hpp"

namespace attnjit {
namespace {

using namespace mla_gpu;

// The case on `backend` (sparse ones included: the wgmma kernel copies their rows by cp.async).
MlaCase& on(Backend backend, MlaCase& c) {
  c.backend = backend;
  return c;
}

// fp8 e4m3 KV: a bf16, fp8 or fp16 query (fp8 writes bf16), 16, 128 and odd head counts,
// q_len 1 and more, pages of 32 and 64, ragged lengths (one shorter than its queries), bmm1
// and bmm2 scales as host floats and as device pointers.
void HeadCountsQueryLengthsPagesAndScales(Backend backend) {
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
        EXPECT_LE(run_mla(on(backend, c), 300 + n++), kTol) << describe(c);
      }
}

// Values across e4m3's range (large ones near 448, small ones subnormal) with the scales an
// engine folds in: bmm1 = q_scale * k_scale / sqrt(576), bmm2 = v_scale * o_scale; the host
// and the device forms of the same scales.
void QuantizationScalesHostAndDevice(Backend backend) {
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
        EXPECT_LE(run_mla(on(backend, c), 500 + n++), kTol) << describe(c);
      }
}

// Split-KV (the merge reads the fp8 path's interleaved O), sparse indices, sinks and LSE.
void SplitsSparseSinksAndLse(Backend backend) {
  MlaCase one;
  one.dtype = DType::kFloat8E4M3;
  one.fp8_kv = true;
  one.heads = 128;
  one.seq_lens = {32768};
  one.lse = true;
  EXPECT_LE(run_mla(on(backend, one), 601), kTol) << describe(one);
  MlaCase narrow;
  narrow.fp8_kv = true;
  narrow.heads = 16;
  narrow.q_len = 3;
  narrow.page_size = 32;
  narrow.seq_lens = {20000, 17, 9000};
  narrow.sinks = narrow.lse = narrow.lse_base2 = true;
  EXPECT_LE(run_mla(on(backend, narrow), 602), kTol) << describe(narrow);
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
    EXPECT_LE(run_mla(on(backend, c), 603 + heads), kTol) << describe(c);
  }
}

void RandomizedSweep(Backend backend) {
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
    EXPECT_LE(run_mla(on(backend, c), 9500 + n), kTol) << describe(c);
  }
}


#define ATTNJIT_MLA_FP8_SUITES(name)        \
  TEST(MlaGpuFp8, name) {                    \
    ATTNJIT_REQUIRE_GPU_OR_PREWARM();        \
    name(Backend::kXqa);                     \
  }                                          \
  TEST(MlaGpuHopperFp8, name) {              \
    ATTNJIT_REQUIRE_GPU_OR_PREWARM();        \
    name(Backend::kTrtllmGen);               \
  }
ATTNJIT_MLA_FP8_SUITES(HeadCountsQueryLengthsPagesAndScales)
ATTNJIT_MLA_FP8_SUITES(QuantizationScalesHostAndDevice)
ATTNJIT_MLA_FP8_SUITES(SplitsSparseSinksAndLse)
ATTNJIT_MLA_FP8_SUITES(RandomizedSweep)

// A small wgmma-kernel fp8 case (the compute-sanitizer subset's): two row blocks, a split
// merge, sinks and LSE, a request whose last tile is partly past its length.
TEST(MlaGpuHopperFp8, Basic) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  MlaCase c;
  c.backend = Backend::kTrtllmGen;
  c.fp8_kv = true;
  c.heads = 128;
  c.seq_lens = {100, 3000};
  c.sinks = c.lse = true;
  EXPECT_LE(run_mla(c, 12), kTol) << describe(c);
}

// The same for sparse indices (rows copied by cp.async into the staging areas): -1 and
// out-of-cache entries, a top_k that is not a tile multiple, an fp8 query, device scales.
TEST(MlaGpuHopperFp8, SparseBasic) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  MlaCase c;
  c.backend = Backend::kTrtllmGen;
  c.dtype = DType::kFloat8E4M3;
  c.q_sigma = 16.0f;
  c.fp8_kv = true;
  c.heads = 64;
  c.q_len = 2;
  c.seq_lens = {300, 2048};
  c.top_k = 519;
  c.sinks = c.lse = c.scale_ptrs = true;
  c.bmm1 = 1.0f / (24.0f * 16.0f);
  EXPECT_LE(run_mla(c, 13), kTol) << describe(c);
}

// The wgmma kernel's fp8 tiles at every page size (boxes of 16 to 64 slots), long ragged
// requests split across the GPU, a request shorter than its queries, base-2 LSE and sinks;
// auto takes the wgmma kernel for dense fp8 on sm_90a.
TEST(MlaGpuHopperFp8, PagesSplitsAndAuto) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(8090);
  int n = 0;
  for (int page : {16, 32, 64, 128})
    for (DType q : {DType::kBFloat16, DType::kFloat8E4M3}) {
      MlaCase c;
      c.backend = n % 3 == 2 ? Backend::kAuto : Backend::kTrtllmGen;
      c.dtype = q;
      c.fp8_kv = true;
      c.heads = page == 64 ? 128 : page == 32 ? 64 : 16;
      c.q_len = page == 16 ? 3 : 1 + n % 2;
      c.page_size = page;
      c.seq_lens = {1 + int(rng() % 20), 1 + int(rng() % 9000), 17000 + int(rng() % 3000)};
      c.sinks = n % 2 == 0;
      c.lse = true;
      c.lse_base2 = n % 4 == 1;
      c.four_d = n % 3 == 1;
      c.q_sigma = q == DType::kFloat8E4M3 ? 16.0f : 1.0f;
      c.bmm1 = 1.0f / (24.0f * c.q_sigma);
      EXPECT_LE(run_mla(c, 8100 + n++), kTol) << describe(c);
    }
}

}  // namespace
}  // namespace attnjit
