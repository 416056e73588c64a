// The wide wgmma MLA tile's flat schedule (spec::feature::kFlat, ATTNJIT_MLA_FLAT=1) on the GPU
// against the float64 reference (mla_gpu_case.hpp): parts that cross request boundaries,
// requests split over many parts (merged by their last piece) and many requests a part,
// ragged lengths with empty and one-token requests, 128 heads x q_len 2 (four row blocks),
// every page size, fp8 KV, the 32-token tile, sinks, LSE, device scales, the dense path
// without its tensor map; each call runs twice (the semaphores reset themselves).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "common/env_guard.hpp"
#include "mla_gpu_case.hpp"

namespace attnjit {
namespace {

using namespace mla_gpu;

MlaCase flat_case(int heads, std::vector<int> lens) {
  MlaCase c;
  c.backend = Backend::kTrtllmGen;
  c.heads = heads;
  c.seq_lens = std::move(lens);
  return c;
}

std::vector<int> ragged(std::mt19937& rng, int batch, int most) {
  std::vector<int> lens(batch);
  for (int& l : lens) {
    const uint32_t r = rng() % 10;
    l = r == 0 ? 0 : r == 1 ? 1 + int(rng() % 64) : 1 + int(rng() % most);
  }
  return lens;
}

// The compute-sanitizer subset's case: a few parts over ragged requests, one split over
// several parts, sinks and LSE.
TEST(MlaGpuHopperFlat, Basic) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  testing::EnvGuard flat("ATTNJIT_MLA_FLAT", "1");
  MlaCase c = flat_case(64, {700, 5000, 0, 90, 1500});
  c.sm_count = 6;
  c.sinks = true;
  c.lse = true;
  EXPECT_LE(run_mla(c, 9100), kTol) << describe(c) << " flat";
}

TEST(MlaGpuHopperFlat, RandomizedMatches) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  testing::EnvGuard flat("ATTNJIT_MLA_FLAT", "1");
  std::mt19937 rng(9200);
  int n = 0;
  for (int page : {16, 32, 64, 128})
    for (int heads : {48, 128}) {
      // Few SMs: many requests a part; the device's: requests split over many parts.
      for (int sm : {0, 5}) {
        MlaCase c = flat_case(heads, ragged(rng, sm ? 24 : 9, heads == 128 ? 3000 : 6000));
        c.page_size = page;
        c.q_len = heads == 128 && n % 3 == 0 ? 2 : 1;  // 256 rows: four row blocks
        c.dtype = n % 2 ? DType::kFloat16 : DType::kBFloat16;
        c.four_d = n % 3 == 1;
        c.sinks = n % 2 == 0;
        c.lse = n % 4 < 2;
        c.lse_base2 = n % 8 == 1;
        c.scale_ptrs = n % 4 == 3;
        c.sm_count = sm;
        EXPECT_LE(run_mla(c, 9300 + n++), kTol) << describe(c) << " flat";
      }
    }
}

TEST(MlaGpuHopperFlat, Fp8AndThirtyTwoTokenTilesMatch) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  testing::EnvGuard flat("ATTNJIT_MLA_FLAT", "1");
  std::mt19937 rng(9400);
  int n = 0;
  for (DType q : {DType::kBFloat16, DType::kFloat8E4M3})
    for (int sm : {0, 7}) {
      MlaCase c = flat_case(128, ragged(rng, 12, 4000));
      c.dtype = q;
      c.fp8_kv = true;
      c.sm_count = sm;
      c.lse = true;
      c.sinks = sm != 0;
      EXPECT_LE(run_mla(c, 9500 + n++), kTol) << describe(c) << " flat fp8";
    }
  testing::EnvGuard tile32("ATTNJIT_MLA_TILE32", "1");
  for (int sm : {0, 3}) {
    MlaCase c = flat_case(64, ragged(rng, 10, 6000));
    c.sm_count = sm;
    c.lse = true;
    EXPECT_LE(run_mla(c, 9600 + n++), kTol) << describe(c) << " flat tile32";
  }
  testing::EnvGuard no_tma("ATTNJIT_MLA_TMA", "0");
  MlaCase c = flat_case(96, ragged(rng, 8, 3000));
  c.page_size = 32;
  c.sm_count = 4;
  EXPECT_LE(run_mla(c, 9700 + n++), kTol) << describe(c) << " flat cp.async";
}

// A large batch as an engine runs it (many requests, every part a few of them), both schedules.
TEST(MlaGpuHopperFlat, LargeBatchMatchesTheSplitSchedule) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(9800);
  const std::vector<int> lens = ragged(rng, 80, 2500);
  for (const char* knob : {"0", "1"}) {
    testing::EnvGuard flat("ATTNJIT_MLA_FLAT", knob);
    MlaCase c = flat_case(128, lens);
    c.lse = true;
    EXPECT_LE(run_mla(c, 9900), kTol) << describe(c) << " flat " << knob;
  }
}

}  // namespace
}  // namespace attnjit
