// batch_decode_mla with 16-bit KV on the GPU against the float64 reference
// (mla_gpu_case.hpp): the mma.sync kernel (MlaGpu*) and the wgmma one (MlaGpuHopper*).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "common/env_guard.hpp"
#include "mla_gpu_case.hpp"

namespace attnjit {
namespace {

using namespace mla_gpu;

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

// out as a view of wider rows (512 + pad elements apart; the pad must stay NaN): rows that
// are 16-byte aligned leave the wide tile by bulk copies (pad 8), 4-byte aligned ones as the
// lanes' pairs (pad 2; the op requires 4-byte strides). Both backends, the wide and the
// narrow tile, a request split across the GPU (merged by its last CTA), and sparse rows.
TEST(MlaGpuHopper, PaddedOutputRowsMatch) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  int seed = 9600;
  for (int pad : {8, 2})
    for (Backend backend : {Backend::kTrtllmGen, Backend::kXqa}) {
      MlaCase wide;
      wide.heads = 128;
      wide.q_len = 2;
      wide.seq_lens = {300, 5000};
      MlaCase narrow;
      narrow.heads = 16;
      narrow.seq_lens = {9000, 40};
      MlaCase split;
      split.heads = 64;
      split.seq_lens = {32768};
      MlaCase sparse;
      sparse.heads = 128;
      sparse.seq_lens = {2048, 700};
      sparse.top_k = 2048;
      for (MlaCase* c : {&wide, &narrow, &split, &sparse}) {
        c->backend = backend;
        c->lse = true;
        c->out_pad = pad;
        EXPECT_LE(run_mla(*c, seed++), kTol) << describe(*c);
      }
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

// The wide tile in 32-token tiles, four KV buffers (ATTNJIT_MLA_TILE32=1: one row block of
// dense 16-bit KV, 33 to 64 rows): every page size (a box of 16 rows, or one of 32 from a
// longer page), tails of every length, splits merged by the last CTA and by the combine
// launch, sinks, LSE, device scales, both dtypes and cache shapes, TMA and cp.async rows.
TEST(MlaGpuHopper, ThirtyTwoTokenTilesMatch) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  testing::EnvGuard tile32("ATTNJIT_MLA_TILE32", "1");
  std::mt19937 rng(3232);
  int n = 0;
  for (int page : {16, 32, 64, 128})
    for (int heads : {33, 64}) {
      MlaCase c;
      c.backend = Backend::kTrtllmGen;
      c.heads = heads;
      c.q_len = heads == 33 && page == 32 ? 2 : 1;  // 66 rows: two row blocks, the 64-token tile again
      c.page_size = page;
      c.seq_lens = {1 + int(rng() % 31), 33 + int(rng() % 64), 1 + int(rng() % 9000)};
      c.dtype = n % 2 ? DType::kFloat16 : DType::kBFloat16;
      c.four_d = n % 3 == 1;
      c.sinks = n % 2 == 0;
      c.lse = n % 4 < 2;
      c.scale_ptrs = n % 4 == 3;
      c.sm_count = n % 3 == 2 ? 4 : 0;  // few SMs: more splits a request
      EXPECT_LE(run_mla(c, 3300 + n++), kTol) << describe(c) << " tile32";
    }
  for (const char* combine : {"0", "1"}) {
    testing::EnvGuard mode("ATTNJIT_MLA_COMBINE", combine);
    MlaCase one;
    one.backend = Backend::kTrtllmGen;
    one.heads = 64;
    one.seq_lens = {20000, 7};
    one.lse = true;
    EXPECT_LE(run_mla(one, 3400 + n++), kTol) << describe(one) << " tile32, combine " << combine;
  }
  testing::EnvGuard no_tma("ATTNJIT_MLA_TMA", "0");
  for (int page : {16, 128}) {
    MlaCase c;
    c.backend = Backend::kTrtllmGen;
    c.heads = 48;
    c.page_size = page;
    c.seq_lens = {1 + int(rng() % 3000), 1 + int(rng() % 100)};
    c.lse = true;
    EXPECT_LE(run_mla(c, 3500 + n++), kTol) << describe(c) << " tile32, cp.async";
  }
}

// seq_lens past max_seq_len (outside the seed's contract, inside the block tables): the splits
// are planned over max_seq_len, and the last one runs to the request's end, so no key is lost.
TEST(MlaGpu, SeqLensPastMaxSeqLenStillSeeEveryKey) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  int seed = 4400;
  for (Backend backend : {Backend::kXqa, Backend::kTrtllmGen})
    for (int sm : {0, 4}) {  // many splits, and a few; 16 rows (a narrow wgmma tile where there is one) and 32
      MlaCase c;
      c.backend = backend;
      c.heads = 16;
      c.q_len = sm ? 1 : 2;
      c.seq_lens = {700, 3000, 1025};
      c.max_seq_len = 1024;
      c.sm_count = sm;
      c.lse = true;
      EXPECT_LE(run_mla(c, seed++), kTol) << describe(c);
    }
}

}  // namespace
}  // namespace attnjit
