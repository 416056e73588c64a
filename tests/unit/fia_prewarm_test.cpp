// prewarm_fused_infer_attention_score: shapes and dtypes only, no data and no GPU.
#include <gtest/gtest.h>

#include "attnjit/error.hpp"
#include "attnjit/fia.hpp"
#include "common/op_args.hpp"
#include "common/temp_dir.hpp"
#include "driver/cuda_driver.hpp"

namespace attnjit {
namespace {

TensorView shape_only(DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(nullptr, dtype, shape);
}

TEST(FiaPrewarm, CompilesFromShapesAlone) {
  testing::TempDir dir("fia-prewarm");
  RuntimeOptions o;
  o.cache_dir = dir.path();
  Runtime rt(o);
  FiaArgs a;
  a.input_layout = "BNSD";
  a.num_heads = 32;
  a.num_key_value_heads = 8;
  a.query = shape_only(DType::kBFloat16, {1, 32, 512, 128});
  a.key = shape_only(DType::kBFloat16, {1, 8, 512, 128});
  a.value = a.key;
  a.attention_out = a.query;
  a.sparse_mode = 3;
  a.atten_mask = shape_only(DType::kUInt8, {2048, 2048});
  a.softmax_lse_flag = true;
  a.softmax_lse = shape_only(DType::kFloat32, {1, 32, 512, 1});
  EXPECT_EQ(prewarm_fused_infer_attention_score(a, "sm_90a", &rt), "prefill.bf16.hd128.g1.contig.nhd.causal.lse.trtllmgen.sm90a");
  EXPECT_EQ(rt.stats().compiles, 1);
  // Q_S = 1 with the same head dims and no mask: a kernel without the band.
  a.query = shape_only(DType::kBFloat16, {1, 32, 1, 128});
  a.attention_out = a.query;
  a.softmax_lse = shape_only(DType::kFloat32, {1, 32, 1, 1});
  a.atten_mask = {};
  EXPECT_EQ(prewarm_fused_infer_attention_score(a, "sm_90a", &rt), "prefill.bf16.hd128.g1.contig.nhd.lse.trtllmgen.sm90a");
  // Validation still runs on shapes.
  a.num_key_value_heads = 5;
  EXPECT_THROW(prewarm_fused_infer_attention_score(a, "sm_90a", &rt), Error);
}

// Without a GPU the op itself says so (kNoDevice), after nothing else happened.
TEST(FiaPrewarm, LaunchWithoutAGpuIsNoDevice) {
  if (driver::is_available()) GTEST_SKIP() << "a GPU is present";
  try {
    fused_infer_attention_score(testing::valid_fia());
    ADD_FAILURE() << "launched without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNoDevice) << e.what();
  }
}

}  // namespace
}  // namespace attnjit
