// Head dims 384 and 512 (the split-D decode kernel, templates/decode/decode_split_d.cuh):
// the ops' limits there (FlashInfer's: group <= 16, no speculative decoding), the
// family's can_implement, and the ring tiling on every arch and knob setting.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "common/env_guard.hpp"
#include "attnjit/decode.hpp"
#include "attnjit/error.hpp"
#include "attnjit/xqa.hpp"
#include "common/expect_error.hpp"
#include "common/op_args.hpp"
#include "ops/decode/decode_generator.hpp"
#include "ops/decode/decode_spec.hpp"
#include "render/renderer.hpp"

namespace attnjit::ops {
namespace {

using testing::expect_error;
using testing::fake;
namespace feature = spec::feature;

void expect_invalid(const std::function<void()>& f, const std::string& arg, std::vector<std::string> more = {}) {
  more.insert(more.begin(), "argument '" + arg + "'");
  expect_error(f, ErrorCode::kInvalidArgument, more);
}

using testing::EnvGuard;

// xqa at head_dim hd: batch 2, kv_heads KV heads x group, pages of 32.
XqaArgs xqa_at(int hd, int kv_heads = 2, int group = 8, int q_seq_len = 1) {
  XqaArgs a;
  const DType dt = DType::kBFloat16;
  const int heads = kv_heads * group, pages = 8;
  if (q_seq_len > 1) {
    a.q = TensorView::contiguous(fake(0x10000), dt, {2, 1, q_seq_len, heads, hd});
    a.output = TensorView::contiguous(fake(0x400000), dt, {2, 1, q_seq_len, heads, hd});
    a.mask = TensorView::contiguous(fake(0x500000), DType::kUInt16, {2, q_seq_len, 2});
  } else {
    a.q = TensorView::contiguous(fake(0x10000), dt, {2, 1, heads, hd});
    a.output = TensorView::contiguous(fake(0x400000), dt, {2, 1, heads, hd});
  }
  a.q_seq_len = q_seq_len;
  a.k_cache = TensorView::contiguous(fake(0x100000), dt, {pages, 32, kv_heads, hd});
  a.v_cache = TensorView::contiguous(fake(0x200000), dt, {pages, 32, kv_heads, hd});
  a.page_table = TensorView::contiguous(fake(0x300000), DType::kInt32, {2, 4});
  a.seq_lens = TensorView::contiguous(fake(0x300100), DType::kUInt32, {2, 1});
  a.num_kv_heads = kv_heads;
  a.page_size = 32;
  return a;
}

testing::SingleDecodeCall single_at(int hd, int heads = 32, int kv_heads = 8) {
  testing::SingleDecodeCall c;
  const DType dt = DType::kBFloat16;
  c.q = TensorView::contiguous(fake(0x10000), dt, {heads, hd});
  c.out = TensorView::contiguous(fake(0x20000), dt, {heads, hd});
  c.k = TensorView::contiguous(fake(0x100000), dt, {1000, kv_heads, hd});
  c.v = TensorView::contiguous(fake(0x200000), dt, {1000, kv_heads, hd});
  c.lse = TensorView::contiguous(fake(0x30000), DType::kFloat32, {heads});
  return c;
}

TEST(SplitDLimits, XqaAcceptsHeadDims384And512UpToGroup16) {
  for (int hd : {384, 512})
    for (int g : {1, 8, 16}) {
      const XqaPlan p = plan_xqa(xqa_at(hd, 2, g), testing::kPlanArch);
      EXPECT_EQ(p.spec.head_dim_qk, hd);
      EXPECT_EQ(p.spec.head_dim_vo, hd);
      EXPECT_EQ(p.spec.group_size, g);
      EXPECT_EQ(p.shape.head_dim, hd);
      EXPECT_EQ(p.spec.name(), "xqa.bf16.hd" + std::to_string(hd) + ".g" + std::to_string(g) + ".p32.nhd.sm90a");
    }
}

TEST(SplitDLimits, XqaRefusesWhatFlashInferRefusesPast256) {
  // A group of 32 is fine at head_dim 256 and refused at 512, naming the argument.
  EXPECT_NO_THROW(plan_xqa(xqa_at(256, 1, 32), testing::kPlanArch));
  expect_invalid([] { plan_xqa(xqa_at(512, 1, 32), testing::kPlanArch); }, "num_kv_heads",
                 {"head_group_ratio <= 16 at head_dim 512", "ratio 32"});
  expect_invalid([] { plan_xqa(xqa_at(384, 1, 17), testing::kPlanArch); }, "num_kv_heads", {"<= 16", "ratio 17"});
  // Speculative decoding: q_seq_len > 1, or ragged drafts.
  EXPECT_NO_THROW(plan_xqa(xqa_at(256, 2, 8, 2), testing::kPlanArch));
  expect_invalid([] { plan_xqa(xqa_at(512, 2, 8, 2), testing::kPlanArch); }, "q_seq_len",
                 {"no speculative decoding", "2"});
  XqaArgs r = xqa_at(512);
  r.q = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {3, 16, 512});
  r.output = TensorView::contiguous(fake(0x400000), DType::kBFloat16, {3, 16, 512});
  r.q_cu_seq_lens = TensorView::contiguous(fake(0x600000), DType::kUInt32, {3});
  r.mask = TensorView::contiguous(fake(0x500000), DType::kUInt16, {3, 2});
  expect_invalid([&] { plan_xqa(r, testing::kPlanArch); }, "q_cu_seq_lens", {"no speculative decoding"});
  // Other head dims past 256 stay refused.
  for (int hd : {272, 320, 448, 576, 640})
    expect_invalid([&] { plan_xqa(xqa_at(hd), testing::kPlanArch); }, "q",
                   {"head_dim " + std::to_string(hd), "384 or 512"});
}

TEST(SplitDLimits, XqaWorkspaceSizingTakesTheNewHeadDims) {
  EXPECT_GT(xqa_workspace_bytes(1, 8, 8, 1, 512, 32768, 132), xqa_workspace_bytes(1, 8, 8, 1, 256, 32768, 132));
  EXPECT_GT(xqa_workspace_bytes(1, 8, 8, 1, 384, 32768, 132), 0u);
  expect_invalid([] { xqa_workspace_bytes(1, 8, 8, 1, 640, 32768, 132); }, "head_dim", {"384 or 512", "640"});
}

TEST(SplitDLimits, SingleDecodeAcceptsHeadDim512) {
  testing::SingleDecodeCall c = single_at(512);
  c.o.pos_encoding_mode = PosEncodingMode::kRopeLlama;
  c.o.window_left = 100;
  c.with_lse = true;
  const SingleDecodePlan p = c.plan();
  EXPECT_EQ(p.spec.head_dim_qk, 512);
  EXPECT_EQ(p.spec.group_size, 4);
  EXPECT_EQ(p.shape.head_dim, 512);
  EXPECT_FLOAT_EQ(p.params.sm_scale, 1.0f / std::sqrt(512.0f));
  EXPECT_NO_THROW(single_at(384, 16, 1).plan());  // group 16
}

TEST(SplitDLimits, SingleDecodeRefusesLargeGroupsPast256) {
  EXPECT_NO_THROW(single_at(256, 32, 1).plan());
  expect_invalid([] { single_at(512, 32, 1).plan(); }, "q", {"<= 16 at head_dim 512", "32 / 1"});
  // FlashInfer's use_tensor_cores = false plans the same (tensor-core) kernel.
  testing::SingleDecodeCall c = single_at(512);
  c.o.use_tensor_cores = false;
  EXPECT_EQ(c.plan().spec, single_at(512).plan().spec);
  expect_invalid([] { single_at(320).plan(); }, "q", {"head_dim 320", "384 or 512"});
}

spec::KernelSpec split_d_spec(int hd, DType kv, int page, const char* arch) {
  spec::KernelSpec s;
  s.family = page ? spec::OpFamily::kXqa : spec::OpFamily::kDecode;
  s.q_dtype = s.out_dtype = DType::kBFloat16;
  s.kv_dtype = kv;
  s.set_head_dim(hd);
  s.group_size = 8;
  s.page_size = page;
  s.arch = spec::Arch::parse(arch);
  return s;
}

TEST(SplitDLimits, CanImplementSaysWhy) {
  const spec::Arch arch{90, true};
  std::string why;
  spec::KernelSpec s = split_d_spec(512, DType::kBFloat16, 32, "sm_90a");
  EXPECT_TRUE(decode_can_implement(s, arch, &why)) << why;
  s.group_size = 32;
  EXPECT_FALSE(decode_can_implement(s, arch, &why));
  EXPECT_NE(why.find("group_size 32 at head_dim 512"), std::string::npos) << why;
  s = split_d_spec(384, DType::kBFloat16, 32, "sm_90a");
  s.mask = spec::MaskMode::kCustom;
  EXPECT_FALSE(decode_can_implement(s, arch, &why));
  EXPECT_NE(why.find("no speculative decoding"), std::string::npos) << why;
  s = split_d_spec(512, DType::kBFloat16, 32, "sm_90a");
  s.features = feature::kRaggedQ;
  EXPECT_FALSE(decode_can_implement(s, arch, &why));
  s = split_d_spec(448, DType::kBFloat16, 32, "sm_90a");
  EXPECT_FALSE(decode_can_implement(s, arch, &why));
  EXPECT_NE(why.find("head_dim 448"), std::string::npos) << why;
  // render() asks the same question.
  expect_error([&] { render::render(s); }, ErrorCode::kUnsupported, {"head_dim 448"});
}

// The CTA-wide ring refills the stage of the tile before the current one, so it
// needs two stages: a single stage would overwrite the tile being read (the race a
// review found with ATTNJIT_DECODE_TILE=32 on the 99 KB arches). Every arch, dtype,
// page and knob setting gets >= 2 stages within the arch's shared memory, or the
// family refuses the spec.
TEST(SplitDTiling, AlwaysTwoOrMoreStagesWithinSharedMemory) {
  for (const char* tile : {static_cast<const char*>(nullptr), "16", "32"})
    for (const char* ring : {static_cast<const char*>(nullptr), "1", "64", "1024"}) {
      EnvGuard t("ATTNJIT_DECODE_TILE", tile);
      EnvGuard r("ATTNJIT_DECODE_RING_KB", ring);
      for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120"})
        for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2})
          for (int hd : {384, 512})
            for (int page : {0, 16, 32, 64, 128})
              for (bool rope : {false, true}) {
                if (rope && page) continue;  // RoPE is single_decode's (contiguous)
                spec::KernelSpec s = split_d_spec(hd, kv, page, arch);
                if (rope) s.pos_encoding = spec::PosEncoding::kRopeLlama;
                const std::string what = s.name() + " tile " + (tile ? tile : "-") + " ring " + (ring ? ring : "-");
                std::string why;
                ASSERT_TRUE(decode_can_implement(s, s.arch, &why)) << what << ": " << why;
                const DecodeTiling d = decode_tiling(s);
                EXPECT_GE(d.stages, 2) << what;
                EXPECT_LE(d.stages, 8) << what;
                EXPECT_LE(d.smem_bytes, d.smem_limit) << what;
                if (page == 16) EXPECT_EQ(d.tile, 16) << what;
                EXPECT_GE(d.min_blocks, 1) << what;
              }
    }
}

// Two CTAs an SM where a ring of two stages allows it (measured faster at every head
// dim and KV dtype on the H200: PERFORMANCE.md, twenty-second session), 32-token tiles
// where those fit, else one CTA with the deepest ring the arch holds.
TEST(SplitDTiling, DefaultIsTwoCtasOnHopperAndFitsThe99KbArches) {
  EnvGuard t("ATTNJIT_DECODE_TILE", nullptr);
  EnvGuard r("ATTNJIT_DECODE_RING_KB", nullptr);
  struct Want {
    int hd;
    DType kv;
    int tile, stages;
  };
  for (const Want& x : {Want{512, DType::kFloat8E4M3, 32, 2}, Want{384, DType::kFloat8E4M3, 32, 3},
                        Want{512, DType::kBFloat16, 16, 2}, Want{384, DType::kBFloat16, 16, 3}}) {
    const std::string what = std::to_string(x.hd) + " " + dtype_name(x.kv);
    const DecodeTiling h = decode_tiling(split_d_spec(x.hd, x.kv, 32, "sm_90a"));
    EXPECT_EQ(h.min_blocks, 2) << what;
    EXPECT_EQ(h.tile, x.tile) << what;
    EXPECT_EQ(h.stages, x.stages) << what;
    EXPECT_LE(2 * (h.smem_bytes + 1024), h.smem_limit + 1024) << what;
    const DecodeTiling a = decode_tiling(split_d_spec(x.hd, x.kv, 32, "sm_89"));
    EXPECT_GE(a.stages, 2) << what;
    EXPECT_LE(a.smem_bytes, 99 * 1024) << what;
  }
  // The knob still sizes the ring: 210 KB is one CTA with three 32-token stages.
  EnvGuard deep("ATTNJIT_DECODE_RING_KB", "210");
  const DecodeTiling d = decode_tiling(split_d_spec(512, DType::kBFloat16, 32, "sm_90a"));
  EXPECT_EQ(d.min_blocks, 1);
  EXPECT_EQ(d.tile, 32);
  EXPECT_EQ(d.stages, 3);
}

TEST(SplitDTiling, RenderedTraitsSelectSplitD) {
  const render::RenderedUnit u = render::render(split_d_spec(512, DType::kFloat8E4M3, 64, "sm_90a"));
  EXPECT_NE(u.source.find("DecodeTraits<attnjit::bf16_t, attnjit::e4m3_t, attnjit::bf16_t, 512, 8, 64,"),
            std::string::npos)
      << u.source;
  EXPECT_EQ(u.launch.threads, 128);
  bool has_split_d = false;
  for (const auto& h : *u.headers) has_split_d |= h.path == "decode/decode_split_d.cuh";
  EXPECT_TRUE(has_split_d) << "the unit carries the split-D template";
}

}  // namespace
}  // namespace attnjit::ops
