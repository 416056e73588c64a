// Tests of src/ops/ argument validation (plan_xqa, plan_single_decode) with fake device pointers.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "common/expect_error.hpp"
#include "common/op_args.hpp"
#include "attnjit/decode.hpp"
#include "attnjit/error.hpp"
#include "attnjit/xqa.hpp"
#include "driver/cuda_driver.hpp"
#include "ops/decode/decode_spec.hpp"

namespace attnjit::ops {
namespace {

namespace feature = spec::feature;
using testing::fake;
using testing::kBatch, testing::kKvHeads, testing::kGroup, testing::kHeads, testing::kHd, testing::kPage,
    testing::kPagesPerSeq, testing::kPages, testing::kSdHeads, testing::kSdKvHeads, testing::kSdLen;
using testing::SingleDecodeCall, testing::valid_single, testing::valid_xqa;
const spec::Arch kArch = testing::kPlanArch;

using testing::expect_error;

// Expects Error(kInvalidArgument) naming `arg` (plus any extra needles).
void expect_invalid(const std::function<void()>& f, const std::string& arg, std::vector<std::string> more = {}) {
  more.insert(more.begin(), "argument '" + arg + "'");
  expect_error(f, ErrorCode::kInvalidArgument, more);
}

XqaPlan plan(const XqaArgs& a) { return plan_xqa(a, kArch); }

TEST(PlanXqa, ValidNhdSucceeds) {
  const XqaPlan p = plan(valid_xqa());
  const spec::KernelSpec& s = p.spec;
  EXPECT_EQ(s.family, spec::OpFamily::kXqa);
  EXPECT_EQ(s.backend, spec::Backend::kXqa);
  EXPECT_EQ(s.q_dtype, DType::kBFloat16);
  EXPECT_EQ(s.kv_dtype, DType::kBFloat16);
  EXPECT_EQ(s.out_dtype, DType::kBFloat16);
  EXPECT_EQ(s.head_dim_qk, kHd);
  EXPECT_EQ(s.group_size, kGroup);
  EXPECT_EQ(s.page_size, kPage);
  EXPECT_EQ(s.layout, spec::KvLayout::kNHD);
  EXPECT_EQ(s.mask, spec::MaskMode::kNone);
  EXPECT_EQ(s.features, 0u);
  EXPECT_EQ(s.arch, kArch);
  EXPECT_EQ(s.name(), "xqa.bf16.hd128.g4.p32.nhd.sm90a");
  EXPECT_EQ(p.params.k_stride_page, kPage * kKvHeads * kHd);
  EXPECT_EQ(p.params.k_stride_tok, kKvHeads * kHd);
  EXPECT_EQ(p.params.k_stride_head, kHd);
  EXPECT_EQ(p.params.v_stride_tok, kKvHeads * kHd);
  EXPECT_EQ(p.params.q_stride_b, kHeads * kHd);
  EXPECT_EQ(p.params.q_stride_t, 0);
  EXPECT_EQ(p.params.q_stride_h, kHd);
  EXPECT_EQ(p.params.o_stride_h, kHd);
  EXPECT_EQ(p.params.batch, kBatch);
  EXPECT_EQ(p.params.num_kv_heads, kKvHeads);
  EXPECT_EQ(p.params.pages_per_seq, kPagesPerSeq);
  EXPECT_EQ(p.params.window_left, -1);
  EXPECT_EQ(p.params.mask, nullptr);
  EXPECT_FLOAT_EQ(p.params.sm_scale, 1.0f / std::sqrt(128.0f));
  EXPECT_EQ(p.params.q, fake(0x10000));
  EXPECT_EQ(p.params.out, fake(0x400000));
  EXPECT_EQ(p.shape.batch, kBatch);
  EXPECT_EQ(p.shape.group, kGroup);
  EXPECT_EQ(p.shape.max_seq_len, kPagesPerSeq * kPage);
  EXPECT_EQ(p.workspace_bytes, 0u);
}

TEST(PlanXqa, ValidHndStrides) {
  const XqaPlan p = plan(valid_xqa(KvLayout::kHND));
  EXPECT_EQ(p.spec.layout, spec::KvLayout::kHND);
  EXPECT_EQ(p.params.k_stride_page, kKvHeads * kPage * kHd);
  EXPECT_EQ(p.params.k_stride_tok, kHd);
  EXPECT_EQ(p.params.k_stride_head, kPage * kHd);
  EXPECT_EQ(p.params.v_stride_tok, kHd);
  EXPECT_EQ(p.params.v_stride_head, kPage * kHd);
}

TEST(PlanXqa, SpecDecodeFeaturesAndScales) {
  XqaArgs a = valid_xqa(KvLayout::kNHD, 3);
  a.sinks = TensorView::contiguous(fake(0x600000), DType::kFloat32, {kKvHeads, kGroup});
  a.sliding_win_size = 100;
  static const float scale = 0.5f;
  a.kv_scale = &scale;
  XqaPlan p = plan(a);
  EXPECT_EQ(p.spec.mask, spec::MaskMode::kCustom);
  // kv_scale dequantizes fp8 KV only: with bf16 KV FlashInfer's XQA ignores it.
  EXPECT_EQ(p.spec.features, feature::kSinks | feature::kSlidingWindow);
  EXPECT_EQ(p.params.window_left, 99);
  EXPECT_EQ(p.params.kv_scale_ptr, nullptr);
  EXPECT_EQ(p.params.k_scale, 1.0f);
  EXPECT_EQ(p.params.v_scale, 1.0f);
  EXPECT_EQ(p.params.q_stride_t, kHeads * kHd);
  EXPECT_EQ(p.params.mask_stride_b, 3);  // in 32-bit words
  EXPECT_EQ(p.params.mask_stride_t, 1);
  EXPECT_EQ(p.params.q_seq_len, 3);
  EXPECT_EQ(p.shape.q_seq_len, 3);

  // fp8 KV with fp8 output; q_scale as a pointer too.
  XqaArgs f = valid_xqa(KvLayout::kHND);
  f.k_cache.dtype = f.v_cache.dtype = DType::kFloat8E4M3;
  f.output.dtype = DType::kFloat8E4M3;
  f.rcp_out_scale = 2.0f;
  f.q_scale = &scale;
  f.kv_scale = &scale;
  p = plan(f);
  EXPECT_EQ(p.spec.kv_dtype, DType::kFloat8E4M3);
  EXPECT_EQ(p.spec.out_dtype, DType::kFloat8E4M3);
  EXPECT_EQ(p.spec.features, feature::kScalePointers);
  EXPECT_EQ(p.params.rcp_out_scale, 2.0f);
  EXPECT_EQ(p.params.kv_scale_ptr, &scale);
  EXPECT_EQ(p.spec.name(), "xqa.bf16.kve4m3.oe4m3.hd128.g4.p32.hnd.scaleptr.sm90a");
  f.kv_scale = 0.75f;
  EXPECT_EQ(plan(f).params.k_scale, 0.75f);
  EXPECT_EQ(plan(f).params.v_scale, 0.75f);

  // rcp_out_scale only scales an fp8 output; a mask without spec decode is
  // ignored (both as in FlashInfer).
  XqaArgs plain = valid_xqa();
  plain.rcp_out_scale = 0.f;
  plain.mask = TensorView::contiguous(fake(0x500000), DType::kUInt16, {kBatch, 1, 2});
  p = plan(plain);
  EXPECT_EQ(p.params.rcp_out_scale, 1.0f);
  EXPECT_EQ(p.params.mask, nullptr);
  EXPECT_EQ(p.spec.mask, spec::MaskMode::kNone);
  EXPECT_EQ(plan(f).params.kv_scale_ptr, nullptr) << "kv_scale by value";
}

TEST(PlanXqa, RaggedQ) {
  XqaArgs a = valid_xqa(KvLayout::kNHD, 4);
  a.q = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {6, kHeads, kHd});
  a.output = TensorView::contiguous(fake(0x400000), DType::kBFloat16, {6, kHeads, kHd});
  a.q_cu_seq_lens = TensorView::contiguous(fake(0x700000), DType::kUInt32, {kBatch + 1});
  // Ragged masks are packed by query token (XQA): [total_q_tokens, words * 2].
  a.mask = TensorView::contiguous(fake(0x500000), DType::kUInt16, {6, 2});
  const XqaPlan p = plan(a);
  EXPECT_EQ(p.params.mask_stride_b, 0);
  EXPECT_EQ(p.params.mask_stride_t, 1);
  EXPECT_EQ(p.spec.features, feature::kRaggedQ);
  EXPECT_EQ(p.spec.mask, spec::MaskMode::kCustom);
  EXPECT_EQ(p.params.batch, kBatch);
  EXPECT_EQ(p.params.q_stride_b, 0);
  EXPECT_EQ(p.params.q_stride_t, kHeads * kHd);
  EXPECT_EQ(p.params.q_cu_seq_lens, fake(0x700000));
}

TEST(PlanXqa, ExplicitTrtllmGenIsUnsupported) {
  XqaArgs a = valid_xqa();
  a.backend = Backend::kTrtllmGen;
  expect_error([&] { plan(a); }, ErrorCode::kUnsupported, {"trtllm-gen"});
}

// Each case: an edit that breaks one argument, and the argument the error must name.
struct BadXqa {
  const char* what;
  std::function<void(XqaArgs&)> edit;
  std::string arg;
  std::vector<std::string> more;
  int q_seq_len = 1;
};

TEST(PlanXqa, EachBadInputNamesTheArgument) {
  const std::vector<BadXqa> cases = {
      {"q rank 3", [](XqaArgs& a) { a.q = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {kBatch, kHeads, kHd}); },
       "q", {"rank 4"}},
      {"q fp32", [](XqaArgs& a) { a.q.dtype = DType::kFloat32; }, "q", {"fp32"}},
      {"q null", [](XqaArgs& a) { a.q.data = nullptr; }, "q", {"null"}},
      {"k_cache fp16 vs q bf16", [](XqaArgs& a) { a.k_cache.dtype = DType::kFloat16; }, "k_cache", {"fp16"}},
      {"v_cache dtype differs", [](XqaArgs& a) { a.v_cache.dtype = DType::kFloat8E4M3; }, "v_cache", {"fp8_e4m3"}},
      {"page_size 24", [](XqaArgs& a) { a.page_size = 24; }, "page_size", {"24"}},
      {"k_cache page dim vs page_size", [](XqaArgs& a) { a.page_size = 64; }, "k_cache", {"page_size"}},
      {"null k_cache", [](XqaArgs& a) { a.k_cache.data = nullptr; }, "k_cache", {"null"}},
      {"null v_cache", [](XqaArgs& a) { a.v_cache.data = nullptr; }, "v_cache", {"null"}},
      {"num_kv_heads 3", [](XqaArgs& a) { a.num_kv_heads = 3; }, "num_kv_heads", {"3"}},
      {"num_kv_heads 0", [](XqaArgs& a) { a.num_kv_heads = 0; }, "num_kv_heads", {">= 1"}},
      {"batch 0", [](XqaArgs& a) { a.q.shape[0] = 0; }, "q", {"sizes >= 1"}},
      {"kv_layout enum 4", [](XqaArgs& a) { a.kv_layout = static_cast<KvLayout>(4); }, "kv_layout", {"NHD or HND"}},
      {"backend enum 9", [](XqaArgs& a) { a.backend = static_cast<Backend>(9); }, "backend", {"9"}},
      {"pages_per_seq past int", [](XqaArgs& a) {
         a.page_table = TensorView::contiguous(fake(0x300000), DType::kInt32, {kBatch, (int64_t(1) << 32) + 4});
       }, "page_table", {"pages_per_seq * page_size <="}},
      {"q_seq_len past the limit", [](XqaArgs& a) { a.q_seq_len = 1 << 30; }, "q_seq_len", {"65536"}},
      {"rcp_out_scale NaN", [](XqaArgs& a) {
         a.k_cache.dtype = a.v_cache.dtype = a.output.dtype = DType::kFloat8E4M3;
         a.rcp_out_scale = NAN;
       }, "rcp_out_scale", {"finite"}},
      {"q rank 9", [](XqaArgs& a) { a.q.rank = 9; }, "q", {"rank 0 to 6", "rank 9"}},
      {"workspace with a negative size", [](XqaArgs& a) {
         a.workspace_buffer = TensorView::contiguous(fake(0x800000), DType::kUInt8, {-1});
       }, "workspace_buffer", {"sizes >= 1"}},
      {"page_table misaligned", [](XqaArgs& a) { a.page_table.data = fake(0x300002); }, "page_table", {"aligned"}},
      {"seq_lens misaligned", [](XqaArgs& a) { a.seq_lens.data = fake(0x300101); }, "seq_lens", {"aligned"}},
      {"sinks of rank 0", [](XqaArgs& a) {
         a.sinks.data = fake(0x820000);
         a.sinks.dtype = DType::kFloat32;
       }, "sinks", {"[num_kv_heads, head_group_ratio]"}},
      {"group 128", [](XqaArgs& a) {
         a.q = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {kBatch, 1, kKvHeads * 128, kHd});
       }, "num_kv_heads", {"64", "128"}},
      {"head_dim 64 in k_cache", [](XqaArgs& a) {
         a.k_cache = TensorView::contiguous(fake(0x100000), DType::kBFloat16, {kPages, kPage, kKvHeads, 64});
       }, "k_cache", {"head_dim"}},
      {"head_dim 72 in q", [](XqaArgs& a) {
         a.q = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {kBatch, 1, kHeads, 72});
       }, "q", {"head_dim 72"}},
      {"beam_width 2", [](XqaArgs& a) {
         a.q = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {kBatch, 2, kHeads, kHd});
       }, "q", {"beam_width"}},
      {"seq_lens batch 3", [](XqaArgs& a) { a.seq_lens = TensorView::contiguous(fake(0x300100), DType::kUInt32, {3, 1}); },
       "seq_lens", {"batch"}},
      {"seq_lens beam 2", [](XqaArgs& a) { a.seq_lens = TensorView::contiguous(fake(0x300100), DType::kUInt32, {kBatch, 2}); },
       "seq_lens"},
      {"seq_lens fp32", [](XqaArgs& a) { a.seq_lens.dtype = DType::kFloat32; }, "seq_lens", {"fp32"}},
      {"page_table int64", [](XqaArgs& a) { a.page_table.dtype = DType::kInt64; }, "page_table", {"int32"}},
      {"page_table batch 1", [](XqaArgs& a) {
         a.page_table = TensorView::contiguous(fake(0x300000), DType::kInt32, {1, kPagesPerSeq});
       }, "page_table", {"batch"}},
      {"output head_dim 64", [](XqaArgs& a) {
         a.output = TensorView::contiguous(fake(0x400000), DType::kBFloat16, {kBatch, 1, kHeads, 64});
       }, "output", {"as q"}},
      {"output rank 3", [](XqaArgs& a) {
         a.output = TensorView::contiguous(fake(0x400000), DType::kBFloat16, {kBatch, kHeads, kHd});
       }, "output"},
      {"output null", [](XqaArgs& a) { a.output.data = nullptr; }, "output", {"null"}},
      {"output fp8 with bf16 KV", [](XqaArgs& a) { a.output.dtype = DType::kFloat8E4M3; }, "output", {"fp8_e4m3"}},
      {"output fp16 with bf16 q", [](XqaArgs& a) { a.output.dtype = DType::kFloat16; }, "output", {"fp16"}},
      {"sinks numel 6", [](XqaArgs& a) { a.sinks = TensorView::contiguous(fake(0x600000), DType::kFloat32, {2, 3}); },
       "sinks", {"[2, 4]"}},
      {"sinks bf16", [](XqaArgs& a) { a.sinks = TensorView::contiguous(fake(0x600000), DType::kBFloat16, {kHeads}); },
       "sinks", {"fp32"}},
      {"sliding_win_size -1", [](XqaArgs& a) { a.sliding_win_size = -1; }, "sliding_win_size", {"-1"}},
      {"rcp_out_scale 0", [](XqaArgs& a) {
         a.k_cache.dtype = a.v_cache.dtype = a.output.dtype = DType::kFloat8E4M3;
         a.rcp_out_scale = 0.f;
       }, "rcp_out_scale"},
      {"kv_scale 0 with fp8 KV", [](XqaArgs& a) {
         a.k_cache.dtype = a.v_cache.dtype = DType::kFloat8E4M3;
         a.kv_scale = 0.f;
       }, "kv_scale"},
      {"sm_count 0", [](XqaArgs& a) { a.sm_count = 0; }, "sm_count"},
      {"q_seq_len 0", [](XqaArgs& a) { a.q_seq_len = 0; }, "q_seq_len"},
      {"q inner stride 2", [](XqaArgs& a) { a.q.stride[3] = 2; }, "q", {"stride"}},
      {"k_cache inner stride 2", [](XqaArgs& a) { a.k_cache.stride[3] = 2; }, "k_cache", {"stride"}},
      {"q misaligned", [](XqaArgs& a) { a.q.data = fake(0x10008); }, "q", {"aligned"}},
      {"k_cache misaligned", [](XqaArgs& a) { a.k_cache.data = fake(0x100002); }, "k_cache", {"aligned"}},
      {"v_cache misaligned", [](XqaArgs& a) { a.v_cache.data = fake(0x200004); }, "v_cache", {"aligned"}},
      {"output misaligned", [](XqaArgs& a) { a.output.data = fake(0x400008); }, "output", {"aligned"}},
      {"q head stride misaligned", [](XqaArgs& a) { a.q.stride[2] = 132; a.q.stride[1] = a.q.stride[0] = 132 * kHeads; },
       "q", {"multiples of 16 bytes"}},
      {"semaphores fp32", [](XqaArgs& a) { a.semaphores = TensorView::contiguous(fake(0x800000), DType::kFloat32, {64}); },
       "semaphores"},
      {"workspace misaligned", [](XqaArgs& a) {
         a.workspace_buffer = TensorView::contiguous(fake(0x900001), DType::kUInt8, {1024});
       }, "workspace_buffer", {"aligned"}},
      // Speculative decoding (q_seq_len 3).
      {"mask missing", [](XqaArgs& a) { a.mask = TensorView{}; }, "mask", {"null"}, 3},
      {"mask last dim 4", [](XqaArgs& a) {
         a.mask = TensorView::contiguous(fake(0x500000), DType::kUInt16, {kBatch, 3, 4});
       }, "mask", {"dim 2"}, 3},
      {"mask uint32", [](XqaArgs& a) { a.mask.dtype = DType::kUInt32; }, "mask", {"uint16"}, 3},
      {"mask batch 1", [](XqaArgs& a) {
         a.mask = TensorView::contiguous(fake(0x500000), DType::kUInt16, {1, 3, 2});
       }, "mask", {"batch"}, 3},
      {"q rank 4 with q_seq_len 3", [](XqaArgs& a) {
         a.q = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {kBatch, 1, kHeads, kHd});
       }, "q", {"rank 5"}, 3},
      {"q seq dim 2 vs q_seq_len 3", [](XqaArgs& a) {
         a.q = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {kBatch, 1, 2, kHeads, kHd});
       }, "q", {"q_seq_len"}, 3},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    XqaArgs a = valid_xqa(KvLayout::kNHD, c.q_seq_len);
    ASSERT_NO_THROW(plan(a));
    c.edit(a);
    expect_invalid([&] { plan(a); }, c.arg, c.more);
  }
}

TEST(PlanXqa, HndDimsAreCheckedInHndOrder) {
  XqaArgs a = valid_xqa(KvLayout::kHND);
  a.kv_layout = KvLayout::kNHD;  // the caches are HND-shaped: page_size lands in dim 2
  expect_invalid([&] { plan(a); }, "k_cache", {"page_size"});
}

// --- single_decode_with_kv_cache

TEST(PlanSingleDecode, ValidNhdSucceeds) {
  const SingleDecodePlan p = valid_single().plan();
  EXPECT_EQ(p.spec.family, spec::OpFamily::kDecode);
  EXPECT_EQ(p.spec.backend, spec::Backend::kXqa);
  EXPECT_EQ(p.spec.q_dtype, DType::kFloat16);
  EXPECT_EQ(p.spec.kv_dtype, DType::kFloat16);
  EXPECT_EQ(p.spec.out_dtype, DType::kFloat16);
  EXPECT_EQ(p.spec.group_size, kSdHeads / kSdKvHeads);
  EXPECT_EQ(p.spec.page_size, 0);
  EXPECT_EQ(p.spec.mask, spec::MaskMode::kNone);
  EXPECT_EQ(p.spec.pos_encoding, spec::PosEncoding::kNone);
  EXPECT_EQ(p.spec.features, 0u);
  EXPECT_EQ(p.spec.name(), "decode.fp16.hd128.g4.contig.nhd.sm90a");
  EXPECT_EQ(p.params.k_stride_tok, kSdKvHeads * kHd);
  EXPECT_EQ(p.params.k_stride_head, kHd);
  EXPECT_EQ(p.params.q_stride_h, kHd);
  EXPECT_EQ(p.params.kv_len, kSdLen);
  EXPECT_EQ(p.params.num_kv_heads, kSdKvHeads);
  EXPECT_EQ(p.params.window_left, -1);
  EXPECT_EQ(p.params.lse, nullptr);
  EXPECT_FLOAT_EQ(p.params.sm_scale, 1.0f / std::sqrt(128.0f));
  EXPECT_EQ(p.shape.max_seq_len, kSdLen);
  EXPECT_EQ(p.shape.batch, 1);
}

TEST(PlanSingleDecode, ValidHndWithEveryOption) {
  SingleDecodeCall c = valid_single(KvLayout::kHND);
  c.k.dtype = c.v.dtype = DType::kFloat8E5M2;
  c.with_lse = true;
  c.o.pos_encoding_mode = PosEncodingMode::kRopeLlama;
  c.o.logits_soft_cap = 30.f;
  c.o.window_left = 50;
  c.o.sm_scale = 0.25f;
  c.o.rope_theta = 5e5f;
  const SingleDecodePlan p = c.plan();
  EXPECT_EQ(p.spec.layout, spec::KvLayout::kHND);
  EXPECT_EQ(p.spec.kv_dtype, DType::kFloat8E5M2);
  EXPECT_EQ(p.spec.pos_encoding, spec::PosEncoding::kRopeLlama);
  EXPECT_EQ(p.spec.features, feature::kSoftCap | feature::kSlidingWindow | feature::kReturnLse);
  EXPECT_EQ(p.params.k_stride_tok, kHd);
  EXPECT_EQ(p.params.k_stride_head, kSdLen * kHd);
  EXPECT_EQ(p.params.v_stride_head, kSdLen * kHd);
  EXPECT_EQ(p.params.kv_len, kSdLen);
  EXPECT_EQ(p.params.window_left, 50);
  EXPECT_EQ(p.params.soft_cap, 30.f);
  EXPECT_EQ(p.params.sm_scale, 0.25f);
  EXPECT_FLOAT_EQ(p.params.rope_rcp_theta, 1.0f / 5e5f);
  EXPECT_EQ(p.params.lse, fake(0x30000));
  c.o.pos_encoding_mode = PosEncodingMode::kAlibi;
  EXPECT_EQ(c.plan().spec.pos_encoding, spec::PosEncoding::kAlibi);
  const spec::KernelSpec tensor_cores = c.plan().spec;
  c.o.use_tensor_cores = false;  // FlashInfer's hint: the same kernel here
  EXPECT_EQ(c.plan().spec, tensor_cores);
}

struct BadSingle {
  const char* what;
  std::function<void(SingleDecodeCall&)> edit;
  std::string arg;
  std::vector<std::string> more;
};

TEST(PlanSingleDecode, EachBadInputNamesTheArgument) {
  const DType f16 = DType::kFloat16;
  const std::vector<BadSingle> cases = {
      {"q rank 3", [&](SingleDecodeCall& c) { c.q = TensorView::contiguous(fake(0x10000), f16, {1, kSdHeads, kHd}); },
       "q", {"rank 2"}},
      {"q fp32", [](SingleDecodeCall& c) { c.q.dtype = DType::kFloat32; }, "q", {"fp32"}},
      {"heads 30 vs 8 kv heads", [&](SingleDecodeCall& c) {
         c.q = TensorView::contiguous(fake(0x10000), f16, {30, kHd});
         c.out = TensorView::contiguous(fake(0x20000), f16, {30, kHd});
       }, "q", {"num_kv_heads", "30"}},
      {"k/v kv_len differ", [&](SingleDecodeCall& c) {
         c.v = TensorView::contiguous(fake(0x200000), f16, {kSdLen + 1, kSdKvHeads, kHd});
       }, "v", {"as k"}},
      {"k/v heads differ", [&](SingleDecodeCall& c) {
         c.v = TensorView::contiguous(fake(0x200000), f16, {kSdLen, 4, kHd});
       }, "v", {"as k"}},
      {"v dtype differs", [](SingleDecodeCall& c) { c.v.dtype = DType::kFloat8E4M3; }, "v", {"dtype"}},
      {"k bf16 vs q fp16", [](SingleDecodeCall& c) { c.k.dtype = c.v.dtype = DType::kBFloat16; }, "k", {"bf16"}},
      {"k head_dim 64", [&](SingleDecodeCall& c) {
         c.k = TensorView::contiguous(fake(0x100000), f16, {kSdLen, kSdKvHeads, 64});
         c.v = c.k;
       }, "k", {"head_dim"}},
      {"k null", [](SingleDecodeCall& c) { c.k.data = nullptr; }, "k", {"null"}},
      {"kv_len 0", [&](SingleDecodeCall& c) {
         c.k = TensorView::contiguous(fake(0x100000), f16, {0, kSdKvHeads, kHd});
         c.v = TensorView::contiguous(fake(0x200000), f16, {0, kSdKvHeads, kHd});
       }, "k", {"kv_len"}},
      {"out bf16", [](SingleDecodeCall& c) { c.out.dtype = DType::kBFloat16; }, "out", {"bf16"}},
      {"out heads 16", [&](SingleDecodeCall& c) { c.out = TensorView::contiguous(fake(0x20000), f16, {16, kHd}); },
       "out", {"num_qo_heads"}},
      {"lse bf16", [](SingleDecodeCall& c) { c.with_lse = true; c.lse.dtype = DType::kBFloat16; }, "lse", {"fp32"}},
      {"lse heads 16", [](SingleDecodeCall& c) {
         c.with_lse = true;
         c.lse = TensorView::contiguous(fake(0x30000), DType::kFloat32, {16});
       }, "lse", {"num_qo_heads"}},
      {"window_left -2", [](SingleDecodeCall& c) { c.o.window_left = -2; }, "window_left", {"-2"}},
      {"soft cap NaN", [](SingleDecodeCall& c) { c.o.logits_soft_cap = NAN; }, "logits_soft_cap"},
      {"group 300 (past the kernels' 256)", [&](SingleDecodeCall& c) {
         c.q = TensorView::contiguous(fake(0x10000), f16, {300, kHd});
         c.out = TensorView::contiguous(fake(0x20000), f16, {300, kHd});
         c.k = TensorView::contiguous(fake(0x100000), f16, {kSdLen, 1, kHd});
         c.v = TensorView::contiguous(fake(0x200000), f16, {kSdLen, 1, kHd});
       }, "q", {"<= 256", "300 / 1"}},
      {"lse misaligned", [](SingleDecodeCall& c) {
         c.with_lse = true;
         c.lse.data = fake(0x30002);
       }, "lse", {"aligned"}},
      {"sm_scale 0", [](SingleDecodeCall& c) { c.o.sm_scale = 0.f; }, "sm_scale"},
      {"rope_theta 0", [](SingleDecodeCall& c) { c.o.rope_theta = 0.f; }, "rope_theta"},
      {"rope_scale inf", [](SingleDecodeCall& c) { c.o.rope_scale = INFINITY; }, "rope_scale"},
      // Positive and finite, but the kernel's reciprocal would be inf (found by tests/fuzz).
      {"rope_theta denormal", [](SingleDecodeCall& c) { c.o.rope_theta = 1e-45f; }, "rope_theta", {"reciprocal"}},
      {"rope_scale 1e-39", [](SingleDecodeCall& c) { c.o.rope_scale = 1e-39f; }, "rope_scale", {"reciprocal"}},
      {"sm_scale NaN", [](SingleDecodeCall& c) { c.o.sm_scale = NAN; }, "sm_scale"},
      {"soft cap inf", [](SingleDecodeCall& c) { c.o.logits_soft_cap = INFINITY; }, "logits_soft_cap"},
      {"layout enum 7", [](SingleDecodeCall& c) { c.o.kv_layout = static_cast<KvLayout>(7); }, "kv_layout"},
      {"pos encoding enum 9",
       [](SingleDecodeCall& c) { c.o.pos_encoding_mode = static_cast<PosEncodingMode>(9); }, "pos_encoding_mode"},
      {"backend enum 5", [](SingleDecodeCall& c) { c.o.backend = static_cast<Backend>(5); }, "backend"},
      {"q inner stride 2", [](SingleDecodeCall& c) { c.q.stride[1] = 2; }, "q", {"stride"}},
      {"k misaligned", [](SingleDecodeCall& c) { c.k.data = fake(0x100008); }, "k", {"aligned"}},
      {"out misaligned", [](SingleDecodeCall& c) { c.out.data = fake(0x20002); }, "out", {"aligned"}},
  };
  for (const auto& bc : cases) {
    SCOPED_TRACE(bc.what);
    SingleDecodeCall c = valid_single();
    ASSERT_NO_THROW(c.plan());
    bc.edit(c);
    expect_invalid([&] { c.plan(); }, bc.arg, bc.more);
  }
}

// As FlashInfer: a soft cap applies only when > 0, so zero and negative caps are both off.
TEST(PlanSingleDecode, SoftCapAtOrBelowZeroIsOff) {
  for (float cap : {0.f, -1.f, -30.f}) {
    SingleDecodeCall c = valid_single();
    c.o.logits_soft_cap = cap;
    const auto plan = c.plan();
    EXPECT_FALSE(plan.spec.has(spec::feature::kSoftCap)) << cap;
    EXPECT_EQ(plan.params.soft_cap, 0.f) << cap;
  }
  SingleDecodeCall c = valid_single();
  c.o.logits_soft_cap = 30.f;
  EXPECT_TRUE(c.plan().spec.has(spec::feature::kSoftCap));
  EXPECT_EQ(c.plan().params.soft_cap, 30.f);
}

TEST(PlanSingleDecode, ExplicitTrtllmGenIsUnsupported) {
  SingleDecodeCall c = valid_single();
  c.o.backend = Backend::kTrtllmGen;
  expect_error([&] { c.plan(); }, ErrorCode::kUnsupported, {"trtllm-gen"});
  c.o.backend = Backend::kXqa;
  EXPECT_EQ(c.plan().spec.backend, spec::Backend::kXqa);
}

TEST(PlanXqa, RaggedArgumentsAreChecked) {
  XqaArgs a = valid_xqa(KvLayout::kNHD, 4);
  a.q = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {6, kHeads, kHd});
  a.output = TensorView::contiguous(fake(0x400000), DType::kBFloat16, {6, kHeads, kHd});
  a.q_cu_seq_lens = TensorView::contiguous(fake(0x700000), DType::kFloat32, {kBatch + 1});
  expect_invalid([&] { plan(a); }, "q_cu_seq_lens", {"fp32"});
  a.q_cu_seq_lens = TensorView::contiguous(fake(0x700000), DType::kUInt32, {1});
  expect_invalid([&] { plan(a); }, "q_cu_seq_lens", {"at least 2"});
  a.q_cu_seq_lens = TensorView::contiguous(fake(0x700000), DType::kUInt32, {2 * (kBatch + 1)});
  a.q_cu_seq_lens.shape[0] = kBatch + 1;
  a.q_cu_seq_lens.stride[0] = 2;  // every other entry of a wider tensor: the kernel reads b and b + 1
  expect_invalid([&] { plan(a); }, "q_cu_seq_lens", {"contiguous"});
  a.q_cu_seq_lens = TensorView::contiguous(fake(0x700002), DType::kUInt32, {kBatch + 1});
  expect_invalid([&] { plan(a); }, "q_cu_seq_lens", {"aligned"});
  a.q_cu_seq_lens = TensorView::contiguous(fake(0x700000), DType::kUInt32, {kBatch + 1});
  a.q = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {1, 6, kHeads, kHd});
  expect_invalid([&] { plan(a); }, "q", {"rank 3"});
}

// --- The public entry points: on a machine without a GPU they fail cleanly.

TEST(PublicOps, NoDeviceIsAnErrorNotACrash) {
  std::string reason;
  if (driver::is_available(&reason)) GTEST_SKIP() << "a GPU is present; the GPU tests cover the launch";
  const XqaArgs a = valid_xqa();
  expect_error([&] { xqa(a); }, ErrorCode::kNoDevice, {});
  const SingleDecodeCall c = valid_single();
  expect_error([&] { single_decode_with_kv_cache(c.q, c.k, c.v, c.out); }, ErrorCode::kNoDevice, {});
  // Even bad arguments report the missing device first: nothing can run anyway.
  XqaArgs bad = a;
  bad.page_size = 24;
  EXPECT_THROW(xqa(bad), Error);
}

}  // namespace
}  // namespace attnjit::ops
