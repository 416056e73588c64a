// Tests of src/ops/fia/fia_decode.cpp: which FIA calls go to the decode family's
// kernel (and with which spec), contiguous and paged K/V, the Params'
// strides and lengths, and that prewarm returns the spec the call launches.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attnjit/fia.hpp"
#include "common/expect_error.hpp"
#include "common/op_args.hpp"
#include "common/temp_dir.hpp"
#include "ops/fia/fia_decode.hpp"
#include "ops/fia/fia_plan.hpp"

namespace attnjit::ops {
namespace {

using testing::fake;

const spec::Arch kHopper = spec::Arch::parse("sm_90a");

TensorView t(uintptr_t at, DType dt, std::vector<int64_t> shape) {
  TensorView v;
  v.data = fake(at);
  v.dtype = dt;
  v.rank = int(shape.size());
  int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.shape[d] = shape[size_t(d)];
    v.stride[d] = stride;
    stride *= shape[size_t(d)];
  }
  return v;
}

// Q_S = 1, no mask, no pse, no LSE: what the decode kernel serves.
FiaArgs decode_args(const std::string& layout, int B, int KV, int N = 32, int KN = 8, int D = 128,
                    DType dt = DType::kBFloat16) {
  FiaArgs a;
  a.input_layout = layout;
  a.num_heads = N;
  a.num_key_value_heads = KN;
  a.scale = 0.088;
  if (layout == "BSH") {
    a.query = t(0x10000, dt, {B, 1, N * D});
    a.key = t(0x1000000, dt, {B, KV, KN * D});
    a.value = t(0x80000000, dt, {B, KV, KN * D});
  } else if (layout == "BSND") {
    a.query = t(0x10000, dt, {B, 1, N, D});
    a.key = t(0x1000000, dt, {B, KV, KN, D});
    a.value = t(0x80000000, dt, {B, KV, KN, D});
  } else {
    a.query = t(0x10000, dt, {B, N, 1, D});
    a.key = t(0x1000000, dt, {B, KN, KV, D});
    a.value = t(0x80000000, dt, {B, KN, KV, D});
  }
  a.attention_out = a.query;
  a.attention_out.data = fake(0x400000);
  return a;
}

std::optional<FiaDecodePlan> route(const FiaArgs& a, const spec::Arch& arch = kHopper) {
  return plan_fia_decode(plan_fia(a, arch), a, arch);
}

TEST(FiaDecode, ContiguousLayoutsGoToTheDecodeKernel) {
  for (const char* layout : {"BSH", "BSND", "BNSD"}) {
    SCOPED_TRACE(layout);
    const FiaArgs a = decode_args(layout, 128, 4096);
    const auto d = route(a);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->spec.family, spec::OpFamily::kDecode);
    EXPECT_EQ(d->spec.group_size, 4);
    EXPECT_EQ(d->spec.page_size, 0);
    EXPECT_EQ(d->spec.head_dim_qk, 128);
    EXPECT_EQ(d->spec.features, 0u);
    EXPECT_EQ(d->kv, FiaDecodeKv::kContiguous);
    EXPECT_TRUE(d->ragged_lens.empty());
    const DecodeParams& p = d->params;
    EXPECT_EQ(p.batch, 128);
    EXPECT_EQ(p.num_kv_heads, 8);
    EXPECT_EQ(p.q_seq_len, 1);
    EXPECT_EQ(p.kv_len, 4096);
    EXPECT_FLOAT_EQ(p.sm_scale, 0.088f);
    EXPECT_EQ(p.q_scale, 1.0f);
    EXPECT_EQ(p.lse, nullptr);
    EXPECT_EQ(p.page_table, nullptr);
    EXPECT_EQ(p.q, a.query.data);
    EXPECT_EQ(p.out, a.attention_out.data);
    const bool bnsd = std::string(layout) == "BNSD";
    // Token t of batch b, head h: b * k_stride_page (the batch stride) + t * k_stride_tok.
    EXPECT_EQ(p.k_stride_tok, bnsd ? 128 : 8 * 128);
    EXPECT_EQ(p.k_stride_head, bnsd ? 4096 * 128 : 128);
    EXPECT_EQ(p.k_stride_page, 8 * 4096 * 128);
    EXPECT_EQ(p.v_stride_page, 8 * 4096 * 128);
    EXPECT_EQ(p.pages_per_seq, 0);
    EXPECT_EQ(p.q_stride_h, bnsd ? 128 : 128);
    EXPECT_EQ(p.q_stride_b, 32 * 128);
    EXPECT_EQ(d->shape.max_seq_len, 4096);
    EXPECT_EQ(d->shape.rows_per_cta, 16);
  }
}

TEST(FiaDecode, RaggedAndEmptyLengths) {
  FiaArgs a = decode_args("BSND", 4, 256);
  a.actual_seq_lengths_kv = {100, 0, 256, 17, 999};  // cut to the first B
  auto d = route(a);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->ragged_lens, (std::vector<unsigned>{100, 0, 256, 17}));
  EXPECT_EQ(d->shape.max_seq_len, 256);
  // One value for all, or equal values: no table.
  a.actual_seq_lengths_kv = {33};
  d = route(a);
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->ragged_lens.empty());
  EXPECT_EQ(d->params.kv_len, 33);
  a.actual_seq_lengths_kv = {0, 0, 0, 0};
  d = route(a);
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->ragged_lens.empty());
  EXPECT_EQ(d->params.kv_len, 0);
  EXPECT_EQ(d->shape.max_seq_len, 1);  // still one split to plan
  // Q_S = 1 ignores the Q list.
  a.actual_seq_lengths = {0};
  EXPECT_TRUE(route(a).has_value());
}

TEST(FiaDecode, PagedUsesTheBlockTable) {
  for (int bs : {16, 128, 512}) {
    SCOPED_TRACE(bs);
    FiaArgs a = decode_args("BSND", 3, 1);
    a.key = t(0x1000000, DType::kBFloat16, {12, bs, 8 * 128});
    a.value = t(0x80000000, DType::kBFloat16, {12, bs, 8 * 128});
    a.block_table = t(0x900000, DType::kInt32, {3, 4});
    a.block_size = bs;
    a.actual_seq_lengths_kv = {int64_t(bs), int64_t(4 * bs), 0};
    auto d = route(a);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->kv, FiaDecodeKv::kPaged);
    EXPECT_EQ(d->spec.page_size, bs);
    EXPECT_EQ(d->params.page_table, a.block_table.data);
    EXPECT_EQ(d->params.pages_per_seq, 4);
    EXPECT_EQ(d->params.k_stride_page, int64_t(bs) * 8 * 128);
    EXPECT_EQ(d->params.k_stride_tok, 8 * 128);
    EXPECT_EQ(d->params.k_stride_head, 128);
    EXPECT_EQ(d->ragged_lens, (std::vector<unsigned>{unsigned(bs), unsigned(4 * bs), 0}));
  }
  // (blocknum, KV_N, block_size, D) with BNSD queries.
  FiaArgs a = decode_args("BNSD", 2, 1);
  a.key = t(0x1000000, DType::kBFloat16, {8, 8, 128, 128});
  a.value = t(0x80000000, DType::kBFloat16, {8, 8, 128, 128});
  a.block_table = t(0x900000, DType::kInt32, {2, 4});
  a.block_size = 128;
  a.actual_seq_lengths_kv = {300};
  auto d = route(a);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->params.k_stride_page, 8 * 128 * 128);
  EXPECT_EQ(d->params.k_stride_head, 128 * 128);
  EXPECT_EQ(d->params.k_stride_tok, 128);
  EXPECT_EQ(d->params.kv_len, 300);
  // A block table whose rows are not contiguous stays on the prefill kernel.
  a.block_table.stride[0] = 8;
  EXPECT_FALSE(route(a).has_value());
}

// Contiguous K/V needs no page view: any KV_S, any batch, padded batch strides, K and
// V with their own strides, one spec for every KV_S.
TEST(FiaDecode, ContiguousAnyLengthAndStride) {
  for (int B : {1, 2, 7}) {
    SCOPED_TRACE(B);
    const auto d = route(decode_args("BSND", B, 1000));
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->kv, FiaDecodeKv::kContiguous);
    EXPECT_EQ(d->spec.page_size, 0);
    EXPECT_EQ(d->params.pages_per_seq, 0);
    EXPECT_EQ(d->params.k_stride_page, 1000 * 8 * 128);
    EXPECT_EQ(d->spec, route(decode_args("BSND", B, 4096))->spec);
  }
  FiaArgs a = decode_args("BSND", 4, 4096);
  a.key.stride[0] = 4096ll * 1024 + 8;  // a padded batch stride
  a.value.stride[0] = 8192ll * 1024;    // V's own
  const auto d = route(a);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->params.k_stride_page, 4096ll * 1024 + 8);
  EXPECT_EQ(d->params.v_stride_page, 8192ll * 1024);
}

TEST(FiaDecode, OtherFeaturesStayOnThePrefillKernel) {
  const FiaArgs base = decode_args("BSND", 2, 256);
  ASSERT_TRUE(route(base).has_value());
  FiaArgs a = base;
  a.atten_mask = t(0x700000, DType::kUInt8, {2, 256});
  EXPECT_FALSE(route(a).has_value());
  a = base;
  a.pse_shift = t(0x700000, DType::kBFloat16, {2, 32, 1, 256});
  EXPECT_FALSE(route(a).has_value());
  a = base;
  a.softmax_lse_flag = true;
  a.softmax_lse = t(0x700000, DType::kFloat32, {2, 32, 1, 1});
  EXPECT_FALSE(route(a).has_value());
  // The placeholder LSE (flag off) does not stop it.
  a.softmax_lse_flag = false;
  a.softmax_lse = t(0x700000, DType::kFloat32, {1});
  EXPECT_TRUE(route(a).has_value());
  // Q_S > 1.
  a = base;
  a.query = t(0x10000, DType::kBFloat16, {2, 4, 32, 128});
  a.attention_out = t(0x400000, DType::kBFloat16, {2, 4, 32, 128});
  EXPECT_FALSE(route(a).has_value());
  // Every head dim FIA serves (multiples of 16 up to 256) the decode kernels serve too.
  for (int d : {16, 64, 80, 192})
    EXPECT_TRUE(route(decode_args("BSND", 2, 256, 32, 8, d)).has_value()) << d;
  EXPECT_TRUE(route(decode_args("BSND", 2, 256, 8, 8, 256)).has_value());
  // Ampere and Blackwell plan the same route.
  EXPECT_TRUE(route(base, spec::Arch::parse("sm_80")).has_value());
  EXPECT_TRUE(route(base, spec::Arch::parse("sm_100a")).has_value());
}

TEST(FiaDecode, GroupsAndDtypes) {
  for (int kn : {1, 2, 8, 32}) {
    const auto d = route(decode_args("BNSD", 3, 512, 64, kn, 128, DType::kFloat16));
    ASSERT_TRUE(d.has_value()) << kn;
    EXPECT_EQ(d->spec.group_size, 64 / kn);
    EXPECT_EQ(d->spec.q_dtype, DType::kFloat16);
    EXPECT_EQ(d->spec.kv_dtype, DType::kFloat16);
  }
}

// prewarm compiles what the call launches: the decode spec here, the prefill
// spec with LSE; and the CLI's model-config shapes (batch 1, BSND, KV_S 2048) name
// the same decode kernel as calls of other batches, KV_S and layouts.
TEST(FiaDecode, PrewarmSpecIsTheLaunchedOne) {
  const FiaArgs a = decode_args("BSND", 128, 4096);
  const spec::KernelSpec s = fia_prewarm_spec(a, kHopper);
  EXPECT_EQ(s.name(), "decode.bf16.hd128.g4.contig.nhd.sm90a");
  EXPECT_EQ(s, route(a)->spec);
  EXPECT_EQ(s, fia_prewarm_spec(decode_args("BSND", 1, 2048), kHopper));
  EXPECT_EQ(s, fia_prewarm_spec(decode_args("BSND", 1, 32768), kHopper));
  EXPECT_EQ(s, fia_prewarm_spec(decode_args("BNSD", 7, 2000), kHopper));
  FiaArgs lse = a;
  lse.softmax_lse_flag = true;
  lse.softmax_lse = t(0x700000, DType::kFloat32, {128, 32, 1, 1});
  EXPECT_EQ(fia_prewarm_spec(lse, kHopper).family, spec::OpFamily::kPrefill);
  // Shapes only (null data) plan the same spec.
  FiaArgs shapes = a;
  for (TensorView* v : {&shapes.query, &shapes.key, &shapes.value, &shapes.attention_out}) v->data = nullptr;
  EXPECT_EQ(fia_prewarm_spec(shapes, kHopper), s);
}

// The public prewarm compiles that decode kernel (NVRTC, no GPU), once.
TEST(FiaDecode, PrewarmCompilesTheDecodeKernel) {
  testing::TempDir dir("fia-decode-prewarm");
  RuntimeOptions o;
  o.cache_dir = dir.path();
  Runtime rt(o);
  FiaArgs a = decode_args("BNSD", 4, 1024, 16, 2, 64);
  for (TensorView* v : {&a.query, &a.key, &a.value, &a.attention_out}) v->data = nullptr;
  EXPECT_EQ(prewarm_fused_infer_attention_score(a, "sm_90a", &rt), "decode.bf16.hd64.g8.contig.nhd.sm90a");
  EXPECT_EQ(rt.stats().compiles, 1);
  a.actual_seq_lengths_kv = {5, 0, 1024, 7};  // ragged: the same kernel
  EXPECT_EQ(prewarm_fused_infer_attention_score(a, "sm_90a", &rt), "decode.bf16.hd64.g8.contig.nhd.sm90a");
  EXPECT_EQ(rt.stats().compiles, 1);
}

}  // namespace
}  // namespace attnjit::ops
