// The wgmma MLA kernel's narrow tile (<= 16 query rows a CTA, in wgmma's N; or <= 32 with
// 16-bit KV, `narrow32`): which calls
// plan it, the spec bit that selects it, what can_implement and the generator do with it,
// and that it compiles for sm_90a without spills. No GPU needed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "common/env_guard.hpp"
#include "common/op_args.hpp"
#include "common/compile_check.hpp"
#include "common/expect_error.hpp"
#include "mla/mla_params.cuh"
#include "ops/mla/mla_family.hpp"
#include "ops/mla/mla_plan.hpp"
#include "render/renderer.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {
namespace {

using testing::fake;
using testing::kPlanArch;

// batch_decode_mla's arguments with H heads and q_len query tokens (dense), or H heads a
// query token (sparse): rows_per_group = H * q_len, or H.
MlaArgs mla_with(int heads, int q_len, bool sparse = false) {
  MlaArgs a = testing::valid_mla(sparse);
  const int64_t B = a.query.shape[0];
  a.query = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {B, q_len, heads, 576});
  a.out = TensorView::contiguous(fake(0x400000), DType::kBFloat16, {B, q_len, heads, 512});
  if (sparse) a.indices = TensorView::contiguous(fake(0x500000), DType::kInt32, {B, q_len, testing::kMlaTopK});
  return a;
}

TEST(MlaNarrow, FeatureBitMatchesTheKernels) {
  EXPECT_EQ(mla_const::kFeatNarrow, spec::feature::kNarrowTile);
  EXPECT_EQ(mla_const::kFeatNarrow32, spec::feature::kNarrow32);
  EXPECT_EQ(mla_const::kFeatTile32, spec::feature::kTile32);
  EXPECT_EQ(mla_const::kNarrowRows, 16);
  EXPECT_EQ(mla_const::kNarrow32Rows, 32);
}

// Up to 16 rows a group take the narrow tile on the wgmma kernel, 17-32 its 32-row form
// (16-bit KV; fp8 takes the wide tile there); more take the wide one; xqa has no narrow tile.
TEST(MlaNarrow, RowsThatFitTakeTheNarrowTile) {
  testing::EnvGuard knob("ATTNJIT_MLA_NARROW", nullptr);
  struct Case {
    int heads, q_len;
    bool sparse;
    int rows;  // rows a CTA: 16, 32 (narrow32) or 64 (wide)
    bool fp8 = false;
  };
  for (const Case c : {Case{16, 1, false, 16}, Case{1, 1, false, 16}, Case{8, 2, false, 16}, Case{5, 3, false, 16},
                       Case{16, 2, false, 32}, Case{17, 1, false, 32}, Case{32, 1, false, 32}, Case{10, 3, false, 32},
                       Case{33, 1, false, 64}, Case{128, 1, false, 64}, Case{16, 4, true, 16}, Case{32, 1, true, 32},
                       Case{48, 1, true, 64}, Case{16, 1, false, 16, true}, Case{16, 2, false, 64, true},
                       Case{32, 1, false, 64, true}}) {
    MlaArgs a = mla_with(c.heads, c.q_len, c.sparse);
    if (c.fp8) a.kv_cache.dtype = DType::kFloat8E4M3;
    const MlaPlan p = plan_mla(a, kPlanArch);
    const std::string what = p.spec.name();
    EXPECT_EQ(p.spec.backend, spec::Backend::kTrtllmGen) << what;
    EXPECT_EQ(p.spec.has(spec::feature::kNarrowTile), c.rows == 16) << what;
    EXPECT_EQ(p.spec.has(spec::feature::kNarrow32), c.rows == 32) << what;
    EXPECT_EQ(p.shape.rows_per_cta, c.rows) << what;
    EXPECT_EQ(mla_tiling(p.spec).rows, c.rows) << what;
    EXPECT_EQ(p.shape.tile_tokens, mla_const::kHopperTile) << what;
    EXPECT_EQ(p.params.row_blocks, ((c.sparse ? c.heads : c.heads * c.q_len) + c.rows - 1) / c.rows) << what;
    EXPECT_EQ(what.find(".narrow.") != std::string::npos, c.rows == 16) << what;
    EXPECT_EQ(what.find(".narrow32.") != std::string::npos, c.rows == 32) << what;
    EXPECT_EQ(spec::KernelSpec::from_name(what), p.spec) << what;
  }
  EXPECT_EQ(plan_mla(mla_with(16, 1), kPlanArch).spec.name(),
            "mla.bf16.hd576x512.g1.p64.nhd.causal.narrow.trtllmgen.sm90a");
  // xqa and the archs without the wgmma kernel: 16-row CTAs of their own, no bit.
  MlaArgs x = mla_with(16, 1);
  x.backend = Backend::kXqa;
  EXPECT_FALSE(plan_mla(x, kPlanArch).spec.has(spec::feature::kNarrowTile));
  EXPECT_EQ(plan_mla(x, kPlanArch).shape.tile_tokens, mla_const::kTileTokens);
  x.backend = Backend::kAuto;
  EXPECT_FALSE(plan_mla(x, spec::Arch::parse("sm_120")).spec.has(spec::feature::kNarrowTile));
}

// ATTNJIT_MLA_NARROW=0 keeps the wide tile (a measuring knob); a bad value names itself.
TEST(MlaNarrow, KnobKeepsTheWideTile) {
  {
    testing::EnvGuard knob("ATTNJIT_MLA_NARROW", "0");
    const MlaPlan p = plan_mla(mla_with(16, 1), kPlanArch);
    EXPECT_FALSE(p.spec.has(spec::feature::kNarrowTile));
    EXPECT_EQ(p.shape.rows_per_cta, mla_const::kHopperRows);
    EXPECT_FALSE(plan_mla(mla_with(32, 1), kPlanArch).spec.has(spec::feature::kNarrow32));
  }
  {
    testing::EnvGuard knob("ATTNJIT_MLA_NARROW", "2");
    testing::expect_error([] { plan_mla(mla_with(16, 1), kPlanArch); }, ErrorCode::kInvalidArgument,
                          {"ATTNJIT_MLA_NARROW", "2"});
  }
}

TEST(MlaNarrow, OnlyTheWgmmaKernelHasIt) {
  const spec::KernelSpec s = plan_mla(mla_with(16, 1), kPlanArch).spec;
  std::string why;
  EXPECT_TRUE(mla_can_implement(s, kPlanArch, &why)) << why;
  EXPECT_EQ(mla_tiling(s).rows, mla_const::kNarrowRows);
  // 16-bit KV: the ring's plan (Q's 16 rows and 25 slots of 8 KB in the 227 KB); the threads
  // of two math warpgroups and the producer.
  EXPECT_EQ(mla_tiling(s).smem_bytes, mla_ring_smem_bytes(mla_const::kNarrowRows, 2));
  EXPECT_LE(mla_tiling(s).smem_bytes, mla_tiling(s).smem_limit);
  EXPECT_EQ(mla_tiling(s).warps * 32, mla_const::kRingThreads);
  spec::KernelSpec x = s;
  x.backend = spec::Backend::kXqa;
  EXPECT_FALSE(mla_can_implement(x, kPlanArch, &why));
  EXPECT_NE(why.find("narrow"), std::string::npos) << why;
  // Other families refuse the bits; narrow32 is 16-bit KV on the wgmma kernel, and one tile.
  spec::KernelSpec d;
  d.features = spec::feature::kNarrowTile;
  EXPECT_THROW(render::render(d), Error);
  d.features = spec::feature::kNarrow32;
  EXPECT_THROW(render::render(d), Error);
  const spec::KernelSpec n32 = plan_mla(mla_with(32, 1), kPlanArch).spec;
  EXPECT_TRUE(mla_can_implement(n32, kPlanArch, &why)) << why;
  spec::KernelSpec f = n32;
  f.kv_dtype = DType::kFloat8E4M3;
  EXPECT_FALSE(mla_can_implement(f, kPlanArch, &why));
  EXPECT_NE(why.find("narrow32"), std::string::npos) << why;
  spec::KernelSpec both = n32;
  both.features |= spec::feature::kNarrowTile;
  EXPECT_FALSE(mla_can_implement(both, kPlanArch, &why));
  spec::KernelSpec x32 = n32;
  x32.backend = spec::Backend::kXqa;
  EXPECT_FALSE(mla_can_implement(x32, kPlanArch, &why));
}

// The rendered unit carries the bit into the traits; every variant compiles for sm_90a with
// no spills and no serialized wgmma (compile_check.hpp).
TEST(MlaNarrow, CompilesWithoutSpills) {
  std::vector<spec::KernelSpec> specs;
  for (bool sparse : {false, true})
    for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3}) {
      MlaArgs a = mla_with(16, 1, sparse);
      a.kv_cache = TensorView::contiguous(a.kv_cache.data, kv, {a.kv_cache.shape[0], 64, 576});
      const spec::KernelSpec s = plan_mla(a, kPlanArch).spec;
      ASSERT_TRUE(s.has(spec::feature::kNarrowTile)) << s.name();
      const render::RenderedUnit u = render::render(s);
      // Two math warpgroups and the ring's producer; 8 KB blocks of 16-bit KV, 4 KB of fp8.
      EXPECT_EQ(u.launch.threads, mla_const::kRingThreads);
      EXPECT_EQ(u.launch.smem_bytes, mla_ring_smem_bytes(mla_const::kNarrowRows, kv == DType::kFloat8E4M3 ? 1 : 2));
      EXPECT_EQ(u.launch.split_granule, mla_const::kHopperTile);
      EXPECT_NE(u.source.find(std::to_string(spec::feature::kNarrowTile) + "u>"), std::string::npos) << u.source;
      specs.push_back(s);
    }
  for (bool sparse : {false, true})
    for (DType q : {DType::kBFloat16, DType::kFloat16}) {  // the 32-row tile: 16-bit KV
      MlaArgs a = mla_with(32, 1, sparse);
      for (TensorView* t : {&a.query, &a.kv_cache, &a.out}) t->dtype = q;
      if (!sparse) a.lse = TensorView::contiguous(fake(0x610000), DType::kFloat32, {a.query.shape[0], 32});
      const spec::KernelSpec s = plan_mla(a, kPlanArch).spec;
      ASSERT_TRUE(s.has(spec::feature::kNarrow32)) << s.name();
      EXPECT_NE(render::render(s).source.find(std::to_string(s.features) + "u>"), std::string::npos) << s.name();
      specs.push_back(s);
    }
  const auto results = testing::expect_compiles_without_spills(specs, "mla narrow-tile kernels");
  // The ring's setmaxnreg hand-over (224 to the math, 56 to the producer) needs exactly the
  // 168 registers 384 threads allow at launch: with fewer, the increase would wait forever.
  for (size_t i = 0; i < specs.size(); ++i)
    if (!results[i].cubin.empty())
      EXPECT_EQ(results[i].resources.registers, 168) << specs[i].name();
}

}  // namespace
}  // namespace attnjit::ops
