// Batch 1's own kernel (spec::feature::kTile32 on the xqa and decode families): which calls take
// it (plan_xqa, plan_single_decode, decode_batch1_tile32, decode_batch1_takes_tile32), what it tiles, where can_implement refuses it, that it
// compiles without spills where it fits, and that a model config prewarms it.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "attnjit/xqa.hpp"
#include "common/env_guard.hpp"
#include "common/op_args.hpp"
#include "compile/nvrtc_compiler.hpp"
#include "ops/decode/decode_generator.hpp"
#include "ops/decode/decode_launch.hpp"
#include "ops/decode/decode_spec.hpp"
#include "attnjit/decode.hpp"
#include "render/renderer.hpp"

namespace attnjit::ops {
namespace {

using testing::EnvGuard;
using testing::fake;
namespace feature = spec::feature;

struct Call {
  int batch = 1, tokens = 8192, head_dim = 128, group = 8, page = 32, q_seq_len = 1, window = 0, kv_heads = 8;
  DType dtype = DType::kBFloat16, kv = DType::kBFloat16;
  KvLayout layout = KvLayout::kNHD;
};

// xqa's arguments for c, shapes only: c.tokens of page table a request.
XqaArgs args_for(const Call& c) {
  XqaArgs a;
  const int kv_heads = c.kv_heads, heads = kv_heads * c.group, pages = (c.tokens + c.page - 1) / c.page;
  if (c.q_seq_len > 1) {
    a.q = TensorView::contiguous(fake(0x10000), c.dtype, {c.batch, 1, c.q_seq_len, heads, c.head_dim});
    a.mask = TensorView::contiguous(fake(0x500000), DType::kUInt16, {c.batch, c.q_seq_len, 2});
  } else {
    a.q = TensorView::contiguous(fake(0x10000), c.dtype, {c.batch, 1, heads, c.head_dim});
  }
  a.output = a.q;
  a.output.data = fake(0x400000);
  a.q_seq_len = c.q_seq_len;
  const bool nhd = c.layout == KvLayout::kNHD;
  a.k_cache = nhd ? TensorView::contiguous(fake(0x100000), c.kv, {pages, c.page, kv_heads, c.head_dim})
                  : TensorView::contiguous(fake(0x100000), c.kv, {pages, kv_heads, c.page, c.head_dim});
  a.v_cache = a.k_cache;
  a.v_cache.data = fake(0x200000);
  a.kv_layout = c.layout;
  a.page_table = TensorView::contiguous(fake(0x300000), DType::kInt32, {c.batch, pages});
  a.seq_lens = TensorView::contiguous(fake(0x380000), DType::kUInt32, {c.batch});
  a.num_kv_heads = kv_heads;
  a.page_size = c.page;
  a.sliding_win_size = c.window;
  return a;
}

bool takes_tile32(const Call& c, const char* arch = "sm_90a", int sm_count = 0) {
  XqaArgs a = args_for(c);
  if (sm_count) a.sm_count = sm_count;
  return plan_xqa(a, spec::Arch::parse(arch)).spec.has(feature::kTile32);
}

// bf16 hd128 g8 at batch 1 past 4096 planned tokens, while its plan is one wave: 32-token
// tiles, two stages, one CTA an SM.
TEST(Batch1Tile, PagedSixteenBitHeadDim128AtBatch1TakesThirtyTwoTokenTiles) {
  EnvGuard tile("ATTNJIT_DECODE_TILE", nullptr);
  EnvGuard ring("ATTNJIT_DECODE_RING_KB", nullptr);
  for (int page : {32, 64, 128})
    for (int tokens : {kBatch1Tile32AboveTokens + 32, 6144, 8192, 32768})
      for (KvLayout layout : {KvLayout::kNHD, KvLayout::kHND})
        for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
          Call c;
          c.page = page;
          c.tokens = tokens;
          c.layout = layout;
          c.dtype = c.kv = dt;
          const XqaPlan p = plan_xqa(args_for(c), testing::kPlanArch);
          SCOPED_TRACE(p.spec.name());
          ASSERT_TRUE(p.spec.has(feature::kTile32));
          EXPECT_NE(p.spec.name().find(".tile32"), std::string::npos);
          EXPECT_EQ(spec::KernelSpec::from_name(p.spec.name()), p.spec);
          const DecodeTiling t = decode_tiling(p.spec);
          EXPECT_EQ(t.tile, 32);
          EXPECT_GE(t.stages, 2);
          EXPECT_EQ(t.min_blocks, 1);
          EXPECT_LE(t.smem_bytes, t.smem_limit);
          // One wave: at most one CTA an SM (8 KV heads x the splits, on 132 SMs).
          EXPECT_LE(8 * plan_splits(p.shape, kNominalSms, kNominalSms, 32).splits, kNominalSms);
          std::string why;
          EXPECT_TRUE(decode_can_implement(p.spec, p.spec.arch, &why)) << why;
          // The same call at batch 2 keeps the batched kernel (16-token tiles, two CTAs an SM).
          c.batch = 2;
          const XqaPlan b2 = plan_xqa(args_for(c), testing::kPlanArch);
          EXPECT_FALSE(b2.spec.has(feature::kTile32));
          EXPECT_EQ(decode_tiling(b2.spec).tile, 16);
          EXPECT_EQ(decode_tiling(b2.spec).min_blocks, 2);
        }
}

// Short sequences (the fill's splits would leave warps idle), windows shorter than the
// threshold, and every shape whose default already is 32 or must stay 16 keep their kernel.
TEST(Batch1Tile, OtherCallsKeepTheirKernel) {
  EnvGuard tile("ATTNJIT_DECODE_TILE", nullptr);
  Call base;
  EXPECT_TRUE(takes_tile32(base));
  Call c = base;
  c.tokens = kBatch1Tile32AboveTokens;  // 16 splits of 256 tokens either way: 16-token tiles
  EXPECT_FALSE(takes_tile32(c)) << "short";
  c = base;
  c.tokens = 32768;
  c.window = 1024;  // plans 1024 visible tokens
  EXPECT_FALSE(takes_tile32(c)) << "short window";
  c.window = 8192;
  EXPECT_TRUE(takes_tile32(c)) << "window past the threshold";
  // Long sequences: the 32-token plan stays one wave (16 splits of 8 KV heads on 132 SMs; a
  // second wave of a one-CTA-an-SM kernel starts cold, plan_splits).
  for (int tokens : {65536, 131072}) {
    c = base;
    c.tokens = tokens;
    EXPECT_TRUE(takes_tile32(c)) << tokens;
  }
  // Where the 32-token plan takes more waves, the 16-token kernel: 67 KV heads fill one wave with
  // one split (67 SMs busy), and seven splits' four waves carry 40% less (plan_splits).
  c = base;
  c.tokens = 32768;
  c.kv_heads = 67;
  EXPECT_FALSE(takes_tile32(c)) << "67 KV heads";
  c = base;
  EXPECT_FALSE(takes_tile32(c, "sm_90a", 1)) << "sm_count 1: one split, eight CTAs on one SM";
  c = base;
  c.kv = DType::kFloat8E4M3;  // 8-bit K/V: 32 already
  EXPECT_FALSE(takes_tile32(c)) << "fp8";
  c = base;
  c.head_dim = 64;  // 32 already (three stages, two CTAs)
  EXPECT_FALSE(takes_tile32(c)) << "hd64";
  c = base;
  c.head_dim = 256;  // registers spill at 32
  c.group = 4;
  EXPECT_FALSE(takes_tile32(c)) << "hd256";
  for (int hd : {384, 512}) {  // split-D: 32-token tiles of three stages, one CTA an SM
    c = base;
    c.head_dim = hd;
    c.group = 4;
    EXPECT_TRUE(takes_tile32(c)) << hd;
    c.tokens = kBatch1Tile32AboveTokens;
    EXPECT_FALSE(takes_tile32(c)) << hd << " short";
  }
  c = base;
  c.page = 16;  // a 32-token tile never spans two pages
  EXPECT_FALSE(takes_tile32(c)) << "page 16";
  c = base;
  c.q_seq_len = 2;  // the masked kernel (split-M / dual-M rows) keeps 16
  EXPECT_FALSE(takes_tile32(c)) << "spec decode";
  c = base;
  EXPECT_FALSE(takes_tile32(c, "sm_120")) << "99 KB of shared memory holds no two 32-token stages";
  // The measuring knob still decides every call.
  {
    EnvGuard t16("ATTNJIT_DECODE_TILE", "16");
    const XqaPlan p = plan_xqa(args_for(base), testing::kPlanArch);
    EXPECT_EQ(decode_tiling(p.spec).tile, 16) << p.spec.name();
  }
}

// single_decode is one request: its kernel follows batch 1's rule, on contiguous K/V, with every
// feature the op has (positional encodings, soft cap, windows, LSE), and on sm_count's SMs.
TEST(Batch1Tile, SingleDecodeTakesBatch1sKernel) {
  EnvGuard tile("ATTNJIT_DECODE_TILE", nullptr);
  auto plan = [](int kv_len, KvLayout layout, DType dt, int head_dim, int sms = 0,
                 const SingleDecodeOptions& extra = {}) {
    const int64_t heads = 32, kv_heads = 8;
    const TensorView q = TensorView::contiguous(fake(0x10000), dt, {heads, head_dim});
    const TensorView k = layout == KvLayout::kNHD ? TensorView::contiguous(fake(0x100000), dt, {kv_len, kv_heads, head_dim})
                                                  : TensorView::contiguous(fake(0x100000), dt, {kv_heads, kv_len, head_dim});
    TensorView v = k;
    v.data = fake(0x200000);
    const TensorView lse = TensorView::contiguous(fake(0x30000), DType::kFloat32, {heads});
    SingleDecodeOptions o = extra;
    o.kv_layout = layout;
    return plan_single_decode(q, k, v, q, o, &lse, testing::kPlanArch, sms).spec;
  };
  for (int kv_len : {6144, 32768, 131072})
    for (KvLayout layout : {KvLayout::kNHD, KvLayout::kHND})
      for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
        const spec::KernelSpec s = plan(kv_len, layout, dt, 128);
        SCOPED_TRACE(s.name());
        EXPECT_TRUE(s.has(feature::kTile32));
        EXPECT_EQ(decode_tiling(s).tile, 32);
        EXPECT_EQ(spec::KernelSpec::from_name(s.name()), s);
        std::string why;
        EXPECT_TRUE(decode_can_implement(s, s.arch, &why)) << why;
      }
  SingleDecodeOptions features;
  features.pos_encoding_mode = PosEncodingMode::kRopeLlama;
  features.logits_soft_cap = 30.f;
  features.window_left = 8191;
  EXPECT_TRUE(plan(32768, KvLayout::kNHD, DType::kBFloat16, 128, 0, features).has(feature::kTile32));
  features.pos_encoding_mode = PosEncodingMode::kAlibi;
  EXPECT_TRUE(plan(32768, KvLayout::kHND, DType::kBFloat16, 128, 0, features).has(feature::kTile32));
  features.window_left = 1023;  // 1024 visible tokens: short
  EXPECT_FALSE(plan(32768, KvLayout::kHND, DType::kBFloat16, 128, 0, features).has(feature::kTile32));
  EXPECT_FALSE(plan(kBatch1Tile32AboveTokens, KvLayout::kNHD, DType::kBFloat16, 128).has(feature::kTile32)) << "short";
  EXPECT_FALSE(plan(32768, KvLayout::kNHD, DType::kBFloat16, 128, 1).has(feature::kTile32)) << "one SM";
  for (int hd : {64, 256})  // 64: unmeasured at 32; 256: registers spill at 32
    EXPECT_FALSE(plan(32768, KvLayout::kNHD, DType::kBFloat16, hd).has(feature::kTile32)) << hd;
  for (int hd : {384, 512}) {  // split-D: three 32-token stages, one CTA an SM
    const spec::KernelSpec s = plan(32768, KvLayout::kNHD, DType::kBFloat16, hd);
    EXPECT_TRUE(s.has(feature::kTile32)) << hd;
    const DecodeTiling t = decode_tiling(s);
    EXPECT_EQ(t.tile, 32) << hd;
    EXPECT_GE(t.stages, 3) << hd;
    std::string why;
    EXPECT_TRUE(decode_can_implement(s, s.arch, &why)) << why;
  }
}

// can_implement names the feature where a spec asks for it and cannot have it.
TEST(Batch1Tile, CanImplementRefusesTile32WhereItCannotTile) {
  EnvGuard tile("ATTNJIT_DECODE_TILE", nullptr);
  const spec::KernelSpec good = plan_xqa(args_for(Call{}), testing::kPlanArch).spec;
  ASSERT_TRUE(good.has(feature::kTile32));
  auto refused = [](spec::KernelSpec s, const std::string& needle) {
    std::string why;
    EXPECT_FALSE(decode_can_implement(s, s.arch, &why)) << s.name();
    EXPECT_NE(why.find(needle), std::string::npos) << why;
  };
  spec::KernelSpec s = good;
  s.family = spec::OpFamily::kDecode;  // single_decode: contiguous K/V, or pages of 32
  s.page_size = 0;
  std::string why;
  EXPECT_TRUE(decode_can_implement(s, s.arch, &why)) << why;
  s = good;
  s.page_size = 16;
  refused(s, "tile32");
  s = good;
  s.kv_dtype = DType::kFloat8E4M3;  // 32 tokens already: the same kernel under a second name
  refused(s, "16-bit K/V");
  s = good;
  s.mask = spec::MaskMode::kCustom;
  refused(s, "tile32");
  s = good;
  s.arch = spec::Arch::parse("sm_120");
  refused(s, "does not fit sm_120");
}

// Where batch 1 takes it, the kernel compiles for its arch: 32-token tiles, no spills, no stack.
TEST(Batch1Tile, CompilesWithoutSpillsWhereItFits) {
  EnvGuard tile("ATTNJIT_DECODE_TILE", nullptr);
  // (sm_80's 163 KB make 32 every batch's tile already: nothing to ask for.)
  EXPECT_EQ(decode_tiling(plan_xqa(args_for(Call{}), spec::Arch::parse("sm_80")).spec).tile, 32);
  EXPECT_FALSE(takes_tile32(Call{}, "sm_80"));
  for (const char* arch : {"sm_90a", "sm_100a"}) {
    Call c;
    c.layout = KvLayout::kHND;
    c.window = 8192;
    XqaArgs a = args_for(c);
    a.sinks = TensorView::contiguous(fake(0x600000), DType::kFloat32, {8, 8});
    const spec::KernelSpec s = plan_xqa(a, spec::Arch::parse(arch)).spec;
    SCOPED_TRACE(s.name());
    ASSERT_TRUE(s.has(feature::kTile32));
    const render::RenderedUnit u = render::render(s);
    EXPECT_EQ(u.launch.split_granule, 32);
    EXPECT_EQ(u.launch.min_blocks_per_sm, 1);
    const compile::CompileResult r = compile::compile(s.name(), u, s.arch);
    EXPECT_EQ(r.resources.spill_stores, 0) << r.log;
    EXPECT_EQ(r.resources.spill_loads, 0) << r.log;
    EXPECT_EQ(r.resources.stack_bytes, 0) << r.log;
  }
  // Split-D's (head_dim 512): three 32-token stages, one CTA an SM.
  Call c;
  c.head_dim = 512;
  c.group = 4;
  const spec::KernelSpec s = plan_xqa(args_for(c), testing::kPlanArch).spec;
  SCOPED_TRACE(s.name());
  ASSERT_TRUE(s.has(feature::kTile32));
  const render::RenderedUnit u = render::render(s);
  EXPECT_EQ(u.launch.split_granule, 32);
  const compile::CompileResult r = compile::compile(s.name(), u, s.arch);
  EXPECT_EQ(r.resources.spill_stores, 0) << r.log;
  EXPECT_EQ(r.resources.spill_loads, 0) << r.log;
  EXPECT_EQ(r.resources.stack_bytes, 0) << r.log;
}

}  // namespace
}  // namespace attnjit::ops
