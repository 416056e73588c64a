// The wgmma MLA kernel's narrow tile (<= 16 query rows a CTA, rows in wgmma's N; 17-32 with
// 16-bit KV) on the GPU
// against the float64 reference (mla_gpu_case.hpp): every head count and query length that
// fits it, every page size, both 16-bit dtypes and fp8 KV with either query, sparse indices,
// sinks, device scales, LSE, splits merged either way, the dense path without its tensor map,
// and the same calls on the wide tile (ATTNJIT_MLA_NARROW=0).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "common/env_guard.hpp"
#include "mla_gpu_case.hpp"

namespace attnjit {
namespace {

using namespace mla_gpu;

MlaCase narrow_case() {
  MlaCase c;
  c.backend = Backend::kTrtllmGen;
  c.heads = 16;
  return c;
}

// The compute-sanitizer subset's case: both warpgroups' tiles, a request whose last tile is
// partly past its length, a split merge, sinks and LSE.
TEST(MlaGpuHopperNarrow, Basic) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  MlaCase c = narrow_case();
  c.seq_lens = {100, 3000};
  c.sinks = c.lse = true;
  EXPECT_LE(run_mla(c, 21), kTol) << describe(c);
}

// Rows 1 to 16 as heads x query tokens (the causal limit differs between a CTA's columns when
// q_len > 1), every page size, ragged lengths (one shorter than its queries, one of one
// token, one of many tiles), both dtypes and both cache shapes.
TEST(MlaGpuHopperNarrow, HeadsQueryLengthsPagesAndDtypes) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(1616);
  int n = 0;
  struct Rows {
    int heads, q_len;
  };
  for (const Rows r : {Rows{16, 1}, Rows{1, 1}, Rows{5, 3}, Rows{8, 2}, Rows{1, 16}, Rows{13, 1}, Rows{2, 8}})
    for (int page : {16, 32, 64, 128}) {
      MlaCase c = narrow_case();
      c.heads = r.heads;
      c.q_len = r.q_len;
      c.page_size = page;
      c.seq_lens = {1, r.q_len + int(rng() % 60), 64 + int(rng() % 4000), 1 + int(rng() % 700)};
      c.dtype = n % 2 ? DType::kBFloat16 : DType::kFloat16;
      c.four_d = n % 3 == 2;
      EXPECT_LE(run_mla(c, 1600 + n++), kTol) << describe(c);
    }
}

// fp8 e4m3 KV, widened in shared memory by the warpgroup that owns the tile: with a bf16 and
// an fp8 query, every page size (TMA boxes of 16 to 64 slots), values across e4m3's range.
TEST(MlaGpuHopperNarrow, Fp8KvWithEitherQuery) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(1688);
  int n = 0;
  for (int page : {16, 32, 64, 128})
    for (DType q : {DType::kBFloat16, DType::kFloat8E4M3}) {
      MlaCase c = narrow_case();
      c.dtype = q;
      c.fp8_kv = true;
      c.heads = page == 16 ? 8 : 16;
      c.q_len = page == 16 ? 2 : 1;
      c.page_size = page;
      c.seq_lens = {1 + int(rng() % 100), 1 + int(rng() % 5000), 4096};
      c.q_sigma = q == DType::kFloat8E4M3 ? 16.0f : 1.0f;
      c.kv_sigma = n % 2 ? 16.0f : 1.0f;
      c.bmm1 = 1.0f / (24.0f * c.q_sigma * c.kv_sigma);
      c.bmm2 = 1.0f / c.kv_sigma;
      c.lse = n % 2 == 0;
      EXPECT_LE(run_mla(c, 1700 + n++), kTol) << describe(c);
    }
}

// Sparse indices (one query token a CTA, its own indices: -1 and out-of-cache entries, top_k
// not a tile multiple, one of a single index), sinks, device scales, base-2 LSE, fp8 too.
TEST(MlaGpuHopperNarrow, SparseSinksScalesAndLse) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  int n = 0;
  for (int top_k : {1, 63, 519, 2048})
    for (bool fp8 : {false, true}) {
      MlaCase c = narrow_case();
      c.heads = top_k == 63 ? 7 : 16;
      c.q_len = top_k == 2048 ? 1 : 3;
      c.seq_lens = {2048, 300};
      c.top_k = top_k;
      c.fp8_kv = fp8;
      c.sinks = c.scale_ptrs = c.lse = true;
      c.lse_base2 = n % 2 == 1;
      c.bmm1 = 0.04f;
      c.bmm2 = 1.5f;
      EXPECT_LE(run_mla(c, 1800 + n++), kTol) << describe(c);
    }
}

// Long requests split across the GPU: one of 32K tokens (many splits) and a ragged batch
// (empty splits), merged by the combine launch or by the attention pass's last CTA.
TEST(MlaGpuHopperNarrow, SplitsMergeEitherWay) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  int seed = 1900;
  for (const char* mode : {"0", "1"}) {
    testing::EnvGuard combine("ATTNJIT_MLA_COMBINE", mode);
    MlaCase one = narrow_case();
    one.seq_lens = {32768};
    one.lse = true;
    EXPECT_LE(run_mla(one, seed++), kTol) << describe(one) << " combine " << mode;
    MlaCase ragged = narrow_case();
    ragged.heads = 8;
    ragged.q_len = 2;
    ragged.page_size = 128;
    ragged.seq_lens = {20000, 17, 9000};
    ragged.sinks = ragged.lse = ragged.lse_base2 = true;
    EXPECT_LE(run_mla(ragged, seed++), kTol) << describe(ragged) << " combine " << mode;
    MlaCase fp8 = narrow_case();
    fp8.fp8_kv = true;
    fp8.seq_lens = {16384, 5000};
    fp8.sm_count = 1;  // the plan for one SM: few splits, long ones
    EXPECT_LE(run_mla(fp8, seed++), kTol) << describe(fp8) << " combine " << mode;
  }
}

// The dense path without its tensor map (ATTNJIT_MLA_TMA=0: rows by cp.async), and the
// same cases on the wide tile (ATTNJIT_MLA_NARROW=0): both answers against the reference.
TEST(MlaGpuHopperNarrow, CpAsyncRowsAndTheWideTileMatch) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(4343);
  int n = 0;
  for (const char* knob : {"ATTNJIT_MLA_TMA", "ATTNJIT_MLA_NARROW"}) {
    testing::EnvGuard off(knob, "0");
    for (int page : {16, 64}) {
      MlaCase c = narrow_case();
      c.heads = page == 16 ? 16 : 11;
      c.page_size = page;
      c.seq_lens = {1 + int(rng() % 3000), 1 + int(rng() % 200), 1 + int(rng() % 9000)};
      c.lse = true;
      EXPECT_LE(run_mla(c, 4400 + n++), kTol) << describe(c) << " " << knob << "=0";
    }
  }
}

// The 32-row form (narrow32: 17-32 rows, 16-bit KV): rows as heads x query tokens (DeepSeek at
// TP8 with one MTP draft is 16 x 2; at TP4, 32 x 1), every page size, both dtypes, ragged
// lengths, sinks and LSE; sparse with 32 heads; a long request split and merged either way.
TEST(MlaGpuHopperNarrow, ThirtyTwoRows) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(3232);
  int n = 0;
  struct Rows {
    int heads, q_len;
  };
  for (const Rows r : {Rows{16, 2}, Rows{32, 1}, Rows{17, 1}, Rows{10, 3}, Rows{8, 4}, Rows{2, 16}})
    for (int page : {16, 32, 64, 128}) {
      MlaCase c = narrow_case();
      c.heads = r.heads;
      c.q_len = r.q_len;
      c.page_size = page;
      c.seq_lens = {1, r.q_len + int(rng() % 60), 64 + int(rng() % 4000), 1 + int(rng() % 700)};
      c.dtype = n % 2 ? DType::kBFloat16 : DType::kFloat16;
      c.four_d = n % 3 == 2;
      c.sinks = n % 4 == 1;
      c.lse = n % 4 != 0;
      EXPECT_LE(run_mla(c, 3200 + n++), kTol) << describe(c);
    }
  for (int top_k : {63, 2048}) {
    MlaCase c = narrow_case();
    c.heads = 32;
    c.q_len = 2;
    c.seq_lens = {2048, 300};
    c.top_k = top_k;
    c.sinks = c.scale_ptrs = c.lse = true;
    EXPECT_LE(run_mla(c, 3300 + top_k), kTol) << describe(c);
  }
  for (const char* mode : {"0", "1"}) {
    testing::EnvGuard combine("ATTNJIT_MLA_COMBINE", mode);
    MlaCase one = narrow_case();
    one.q_len = 2;
    one.seq_lens = {32768, 4000};
    one.lse = true;
    EXPECT_LE(run_mla(one, 3400 + n++), kTol) << describe(one) << " combine " << mode;
  }
}

// The ring of blocks (mla_hopper_narrow_ring.cuh) wraps many times in a CTA: the plan for one
// SM (few splits, up to 128 tiles a CTA), by TMA and by cp.async, at 16 and 32 rows, a ragged
// second request whose last tile is partial, sparse rows with -1 entries, and fp8 KV (4 KB
// blocks, 50 slots) dense and sparse with either query.
TEST(MlaGpuHopperNarrow, RingWrapsManyTimes) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  int seed = 5100;
  for (const char* tma : {"1", "0"}) {
    testing::EnvGuard path("ATTNJIT_MLA_TMA", tma);
    for (int heads : {16, 32}) {
      MlaCase c = narrow_case();
      c.heads = heads;
      c.seq_lens = {8192, 3001};
      c.sm_count = 1;
      c.lse = true;
      EXPECT_LE(run_mla(c, seed++), kTol) << describe(c) << " ATTNJIT_MLA_TMA=" << tma;
    }
  }
  MlaCase sparse = narrow_case();
  sparse.top_k = 2048;
  sparse.seq_lens = {9000, 1500};  // the second has fewer keys than top_k: -1 entries
  sparse.sm_count = 1;
  sparse.sinks = true;
  EXPECT_LE(run_mla(sparse, seed++), kTol) << describe(sparse);
  for (DType q : {DType::kBFloat16, DType::kFloat8E4M3})
    for (int top_k : {0, 2048}) {
      MlaCase fp8 = narrow_case();
      fp8.dtype = q;
      fp8.fp8_kv = true;
      fp8.top_k = top_k;
      fp8.seq_lens = {8192, 2999};
      fp8.sm_count = 1;
      fp8.lse = true;
      EXPECT_LE(run_mla(fp8, seed++), kTol) << describe(fp8);
    }
}

}  // namespace
}  // namespace attnjit
