// The wide MLA tile in 32-token tiles (spec::feature::kTile32): which calls take it, what it
// asks of shared memory, and what it refuses. No GPU needed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "attnjit/error.hpp"
#include "common/env_guard.hpp"
#include "common/op_args.hpp"
#include "mla/mla_params.cuh"
#include "ops/mla/mla_family.hpp"
#include "ops/mla/mla_plan.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {
namespace {

using testing::fake;
using testing::kPlanArch;

// valid_mla's call with `heads` heads at one query token, KV in `kv`, max_seq_len `len`.
MlaArgs with_heads(int heads, DType kv = DType::kBFloat16, bool sparse = false, int len = 16384) {
  MlaArgs a = testing::valid_mla(sparse);
  const int64_t b = a.query.shape[0];
  a.block_tables = TensorView::contiguous(fake(0x300000), DType::kInt32, {b, len / testing::kMlaPage});
  a.max_seq_len = len;
  a.query = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {b, 1, heads, 576});
  a.out = TensorView::contiguous(fake(0x400000), DType::kBFloat16, {b, 1, heads, 512});
  a.kv_cache = TensorView::contiguous(fake(0x100000), kv, {a.kv_cache.shape[0], a.kv_cache.shape[1], 576});
  if (sparse)
    a.indices = TensorView::contiguous(fake(0x500000), DType::kInt32, {b, 1, a.indices.shape[2]});
  return a;
}

TEST(MlaTile32, OnlyWhereOneRowBlockReadsDense16BitKv) {
  testing::EnvGuard unset("ATTNJIT_MLA_TILE32");
  unsetenv("ATTNJIT_MLA_TILE32");  // the default rule
  const MlaPlan h64 = plan_mla(with_heads(64), kPlanArch);
  EXPECT_TRUE(h64.spec.has(spec::feature::kTile32)) << h64.spec.name();
  EXPECT_EQ(h64.shape.tile_tokens, mla_const::kHopperTile32);
  EXPECT_EQ(h64.params.tokens_per_split % mla_const::kHopperTile32, 0);
  EXPECT_EQ(h64.spec.name(), "mla.bf16.hd576x512.g1.p64.nhd.causal.tile32.trtllmgen.sm90a");
  EXPECT_EQ(spec::KernelSpec::from_name(h64.spec.name()), h64.spec);
  // Two row blocks (the second CTA's reads hit L2), fp8 KV, sparse rows, the narrow tiles: not.
  for (const MlaArgs& a : {with_heads(128), with_heads(64, DType::kFloat8E4M3), with_heads(64, DType::kBFloat16, true),
                           with_heads(16), with_heads(32)}) {
    const MlaPlan p = plan_mla(a, kPlanArch);
    EXPECT_FALSE(p.spec.has(spec::feature::kTile32)) << p.spec.name();
    EXPECT_NE(p.shape.tile_tokens, mla_const::kHopperTile32) << p.spec.name();
  }
  // Few CTAs however split (2 requests of 1024 tokens: 8 at 256 tokens a split): latency-bound.
  EXPECT_FALSE(plan_mla(with_heads(64, DType::kBFloat16, false, 1024), kPlanArch).spec.has(spec::feature::kTile32));
  {
    testing::EnvGuard on("ATTNJIT_MLA_TILE32", "1");  // the knob: wherever it fits
    EXPECT_TRUE(plan_mla(with_heads(64, DType::kBFloat16, false, 1024), kPlanArch).spec.has(spec::feature::kTile32));
    EXPECT_FALSE(plan_mla(with_heads(128), kPlanArch).spec.has(spec::feature::kTile32));
  }
  for (const char* bad : {"2", "x"}) {
    testing::EnvGuard knob("ATTNJIT_MLA_TILE32", bad);
    EXPECT_THROW(plan_mla(with_heads(64), kPlanArch), attnjit::Error) << bad;
  }
  testing::EnvGuard off("ATTNJIT_MLA_TILE32", "0");
  EXPECT_FALSE(plan_mla(with_heads(64), kPlanArch).spec.has(spec::feature::kTile32));
}

TEST(MlaTile32, FourBuffersInTheTwoBuffersBytes) {
  spec::KernelSpec s = spec::KernelSpec::from_name("mla.bf16.hd576x512.g1.p64.nhd.causal.trtllmgen.sm90a");
  const MlaTiling wide = mla_tiling(s);
  s.features |= spec::feature::kTile32;
  const MlaTiling t32 = mla_tiling(s);
  EXPECT_EQ(wide.tile, 64);
  EXPECT_EQ(wide.stages, 2);
  EXPECT_EQ(t32.tile, 32);
  EXPECT_EQ(t32.stages, 4);
  // The same KV bytes; four buffers' barriers more (and no sparse flags in either).
  EXPECT_GT(t32.smem_bytes, wide.smem_bytes);
  EXPECT_LT(t32.smem_bytes - wide.smem_bytes, 512);
  EXPECT_LE(t32.smem_bytes, t32.smem_limit);
  std::string why;
  EXPECT_TRUE(mla_can_implement(s, s.arch, &why)) << why;
}

TEST(MlaTile32, RefusedOutsideTheWideDense16BitTile) {
  for (const char* name : {"mla.bf16.kve4m3.hd576x512.g1.p64.nhd.causal.tile32.trtllmgen.sm90a",
                           "mla.bf16.hd576x512.g1.p64.nhd.custom.tile32.trtllmgen.sm90a",
                           "mla.bf16.hd576x512.g1.p64.nhd.causal.narrow.tile32.trtllmgen.sm90a",
                           "mla.bf16.hd576x512.g1.p64.nhd.causal.tile32.sm90a"}) {
    const spec::KernelSpec s = spec::KernelSpec::from_name(name);
    std::string why;
    EXPECT_FALSE(mla_can_implement(s, s.arch, &why)) << name;
    EXPECT_NE(why.find("tile32"), std::string::npos) << name << ": " << why;
  }
}

}  // namespace
}  // namespace attnjit::ops
