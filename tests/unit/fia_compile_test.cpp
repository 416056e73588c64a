// Tests of the prefill family (src/ops/fia/prefill_family.cpp, templates/prefill/):
// names round trip, and the variants compile with NVRTC for every arch without spills.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "common/env_guard.hpp"
#include "common/compile_check.hpp"
#include "common/expect_error.hpp"
#include "ops/fia/prefill_family.hpp"
#include "prefill/prefill_params.cuh"
#include "render/renderer.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit {
namespace {

using spec::Arch;
using spec::KernelSpec;

KernelSpec prefill_spec(DType t, int hq, int hv, spec::MaskMode mask, int page, uint32_t features, const char* arch) {
  KernelSpec s;
  s.family = spec::OpFamily::kPrefill;
  s.q_dtype = s.kv_dtype = s.out_dtype = t;
  s.head_dim_qk = hq;
  s.head_dim_vo = hv;
  s.group_size = 1;
  s.page_size = page;
  s.mask = mask;
  s.features = features;
  s.arch = Arch::parse(arch);
  return s;
}

// A tuning knob's bad value: `call` throws an invalid-argument error that names the variable.
void expect_knob_rejects(const char* knob, const char* value, const std::function<void()>& call) {
  testing::EnvGuard bad(knob, value);
  testing::expect_error(call, ErrorCode::kInvalidArgument, {knob});
}

std::vector<KernelSpec> variants() {
  using M = spec::MaskMode;
  namespace f = spec::feature;
  std::vector<KernelSpec> out;
  for (const char* a : {"sm_80", "sm_89", "sm_90a", "sm_120"}) {
    out.push_back(prefill_spec(DType::kBFloat16, 128, 128, M::kNone, 0, 0, a));
    out.push_back(prefill_spec(DType::kBFloat16, 128, 128, M::kCausal, 0, f::kReturnLse, a));
    out.push_back(prefill_spec(DType::kFloat16, 64, 64, M::kCustom, 0, f::kPse, a));
    out.push_back(prefill_spec(DType::kBFloat16, 192, 128, M::kCausal, 0, f::kReturnLse, a));
    out.push_back(prefill_spec(DType::kFloat16, 256, 256, M::kCustom, 128, f::kReturnLse | f::kPse, a));
    out.push_back(prefill_spec(DType::kBFloat16, 128, 128, M::kCustom, 16, f::kPse, a));
  }
  // Head dims past 256: the value dims split over two CTAs.
  out.push_back(prefill_spec(DType::kBFloat16, 512, 512, M::kCausal, 0, f::kReturnLse, "sm_90a"));
  out.push_back(prefill_spec(DType::kFloat16, 384, 384, M::kCustom, 128, f::kReturnLse | f::kPse, "sm_90a"));
  out.push_back(prefill_spec(DType::kBFloat16, 384, 384, M::kNone, 0, 0, "sm_80"));
  // The Hopper (trtllm-gen, wgmma) kernel: sm_90a only, head dims 64 to 256.
  for (KernelSpec s : {prefill_spec(DType::kBFloat16, 128, 128, M::kNone, 0, 0, "sm_90a"),
                       prefill_spec(DType::kFloat16, 128, 128, M::kCausal, 0, f::kReturnLse, "sm_90a"),
                       prefill_spec(DType::kBFloat16, 64, 64, M::kCustom, 0, f::kPse, "sm_90a"),
                       prefill_spec(DType::kBFloat16, 192, 128, M::kCausal, 0, f::kReturnLse, "sm_90a"),
                       prefill_spec(DType::kFloat16, 256, 256, M::kCustom, 128, f::kReturnLse, "sm_90a"),
                       prefill_spec(DType::kBFloat16, 256, 256, M::kCausal, 0, f::kPse, "sm_90a"),
                       prefill_spec(DType::kFloat16, 128, 128, M::kCustom, 128, f::kReturnLse | f::kPse, "sm_90a"),
                       prefill_spec(DType::kBFloat16, 128, 128, M::kCausal, 256, 0, "sm_90a")}) {
    s.backend = spec::Backend::kTrtllmGen;
    out.push_back(s);
  }
  return out;
}

TEST(FiaCompile, MaskModesEqualSpecMaskModes) {
  EXPECT_EQ(prefill_mask::kNone, int(spec::MaskMode::kNone));
  EXPECT_EQ(prefill_mask::kBand, int(spec::MaskMode::kCausal));
  EXPECT_EQ(prefill_mask::kTensor, int(spec::MaskMode::kCustom));
  EXPECT_LE(sizeof(PrefillParams), 4096u);  // the classic kernel parameter limit
}

TEST(FiaCompile, NamesRoundTrip) {
  for (const KernelSpec& s : variants()) {
    EXPECT_EQ(KernelSpec::from_name(s.name()), s) << s.name();
    EXPECT_EQ(KernelSpec::from_json(s.to_json()), s) << s.name();
    EXPECT_EQ(s.name().rfind("prefill.", 0), 0u) << s.name();
  }
  EXPECT_EQ(prefill_spec(DType::kBFloat16, 192, 128, spec::MaskMode::kCausal, 0, spec::feature::kReturnLse, "sm_90a").name(),
            "prefill.bf16.hd192x128.g1.contig.nhd.causal.lse.sm90a");
}

TEST(FiaCompile, CanImplementRefusesWhatTheTemplatesLack) {
  std::string why;
  KernelSpec s = prefill_spec(DType::kBFloat16, 528, 528, spec::MaskMode::kNone, 0, 0, "sm_90a");
  EXPECT_FALSE(ops::prefill_can_implement(s, s.arch, &why));
  EXPECT_NE(why.find("528"), std::string::npos) << why;
  s = prefill_spec(DType::kBFloat16, 512, 512, spec::MaskMode::kNone, 0, 0, "sm_90a");
  EXPECT_TRUE(ops::prefill_can_implement(s, s.arch, &why)) << why;  // two CTAs of 256 value dims
  EXPECT_EQ(ops::prefill_tiling(s).dv_chunks, 2);
  EXPECT_FALSE(ops::prefill_can_implement(s, Arch{120, false}, &why));  // 99 KB of shared memory
  s.head_dim_vo = 272;
  EXPECT_FALSE(ops::prefill_can_implement(s, s.arch, &why));
  s = prefill_spec(DType::kBFloat16, 128, 128, spec::MaskMode::kNone, 0, 0, "sm_80");
  EXPECT_FALSE(ops::prefill_can_implement(s, Arch{75, false}, &why));
  s = prefill_spec(DType::kFloat8E4M3, 128, 128, spec::MaskMode::kNone, 0, 0, "sm_90a");
  EXPECT_FALSE(ops::prefill_can_implement(s, s.arch, &why));
  s = prefill_spec(DType::kBFloat16, 128, 128, spec::MaskMode::kNone, 0, spec::feature::kSoftCap, "sm_90a");
  EXPECT_FALSE(ops::prefill_can_implement(s, s.arch, &why));
  // The wgmma kernel: sm_90a only, whole 64-wide head dims, not hd 256 with both a mask tensor and pse.
  s = prefill_spec(DType::kBFloat16, 128, 128, spec::MaskMode::kNone, 0, 0, "sm_90a");
  s.backend = spec::Backend::kTrtllmGen;
  EXPECT_TRUE(ops::prefill_can_implement(s, s.arch, &why)) << why;
  EXPECT_FALSE(ops::prefill_can_implement(s, Arch{90, false}, &why));
  EXPECT_NE(why.find("sm_90a"), std::string::npos) << why;
  EXPECT_FALSE(ops::prefill_can_implement(s, Arch{100, true}, &why));
  s.head_dim_qk = s.head_dim_vo = 96;
  EXPECT_FALSE(ops::prefill_can_implement(s, s.arch, &why));
  EXPECT_NE(why.find("96"), std::string::npos) << why;
  s.head_dim_qk = s.head_dim_vo = 256;
  s.mask = spec::MaskMode::kCustom;
  s.features = spec::feature::kPse;
  EXPECT_FALSE(ops::prefill_can_implement(s, s.arch, &why));
  EXPECT_NE(why.find("pse"), std::string::npos) << why;
  // Every variant fits its arch's shared memory.
  for (const KernelSpec& v : variants()) EXPECT_TRUE(ops::prefill_can_implement(v, v.arch, &why)) << v.name() << ": " << why;
}

// ATTNJIT_PREFILL_PINGPONG reaches the Hopper kernel's Traits (so the cache key
// follows it); a bad value is an error naming the variable.
// Ping-pong is on by default without a mask and off under one (measured on the H200); the
// knob overrides both ways.
TEST(FiaCompile, PingPongKnobReachesTheTraits) {
  KernelSpec s = prefill_spec(DType::kBFloat16, 128, 128, spec::MaskMode::kCausal, 0, 0, "sm_90a");
  s.backend = spec::Backend::kTrtllmGen;
  KernelSpec full = s;
  full.mask = spec::MaskMode::kNone;
  const std::string causal = render::render(s).source;
  EXPECT_NE(causal.find("PrefillHopperTraits<attnjit::bf16_t, 128, 128, 128, 3, false,"), std::string::npos) << causal;
  const std::string plain = render::render(full).source;
  EXPECT_NE(plain.find("PrefillHopperTraits<attnjit::bf16_t, 128, 128, 128, 3, true,"), std::string::npos) << plain;
  {
    testing::EnvGuard on("ATTNJIT_PREFILL_PINGPONG", "1");
    EXPECT_NE(render::render(s).source.find(", 3, true,"), std::string::npos);
  }
  {
    testing::EnvGuard off("ATTNJIT_PREFILL_PINGPONG", "0");
    EXPECT_NE(render::render(full).source.find(", 3, false,"), std::string::npos);
  }
  expect_knob_rejects("ATTNJIT_PREFILL_PINGPONG", "2", [&] { render::render(s); });
}

// ATTNJIT_PREFILL_KV_TILE sets the Hopper kernel's KV tile (the rendered Traits, so the
// cache key follows it; shared memory then decides the stages); a size with no wgmma N,
// or out of range, is an error naming the variable.
TEST(FiaCompile, KvTileKnobReachesTheTraits) {
  KernelSpec s = prefill_spec(DType::kBFloat16, 128, 128, spec::MaskMode::kNone, 0, 0, "sm_90a");
  s.backend = spec::Backend::kTrtllmGen;
  EXPECT_EQ(ops::prefill_tiling(s).kv_tile, 128);
  {
    testing::EnvGuard tile("ATTNJIT_PREFILL_KV_TILE", "176");
    const ops::PrefillTiling t = ops::prefill_tiling(s);
    EXPECT_EQ(t.kv_tile, 176);
    EXPECT_EQ(t.stages, 2);
    EXPECT_NE(render::render(s).source.find("PrefillHopperTraits<attnjit::bf16_t, 128, 128, 176, 2,"), std::string::npos);
  }
  for (const char* bad : {"112", "48", "272", "abc"})
    expect_knob_rejects("ATTNJIT_PREFILL_KV_TILE", bad, [&] { ops::prefill_tiling(s); });
}

TEST(FiaCompile, VariantsCompileForEveryArchWithoutSpills) {
  testing::expect_compiles_without_spills(variants(), "prefill variants");
}

}  // namespace
}  // namespace attnjit
