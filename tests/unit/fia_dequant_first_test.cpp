// Tests of src/ops/fia/fia_dequant_first.cpp and the dqpass kernel: which int8 K/V calls
// at Q_S > 1 are dequantised first (the rows rule, ATTNJIT_FIA_DEQUANT_FIRST, the seed's
// contiguous-only combinations, the shared prefix), the two specs and the prewarm of
// both, the copies' layout and the two launches' Params, the pass's can_implement, and
// that it compiles for every arch without spills.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "common/compile_check.hpp"
#include "common/env_guard.hpp"
#include "common/fia_antiquant_args.hpp"
#include "common/temp_dir.hpp"
#include "ops/fia/fia_dequant_first.hpp"
#include "ops/fia/prefill_family.hpp"
#include "render/renderer.hpp"

namespace attnjit::ops {
namespace {

using testing::kFiaBatch;
using testing::kFiaKvHeads;
using testing::kFiaKvSeq;
using testing::kHd;
constexpr int64_t B = kFiaBatch, KN = kFiaKvHeads, D = kHd, KS = kFiaKvSeq;
const spec::Arch kHopper = spec::Arch::parse("sm_90a");

// fp16 query, int8 K/V, combined per-channel scales; group 4 (N 8 over 2).
FiaArgs combined(int q_seq) { return testing::combined_kv(q_seq, "BSND", {2, KN, D}); }

TEST(FiaDequantFirst, RowsPerKvHeadDecideTheDefault) {
  // 32 tokens x group 4 = 128 rows: a wgmma tile, dequantised first.
  FiaPlan p = plan_fia(combined(32), kHopper);
  ASSERT_TRUE(p.dequant_first.has_value());
  EXPECT_EQ(p.spec.kv_dtype, DType::kFloat16);  // the attention reads the 16-bit copies
  EXPECT_EQ(p.spec.backend, spec::Backend::kTrtllmGen);
  const spec::KernelSpec& pass = p.dequant_first->pass;
  EXPECT_EQ(pass.kv_dtype, DType::kInt8);
  EXPECT_EQ(pass.q_dtype, DType::kFloat16);
  EXPECT_EQ(pass.backend, spec::Backend::kXqa);
  EXPECT_EQ(pass.features, spec::feature::kDequantPass);
  EXPECT_EQ(pass.name(), "prefill.fp16.kvint8.hd128.g1.contig.nhd.dqpass.sm90a");
  EXPECT_EQ(spec::KernelSpec::from_name(pass.name()), pass);
  // 31 tokens: 124 rows, in-kernel dequantisation.
  p = plan_fia(combined(31), kHopper);
  EXPECT_FALSE(p.dequant_first.has_value());
  EXPECT_EQ(p.spec.kv_dtype, DType::kInt8);
  // The longest actual query decides, not the tensor's S.
  FiaArgs a = combined(64);
  a.actual_seq_lengths = {10, 20};
  EXPECT_FALSE(plan_fia(a, kHopper).dequant_first.has_value());
  a.actual_seq_lengths = {10, 32};
  EXPECT_TRUE(plan_fia(a, kHopper).dequant_first.has_value());
}

TEST(FiaDequantFirst, KnobForcesEitherPath) {
  {
    testing::EnvGuard on("ATTNJIT_FIA_DEQUANT_FIRST", "1");
    EXPECT_TRUE(plan_fia(combined(2), kHopper).dequant_first.has_value());
  }
  {
    testing::EnvGuard off("ATTNJIT_FIA_DEQUANT_FIRST", "0");
    EXPECT_FALSE(plan_fia(combined(512), kHopper).dequant_first.has_value());
  }
  testing::EnvGuard bad("ATTNJIT_FIA_DEQUANT_FIRST", "2");
  try {
    plan_fia(combined(512), kHopper);
    ADD_FAILURE() << "ATTNJIT_FIA_DEQUANT_FIRST=2 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ATTNJIT_FIA_DEQUANT_FIRST"), std::string::npos) << e.what();
  }
}

TEST(FiaDequantFirst, NotForDecodeThePrefixOr16BitKv) {
  testing::EnvGuard on("ATTNJIT_FIA_DEQUANT_FIRST", "1");
  EXPECT_FALSE(plan_fia(testing::valid_fia(64), kHopper).dequant_first.has_value());  // 16-bit K/V
  // Q_S = 1: the decode kernel's own dequantisation.
  FiaArgs d = testing::separate_kv(1, DType::kInt8, 0, {1, KN, 1, D}, 0, {1, KN, 1, D});
  EXPECT_FALSE(plan_fia(d, kHopper).dequant_first.has_value());
  // A shared int8 prefix: the pass has none.
  FiaArgs p = combined(64);
  p.key_shared_prefix = testing::aq_view(0x5000000, DType::kInt8, {1, 16, KN, D});
  p.value_shared_prefix = testing::aq_view(0x6000000, DType::kInt8, {1, 16, KN, D});
  EXPECT_FALSE(plan_fia(p, kHopper).dequant_first.has_value());
}

TEST(FiaDequantFirst, BackendsAndLeftPaddingCarryOver) {
  FiaArgs a = combined(64);
  a.backend = Backend::kXqa;  // the portable attention over the copies
  FiaPlan p = plan_fia(a, kHopper);
  ASSERT_TRUE(p.dequant_first.has_value());
  EXPECT_EQ(p.spec.backend, spec::Backend::kXqa);
  EXPECT_EQ(p.dequant_first->pass.backend, spec::Backend::kXqa);
  // Left padding: the pass reads the pads as the attention does (its kv_tok0).
  a.backend = Backend::kAuto;
  a.actual_seq_lengths = {64, 30};
  a.actual_seq_lengths_kv = {200, 100};
  a.query_padding_size = testing::aq_view(0x7000000, DType::kInt64, {1});
  a.kv_padding_size = testing::aq_view(0x7100000, DType::kInt64, {1});
  p = plan_fia(a, kHopper);
  ASSERT_TRUE(p.dequant_first.has_value());
  EXPECT_TRUE(p.spec.has(spec::feature::kLeftPad));
  EXPECT_EQ(p.dequant_first->pass.features, spec::feature::kDequantPass | spec::feature::kLeftPad);
}

TEST(FiaDequantFirst, CopiesAndParams) {
  for (const char* layout : {"BSND", "BSH", "BNSD"}) {
    SCOPED_TRACE(layout);
    const FiaArgs a = testing::combined_kv(64, layout, {2});  // per tensor: one shape for every layout
    const FiaPlan p = plan_fia(a, kHopper);
    ASSERT_TRUE(p.dequant_first.has_value());
    const FiaDequantFirst& f = *p.dequant_first;
    // Dense (B, S, KV heads, D) 16-bit copies, whatever the source layout.
    EXPECT_EQ(f.k_bytes, size_t(B * KS * KN * D * 2));
    EXPECT_EQ(f.v_bytes, size_t(B * KS * KN * D * 2));
    EXPECT_EQ(f.out.k_sh, D);
    EXPECT_EQ(f.out.k_ss, KN * D);
    EXPECT_EQ(f.out.k_sb, KS * KN * D);
    char copies[1];
    PrefillParams pass{}, att{};
    fia_dequant_params(p, copies, pass, att);
    // The pass reads the plan's int8 K/V through its descriptors and writes the copies.
    EXPECT_EQ(pass.k, p.params.k);
    EXPECT_EQ(pass.k_stride_s, p.params.k_stride_s);
    EXPECT_EQ(pass.k_dq.scale, p.params.k_dq.scale);
    EXPECT_EQ(pass.dq_out.k, static_cast<void*>(copies));
    EXPECT_EQ(pass.dq_out.v, static_cast<void*>(copies + f.k_bytes));
    // The attention reads the copies, with nothing to dequantise.
    EXPECT_EQ(att.k, pass.dq_out.k);
    EXPECT_EQ(att.v, pass.dq_out.v);
    EXPECT_EQ(att.k_stride_b, f.out.k_sb);
    EXPECT_EQ(att.v_stride_s, f.out.v_ss);
    EXPECT_EQ(att.k_dq.scale, nullptr);
    EXPECT_EQ(att.q, p.params.q);
    // Grid: 64-token tiles of the longest KV, the KV heads, the batches.
    fia_fill_work(p, a, 0, int(B), att);
    const Grid g = fia_dequant_grid(p, att);
    EXPECT_EQ(g.x, unsigned((KS + 63) / 64));
    EXPECT_EQ(g.y, unsigned(KN));
    EXPECT_EQ(g.z, unsigned(B));
  }
}

TEST(FiaDequantFirst, PrewarmBuildsThePassAndTheAttention) {
  FiaArgs a = combined(64);
  for (TensorView* t : {&a.query, &a.key, &a.value, &a.attention_out, &a.antiquant_scale, &a.antiquant_offset})
    t->data = nullptr;
  const std::vector<spec::KernelSpec> specs = fia_prewarm_specs(a, kHopper);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_TRUE(specs[0].has(spec::feature::kDequantPass));
  EXPECT_EQ(specs[1].name(), "prefill.fp16.hd128.g1.contig.nhd.trtllmgen.sm90a");
  testing::TempDir dir("fia-dequant-first");
  RuntimeOptions o;
  o.cache_dir = dir.path();
  Runtime rt(o);
  EXPECT_EQ(prewarm_fused_infer_attention_score(a, "sm_90a", &rt), specs[1].name());
  EXPECT_EQ(rt.stats().compiles, 2);
}

TEST(FiaDequantFirst, PassCanImplementOnlyWhatItReads) {
  spec::KernelSpec s = plan_fia(combined(64), kHopper).dequant_first->pass;
  std::string why;
  EXPECT_TRUE(prefill_can_implement(s, s.arch, &why)) << why;
  EXPECT_FALSE(prefill_can_implement(s, spec::Arch{75, false}, &why));
  spec::KernelSpec t = s;
  t.backend = spec::Backend::kTrtllmGen;
  EXPECT_FALSE(prefill_can_implement(t, t.arch, &why));
  EXPECT_NE(why.find("xqa"), std::string::npos) << why;
  for (auto change : {+[](spec::KernelSpec& x) { x.kv_dtype = DType::kInt32; },
                      +[](spec::KernelSpec& x) { x.kv_dtype = DType::kFloat16; },
                      +[](spec::KernelSpec& x) { x.page_size = 64; },
                      +[](spec::KernelSpec& x) { x.mask = spec::MaskMode::kCausal; },
                      +[](spec::KernelSpec& x) { x.features |= spec::feature::kSharedPrefix; },
                      +[](spec::KernelSpec& x) { x.head_dim_qk = 520; }}) {
    t = s;
    change(t);
    EXPECT_FALSE(prefill_can_implement(t, t.arch, &why)) << t.name();
  }
  const PrefillTiling tl = prefill_tiling(s);
  EXPECT_TRUE(tl.dequant_pass);
  EXPECT_EQ(tl.threads, 256);
}

TEST(FiaDequantFirst, PassCompilesForEveryArchWithoutSpills) {
  std::vector<spec::KernelSpec> specs;
  spec::KernelSpec s = plan_fia(combined(64), kHopper).dequant_first->pass;
  for (const char* arch : {"sm_80", "sm_90a", "sm_120"})
    for (int hd : {64, 128, 256, 512})
      for (DType t : {DType::kFloat16, DType::kBFloat16}) {
        spec::KernelSpec v = s;
        v.arch = spec::Arch::parse(arch);
        v.set_head_dim(hd);
        v.q_dtype = v.out_dtype = t;
        if (hd == 256) v.features |= spec::feature::kLeftPad;
        specs.push_back(v);
      }
  testing::expect_compiles_without_spills(specs, "dqpass");
}

}  // namespace
}  // namespace attnjit::ops
