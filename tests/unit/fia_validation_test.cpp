// Tests of src/ops/fia/fia_plan.cpp: the seed's constraints (each refusal names its
// argument), the length rules, sparse modes -> kernel switches, layouts -> strides,
// and the work list.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "common/expect_error.hpp"
#include "common/op_args.hpp"

namespace attnjit::ops {
namespace {

using testing::expect_error;
using testing::fake;
using testing::kHd;
using testing::valid_fia;

struct Broken {
  const char* what;
  std::function<void(FiaArgs&)> edit;
  const char* argument;
  ErrorCode code = ErrorCode::kInvalidArgument;
  int q_seq = 64;
};

TensorView bf16(uintptr_t at, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake(at), DType::kBFloat16, shape);
}
TensorView u8(std::initializer_list<int64_t> shape) { return TensorView::contiguous(fake(0x700000), DType::kUInt8, shape); }

void paged(FiaArgs& a, int bs, bool rank4, int q_seq) {
  a.input_layout = rank4 ? "BNSD" : "BSND";
  if (rank4) {
    a.query = bf16(0x10000, {2, 8, q_seq, kHd});
    a.attention_out = bf16(0x400000, {2, 8, q_seq, kHd});
    a.key = bf16(0x100000, {8, 2, bs, kHd});
    a.value = bf16(0x200000, {8, 2, bs, kHd});
  } else {
    a.key = bf16(0x100000, {8, bs, 2 * kHd});
    a.value = bf16(0x200000, {8, bs, 2 * kHd});
  }
  a.block_table = TensorView::contiguous(fake(0x300000), DType::kInt32, {2, 4});
  a.block_size = bs;
  a.actual_seq_lengths_kv = {int64_t(bs) * 3, 5};
}

const std::vector<Broken>& broken_cases() {
  static const std::vector<Broken> k = {
      {"unknown layout", [](FiaArgs& a) { a.input_layout = "SBH"; }, "input_layout"},
      {"NZ format", [](FiaArgs& a) { a.input_layout = "NZ"; }, "input_layout", ErrorCode::kUnsupported},
      // An int8 query is the full int8 path (fia_int8_test.cpp): it needs the three scales first.
      {"int8 query without dequant_scale1", [](FiaArgs& a) { a.query.dtype = DType::kInt8; }, "dequant_scale1"},
      {"fp32 query", [](FiaArgs& a) { a.query.dtype = DType::kFloat32; }, "query"},
      {"key dtype differs", [](FiaArgs& a) { a.key.dtype = DType::kFloat16; }, "key"},
      // int8 K/V plan with antiquant scales (fia_antiquant_test.cpp); without them, or with a value of another dtype, not.
      {"int8 key, bf16 value", [](FiaArgs& a) { a.key.dtype = DType::kInt8; }, "value"},
      {"int8 key/value without antiquant scales", [](FiaArgs& a) { a.key.dtype = a.value.dtype = DType::kInt8; },
       "antiquant_scale"},
      {"num_heads 0", [](FiaArgs& a) { a.num_heads = 0; }, "num_heads"},
      {"num_heads > 256", [](FiaArgs& a) { a.num_heads = 257; }, "num_heads"},
      {"num_heads not the N axis", [](FiaArgs& a) { a.num_heads = 4; }, "query"},
      {"kv heads not a divisor", [](FiaArgs& a) { a.num_key_value_heads = 3; }, "num_key_value_heads"},
      {"kv heads negative", [](FiaArgs& a) { a.num_key_value_heads = -1; }, "num_key_value_heads"},
      {"kv heads not key's N", [](FiaArgs& a) { a.num_key_value_heads = 4; }, "key"},
      {"group above 64",
       [](FiaArgs& a) {
         a.num_heads = 128;
         a.num_key_value_heads = 1;
         a.query = bf16(0x10000, {2, 64, 128, 64});
         a.attention_out = bf16(0x400000, {2, 64, 128, 64});
         a.key = bf16(0x100000, {2, 256, 1, 64});
         a.value = bf16(0x200000, {2, 256, 1, 64});
         a.softmax_lse_flag = false;
         a.softmax_lse = {};
       },
       "num_key_value_heads"},
      {"head dim not a multiple of 16", [](FiaArgs& a) { a.query.shape[3] = 120; }, "query"},
      {"value head dim past 256 not a multiple of 32",
       [](FiaArgs& a) {
         a.query = bf16(0x10000, {2, 64, 8, 272});
         a.key = bf16(0x100000, {2, 256, 2, 272});
         a.value = bf16(0x200000, {2, 256, 2, 272});
         a.attention_out = bf16(0x400000, {2, 64, 8, 272});
       },
       "value"},
      {"head dim above 512", [](FiaArgs& a) { a.query.shape[3] = 528; }, "query"},
      {"key batch differs", [](FiaArgs& a) { a.key.shape[0] = a.value.shape[0] = 3; }, "key"},
      {"value shape differs", [](FiaArgs& a) { a.value.shape[1] = 255; }, "value"},
      {"key rank", [](FiaArgs& a) { a.key = bf16(0x100000, {2, 256, 256}); }, "key"},
      {"query misaligned", [](FiaArgs& a) { a.query.data = fake(0x10008); }, "query"},
      {"output shape", [](FiaArgs& a) { a.attention_out.shape[1] = 63; }, "attention_out"},
      {"output dtype", [](FiaArgs& a) { a.attention_out.dtype = DType::kFloat16; }, "attention_out"},
      {"no output", [](FiaArgs& a) { a.attention_out = {}; }, "attention_out"},
      {"lse missing with the flag", [](FiaArgs& a) { a.softmax_lse = {}; }, "softmax_lse"},
      {"lse shape", [](FiaArgs& a) { a.softmax_lse.shape[2] = 1; }, "softmax_lse"},
      {"lse dtype", [](FiaArgs& a) { a.softmax_lse.dtype = DType::kFloat16; }, "softmax_lse"},
      {"lse placeholder too large", [](FiaArgs& a) { a.softmax_lse_flag = false; }, "softmax_lse"},
      {"q list of 3 for batch 2 is fine; of length 0 < n < B refused",
       [](FiaArgs& a) {
         a.query = bf16(0x10000, {3, 64, 8, kHd});
         a.attention_out = bf16(0x400000, {3, 64, 8, kHd});
         a.key = bf16(0x100000, {3, 256, 2, kHd});
         a.value = bf16(0x200000, {3, 256, 2, kHd});
         a.softmax_lse = TensorView::contiguous(fake(0x500000), DType::kFloat32, {3, 8, 64, 1});
         a.actual_seq_lengths = {5, 6};
       },
       "actual_seq_lengths"},
      {"q length above S", [](FiaArgs& a) { a.actual_seq_lengths = {65}; }, "actual_seq_lengths"},
      {"q length negative", [](FiaArgs& a) { a.actual_seq_lengths = {3, -1}; }, "actual_seq_lengths"},
      {"kv length above S", [](FiaArgs& a) { a.actual_seq_lengths_kv = {3, 257}; }, "actual_seq_lengths_kv"},
      {"sparse_mode 5 (prefix)", [](FiaArgs& a) { a.sparse_mode = 5; }, "sparse_mode"},
      {"sparse_mode -1", [](FiaArgs& a) { a.sparse_mode = -1; }, "sparse_mode"},
      {"sparse_mode 1 without mask", [](FiaArgs& a) { a.sparse_mode = 1; }, "atten_mask"},
      {"sparse_mode 3 without mask", [](FiaArgs& a) { a.sparse_mode = 3; }, "atten_mask"},
      {"sparse_mode 2 with a full mask", [](FiaArgs& a) { a.sparse_mode = 2, a.atten_mask = u8({64, 256}); }, "atten_mask"},
      {"sparse_mode 4 mask with batch", [](FiaArgs& a) { a.sparse_mode = 4, a.atten_mask = u8({2, 2048, 2048}); },
       "atten_mask"},
      {"mask too narrow", [](FiaArgs& a) { a.atten_mask = u8({64, 255}); }, "atten_mask"},
      {"mask too short", [](FiaArgs& a) { a.atten_mask = u8({63, 256}); }, "atten_mask"},
      {"mask batch 3", [](FiaArgs& a) { a.atten_mask = u8({3, 64, 256}); }, "atten_mask"},
      {"mask dim 1 not 1", [](FiaArgs& a) { a.atten_mask = u8({2, 2, 64, 256}); }, "atten_mask"},
      {"mask fp16", [](FiaArgs& a) { a.atten_mask = bf16(0x700000, {64, 256}); }, "atten_mask"},
      {"decode mask (KV_S) without batch", [](FiaArgs& a) { a.atten_mask = u8({1, 256}); }, "atten_mask", ErrorCode::kInvalidArgument, 1},
      {"pse dtype", [](FiaArgs& a) { a.pse_shift = TensorView::contiguous(fake(0x600000), DType::kFloat16, {1, 8, 64, 256}); },
       "pse_shift"},
      {"pse heads", [](FiaArgs& a) { a.pse_shift = bf16(0x600000, {1, 4, 64, 256}); }, "pse_shift"},
      {"pse batch 3", [](FiaArgs& a) { a.pse_shift = bf16(0x600000, {3, 8, 64, 256}); }, "pse_shift"},
      {"pse short", [](FiaArgs& a) { a.pse_shift = bf16(0x600000, {2, 8, 64, 200}); }, "pse_shift"},
      {"pse rank", [](FiaArgs& a) { a.pse_shift = bf16(0x600000, {8, 64, 256}); }, "pse_shift"},
      {"BNSD_BSND at Q_S 1",
       [](FiaArgs& a) {
         a.input_layout = "BNSD_BSND";
         a.query = bf16(0x10000, {2, 8, 1, kHd});
         a.key = bf16(0x100000, {2, 2, 256, kHd});
         a.value = bf16(0x200000, {2, 2, 256, kHd});
       },
       "input_layout", ErrorCode::kInvalidArgument, 1},
      {"inner_precise 4", [](FiaArgs& a) { a.inner_precise = 4; }, "inner_precise"},
      {"inner_precise 2 at Q_S 1", [](FiaArgs& a) { a.inner_precise = 2; }, "inner_precise", ErrorCode::kInvalidArgument, 1},
      {"antiquant_mode 2", [](FiaArgs& a) { a.antiquant_mode = 2; }, "antiquant_mode"},
      {"key_antiquant_mode 6", [](FiaArgs& a) { a.key_antiquant_mode = 6; }, "key_antiquant_mode"},
      {"kv antiquant modes differ", [](FiaArgs& a) { a.key_antiquant_mode = 1, a.value_antiquant_mode = 2; },
       "value_antiquant_mode"},
      {"dequant_scale1 with a bf16 query",
       [](FiaArgs& a) { a.dequant_scale1 = TensorView::contiguous(fake(0x800000), DType::kFloat32, {1}); },
       "dequant_scale1"},
      {"quant_scale2 with a bf16 attention_out",
       [](FiaArgs& a) { a.quant_scale2 = TensorView::contiguous(fake(0x800000), DType::kFloat32, {1}); },
       "attention_out"},
      {"antiquant_scale with bf16 key/value", [](FiaArgs& a) { a.antiquant_scale = bf16(0x800000, {2}); },
       "antiquant_scale"},
      {"key_antiquant_scale with bf16 key/value", [](FiaArgs& a) { a.key_antiquant_scale = bf16(0x800000, {2, 256}); },
       "key_antiquant_scale"},
      {"left padding int32", [](FiaArgs& a) { a.query_padding_size = TensorView::contiguous(fake(0x800000), DType::kInt32, {1}); },
       "query_padding_size"},
      {"kv left padding int32", [](FiaArgs& a) { a.kv_padding_size = TensorView::contiguous(fake(0x800000), DType::kInt32, {1}); },
       "kv_padding_size"},
      {"key_shared_prefix alone", [](FiaArgs& a) { a.key_shared_prefix = bf16(0x800000, {1, 16, 2, kHd}); },
       "value_shared_prefix"},
      {"query_rope alone", [](FiaArgs& a) { a.query_rope = bf16(0x800000, {2, 64, 8, 64}); }, "key_rope"},
      // MLA inside FIA requires paged KV (its other rules: fia_mla_test.cpp).
      {"MLA rope without a block table",
       [](FiaArgs& a) { a.query_rope = bf16(0x800000, {2, 64, 8, 64}), a.key_rope = bf16(0x900000, {2, 256, 1, 64}); },
       "block_table"},
      {"scale NaN", [](FiaArgs& a) { a.scale = std::nan(""); }, "scale"},
      // Paged KV.
      {"paged block_size 64 at Q_S > 1", [](FiaArgs& a) { paged(a, 64, false, 64); }, "block_size"},
      {"paged block_size 24 at Q_S 1", [](FiaArgs& a) { paged(a, 24, false, 1); }, "block_size",
       ErrorCode::kInvalidArgument, 1},
      {"paged block_size 640", [](FiaArgs& a) { paged(a, 640, false, 1); }, "block_size", ErrorCode::kInvalidArgument, 1},
      {"paged without kv lengths", [](FiaArgs& a) { paged(a, 128, false, 64), a.actual_seq_lengths_kv.clear(); },
       "actual_seq_lengths_kv"},
      {"paged kv length past the table", [](FiaArgs& a) { paged(a, 128, false, 64), a.actual_seq_lengths_kv = {513, 1}; },
       "actual_seq_lengths_kv"},
      {"paged table batch", [](FiaArgs& a) {
         paged(a, 128, false, 64);
         a.block_table = TensorView::contiguous(fake(0x300000), DType::kInt32, {3, 4});
       }, "block_table"},
      {"paged table int64", [](FiaArgs& a) { paged(a, 128, false, 64), a.block_table.dtype = DType::kInt64; }, "block_table"},
      {"paged rank-4 cache with BSND queries",
       [](FiaArgs& a) {
         paged(a, 128, false, 64);
         a.key = bf16(0x100000, {8, 2, 128, kHd});
         a.value = bf16(0x200000, {8, 2, 128, kHd});
       },
       "key"},
      {"paged too few blocks", [](FiaArgs& a) {
         paged(a, 128, false, 64);
         a.key.shape[0] = a.value.shape[0] = 3;
         a.actual_seq_lengths_kv = {512, 512};
       }, "key"},
      // TND.
      {"TND without lengths", [](FiaArgs& a) {
         a.input_layout = "TND";
         a.num_key_value_heads = 8;
         a.query = bf16(0x10000, {100, 8, 192});
       }, "actual_seq_lengths"},
  };
  return k;
}

FiaArgs tnd_args() {
  FiaArgs a;
  a.input_layout = "TND";
  a.num_heads = 8;
  a.query = bf16(0x10000, {100, 8, 192});
  a.key = bf16(0x100000, {150, 8, 192});
  a.value = bf16(0x200000, {150, 8, 128});
  a.attention_out = bf16(0x400000, {100, 8, 128});
  a.actual_seq_lengths = {40, 100};
  a.actual_seq_lengths_kv = {50, 150};
  return a;
}

void expect_refused(const FiaArgs& a, const char* argument, ErrorCode code, const std::string& what) {
  try {
    plan_fia(a, testing::kPlanArch);
    ADD_FAILURE() << what << ": accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << what << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(std::string("argument '") + argument + "'"), std::string::npos)
        << what << ": " << e.what();
  }
}

TEST(FiaValidation, ValidCallsPlan) {
  EXPECT_NO_THROW(plan_fia(valid_fia(), testing::kPlanArch));
  EXPECT_NO_THROW(plan_fia(valid_fia(1), testing::kPlanArch));
  EXPECT_NO_THROW(plan_fia(tnd_args(), testing::kPlanArch));
  FiaArgs p = valid_fia();
  paged(p, 128, false, 64);
  EXPECT_NO_THROW(plan_fia(p, testing::kPlanArch));
  FiaArgs p4 = valid_fia();
  paged(p4, 128, true, 64);
  p4.softmax_lse_flag = false;
  p4.softmax_lse = {};
  EXPECT_NO_THROW(plan_fia(p4, testing::kPlanArch));
  FiaArgs d = valid_fia(1);
  paged(d, 16, false, 1);
  d.query = bf16(0x10000, {2, 1, 8, kHd});
  d.attention_out = bf16(0x400000, {2, 1, 8, kHd});
  EXPECT_NO_THROW(plan_fia(d, testing::kPlanArch));
}

TEST(FiaValidation, EachSeedConstraintNamesItsArgument) {
  for (const Broken& b : broken_cases()) {
    FiaArgs a = valid_fia(b.q_seq);
    b.edit(a);
    expect_refused(a, b.argument, b.code, b.what);
  }
}

TEST(FiaValidation, TndConstraints) {
  EXPECT_NO_THROW(plan_fia(tnd_args(), testing::kPlanArch));
  struct T { const char* what; std::function<void(FiaArgs&)> edit; const char* arg; ErrorCode code = ErrorCode::kInvalidArgument; };
  const std::vector<T> cases = {
      {"fp16", [](FiaArgs& a) {
         for (TensorView* t : {&a.query, &a.key, &a.value, &a.attention_out}) t->dtype = DType::kFloat16;
       }, "query"},
      {"N 12", [](FiaArgs& a) { a.num_heads = 12, a.query = bf16(0x10000, {100, 12, 192}); }, "num_heads"},
      {"GQA", [](FiaArgs& a) { a.num_key_value_heads = 4; }, "num_key_value_heads"},
      {"D 128", [](FiaArgs& a) { a.query = bf16(0x10000, {100, 8, 128}); }, "query"},
      {"V 64", [](FiaArgs& a) { a.value = bf16(0x200000, {150, 8, 64}); }, "value"},
      {"decreasing", [](FiaArgs& a) { a.actual_seq_lengths = {60, 40}; }, "actual_seq_lengths"},
      {"past T", [](FiaArgs& a) { a.actual_seq_lengths = {40, 101}; }, "actual_seq_lengths"},
      // T is the sum of the lengths: rows past the last would be outputs nothing writes.
      {"short of T", [](FiaArgs& a) { a.actual_seq_lengths = {40, 99}; }, "actual_seq_lengths"},
      {"kv count", [](FiaArgs& a) { a.actual_seq_lengths_kv = {150}; }, "actual_seq_lengths_kv"},
      {"mask with sparse 0", [](FiaArgs& a) { a.atten_mask = u8({2048, 2048}); }, "sparse_mode"},
      {"sparse 3 without mask", [](FiaArgs& a) { a.sparse_mode = 3; }, "sparse_mode"},
      {"sparse 3, q longer than kv", [](FiaArgs& a) {
         a.sparse_mode = 3, a.atten_mask = u8({2048, 2048}), a.actual_seq_lengths_kv = {30, 150};
       }, "actual_seq_lengths"},
      {"pse", [](FiaArgs& a) { a.pse_shift = bf16(0x600000, {1, 8, 100, 150}); }, "pse_shift"},
      {"paged", [](FiaArgs& a) { a.block_table = TensorView::contiguous(fake(0x300000), DType::kInt32, {2, 4}); }, "block_table"},
      {"T above 65536", [](FiaArgs& a) { a.query = bf16(0x10000, {65537, 8, 192}); }, "query"},
  };
  for (const auto& c : cases) {
    FiaArgs a = tnd_args();
    c.edit(a);
    expect_refused(a, c.arg, c.code, c.what);
  }
}

// The seed's empty inputs: an empty query returns at once; an empty key/value (S2 = 0)
// fills attention_out with zeros (LSE +inf). Other zero sizes are the plan's refusals.
TEST(FiaValidation, EmptyInputsAsTheSeedSays) {
  EXPECT_EQ(fia_empty_inputs(valid_fia()), FiaEmpty::kNone);
  FiaArgs q0 = valid_fia();
  q0.query.shape[0] = 0;  // B = 0: nothing else is looked at
  q0.key.rank = 9;
  EXPECT_EQ(fia_empty_inputs(q0), FiaEmpty::kNothing);
  FiaArgs s2 = valid_fia();  // BSND: S2 is dim 1
  s2.key.shape[1] = s2.value.shape[1] = 0;
  EXPECT_EQ(fia_empty_inputs(s2), FiaEmpty::kZeroOutput);
  FiaArgs bnsd = valid_fia();
  bnsd.input_layout = "BNSD";
  bnsd.key = bf16(0x100000, {testing::kFiaBatch, testing::kFiaKvHeads, 0, kHd});
  bnsd.value = bf16(0x200000, {testing::kFiaBatch, testing::kFiaKvHeads, 0, kHd});
  EXPECT_EQ(fia_empty_inputs(bnsd), FiaEmpty::kZeroOutput);
  FiaArgs t = tnd_args();
  t.key = bf16(0x100000, {0, 8, 192});
  t.value = bf16(0x200000, {0, 8, 128});
  EXPECT_EQ(fia_empty_inputs(t), FiaEmpty::kZeroOutput);
  // A zero elsewhere, or S2 = 0 in only one of them, or with a block table: the plan decides.
  FiaArgs n0 = valid_fia();
  n0.key.shape[2] = 0;
  EXPECT_EQ(fia_empty_inputs(n0), FiaEmpty::kNone);
  expect_refused(n0, "key", ErrorCode::kInvalidArgument, "key N 0");
  FiaArgs one = valid_fia();
  one.key.shape[1] = 0;
  EXPECT_EQ(fia_empty_inputs(one), FiaEmpty::kNone);
  FiaArgs paged = s2;
  paged.block_table = TensorView::contiguous(fake(0x300000), DType::kInt32, {2, 4});
  EXPECT_EQ(fia_empty_inputs(paged), FiaEmpty::kNone);
  FiaArgs prefix = s2;  // [prefix | own]: the prefix's keys remain
  prefix.key_shared_prefix = bf16(0x900000, {1, 48, testing::kFiaKvHeads, kHd});
  prefix.value_shared_prefix = bf16(0xa00000, {1, 48, testing::kFiaKvHeads, kHd});
  EXPECT_EQ(fia_empty_inputs(prefix), FiaEmpty::kNone);
  FiaArgs other_value = s2;  // a value that is not the key's shape (but its head dim)
  other_value.value = bf16(0x200000, {testing::kFiaBatch, 5, testing::kFiaKvHeads, kHd});
  EXPECT_EQ(fia_empty_inputs(other_value), FiaEmpty::kNone);
  other_value.value = bf16(0x200000, {testing::kFiaBatch, 0, testing::kFiaKvHeads, 64});
  EXPECT_EQ(fia_empty_inputs(other_value), FiaEmpty::kZeroOutput);
  FiaArgs other_batch = s2;
  other_batch.key.shape[0] = other_batch.value.shape[0] = 3;
  EXPECT_EQ(fia_empty_inputs(other_batch), FiaEmpty::kNone);
  FiaArgs typo = s2;
  typo.input_layout = "BSDN";
  EXPECT_EQ(fia_empty_inputs(typo), FiaEmpty::kNone);
  expect_refused(typo, "input_layout", ErrorCode::kInvalidArgument, "layout typo");
  // The zero fill writes attention_out (and the LSE) whole: contiguous, an fp32 LSE.
  FiaArgs strided = s2;
  strided.attention_out.stride[0] *= 2;
  expect_error([&] { fia_empty_inputs(strided); }, ErrorCode::kInvalidArgument, {"attention_out", "contiguous"});
  FiaArgs lse16 = s2;
  lse16.softmax_lse.dtype = DType::kFloat16;
  expect_error([&] { fia_empty_inputs(lse16); }, ErrorCode::kInvalidArgument, {"softmax_lse"});
  FiaArgs no_lse = s2;  // the flag off: no LSE, or the seed's [1] placeholder (written 0)
  no_lse.softmax_lse_flag = false;
  no_lse.softmax_lse = {};
  EXPECT_EQ(fia_empty_inputs(no_lse), FiaEmpty::kZeroOutput);
  no_lse.softmax_lse = TensorView::contiguous(fake(0x500000), DType::kFloat32, {1});
  EXPECT_EQ(fia_empty_inputs(no_lse), FiaEmpty::kZeroOutput);
  no_lse.softmax_lse_flag = true;
  no_lse.softmax_lse = {};
  expect_error([&] { fia_empty_inputs(no_lse); }, ErrorCode::kInvalidArgument, {"softmax_lse"});
  // Prewarming such a call builds nothing.
  EXPECT_TRUE(fia_prewarm_specs(s2, testing::kPlanArch).empty());
}

// auto on sm_90a takes the wgmma kernel where its head dims allow (128-row work
// tiles), the portable kernel elsewhere (64-row tiles); trtllm-gen asked for where
// it cannot serve is an error that says backend.
TEST(FiaValidation, BackendChoiceAndItsWorkTiles) {
  const spec::Arch sm90a = spec::Arch::parse("sm_90a"), sm80 = spec::Arch::parse("sm_80");
  FiaArgs a = valid_fia(200);
  FiaPlan p = plan_fia(a, sm90a);
  EXPECT_EQ(p.spec.backend, spec::Backend::kTrtllmGen) << p.spec.name();
  EXPECT_EQ(p.rows_per_cta, 128);
  PrefillParams work{};
  // 200 tokens x group 4 = 800 rows: 7 tiles of 128 per batch.
  EXPECT_EQ(fia_fill_work(p, a, 0, testing::kFiaBatch, work), 7 * testing::kFiaBatch);
  a.backend = Backend::kXqa;
  p = plan_fia(a, sm90a);
  EXPECT_EQ(p.spec.backend, spec::Backend::kXqa);
  EXPECT_EQ(p.rows_per_cta, 64);
  EXPECT_EQ(fia_fill_work(p, a, 0, testing::kFiaBatch, work), 13 * testing::kFiaBatch);
  a.backend = Backend::kAuto;
  EXPECT_EQ(plan_fia(a, sm80).spec.backend, spec::Backend::kXqa);
  EXPECT_EQ(plan_fia(tnd_args(), sm90a).spec.backend, spec::Backend::kTrtllmGen);  // 192 / 128
  // Head dim 80: not whole 128-byte swizzle blocks, so the portable kernel.
  FiaArgs h = valid_fia();
  h.query = bf16(0x10000, {testing::kFiaBatch, 64, testing::kFiaHeads, 80});
  h.key = bf16(0x100000, {testing::kFiaBatch, testing::kFiaKvSeq, testing::kFiaKvHeads, 80});
  h.value = bf16(0x200000, {testing::kFiaBatch, testing::kFiaKvSeq, testing::kFiaKvHeads, 80});
  h.attention_out = bf16(0x400000, {testing::kFiaBatch, 64, testing::kFiaHeads, 80});
  EXPECT_EQ(plan_fia(h, sm90a).spec.backend, spec::Backend::kXqa);
  for (const auto& [args, arch] : {std::pair<FiaArgs, spec::Arch>{h, sm90a}, {a, sm80}}) {
    FiaArgs t = args;
    t.backend = Backend::kTrtllmGen;
    try {
      plan_fia(t, arch);
      ADD_FAILURE() << "trtllm-gen accepted on " << arch.str();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find("backend trtllm-gen"), std::string::npos) << e.what();
    }
  }
}

// Head dims past 256 (the seed allows 512): the portable kernel, its value dims split
// over two CTAs along z; the wgmma kernel cannot hold them.
TEST(FiaValidation, HeadDimsPast256SplitTheValueDims) {
  for (int D : {384, 512}) {
    FiaArgs a = valid_fia();
    a.query = bf16(0x10000, {testing::kFiaBatch, 64, testing::kFiaHeads, D});
    a.key = bf16(0x100000, {testing::kFiaBatch, testing::kFiaKvSeq, testing::kFiaKvHeads, D});
    a.value = bf16(0x200000, {testing::kFiaBatch, testing::kFiaKvSeq, testing::kFiaKvHeads, D});
    a.attention_out = bf16(0x400000, {testing::kFiaBatch, 64, testing::kFiaHeads, D});
    FiaPlan p = plan_fia(a, testing::kPlanArch);
    EXPECT_EQ(p.spec.backend, spec::Backend::kXqa) << p.spec.name();
    EXPECT_EQ(p.dv_chunks, 2);
    EXPECT_EQ(p.spec.head_dim_qk, D);
    a.backend = Backend::kTrtllmGen;
    EXPECT_THROW(plan_fia(a, testing::kPlanArch), Error);
  }
}

TEST(FiaValidation, LengthListsFollowTheSeedsRules) {
  FiaArgs a = valid_fia();
  a.actual_seq_lengths = {7};  // one value: every batch
  a.actual_seq_lengths_kv = {100, 3, 999999};  // >= B: the first B (the third is never read)
  FiaPlan p = plan_fia(a, testing::kPlanArch);
  EXPECT_EQ(fia_lengths(p, a, 0).q_len, 7);
  EXPECT_EQ(fia_lengths(p, a, 1).q_len, 7);
  EXPECT_EQ(fia_lengths(p, a, 0).kv_len, 100);
  EXPECT_EQ(fia_lengths(p, a, 1).kv_len, 3);
  // Q_S = 1 ignores the Q list, even an invalid one.
  FiaArgs d = valid_fia(1);
  d.actual_seq_lengths = {5, 9, -3};
  FiaPlan pd = plan_fia(d, testing::kPlanArch);
  EXPECT_EQ(fia_lengths(pd, d, 1).q_len, 1);
  // None: the tensors' S.
  FiaArgs n = valid_fia();
  FiaPlan pn = plan_fia(n, testing::kPlanArch);
  EXPECT_EQ(fia_lengths(pn, n, 1).q_len, 64);
  EXPECT_EQ(fia_lengths(pn, n, 1).kv_len, testing::kFiaKvSeq);
  // TND: cumulative.
  FiaArgs t = tnd_args();
  FiaPlan pt = plan_fia(t, testing::kPlanArch);
  const FiaLengths l1 = fia_lengths(pt, t, 1);
  EXPECT_EQ(l1.q_len, 60);
  EXPECT_EQ(l1.q_tok0, 40);
  EXPECT_EQ(l1.kv_len, 100);
  EXPECT_EQ(l1.kv_tok0, 50);
}

TEST(FiaValidation, SparseModesSetTheKernelsBand) {
  auto plan_mode = [](int mode, bool mask, int64_t pre, int64_t next) {
    FiaArgs a = valid_fia();
    a.sparse_mode = mode;
    a.pre_tokens = pre;
    a.next_tokens = next;
    if (mask) a.atten_mask = mode >= 2 ? u8({1, 1, 2048, 2048}) : u8({2, 1, 64, 256});
    return plan_fia(a, testing::kPlanArch);
  };
  FiaPlan p = plan_mode(0, false, 5, 5);  // no mask: pre/next ignored
  EXPECT_EQ(p.spec.mask, spec::MaskMode::kNone);
  p = plan_mode(0, true, 5, 7);
  EXPECT_EQ(p.spec.mask, spec::MaskMode::kCustom);
  EXPECT_EQ(p.params.band_lo, -5);
  EXPECT_EQ(p.params.band_hi, 7);
  EXPECT_EQ(p.params.band_shift, 0);
  EXPECT_EQ(p.params.mask_stride_b, 64 * 256);
  p = plan_mode(1, true, 5, 7);  // allMask ignores pre/next
  EXPECT_EQ(p.params.band_lo, -kPrefillBandInf);
  EXPECT_EQ(p.params.band_hi, kPrefillBandInf);
  p = plan_mode(2, true, 5, 7);
  EXPECT_EQ(p.spec.mask, spec::MaskMode::kCausal);
  EXPECT_EQ(p.params.mask, nullptr);  // the compressed mask is not read
  EXPECT_EQ(p.params.band_hi, 0);
  EXPECT_EQ(p.params.band_shift, 0);
  p = plan_mode(3, true, 5, 7);
  EXPECT_EQ(p.params.band_hi, 0);
  EXPECT_EQ(p.params.band_shift, 1);
  p = plan_mode(4, true, 2147483647, -3);
  EXPECT_EQ(p.params.band_lo, -kPrefillBandInf);
  EXPECT_EQ(p.params.band_hi, -3);
  EXPECT_EQ(p.params.band_shift, 1);
  // Q_S = 1 ignores sparse_mode (even 9) and takes a (B, KV_S) mask.
  FiaArgs d = valid_fia(1);
  d.sparse_mode = 9;
  d.atten_mask = u8({2, 1, 1, 256});
  p = plan_fia(d, testing::kPlanArch);
  EXPECT_EQ(p.spec.mask, spec::MaskMode::kCustom);
  EXPECT_EQ(p.params.mask_stride_s, 0);
}

TEST(FiaValidation, LayoutsAreStrides) {
  FiaArgs a = valid_fia();
  a.input_layout = "BNSD_BSND";
  a.query = bf16(0x10000, {2, 8, 64, kHd});
  a.key = bf16(0x100000, {2, 2, 256, kHd});
  a.value = bf16(0x200000, {2, 2, 256, kHd});
  FiaPlan p = plan_fia(a, testing::kPlanArch);  // output stays (B, S, N, D)
  EXPECT_EQ(p.params.q_stride_s, kHd);
  EXPECT_EQ(p.params.q_stride_h, 64 * kHd);
  EXPECT_EQ(p.params.k_stride_s, kHd);
  EXPECT_EQ(p.params.o_stride_s, 8 * kHd);
  EXPECT_EQ(p.params.o_stride_h, kHd);
  EXPECT_EQ(p.params.group, 4);
  EXPECT_EQ(p.spec.name(), "prefill.bf16.hd128.g1.contig.nhd.lse.trtllmgen.sm90a");
  FiaArgs h = valid_fia();
  h.input_layout = "BSH";
  h.query = bf16(0x10000, {2, 64, 8 * kHd});
  h.key = bf16(0x100000, {2, 256, 2 * kHd});
  h.value = bf16(0x200000, {2, 256, 2 * kHd});
  h.attention_out = bf16(0x400000, {2, 64, 8 * kHd});
  p = plan_fia(h, testing::kPlanArch);
  EXPECT_EQ(p.params.q_stride_h, kHd);
  EXPECT_EQ(p.params.k_stride_s, 2 * kHd);
  // BSH's D is H / num_heads: with num_heads left at its default of 1 the error names num_heads.
  h.num_heads = 1;
  expect_refused(h, "num_heads", ErrorCode::kInvalidArgument, "BSH, num_heads 1");
}

TEST(FiaValidation, WorkListCoversRowsAndClearsPadding) {
  FiaArgs a = valid_fia();  // group 4, Q_S 64: 256 rows per (batch, KV head)
  a.actual_seq_lengths = {64, 10};
  a.backend = Backend::kXqa;  // the portable kernel: 64-row tiles
  FiaPlan p = plan_fia(a, testing::kPlanArch);
  PrefillParams& w = p.params;
  int tiles = fia_fill_work(p, a, 0, 2, w);
  EXPECT_EQ(w.batches[0].compute_tiles, 4);  // 256 rows
  EXPECT_EQ(w.batches[1].tile_begin, 4);
  EXPECT_EQ(w.batches[1].compute_tiles, 1);  // 40 rows
  EXPECT_EQ(tiles, 4 + 1 + 4);               // 216 padded rows: 4 zero tiles
  EXPECT_EQ(w.num_batches, 2);
  a.backend = Backend::kTrtllmGen;  // the wgmma kernel: 128-row tiles
  p = plan_fia(a, testing::kPlanArch);
  tiles = fia_fill_work(p, a, 0, 2, p.params);
  EXPECT_EQ(p.params.batches[0].compute_tiles, 2);
  EXPECT_EQ(p.params.batches[1].tile_begin, 2);
  EXPECT_EQ(p.params.batches[1].compute_tiles, 1);
  EXPECT_EQ(tiles, 2 + 1 + 2);
  // Decode: the group's heads fill the rows of one tile.
  FiaArgs d = valid_fia(1);
  d.backend = Backend::kXqa;
  FiaPlan pd = plan_fia(d, testing::kPlanArch);
  EXPECT_EQ(fia_fill_work(pd, d, 0, 2, pd.params), 2);
}

}  // namespace
}  // namespace attnjit::ops
