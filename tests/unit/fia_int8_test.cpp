// Tests of the full int8 path of fused_infer_attention_score (int8 query, key and value
// with dequant_scale1, quant_scale1 and dequant_scale2; fia_plan_extras.cpp's
// fia_check_int8_query, fia_dequant_first.cpp): the plan always dequantises first, the
// pass copies Q too and takes the device scales, the attention is the fp16 kernel with
// fp16 or int8 output, the seed's refusals each name their argument, the prewarm builds
// both kernels, and the int8-query pass compiles without spills for every arch.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "common/compile_check.hpp"
#include "common/env_guard.hpp"
#include "common/expect_error.hpp"
#include "common/fia_antiquant_args.hpp"
#include "common/temp_dir.hpp"
#include "ops/fia/fia_dequant_first.hpp"
#include "ops/fia/prefill_family.hpp"

namespace attnjit::ops {
namespace {

using testing::aq_view;
using testing::int8_qkv;
constexpr int64_t B = testing::kFiaBatch, N = testing::kFiaHeads, KN = testing::kFiaKvHeads, D = testing::kHd,
                  KS = testing::kFiaKvSeq;
const spec::Arch kHopper = spec::Arch::parse("sm_90a");

TEST(FiaInt8, PlansThePassThenTheFp16Attention) {
  const FiaArgs a = int8_qkv(64);
  const FiaPlan p = plan_fia(a, kHopper);
  ASSERT_TRUE(p.dequant_first.has_value());
  const FiaDequantFirst& f = *p.dequant_first;
  // The attention: fp16 everything (the copies), fp16 output, the wgmma kernel on sm_90a.
  EXPECT_EQ(p.spec.q_dtype, DType::kFloat16);
  EXPECT_EQ(p.spec.kv_dtype, DType::kFloat16);
  EXPECT_EQ(p.spec.out_dtype, DType::kFloat16);
  EXPECT_EQ(p.spec.backend, spec::Backend::kTrtllmGen);
  // The pass: int8 query and K/V in, fp16 copies out.
  EXPECT_EQ(f.pass.q_dtype, DType::kInt8);
  EXPECT_EQ(f.pass.kv_dtype, DType::kInt8);
  EXPECT_EQ(f.pass.out_dtype, DType::kFloat16);
  EXPECT_EQ(spec::KernelSpec::from_name(f.pass.name()), f.pass) << f.pass.name();
  EXPECT_EQ(prefill_ext_bits(f.pass) & prefill_ext::kQInt8, prefill_ext::kQInt8);
  EXPECT_EQ(prefill_ext_bits(p.spec) & prefill_ext::kQInt8, 0u);
  // The copies: K and V as for int8 K/V, then the query, dense (B, S, N, D) fp16.
  EXPECT_EQ(f.k_bytes, size_t(B * KS * KN * D * 2));
  EXPECT_EQ(f.q_bytes, size_t(B * 64 * N * D * 2));
  EXPECT_EQ(f.out.q_sh, D);
  EXPECT_EQ(f.out.q_ss, N * D);
  EXPECT_EQ(f.out.q_sb, 64 * N * D);
  EXPECT_EQ(f.out.dequant_scale1, a.dequant_scale1.data);
  EXPECT_EQ(f.out.quant_scale1, a.quant_scale1.data);
  EXPECT_EQ(f.out.dequant_scale2, a.dequant_scale2.data);
  // Every per-row or per-channel antiquant descriptor is empty: the pass scales per tensor.
  EXPECT_EQ(p.params.k_dq.scale, nullptr);
  EXPECT_EQ(p.params.v_dq.sd, 0);
}

TEST(FiaInt8, ParamsPointTheAttentionAtTheQueryCopy) {
  const FiaArgs a = int8_qkv(100);
  const FiaPlan p = plan_fia(a, kHopper);
  const FiaDequantFirst& f = *p.dequant_first;
  char copies[1];
  PrefillParams pass{}, att{};
  fia_dequant_params(p, copies, pass, att);
  // The pass reads the int8 query and writes its copy after K's and V's.
  EXPECT_EQ(pass.q, a.query.data);
  EXPECT_EQ(pass.q_stride_s, a.query.stride[1]);
  EXPECT_EQ(pass.dq_out.q, static_cast<void*>(copies + f.k_bytes + f.v_bytes));
  EXPECT_EQ(pass.dq_out.dequant_scale1, a.dequant_scale1.data);
  // The attention reads the copy with its dense strides.
  EXPECT_EQ(att.q, pass.dq_out.q);
  EXPECT_EQ(att.q_stride_b, f.out.q_sb);
  EXPECT_EQ(att.q_stride_s, f.out.q_ss);
  EXPECT_EQ(att.q_stride_h, f.out.q_sh);
  EXPECT_EQ(att.k, pass.dq_out.k);
  // Grid: 64-token tiles of the longer of the query and the KV.
  FiaArgs longer_q = int8_qkv(300);  // Q_S 300 > KV_S 256
  const FiaPlan lp = plan_fia(longer_q, kHopper);
  PrefillParams lpass{}, latt{};
  fia_dequant_params(lp, copies, lpass, latt);
  fia_fill_work(lp, longer_q, 0, int(B), latt);
  EXPECT_EQ(fia_dequant_grid(lp, latt).x, unsigned((300 + 63) / 64));
  fia_fill_work(p, a, 0, int(B), att);
  EXPECT_EQ(fia_dequant_grid(p, att).x, unsigned((KS + 63) / 64));
}

TEST(FiaInt8, AlwaysDequantisesFirst) {
  // Short prompts (2 tokens x group 4: 8 rows) and the knob's 0 still take the pass: an
  // int8 query has no other path.
  EXPECT_TRUE(plan_fia(int8_qkv(2), kHopper).dequant_first.has_value());
  testing::EnvGuard off("ATTNJIT_FIA_DEQUANT_FIRST", "0");
  EXPECT_TRUE(plan_fia(int8_qkv(64), kHopper).dequant_first.has_value());
  FiaArgs x = int8_qkv(64);
  x.backend = Backend::kXqa;
  EXPECT_EQ(plan_fia(x, kHopper).spec.backend, spec::Backend::kXqa);
}

TEST(FiaInt8, Int8OutputPseAndLeftPadding) {
  FiaArgs a = int8_qkv(64);
  a.attention_out.dtype = DType::kInt8;
  a.quant_scale2 = aq_view(0x5000300, DType::kFloat32, {N, D});
  a.quant_offset2 = aq_view(0x5000400, DType::kFloat32, {N, D});
  FiaPlan p = plan_fia(a, kHopper);
  EXPECT_EQ(p.spec.out_dtype, DType::kInt8);
  EXPECT_EQ(p.spec.q_dtype, DType::kFloat16);
  EXPECT_EQ(p.dequant_first->pass.out_dtype, DType::kFloat16);
  // pse is fp16 with an int8 query (the seed).
  FiaArgs s = int8_qkv(64);
  s.pse_shift = aq_view(0x6000000, DType::kFloat16, {1, N, 64, KS});
  EXPECT_TRUE(plan_fia(s, kHopper).spec.has(spec::feature::kPse));
  // Left padding: the pass reads the pads (its q_tok0 and kv_tok0).
  FiaArgs l = int8_qkv(64);
  l.actual_seq_lengths = {30, 64};
  l.actual_seq_lengths_kv = {100};
  l.query_padding_size = aq_view(0x7000000, DType::kInt64, {1});
  l.kv_padding_size = aq_view(0x7100000, DType::kInt64, {2});
  p = plan_fia(l, kHopper);
  EXPECT_EQ(p.dequant_first->pass.features, spec::feature::kDequantPass | spec::feature::kLeftPad);
}

struct Refusal {
  const char* what;
  std::function<void(FiaArgs&)> change;
  const char* arg;
};

TEST(FiaInt8, RefusalsNameTheArgument) {
  const std::vector<Refusal> cases = {
      {"no dequant_scale1", [](FiaArgs& a) { a.dequant_scale1 = {}; }, "dequant_scale1"},
      {"no quant_scale1", [](FiaArgs& a) { a.quant_scale1 = {}; }, "quant_scale1"},
      {"no dequant_scale2", [](FiaArgs& a) { a.dequant_scale2 = {}; }, "dequant_scale2"},
      {"dequant_scale1 bf16", [](FiaArgs& a) { a.dequant_scale1.dtype = DType::kBFloat16; }, "dequant_scale1"},
      {"dequant_scale2 int64 (not Ascend's uint64 form)", [](FiaArgs& a) { a.dequant_scale2.dtype = DType::kInt64; },
       "dequant_scale2"},
      {"quant_scale1 per channel", [](FiaArgs& a) { a.quant_scale1 = aq_view(0x5000100, DType::kFloat32, {N}); },
       "quant_scale1"},
      {"bf16 key", [](FiaArgs& a) { a.key.dtype = a.value.dtype = DType::kBFloat16; }, "key"},
      {"int8 key, bf16 value", [](FiaArgs& a) { a.value.dtype = DType::kBFloat16; }, "value"},
      {"int4 key/value", [](FiaArgs& a) { testing::quantise_kv(a, DType::kInt32); }, "key"},
      {"bf16 output", [](FiaArgs& a) { a.attention_out.dtype = DType::kBFloat16; }, "attention_out"},
      {"int8 output without quant_scale2", [](FiaArgs& a) { a.attention_out.dtype = DType::kInt8; }, "attention_out"},
      {"quant_offset2 without quant_scale2",
       [](FiaArgs& a) { a.quant_offset2 = aq_view(0x5000400, DType::kFloat32, {1}); }, "quant_offset2"},
      {"bf16 pse", [](FiaArgs& a) { a.pse_shift = aq_view(0x6000000, DType::kBFloat16, {1, N, 64, KS}); },
       "pse_shift"},
      {"antiquant_scale too", [](FiaArgs& a) { a.antiquant_scale = aq_view(0x1000000, DType::kFloat16, {2}); },
       "antiquant_scale"},
      {"key_antiquant_scale too",
       [](FiaArgs& a) {
         a.key_antiquant_scale = aq_view(0x1000000, DType::kFloat32, {B, KS});
         a.value_antiquant_scale = aq_view(0x2000000, DType::kFloat32, {B, KS});
       },
       "key_antiquant_scale"},
      {"Q_S 1",
       [](FiaArgs& a) {
         a.query.shape[1] = a.attention_out.shape[1] = 1;
         a.softmax_lse.shape[2] = 1;
       },
       "query"},
      {"paged", [](FiaArgs& a) { testing::page_kv(a, 128); }, "block_table"},
      {"shared prefix",
       [](FiaArgs& a) {
         a.key_shared_prefix = aq_view(0x8000000, DType::kInt8, {1, 16, KN, D});
         a.value_shared_prefix = aq_view(0x8100000, DType::kInt8, {1, 16, KN, D});
       },
       "key_shared_prefix"},
      {"head dim 48",
       [](FiaArgs& a) {
         for (TensorView* t : {&a.query, &a.key, &a.value, &a.attention_out}) *t = aq_view(
             reinterpret_cast<uintptr_t>(t->data), t->dtype, {t->shape[0], t->shape[1], t->shape[2], 48});
       },
       "query"},
  };
  for (const Refusal& c : cases) {
    SCOPED_TRACE(c.what);
    FiaArgs a = int8_qkv(64);
    c.change(a);
    testing::expect_error([&] { plan_fia(a, kHopper); }, ErrorCode::kInvalidArgument,
                          {std::string("argument '") + c.arg + "'"});
  }
  // The three scales are the int8 query's alone.
  FiaArgs f = testing::valid_fia(64);
  f.quant_scale1 = aq_view(0x5000100, DType::kFloat32, {1});
  testing::expect_error([&] { plan_fia(f, kHopper); }, ErrorCode::kInvalidArgument, {"argument 'quant_scale1'"});
}

TEST(FiaInt8, PrewarmBuildsThePassAndTheAttention) {
  FiaArgs a = int8_qkv(64);
  for (TensorView* t : {&a.query, &a.key, &a.value, &a.attention_out, &a.softmax_lse}) t->data = nullptr;
  for (TensorView* t : {&a.dequant_scale1, &a.quant_scale1, &a.dequant_scale2}) t->data = nullptr;
  const std::vector<spec::KernelSpec> specs = fia_prewarm_specs(a, kHopper);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_TRUE(specs[0].has(spec::feature::kDequantPass));
  EXPECT_EQ(specs[0].q_dtype, DType::kInt8);
  EXPECT_EQ(specs[1].name().rfind("prefill.fp16.hd128", 0), 0u) << specs[1].name();
  testing::TempDir dir("fia-int8");
  RuntimeOptions o;
  o.cache_dir = dir.path();
  Runtime rt(o);
  EXPECT_EQ(prewarm_fused_infer_attention_score(a, "sm_90a", &rt), specs[1].name());
  EXPECT_EQ(rt.stats().compiles, 2);
}

TEST(FiaInt8, PassCanImplementTheInt8Query) {
  const spec::KernelSpec s = plan_fia(int8_qkv(64), kHopper).dequant_first->pass;
  std::string why;
  EXPECT_TRUE(prefill_can_implement(s, s.arch, &why)) << why;
  spec::KernelSpec t = s;
  t.out_dtype = DType::kBFloat16;  // the seed's int8 path writes fp16
  EXPECT_FALSE(prefill_can_implement(t, t.arch, &why));
  t = s;
  t.kv_dtype = DType::kFloat16;
  EXPECT_FALSE(prefill_can_implement(t, t.arch, &why));
  // The attention kernels never take the int8 query themselves.
  t = s;
  t.features &= ~spec::feature::kDequantPass;
  EXPECT_FALSE(prefill_can_implement(t, t.arch, &why));
}

TEST(FiaInt8, PassCompilesForEveryArchWithoutSpills) {
  std::vector<spec::KernelSpec> specs;
  const spec::KernelSpec s = plan_fia(int8_qkv(64), kHopper).dequant_first->pass;
  for (const char* arch : {"sm_80", "sm_90a", "sm_120"})
    for (int hd : {64, 128, 256, 512}) {
      spec::KernelSpec v = s;
      v.arch = spec::Arch::parse(arch);
      v.set_head_dim(hd);
      if (hd == 128) v.features |= spec::feature::kLeftPad;
      specs.push_back(v);
    }
  testing::expect_compiles_without_spills(specs, "dqpass");
}

}  // namespace
}  // namespace attnjit::ops
