// CPU tests for src/driver/tensor_map: the host-side checks of TMA descriptors (no GPU needed).
#include <gtest/gtest.h>

#include <cstdint>

#include "common/expect_error.hpp"
#include "driver/cuda_driver.hpp"
#include "driver/tensor_map.hpp"

namespace attnjit::driver {
namespace {

using attnjit::testing::expect_error;

// Only the address's alignment is checked on the host: any aligned value will do.
const void* const kAddr = reinterpret_cast<const void*>(uintptr_t{0x7f0000001000});

// The device-side mirror in tests/gpu/hopper_kernels.hpp assumes this layout (CUDA 13 aligns it to 128;
// the driver needs at least 64).
static_assert(sizeof(CUtensorMap) == 128 && alignof(CUtensorMap) >= 64 && alignof(CUtensorMap) <= 128,
              "a CUtensorMap inside __grid_constant__ Params: 128 bytes, 64- to 128-byte aligned");

// A dense tensor of `rank` dims of 64 floats, with boxes of 32 x 8 x 1 ...
TiledTensorMapDesc dense(int rank) {
  TiledTensorMapDesc d;
  d.dtype = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  d.global = kAddr;
  d.rank = rank;
  uint64_t stride = 64 * 4;
  for (int i = 0; i < rank; ++i) {
    d.dims[i] = 64;
    d.box[i] = i == 0 ? 32 : i == 1 ? 8 : 1;
    if (i + 1 < rank) {
      d.strides[i] = stride;
      stride *= 64;
    }
  }
  return d;
}

TEST(TensorMap, DenseTensorsOfRank1To5Pass) {
  for (int rank = 1; rank <= 5; ++rank) EXPECT_NO_THROW(check_tensor_map(dense(rank))) << rank;
}

TEST(TensorMap, Tiled2dHelperFillsInnermostFirst) {
  const TiledTensorMapDesc d =
      tiled_2d(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, kAddr, 100, 256, 512, 16, 64, CU_TENSOR_MAP_SWIZZLE_128B);
  EXPECT_EQ(d.rank, 2);
  EXPECT_EQ(d.dims[0], 256u);
  EXPECT_EQ(d.dims[1], 100u);
  EXPECT_EQ(d.strides[0], 512u);
  EXPECT_EQ(d.box[0], 64u);
  EXPECT_EQ(d.box[1], 16u);
  EXPECT_NO_THROW(check_tensor_map(d));  // 64 bf16 = 128 B: exactly the swizzle span
}

TEST(TensorMap, DenseTiledDerivesPackedStrides) {
  const TiledTensorMapDesc d = dense_tiled(CU_TENSOR_MAP_DATA_TYPE_FLOAT16, kAddr, {128, 8, 4, 2}, {64, 8, 1, 1},
                                           CU_TENSOR_MAP_SWIZZLE_128B);
  EXPECT_EQ(d.rank, 4);
  EXPECT_EQ(d.strides[0], 256u);        // 128 halves
  EXPECT_EQ(d.strides[1], 256u * 8);    // then 8 rows
  EXPECT_EQ(d.strides[2], 256u * 8 * 4);
  EXPECT_EQ(d.box[0], 64u);
  EXPECT_EQ(d.swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
  EXPECT_NO_THROW(check_tensor_map(d));
  EXPECT_NO_THROW(check_tensor_map(dense_tiled(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, kAddr, {64, 2, 2, 2, 2}, {8, 1, 1, 1, 1})));
  expect_error([] { dense_tiled(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, kAddr, {64, 64}, {32}); }, ErrorCode::kInvalidArgument,
               {"box", "2 extents", "given 1"});
  expect_error([] { dense_tiled(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, kAddr, {2, 2, 2, 2, 2, 2}, {1, 1, 1, 1, 1, 1}); },
               ErrorCode::kInvalidArgument, {"dims", "1..5", "given 6"});
}

TEST(TensorMap, ElementSizes) {
  EXPECT_EQ(tensor_map_element_bytes(CU_TENSOR_MAP_DATA_TYPE_UINT8), 1u);
  EXPECT_EQ(tensor_map_element_bytes(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16), 2u);
  EXPECT_EQ(tensor_map_element_bytes(CU_TENSOR_MAP_DATA_TYPE_FLOAT16), 2u);
  EXPECT_EQ(tensor_map_element_bytes(CU_TENSOR_MAP_DATA_TYPE_FLOAT32), 4u);
  EXPECT_EQ(tensor_map_element_bytes(CU_TENSOR_MAP_DATA_TYPE_INT64), 8u);
  expect_error([] { tensor_map_element_bytes(CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B); }, ErrorCode::kUnsupported,
               {"dtype", "packed"});
}

TEST(TensorMap, EachRuleNamesItsField) {
  struct Case {
    const char* what;
    void (*edit)(TiledTensorMapDesc&);
    std::vector<std::string> needles;
  };
  const Case cases[] = {
      {"rank 0", [](TiledTensorMapDesc& d) { d.rank = 0; }, {"rank", "1..5", "given 0"}},
      {"rank 6", [](TiledTensorMapDesc& d) { d.rank = 6; }, {"rank", "given 6"}},
      {"interleaved rank 2", [](TiledTensorMapDesc& d) {
         d.interleave = CU_TENSOR_MAP_INTERLEAVE_16B;
         d.rank = 2;
       },
       {"rank", "3..5", "interleaved"}},
      {"null address", [](TiledTensorMapDesc& d) { d.global = nullptr; }, {"global", "aligned to 16", "0x0"}},
      {"misaligned address",
       [](TiledTensorMapDesc& d) { d.global = static_cast<const char*>(kAddr) + 8; }, {"global", "0x7f0000001008"}},
      {"zero dim", [](TiledTensorMapDesc& d) { d.dims[1] = 0; }, {"dims[1]", "1..2^32", "given 0"}},
      {"zero box", [](TiledTensorMapDesc& d) { d.box[1] = 0; }, {"box[1]", "1..256", "given 0"}},
      {"box 257", [](TiledTensorMapDesc& d) { d.box[1] = 257; }, {"box[1]", "given 257"}},
      {"element stride 9", [](TiledTensorMapDesc& d) { d.element_strides[1] = 9; }, {"element_strides[1]", "1..8"}},
      {"unaligned stride", [](TiledTensorMapDesc& d) { d.strides[0] = 260; }, {"strides[0]", "multiple of 16", "260"}},
      {"short stride", [](TiledTensorMapDesc& d) { d.strides[0] = 128; }, {"strides[0]", "at least 256", "128"}},
      {"short outer stride", [](TiledTensorMapDesc& d) { d.strides[1] = 256 * 32; },
       {"strides[1]", "at least 16384", "8192"}},
      {"odd inner box", [](TiledTensorMapDesc& d) { d.box[0] = 6; }, {"box[0]", "multiple of 16 bytes", "24 bytes"}},
      {"box past the swizzle span",
       [](TiledTensorMapDesc& d) {
         d.swizzle = CU_TENSOR_MAP_SWIZZLE_64B;
         d.box[0] = 32;
       },
       {"box[0]", "at most 64 bytes", "128 bytes"}},
      {"32B interleave without 32B swizzle",
       [](TiledTensorMapDesc& d) { d.interleave = CU_TENSOR_MAP_INTERLEAVE_32B; }, {"swizzle", "32B"}},
      {"NaN fill of integers",
       [](TiledTensorMapDesc& d) {
         d.dtype = CU_TENSOR_MAP_DATA_TYPE_INT32;
         d.oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
       },
       {"oob_fill", "integer"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    TiledTensorMapDesc d = dense(3);
    c.edit(d);
    expect_error([&] { check_tensor_map(d); }, ErrorCode::kInvalidArgument, c.needles);
  }
}

TEST(TensorMap, EncodeChecksFirstThenNeedsADriver) {
  TiledTensorMapDesc bad = dense(2);
  bad.box[0] = 0;
  expect_error([&] { encode_tensor_map_tiled(bad); }, ErrorCode::kInvalidArgument, {"box[0]"});
  if (is_available()) GTEST_SKIP() << "a CUDA driver is present: the GPU test encodes real maps";
  expect_error([] { encode_tensor_map_tiled(dense(2)); }, ErrorCode::kNoDevice, {});
}

}  // namespace
}  // namespace attnjit::driver
