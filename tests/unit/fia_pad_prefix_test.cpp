// Tests of src/ops/fia/fia_plan_extras.cpp: left padding, the shared prefix and
// int8 output. Each of the seed's constraints on them is an Error naming its
// argument; valid calls set the spec's bits and the Params' device pointers (the
// pads and the prefix length are read by the kernel, never on the host), and route
// Q_S = 1 calls to the prefill kernel.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "common/fia_reference.hpp"
#include "common/op_args.hpp"
#include "ops/fia/fia_decode.hpp"

namespace attnjit::ops {
namespace {

using testing::fake;
using testing::kHd;
using testing::valid_fia;

TensorView bf16(uintptr_t at, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake(at), DType::kBFloat16, shape);
}
TensorView i64(uintptr_t at, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake(at), DType::kInt64, shape);
}
TensorView f32(uintptr_t at, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake(at), DType::kFloat32, shape);
}
TensorView of_shape(uintptr_t at, DType dt, const std::vector<int64_t>& shape) {
  TensorView t = TensorView::contiguous(fake(at), dt, {1});
  t.rank = int(shape.size());
  int64_t n = 1;
  for (int d = t.rank - 1; d >= 0; --d) t.shape[d] = shape[size_t(d)], t.stride[d] = n, n *= shape[size_t(d)];
  return t;
}

// valid_fia (BSND, B 2, N 8 over 2, D 128, KV_S 256) with left padding on Q and KV.
FiaArgs padded(int q_seq = 64) {
  FiaArgs a = valid_fia(q_seq);
  a.actual_seq_lengths = {40, 7};
  a.actual_seq_lengths_kv = {200, 9};
  a.query_padding_size = i64(0x800000, {1});
  a.kv_padding_size = i64(0x800100, {2});
  return a;
}
// valid_fia with a 48-token shared prefix.
FiaArgs prefixed(int q_seq = 64) {
  FiaArgs a = valid_fia(q_seq);
  a.key_shared_prefix = bf16(0x900000, {1, 48, 2, kHd});
  a.value_shared_prefix = bf16(0xa00000, {1, 48, 2, kHd});
  a.actual_shared_prefix_len = i64(0x800200, {1});
  return a;
}
// valid_fia with int8 output, per tensor.
FiaArgs int8_out(int q_seq = 64) {
  FiaArgs a = valid_fia(q_seq);
  a.attention_out.dtype = DType::kInt8;
  a.quant_scale2 = f32(0x800300, {1});
  return a;
}

struct Broken {
  const char* what;
  std::function<FiaArgs()> make;
  const char* argument;
};

const std::vector<Broken>& broken_cases() {
  static const std::vector<Broken> k = {
      // Left padding.
      {"query pad int32", [] { FiaArgs a = padded(); a.query_padding_size.dtype = DType::kInt32; return a; },
       "query_padding_size"},
      {"kv pad of 3 values", [] { FiaArgs a = padded(); a.kv_padding_size = i64(0x800100, {3}); return a; },
       "kv_padding_size"},
      {"query pad with block_table",
       [] {
         FiaArgs a = valid_fia(1);
         a.key = bf16(0x100000, {8, 128, 2 * kHd});
         a.value = bf16(0x200000, {8, 128, 2 * kHd});
         a.block_table = TensorView::contiguous(fake(0x300000), DType::kInt32, {2, 4});
         a.block_size = 128;
         a.actual_seq_lengths_kv = {300, 5};
         a.kv_padding_size = i64(0x800100, {1});
         return a;
       },
       "kv_padding_size"},
      {"pad with TND",
       [] {
         FiaArgs a = valid_fia();
         a.input_layout = "TND";
         a.num_key_value_heads = 8;
         a.query = bf16(0x10000, {100, 8, 192});
         a.key = bf16(0x100000, {150, 8, 192});
         a.value = bf16(0x200000, {150, 8, 128});
         a.attention_out = bf16(0x400000, {100, 8, 128});
         a.softmax_lse_flag = false;
         a.softmax_lse = {};
         a.actual_seq_lengths = {40, 100};
         a.actual_seq_lengths_kv = {50, 150};
         a.query_padding_size = i64(0x800000, {1});
         return a;
       },
       "query_padding_size"},
      {"pad with a shared prefix",
       [] { FiaArgs a = prefixed(); a.actual_seq_lengths_kv = {100}; a.kv_padding_size = i64(0x800100, {1}); return a; },
       "kv_padding_size"},
      // Shared prefix.
      {"value prefix alone", [] { FiaArgs a = prefixed(); a.key_shared_prefix = {}; return a; }, "key_shared_prefix"},
      {"prefix length without a prefix",
       [] { FiaArgs a = valid_fia(); a.actual_shared_prefix_len = i64(0x800200, {1}); return a; },
       "actual_shared_prefix_len"},
      {"prefix batch 2", [] { FiaArgs a = prefixed(); a.key_shared_prefix = bf16(0x900000, {2, 48, 2, kHd}); return a; },
       "key_shared_prefix"},
      {"prefix heads", [] { FiaArgs a = prefixed(); a.key_shared_prefix = bf16(0x900000, {1, 48, 4, kHd}); return a; },
       "key_shared_prefix"},
      {"prefix dtype",
       [] { FiaArgs a = prefixed(); a.value_shared_prefix.dtype = DType::kFloat16; return a; }, "value_shared_prefix"},
      {"prefix S differ", [] { FiaArgs a = prefixed(); a.value_shared_prefix = bf16(0xa00000, {1, 40, 2, kHd}); return a; },
       "value_shared_prefix"},
      {"prefix rank", [] { FiaArgs a = prefixed(); a.key_shared_prefix = bf16(0x900000, {48, 2, kHd}); return a; },
       "key_shared_prefix"},
      {"prefix length shape [2]", [] { FiaArgs a = prefixed(); a.actual_shared_prefix_len = i64(0x800200, {2}); return a; },
       "actual_shared_prefix_len"},
      {"prefix length fp32", [] { FiaArgs a = prefixed(); a.actual_shared_prefix_len.dtype = DType::kFloat32; return a; },
       "actual_shared_prefix_len"},
      {"prefix with block_table",
       [] {
         FiaArgs a = prefixed(1);
         a.key = bf16(0x100000, {8, 128, 2 * kHd});
         a.value = bf16(0x200000, {8, 128, 2 * kHd});
         a.block_table = TensorView::contiguous(fake(0x300000), DType::kInt32, {2, 4});
         a.block_size = 128;
         a.actual_seq_lengths_kv = {300, 5};
         a.input_layout = "BSND";
         return a;
       },
       "key_shared_prefix"},
      {"mask narrower than prefix + key",
       [] {
         FiaArgs a = prefixed();
         a.atten_mask = TensorView::contiguous(fake(0x700000), DType::kUInt8, {64, 256});
         return a;
       },
       "atten_mask"},
      {"pse narrower than prefix + key",
       [] { FiaArgs a = prefixed(); a.pse_shift = bf16(0x700000, {1, 8, 64, 300}); return a; }, "pse_shift"},
      // int8 output.
      {"int8 out without quant_scale2", [] { FiaArgs a = int8_out(); a.quant_scale2 = {}; return a; }, "attention_out"},
      {"quant_offset2 alone",
       [] { FiaArgs a = valid_fia(); a.quant_offset2 = f32(0x800400, {1}); return a; }, "quant_offset2"},
      {"quant_scale2 of 7 values", [] { FiaArgs a = int8_out(); a.quant_scale2 = f32(0x800300, {7}); return a; },
       "quant_scale2"},
      {"quant_scale2 fp16", [] { FiaArgs a = int8_out(); a.quant_scale2.dtype = DType::kFloat16; return a; },
       "quant_scale2"},
      {"quant_scale2 bf16 with a fp16 query",
       [] {
         FiaArgs a = int8_out();
         for (TensorView* t : {&a.query, &a.key, &a.value}) t->dtype = DType::kFloat16;
         a.quant_scale2.dtype = DType::kBFloat16;
         return a;
       },
       "quant_scale2"},
      {"quant_offset2 shape differs",
       [] { FiaArgs a = int8_out(); a.quant_offset2 = f32(0x800400, {8 * kHd}); return a; }, "quant_offset2"},
      {"quant_offset2 dtype differs",
       [] { FiaArgs a = int8_out(); a.quant_offset2 = TensorView::contiguous(fake(0x800400), DType::kBFloat16, {1}); return a; },
       "quant_offset2"},
      {"quant_scale1 with a bf16 query", [] { FiaArgs a = int8_out(); a.quant_scale1 = f32(0x800500, {1}); return a; },
       "quant_scale1"},
      {"dequant_scale2 with a bf16 query", [] { FiaArgs a = int8_out(); a.dequant_scale2 = f32(0x800500, {1}); return a; },
       "dequant_scale2"},
      {"per-channel int8 with left padding",
       [] {
         FiaArgs a = padded();
         a.attention_out.dtype = DType::kInt8;
         a.quant_scale2 = f32(0x800300, {8, kHd});
         return a;
       },
       "quant_scale2"},
      {"int8 with band and negative next",
       [] {
         FiaArgs a = int8_out();
         a.sparse_mode = 4;
         a.next_tokens = -2;
         a.atten_mask = TensorView::contiguous(fake(0x700000), DType::kUInt8, {2048, 2048});
         return a;
       },
       "next_tokens"},
      {"int8 with offset, rightDownCausal and q longer than kv",
       [] {
         FiaArgs a = int8_out();
         a.quant_offset2 = f32(0x800400, {1});
         a.sparse_mode = 3;
         a.actual_seq_lengths_kv = {100, 30};
         a.atten_mask = TensorView::contiguous(fake(0x700000), DType::kUInt8, {2048, 2048});
         return a;
       },
       "quant_offset2"},
      {"int8 with offset, a mask and negative next_tokens",
       [] {
         FiaArgs a = int8_out();
         a.quant_offset2 = f32(0x800400, {1});
         a.next_tokens = -1;
         a.atten_mask = TensorView::contiguous(fake(0x700000), DType::kUInt8, {64, 256});
         return a;
       },
       "quant_offset2"},
      {"int8 with TND",
       [] {
         FiaArgs a = valid_fia();
         a.input_layout = "TND";
         a.num_key_value_heads = 8;
         a.query = bf16(0x10000, {100, 8, 192});
         a.key = bf16(0x100000, {150, 8, 192});
         a.value = bf16(0x200000, {150, 8, 128});
         a.attention_out = TensorView::contiguous(fake(0x400000), DType::kInt8, {100, 8, 128});
         a.softmax_lse_flag = false;
         a.softmax_lse = {};
         a.actual_seq_lengths = {40, 100};
         a.actual_seq_lengths_kv = {50, 150};
         a.quant_scale2 = f32(0x800300, {1});
         return a;
       },
       "quant_scale2"},
  };
  return k;
}

TEST(FiaPadPrefix, EachConstraintNamesItsArgument) {
  for (const Broken& b : broken_cases()) {
    try {
      plan_fia(b.make(), testing::kPlanArch);
      ADD_FAILURE() << b.what << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << b.what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("argument '") + b.argument + "'"), std::string::npos)
          << b.what << ": " << e.what();
    }
  }
}

TEST(FiaPadPrefix, LeftPaddingPassesDevicePointers) {
  FiaArgs a = padded();
  FiaPlan p = plan_fia(a, testing::kPlanArch);
  EXPECT_TRUE(p.spec.has(spec::feature::kLeftPad));
  EXPECT_EQ(p.params.q_pad, a.query_padding_size.data);
  EXPECT_EQ(p.params.kv_pad, a.kv_padding_size.data);
  EXPECT_EQ(p.params.q_pad_stride, 0);  // one value for all batches
  EXPECT_EQ(p.params.kv_pad_stride, 1);  // one per batch
  EXPECT_EQ(p.params.kv_seq, testing::kFiaKvSeq);
  EXPECT_NE(p.spec.name().find(".leftpad."), std::string::npos) << p.spec.name();
  // The work list is the right-padded one: the kernel moves the windows.
  fia_fill_work(p, a, 0, 2, p.params);
  EXPECT_EQ(p.params.batches[1].q_len, 7);
  EXPECT_EQ(p.params.batches[1].q_tok0, 0);
  // Without its actual lengths a pad is the seed's right-padding case: ignored.
  FiaArgs r = padded();
  r.actual_seq_lengths.clear();
  p = plan_fia(r, testing::kPlanArch);
  EXPECT_EQ(p.params.q_pad, nullptr);
  EXPECT_NE(p.params.kv_pad, nullptr);
  r.actual_seq_lengths_kv.clear();
  p = plan_fia(r, testing::kPlanArch);
  EXPECT_FALSE(p.spec.has(spec::feature::kLeftPad));
  // Q_S = 1 ignores the query's pad; the KV pad goes to the prefill kernel.
  FiaArgs d = padded(1);
  d.softmax_lse_flag = false;
  d.softmax_lse = {};
  p = plan_fia(d, testing::kPlanArch);
  EXPECT_EQ(p.params.q_pad, nullptr);
  EXPECT_NE(p.params.kv_pad, nullptr);
  EXPECT_FALSE(plan_fia_decode(p, d, testing::kPlanArch).has_value());
  // ... whatever else the call holds: beside a shared prefix, or even a malformed one, it is not looked at.
  FiaArgs dp = prefixed(1);
  dp.query_padding_size = i64(0x800000, {1});
  p = plan_fia(dp, testing::kPlanArch);
  EXPECT_EQ(p.params.q_pad, nullptr);
  EXPECT_TRUE(p.spec.has(spec::feature::kSharedPrefix));
  dp.query_padding_size.dtype = DType::kFloat32;
  EXPECT_NO_THROW(plan_fia(dp, testing::kPlanArch));
  // Mode 0 with a mask ignores pre/next under left padding (the seed).
  FiaArgs m = padded();
  m.atten_mask = TensorView::contiguous(fake(0x700000), DType::kUInt8, {64, 256});
  m.pre_tokens = 3;
  m.next_tokens = 0;
  p = plan_fia(m, testing::kPlanArch);
  EXPECT_EQ(p.params.band_lo, -kPrefillBandInf);
  EXPECT_EQ(p.params.band_hi, kPrefillBandInf);
}

TEST(FiaPadPrefix, SharedPrefixPassesItsTensors) {
  FiaArgs a = prefixed();
  FiaPlan p = plan_fia(a, testing::kPlanArch);
  EXPECT_TRUE(p.spec.has(spec::feature::kSharedPrefix));
  EXPECT_EQ(p.params.kp, a.key_shared_prefix.data);
  EXPECT_EQ(p.params.vp, a.value_shared_prefix.data);
  EXPECT_EQ(p.params.prefix_len, a.actual_shared_prefix_len.data);
  EXPECT_EQ(p.params.prefix_seq, 48);
  EXPECT_EQ(p.params.kp_stride_s, 2 * kHd);
  EXPECT_EQ(p.params.kp_stride_h, kHd);
  // BNSD and BSH prefixes, without a length (the prefix's S).
  FiaArgs b = prefixed();
  b.input_layout = "BNSD";
  b.query = bf16(0x10000, {2, 8, 64, kHd});
  b.key = bf16(0x100000, {2, 2, 256, kHd});
  b.value = bf16(0x200000, {2, 2, 256, kHd});
  b.attention_out = bf16(0x400000, {2, 8, 64, kHd});
  b.key_shared_prefix = bf16(0x900000, {1, 2, 48, kHd});
  b.value_shared_prefix = bf16(0xa00000, {1, 2, 48, kHd});
  b.actual_shared_prefix_len = {};
  p = plan_fia(b, testing::kPlanArch);
  EXPECT_EQ(p.params.kp_stride_s, kHd);
  EXPECT_EQ(p.params.kp_stride_h, 48 * kHd);
  EXPECT_EQ(p.params.prefix_len, nullptr);
  FiaArgs h = prefixed();
  h.input_layout = "BSH";
  h.query = bf16(0x10000, {2, 64, 8 * kHd});
  h.key = bf16(0x100000, {2, 256, 2 * kHd});
  h.value = bf16(0x200000, {2, 256, 2 * kHd});
  h.attention_out = bf16(0x400000, {2, 64, 8 * kHd});
  h.key_shared_prefix = bf16(0x900000, {1, 48, 2 * kHd});
  h.value_shared_prefix = bf16(0xa00000, {1, 48, 2 * kHd});
  p = plan_fia(h, testing::kPlanArch);
  EXPECT_EQ(p.params.vp_stride_s, 2 * kHd);
  EXPECT_EQ(p.params.vp_stride_h, kHd);
  // Mask and pse cover the prefix's S and the key's.
  FiaArgs m = prefixed();
  m.atten_mask = TensorView::contiguous(fake(0x700000), DType::kUInt8, {64, 304});
  m.pse_shift = bf16(0x700000, {1, 8, 64, 304});
  EXPECT_NO_THROW(plan_fia(m, testing::kPlanArch));
  // Q_S = 1 with a prefix: the prefill kernel.
  FiaArgs d = prefixed(1);
  d.softmax_lse_flag = false;
  d.softmax_lse = {};
  p = plan_fia(d, testing::kPlanArch);
  EXPECT_EQ(p.spec.family, spec::OpFamily::kPrefill);
  EXPECT_FALSE(plan_fia_decode(p, d, testing::kPlanArch).has_value());
  FiaArgs plain = valid_fia(1);  // without one the decode kernel still serves it
  plain.softmax_lse_flag = false;
  plain.softmax_lse = {};
  EXPECT_TRUE(plan_fia_decode(plan_fia(plain, testing::kPlanArch), plain, testing::kPlanArch).has_value());
}

TEST(FiaPadPrefix, Int8OutputScales) {
  FiaArgs a = int8_out();
  FiaPlan p = plan_fia(a, testing::kPlanArch);
  EXPECT_EQ(p.spec.out_dtype, DType::kInt8);
  EXPECT_EQ(p.params.quant_scale, a.quant_scale2.data);
  EXPECT_EQ(p.params.quant_offset, nullptr);
  EXPECT_EQ(p.params.quant_stride_h, 0);
  EXPECT_EQ(p.params.quant_stride_d, 0);
  EXPECT_NE(p.spec.name().find(".oint8."), std::string::npos) << p.spec.name();
  // Per channel, each of the seed's shapes, bf16 scales with a bf16 query, with an offset.
  for (auto shape : {std::vector<int64_t>{8 * kHd}, {1, 1, 8 * kHd}, {8, kHd}, {1, 1, 8, kHd}, {1, 8, 1, kHd}}) {
    FiaArgs c = int8_out();
    c.quant_scale2 = of_shape(0x800300, DType::kBFloat16, shape);
    c.quant_offset2 = of_shape(0x800400, DType::kBFloat16, shape);
    p = plan_fia(c, testing::kPlanArch);
    EXPECT_EQ(p.params.quant_stride_h, kHd);
    EXPECT_EQ(p.params.quant_stride_d, 1);
    EXPECT_EQ(p.params.quant_bf16, 1);
    EXPECT_EQ(p.params.quant_offset, c.quant_offset2.data);
  }
  // Per tensor with left padding is fine; Q_S = 1 goes to the prefill kernel.
  FiaArgs l = padded();
  l.attention_out.dtype = DType::kInt8;
  l.quant_scale2 = f32(0x800300, {1});
  EXPECT_NO_THROW(plan_fia(l, testing::kPlanArch));
  FiaArgs d = int8_out(1);
  d.softmax_lse_flag = false;
  d.softmax_lse = {};
  p = plan_fia(d, testing::kPlanArch);
  EXPECT_FALSE(plan_fia_decode(p, d, testing::kPlanArch).has_value());
  // An offset with rows that all see a key: accepted.
  FiaArgs o = int8_out();
  o.quant_offset2 = f32(0x800400, {1});
  o.sparse_mode = 3;
  o.atten_mask = TensorView::contiguous(fake(0x700000), DType::kUInt8, {2048, 2048});
  EXPECT_NO_THROW(plan_fia(o, testing::kPlanArch));
}

// The float64 reference's rules for them (tests/common/fia_reference.hpp), which the
// GPU tests hold the kernels to.
TEST(FiaPadPrefix, ReferenceRules) {
  int start = -1;
  EXPECT_TRUE(testing::fia_left_pad_window(10, 2, 5, &start));
  EXPECT_EQ(start, 3);  // rows [3, 8)
  EXPECT_TRUE(testing::fia_left_pad_window(10, -4, 6, &start));
  EXPECT_EQ(start, 4);  // a negative pad counts as 0
  EXPECT_FALSE(testing::fia_left_pad_window(10, 6, 5, &start));
  EXPECT_EQ(start, 0);
  EXPECT_EQ(testing::fia_prefix_len(48, false, 0), 48);  // absent: the prefix's S
  EXPECT_EQ(testing::fia_prefix_len(48, true, 100), 48);
  EXPECT_EQ(testing::fia_prefix_len(48, true, -3), 0);
  EXPECT_EQ(testing::fia_prefix_len(48, true, 7), 7);
  EXPECT_EQ(testing::fia_int8_out(0.26, 10.0, 0.0), 3.0);
  EXPECT_EQ(testing::fia_int8_out(-0.26, 10.0, 1.0), -2.0);
  EXPECT_EQ(testing::fia_int8_out(100.0, 10.0, 0.0), 127.0);
  EXPECT_EQ(testing::fia_int8_out(-100.0, 10.0, 0.0), -128.0);
}

}  // namespace
}  // namespace attnjit::ops
