// Tests of src/ops/mla/: argument validation (each wrong argument an Error naming it,
// expected vs given), the spec the op builds, backend resolution, the split plan and
// the workspace sizing helper. No GPU needed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "attnjit/error.hpp"
#include "common/expect_error.hpp"
#include "common/op_args.hpp"
#include "common/temp_dir.hpp"
#include "mla/mla_params.cuh"
#include "ops/mla/mla_family.hpp"
#include "ops/mla/mla_plan.hpp"
#include "render/renderer.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {
namespace {

using testing::expect_error;
using testing::fake;
using testing::kPlanArch;
using testing::valid_mla;
constexpr ErrorCode kBad = ErrorCode::kInvalidArgument;

TEST(MlaPlan, ValidDenseAndSparseArgsPlan) {
  for (bool sparse : {false, true})
    for (bool four_d : {false, true}) {
      const MlaPlan p = plan_mla(valid_mla(sparse, four_d), kPlanArch);
      EXPECT_EQ(p.spec.family, spec::OpFamily::kMla);
      EXPECT_EQ(p.spec.head_dim_qk, 576);
      EXPECT_EQ(p.spec.head_dim_vo, 512);
      EXPECT_EQ(p.spec.page_size, testing::kMlaPage);
      EXPECT_EQ(p.spec.mask, sparse ? spec::MaskMode::kCustom : spec::MaskMode::kCausal);
      EXPECT_EQ(p.spec.backend, spec::Backend::kTrtllmGen);  // auto on sm_90a: the wgmma kernel
      // Dense: 2 query tokens x 16 heads, the 32-row narrow tile; sparse: 16 heads a CTA, the 16-row one.
      EXPECT_EQ(p.shape.rows_per_cta, sparse ? mla_const::kNarrowRows : mla_const::kNarrow32Rows);
      EXPECT_EQ(p.spec.has(spec::feature::kNarrowTile), sparse);
      EXPECT_EQ(p.spec.has(spec::feature::kNarrow32), !sparse);
      EXPECT_EQ(p.shape.tile_tokens, mla_const::kHopperTile);
      EXPECT_EQ(p.params.kv_stride_tok, 576);
      EXPECT_EQ(p.params.kv_stride_page, testing::kMlaPage * 576);
      EXPECT_EQ(p.params.rows_per_group, sparse ? testing::kMlaHeads : testing::kMlaHeads * testing::kMlaQLen);
      EXPECT_EQ(p.shape.range, sparse ? testing::kMlaTopK : testing::kMlaPage * testing::kMlaPagesPerSeq);
      EXPECT_EQ(spec::KernelSpec::from_name(p.spec.name()), p.spec) << p.spec.name();
    }
  EXPECT_EQ(plan_mla(valid_mla(), kPlanArch).spec.name(), "mla.bf16.hd576x512.g1.p64.nhd.causal.narrow32.trtllmgen.sm90a");
}

TEST(MlaPlan, FeaturesFollowTheOptionalArguments) {
  MlaArgs a = valid_mla();
  a.sinks = TensorView::contiguous(fake(0x600000), DType::kFloat32, {testing::kMlaHeads});
  a.lse = TensorView::contiguous(fake(0x610000), DType::kFloat32, {testing::kMlaBatch * testing::kMlaQLen, testing::kMlaHeads});
  static const float scale = 0.f;
  a.bmm2_scale = &scale;
  const MlaPlan p = plan_mla(a, kPlanArch);
  EXPECT_TRUE(p.spec.has(spec::feature::kSinks));
  EXPECT_TRUE(p.spec.has(spec::feature::kReturnLse));
  EXPECT_TRUE(p.spec.has(spec::feature::kScalePointers));
  EXPECT_EQ(p.params.bmm2_scale_ptr, &scale);
  // The kernel's feature bits are spec::feature's.
  EXPECT_EQ(mla_const::kFeatSinks, spec::feature::kSinks);
  EXPECT_EQ(mla_const::kFeatLse, spec::feature::kReturnLse);
  EXPECT_EQ(mla_const::kFeatScalePtr, spec::feature::kScalePointers);
}

TEST(MlaPlan, HeadDimArgumentsAreChecked) {
  MlaArgs a = valid_mla();
  a.qk_nope_head_dim = 64;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"qk_nope_head_dim", "128", "64"});
  a = valid_mla();
  a.kv_lora_rank = 256;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"kv_lora_rank", "512", "256"});
  a = valid_mla();
  a.qk_rope_head_dim = 32;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"qk_rope_head_dim", "64", "32"});
}

TEST(MlaPlan, WrongTensorsNameThemselves) {
  MlaArgs a = valid_mla();
  a.query = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {2, 2, 16, 512});
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"query", "576", "512"});
  a = valid_mla();
  a.query = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {2, 17, 16, 576});
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"query", "q_len_per_request 1 to 16", "17"});
  a = valid_mla();
  a.query = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {2, 2, 129, 576});
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"query", "num_heads 1 to 128", "129"});
  a = valid_mla();
  a.query.dtype = DType::kFloat32;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"query", "fp32"});
  a = valid_mla();
  a.query.dtype = DType::kFloat8E4M3;  // an fp8 query with a bf16 cache
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"kv_cache", "fp8_e4m3 query needs an fp8_e4m3 KV cache", "bf16"});
  a = valid_mla();
  a.kv_cache.dtype = DType::kFloat16;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"kv_cache", "bf16 (the query's) or fp8_e4m3", "fp16"});
  a = valid_mla();
  a.kv_cache.dtype = DType::kFloat8E5M2;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"kv_cache", "fp8_e4m3", "e5m2"});
  a = valid_mla();
  a.kv_cache = TensorView::contiguous(fake(0x100000), DType::kBFloat16, {8, 48, 576});
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"kv_cache", "page_size 16, 32, 64 or 128", "48"});
  a = valid_mla();
  a.kv_cache = TensorView::contiguous(fake(0x100000), DType::kBFloat16, {8, 2, 64, 576});
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"kv_cache", "[num_pages, 1, page_size, 576]"});
  a = valid_mla();
  a.kv_cache = TensorView::contiguous(fake(0x100000), DType::kBFloat16, {8, 64, 512});
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"kv_cache", "576", "512"});
  a = valid_mla();
  a.block_tables.dtype = DType::kInt64;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"block_tables", "int32"});
  a = valid_mla();
  a.block_tables = TensorView::contiguous(fake(0x300000), DType::kInt32, {3, 4});
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"block_tables", "batch"});
  a = valid_mla();
  a.seq_lens = TensorView::contiguous(fake(0x300100), DType::kInt32, {3});
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"seq_lens", "batch"});
  a = valid_mla();
  a.max_seq_len = 257;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"max_seq_len", "256", "257"});
  a = valid_mla();
  a.max_seq_len = 0;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"max_seq_len", "0"});
  a = valid_mla();
  a.out = TensorView();
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"out"});
  a = valid_mla();
  a.out = TensorView::contiguous(fake(0x400000), DType::kBFloat16, {2, 2, 16, 576});
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"out", "512", "576"});
  a = valid_mla();
  a.out.dtype = DType::kFloat16;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"out", "fp16"});
  a = valid_mla();
  a.sinks = TensorView::contiguous(fake(0x600000), DType::kFloat32, {8});
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"sinks", "[16]", "[8]"});
  a = valid_mla();
  a.lse = TensorView::contiguous(fake(0x610000), DType::kFloat32, {2, 16});
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"lse", "batch * q_len_per_request"});
  a = valid_mla();
  a.lse_base = static_cast<LseBase>(7);
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"lse_base", "7"});
  a = valid_mla();
  a.workspace_buffer = TensorView::contiguous(fake(0x800010), DType::kUInt8, {4096});
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"workspace_buffer"});
  a = valid_mla();
  a.sm_count = 0;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"sm_count", ">= 1", "0"});
  // The int32 and fp32 side tensors: the kernels load them 4 bytes at a time.
  for (auto [edit, name] : std::initializer_list<std::pair<void (*)(MlaArgs&), const char*>>{
           {[](MlaArgs& x) { x.block_tables.data = fake(0x300002); }, "block_tables"},
           {[](MlaArgs& x) { x.seq_lens.data = fake(0x300102); }, "seq_lens"},
           {[](MlaArgs& x) { x.sinks = TensorView::contiguous(fake(0x600002), DType::kFloat32, {16}); }, "sinks"},
           {[](MlaArgs& x) { x.lse = TensorView::contiguous(fake(0x610002), DType::kFloat32, {4, 16}); }, "lse"}}) {
    a = valid_mla();
    edit(a);
    expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {name, "aligned"});
  }
  a = valid_mla(/*sparse=*/true);
  a.indices.data = fake(0x500002);
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"indices", "aligned"});
  a = valid_mla();
  a.block_tables.stride[1] = 2;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"block_tables", "stride"});
}

// A block table's rows may be apart (the first pages of a wider table, as an engine slices
// it), and sparse indices likewise: the kernels step rows by the strides the plan passes.
TEST(MlaPlan, SlicedBlockTablesAndIndicesPlanWithTheirStrides) {
  using testing::kMlaPagesPerSeq, testing::kMlaQLen, testing::kMlaTopK;
  MlaArgs a = valid_mla();
  a.block_tables.stride[0] = 3 * kMlaPagesPerSeq;  // [:, :pages] of a table three times as wide
  const MlaPlan p = plan_mla(a, kPlanArch);
  EXPECT_EQ(p.params.bt_stride_b, 3 * kMlaPagesPerSeq);
  EXPECT_EQ(p.params.pages_per_seq, kMlaPagesPerSeq);
  a = valid_mla(/*sparse=*/true);
  a.indices.stride[0] = 4 * kMlaQLen * kMlaTopK;
  a.indices.stride[1] = 2 * kMlaTopK;
  const MlaPlan s = plan_mla(a, kPlanArch);
  EXPECT_EQ(s.params.idx_stride_b, 4 * kMlaQLen * kMlaTopK);
  EXPECT_EQ(s.params.idx_stride_t, 2 * kMlaTopK);
}

// FlashInfer's trtllm-gen pairs: fp8 e4m3 KV with a bf16, fp16 or fp8 query; the output is
// the query's dtype, and bf16 for an fp8 query.
MlaArgs fp8_kv_args(DType q, DType out) {
  MlaArgs a = valid_mla();
  a.query.dtype = q;
  a.kv_cache.dtype = DType::kFloat8E4M3;
  a.out.dtype = out;
  return a;
}

TEST(MlaPlan, Fp8KvPlansWithEveryQueryDtype) {
  struct Case {
    DType q, out;
    const char* name;
  };
  const Case cases[] = {
      {DType::kBFloat16, DType::kBFloat16, "mla.bf16.kve4m3.hd576x512.g1.p64.nhd.causal.sm90a"},
      {DType::kFloat16, DType::kFloat16, "mla.fp16.kve4m3.hd576x512.g1.p64.nhd.causal.sm90a"},
      {DType::kFloat8E4M3, DType::kBFloat16, "mla.e4m3.obf16.hd576x512.g1.p64.nhd.causal.sm90a"},
  };
  for (const Case& c : cases) {
    // (xqa's kernel, which serves every arch; auto takes the wgmma one on sm_90a.)
    MlaArgs args = fp8_kv_args(c.q, c.out);
    args.backend = Backend::kXqa;
    const MlaPlan p = plan_mla(args, kPlanArch);
    EXPECT_EQ(p.spec.q_dtype, c.q);
    EXPECT_EQ(p.spec.kv_dtype, DType::kFloat8E4M3);
    EXPECT_EQ(p.spec.out_dtype, c.out);
    EXPECT_EQ(p.spec.name(), c.name);
    EXPECT_EQ(spec::KernelSpec::from_name(p.spec.name()), p.spec) << p.spec.name();
    // Strides stay in elements: an fp8 token row is 576 bytes.
    EXPECT_EQ(p.params.kv_stride_tok, 576);
    std::string why;
    for (const char* arch : {"sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120"})
      EXPECT_TRUE(mla_can_implement(p.spec, spec::Arch::parse(arch), &why)) << c.name << " " << arch << ": " << why;
  }
  // The sparse and 4-D forms take fp8 too.
  MlaArgs a = valid_mla(true, true);
  a.kv_cache.dtype = DType::kFloat8E4M3;
  EXPECT_EQ(plan_mla(a, kPlanArch).spec.kv_dtype, DType::kFloat8E4M3);
}

TEST(MlaPlan, Fp8KvRefusalsNameTheArgument) {
  // An fp8 query writes bf16, never fp8 or fp16.
  expect_error([] { plan_mla(fp8_kv_args(DType::kFloat8E4M3, DType::kFloat8E4M3), kPlanArch); }, kBad,
               {"out", "bf16 (the output of an fp8_e4m3 query)", "fp8_e4m3"});
  expect_error([] { plan_mla(fp8_kv_args(DType::kFloat8E4M3, DType::kFloat16), kPlanArch); }, kBad, {"out", "bf16", "fp16"});
  // A 16-bit query writes its own dtype, whatever the cache.
  expect_error([] { plan_mla(fp8_kv_args(DType::kBFloat16, DType::kFloat8E4M3), kPlanArch); }, kBad,
               {"out", "bf16 (the query's)", "fp8_e4m3"});
  expect_error([] { plan_mla(fp8_kv_args(DType::kFloat16, DType::kBFloat16), kPlanArch); }, kBad, {"out", "fp16", "bf16"});
  // Other query dtypes name the query.
  expect_error([] { plan_mla(fp8_kv_args(DType::kFloat8E5M2, DType::kBFloat16), kPlanArch); }, kBad,
               {"query", "fp8_e4m3", "e5m2"});
  // fp8 rows are 576 bytes: the 16-byte alignment is checked in bytes, so an odd stride fails.
  MlaArgs a = fp8_kv_args(DType::kFloat8E4M3, DType::kBFloat16);
  a.query.stride[2] = 584;  // 584 bytes: not a multiple of 16
  a.query.stride[1] = 584 * testing::kMlaHeads;
  a.query.stride[0] = a.query.stride[1] * testing::kMlaQLen;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"query", "16 bytes"});
}

TEST(MlaPlan, ScalesAreCheckedUnlessOnTheDevice) {
  MlaArgs a = valid_mla();
  a.bmm1_scale = 0.f;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"bmm1_scale"});
  a = valid_mla();
  a.bmm2_scale = -1.f;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"bmm2_scale"});
  a = valid_mla();
  static const float dev = 0.f;
  a.bmm1_scale = &dev;
  a.bmm2_scale = &dev;
  EXPECT_NO_THROW(plan_mla(a, kPlanArch));
}

TEST(MlaPlan, SparseIndicesAreChecked) {
  MlaArgs a = valid_mla(true);
  a.indices = TensorView();
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"indices"});
  a = valid_mla(true);
  a.indices = TensorView::contiguous(fake(0x500000), DType::kInt32, {2, 2, 64});
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"indices", "sparse_mla_top_k", "64"});
  a = valid_mla(true);
  a.indices.dtype = DType::kInt64;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"indices", "int32"});
  a = valid_mla(true);
  a.sparse_mla_top_k = -1;
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"sparse_mla_top_k", "-1"});
  a = valid_mla(false);
  a.indices = TensorView::contiguous(fake(0x500000), DType::kInt32, {2, 2, 128});
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"indices", "sparse_mla_top_k > 0"});
}

// valid_mla with 128 heads and a batch of 16 (one query each): the shape auto gives the wgmma kernel.
MlaArgs wide_mla(bool sparse = false) {
  MlaArgs a = valid_mla(sparse);
  constexpr int B = 16, H = 128;
  a.query = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {B, 1, H, 576});
  a.kv_cache = TensorView::contiguous(fake(0x100000), DType::kBFloat16, {B * 4, 64, 576});
  a.block_tables = TensorView::contiguous(fake(0x300000), DType::kInt32, {B, 4});
  a.seq_lens = TensorView::contiguous(fake(0x300100), DType::kInt32, {B});
  a.out = TensorView::contiguous(fake(0x400000), DType::kBFloat16, {B, 1, H, 512});
  if (sparse) a.indices = TensorView::contiguous(fake(0x500000), DType::kInt32, {B, 1, testing::kMlaTopK});
  return a;
}

// The wgmma kernel serves 16-bit and fp8 KV on sm_90a, and auto takes it there at every shape
// (measured faster at all, one short request included). Dense fp8 KV in a view TMA cannot
// describe, FIA's split rope and every other arch take xqa; asking trtllm-gen for those names
// the backend (or the argument).
TEST(MlaPlan, TrtllmGenServesSm90aSixteenBitAndAutoTakesIt) {
  for (bool sparse : {false, true}) {
    MlaArgs a = wide_mla(sparse);
    for (Backend b : {Backend::kTrtllmGen, Backend::kAuto}) {
      a.backend = b;
      const MlaPlan p = plan_mla(a, kPlanArch);
      EXPECT_EQ(p.spec.backend, spec::Backend::kTrtllmGen);
      EXPECT_EQ(p.shape.rows_per_cta, mla_const::kHopperRows);
      EXPECT_EQ(p.params.row_blocks, 2);
    }
    a.backend = Backend::kXqa;
    EXPECT_EQ(plan_mla(a, kPlanArch).spec.backend, spec::Backend::kXqa);
    EXPECT_EQ(plan_mla(a, kPlanArch).shape.rows_per_cta, mla_const::kRowsPerCta);
    // Two requests of 32 rows (one narrow 32-row block each): auto takes the wgmma kernel too.
    MlaArgs narrow = valid_mla(sparse);
    EXPECT_EQ(plan_mla(narrow, kPlanArch).spec.backend, spec::Backend::kTrtllmGen);
    EXPECT_EQ(plan_mla(narrow, kPlanArch).params.row_blocks, 1);
    narrow.backend = Backend::kXqa;
    EXPECT_EQ(plan_mla(narrow, kPlanArch).spec.backend, spec::Backend::kXqa);
  }
  MlaArgs a = wide_mla();
  for (const char* arch : {"sm_80", "sm_89", "sm_90", "sm_100a", "sm_120"}) {
    a.backend = Backend::kTrtllmGen;
    expect_error([&] { plan_mla(a, spec::Arch::parse(arch)); }, ErrorCode::kUnsupported, {"backend trtllm-gen", arch + 3});
    a.backend = Backend::kAuto;
    EXPECT_EQ(plan_mla(a, spec::Arch::parse(arch)).spec.backend, spec::Backend::kXqa) << arch;
    a.backend = Backend::kXqa;
    EXPECT_EQ(plan_mla(a, spec::Arch::parse(arch)).spec.backend, spec::Backend::kXqa) << arch;
  }
  for (DType q : {DType::kBFloat16, DType::kFloat8E4M3}) {
    MlaArgs fp8 = wide_mla();
    fp8.query.dtype = q;
    fp8.kv_cache = TensorView::contiguous(fp8.kv_cache.data, DType::kFloat8E4M3, {fp8.kv_cache.shape[0], 64, 576});
    for (Backend b : {Backend::kTrtllmGen, Backend::kAuto}) {
      fp8.backend = b;
      EXPECT_EQ(plan_mla(fp8, kPlanArch).spec.backend, spec::Backend::kTrtllmGen);
    }
    // Pages that overlap (a page stride below page_size rows): TMA cannot describe them.
    MlaArgs overlap = fp8;
    overlap.kv_cache.stride[0] = 576 * 32;
    overlap.backend = Backend::kTrtllmGen;
    expect_error([&] { plan_mla(overlap, kPlanArch); }, kBad, {"kv_cache", "TMA"});
    overlap.backend = Backend::kAuto;
    EXPECT_EQ(plan_mla(overlap, kPlanArch).spec.backend, spec::Backend::kXqa);
    // Sparse rows land by cp.async: any view serves.
    MlaArgs sparse = wide_mla(true);
    sparse.query.dtype = q;
    sparse.kv_cache = TensorView::contiguous(sparse.kv_cache.data, DType::kFloat8E4M3, {sparse.kv_cache.shape[0], 64, 576});
    sparse.kv_cache.stride[0] = 576 * 32;
    for (Backend b : {Backend::kTrtllmGen, Backend::kAuto}) {
      sparse.backend = b;
      EXPECT_EQ(plan_mla(sparse, kPlanArch).spec.backend, spec::Backend::kTrtllmGen);
    }
  }
  a.backend = static_cast<Backend>(9);
  expect_error([&] { plan_mla(a, kPlanArch); }, kBad, {"backend"});
}

// The xqa (mma.sync) kernel's limits; MlaPlan.TrtllmGen* covers the wgmma kernel's.
MlaArgs valid_xqa_mla(bool sparse = false) {
  MlaArgs a = valid_mla(sparse);
  a.backend = Backend::kXqa;
  return a;
}

TEST(MlaPlan, CanImplementRefusesWhatTheKernelDoesNotServe) {
  spec::KernelSpec s = plan_mla(valid_xqa_mla(), kPlanArch).spec;
  std::string why;
  EXPECT_TRUE(mla_can_implement(s, spec::Arch::parse("sm_80"), &why)) << why;
  EXPECT_TRUE(mla_can_implement(s, spec::Arch::parse("sm_120"), &why)) << why;
  EXPECT_FALSE(mla_can_implement(s, spec::Arch{75, false}, &why));
  EXPECT_NE(why.find("sm_80"), std::string::npos) << why;
  spec::KernelSpec t = s;
  t.kv_dtype = DType::kFloat8E4M3;
  EXPECT_TRUE(mla_can_implement(t, s.arch, &why)) << why;
  t.kv_dtype = DType::kFloat16;  // a 16-bit cache of another dtype than the query's
  EXPECT_FALSE(mla_can_implement(t, s.arch, &why));
  EXPECT_NE(why.find("kv_cache dtype fp16"), std::string::npos) << why;
  t = s;
  t.q_dtype = DType::kFloat8E4M3;  // fp8 query, bf16 cache
  t.out_dtype = DType::kBFloat16;
  EXPECT_FALSE(mla_can_implement(t, s.arch, &why));
  EXPECT_NE(why.find("kv_cache dtype bf16"), std::string::npos) << why;
  t.kv_dtype = DType::kFloat8E4M3;
  t.out_dtype = DType::kFloat8E4M3;  // fp8 query, fp8 output: mla writes bf16
  EXPECT_FALSE(mla_can_implement(t, s.arch, &why));
  EXPECT_NE(why.find("out dtype fp8_e4m3"), std::string::npos) << why;
  t = s;
  t.head_dim_vo = 576;
  EXPECT_FALSE(mla_can_implement(t, s.arch, &why));
  t = s;
  t.features |= spec::feature::kSoftCap;
  EXPECT_FALSE(mla_can_implement(t, s.arch, &why));
  // The shared memory fits the smallest arch (99 KB on sm_86/89/120), fp8 KV's four stages too,
  // and two CTAs fit an sm_90 SM (228 KB) either way.
  for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3})
    for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120"}) {
      t = s;
      t.kv_dtype = kv;
      t.arch = spec::Arch::parse(arch);
      const MlaTiling tl = mla_tiling(t);
      EXPECT_LE(tl.smem_bytes, tl.smem_limit) << arch;
      EXPECT_LE(2 * (tl.smem_bytes + 1024), 228 * 1024) << arch;
      EXPECT_EQ(tl.smem_limit, render::max_smem_per_block(t.arch));
      EXPECT_EQ(tl.stages, kv == DType::kFloat8E4M3 ? 4 : 2);
      EXPECT_EQ(tl.kv_row_bytes, 576 * int(dtype_size(kv)) + 16);
    }
}

// ATTNJIT_MLA_STAGES: the ring depth for tuning runs; it reaches the rendered Traits (and so
// the key), a bad value names the variable, and a depth the arch cannot hold is refused.
TEST(MlaPlan, StagesKnobReachesTheSourceOrNamesItself) {
  MlaArgs a = valid_mla();
  a.kv_cache.dtype = DType::kFloat8E4M3;
  a.backend = Backend::kXqa;  // the stages are the mma.sync kernel's
  spec::KernelSpec s = plan_mla(a, kPlanArch).spec;
  ASSERT_EQ(setenv("ATTNJIT_MLA_STAGES", "3", 1), 0);
  EXPECT_EQ(mla_tiling(s).stages, 3);
  const std::string src3 = render::render(s).source;
  EXPECT_NE(src3.find(", 3>;"), std::string::npos) << src3;
  ASSERT_EQ(setenv("ATTNJIT_MLA_STAGES", "8", 1), 0);
  std::string why;
  s.arch = spec::Arch::parse("sm_120");  // 8 fp8 stages (~170 KB) exceed its 99 KB
  EXPECT_FALSE(mla_can_implement(s, s.arch, &why));
  EXPECT_NE(why.find("shared memory"), std::string::npos) << why;
  s.arch = kPlanArch;
  EXPECT_TRUE(mla_can_implement(s, s.arch, &why)) << why;
  ASSERT_EQ(setenv("ATTNJIT_MLA_STAGES", "1", 1), 0);
  expect_error([&] { mla_tiling(s); }, kBad, {"ATTNJIT_MLA_STAGES", "1"});
  ASSERT_EQ(setenv("ATTNJIT_MLA_STAGES", "abc", 1), 0);
  expect_error([&] { mla_tiling(s); }, kBad, {"ATTNJIT_MLA_STAGES", "abc"});
  unsetenv("ATTNJIT_MLA_STAGES");
  EXPECT_EQ(mla_tiling(s).stages, 4);
  EXPECT_NE(render::render(s).source, src3);
}

TEST(MlaPlan, SplitsFillTheGpuForOneLongSequence) {
  // One 32K sequence, 128 heads: 8 row blocks; the splits fill 132 SMs x 2 slots.
  MlaShape one{1, 128, 1, 32768, false};
  const MlaSplit sp = mla_plan_splits(one, 132 * 2);
  EXPECT_GE(int64_t(sp.splits) * mla_base_ctas(one), 132) << sp.splits;
  EXPECT_EQ(sp.tokens_per_split % mla_const::kTileTokens, 0);
  EXPECT_GE(int64_t(sp.splits) * sp.tokens_per_split, 32768);
  EXPECT_LT(int64_t(sp.splits - 1) * sp.tokens_per_split, 32768);
  // 16 heads, one sequence: one row block, many splits, never more than kMaxSplits.
  MlaShape narrow{1, 16, 1, 1 << 20, false};
  EXPECT_LE(mla_plan_splits(narrow, 264).splits, mla_const::kMaxSplits);
  // A large batch does not split.
  MlaShape wide{128, 128, 2, 4096, false};
  EXPECT_EQ(mla_plan_splits(wide, 264).splits, 1);
  // Row blocks: dense flattens (t, head) rows; sparse keeps one query token per CTA.
  EXPECT_EQ(mla_row_blocks(MlaShape{1, 7, 3, 64, false}), 2);
  EXPECT_EQ(mla_row_blocks(MlaShape{1, 7, 3, 64, true}), 1);
  EXPECT_EQ(mla_base_ctas(MlaShape{2, 7, 3, 64, true}), 6);
  // The wgmma kernel: 64 rows per CTA, splits of whole 64-token tiles.
  constexpr int kT = mla_const::kHopperTile;
  EXPECT_EQ(mla_row_blocks(MlaShape{1, 128, 2, 64, false, mla_const::kHopperRows, kT}), 4);
  EXPECT_EQ(mla_row_blocks(MlaShape{1, 16, 1, 64, false, mla_const::kHopperRows, kT}), 1);
  const MlaSplit long_one = mla_plan_splits(MlaShape{1, 128, 1, 32768, false, mla_const::kHopperRows, kT}, 132);
  EXPECT_GT(long_one.splits, 1);
  EXPECT_EQ(long_one.tokens_per_split % mla_const::kHopperTile, 0);
}

TEST(MlaPlan, ForcedSplitCountsStayWithinTheWorkspace) {
  const MlaShape b128{128, 128, 1, 4096, false, mla_const::kHopperRows, mla_const::kHopperTile};  // 256 CTAs before splitting
  unsetenv("ATTNJIT_MLA_SPLITS");
  EXPECT_EQ(mla_plan_splits(b128, 132).splits, 1);
  ASSERT_EQ(setenv("ATTNJIT_MLA_SPLITS", "3", 1), 0);
  const MlaSplit three = mla_plan_splits(b128, 132);
  EXPECT_EQ(three.splits, 3);
  EXPECT_EQ(three.tokens_per_split % mla_const::kHopperTile, 0);
  EXPECT_GE(three.tokens_per_split * three.splits, 4096);
  ASSERT_EQ(setenv("ATTNJIT_MLA_SPLITS", "200", 1), 0);
  EXPECT_EQ(mla_plan_splits(b128, 132).splits, 3);  // 4 waves of 132 slots over 256 CTAs
  EXPECT_EQ(mla_plan_splits(MlaShape{1, 16, 1, 2048, false}, 132).splits, 8);  // >= 256 tokens a split
  ASSERT_EQ(setenv("ATTNJIT_MLA_SPLITS", "0", 1), 0);
  expect_error([&] { mla_plan_splits(b128, 132); }, kBad, {"ATTNJIT_MLA_SPLITS", "0"});
  unsetenv("ATTNJIT_MLA_SPLITS");
}

TEST(MlaPlan, SplitsMergeInACombineLaunch) {
  unsetenv("ATTNJIT_MLA_COMBINE");
  const MlaShape b1{1, 128, 1, 32768, false, mla_const::kHopperRows, mla_const::kHopperTile};
  const MlaSplit sp = mla_plan_splits(b1, 132);
  EXPECT_GT(sp.splits, 1);
  EXPECT_TRUE(mla_combine_pays(sp.splits));  // every split count, 2 included
  EXPECT_TRUE(mla_combine_pays(2));
  EXPECT_FALSE(mla_combine_pays(1));         // nothing to merge
  ASSERT_EQ(setenv("ATTNJIT_MLA_COMBINE", "0", 1), 0);
  EXPECT_FALSE(mla_combine_pays(sp.splits));
  ASSERT_EQ(setenv("ATTNJIT_MLA_COMBINE", "1", 1), 0);
  EXPECT_TRUE(mla_combine_pays(2));
  EXPECT_FALSE(mla_combine_pays(1));
  ASSERT_EQ(setenv("ATTNJIT_MLA_COMBINE", "2", 1), 0);
  expect_error([&] { mla_combine_pays(8); }, kBad, {"ATTNJIT_MLA_COMBINE", "2"});
  unsetenv("ATTNJIT_MLA_COMBINE");
  // A combine CTA: one row, 128 threads a lane group, two groups where the entry has 256 threads.
  EXPECT_EQ(mla_combine_threads(128, 16, 132), 128);    // the mma.sync kernel
  EXPECT_EQ(mla_combine_threads(256, 128, 132), 256);   // the wide wgmma tile, h128 B1: a CTA an SM
  EXPECT_EQ(mla_combine_threads(384, 16, 132), 256);    // the narrow tile's ring
  EXPECT_EQ(mla_combine_threads(256, 1024, 132), 128);  // h64 B16: two CTAs an SM
  // Every split's weight, each warp's max and sum, and the second group's float4 per dim quad.
  EXPECT_EQ(mla_combine_smem_bytes(128), mla_const::kMaxSplits * 4 + 2 * 4 * 4);
  EXPECT_EQ(mla_combine_smem_bytes(256), mla_const::kMaxSplits * 4 + 2 * 8 * 4 + 128 * 16);
}

TEST(MlaWorkspace, BoundCoversEverySmallerCall) {
  const int sms = 132;
  for (int batch : {1, 3, 16, 128})
    for (int heads : {1, 16, 128})
      for (int q_len : {1, 2, 16})
        for (int len : {64, 1000, 4096, 32768}) {
          const size_t bound = mla_workspace_bytes(batch, heads, q_len, len, sms);
          for (int b = 1; b <= batch; b = b * 2 + 1)
            for (int slots_per_sm = 1; slots_per_sm <= 4; ++slots_per_sm)
              for (const auto [rows, tile] : {std::pair{mla_const::kRowsPerCta, mla_const::kTileTokens},  // xqa
                                              std::pair{mla_const::kNarrowRows, mla_const::kHopperTile},
                                              std::pair{mla_const::kNarrow32Rows, mla_const::kHopperTile},
                                              std::pair{mla_const::kHopperRows, mla_const::kHopperTile}}) {
                MlaShape s{b, heads, q_len, len, false, rows, tile};
                const MlaSplit sp = mla_plan_splits(s, sms * slots_per_sm);
                EXPECT_LE(mla_workspace_need(s, sp.splits), bound) << "batch " << batch << " b " << b << " heads "
                                                                   << heads << " q_len " << q_len << " len " << len
                                                                   << " rows " << rows;
              }
        }
  EXPECT_GT(mla_workspace_bytes(1, 128, 1, 32768, sms), 0u);
  expect_error([] { mla_workspace_bytes(0, 16, 1, 4096, 132); }, kBad, {"batch", "0"});
  expect_error([] { mla_workspace_bytes(1, 129, 1, 4096, 132); }, kBad, {"num_heads", "129"});
  expect_error([] { mla_workspace_bytes(1, 16, 17, 4096, 132); }, kBad, {"q_len_per_request", "17"});
  expect_error([] { mla_workspace_bytes(1, 16, 1, 0, 132); }, kBad, {"max_seq_len", "0"});
  expect_error([] { mla_workspace_bytes(1, 16, 1, 4096, 0); }, kBad, {"sm_count", "0"});
  expect_error([] { mla_workspace_bytes(1, 16, 1, 4096, 132, -5); }, kBad, {"sparse_mla_top_k", "-5"});
}

TEST(MlaPlan, RenderedUnitDeclaresItsLaunchMetadata) {
  const spec::KernelSpec s = plan_mla(valid_xqa_mla(true), kPlanArch).spec;
  const render::RenderedUnit u = render::render(s);
  EXPECT_EQ(u.entry, "attnjit_mla_decode");
  EXPECT_EQ(u.launch.threads, 128);
  EXPECT_EQ(u.launch.split_granule, mla_const::kTileTokens);
  EXPECT_NE(u.source.find("mla/mla_decode.cuh"), std::string::npos);
  EXPECT_NE(u.source.find(", true,"), std::string::npos) << u.source;  // sparse
}

TEST(MlaPlan, WgmmaUnitDeclaresItsLaunchMetadata) {
  const spec::KernelSpec s = plan_mla(wide_mla(true), kPlanArch).spec;
  ASSERT_EQ(s.backend, spec::Backend::kTrtllmGen);
  const render::RenderedUnit u = render::render(s);
  EXPECT_EQ(u.launch.threads, 256);  // two math warpgroups
  EXPECT_EQ(mla_const::kHopperTile % u.launch.split_granule, 0);  // splits are whole tiles
  EXPECT_LE(u.launch.smem_bytes, 227 * 1024);
  EXPECT_NE(u.source.find("mla/mla_hopper.cuh"), std::string::npos);
  EXPECT_NE(u.source.find("MlaHopperTraits<attnjit::bf16_t, attnjit::bf16_t, attnjit::bf16_t, 64, true,"),
            std::string::npos)
      << u.source;
}

// prewarm_mla compiles from shapes alone (null data), with no GPU, the spec a call would launch.
TEST(MlaPrewarm, CompilesFromShapesAlone) {
  testing::TempDir dir("mla-prewarm");
  RuntimeOptions o;
  o.cache_dir = dir.path();
  Runtime rt(o);
  MlaArgs a = valid_mla(true);
  for (TensorView* t : {&a.query, &a.kv_cache, &a.block_tables, &a.seq_lens, &a.out, &a.indices}) t->data = nullptr;
  a.sinks = TensorView::contiguous(nullptr, DType::kFloat32, {testing::kMlaHeads});
  EXPECT_EQ(prewarm_mla(a, "sm_120", &rt), "mla.bf16.hd576x512.g1.p64.nhd.custom.sinks.sm120");
  EXPECT_EQ(rt.stats().compiles, 1);
  EXPECT_EQ(prewarm_mla(a, "sm_120", &rt), "mla.bf16.hd576x512.g1.p64.nhd.custom.sinks.sm120");
  EXPECT_EQ(rt.stats().compiles, 1);  // found, not compiled again
  a.max_seq_len = 0;
  expect_error([&] { prewarm_mla(a, "sm_120", &rt); }, kBad, {"max_seq_len"});
}

}  // namespace
}  // namespace attnjit::ops
