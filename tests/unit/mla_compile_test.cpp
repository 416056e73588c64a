// Tests of the mla family's kernels (templates/mla, src/ops/mla/mla_family.cpp): every
// variant axis (fp8 KV with bf16, fp16 and fp8 queries too) compiles through NVRTC for
// sm_80, sm_89, sm_90a, sm_100a and sm_120 (the wgmma kernel: sm_90a) with no spills, no
// stack frame and no serialised wgmma, and its name parses back. No GPU needed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/compile_check.hpp"
#include "compile/nvrtc_compiler.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::compile {
namespace {

using spec::Arch;
using spec::KernelSpec;
namespace feature = spec::feature;

KernelSpec mla_spec(DType dt, int page, bool sparse, uint32_t features, const char* arch) {
  KernelSpec s;
  s.family = spec::OpFamily::kMla;
  s.q_dtype = s.kv_dtype = s.out_dtype = dt;
  if (dt == DType::kFloat8E4M3) s.out_dtype = DType::kBFloat16;  // an fp8 query writes bf16
  s.head_dim_qk = 576;
  s.head_dim_vo = 512;
  s.group_size = 1;
  s.page_size = page;
  s.mask = sparse ? spec::MaskMode::kCustom : spec::MaskMode::kCausal;
  s.features = features;
  s.arch = Arch::parse(arch);
  return s;
}

TEST(MlaVariantMatrix, CompilesForEveryArchWithoutSpills) {
  std::vector<KernelSpec> specs;
  for (const char* a : {"sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120"}) {
    specs.push_back(mla_spec(DType::kBFloat16, 64, false, 0, a));
    specs.push_back(mla_spec(DType::kFloat16, 16, true, feature::kSinks | feature::kReturnLse, a));
    specs.push_back(mla_spec(DType::kBFloat16, 128, true, feature::kScalePointers, a));
    specs.push_back(mla_spec(DType::kBFloat16, 32, false, feature::kSinks | feature::kReturnLse | feature::kScalePointers, a));
    // fp8 e4m3 KV (widened in registers) with a bf16, fp16 or fp8 query.
    KernelSpec f = mla_spec(DType::kBFloat16, 64, false, feature::kScalePointers, a);
    f.kv_dtype = DType::kFloat8E4M3;
    specs.push_back(f);
    f = mla_spec(DType::kFloat16, 32, true, feature::kSinks | feature::kReturnLse, a);
    f.kv_dtype = DType::kFloat8E4M3;
    specs.push_back(f);
    specs.push_back(mla_spec(DType::kFloat8E4M3, 64, false, feature::kSinks | feature::kReturnLse | feature::kScalePointers, a));
    specs.push_back(mla_spec(DType::kFloat8E4M3, 16, true, 0, a));
    // FIA's MLA (query_rope/key_rope): nope and rope dims from separate tensors.
    specs.push_back(mla_spec(DType::kBFloat16, 128, false, feature::kSplitRope | feature::kReturnLse, a));
    specs.push_back(mla_spec(DType::kFloat16, 16, false, feature::kSplitRope, a));
  }
  // The wgmma (trtllm-gen) kernel: sm_90a, 16-bit Q and KV, every page size, dense and sparse;
  // fp8 KV with a bf16, fp16 or fp8 query, dense and sparse (its tiles widened in shared memory).
  for (int page : {16, 32, 64, 128}) {
    KernelSpec h = mla_spec(page % 32 ? DType::kFloat16 : DType::kBFloat16, page, page >= 64,
                            page == 128 ? feature::kSinks | feature::kReturnLse | feature::kScalePointers : 0u, "sm_90a");
    h.backend = spec::Backend::kTrtllmGen;
    specs.push_back(h);
    const DType fq = page == 16 ? DType::kFloat16 : page == 32 ? DType::kFloat8E4M3 : DType::kBFloat16;
    KernelSpec f = mla_spec(fq, page, page == 32, page == 64 ? feature::kSinks | feature::kReturnLse : 0u, "sm_90a");
    f.kv_dtype = DType::kFloat8E4M3;
    f.backend = spec::Backend::kTrtllmGen;
    specs.push_back(f);
  }
  for (const KernelSpec& s : specs) EXPECT_EQ(KernelSpec::from_name(s.name()), s) << s.name();
  const std::vector<CompileResult> results = testing::expect_compiles_without_spills(specs, "mla variants");
  for (size_t i = 0; i < specs.size(); ++i) {
    if (results[i].cubin.empty()) continue;  // reported as a compile failure above
    EXPECT_EQ(results[i].cubin.compare(0, 4, "\x7f" "ELF"), 0) << specs[i].name();
    EXPECT_GT(results[i].resources.registers, 0) << specs[i].name();
  }
}

}  // namespace
}  // namespace attnjit::compile
