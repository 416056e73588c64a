// CPU tests for src/driver/launch_attributes: the cluster and PDL attributes cuLaunchKernelEx gets.
#include <gtest/gtest.h>

#include "common/expect_error.hpp"
#include "driver/launch_attributes.hpp"

namespace attnjit::driver {
namespace {

using attnjit::testing::expect_error;

LaunchConfig config(unsigned gx, unsigned gy, unsigned cx, unsigned cy, bool pdl) {
  LaunchConfig c;
  c.grid[0] = gx;
  c.grid[1] = gy;
  c.cluster[0] = cx;
  c.cluster[1] = cy;
  c.pdl = pdl;
  return c;
}

TEST(LaunchAttributes, PlainLaunchHasNone) {
  CUlaunchAttribute attrs[kMaxLaunchAttributes] = {};
  EXPECT_EQ(launch_attributes(LaunchConfig{}, attrs), 0);
  const LaunchConfig defaults;
  EXPECT_EQ(defaults.cluster[0] * defaults.cluster[1] * defaults.cluster[2], 1u);
}

TEST(LaunchAttributes, PdlAlone) {
  CUlaunchAttribute attrs[kMaxLaunchAttributes] = {};
  ASSERT_EQ(launch_attributes(config(8, 1, 1, 1, true), attrs), 1);
  EXPECT_EQ(attrs[0].id, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
  EXPECT_EQ(attrs[0].value.programmaticStreamSerializationAllowed, 1);
}

TEST(LaunchAttributes, ClusterAndPdlTogether) {
  CUlaunchAttribute attrs[kMaxLaunchAttributes] = {};
  ASSERT_EQ(launch_attributes(config(8, 6, 2, 3, true), attrs), 2);
  EXPECT_EQ(attrs[0].id, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
  EXPECT_EQ(attrs[0].value.clusterDim.x, 2u);
  EXPECT_EQ(attrs[0].value.clusterDim.y, 3u);
  EXPECT_EQ(attrs[0].value.clusterDim.z, 1u);
  EXPECT_EQ(attrs[1].id, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
  EXPECT_EQ(attrs[1].value.programmaticStreamSerializationAllowed, 1);
}

TEST(LaunchAttributes, ClusterWithoutPdl) {
  CUlaunchAttribute attrs[kMaxLaunchAttributes] = {};
  ASSERT_EQ(launch_attributes(config(16, 1, 16, 1, false), attrs), 1);  // non-portable 16 is allowed
  EXPECT_EQ(attrs[0].id, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
  EXPECT_EQ(attrs[0].value.clusterDim.x, 16u);
}

TEST(LaunchAttributes, BadClustersNameTheShape) {
  CUlaunchAttribute attrs[kMaxLaunchAttributes] = {};
  expect_error([&] { launch_attributes(config(8, 1, 0, 1, false), attrs); }, ErrorCode::kInvalidArgument,
               {"cluster", "at least 1", "given 0x1x1", "grid 8x1x1"});
  expect_error([&] { launch_attributes(config(3, 1, 2, 1, true), attrs); }, ErrorCode::kInvalidArgument,
               {"cluster", "divide the grid", "given 2x1x1", "grid 3x1x1"});
  expect_error([&] { launch_attributes(config(32, 4, 8, 4, false), attrs); }, ErrorCode::kInvalidArgument,
               {"cluster", "at most 16 blocks", "given 8x4x1"});
  LaunchConfig z = config(4, 1, 1, 1, false);
  z.grid[2] = 3;
  z.cluster[2] = 2;
  expect_error([&] { launch_attributes(z, attrs); }, ErrorCode::kInvalidArgument, {"divide the grid", "4x1x3"});
}

// launch() checks before it needs a driver's function, so a bad cluster is an argument error
// on a GPU machine too (there it must not reach cuLaunchKernelEx as CUDA_ERROR_INVALID_VALUE).
TEST(LaunchAttributes, LaunchRefusesABadClusterBeforeTheDriverSeesIt) {
  if (!is_available()) GTEST_SKIP() << "launch() needs a driver to get past the availability check";
  expect_error([] { launch(nullptr, config(3, 1, 2, 1, false), nullptr); }, ErrorCode::kInvalidArgument,
               {"cluster", "divide the grid"});
}

}  // namespace
}  // namespace attnjit::driver
