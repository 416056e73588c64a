// The public prewarm API: shapes and dtypes only, no data and no GPU.
#include <gtest/gtest.h>

#include "attnjit/decode.hpp"
#include "attnjit/error.hpp"
#include "attnjit/xqa.hpp"
#include "common/temp_dir.hpp"
#include "driver/cuda_driver.hpp"
#include "runtime/kernel_registry.hpp"

namespace attnjit {
namespace {

TensorView shape_only(DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(nullptr, dtype, shape);
}

XqaArgs llama_xqa_args() {
  XqaArgs a;
  a.q = shape_only(DType::kBFloat16, {4, 1, 32, 128});
  a.k_cache = shape_only(DType::kFloat8E4M3, {64, 32, 8, 128});
  a.v_cache = shape_only(DType::kFloat8E4M3, {64, 32, 8, 128});
  a.page_table = shape_only(DType::kInt32, {4, 16});
  a.seq_lens = shape_only(DType::kUInt32, {4, 1});
  a.output = shape_only(DType::kBFloat16, {4, 1, 32, 128});
  a.num_kv_heads = 8;
  a.page_size = 32;
  return a;
}

TEST(PrewarmApiTest, XqaCompilesFromShapesAlone) {
  testing::TempDir dir("prewarm");
  RuntimeOptions o;
  o.cache_dir = dir.path();
  Runtime rt(o);
  XqaArgs a = llama_xqa_args();
  EXPECT_EQ(prewarm_xqa(a, "sm_90a", &rt), "xqa.bf16.kve4m3.hd128.g4.p32.nhd.sm90a");
  EXPECT_EQ(rt.stats().compiles, 1);
  a.sinks = shape_only(DType::kFloat32, {8, 4});
  a.sliding_win_size = 128;
  EXPECT_EQ(prewarm_xqa(a, "sm_80", &rt), "xqa.bf16.kve4m3.hd128.g4.p32.nhd.window.sinks.sm80");
  EXPECT_EQ(prewarm_xqa(a, "sm_80", &rt), "xqa.bf16.kve4m3.hd128.g4.p32.nhd.window.sinks.sm80");
  EXPECT_EQ(rt.stats().compiles, 2);  // the repeat is served from memory
}

TEST(PrewarmApiTest, StillValidatesShapes) {
  Runtime rt(RuntimeOptions{"", 0, false});
  XqaArgs a = llama_xqa_args();
  a.page_size = 24;
  try {
    prewarm_xqa(a, "sm_90a", &rt);
    FAIL() << "expected kInvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("page_size"), std::string::npos) << e.what();
  }
  a = llama_xqa_args();
  a.q = TensorView{};  // no shape at all
  EXPECT_THROW(prewarm_xqa(a, "sm_90a", &rt), Error);
}

TEST(PrewarmApiTest, SingleDecodeNeedsAnArchWithoutAGpu) {
  Runtime rt(RuntimeOptions{"", 0, false});
  auto q = shape_only(DType::kFloat16, {32, 64}), out = shape_only(DType::kFloat16, {32, 64});
  auto k = shape_only(DType::kFloat16, {1000, 8, 64}), v = shape_only(DType::kFloat16, {1000, 8, 64});
  EXPECT_EQ(prewarm_single_decode_with_kv_cache(q, k, v, out, {}, nullptr, "sm_89", &rt),
            "decode.fp16.hd64.g4.contig.nhd.sm89");
  if (driver::is_available()) GTEST_SKIP() << "a GPU is present: an empty arch means its arch";
  try {
    prewarm_single_decode_with_kv_cache(q, k, v, out, {}, nullptr, "", &rt);
    FAIL() << "expected kNoDevice";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNoDevice);
    EXPECT_NE(std::string(e.what()).find("pass arch"), std::string::npos) << e.what();
  }
}

// The same for xqa, whose prewarm also takes the device's SMs where no arch is given.
TEST(PrewarmApiTest, XqaNeedsAnArchWithoutAGpu) {
  if (driver::is_available()) GTEST_SKIP() << "a GPU is present: an empty arch means its arch";
  Runtime rt(RuntimeOptions{"", 0, false});
  try {
    prewarm_xqa(llama_xqa_args(), "", &rt);
    FAIL() << "expected kNoDevice";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNoDevice);
    EXPECT_NE(std::string(e.what()).find("pass arch"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnjit
