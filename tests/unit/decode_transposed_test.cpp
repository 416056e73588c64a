// The decode kernel's transposed tile (templates/decode/decode_transposed.cuh: tokens in
// the MMA's M, the group's heads in N) for int8 and int4 K/V at group <= 8: which specs
// take it (the host's mirror, which each TU static_asserts), that every such kernel
// compiles on every arch without spills, and that a launch with more than 8 query rows
// is refused before it runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "common/compile_check.hpp"
#include "compile/nvrtc_compiler.hpp"
#include "ops/decode/decode_generator.hpp"
#include "ops/decode/decode_launch.hpp"
#include "render/renderer.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit {
namespace {

using spec::KernelSpec;
namespace f = spec::feature;

KernelSpec quant_spec(DType kv, int hd, int group, int page, uint32_t features, const char* arch = "sm_90a") {
  KernelSpec s;
  s.family = spec::OpFamily::kDecode;
  s.q_dtype = s.out_dtype = DType::kBFloat16;
  s.kv_dtype = kv;
  s.set_head_dim(hd);
  s.group_size = group;
  s.page_size = page;
  s.features = features;
  s.arch = spec::Arch::parse(arch);
  return s;
}

constexpr uint32_t kTok = f::kKTokenScale | f::kVTokenScale;

TEST(DecodeTransposed, Int8AndInt4AtGroupsUpTo8TakeIt) {
  struct Case {
    DType kv;
    int hd, group;
    uint32_t features;
    bool transposed;
  };
  const Case cases[] = {
      {DType::kInt8, 128, 4, 0, true},
      {DType::kInt8, 128, 8, kTok, true},
      {DType::kInt8, 64, 1, 0, true},
      {DType::kInt8, 96, 5, kTok, true},
      {DType::kInt8, 256, 2, 0, true},
      {DType::kInt8, 80, 4, 0, false},  // not whole 32-dim chunks: widened in shared memory, row-major tile
      {DType::kInt8, 128, 16, kTok, false},  // 16 heads fill the row-major tile's M
      {DType::kInt32, 128, 4, 0, true},
      {DType::kInt32, 256, 8, kTok, true},
      {DType::kInt32, 128, 16, 0, false},
      {DType::kBFloat16, 128, 4, 0, false},  // 16-bit and fp8 K/V keep the row-major tile
      {DType::kFloat8E4M3, 128, 8, 0, false},
  };
  for (const Case& c : cases) {
    const KernelSpec s = quant_spec(c.kv, c.hd, c.group, 16, c.features);
    EXPECT_EQ(ops::decode_tiling(s).transposed, c.transposed) << s.name();
    const std::string src = render::render(s).source;
    EXPECT_NE(src.find(std::string("Traits::kTransposed == ") + (c.transposed ? "true" : "false")), std::string::npos)
        << src;
  }
}

// int4 rows go unpadded (XOR-swizzled: hd 64, 128 and 256 rows are 32, 64 and 128 bytes), and
// their copies fetch whole L2 lines, whose other half the next KV head's CTA reads; int8's
// rows are whole lines already.
TEST(DecodeTransposed, Int4RowsAreSwizzledAndFetchedInWholeLines) {
  for (int hd : {64, 128, 256}) {
    const KernelSpec s = quant_spec(DType::kInt32, hd, 4, 0, 0);
    const ops::DecodeTiling t = ops::decode_tiling(s);
    const int fixed = 16 * (hd + 8) * 2 + hd * 2;  // Q tile and RoPE frequencies
    const int ring = t.warps * t.stages * 2 * t.tile * (hd / 2);
    EXPECT_EQ(t.smem_bytes, fixed + std::max(ring, std::max(t.warps * 16 * (hd + 2) * 4, 2 * 16 * 256 * 4))) << s.name();
    EXPECT_EQ(t.l2_prefetch, 128) << s.name();
    EXPECT_NE(render::render(s).source.find("#define ATTNJIT_CP_ASYNC_L2_PREFETCH 128"), std::string::npos);
  }
  const KernelSpec int8 = quant_spec(DType::kInt8, 128, 4, 0, 0);
  EXPECT_EQ(ops::decode_tiling(int8).l2_prefetch, 0);
  EXPECT_EQ(render::render(int8).source.find("ATTNJIT_CP_ASYNC_L2_PREFETCH"), std::string::npos);
}

// The mirror is checked at compile time: a TU that disagrees does not build.
TEST(DecodeTransposed, MirrorIsCheckedAtCompile) {
  const KernelSpec s = quant_spec(DType::kInt8, 128, 4, 16, 0);
  render::RenderedUnit u = render::render(s);
  const std::string want = "Traits::kTransposed == true";
  const size_t at = u.source.find(want);
  ASSERT_NE(at, std::string::npos) << u.source;
  u.source.replace(at, want.size(), "Traits::kTransposed == false");
  try {
    compile::compile(s.name(), u, s.arch);
    FAIL() << "a wrong transposed-tile figure compiled";
  } catch (const CompileError& e) {
    EXPECT_NE(e.log().find("host and kernel disagree on the MMA tile"), std::string::npos) << e.log();
  }
}

TEST(DecodeTransposed, CompilesForEveryArchWithoutSpills) {
  struct V {
    DType kv;
    int hd, group, page;
    uint32_t features;
  };
  const V vs[] = {
      {DType::kInt8, 128, 4, 16, 0},        {DType::kInt8, 128, 8, 32, kTok},   {DType::kInt8, 256, 4, 16, kTok},
      {DType::kInt8, 64, 1, 0, f::kKTokenScale | f::kVTokenScale}, {DType::kInt8, 96, 3, 0, f::kVTokenScale},
      {DType::kInt32, 128, 4, 16, 0},       {DType::kInt32, 128, 8, 32, kTok},  {DType::kInt32, 256, 2, 16, kTok},
      {DType::kInt32, 64, 6, 0, 0},
  };
  std::vector<KernelSpec> specs;
  for (const char* a : {"sm_80", "sm_90a", "sm_120"})
    for (const V& v : vs) {
      KernelSpec s = quant_spec(v.kv, v.hd, v.group, v.page, v.features, a);
      ASSERT_TRUE(ops::decode_tiling(s).transposed) << s.name();
      specs.push_back(s);
    }
  testing::expect_compiles_without_spills(specs, "transposed-tile decode kernels");
}

TEST(DecodeTransposed, MoreThanEightRowsAreRefused) {
  const KernelSpec s = quant_spec(DType::kInt8, 128, 4, 16, kTok);
  ops::DecodeShape shape;
  shape.group = 4;
  shape.q_seq_len = 1;
  EXPECT_NO_THROW(ops::require_rows_fit_the_tile(s, shape));
  shape.q_seq_len = 2;
  EXPECT_NO_THROW(ops::require_rows_fit_the_tile(s, shape));  // 8 rows
  shape.q_seq_len = 3;
  try {
    ops::require_rows_fit_the_tile(s, shape);
    FAIL() << "12 rows on the transposed tile";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_NE(std::string(e.what()).find("q_seq_len 3"), std::string::npos) << e.what();
  }
  // The row-major tile takes any rows.
  EXPECT_NO_THROW(ops::require_rows_fit_the_tile(quant_spec(DType::kInt8, 128, 16, 16, kTok), shape));
}

// kvpair: a CTA serves two KV heads on the int4 transposed tile (two groups of <= 4 in its
// 8 columns), a stage row both heads' rows (hd128: 128 bytes, swizzled, unpadded). Every
// such kernel compiles without spills on every arch; the feature is refused off int4, past
// group 4 or head_dim 128 (a row of 128 bytes is a whole line already), and a launch with more than 8 query rows is refused before it runs.
TEST(DecodeTransposed, KvPairHoldsTwoHeadsARow) {
  for (int hd : {64, 128}) {
    const KernelSpec s = quant_spec(DType::kInt32, hd, 4, 0, f::kKvPair);
    const ops::DecodeTiling t = ops::decode_tiling(s);
    EXPECT_TRUE(t.transposed) << s.name();
    if (hd == 128) {  // the measured ring: three 32-token stages a warp, two CTAs an SM
      EXPECT_EQ(t.tile, 32);
      EXPECT_EQ(t.stages, 3);
      EXPECT_EQ(t.min_blocks, 2);
    }
    const int fixed = 16 * (hd + 8) * 2 + hd * 2;
    const int ring = t.warps * t.stages * 2 * t.tile * hd;  // two heads' hd / 2 bytes a row
    EXPECT_EQ(t.smem_bytes, fixed + std::max(ring, std::max(t.warps * 16 * (hd + 2) * 4, 2 * 16 * 256 * 4))) << s.name();
  }
  std::string why;
  for (const KernelSpec& s : {quant_spec(DType::kInt8, 128, 4, 0, f::kKvPair), quant_spec(DType::kInt32, 128, 8, 0, f::kKvPair),
                              quant_spec(DType::kInt32, 256, 2, 0, f::kKvPair)}) {
    EXPECT_FALSE(ops::decode_can_implement(s, s.arch, &why)) << s.name();
    EXPECT_NE(why.find("kvpair"), std::string::npos) << why;
  }
  std::vector<KernelSpec> specs;
  for (const char* a : {"sm_80", "sm_90a", "sm_120"})
    for (int g : {1, 2, 3, 4})
      for (int hd : {64, 128}) {
        specs.push_back(quant_spec(DType::kInt32, hd, g, 0, f::kKvPair | (g % 2 ? kTok : 0u), a));
        specs.push_back(quant_spec(DType::kInt32, hd, g, 0, f::kKvPair | kTok | f::kTokHead, a));  // mode 3
      }
  testing::expect_compiles_without_spills(specs, "kvpair decode kernels");
  // tokhead: both heads' per-token scale blocks a stage, so two 32-token stages fit the
  // 105 KB ring (two CTAs an SM); only with kvpair and per-token scales.
  const ops::DecodeTiling th = ops::decode_tiling(quant_spec(DType::kInt32, 128, 4, 0, f::kKvPair | kTok | f::kTokHead));
  EXPECT_EQ(th.tile, 32);
  EXPECT_EQ(th.stages, 2);
  EXPECT_EQ(th.smem_bytes, 16 * 136 * 2 + 256 + th.warps * 2 * (2 * 32 * 128 + 2 * 4 * 32 * 4));
  for (const KernelSpec& s : {quant_spec(DType::kInt32, 128, 4, 0, kTok | f::kTokHead),
                              quant_spec(DType::kInt32, 128, 4, 0, f::kKvPair | f::kTokHead)}) {
    EXPECT_FALSE(ops::decode_can_implement(s, s.arch, &why)) << s.name();
    EXPECT_NE(why.find("tokhead"), std::string::npos) << why;
  }

  const KernelSpec s = quant_spec(DType::kInt32, 128, 4, 0, f::kKvPair);
  ops::DecodeShape shape;
  shape.group = 4;
  shape.q_seq_len = 1;
  EXPECT_NO_THROW(ops::require_rows_fit_the_tile(s, shape));  // 2 x 4 rows
  shape.q_seq_len = 2;
  EXPECT_THROW(ops::require_rows_fit_the_tile(s, shape), Error);
  // Half the KV-head CTAs, rounded up for an odd count.
  shape.num_kv_heads = 5;
  EXPECT_EQ(ops::decode_head_ctas(shape), 5);
  shape.kv_heads_per_cta = 2;
  EXPECT_EQ(ops::decode_head_ctas(shape), 3);
}

}  // namespace
}  // namespace attnjit
