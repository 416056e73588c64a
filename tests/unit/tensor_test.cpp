// TensorView's own helpers (src/util/tensor.cpp): sizes that overflow int64 never
// wrap into a plausible answer.
#include <gtest/gtest.h>

#include <cstdint>

#include "attnjit/tensor.hpp"

namespace attnjit {
namespace {

TEST(TensorView, ContiguityOfAnOverflowingShapeIsFalse) {
  // Row-major strides would be {4 * (2^62 - 1), 4, 1}: that product overflows int64
  // (found by tests/fuzz/fuzz_xqa_args under UBSan); wrapped, it is -4.
  TensorView t = TensorView::contiguous(reinterpret_cast<void*>(0x10000), DType::kFloat16, {2, 1, 4});
  t.shape[1] = INT64_MAX / 2;
  t.stride[1] = 4;
  t.stride[0] = -4;
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.numel(), INT64_MAX);  // saturates
}

TEST(TensorView, ContiguousViewsStayContiguous) {
  const TensorView t = TensorView::contiguous(reinterpret_cast<void*>(0x10000), DType::kBFloat16, {3, 1, 5, 7});
  EXPECT_TRUE(t.is_contiguous());
  TensorView huge_outer = t;
  huge_outer.shape[0] = INT64_MAX;  // only the inner strides are multiplied out
  EXPECT_TRUE(huge_outer.is_contiguous());
  TensorView gap = t;
  gap.stride[0] = 36;
  EXPECT_FALSE(gap.is_contiguous());
}

}  // namespace
}  // namespace attnjit
